"""CapacityQuota and pods already leaving (deleting, or evicted and not shown deleting yet): as in
ManagedPreemption (64f7409) they are victims that cost no eviction."""

from __future__ import annotations

from typing import Any

import pytest
from builders import cluster_objects, make_elastic_quota, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock


def pod(name: str, ns: str, priority: int = 0, node: str = "", gpu: int = 1, deleting: bool = False) -> dict[str, Any]:
    b = make_pod(name, ns).uid(f"u-{name}").req(gpu=gpu).priority(priority)
    raw = (b.node(node) if node else b).obj()
    if node:
        raw["status"]["startTime"] = "2026-01-01T00:00:00Z"
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return raw


def app(nodes: list[dict], pods: list[dict], quotas: list[dict]) -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster({**cluster_objects(nodes, pods), "ElasticQuota": quotas})
    config = config_of(profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}]}}}])
    return create_app(config, source=cluster, clock=FakeClock(), background=False).extensions["kube_extender"], cluster


def borrowers(*quotas: dict[str, Any], n2: int = 0) -> tuple[Any, MemoryCluster]:
    """n1 (4 GPUs) is all namespace a's (min 0, max 4) borrowers x1..x4 (priority 1..4); n2 (empty,
    ``n2`` GPUs) when asked; ``quotas`` besides a's."""
    nodes = [make_node("n1").alloc(gpu=4).obj(), *([make_node("n2").alloc(gpu=n2).obj()] if n2 else [])]
    return app(nodes, [pod(f"x{i}", "a", i, "n1") for i in range(1, 5)],
               [make_elastic_quota("a", min={"gpu": 0}, max={"gpu": 4}), *quotas])


def unseen_writes(cluster: MemoryCluster, nominations: bool = True) -> list[str]:
    """Evictions the API server accepts that the watch has not shown yet - and nominations too,
    unless ``nominations`` is False; returns the names evicted, in order."""
    evicted: list[str] = []
    cluster.evict = lambda namespace, name, uid, grace=None: evicted.append(name)  # type: ignore[method-assign]
    if nominations:
        cluster.set_nominated_node = lambda namespace, name, node: None  # type: ignore[method-assign]
    return evicted


def watching(cluster: MemoryCluster, watch: str, evicted: list[str]) -> None:
    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        evicted.append(name)
        if watch == "shows it deleting":
            going = cluster.get_pod(namespace, name)
            going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
            cluster.add_pod(going)
    cluster.evict = evict  # type: ignore[method-assign]


