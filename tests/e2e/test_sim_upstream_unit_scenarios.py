"""Upstream's extender unit scenarios (§8.2 in ``extender.sim``), each run twice: the fake
extenders called in-process (callable transport) and behind a real HTTP server (sockets,
Go-shaped JSON both ways).

``TestSchedulerWithExtenders`` cases 1-11 (two nodes unless noted), ``TestSchedulerBinding``
and the prioritize-error case with two nodes (so that prioritize is really called).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
from builders import cluster_objects, make_node, make_pod
from simkit import (FakeExtender, HttpExtenderServer, error_predicate, error_prioritizer, false_predicate, favour,
                    only, scheduler_for, true_predicate)

from extender.cluster.memory import MemoryCluster
from extender.sim.client import CallableTransport


@dataclass
class Ext:
    """One extender of a case: the fake, plus scheduler-side settings."""

    fake: FakeExtender
    weight: int = 1
    filter: bool = True
    prioritize: bool = True
    bind: bool = False
    ignorable: bool = False
    managed: list[str] = field(default_factory=list)

    def entry(self, url: str) -> dict[str, Any]:
        e: dict[str, Any] = {"urlPrefix": url, "weight": self.weight, "ignorable": self.ignorable,
                             "nodeCacheCapable": self.fake.node_cache_capable}
        if self.filter:
            e["filterVerb"] = "filter"
        if self.prioritize:
            e["prioritizeVerb"] = "prioritize"
        if self.bind:
            e["bindVerb"] = "bind"
        if self.managed:
            e["managedResources"] = [{"name": m, "ignoredByScheduler": True} for m in self.managed]
        return e


@pytest.fixture(params=["callable", "http"])
def connect(request: pytest.FixtureRequest) -> Iterator[Callable[[Ext], tuple[dict[str, Any], Any]]]:
    servers: list[HttpExtenderServer] = []

    def make(ext: Ext) -> tuple[dict[str, Any], Any]:
        if request.param == "callable":
            return ext.entry(f"http://{ext.fake.name}.test/ext"), CallableTransport(ext.fake)
        server = HttpExtenderServer(ext.fake)
        servers.append(server)
        return ext.entry(server.url), None

    yield make
    for s in servers:
        s.close()


def run_case(connect: Any, exts: list[Ext], *, nodes: list[dict[str, Any]] | None = None, pod: Any = None,
             **config: Any) -> tuple[Any, MemoryCluster, Any]:
    nodes = nodes if nodes is not None else [make_node("node1").obj(), make_node("node2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes))
    config.setdefault("max_virtual_seconds", 2.0)
    scheduler = scheduler_for(cluster, [connect(e) for e in exts], **config)
    cluster.add_pod(pod or make_pod("pod").obj())
    scheduler.run()
    return scheduler, cluster, scheduler.cycles[0]


def node_of(cluster: MemoryCluster) -> str | None:
    pod = cluster.get_pod("default", "pod")
    assert pod is not None
    return pod["spec"].get("nodeName")


def test_1_error_filter_is_a_scheduling_error(connect: Any) -> None:
    ok, bad = FakeExtender("ok", [true_predicate]), FakeExtender("bad", [error_predicate])
    scheduler, cluster, first = run_case(connect, [Ext(ok), Ext(bad)])
    assert first.outcome == "error" and "some error" in first.message
    assert first.preemption is None  # an Error never reaches PostFilter
    assert node_of(cluster) is None
    assert {c.outcome for c in scheduler.cycles} == {"error"} and len(scheduler.cycles) >= 2  # backoffQ retries
    pod = cluster.get_pod("default", "pod")
    cond = pod["status"]["conditions"][-1]
    assert cond["reason"] == "SchedulerError" and "some error" in cond["message"]


def test_2_false_filter_makes_the_pod_unschedulable(connect: Any) -> None:
    scheduler, cluster, first = run_case(connect, [Ext(FakeExtender("ok", [true_predicate])),
                                                   Ext(FakeExtender("no", [false_predicate]))])
    assert first.outcome == "unschedulable" and node_of(cluster) is None
    assert first.message.startswith("0/2 nodes are available: 2 extender failed: no.")
    assert scheduler.pending()[0].unschedulable_plugins == {"Extender"}


def test_3_one_node_left_is_chosen_without_prioritize(connect: Any) -> None:
    ok, one = FakeExtender("ok", [true_predicate]), FakeExtender("one", [only("node1")], [(favour("node2"), 1)])
    scheduler, cluster, first = run_case(connect, [Ext(ok), Ext(one)])
    assert first.outcome == "scheduled" and first.node == "node1" and node_of(cluster) == "node1"
    assert first.evaluated == 2 and first.feasible == ["node1"] and first.scores is None
    assert "prioritize" not in ok.verbs() + one.verbs()


def test_4_empty_intersection_is_unschedulable_and_the_chain_sees_survivors_only(connect: Any) -> None:
    two, one = FakeExtender("two", [only("node2")]), FakeExtender("one", [only("node1")])
    scheduler, cluster, first = run_case(connect, [Ext(two), Ext(one)])
    assert first.outcome == "unschedulable" and node_of(cluster) is None
    (second_args,) = [a for v, a in one.calls[:1]]
    assert [n["metadata"]["name"] for n in second_args["Nodes"]["items"]] == ["node2"]


def test_4b_an_extender_never_gets_an_empty_list(connect: Any) -> None:
    none, after = FakeExtender("none", [false_predicate]), FakeExtender("after", [true_predicate])
    scheduler, cluster, first = run_case(connect, [Ext(none), Ext(after)])
    assert first.outcome == "unschedulable" and after.calls == []


def test_5_prioritize_error_with_one_node(connect: Any) -> None:
    ext = FakeExtender("e", [true_predicate], [(error_prioritizer, 1)])
    scheduler, cluster, first = run_case(connect, [Ext(ext)], nodes=[make_node("node1").obj()])
    assert node_of(cluster) == "node1" and "prioritize" not in ext.verbs()


def test_5b_prioritize_errors_are_ignored(connect: Any) -> None:
    broken = FakeExtender("broken", [true_predicate], [(error_prioritizer, 1)])
    good = FakeExtender("good", [true_predicate], [(favour("node2"), 1)])
    scheduler, cluster, first = run_case(connect, [Ext(broken, weight=100), Ext(good)])
    assert first.outcome == "scheduled" and node_of(cluster) == "node2"
    assert "prioritize" in broken.verbs()  # it was asked, failed, and contributed nothing
    assert not any(k.endswith("broken.test/ext") or "broken" in k for k in first.scores["node1"])


def test_6_extender_weights_are_applied(connect: Any) -> None:
    e1 = FakeExtender("e1", [true_predicate], [(favour("node1"), 1)])
    e2 = FakeExtender("e2", [true_predicate], [(favour("node2"), 1)])
    scheduler, cluster, first = run_case(connect, [Ext(e1, weight=1), Ext(e2, weight=5)])
    assert node_of(cluster) == "node2"
    ext = {n: sum(v for k, v in row.items() if k.startswith("extender:")) for n, row in first.scores.items()}
    assert ext == {"node1": 10 * 1 * 10 + 1 * 5 * 10, "node2": 1 * 1 * 10 + 10 * 5 * 10}


def test_7_plugin_scores_and_extender_scores_add_up(connect: Any) -> None:
    # in-tree TaintToleration (weight 3) dislikes node1's PreferNoSchedule taint: 300 points;
    # the extender favours node1 by (10 - 1) x weight 1 x 10 = 90 points: node2 wins.
    tainted = make_node("node1").obj()
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "PreferNoSchedule"}]
    ext = FakeExtender("e", [true_predicate], [(favour("node1"), 1)])
    scheduler, cluster, first = run_case(connect, [Ext(ext)], nodes=[tainted, make_node("node2").obj()])
    assert node_of(cluster) == "node2"
    assert first.scores["node2"]["TaintToleration"] - first.scores["node1"]["TaintToleration"] == 300
    ext_key = next(k for k in first.scores["node1"] if k.startswith("extender:"))
    assert first.scores["node1"][ext_key] == 100 and first.scores["node2"][ext_key] == 10


def test_8_not_interested_extender_is_never_called(connect: Any) -> None:
    uninterested = FakeExtender("u", [error_predicate], [(error_prioritizer, 1)])
    good = FakeExtender("good", [true_predicate], [(favour("node2"), 1)])
    scheduler, cluster, first = run_case(connect, [Ext(uninterested, managed=["example.com/other"]), Ext(good)])
    assert node_of(cluster) == "node2" and uninterested.calls == []


def test_9_ignorable_filter_error_is_skipped(connect: Any) -> None:
    broken, one = FakeExtender("broken", [error_predicate]), FakeExtender("one", [only("node1")])
    # listed first, but ignorable extenders are moved to the tail (§2.3): "one" filters first
    scheduler, cluster, first = run_case(connect, [Ext(broken, ignorable=True), Ext(one)])
    assert first.outcome == "scheduled" and node_of(cluster) == "node1"
    (args,) = [a for v, a in broken.calls if v == "filter"]
    assert [n["metadata"]["name"] for n in args["Nodes"]["items"]] == ["node1"]  # survivors of "one"
    assert scheduler.extenders[-1].spec.ignorable


def test_9b_ignorable_filter_error_with_nodes_left(connect: Any) -> None:
    broken, ok = FakeExtender("broken", [error_predicate]), FakeExtender("ok", [true_predicate])
    scheduler, cluster, first = run_case(connect, [Ext(broken, ignorable=True, prioritize=False), Ext(ok)])
    assert first.outcome == "scheduled" and node_of(cluster) in ("node1", "node2")
    assert broken.verbs() == ["filter"]  # called, failed, skipped: the node list stayed as it was


@pytest.mark.parametrize("version, evaluated", [("1.30", 2), ("1.29", 2)])
def test_10_no_scoring_but_filter_extenders_evaluate_all_nodes(connect: Any, version: str, evaluated: int) -> None:
    ext = FakeExtender("f", [true_predicate])
    scheduler, cluster, first = run_case(connect, [Ext(ext, prioritize=False)], in_tree_scoring=False, version=version)
    assert first.evaluated == evaluated and first.outcome == "scheduled"


@pytest.mark.parametrize("version, evaluated", [("1.30", 1), ("1.29", 2)])
def test_11_no_scoring_no_filter_extenders_stop_at_one_node(connect: Any, version: str, evaluated: int) -> None:
    cluster_ref: list[MemoryCluster] = []
    binder = FakeExtender("b", binder=lambda ns, name, uid, node: cluster_ref[0].bind(ns, name, uid, node))
    nodes = [make_node("node1").obj(), make_node("node2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes))
    cluster_ref.append(cluster)
    scheduler = scheduler_for(cluster, [connect(Ext(binder, filter=False, prioritize=False, bind=True))],
                              in_tree_scoring=False, version=version)
    cluster.add_pod(make_pod("pod").obj())
    scheduler.run()
    first = scheduler.cycles[0]
    assert first.evaluated == evaluated and first.outcome == "scheduled"
    assert binder.verbs() == ["bind"] and node_of(cluster) == first.node


# ---- TestSchedulerBinding ------------------------------------------------------------------------


def binding_case(connect: Any, ext: Ext, version: str = "1.30") -> tuple[Any, MemoryCluster, FakeExtender]:
    cluster = MemoryCluster(cluster_objects([make_node("node1").alloc(gpu=4).obj()]))
    ext.fake.binder = ext.fake.binder or cluster.bind
    scheduler = scheduler_for(cluster, [connect(ext)], version=version, max_virtual_seconds=2.0)
    cluster.add_pod(make_pod("pod").req(gpu=1).obj())
    scheduler.run()
    return scheduler, cluster, ext.fake


def test_non_binder_extender_leaves_binding_to_the_default_binder(connect: Any) -> None:
    scheduler, cluster, fake = binding_case(connect, Ext(FakeExtender("f", [true_predicate]), prioritize=False))
    assert node_of(cluster) == "node1" and "bind" not in fake.verbs()
    assert scheduler.traces[next(iter(scheduler.traces))].bound_by == "DefaultBinder"


def test_interested_binder_binds(connect: Any) -> None:
    scheduler, cluster, fake = binding_case(connect, Ext(FakeExtender("b"), filter=False, prioritize=False, bind=True,
                                                         managed=["example.com/gpu"]))
    assert node_of(cluster) == "node1" and fake.verbs() == ["bind"]
    assert next(iter(scheduler.traces.values())).bound_by != "DefaultBinder"


def test_binder_not_interested_is_not_asked(connect: Any) -> None:
    scheduler, cluster, fake = binding_case(connect, Ext(FakeExtender("b"), filter=False, prioritize=False, bind=True,
                                                         managed=["example.com/other"]))
    assert node_of(cluster) == "node1" and fake.calls == []


def failing_binder(*_: Any) -> None:
    raise RuntimeError("bind refused")


def test_ignorable_binder_error_falls_back_to_default_binding_in_1_30(connect: Any) -> None:
    scheduler, cluster, fake = binding_case(connect, Ext(FakeExtender("b", binder=failing_binder), filter=False,
                                                         prioritize=False, bind=True, ignorable=True))
    assert node_of(cluster) == "node1" and fake.verbs() == ["bind"]
    assert scheduler.bind_failures == 0


def test_ignorable_binder_error_is_a_bind_failure_in_1_29(connect: Any) -> None:
    scheduler, cluster, fake = binding_case(connect, Ext(FakeExtender("b", binder=failing_binder), filter=False,
                                                         prioritize=False, bind=True, ignorable=True), version="1.29")
    assert node_of(cluster) is None and scheduler.bind_failures >= 1
    assert fake.verbs().count("bind") >= 2  # forgotten, requeued with backoff, retried
    trace = next(iter(scheduler.traces.values()))
    assert trace.state == "pending" and trace.message == "bind refused"
