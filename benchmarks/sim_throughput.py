#!/usr/bin/env python3
"""Emulator throughput: N managed pods through the kube-scheduler emulator and a real server over HTTP.

    python benchmarks/sim_throughput.py            # 5,000 nodes, 10,000 pods (several minutes)
    python benchmarks/sim_throughput.py --quick    # 500 nodes, 1,000 pods

The requirement: "5,000 nodes, 10,000 managed pods through the emulator over HTTP; prints pods/s
and the share of wall time spent in the extender's verbs". A script that prints figures, not a
test: exit 0 when the run produced figures, 1 when a part failed (the server did not start, say).

Set-up (``kube-extender simulate --extender URL`` semantics, see ``extender/sim/cli.py``):

1. The cluster is ``benchkit.generate_cluster`` (seeded; nodes of 0/2/4/8 ``example.com/gpu``,
   realistic labels, taints, about 1% NotReady, a few cordoned), imported, not copied. That
   generator also packs about 64% of the GPUs with running pods: 10,000 pods of 1-2 GPUs would not
   fit in the rest (about 5,500 GPUs free at 5,000 nodes), and the run would measure retries of
   unschedulable pods rather than scheduling. By default the running GPU pods are therefore left
   out (the cpu-only running pods stay); ``--keep-gpu-pods`` keeps them.
2. The workload: N pending pods, 1 GPU (65%) or 2 GPUs (35%), tolerating the GPU taint, priority
   classes batch-low / training / inference, arriving in batches of ``--batch`` every
   ``--interval`` virtual seconds (batches, so that binding cycles overlap scheduling cycles).
3. The server: ``kube-extender serve --cluster FILE --port P`` (``benchkit.Server``: gunicorn,
   one gthread worker). ``simulate --extender URL`` keeps its own copy of the cluster and mirrors
   the extender's successful binds into it (``mirror_extender_binds``); the server binds in its
   own memory cluster, which must therefore already hold the pending pods: a served memory
   cluster does not see pods the emulator creates, and its bind verb answers "pods ... not found"
   for them. So the server's cluster file holds the nodes, the running pods AND the N pending
   pods (same names and UIDs, created by ``extender.sim.workload``), while the emulator's cluster
   starts with the nodes and running pods and creates the pending pods at their arrival times.
   The only writes the emulator makes that the server cannot see are status updates (conditions)
   and preemption victims' deletions: the pods use ``preemptionPolicy: Never`` unless
   ``--allow-preemption``. (With the default configuration, ``ignoredByScheduler: true``, the
   in-tree dry run never finds victims for a GPU shortage - "expected at least one victim pod on
   node X", §13.4 of extender/sim - so no victim is deleted and the copies stay consistent;
   the preemption attempts only cost emulator time. Were a victim deleted, the server would not
   hear of it: the consistency check at the end would show it.)
4. The run: in this process, ``Scheduler`` (kube-scheduler 1.30 behaviour) over an
   ``HTTPTransport`` to the server, in **virtual time**: arrivals, backoffs and flushes cost no
   wall time, so the wall time is the work of scheduling (emulator + server), and pods/s is the
   processing throughput. In real time the arrival rate would set the figure.
5. The report: pods bound / pending, cycles, wall time, pods/s, per-verb calls with p50/p99 (times
   of the HTTP round trip, measured by the emulator's ``HTTPExtender``), the share of wall time
   inside verb calls (filter + prioritize + preempt run on the scheduling thread; bind runs on
   the binding threads, concurrently, so its share overlaps the rest and the sum can exceed
   100%), where the scheduling thread's time goes, CPU seconds of both processes, the server's
   RSS at the end, and whether the server's GPU accounting agrees with the emulator's.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from benchkit import (GPU, SEED, Server, build_workload, descendants, generate_cluster, mib, pct,  # noqa: E402
                      rss_of, write_cluster_yaml)

from extender.cli import scheduler_entry  # noqa: E402
from extender.cluster.memory import MemoryCluster  # noqa: E402
from extender.config.model import default_config  # noqa: E402
from extender.framework.resources import milli  # noqa: E402
from extender.sim import placement as sim_placement  # noqa: E402
from extender.sim.client import HTTPTransport, tls_context  # noqa: E402
from extender.sim.config import ExtenderSpec, SchedulerConfig  # noqa: E402
from extender.sim.clocks import VirtualClock  # noqa: E402
from extender.sim.scheduler import Scheduler  # noqa: E402
from extender.sim.search import NodeSearch  # noqa: E402



# ---------------------------------------------------------------------------------------------
# an instrumented Scheduler (timing only: behaviour unchanged)
# ---------------------------------------------------------------------------------------------

class TimedScheduler(Scheduler):
    """Accumulates wall time of the scheduling thread's phases and of the binding cycles."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self.n: Counter[str] = Counter()
        self._bind_lock = threading.Lock()
        self.bind_cycle_s = 0.0
        self.max_binding = 0
        super().__init__(*args, **kwargs)
        self.cache.snapshot = self._timed("snapshot", self.cache.snapshot)  # type: ignore[method-assign]

    def _timed(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.t[key] += time.perf_counter() - t0
                self.n[key] += 1
        return wrapper

    def _schedule_one(self, qp: Any) -> None:
        t0 = time.perf_counter()
        try:
            super()._schedule_one(qp)
        finally:
            self.t["cycle"] += time.perf_counter() - t0
            self.max_binding = max(self.max_binding, self._binding)

    def _find_nodes_that_fit(self, *a: Any) -> Any:
        return self._timed("find_nodes", super()._find_nodes_that_fit)(*a)

    def _extender_filters(self, *a: Any) -> Any:
        return self._timed("extender_filters", super()._extender_filters)(*a)

    def _prioritize(self, *a: Any) -> Any:
        return self._timed("prioritize", super()._prioritize)(*a)

    def _unschedulable(self, *a: Any) -> Any:
        return self._timed("unschedulable", super()._unschedulable)(*a)

    def _fail_with_error(self, *a: Any) -> Any:
        return self._timed("error", super()._fail_with_error)(*a)

    def _binding_cycle(self, *a: Any) -> None:
        t0 = time.perf_counter()
        try:
            super()._binding_cycle(*a)
        finally:
            with self._bind_lock:
                self.bind_cycle_s += time.perf_counter() - t0


class _ScoreTimer:
    """Times the in-tree Score plugins for the run: ``NodeSearch.scores`` (the columns) and
    ``extender.sim.placement.score_nodes`` (the per-node fallback)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.orig = (sim_placement.score_nodes, NodeSearch.scores)

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed

    def __enter__(self) -> _ScoreTimer:
        sim_placement.score_nodes = self._timed(self.orig[0])  # type: ignore[assignment]
        NodeSearch.scores = self._timed(self.orig[1])  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        sim_placement.score_nodes, NodeSearch.scores = self.orig  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc/<pid>/stat), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def self_rss_kb() -> tuple[int, int]:
    got = rss_of(os.getpid())
    return got.get("VmRSS", 0), got.get("VmHWM", 0)


def fetch_snapshot(port: int) -> dict[str, Any] | None:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("GET", "/debug/snapshot")
        r = c.getresponse()
        data = r.read()
        c.close()
        return json.loads(data) if r.status == 200 else None
    except (OSError, ValueError):
        return None


def compare_gpu_accounting(scheduler: Scheduler, snap: dict[str, Any] | None) -> tuple[int, int, list[str]]:
    """(nodes compared, GPUs allocated per the server, differing nodes) - the server's /debug/snapshot
    against the emulator's own cache (what ``simulate`` reports as utilization discrepancies)."""
    if not snap:
        return 0, 0, ["server /debug/snapshot unavailable"]
    server_alloc = {n["name"]: milli((n.get("allocated") or {}).get(GPU, "0")) for n in snap.get("nodes") or []}
    diffs = []
    compared = 0
    for node in scheduler.cache.nodes():
        if GPU not in node.allocatable:
            continue
        compared += 1
        ours = node.requested.get(GPU, 0)
        theirs = server_alloc.get(node.name)
        if theirs is None or theirs != ours:
            diffs.append(f"{node.name}: server {theirs if theirs is None else theirs // 1000}, "
                         f"emulator {ours // 1000}")
    return compared, sum(server_alloc.values()) // 1000, diffs


_REQUEST_LINE = re.compile(r"msg=request verb=(\w+) .*?duration_ms=([\d.]+)")


def server_handler_times(log_path: Path) -> dict[str, list[float]]:
    """Per verb, the handler durations the server logged (``duration_ms``: body read, decode, schema
    and engine; not the reply encoding, gunicorn or the socket), in seconds."""
    out: dict[str, list[float]] = defaultdict(list)
    try:
        with log_path.open(errors="replace") as f:
            for line in f:
                m = _REQUEST_LINE.search(line)
                if m:
                    out[m.group(1)].append(float(m.group(2)) / 1000)
    except OSError:
        pass
    return out


def share(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole > 0 else "  -  "


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=None, help="cluster size (default 5000; 500 with --quick)")
    p.add_argument("--pods", type=int, default=None, help="managed pods submitted (default 10000; 1000 with --quick)")
    p.add_argument("--quick", action="store_true", help="500 nodes, 1000 pods")
    p.add_argument("--batch", type=int, default=50, help="pods arriving together (default 50)")
    p.add_argument("--interval", type=float, default=0.5, help="virtual seconds between batches (default 0.5)")
    p.add_argument("--keep-gpu-pods", action="store_true",
                   help="keep the generator's running GPU pods (about 64%% of the GPUs in use): most of the "
                        "workload then stays pending and the run measures retries")
    p.add_argument("--allow-preemption", action="store_true",
                   help="pods may preempt (PreemptLowerPriority); with the default configuration the dry run "
                        "finds no victims for a GPU shortage (kube-scheduler never calls the preempt verb then), so this adds preemption attempts "
                        "only; a victim the emulator deleted would never reach the server")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (cluster YAML, server log)")
    a = p.parse_args(argv)
    n_nodes = a.nodes or (500 if a.quick else 5000)
    n_pods = a.pods or (1000 if a.quick else 10000)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    print(f"sim_throughput - machine: nproc={os.cpu_count()}, Python {platform.python_version()}, "
          f"load average {load_start:.2f}", flush=True)

    # ---- cluster and workload ---------------------------------------------------------------
    t0 = time.perf_counter()
    objects = generate_cluster(n_nodes, a.seed)
    running = objects["Pod"]
    if not a.keep_gpu_pods:
        running = [q for q in running if GPU not in q["spec"]["containers"][0]["resources"]["requests"]]
    objects["Pod"] = running
    classes = {pc["metadata"]["name"]: pc for pc in objects["PriorityClass"]}
    workload = build_workload(n_pods, a.seed, classes, max(1, a.batch), a.interval, a.allow_preemption)
    gpu_nodes = [n for n in objects["Node"] if GPU in n["status"]["allocatable"]]
    total_gpus = sum(int(n["status"]["allocatable"][GPU]) for n in gpu_nodes)
    used_gpus = sum(int(q["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0)) for q in running)
    demand = sum(int(w.pod["spec"]["containers"][0]["resources"]["requests"][GPU]) for w in workload.pods)
    print(f"  cluster: {n_nodes} nodes ({len(gpu_nodes)} with {GPU}: {total_gpus} GPUs, {used_gpus} in use), "
          f"{len(running)} running pods; workload: {n_pods} pending pods asking for {demand} GPUs, "
          f"{a.batch} every {a.interval:g} s virtual (last arrival at {workload.last_arrival:g} s); "
          f"built in {time.perf_counter() - t0:.1f} s", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="kube-extender-simbench-"))
    server: Server | None = None
    error = ""
    results: dict[str, Any] = {}
    try:
        # the server's file: nodes + running pods + the pending pods (same objects, same UIDs)
        t0 = time.perf_counter()
        cluster_file = tmp / "cluster.yaml"
        server_objects = {**objects, "Pod": running + [copy.deepcopy(w.pod) for w in workload.pods]}
        write_cluster_yaml(server_objects, cluster_file)
        del server_objects
        size_mb = cluster_file.stat().st_size / 1e6
        print(f"  cluster YAML for the server: {size_mb:.1f} MB (incl. the {n_pods} pending pods), written in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)

        server = Server(cluster_file, tmp)
        print(f"  server starting (pid {server.proc.pid}, port {server.port}); it parses the YAML twice", flush=True)
        # the emulator's own copy: nodes + running pods; the workload creates the pending pods
        cluster = MemoryCluster({"Node": objects["Node"], "Pod": running})
        del objects
        server.wait_ready(timeout=1200)
        results["ready_after"] = server.ready_after
        print(f"  server ready {server.ready_after:.1f} s after start", flush=True)

        config = default_config()
        path = urlsplit(config.extender.url_prefix).path or "/"
        url = f"http://127.0.0.1:{server.port}{path}"
        entry = scheduler_entry(config, url)
        transport = HTTPTransport(tls_context(ExtenderSpec.from_dict(entry)))
        sched_config = SchedulerConfig.from_dict({"extenders": [entry]}, transports=[transport], version="1.30",
                                                 seed=a.seed)
        scheduler = TimedScheduler(sched_config, cluster, clock=VirtualClock(), mirror_extender_binds=True)
        workload.install(scheduler, cluster)
        print(f"  emulator: kube-scheduler 1.30 behaviour, virtual time, extender at {url} "
              f"(verbs: {', '.join(k for k in ('filterVerb', 'prioritizeVerb', 'preemptVerb', 'bindVerb') if k in entry)}; "
              f"nodeCacheCapable={entry['nodeCacheCapable']})", flush=True)

        worker_pids = descendants(server.proc.pid)
        server_cpu0 = {pid: cpu_seconds(pid) for pid in [server.proc.pid] + worker_pids}
        rus0 = resource.getrusage(resource.RUSAGE_SELF)

        def progress(s: Scheduler) -> None:
            with s._cond:  # noqa: SLF001 - a consistent read of the counters
                bound = sum(1 for t in s.traces.values() if t.state == "bound")
                pending = sum(1 for t in s.traces.values() if t.state == "pending")
                cycles = len(s.cycles)
            print(f"  [{time.perf_counter() - wall0:6.1f} s wall, {s.clock.elapsed():6.1f} s virtual] "
                  f"{cycles} cycles, {bound} bound, {pending} pending", flush=True)

        print("running ...", flush=True)
        wall0 = time.perf_counter()
        with _ScoreTimer() as score_timer:
            summary = scheduler.run(progress=progress, progress_every=0, progress_seconds=15.0)
        wall = time.perf_counter() - wall0
        rus1 = resource.getrusage(resource.RUSAGE_SELF)
        server_cpu = sum(cpu_seconds(pid) - c0 for pid, c0 in server_cpu0.items())
        scheduler.close()
        transport_conns = transport.connections_opened

        results.update(wall=wall, summary=summary, scheduler=scheduler, score_s=score_timer.seconds,
                       self_cpu=(rus1.ru_utime - rus0.ru_utime) + (rus1.ru_stime - rus0.ru_stime),
                       server_cpu=server_cpu, conns=transport_conns, self_rss=self_rss_kb(),
                       server_rss={pid: rss_of(pid) for pid in server.pids()}, master=server.proc.pid)
        snap = fetch_snapshot(server.port)
        results["consistency"] = compare_gpu_accounting(scheduler, snap)
        transport.close()
    except Exception as exc:  # noqa: BLE001 - reported below
        error = f"{type(exc).__name__}: {exc}"
        print(f"  FAILED: {error}", flush=True)
    finally:
        if server is not None:
            server.stop()
            results["server_times"] = server_handler_times(server.log_path)
        if a.keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- report -------------------------------------------------------------------------------
    print()
    if "summary" not in results:
        print(f"No figures: {error.splitlines()[0] if error else 'the run did not complete'}")
        if server is not None:
            print(f"Server stopped with SIGTERM: exit code {server.exit_code}")
        return 1
    s: TimedScheduler = results["scheduler"]
    summary = results["summary"]
    wall = results["wall"]
    traces = [t for t in s.traces.values() if t.key.split("/", 1)[1].startswith("bench-")]
    states = Counter(t.state for t in traces)
    outcomes = Counter(c.outcome for c in s.cycles)
    bound = states.get("bound", 0)
    attempts = [t.attempts for t in traces]
    print(f"Cluster: {n_nodes} nodes; {n_pods} managed pods (1-2 {GPU} each, batch-low/training/inference), "
          f"preemption {'allowed' if a.allow_preemption else 'off (preemptionPolicy: Never)'}; "
          f"kube-extender serve over HTTP on 127.0.0.1; emulator in virtual time")
    print(f"Pods: {bound} bound, {states.get('pending', 0)} pending"
          + "".join(f", {n} {k}" for k, n in sorted(states.items()) if k not in ("bound", "pending")))
    print(f"Cycles: {summary.cycles} ({', '.join(f'{n} {k}' for k, n in outcomes.most_common())}); "
          f"attempts per pod: mean {sum(attempts) / max(1, len(attempts)):.2f}, max {max(attempts, default=0)}; "
          f"bind failures {summary.bind_failures}; end: {summary.reason}")
    print(f"Wall time: {wall:.1f} s for {summary.virtual_seconds:.1f} s virtual "
          f"(set-up not included: server ready after {results['ready_after']:.1f} s)")
    print(f"Throughput: {bound / wall:.1f} pods/s bound (wall), {summary.cycles / wall:.1f} cycles/s")

    samples = s.stats.snapshot()
    by_verb: dict[str, list[float]] = defaultdict(list)
    errors: Counter[str] = Counter()
    for smp in samples:
        by_verb[smp.verb].append(smp.seconds)
        if not smp.ok:
            errors[smp.verb] += 1
    print()
    print("Extender verb calls (HTTP round trip as the emulator's HTTPExtender times it; ms):")
    print(f"  {'verb':<10} {'calls':>6} {'errors':>6} {'p50':>8} {'p99':>8} {'max':>8} {'sum s':>8} {'of wall':>8}")
    verb_sum: dict[str, float] = {}
    for verb in ("filter", "prioritize", "preempt", "bind"):
        secs = by_verb.get(verb)
        if not secs:
            print(f"  {verb:<10} {0:>6}")
            continue
        verb_sum[verb] = sum(secs)
        print(f"  {verb:<10} {len(secs):>6} {errors[verb]:>6} {pct(secs, 50):>8.2f} {pct(secs, 99):>8.2f} "
              f"{max(secs) * 1000:>8.2f} {verb_sum[verb]:>8.1f} {share(verb_sum[verb], wall):>8}")
    serial = sum(verb_sum.get(v, 0.0) for v in ("filter", "prioritize", "preempt"))
    binds = verb_sum.get("bind", 0.0)
    print(f"Share of wall time inside extender verb calls: {share(serial, wall).strip()} in filter+prioritize+preempt "
          f"(scheduling thread, serial) + {share(binds, wall).strip()} in bind (binding threads, concurrent with "
          f"the rest; up to {s.max_binding} in flight) = {share(serial + binds, wall).strip()} summed")

    server_times: dict[str, list[float]] = results.get("server_times") or {}
    if server_times:
        print("Server-side handler time per verb (duration_ms from the server's request log: read, decode, engine;")
        print("  the rest of the round trip is reply encoding, gunicorn, sockets, queueing and GIL waits; ms):")
        print(f"  {'verb':<10} {'calls':>6} {'p50':>8} {'p99':>8} {'sum s':>8} {'of wall':>8} {'of round trip':>14}")
        for verb in ("filter", "prioritize", "preempt", "bind"):
            secs = server_times.get(verb)
            if not secs:
                continue
            print(f"  {verb:<10} {len(secs):>6} {pct(secs, 50):>8.2f} {pct(secs, 99):>8.2f} {sum(secs):>8.1f} "
                  f"{share(sum(secs), wall):>8} {share(sum(secs), verb_sum.get(verb, 0.0)):>14}")
    else:
        print("Server-side handler times: no request lines in the server log")

    cycle = s.t["cycle"]
    ext_filter = s.t["extender_filters"]
    in_tree_filter = s.t["find_nodes"] - ext_filter
    prio = s.t["prioritize"]
    score = results["score_s"]
    http_filter = verb_sum.get("filter", 0.0)
    http_prio = verb_sum.get("prioritize", 0.0)
    rows = [
        ("extender HTTP: filter", http_filter),
        ("extender HTTP: prioritize", http_prio),
        ("extender client: args, marshal, decode (filter+prioritize)",
         (ext_filter - http_filter) + (prio - score - http_prio)),
        ("in-tree filters (emulator, node search)", in_tree_filter),
        ("in-tree scores (emulator)", score),
        ("cache snapshot", s.t["snapshot"]),
        ("unschedulable handling (preemption dry run, status, events)", s.t["unschedulable"]),
        ("error handling", s.t["error"]),
    ]
    accounted = sum(v for _, v in rows)
    rows.append(("rest of the cycle (assume, queue, records, bind thread start)", cycle - accounted))
    rows.append(("outside cycles (arrivals, queue, waiting for binds)", wall - cycle))
    print()
    print(f"Where the scheduling thread's wall time goes ({wall:.1f} s):")
    for label, v in rows:
        print(f"  {label:<62} {v:8.1f} s {share(v, wall):>7}")
    print(f"  (bind threads: {s.bind_cycle_s:.1f} s of binding cycles summed, {binds:.1f} s of it in the bind HTTP "
          f"call; {results['conns']} TCP connections opened)")
    print(f"CPU during the run: emulator process {results['self_cpu']:.1f} s "
          f"({share(results['self_cpu'], wall).strip()} of wall), server {results['server_cpu']:.1f} s "
          f"({share(results['server_cpu'], wall).strip()} of wall); nproc={os.cpu_count()}")
    snap_rss = results["server_rss"]
    master = results["master"]
    workers = [pid for pid in snap_rss if pid != master]
    total = sum(v.get("VmRSS", 0) for v in snap_rss.values())
    print(f"Server RSS at the end: worker {mib(sum(snap_rss[pid].get('VmRSS', 0) for pid in workers))} "
          f"(peak {mib(sum(snap_rss[pid].get('VmHWM', 0) for pid in workers))}), master "
          f"{mib(snap_rss.get(master, {}).get('VmRSS', 0))}, total {mib(total)} ({len(snap_rss)} processes)")
    rss, hwm = results["self_rss"]
    print(f"Emulator (this process) RSS at the end: {mib(rss)} (peak {mib(hwm)})")
    compared, server_gpus, diffs = results["consistency"]
    if diffs:
        print(f"Consistency: server and emulator DISAGREE on GPU allocation on {len(diffs)} of {compared} GPU nodes, "
              f"e.g. {'; '.join(diffs[:3])}")
    else:
        print(f"Consistency: server and emulator agree on GPU allocation on all {compared} GPU nodes "
              f"({server_gpus} GPUs allocated per the server)")
    if server is not None:
        print(f"Server stopped with SIGTERM: exit code {server.exit_code}")
    load_end = os.getloadavg()[0]
    print(f"Load average {load_start:.2f} at start, {load_end:.2f} at end (this run's own included); "
          f"total run time {time.perf_counter() - started:.0f} s")
    if error:
        print(f"FAILED after the run: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