@pytest.mark.parametrize("watch", ["shows it deleting", "has not shown the eviction yet"])
@pytest.mark.parametrize("p2_priority, new_evictions", [
    pytest.param(100, [], id="p2 outranks p1: waits for x1"),
    pytest.param(0, ["x2"], id="p2 equal to p1: one victim of its own"),
])
def test_reclaim_counts_a_borrower_already_leaving(watch: str, p2_priority: int, new_evictions: list[str]) -> None:
    """n1 (4 GPUs) is all a's (min 0) borrowers x1..x4. p1 (b, min 2) reclaims x1. Before x1 is
    gone, p2 (d, min 2, one GPU) reclaims too. What x1 frees is held for p1 only against pods of
    p1's priority or lower (its nomination): p2 outranking p1 needs no new eviction; p2 of p1's
    priority needs one more borrower evicted, not two (x1's GPU counted once, not as x1's and
    as p1's)."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}), make_elastic_quota("d", min={"gpu": 2}))
    evicted: list[str] = []
    watching(cluster, watch, evicted)
    cluster.add_pod(pod("p1", "b", 0))
    assert state.engine.filter(cluster.get_pod("b", "p1"), ["n1"]).nominated == "n1"
    assert evicted == ["x1"]
    cluster.add_pod(pod("p2", "d", p2_priority))
    outcome = state.engine.filter(cluster.get_pod("d", "p2"), ["n1"])
    assert (outcome.nominated, evicted) == ("n1", ["x1", *new_evictions])
    if not new_evictions:
        (said,) = [e["message"] for e in cluster.events if e["reason"] == "Preempting" and e["object"] == "d/p2"]
        assert said == "Waits for 1 leaving already (a/x1) on node n1; nominated there"


def test_the_preempt_verb_keeps_a_terminating_victim() -> None:
    """kube-scheduler's own preemption takes old (terminating, priority 0, namespace c without a
    quota) and y for victims of p (b within its min): both free n1's 2 GPUs. The extender must
    not drop the node as if old were protected by a quota."""
    from extender.runtime.engine import Candidate

    state, cluster = app([make_node("n1").alloc(gpu=2).obj()],
                         [pod("old", "c", 0, "n1", deleting=True), pod("y", "c", 0, "n1")],
                         [make_elastic_quota("b", min={"gpu": 2})])
    decisions = state.engine.preempt(pod("p", "b", 100, gpu=2),
                                     {"n1": Candidate([("u-old", None), ("u-y", None)], 0)})
    assert {n: d.victims for n, d in decisions.items()} == {"n1": ["u-old", "u-y"]}


@pytest.mark.parametrize("watch", ["shows it deleting", "has not shown the eviction yet"])
def test_a_borrower_evicted_no_longer_counts_before_the_watch_tells(watch: str) -> None:
    """p1 (b) reclaims x1 from a (min 0, max 4) on n1. x1's replacement x5 fits a's quota on n2
    (a uses 3 of its max 4; 4 of the 6 guaranteed are in use): docs say an evicted pod stops
    counting once the Eviction is accepted, not once the watch shows it deleting."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}), make_elastic_quota("d", min={"gpu": 4}), n2=2)
    evicted: list[str] = []
    watching(cluster, watch, evicted)
    cluster.add_pod(pod("p1", "b", 0))
    assert state.engine.filter(cluster.get_pod("b", "p1"), ["n1"]).nominated == "n1"
    cluster.add_pod(pod("x5", "a", 0))
    outcome = state.engine.filter(cluster.get_pod("a", "x5"), ["n2"])
    assert outcome.failed == {} and outcome.feasible == ["n2"]


@pytest.mark.parametrize("a_pods, ask, evicted, where", [
    pytest.param([("leaving", 1, 90, True), ("low", 2, 5, False)], 3, {"low"}, "a",
                 id="a-leaving-pod-not-needed-does-not-count"),
    pytest.param([("leaving", 2, 90, True), ("keep", 2, 1000, False)], 2, set(), "a",
                 id="leaving-pods-alone-beat-any-eviction"),
])
def test_a_node_ranks_by_the_pods_evicted_now(a_pods: list[tuple[str, int, int, bool]], ask: int,
                                              evicted: set[str], where: str) -> None:
    """Node b offers mid (priority 20, 3 GPUs; 1 left by big, 1000). A leaving pod the preemptor
    does not need is no victim, and one it needs costs nothing: neither may make its node rank
    below b (where mid would be evicted)."""
    pods = [pod(name, "t", priority, "a", gpus, deleting) for name, gpus, priority, deleting in a_pods]
    pods += [pod("mid", "t", 20, "b", 3), pod("big", "t", 1000, "b", 1)]
    state, cluster = app([make_node("a").alloc(gpu=4).obj(), make_node("b").alloc(gpu=4).obj()], pods,
                         [make_elastic_quota("t", min={"gpu": 16})])
    before = {p["metadata"]["name"] for p in cluster.pods()}
    cluster.add_pod(pod("hi", "t", 100, gpu=ask))
    outcome = state.engine.filter(cluster.get_pod("t", "hi"), ["a", "b"])
    assert outcome.nominated == where
    assert before - {p["metadata"]["name"] for p in cluster.pods()} == evicted


