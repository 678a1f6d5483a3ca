"""A stream of 1,000 pods against kube-extender in-process, 50 GPU nodes, concurrent binding
cycles (one thread per pod, as kube-scheduler does): nothing is over-allocated, whatever fits is
bound, and every pod left pending has a reason and really fits nowhere."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any, Sequence

from builders import GPU, make_node
from simkit import OurServer, scheduler_for

from extender.framework.resources import milli, pod_requests
from extender.sim.client import RawResponse, RecordingTransport
from extender.sim.report import build_report
from extender.sim.workload import parse_workload


class SlowBinds:
    """Counts concurrent bind calls and holds each a little, so that binds overlap each other
    and later filter calls (Bind(A) after Filter(B), §5.4)."""

    def __init__(self, inner: Any, hold: float = 0.002) -> None:
        self.inner = inner
        self.hold = hold
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        if not url.endswith("/bind"):
            return self.inner.post(url, body, headers, timeout)
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.hold)
            return self.inner.post(url, body, headers, timeout)
        finally:
            with self.lock:
                self.in_flight -= 1

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        return self.inner.get(url, timeout)

    def close(self) -> None:
        pass


def test_thousand_pods_on_fifty_gpu_nodes() -> None:
    rng = random.Random(42)
    nodes = [make_node(f"gpu-{i:02d}").alloc(cpu="64", memory="256Gi", gpu=rng.choice([4, 8])).labels(
        **{"topology.kubernetes.io/zone": f"zone-{i % 3}"}).obj() for i in range(50)]
    capacity = sum(int(n["status"]["allocatable"][GPU]) for n in nodes)
    entries = []
    for i in range(1000):
        gpus = rng.choices([0, 1, 2, 4], weights=[15, 50, 25, 10])[0]
        requests: dict[str, Any] = {"cpu": "500m", "memory": "1Gi"}
        if gpus:
            requests[GPU] = gpus
        entries.append({"name": f"job-{i:04d}", "namespace": "stream", "priority": rng.choice([0, 100, 1000]),
                        "requests": requests, "arrival": (i // 250) * 1.0})
    workload = parse_workload({"pods": entries}, seed=1)
    demand = sum(int(e["requests"].get(GPU, 0)) for e in entries)
    assert demand > capacity  # some must stay pending

    ours = OurServer(nodes)
    slow = SlowBinds(ours.transport)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), slow)], seed=3)
    workload.install(scheduler, ours.cluster)
    t0 = time.perf_counter()
    summary = scheduler.run()
    elapsed = time.perf_counter() - t0
    assert elapsed < 60, elapsed

    assert slow.max_in_flight > 1  # binding cycles really ran concurrently
    # Filter(B) arrives before Bind(A) (§5.4) and kube-extender reserves only at bind, so it can
    # accept B on GPUs A is about to take; its bind re-validation then refuses one of them, the
    # emulator forgets the assumed pod and requeues it with backoff (§5.3). Never over-allocated.
    refusals = [e.reply for e in ours.transport.calls("bind") if e.reply != b'{"Error":""}']
    assert len(refusals) == summary.bind_failures
    assert all(b"no longer fits pod" in r and b"Insufficient example.com/gpu" in r for r in refusals)

    # 1. no over-allocation, by the cluster's pods ...
    pods = ours.cluster.pods()
    used: dict[str, int] = defaultdict(int)
    for p in pods:
        if p["spec"].get("nodeName"):
            used[p["spec"]["nodeName"]] += pod_requests(p, [GPU]).get(GPU, 0)
    alloc = {n["metadata"]["name"]: milli(n["status"]["allocatable"][GPU]) for n in nodes}
    assert all(used[n] <= alloc[n] for n in alloc), {n: (used[n], alloc[n]) for n in alloc if used[n] > alloc[n]}
    # ... and by the extender's own accounting, which agrees with the cluster
    snap = ours.snapshot()
    assert snap["sizes"]["assumed"] == 0 if "assumed" in snap["sizes"] else True
    for node in snap["nodes"]:
        allocated = milli(node["allocated"].get(GPU, "0"))
        assert allocated <= milli(node["allocatable"][GPU])
        assert allocated == used[node["name"]]

    # 2. everything that fits is bound; the rest is pending with a reason and fits nowhere
    bound = [p for p in pods if p["spec"].get("nodeName") and p["metadata"]["namespace"] == "stream"]
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    assert len(bound) + len(pending) == 1000 and bound and pending
    free = {n: alloc[n] - used[n] for n in alloc}
    for p in pending:
        need = pod_requests(p, [GPU]).get(GPU, 0)
        assert need > max(free.values()), (p["metadata"]["name"], need)
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["reason"] == "Unschedulable"
        assert cond["message"].startswith("0/50 nodes are available: ") and "Insufficient example.com/gpu" in cond["message"]
    assert all(pod_requests(p, [GPU]).get(GPU, 0) > 0 for p in pending)  # cpu-only pods always fit

    # 3. the report agrees
    report = build_report(scheduler, summary, managed=[GPU], extender_snapshot=snap)
    assert report["summary"]["bound"] == len(bound) and report["summary"]["pending"] == len(pending)
    assert report["utilization"]["discrepancies"] == []
    assert report["utilization"]["totals"][GPU]["allocated"] == sum(used.values())
    assert sum(len(g["pods"]) for g in report["pendingReasons"]) == len(pending)
    # pods without a GPU are not of interest to the extender (§3.5): the default binder binds them
    gpu_bound = [p for p in bound if pod_requests(p, [GPU]).get(GPU, 0)]
    assert report["latency"]["bind"]["calls"] == len(gpu_bound) + len(refusals)
    by = {b["pod"]: b["boundBy"] for b in report["bound"]}
    assert all(by[f"stream/{p['metadata']['name']}"] == "DefaultBinder" for p in bound if p not in gpu_bound)
    assert isinstance(slow.inner, RecordingTransport)
