#!/usr/bin/env python3
"""Sustained load: filter + prioritize at full rate while about 1,000 binds wait in Permit.

    python benchmarks/sustained_load.py            # 2,000 nodes, 60 s of load (about 2-3 min in all)
    python benchmarks/sustained_load.py --quick    # 600 nodes, 200 waiting, 10 s (about 30 s)
    python benchmarks/sustained_load.py --seconds 300 --waiting 1500 --connections 2 --keep

A script that prints figures, not a test: exit 0 when the run had no error, 1 when it had one
(any request answered other than expected, see below) or a part failed (the server did not start).

Set-up:

1. The cluster is ``benchkit.generate_cluster`` (seeded; nodes of 0/2/4/8 ``example.com/gpu``,
   realistic labels and taints, about 1% NotReady, a few cordoned; about 2 running cpu-only pods
   per node), imported, not copied. Its running GPU pods are left out: the gang stream binds
   several thousand 1-GPU members, which the free GPUs of a packed cluster would not hold.
2. The gang stream's members are pending pods in the cluster file (a served memory cluster binds
   only pods it holds): groups of ``--group-size`` 1-GPU members labelled
   ``scheduling.x-k8s.io/pod-group`` with the ``pod-group-min-member`` annotation, priority 1000.
   Every ``--abandon-every`` seconds one more group starts that never completes: a PodGroup
   object (``minMember`` twice the members sent, ``scheduleTimeoutSeconds`` short) whose members
   all end in Permit's timeout - the failure path (Unreserve, back-off, reservation released)
   under the same load.
3. The server: ``kube-extender serve --cluster FILE --config FILE`` (``benchkit.Server``:
   gunicorn, the default gevent worker with its fast lane), the ``Gang`` plugin enabled and
   ``httpTimeout`` / ``permitTimeout`` raised so that members wait as long as their group takes
   to arrive (see the printed configuration).
4. The gang stream (this process, asyncio, one connection per bind in flight, as kube-scheduler's
   binding goroutines do): each member is filtered (500 candidate names, the same for the whole
   group: the first member plans the group, each member is narrowed to its slot) and then bound
   to the one node filter kept; the bind waits in Permit until its group is complete. ``K``
   groups fill side by side in round robin at ``--member-rate`` members/s, started at staggered
   fill levels, so that about ``K x (group size - 1) / 2`` = ``--waiting`` binds wait at every
   moment: when a group's last member arrives, its members are released together and bound, and
   the next group takes its place. The ramp (the staggered start) is sent as fast as the server
   takes it; the measurement starts once the server shows the binds waiting.
5. At the same time, for ``--seconds``: filter + prioritize of another pod (1 GPU, 500 names;
   prioritize gets the names filter kept, as kube-scheduler sends them) at the highest rate the
   machine allows: ``wrk`` (Debian's package; ``hot_path.WRK_PAIR_LUA``) on ``--connections``
   keep-alive connections, each sending filter then prioritize back to back; without wrk, a
   Python client (``http.client``) per connection in separate processes.
6. Then the groups still filling get their remaining members (the drain), every bind is answered,
   and the server is stopped with SIGTERM.

Expected outcomes (anything else counts as an error, as does any answer other than 200, a
transport error or a client timeout): a member's filter keeps exactly one node (its slot); a
member of a complete group is bound (``Error`` empty); a member of an abandoned group is denied
in Permit, either by its own timeout ("timed out waiting in Permit") or by a member of its group
that timed out ("... did not make it"); the other pod's filter answers ``Error`` empty.

Printed: requests by verb and outcome; filter and prioritize p50/p99 and throughput; the binds
waiting over time (this client's open bind requests every 0.25 s, and the server's own count
from ``/debug/queue`` every 5 s); how long a complete group took to be released and bound; the
RSS (``VmRSS`` from /proc) of the gunicorn worker and master after start-up, at the start and end
of the measurement and after the drain, with samples every 5 s; error lines in the server log.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import multiprocessing
import os
import platform
import random
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from benchkit import (GPU, GPU_TOLERATION, PATH_PREFIX, SEED, TOLERATIONS, Server, args_body,  # noqa: E402
                      generate_cluster, go_json, mib, pct, pending_pod, rss_of, write_cluster_yaml)
from hot_path import run_wrk_pairs  # noqa: E402

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MIN_MEMBER = "kube-extender.io/pod-group-min-member"
NAMESPACE = "ml"
CANDIDATES = 500
ABANDONED_MEMBERS = 20
ABANDONED_TIMEOUT_S = 10
SAMPLE_EVERY_S = 0.25
PROBE_EVERY_S = 5.0


# ---------------------------------------------------------------------------------------------
# the workload
# ---------------------------------------------------------------------------------------------

@dataclass
class Group:
    name: str
    members: list[dict[str, Any]]
    candidates: list[str]
    abandoned: bool = False
    sent: int = 0
    answered: int = 0
    last_bind_sent: float = 0.0


def make_member(rng: random.Random, group: str, i: int, size: int | None) -> dict[str, Any]:
    """A pending 1-GPU member of ``group`` as kube-scheduler sends it; ``size`` is its
    min-member annotation (None: the group's PodGroup object says)."""
    annotations = {MIN_MEMBER: str(size)} if size is not None else {}
    name = f"{group}-{i}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"{group}-{i}-{rng.getrandbits(64):016x}",
                     "creationTimestamp": "2026-03-02T10:15:03Z",
                     "labels": {"app": "trainer", GROUP_LABEL: group}, "annotations": annotations},
        "spec": {
            "containers": [{"name": "main", "image": "registry.example.com/ml/trainer:1.4",
                            "resources": {"requests": {"cpu": "2", "memory": "8Gi", GPU: "1"},
                                          "limits": {GPU: "1"}}}],
            "restartPolicy": "Never", "schedulerName": "default-scheduler",
            "tolerations": [GPU_TOLERATION] + TOLERATIONS,
            "priorityClassName": "training", "priority": 1000, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def make_groups(rng: random.Random, names: list[str], count: int, size: int, abandoned: int
                ) -> tuple[list[Group], list[Group], list[dict[str, Any]]]:
    """``count`` groups of ``size`` members that complete, ``abandoned`` groups that never do
    (``ABANDONED_MEMBERS`` sent of a PodGroup's minMember twice that), and their PodGroups."""
    complete = [Group(f"job{g:03d}", [], rng.sample(names, min(CANDIDATES, len(names)))) for g in range(count)]
    for group in complete:
        group.members = [make_member(rng, group.name, i, size) for i in range(size)]
    stuck = [Group(f"stuck{g:02d}", [], rng.sample(names, min(CANDIDATES, len(names))), abandoned=True)
             for g in range(abandoned)]
    pod_groups = []
    for group in stuck:
        group.members = [make_member(rng, group.name, i, None) for i in range(ABANDONED_MEMBERS)]
        pod_groups.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                           "metadata": {"name": group.name, "namespace": NAMESPACE},
                           "spec": {"minMember": 2 * ABANDONED_MEMBERS,
                                    "scheduleTimeoutSeconds": ABANDONED_TIMEOUT_S}})
    return complete, stuck, pod_groups