@pytest.mark.parametrize("watch", ["shows the nomination", "has not shown the nomination yet"])
def test_a_nomination_counts_in_its_namespace_before_the_watch_shows_it(watch: str) -> None:
    """b (min 2, max 2): p1 (2 GPUs) reclaims x1 and x2 from a and is nominated to n1. p2 (b,
    1 GPU) would take b to 3, above its max: it is refused - it does not reclaim x3 too -
    whether or not the watch has shown p1's nomination yet (held from the moment it is made)."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}, max={"gpu": 2}))
    evicted = unseen_writes(cluster, nominations=watch != "shows the nomination")
    cluster.add_pod(pod("p1", "b", 0, gpu=2))
    assert state.engine.filter(cluster.get_pod("b", "p1"), ["n1"]).nominated == "n1"
    assert sorted(evicted) == ["x1", "x2"]
    cluster.add_pod(pod("p2", "b", 0, gpu=1))
    outcome = state.engine.filter(cluster.get_pod("b", "p2"), ["n1"])
    assert (outcome.nominated, sorted(evicted)) == (None, ["x1", "x2"])


def test_the_watch_showing_an_evicted_pod_deleting_mid_check_does_not_count_it_again() -> None:
    """As test_a_borrower_evicted_no_longer_counts_before_the_watch_tells, with the watch showing
    x1 deleting while x5's check runs - after the quota table read its snapshot, before the
    evictions are asked about one: x1 counts in neither (the evictions are asked about the
    table's own snapshot)."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}), make_elastic_quota("d", min={"gpu": 4}), n2=2)
    evicted: list[str] = []
    watching(cluster, "has not shown the eviction yet", evicted)
    cluster.add_pod(pod("p1", "b", 0))
    assert state.engine.filter(cluster.get_pod("b", "p1"), ["n1"]).nominated == "n1"
    cluster.add_pod(pod("x5", "a", 0))
    handle = state.engine.handle
    real = handle.pending_pods

    def pending_pods() -> Any:  # the table reads these after its snapshot: the watch delivers now
        for name in evicted:
            going = cluster.get_pod("a", name)
            if not going["metadata"].get("deletionTimestamp"):
                going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
                cluster.add_pod(going)
        return real()

    handle.pending_pods = pending_pods  # type: ignore[method-assign]
    outcome = state.engine.filter(cluster.get_pod("a", "x5"), ["n2"])
    assert outcome.failed == {} and outcome.feasible == ["n2"]


def test_a_nomination_made_while_the_quota_table_is_built_is_not_lost() -> None:
    """As test_a_nomination_counts_in_its_namespace_before_the_watch_shows_it (b: min 2, max 2),
    with p1's preemption (another request thread) finishing while a filter for y (namespace c)
    builds the quota table - after it copied Handle.nominations(), before it read held_version()
    for its key. The table must not be cached under the new version without p1: p2 (b, 1 GPU)
    would then pass b's max and reclaim x3 too (b at 3 GPUs)."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}, max={"gpu": 2}), n2=1)
    evicted = unseen_writes(cluster)
    cluster.add_pod(pod("p1", "b", 0, gpu=2))
    cluster.add_pod(pod("y", "c", 0))
    cluster.add_pod(pod("p2", "b", 0, gpu=1))  # pending already
    handle = state.engine.handle
    real = handle.nominations
    outcomes: list[Any] = []
    started: list[bool] = []

    def nominations() -> Any:
        copy = real()
        if not started:  # the other thread's cycle for p1 ends right now
            started.append(True)
            outcomes.append(state.engine.filter(cluster.get_pod("b", "p1"), ["n1"]))
        return copy

    handle.nominations = nominations  # type: ignore[method-assign]
    state.engine.filter(cluster.get_pod("c", "y"), ["n2"])
    handle.nominations = real  # type: ignore[method-assign]
    assert outcomes[0].nominated == "n1" and sorted(evicted) == ["x1", "x2"]
    outcome = state.engine.filter(cluster.get_pod("b", "p2"), ["n1"])
    assert (outcome.nominated, sorted(evicted)) == (None, ["x1", "x2"])


def test_a_nomination_of_a_pod_the_watch_has_not_shown_counts_in_its_namespace() -> None:
    """As test_a_nomination_counts_in_its_namespace_before_the_watch_shows_it, but p1 reaches
    the extender in kube-scheduler's filter call before the extender's watch has shown p1 at all
    (kube-scheduler's informer may be first): its nomination still counts in b's use."""
    state, cluster = borrowers(make_elastic_quota("b", min={"gpu": 2}, max={"gpu": 2}))
    evicted = unseen_writes(cluster)
    assert state.engine.filter(pod("p1", "b", 0, gpu=2), ["n1"]).nominated == "n1"  # not in the cluster yet
    assert sorted(evicted) == ["x1", "x2"]
    cluster.add_pod(pod("p2", "b", 0, gpu=1))
    outcome = state.engine.filter(cluster.get_pod("b", "p2"), ["n1"])
    assert (outcome.nominated, sorted(evicted)) == (None, ["x1", "x2"])
