"""The emulator on wall time for a harness: it waits for the cluster's changes until stopped,
and reports each cycle as it happens (``on_cycle``) with the nodes the extender rejected."""

from __future__ import annotations

import threading
import time

import pytest
from builders import cluster_objects, make_node, make_pod
from simkit import FakeExtender, only, scheduler_for

from extender.cluster.memory import MemoryCluster
from extender.sim.client import CallableTransport
from extender.sim.clocks import RealClock
from extender.sim.records import CycleRecord

ENTRY = {"urlPrefix": "http://fake.test/ext", "filterVerb": "filter", "nodeCacheCapable": True}


def test_until_stopped_waits_for_pods_that_arrive_later_and_ends_on_stop() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("a").obj(), make_node("b").obj()]))
    fake = FakeExtender("ext", [only("b")], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [(ENTRY, CallableTransport(fake))], clock=RealClock(), stop_when_settled=False)
    cycles: list[CycleRecord] = []
    scheduler.on_cycle.append(cycles.append)
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(scheduler.run(until_stopped=True).reason), daemon=True)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive() and not cycles, "nothing to do is not the end of the run"
    cluster.add_pod(make_pod("late").obj())
    deadline = time.monotonic() + 5
    while (cluster.get_pod("default", "late") or {}).get("spec", {}).get("nodeName") != "b":
        assert time.monotonic() < deadline, "the pod that arrived later was not bound"
        time.sleep(0.01)
    scheduler.stop()
    thread.join(5)
    assert not thread.is_alive() and result == ["stopped"]
    assert [(c.pod, c.outcome, c.node, c.extender_rejected) for c in cycles] == [("default/late", "scheduled", "b", 1)]


def test_until_stopped_needs_wall_time() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("a").obj()]))
    scheduler = scheduler_for(cluster, [])
    with pytest.raises(ValueError, match="RealClock"):
        scheduler.run(until_stopped=True)
