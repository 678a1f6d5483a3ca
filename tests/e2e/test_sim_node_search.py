"""How many nodes extenders see, and in which order (§4.1-§4.2 in ``extender.sim``)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from simkit import FakeExtender, scheduler_for, true_predicate

from extender.cluster.memory import MemoryCluster
from extender.sim.client import CallableTransport


@pytest.mark.parametrize("nodes, pct, expected", [
    (50, 0, 50), (99, 0, 99), (100, 0, 100), (1000, 0, 420), (2000, 0, 680), (5000, 0, 500), (10000, 0, 500),
    (1000, 30, 300), (1000, 5, 100),
])
def test_num_feasible_nodes_to_find(nodes: int, pct: int, expected: int) -> None:
    scheduler = scheduler_for(MemoryCluster(), [], percentage_of_nodes_to_score=pct)
    assert scheduler.num_feasible_nodes_to_find(nodes) == expected


def test_extenders_see_at_most_num_feasible_nodes_from_a_rotating_offset() -> None:
    """150 nodes: 100 feasible nodes are enough; the next pod starts where the last one stopped."""
    nodes = [make_node(f"n{i:03d}").obj() for i in range(150)]
    cluster = MemoryCluster(cluster_objects(nodes))
    fake = FakeExtender("ext", [true_predicate], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(fake))])
    cluster.add_pod(make_pod("a").obj())
    cluster.add_pod(make_pod("b").created("2026-01-01T00:00:01Z").obj())
    scheduler.run()
    first, second = [a["NodeNames"] for v, a in fake.calls if v == "filter"]
    assert first == [f"n{i:03d}" for i in range(100)]
    assert second == [f"n{i:03d}" for i in list(range(100, 150)) + list(range(0, 50))]


def test_node_order_interleaves_zones() -> None:
    nodes = [make_node(f"{z}{i}").labels(**{"topology.kubernetes.io/zone": z}).obj() for z in "ab" for i in range(3)]
    cluster = MemoryCluster(cluster_objects(nodes))
    fake = FakeExtender("ext", [true_predicate], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(fake))])
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    assert fake.calls[0][1]["NodeNames"] == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_in_tree_rejections_never_reach_the_extender() -> None:
    nodes = [make_node("small").alloc(cpu="1").obj(), make_node("tainted").obj(), make_node("ok").obj(),
             make_node("cordoned").obj(), make_node("other").labels(disk="hdd").obj()]
    nodes[1]["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    nodes[3]["spec"]["unschedulable"] = True
    cluster = MemoryCluster(cluster_objects(nodes))
    seen: list[Any] = []

    def handler(verb: str, args: Any) -> Any:
        seen.append(args["NodeNames"])
        return {"NodeNames": args["NodeNames"]}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(handler))])
    pod = make_pod("p").req(cpu="2").obj()
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["hdd"]}]}]}}}
    cluster.add_pod(pod)
    scheduler.run()
    assert seen == [["ok"]]
    assert scheduler.cycles[0].statuses == {
        "small": "Insufficient cpu", "tainted": "node(s) had untolerated taint {dedicated: db}",
        "cordoned": "node(s) were unschedulable", "other": "node(s) didn't match Pod's node affinity/selector"}
    assert scheduler.cycles[0].node == "ok" and scheduler.cycles[0].scores is None  # one node: no scoring