def config_yaml(http_timeout: int, permit_timeout: int) -> str:
    return f"""apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
extender: {{httpTimeout: {http_timeout}s}}
profiles:
- schedulerName: default-scheduler
  plugins: {{multiPoint: {{enabled: [{{name: Gang}}]}}}}
  pluginConfig: [{{name: Gang, args: {{permitTimeout: {permit_timeout}s}}}}]
"""


# ---------------------------------------------------------------------------------------------
# a small asyncio HTTP/1.1 client
# ---------------------------------------------------------------------------------------------

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.I)


class Http:
    """Keep-alive connections to 127.0.0.1:``port`` in a pool, one request at a time on each
    (a bind waiting in Permit holds its connection, as in kube-scheduler's client). A request
    that fails on a reused connection before any answer is sent again on a new one (the server
    may have closed an idle connection meanwhile)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Go-http-client/1.1\r\n"
                f"Content-Type: application/json\r\nAccept-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body
        for attempt in range(2):
            reused = bool(self.idle)
            if reused:
                reader, writer = self.idle.pop()
            else:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 24)
            try:
                writer.write(head)
                answer = await reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()
                if reused and attempt == 0:
                    continue
                raise
            try:
                m = _CONTENT_LENGTH.search(answer)
                data = await reader.readexactly(int(m.group(1))) if m else b""
            except BaseException:
                writer.close()
                raise
            if _CLOSE.search(answer):
                writer.close()
            else:
                self.idle.append((reader, writer))
            return int(answer[9:12]), data
        raise AssertionError("unreachable")

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------

@dataclass
class Stats:
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: dict[tuple[str, str], str] = field(default_factory=dict)
    measuring: bool = False
    """During the load: the times below are taken only then (not in the ramp or the drain)."""
    member_filter_s: list[float] = field(default_factory=list)
    bind_wait_s: list[float] = field(default_factory=list)
    release_s: list[float] = field(default_factory=list)
    open_binds: int = 0
    waiting: list[tuple[float, int]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    groups_completed: int = 0
    groups_abandoned: int = 0
    ran_out: bool = False

    def count(self, verb: str, outcome: str, example: str = "") -> None:
        self.outcomes[(verb, outcome)] += 1
        if example and (verb, outcome) not in self.examples:
            self.examples[(verb, outcome)] = example[:300]


EXPECTED = {("member filter", "one node"), ("bind", "bound"), ("bind", "abandoned: timed out"),
            ("bind", "abandoned: rejected with its group"), ("hot filter", "ok"), ("hot prioritize", "ok"),
            ("debug/queue", "ok")}


class Load:
    """The gang stream and the probes, on one asyncio loop."""

    def __init__(self, server: Server, groups: list[Group], stuck: list[Group], slots: int,
                 bind_timeout: float) -> None:
        self.server = server
        self.http = Http(server.port)
        self.queue = list(groups)
        self.stuck = list(stuck)
        self.slots: list[Group | None] = [self._next_group() for _ in range(slots)]
        self.bind_timeout = bind_timeout
        self.stats = Stats()
        self.filters = asyncio.Semaphore(8)  # members being filtered at once (the ramp, the drain)
        self.tasks: set[asyncio.Task[None]] = set()
        self.t0 = time.monotonic()

    def _next_group(self) -> Group | None:
        return self.queue.pop(0) if self.queue else None

    def spawn(self, group: Group) -> None:
        """Send ``group``'s next member: filter, then bind to the node filter kept."""
        pod = group.members[group.sent]
        group.sent += 1
        task = asyncio.create_task(self._member(group, pod, last=group.sent == len(group.members)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _member(self, group: Group, pod: dict[str, Any], last: bool) -> None:
        st = self.stats
        meta = pod["metadata"]
        async with self.filters:
            t = time.monotonic()
            try:
                status, data = await asyncio.wait_for(
                    self.http.call("POST", f"{PATH_PREFIX}/filter", args_body(pod, group.candidates)), 60)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                st.count("member filter", "transport error", repr(exc))
                return
            if st.measuring:
                st.member_filter_s.append(time.monotonic() - t)
        try:
            reply = json.loads(data) if status == 200 else {}
        except ValueError:
            reply = {"Error": "the answer is not JSON"}
        names = reply.get("NodeNames") or []
        if status != 200 or reply.get("Error") or len(names) != 1:
            st.count("member filter", f"HTTP {status}" if status != 200 else
                     ("Error set" if reply.get("Error") else f"{len(names)} nodes"), data.decode(errors="replace"))
            return
        st.count("member filter", "one node")
        body = go_json({"PodName": meta["name"], "PodNamespace": NAMESPACE, "PodUID": meta["uid"], "Node": names[0]})
        st.open_binds += 1
        t = time.monotonic()
        if last:
            group.last_bind_sent = t
        try:
            status, data = await asyncio.wait_for(self.http.call("POST", f"{PATH_PREFIX}/bind", body),
                                                  self.bind_timeout)
            error = json.loads(data).get("Error", "?") if status == 200 else None
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            status, data, error = 0, repr(exc).encode(), None
        finally:
            st.open_binds -= 1
        done = time.monotonic()
        group.answered += 1
        if error is None:
            st.count("bind", f"HTTP {status}" if status else "transport error", data.decode(errors="replace"))
        elif not group.abandoned:
            st.count("bind", "bound" if error == "" else "unexpected Error", error)
            if st.measuring:
                st.bind_wait_s.append(done - t)
            if group.answered == len(group.members):
                st.groups_completed += 1
                if st.measuring:
                    st.release_s.append(done - group.last_bind_sent)
        elif "timed out waiting in Permit" in error:
            st.count("bind", "abandoned: timed out", error)
        elif "did not make it" in error:
            st.count("bind", "abandoned: rejected with its group", error)
        else:
            st.count("bind", "abandoned: unexpected", error or "bound")
        if group.abandoned and group.answered == len(group.members):
            st.groups_abandoned += 1

    # ---- phases ------------------------------------------------------------------------------

    async def ramp(self, group_size: int) -> int:
        """Fill the slots to their staggered levels (slot j: j x size / K members), as fast as
        the server takes it; returns how many binds were sent."""
        k = len(self.slots)
        levels = [j * group_size // k for j in range(k)]
        for i in range(max(levels, default=0)):
            for j, group in enumerate(self.slots):
                if group is not None and i < levels[j]:
                    self.spawn(group)
        return sum(levels)

    async def wait_waiting(self, target: int, timeout: float) -> int:
        """Until the server shows ``target`` binds waiting in Permit (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            probe = await self.probe(record=False)
            seen = probe.get("waiting", 0)
            if seen >= target:
                break
            await asyncio.sleep(0.5)
        return seen

    async def stream(self, rate: float, stop: asyncio.Event, abandon_every: float) -> None:
        """Members at ``rate``/s in round robin over the slots until ``stop``; an abandoned group
        every ``abandon_every`` s (0: none)."""
        period = 1.0 / rate
        due = time.monotonic()
        turn = 0
        next_stuck = time.monotonic() + abandon_every / 2 if abandon_every else math.inf
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_stuck:
                next_stuck += abandon_every
                if self.stuck:
                    task = asyncio.create_task(self._abandoned(self.stuck.pop(0)))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
            if now < due:
                await asyncio.sleep(min(due - now, 0.05))
                continue
            due += period
            for _ in range(len(self.slots)):
                j = turn % len(self.slots)
                turn += 1
                group = self.slots[j]
                if group is None:
                    continue
                self.spawn(group)
                if group.sent == len(group.members):
                    self.slots[j] = self._next_group()
                    if self.slots[j] is None:
                        self.stats.ran_out = True
                break

    async def _abandoned(self, group: Group) -> None:
        for _ in group.members:
            self.spawn(group)
            await asyncio.sleep(0.1)

    async def drain(self, timeout: float) -> int:
        """Send the rest of every group still filling; wait for every answer. Returns how many
        member tasks were still unanswered after ``timeout``."""
        for group in self.slots:
            while group is not None and group.sent < len(group.members):
                self.spawn(group)
        self.slots = []
        deadline = time.monotonic() + timeout
        while self.tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self.tasks), timeout=max(0.1, deadline - time.monotonic()))
        left = len(self.tasks)
        for task in list(self.tasks):
            task.cancel()
        return left

    async def sample(self, stop: asyncio.Event) -> None:
        """The open binds every SAMPLE_EVERY_S, a probe every PROBE_EVERY_S, until ``stop``."""
        next_probe = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            self.stats.waiting.append((now - self.t0, self.stats.open_binds))
            if now >= next_probe:
                next_probe += PROBE_EVERY_S
                await self.probe()
            try:
                await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)
            except asyncio.TimeoutError:
                pass

    async def probe(self, record: bool = True) -> dict[str, Any]:
        """``/debug/queue`` (binds waiting in Permit, reservations) and the server's RSS."""
        out: dict[str, Any] = {"t": time.monotonic() - self.t0, "open": self.stats.open_binds}
        t = time.monotonic()
        try:
            status, data = await asyncio.wait_for(self.http.call("GET", "/debug/queue"), 30)
            out["queue_ms"] = (time.monotonic() - t) * 1000
            if status == 200:
                queue = json.loads(data)
                out["waiting"] = len(queue["waitingInPermit"])
                out["reserved"] = len(queue["reserved"])
            if record:
                self.stats.count("debug/queue", "ok" if status == 200 else f"HTTP {status}")
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, KeyError) as exc:
            if record:
                self.stats.count("debug/queue", "transport error", repr(exc))
        out.update(server_rss(self.server))
        if record:
            self.stats.probes.append(out)
        return out


def server_rss(server: Server) -> dict[str, int]:
    """VmRSS in kB of the gunicorn master and of its worker(s)."""
    pids = server.pids()
    master = server.proc.pid
    return {"master_kb": rss_of(master).get("VmRSS", 0),
            "worker_kb": sum(rss_of(pid).get("VmRSS", 0) for pid in pids if pid != master)}


# ---------------------------------------------------------------------------------------------
# the hot path: wrk, or Python clients in separate processes
# ---------------------------------------------------------------------------------------------

@dataclass
class HotPath:
    client: str
    pairs: list[tuple[float, float, float]] = field(default_factory=list)
    bad_filter: int = 0
    bad_prio: int = 0
    problem: str = ""
    seconds: float = 0.0


def python_pairs(port: int, fbody: bytes, pbody: bytes, seconds: float
                 ) -> tuple[list[tuple[float, float, float]], int, int, float]:
    """Filter then prioritize on one keep-alive connection for ``seconds`` (in a child process):
    the pairs' times, the bad filter and prioritize answers, the seconds it ran."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}
    pairs: list[tuple[float, float, float]] = []
    bad_f = bad_p = 0
    perf = time.perf_counter
    start = perf()
    end = start + seconds
    while perf() < end:
        t0 = perf()
        conn.request("POST", f"{PATH_PREFIX}/filter", body=fbody, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        t1 = perf()
        if resp.status != 200 or b'"Error":""' not in data:
            bad_f += 1
        conn.request("POST", f"{PATH_PREFIX}/prioritize", body=pbody, headers=headers)
        resp = conn.getresponse()
        resp.read()
        t2 = perf()
        if resp.status != 200:
            bad_p += 1
        pairs.append((t1 - t0, t2 - t1, t2 - t0))
    conn.close()
    return pairs, bad_f, bad_p, perf() - start


def run_hot_path(port: int, tmp: Path, bodies: tuple[bytes, bytes], seconds: float, connections: int,
                 use_wrk: bool) -> HotPath:
    if use_wrk and shutil.which("wrk"):
        out = HotPath(f"wrk, {connections} connections", seconds=seconds)
        run = run_wrk_pairs(port, tmp, bodies, seconds, connections)
        if isinstance(run, str):
            out.problem = run
        else:
            out.pairs, out.bad_filter, out.bad_prio = run.samples, run.bad_filter, run.bad_prio
            out.problem = run.problem()
    else:
        out = HotPath(f"Python http.client, {connections} connections (processes)")
        try:
            with ProcessPoolExecutor(connections, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(python_pairs, port, *bodies, seconds) for _ in range(connections)]
                for f in futures:
                    pairs, bad_f, bad_p, ran = f.result()
                    out.pairs += pairs
                    out.bad_filter += bad_f
                    out.bad_prio += bad_p
                    out.seconds = max(out.seconds, ran)
        except Exception as exc:  # noqa: BLE001 - reported
            out.problem = f"{type(exc).__name__}: {exc}"[:300]
    return out


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

@dataclass
class Result:
    stats: Stats
    hot: HotPath | None
    baseline: HotPath | None
    rss: dict[str, dict[str, int]]
    ramp_sent: int
    ramp_seen: int
    ramp_s: float
    unanswered: int
    final_queue: dict[str, Any]
    windows: dict[str, tuple[float, float]]
    """Wall-clock (start, end) of the baseline and of the load, to read the server log by."""


async def run_load(a: argparse.Namespace, server: Server, tmp: Path, groups: list[Group], stuck: list[Group],
                   slots: int, bodies: tuple[bytes, bytes], bind_timeout: float) -> Result:
    load = Load(server, groups, stuck, slots, bind_timeout)
    rss = {"ready": server_rss(server)}
    loop = asyncio.get_running_loop()
    baseline = None
    windows = {}
    if a.baseline_seconds:
        print(f"  baseline: filter + prioritize for {a.baseline_seconds:g} s with nothing waiting ...", flush=True)
        start = time.time()
        baseline = await loop.run_in_executor(None, run_hot_path, server.port, tmp, bodies, a.baseline_seconds,
                                              a.connections, not a.no_wrk)
        windows["baseline"] = (start, time.time())
    t = time.monotonic()
    sent = await load.ramp(a.group_size)
    print(f"  ramp: {sent} members sent in {len(load.slots)} groups; waiting for the server to hold them ...",
          flush=True)
    seen = await load.wait_waiting(sent, timeout=120)
    ramp_s = time.monotonic() - t
    print(f"  ramp done in {ramp_s:.1f} s: {seen} binds waiting in Permit; {a.seconds:g} s of load ...", flush=True)
    rss["start"] = server_rss(server)
    load.t0 = time.monotonic()
    load.stats.measuring = True
    start = time.time()
    stop = asyncio.Event()
    sampler = asyncio.create_task(load.sample(stop))
    streamer = asyncio.create_task(load.stream(a.member_rate, stop, a.abandon_every))
    hot = await loop.run_in_executor(None, run_hot_path, server.port, tmp, bodies, a.seconds, a.connections,
                                     not a.no_wrk)
    stop.set()
    load.stats.measuring = False
    windows["load"] = (start, time.time())
    await asyncio.gather(sampler, streamer)
    rss["end"] = server_rss(server)
    print(f"  load done ({hot.client}); drain: completing the groups still filling ...", flush=True)
    unanswered = await load.drain(bind_timeout + 30)
    final = await load.probe(record=False)
    rss["drained"] = server_rss(server)
    load.http.close()
    return Result(load.stats, hot, baseline, rss, sent, seen, ramp_s, unanswered, final, windows)


_REQUEST_LINE = re.compile(r"^ts=(\S+)Z .*? msg=request verb=(\w+) pod=(\S+) .*?duration_ms=([\d.]+)", re.M)


def handler_ms(log: str, hot_pod: str, since: float, until: float) -> dict[str, list[float]]:
    """The server's own time per request (its request log's ``duration_ms``: decode, engine,
    encode - not the wait for the worker nor the network) between ``since`` and ``until`` (wall
    clock), by kind: hot filter, hot prioritize, member filter."""
    out: dict[str, list[float]] = defaultdict(list)
    for ts, verb, pod, duration in _REQUEST_LINE.findall(log):
        if verb not in ("filter", "prioritize"):
            continue
        at = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
        if since <= at <= until:
            out[f"{'hot' if pod == hot_pod else 'member'} {verb}"].append(float(duration) / 1000)
    return out


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q):.2f}" if values else "-"


def report(a: argparse.Namespace, r: Result, slots: int, log: str, hot_pod: str) -> bool:
    """Print the figures; True when the run had no error."""
    st = r.stats
    ok = True
    print()
    print("Requests by verb and outcome (expected outcomes marked ok; anything else is an error):")
    hot = r.hot
    rows = sorted(st.outcomes.items())
    if hot is not None:
        n = len(hot.pairs)
        rows += [(("hot filter", "ok"), n - hot.bad_filter), (("hot prioritize", "ok"), n - hot.bad_prio)]
        if hot.bad_filter:
            rows.append((("hot filter", "bad answer (not 200, or Error set)"), hot.bad_filter))
        if hot.bad_prio:
            rows.append((("hot prioritize", "bad answer (not 200)"), hot.bad_prio))
    for (verb, outcome), count in rows:
        expected = (verb, outcome) in EXPECTED
        ok = ok and (expected or count == 0)
        example = st.examples.get((verb, outcome), "")
        print(f"  {verb:<15} {outcome:<36} {count:>8}  {'ok' if expected else 'ERROR'}"
              + (f"  e.g. {example}" if example and not expected else ""))
    if hot is not None and hot.problem:
        ok = False
        print(f"  hot path: {hot.problem}")
    if r.unanswered:
        ok = False
        print(f"  {r.unanswered} members were still unanswered at the end of the drain: ERROR")
    if st.ran_out:
        print("  (the stream ran out of pre-generated groups: raise the margin or lower --member-rate)")
    base = r.baseline
    if base is not None and (base.problem or base.bad_filter or base.bad_prio):
        ok = False
        print(f"  baseline hot path: {base.problem or 'bad answers'}: ERROR")
    print()
    if hot is not None and hot.pairs:
        print(f"Hot path ({hot.client}; the other pod asks for 1 {GPU}, {CANDIDATES} names; prioritize gets "
              f"the names filter kept), ms:")
        print(f"  {'':<34} {'pairs/s':>8} | {'filter p50':>10} {'p99':>7} {'max':>7} | "
              f"{'prio p50':>8} {'p99':>7} {'max':>7} | {'pair p50':>8} {'p99':>7}")
        for label, run in (("baseline: nothing waiting", base), (f"load: ~{a.waiting} binds waiting", hot)):
            if run is None or not run.pairs:
                continue
            f, pr, pair = ([x[i] for x in run.pairs] for i in range(3))
            print(f"  {label + f' ({run.seconds:.0f} s)':<34} {len(pair) / run.seconds:>8.0f} | "
                  f"{statistics.median(f) * 1000:>10.2f} {ms(f, 99):>7} {max(f) * 1000:>7.1f} | "
                  f"{statistics.median(pr) * 1000:>8.2f} {ms(pr, 99):>7} {max(pr) * 1000:>7.1f} | "
                  f"{statistics.median(pair) * 1000:>8.2f} {ms(pair, 99):>7}")
        print(f"  throughput under load: {2 * len(hot.pairs) / hot.seconds:.0f} requests/s (filter + prioritize)")
        print("  the server's own time per request (request log duration_ms: not the wait for the worker), ms:")
        for label in ("baseline", "load"):
            if label not in r.windows:
                continue
            times = handler_ms(log, hot_pod, *r.windows[label])
            print(f"    {label:<9}" + "; ".join(
                f"{kind} p50 {statistics.median(v) * 1000:.2f} p99 {ms(v, 99)} (n={len(v)})"
                for kind, v in sorted(times.items())))
    waits = [w for _, w in st.waiting]
    if waits:
        print(f"Binds waiting (this client's open bind requests, every {SAMPLE_EVERY_S:g} s over the "
              f"{a.seconds:g} s): min {min(waits)}, mean {statistics.mean(waits):.0f}, max {max(waits)} "
              f"(target {a.waiting}: {slots} groups of {a.group_size} filling side by side)")
    server_counts = [pr["waiting"] for pr in st.probes if "waiting" in pr]
    if server_counts:
        qms = [pr["queue_ms"] for pr in st.probes if "queue_ms" in pr]
        print(f"Binds waiting in Permit (the server's /debug/queue, every {PROBE_EVERY_S:g} s): min "
              f"{min(server_counts)}, mean {statistics.mean(server_counts):.0f}, max {max(server_counts)}; "
              f"/debug/queue answered in {statistics.median(qms):.0f} ms (median), {max(qms):.0f} ms (max)")
    print(f"Gang stream: {a.member_rate:g} members/s; ramp: {r.ramp_sent} members, {r.ramp_seen} seen waiting "
          f"after {r.ramp_s:.1f} s; {st.groups_completed} groups of {a.group_size} completed and bound, "
          f"{st.groups_abandoned} abandoned groups of {ABANDONED_MEMBERS} denied")
    if st.member_filter_s:
        print(f"  during the load, member filter ms: p50 {statistics.median(st.member_filter_s) * 1000:.2f}, "
              f"p99 {ms(st.member_filter_s, 99)} (this asyncio client's round trip, n={len(st.member_filter_s)})")
    if st.bind_wait_s:
        print(f"  during the load, a complete group's member bind answered after (s): "
              f"p50 {statistics.median(st.bind_wait_s):.1f}, max {max(st.bind_wait_s):.1f}")
    if st.release_s:
        print(f"  during the load, a group released: last member's bind sent -> every member's bind answered, "
              f"ms: p50 {statistics.median(st.release_s) * 1000:.0f}, max {max(st.release_s) * 1000:.0f} "
              f"({len(st.release_s)} groups)")
    print()
    print("Server RSS (VmRSS, /proc):")
    for when, label in (("ready", "after start-up (idle)"), ("start", "start of the load (binds waiting)"),
                        ("end", "end of the load"), ("drained", "after the drain (nothing waiting)")):
        if when in r.rss:
            rss = r.rss[when]
            print(f"  {label:<34} worker {mib(rss['worker_kb']):>10}, master {mib(rss['master_kb']):>10}")
    if st.probes:
        print("  during the load (t s: worker / waiting in Permit): " + ", ".join(
            f"{pr['t']:.0f}: {pr['worker_kb'] / 1024:.0f} MiB / {pr.get('waiting', '?')}" for pr in st.probes))
    print(f"After the drain: {r.final_queue.get('waiting', '?')} binds waiting in Permit, "
          f"{r.final_queue.get('reserved', '?')} reservations held")
    if r.final_queue.get("waiting") or r.final_queue.get("reserved"):
        ok = False
        print("  ERROR: the server still holds waits or reservations after every bind was answered")
    log_errors = [line for line in log.splitlines()
                  if "level=error" in line or "Traceback" in line or "[ERROR]" in line]
    if log_errors:
        ok = False
        print(f"Server log: {len(log_errors)} error lines, e.g. {log_errors[0][:300]}")
    else:
        print("Server log: no error lines")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=None, help="cluster size (default 2000; 600 with --quick)")
    p.add_argument("--seconds", type=float, default=None, help="length of the load (default 60; 10 with --quick)")
    p.add_argument("--waiting", type=int, default=None, help="binds waiting in Permit (default 1000; 200 with --quick)")
    p.add_argument("--group-size", type=int, default=None, help="members per group (default 100; 40 with --quick)")
    p.add_argument("--member-rate", type=float, default=None,
                   help="gang members sent per second during the load (default 40; 20 with --quick)")
    p.add_argument("--abandon-every", type=float, default=15.0,
                   help=f"seconds between abandoned groups ({ABANDONED_MEMBERS} members that time out; 0: none)")
    p.add_argument("--baseline-seconds", type=float, default=None,
                   help="filter + prioritize with nothing waiting first, for comparison (default 10; 5 with "
                        "--quick; 0: none)")
    p.add_argument("--connections", type=int, default=2,
                   help="keep-alive connections (one wrk thread each) for filter + prioritize (default 2)")
    p.add_argument("--no-wrk", action="store_true", help="drive filter + prioritize with Python clients")
    p.add_argument("--quick", action="store_true", help="smoke run: 600 nodes, 200 waiting, 10 s")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (cluster, config, server log)")
    a = p.parse_args(argv)
    a.nodes = a.nodes or (600 if a.quick else 2000)
    a.seconds = a.seconds or (10.0 if a.quick else 60.0)
    a.waiting = a.waiting or (200 if a.quick else 1000)
    a.group_size = a.group_size or (40 if a.quick else 100)
    a.member_rate = a.member_rate or (20.0 if a.quick else 40.0)
    if a.baseline_seconds is None:
        a.baseline_seconds = 5.0 if a.quick else 10.0
    if a.group_size < 2 or a.waiting < a.group_size // 2 or a.member_rate <= 0 or a.connections < 1:
        p.error("need --group-size >= 2, --waiting >= half a group, --member-rate > 0, --connections >= 1")

    # every bind in flight holds a socket here and in the server (which inherits the limit)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    print(f"sustained_load - machine: nproc={os.cpu_count()}, Python {platform.python_version()}, "
          f"wrk {'on PATH' if shutil.which('wrk') else 'absent'}; load average {load_start:.2f}", flush=True)

    slots = max(1, round(2 * a.waiting / (a.group_size - 1)))
    fill_s = a.group_size * slots / a.member_rate
    permit_timeout = max(60, math.ceil(3 * fill_s))
    http_timeout = permit_timeout + 10
    n_groups = slots + math.ceil(a.member_rate * a.seconds * 1.2 / a.group_size) + 2
    n_stuck = int(a.seconds // a.abandon_every) + 1 if a.abandon_every else 0

    rng = random.Random(a.seed)
    objects = generate_cluster(a.nodes, a.seed)
    objects["Pod"] = [q for q in objects["Pod"] if GPU not in q["spec"]["containers"][0]["resources"]["requests"]]
    names = [n["metadata"]["name"] for n in objects["Node"]]
    groups, stuck, pod_groups = make_groups(rng, names, n_groups, a.group_size, n_stuck)
    members = [m for g in groups + stuck for m in g.members]
    objects["Pod"] += members
    objects["PodGroup"] = pod_groups
    gpus = sum(int(n["status"]["allocatable"].get(GPU, 0)) for n in objects["Node"])
    print(f"  cluster: {a.nodes} nodes, {gpus} GPUs (no running GPU pods), "
          f"{len(objects['Pod']) - len(members)} running cpu-only pods; {len(members)} pending members in "
          f"{len(groups)} groups of {a.group_size} + {len(stuck)} abandoned groups of {ABANDONED_MEMBERS}", flush=True)
    bound = (slots + math.ceil(a.member_rate * a.seconds / a.group_size)) * a.group_size
    if bound > 0.8 * gpus:
        print(f"  WARNING: about {bound} members will be bound, of {gpus} GPUs: late groups may not fit "
              "(raise --nodes)", flush=True)
    print(f"  gang stream: {slots} groups filling side by side at {a.member_rate:g} members/s: each fills in "
          f"~{fill_s:.0f} s; Gang permitTimeout {permit_timeout}s, httpTimeout {http_timeout}s", flush=True)

    hot_pod = pending_pod()
    tmp = Path(tempfile.mkdtemp(prefix="kube-extender-load-"))
    server: Server | None = None
    failed = ""
    result: Result | None = None
    try:
        cluster_file, config_file = tmp / "cluster.yaml", tmp / "config.yaml"
        write_cluster_yaml(objects, cluster_file)
        config_file.write_text(config_yaml(http_timeout, permit_timeout))
        del objects
        server = Server(cluster_file, tmp, config_file)
        server.wait_ready(timeout=600)
        print(f"  server ready on 127.0.0.1:{server.port} after {server.ready_after:.1f} s "
              f"({cluster_file.stat().st_size / 1e6:.1f} MB cluster YAML)", flush=True)
        hot_names = random.Random(a.seed + 1).sample(names, min(CANDIDATES, len(names)))
        fbody = args_body(hot_pod, hot_names)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request("POST", f"{PATH_PREFIX}/filter", body=fbody, headers={"Content-Type": "application/json"})
        kept = json.loads(conn.getresponse().read())["NodeNames"] or []
        conn.close()
        print(f"  hot path: the other pod's filter keeps {len(kept)} of {len(hot_names)} names (before the load)",
              flush=True)
        result = asyncio.run(run_load(a, server, tmp, groups, stuck, slots, (fbody, args_body(hot_pod, kept)),
                                      float(http_timeout)))
    except (RuntimeError, OSError, ValueError, KeyError) as exc:
        failed = f"{type(exc).__name__}: {exc}"
        print(f"  FAILED: {failed}", flush=True)
    finally:
        if server is not None:
            server.stop()
        log = server.log_tail(1 << 30) if server else ""
        if a.keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    ok = not failed
    if result is not None:
        ok = report(a, result, slots, log, f"{hot_pod['metadata']['namespace']}/{hot_pod['metadata']['name']}") and ok
    if server is not None:
        print(f"Server stopped with SIGTERM: exit code {server.exit_code}")
        ok = ok and server.exit_code == 0
    print(f"Machine load average: {load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end (this run's own "
          f"included); total run time {time.perf_counter() - started:.0f} s")
    print("Result: " + ("no errors" if ok else "ERRORS (see above): exit status 1"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
