"""ManagedPreemption: the extender preempts for managed resources itself, by the seeds' rules,
and holds the freed capacity for the nominated pod."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of
from fakes import fake, spec_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.status import Status
from extender.framework.views import PodInfo
from extender.runtime.registry import Registry
from policies.preemption import logic


def running(name: str, gpus: int, priority: int, node: str, start: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).node(node).obj()
    pod["status"]["startTime"] = start
    return pod


def pending(name: str, gpus: int, priority: int, **spec: Any) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).obj()
    pod["spec"].update(spec)
    return pod


def setup(nodes: list[dict], pods: list[dict], pdbs: list[dict] | None = None,
          profile_plugins: dict | None = None, registry: Registry | None = None,
          **overrides: Any) -> tuple[Any, MemoryCluster]:
    objs = cluster_objects(nodes, pods)
    objs["PodDisruptionBudget"] = pdbs or []
    cluster = MemoryCluster(objs)
    plugins = profile_plugins or {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}
    config = config_of(profiles=[{"schedulerName": "default-scheduler", "plugins": plugins}], **overrides)
    app = create_app(config, source=cluster, clock=FakeClock(), background=False, registry=registry)
    return app.extensions["kube_extender"].engine, cluster


def names(cluster: MemoryCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods()}


FULL = [make_node("a").alloc(gpu=4).obj(), make_node("b").alloc(gpu=2).obj()]
HOLDERS = [running("low-a1", 2, 10, "a", "2026-01-01T00:00:00Z"), running("low-a2", 2, 20, "a"),
           running("mid-b", 2, 50, "b")]


def filter_on(engine: Any, cluster: MemoryCluster, pod: dict[str, Any], nodes: list[str]) -> Any:
    cluster.add_pod(pod)
    return engine.filter(cluster.get_pod(pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]), nodes)


def test_preempts_the_lowest_priority_victim_and_nominates() -> None:
    engine, cluster = setup(FULL, HOLDERS)
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    assert outcome.feasible == [] and outcome.nominated == "a"
    assert names(cluster) == {"low-a2", "mid-b", "hi"}, "only low-a1 (priority 10) was evicted"
    assert cluster.get_pod("default", "hi")["status"]["nominatedNodeName"] == "a"
    reasons = [(e["object"], e["reason"]) for e in cluster.events]
    assert ("default/low-a1", "Preempted") in reasons and ("default/hi", "Preempting") in reasons
    (preempted,) = [e for e in cluster.events if e["reason"] == "Preempted"]
    assert preempted["related"] == {"object": "default/hi", "uid": "u-hi"}, "the preemptor, as kube-scheduler names it"


def test_freed_capacity_is_held_against_lower_priority_pods() -> None:
    engine, cluster = setup(FULL, HOLDERS)
    filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    sneaky = filter_on(engine, cluster, pending("sneaky", 2, 5, preemptionPolicy="Never"), ["a"])
    assert sneaky.feasible == [] and sneaky.failed == {"a": "Insufficient example.com/gpu"}
    assert "sneaky" in names(cluster), "a non-preempting pod evicts nothing"
    assert filter_on(engine, cluster, pending("hi-again", 2, 100), ["a"]).feasible == [], \
        "equal priority does not take a nominated pod's capacity either"
    assert engine.filter(cluster.get_pod("default", "hi"), ["a"]).feasible == ["a"], "the nominee itself fits"


def test_a_higher_priority_pod_may_take_it_and_the_nomination_is_cleared() -> None:
    engine, cluster = setup(FULL, HOLDERS)
    filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    boss = filter_on(engine, cluster, pending("boss", 2, 1000), ["a"])
    assert boss.feasible == ["a"]
    assert engine.bind("default", "boss", "u-boss", "a") == ""
    assert "nominatedNodeName" not in cluster.get_pod("default", "hi")["status"]
    assert ("default/hi", "NominationCleared") in [(e["object"], e["reason"]) for e in cluster.events]


@pytest.mark.parametrize("nominee_priority, nominee_node, cleared", [
    pytest.param(50, "a", True, id="lower-priority-nominee-on-the-chosen-node-is-cleared"),
    pytest.param(1000, "a", False, id="higher-priority-nominee-keeps-its-nomination"),
    pytest.param(100, "a", False, id="equal-priority-nominee-keeps-its-nomination"),
    pytest.param(50, "b", False, id="nominee-on-another-node-keeps-its-nomination"),
])
def test_preempting_clears_the_nominations_of_lower_priority_pods_on_the_node(nominee_priority: int,
                                                                               nominee_node: str,
                                                                               cleared: bool) -> None:
    """nominee (1 GPU) is nominated to a node - by an earlier preemption, say - when hi (100)
    preempts on a. As kube-scheduler's prepareCandidate (getLowerPriorityNominatedPods), the
    nominations to a of pods of lower priority than hi are cleared: the room is hi's now, and
    they go back to the queue to find room elsewhere. Others keep theirs."""
    nodes = [make_node("a").alloc(gpu=4).obj(), make_node("b").alloc(gpu=4).obj()]
    nominee = pending("nominee", 1, nominee_priority)
    nominee["status"]["nominatedNodeName"] = nominee_node
    engine, cluster = setup(nodes, [running("low-a1", 2, 10, "a"), running("low-a2", 2, 20, "a"),
                                    running("mid-b", 4, 500, "b"), nominee])
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"]).nominated == "a"
    status = cluster.get_pod("default", "nominee")["status"]
    assert status.get("nominatedNodeName") == (None if cleared else nominee_node)
    held = {p.name for node, p in engine.handle.nominations()}
    assert ("nominee" in held) is not cleared and "hi" in held
    events = [(e["object"], e["reason"]) for e in cluster.events]
    assert (("default/nominee", "NominationCleared") in events) is cleared


@pytest.mark.parametrize("pod, why", [
    pytest.param(pending("polite", 2, 100, preemptionPolicy="Never"), "preemptionPolicy Never", id="never"),
    pytest.param(pending("peer", 2, 10), "victims of equal or higher priority", id="equal priority"),
    pytest.param(pending("huge", 8, 1000), "no node has enough allocatable", id="unresolvable everywhere"),
])
def test_no_preemption(pod: dict[str, Any], why: str) -> None:
    engine, cluster = setup(FULL, HOLDERS)
    before = names(cluster)
    outcome = filter_on(engine, cluster, pod, ["a", "b"])
    assert outcome.nominated is None, why
    assert names(cluster) == before | {pod["metadata"]["name"]}


def test_no_preemption_when_some_node_fits() -> None:
    engine, cluster = setup([*FULL, make_node("c").alloc(gpu=2).obj()], HOLDERS)
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b", "c"])
    assert outcome.feasible == ["c"] and outcome.nominated is None and len(cluster.pods()) == 4


def lagging_watch(cluster: MemoryCluster, watch: str) -> list[str]:
    """Evictions the cluster accepts without deleting the pod: the watch shows it deleting
    ("shows the victim deleting") or nothing yet; returns the names evicted, in order."""
    evicted: list[str] = []

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        evicted.append(name)
        if watch.startswith("shows"):
            going = cluster.get_pod(namespace, name)
            going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
            cluster.add_pod(going)

    cluster.evict = evict  # type: ignore[method-assign]
    return evicted


@pytest.mark.parametrize("watch", ["shows the victim deleting", "has not shown the eviction yet"])
def test_a_pod_evicted_already_is_no_victim_again_before_the_watch_shows_it(watch: str) -> None:
    """The watch lags the Eviction API's answer. Meanwhile the snapshot shows the victim running:
    a second preemptor took it for a victim again (both counting what it frees) and the first,
    asked again, evicted it again instead of waiting. Both must decide as once the watch shows
    it deleting: hi2 (hi's priority) cannot have what low-a1 frees - hi's nomination holds it -
    so it also needs low-a2 (priority 20, below b's 50) evicted, not low-a1 again."""
    engine, cluster = setup(FULL, HOLDERS)
    evicted = lagging_watch(cluster, watch)
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"]).nominated == "a"
    second = filter_on(engine, cluster, pending("hi2", 2, 100), ["a", "b"])
    assert (second.nominated, evicted) == ("a", ["low-a1", "low-a2"]), "a's freed capacity is hi's"
    again = engine.filter(cluster.get_pod("default", "hi"), ["a"])
    assert again.nominated is None and evicted == ["low-a1", "low-a2"], "hi waits for its victim"


@pytest.mark.parametrize("watch", ["shows the victim deleting", "has not shown the eviction yet"])
def test_a_preemptor_that_outranks_the_nominee_waits_for_its_victims_instead_of_evicting_more(watch: str) -> None:
    """hi (100) evicted low-a1 on a. boss (1000) asks before low-a1 is gone: what low-a1 frees
    is held for hi against pods of priority 100 or lower only, so for boss a needs no other
    victim - as kube-scheduler's dry run counts a terminating lower-priority pod a victim. boss
    is nominated to a, waiting for low-a1; low-a2 (20) and mid-b (50) stay."""
    engine, cluster = setup(FULL, HOLDERS)
    evicted = lagging_watch(cluster, watch)
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"]).nominated == "a"
    boss = filter_on(engine, cluster, pending("boss", 2, 1000), ["a", "b"])
    assert (boss.nominated, evicted) == ("a", ["low-a1"])
    assert cluster.get_pod("default", "boss")["status"]["nominatedNodeName"] == "a"
    (said,) = [e["message"] for e in cluster.events if e["reason"] == "Preempting" and e["object"] == "default/boss"]
    assert said == "Waits for 1 leaving already (default/low-a1) on node a; nominated there"


def test_a_nomination_counts_before_the_watch_shows_it() -> None:
    """Neither hi's eviction of low-a1 nor its nomination has reached the watch when "mid" (50)
    asks. What low-a1 frees is hi's (100) all the same: mid may not count it as its own room
    (it would be nominated there with nothing evicted, and find the room taken) but evicts
    low-a2 (20) as well - the nominator holds hi's nomination from the moment it is made."""
    engine, cluster = setup(FULL, HOLDERS)
    evicted: list[str] = []
    written: list[tuple[str, str | None]] = []
    cluster.evict = lambda namespace, name, uid, grace=None: evicted.append(name)  # type: ignore[method-assign]
    cluster.set_nominated_node = lambda namespace, name, node: written.append((name, node))  # type: ignore[method-assign]
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"]).nominated == "a"
    assert [p.name for p in engine.queue.nominated("a")] == ["hi"], "held before the watch shows it"
    mid = filter_on(engine, cluster, pending("mid", 2, 50), ["a", "b"])
    assert (mid.nominated, evicted, written) == ("a", ["low-a1", "low-a2"], [("hi", "a"), ("mid", "a")])


LEAVING_RANKS = [
    # id, node a's pods (name, gpus, priority, leaving), node b's, hi's ask, what is evicted, where hi goes
    ("a-leaving-pod-not-needed-does-not-count", [("leaving", 1, 90, True), ("low", 2, 5, False)],
     [("mid", 3, 20, False)], 3, {"low"}, "a"),
    ("leaving-pods-alone-beat-any-eviction", [("leaving", 2, 90, True), ("keep", 2, 1000, False)],
     [("cheap", 2, 1, False), ("big", 2, 1000, False)], 2, set(), "a"),
    ("leaving-pods-first-then-the-least-important", [("leaving", 1, 50, True), ("low", 1, 5, False),
                                                     ("lower", 1, 1, False), ("top", 1, 1000, False)],
     [("big", 4, 1000, False)], 2, {"lower"}, "a"),
]


@pytest.mark.parametrize("a_pods, b_pods, ask, evicted, where", [c[1:] for c in LEAVING_RANKS],
                         ids=[c[0] for c in LEAVING_RANKS])
def test_pods_leaving_already_are_the_victims_that_cost_nothing(a_pods: list[tuple[str, int, int, bool]],
                                                                b_pods: list[tuple[str, int, int, bool]],
                                                                ask: int, evicted: set[str], where: str) -> None:
    """A deleting pod (here deleted by its owner) is counted on before any pod is evicted, and
    only when needed: a node ranks by the pods evicted now, so a leaving pod of high priority the
    preemptor does not need cannot make its node lose (kube-scheduler would reprieve it), and a
    node where leaving pods alone make room wins."""
    def made(name: str, gpus: int, priority: int, gone: bool, node: str) -> dict[str, Any]:
        pod = running(name, gpus, priority, node)
        if gone:
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
        return pod

    nodes = [make_node("a").alloc(gpu=4).obj(), make_node("b").alloc(gpu=4).obj()]
    pods = [made(*p, "a") for p in a_pods] + [made(*p, "b") for p in b_pods]
    engine, cluster = setup(nodes, pods)
    before = names(cluster)
    outcome = filter_on(engine, cluster, pending("hi", ask, 100), ["a", "b"])
    assert outcome.nominated == where
    assert before - names(cluster) == evicted


def waiting_in_permit(journal: list | None = None, once: bool = False) -> tuple[Any, MemoryCluster, threading.Event]:
    """An engine whose Gate plugin holds pods in Permit (``once``: only the first, later ones
    pass), with w (priority 10) pending and top (1000) using half of node a's 4 GPUs; and an
    Event set when a pod enters Permit."""
    entered = threading.Event()
    calls: list[int] = []

    def permit() -> tuple[Status, float]:
        calls.append(1)
        if once and len(calls) > 1:
            return Status(), 0.0
        entered.set()
        return Status.wait(), 30.0

    gate = fake("Gate", {"reserve", "permit"}, journal if journal is not None else [], permit=permit)
    plugins = {"reserve": {"enabled": [{"name": "Gate"}]}, "permit": {"enabled": [{"name": "Gate"}]},
               "postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}
    engine, cluster = setup([make_node("a").alloc(gpu=4).obj()],
                            [running("top", 2, 1000, "a"), pending("w", 2, 10)], profile_plugins=plugins,
                            registry=Registry([spec_of(gate)]))
    return engine, cluster, entered


def test_a_victim_waiting_in_permit_is_rejected_there_not_evicted() -> None:
    """w (priority 10) is assumed on a and waits in Permit (a Gate plugin) when hi (100) needs
    its room. As kube-scheduler's prepareCandidate does for a waiting pod, w is rejected in
    Permit - its bind fails, Unreserve runs, its reservation is freed - and not evicted: it is
    not bound, there is nothing to evict, and it stays to be scheduled again."""
    journal: list = []
    engine, cluster, entered = waiting_in_permit(journal)
    evicted: list[str] = []
    real_evict = cluster.evict

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        evicted.append(name)
        real_evict(namespace, name, uid, grace)

    cluster.evict = evict  # type: ignore[method-assign]
    result: list[str] = []
    binding = threading.Thread(target=lambda: result.append(engine.bind("default", "w", "u-w", "a")))
    binding.start()
    assert entered.wait(5)
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a"])
    binding.join(5)
    assert (outcome.nominated, evicted) == ("a", [])
    assert len(result) == 1 and result[0].startswith("permit failed") and "preempted" in result[0]
    assert ("Gate", "unreserve", "a") in journal
    assert engine.handle.waiting_pods.get("u-w") is None and not engine.cache.is_assumed("u-w")
    assert "w" in names(cluster) and cluster.get_pod("default", "w")["spec"].get("nodeName") is None
    assert engine.filter(cluster.get_pod("default", "hi"), ["a"]).feasible == ["a"], "w's room is hi's"
    assert ("default/w", "Preempted") in [(e["object"], e["reason"]) for e in cluster.events]


def test_a_preemptor_deleted_during_its_filter_call_holds_nothing() -> None:
    """hi preempts low-a1 on a and is deleted while its filter call is still running: its
    nomination must not hold a's room for good (no update will ever end it) - mid, which fits in
    the room low-a1 left, binds there."""
    engine, cluster = setup(FULL, HOLDERS)
    real_evict = cluster.evict

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        real_evict(namespace, name, uid, grace)
        cluster.delete_pod("default", "hi")

    cluster.evict = evict  # type: ignore[method-assign]
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"]).nominated == "a"
    assert engine.queue.nominated("a") == []
    assert filter_on(engine, cluster, pending("mid", 2, 50, preemptionPolicy="Never"), ["a"]).feasible == ["a"]


def test_a_budget_spent_by_a_leaving_pod_protects_the_others() -> None:
    """g1 and g2 share a budget of maxUnavailable 1 and g1 is being deleted already: evicting g2
    would make two unavailable, which the API server refuses. g2 is protected, so x (8) is the
    victim - not g2 (5) whose eviction would fail and leave hi with nothing."""
    g1, g2 = running("g1", 1, 10, "a"), running("g2", 1, 5, "a")
    g1["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    for p in (g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default"},
              "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "g"}}}}
    engine, cluster = setup([make_node("a").alloc(gpu=4).obj()],
                            [g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [budget])
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a"])
    assert (outcome.nominated, names(cluster)) == ("a", {"g1", "g2", "top", "hi"})


@pytest.mark.parametrize("budget", [
    pytest.param({"spec": {"maxUnavailable": 1}}, id="allowance-from-the-spec"),
    pytest.param({"metadata": {"generation": 1}, "spec": {"minAvailable": 1},
                  "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
                             "desiredHealthy": 1, "expectedPods": 2}}, id="disruptionsAllowed-1-in-the-status"),
])
def test_a_budget_allowing_one_eviction_protects_the_second_of_its_pods(budget: dict[str, Any]) -> None:
    """g1 (5) and g2 (6) share a budget that allows one eviction: each may go alone, not both.
    hi needs 2 GPUs on a, where x (8) and top (1000) also run. Judged pod by pod, neither is
    protected and both would be the victims - the second eviction refused, with g2 lost for
    nothing and hi nominated where it does not fit. As kube-scheduler's
    filterPodsWithPDBViolation, the allowance is spent cumulatively over the potential victims,
    most important first: g2 spends it, g1 is protected - the victims are g2 and x."""
    g1, g2 = running("g1", 1, 5, "a"), running("g2", 1, 6, "a")
    for p in (g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    pdb = {"metadata": {"name": "g", "namespace": "default", **budget.get("metadata", {})},
           "spec": {**budget["spec"], "selector": {"matchLabels": {"app": "g"}}},
           **({"status": budget["status"]} if "status" in budget else {})}
    engine, cluster = setup([make_node("a").alloc(gpu=4).obj()],
                            [g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [pdb])
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a"])
    assert (outcome.nominated, names(cluster)) == ("a", {"g1", "top", "hi"})


def test_a_budget_spent_by_an_eviction_not_shown_yet_protects_the_others() -> None:
    """minAvailable 1 over g1 (on b) and g2 (on a). hi1 evicts g1; before the watch shows it, the
    API server refuses g2 as well: hi2 must count g2 protected and evict x."""
    from extender.framework.handle import WriteError

    g1, g2 = running("g1", 1, 10, "b"), running("g2", 1, 5, "a")
    for p in (g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}}}
    engine, cluster = setup([make_node("a").alloc(gpu=3).obj(), make_node("b").alloc(gpu=1).obj()],
                            [g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [budget])
    evicted: list[str] = []

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        if name in ("g1", "g2") and {"g1", "g2"} & set(evicted):
            raise WriteError("Cannot evict pod as it would violate the pod's disruption budget.", conflict=True)
        evicted.append(name)  # accepted; the watch has not shown it yet

    cluster.evict = evict  # type: ignore[method-assign]
    assert filter_on(engine, cluster, pending("hi1", 1, 100), ["b"]).nominated == "b"
    outcome = filter_on(engine, cluster, pending("hi2", 1, 100), ["a"])
    assert (outcome.nominated, evicted) == ("a", ["g1", "x"])


def test_a_budget_spent_by_a_pending_covered_pod_protects_the_others() -> None:
    """g1 and g2 share a budget of maxUnavailable 1; g0, a third covered pod (a ReplicaSet's
    replacement, say), is pending: expected 3, healthy 2 - the disruption controller and the
    memory cluster allow 0 evictions. g2 must count as protected, so x (8) is the victim, not
    g2 (5), whose eviction the memory cluster refuses."""
    g0 = make_pod("g0").uid("u-g0").req(gpu=1).priority(5).obj()
    g1, g2 = running("g1", 1, 10, "a"), running("g2", 1, 5, "a")
    for p in (g0, g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default"},
              "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "g"}}}}
    engine, cluster = setup([make_node("a").alloc(gpu=4).obj()],
                            [g0, g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [budget])
    outcome = filter_on(engine, cluster, pending("hi", 1, 100), ["a"])
    assert (outcome.nominated, names(cluster)) == ("a", {"g0", "g1", "g2", "top", "hi"})


def test_a_budget_with_a_status_spent_by_an_eviction_not_shown_yet_protects_the_others() -> None:
    """As test_a_budget_spent_by_an_eviction_not_shown_yet_protects_the_others, with the budget
    as a real cluster has it: the disruption controller wrote status.disruptionsAllowed 1. hi1
    evicts g1; the API server decrements the allowance (eviction.go) but neither the pod nor the
    budget update has reached the watch: hi2 must count g2 protected and evict x."""
    from extender.framework.handle import WriteError

    g1, g2 = running("g1", 1, 10, "b"), running("g2", 1, 5, "a")
    for p in (g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default", "generation": 1},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}},
              "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
                         "desiredHealthy": 1, "expectedPods": 2}}
    engine, cluster = setup([make_node("a").alloc(gpu=3).obj(), make_node("b").alloc(gpu=1).obj()],
                            [g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [budget])
    evicted: list[str] = []
    allowed = [1]

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        if name in ("g1", "g2"):
            if allowed[0] == 0:
                raise WriteError("Cannot evict pod as it would violate the pod's disruption budget.", conflict=True)
            allowed[0] -= 1  # the API server's status write; the watch has not shown it
        evicted.append(name)

    cluster.evict = evict  # type: ignore[method-assign]
    assert filter_on(engine, cluster, pending("hi1", 1, 100), ["b"]).nominated == "b"
    outcome = filter_on(engine, cluster, pending("hi2", 1, 100), ["a"])
    assert (outcome.nominated, evicted) == ("a", ["g1", "x"])


@pytest.mark.parametrize("ask, nominated, wait", [
    pytest.param(2, "a", True, id="waits-for-a-pod-leaving-its-nominated-node"),
    pytest.param(4, "a", False, id="no-wait-where-it-can-never-fit"),
])
def test_a_nominee_waits_for_pods_leaving_its_node_only_where_it_may_fit(ask: int, nominated: str, wait: bool) -> None:
    """leaving (deleted by its owner) terminates on a (2 GPUs), hi's nominated node. While it
    does, hi waits rather than evicting more - unless a can never take hi (it asks 4 GPUs: a is
    UnschedulableAndUnresolvable for it), when hi preempts on b at once, as kube-scheduler's
    PodEligibleToPreemptOthers allows."""
    leaving = running("leaving", 1, 1, "a")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    nodes = [make_node("a").alloc(gpu=2).obj(), make_node("b").alloc(gpu=4).obj()]
    engine, cluster = setup(nodes, [leaving, running("keep", 1, 1000, "a"), running("low", 4, 5, "b")])
    hi = pending("hi", ask, 100)
    hi["status"]["nominatedNodeName"] = nominated
    outcome = filter_on(engine, cluster, hi, ["a", "b"])
    assert outcome.nominated == (None if wait else "b")
    assert ("low" in names(cluster)) is wait


def test_more_victims_never_rank_cheaper_for_negative_priorities() -> None:
    """a: two pods of priority -10 (1 GPU each); b: one of -10 (2 GPUs). hi needs 2 GPUs: b, one
    victim - kube-scheduler sums each victim's priority plus 2^31, so a second victim always adds."""
    nodes = [make_node("a").alloc(gpu=2).obj(), make_node("b").alloc(gpu=2).obj()]
    engine, cluster = setup(nodes, [running("a1", 1, -10, "a"), running("a2", 1, -10, "a"), running("b1", 2, -10, "b")])
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    assert (outcome.nominated, names(cluster)) == ("b", {"a1", "a2", "hi"})


def test_a_budget_status_not_showing_an_eviction_protects_the_others_once_the_pod_shows_deleting() -> None:
    """As test_a_budget_with_a_status_spent_by_an_eviction_not_shown_yet_protects_the_others,
    with the pods watch ahead of the budgets watch (independent streams): g1 shows deleting at
    once, the budget still has its status from before the eviction (allowance 1, g1 not in
    disruptedPods). The eviction counts against that status until the status names g1: hi2
    must count g2 protected and evict x, not pick g2 (refused: nothing lost, no nomination)."""
    from extender.framework.handle import WriteError

    g1, g2 = running("g1", 1, 10, "b"), running("g2", 1, 5, "a")
    for p in (g1, g2):
        p["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default", "generation": 1},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}},
              "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
                         "desiredHealthy": 1, "expectedPods": 2}}
    engine, cluster = setup([make_node("a").alloc(gpu=3).obj(), make_node("b").alloc(gpu=1).obj()],
                            [g1, g2, running("x", 1, 8, "a"), running("top", 1, 1000, "a")], [budget])
    cluster.graceful(lambda seconds, finish: "2026-01-01T00:00:30Z")  # the kubelet never finishes here
    evicted: list[str] = []
    allowed = [1]
    real_evict = cluster.evict

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        if name in ("g1", "g2"):
            if allowed[0] == 0:
                raise WriteError("Cannot evict pod as it would violate the pod's disruption budget.", conflict=True)
            allowed[0] -= 1  # the API server's status write; the budgets watch has not shown it
        evicted.append(name)
        real_evict(namespace, name, uid, grace)  # the pods watch shows it deleting

    cluster.evict = evict  # type: ignore[method-assign]
    assert filter_on(engine, cluster, pending("hi1", 1, 100), ["b"]).nominated == "b"
    assert cluster.get_pod("default", "g1")["metadata"].get("deletionTimestamp")
    outcome = filter_on(engine, cluster, pending("hi2", 1, 100), ["a"])
    assert (outcome.nominated, evicted) == ("a", ["g1", "x"])


def test_an_eviction_the_budget_status_shows_since_no_longer_protects_its_other_pods() -> None:
    """g1, g2, g3 share a budget of minAvailable 1 (allowance 2). hi1 evicts g1; the budgets watch
    then shows the API server's status (allowance 1, g1 named) and the disruption controller's
    (allowance 1, g1 gone): both count the eviction, so 10 minutes later one more covered pod may
    go - hi2 evicts g2 (priority 5), not x (priority 8)."""
    def budget(allowed: int, healthy: int, disrupted: dict[str, str] | None = None) -> dict[str, Any]:
        return {"metadata": {"name": "g", "namespace": "default", "generation": 1},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}},
                "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": healthy,
                           "desiredHealthy": 1, "expectedPods": 3, **({"disruptedPods": disrupted} if disrupted else {})}}

    covered = [running("g1", 1, 10, "b"), running("g2", 1, 5, "a"), running("g3", 1, 10, "c")]
    for p in covered:
        p["metadata"]["labels"] = {"app": "g"}
    clock = FakeClock()
    objs = cluster_objects([make_node("a").alloc(gpu=3).obj(), make_node("b").alloc(gpu=1).obj(),
                            make_node("c").alloc(gpu=1).obj()],
                           [*covered, running("x", 1, 8, "a"), running("top", 1, 1000, "a")])
    objs["PodDisruptionBudget"] = [budget(2, 3)]
    cluster = MemoryCluster(objs)
    config = config_of(profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}}])
    engine = create_app(config, source=cluster, clock=clock, background=False).extensions["kube_extender"].engine
    assert filter_on(engine, cluster, pending("hi1", 1, 100), ["b"]).nominated == "b"
    engine.cache.upsert_pdb(budget(1, 3, {"g1": "2026-01-01T00:00:00Z"}))  # the Eviction API's write
    engine.cache.upsert_pdb(budget(1, 2))  # the disruption controller's, g1 gone
    clock.advance(600)
    assert filter_on(engine, cluster, pending("hi2", 1, 100), ["a"]).nominated == "a"
    assert {"x"} <= names(cluster) and "g2" not in names(cluster)


def test_a_covered_victim_is_evicted_first_so_a_refusal_loses_no_pod() -> None:
    """The budget's status says one disruption is allowed, but the API server has spent it
    already (an eviction whose budget update the watch has not shown): it refuses g. Both
    victims are needed on a; u, uncovered and more important, would go first in the reprieve
    order, and be lost for nothing when g is refused. The pods a budget covers - the only ones
    the API server may refuse - are evicted first: the refusal comes before anything is lost."""
    from extender.framework.handle import WriteError

    u, g = running("u", 1, 20, "a"), running("g", 1, 10, "a")
    g["metadata"]["labels"] = {"app": "g"}
    budget = {"metadata": {"name": "g", "namespace": "default", "generation": 1},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}},
              "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
                         "desiredHealthy": 1, "expectedPods": 2}}
    engine, cluster = setup([make_node("a").alloc(gpu=2).obj()], [u, g], [budget])
    tried: list[str] = []

    def evict(namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        tried.append(name)
        if name == "g":
            raise WriteError("Cannot evict pod as it would violate the pod's disruption budget.", conflict=True)

    cluster.evict = evict  # type: ignore[method-assign]
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a"])
    assert (outcome.nominated, tried) == (None, ["g"])


def test_a_pdb_refusing_the_eviction_moves_to_the_next_node() -> None:
    holders = [running("guarded", 2, 10, "a"), running("guarded-2", 2, 10, "a"), running("mid-b", 2, 50, "b")]
    for p in holders[:2]:
        p["metadata"]["labels"] = {"app": "guarded"}
    pdb = {"metadata": {"name": "keep", "namespace": "default"},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}}
    engine, cluster = setup(FULL, holders, [pdb])
    outcome = filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    assert outcome.nominated == "b" and "mid-b" not in names(cluster)
    assert {"guarded", "guarded-2"} <= names(cluster)


def test_device_level_preemption_picks_the_right_pod_on_the_right_device() -> None:
    inventory = {"kube-extender.io/device-inventory": json.dumps({"devices": 2, "memoryMiB": 16384})}
    node = make_node("gpu").obj()
    node["metadata"]["annotations"] = inventory

    def holder(name: str, mem: int, prio: int, device: int) -> dict[str, Any]:
        p = make_pod(name).uid(f"u-{name}").req(**{"example.com/gpu-memory": mem}).priority(prio).node("gpu").obj()
        p["metadata"]["annotations"] = {"kube-extender.io/devices": json.dumps(
            {"node": "gpu", "containers": {"main": {"devices": [device], "memoryMiB": mem}}})}
        return p

    pods = [holder("d0-low", 8192, 10, 0), holder("d0-high", 8192, 500, 0),
            holder("d1-low", 4096, 5, 1), holder("d1-mid", 8192, 50, 1)]
    plugins = {"multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]},
               "postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}
    engine, cluster = setup([node], pods, profile_plugins=plugins,
                            managedResources=[{"name": "example.com/gpu-memory"}])
    preemptor = make_pod("hi").uid("u-hi").req(**{"example.com/gpu-memory": 8192}).priority(100).obj()
    outcome = filter_on(engine, cluster, preemptor, ["gpu"])
    assert outcome.nominated == "gpu"
    # device 0: d0-low (10) + d0-high (500), full; device 1: d1-low (5, 4 GiB) + d1-mid (50, 8 GiB), 4 GiB
    # free. Evicting d1-low alone leaves 8 GiB free on device 1: the lowest-priority single victim wins
    # over d0-low (priority 10), and d1-mid / d0-high are never touched
    assert names(cluster) == {"d0-low", "d0-high", "d1-mid", "hi"}


NOW = datetime.fromisoformat("2026-03-01T00:00:00+00:00").timestamp()


def victim(name: str, priority: int, start: str = "") -> PodInfo:
    return PodInfo(f"u-{name}", "default", name, priority=priority, start_time=start)


CANDIDATE_RANKS = [
    # id, candidates (node, victims as (name, priority, startTime)), the node picked
    ("lowest-top-priority-then-sum-then-fewest-then-latest-start",
     [("x", [("x1", 50, "2026-01-01T00:00:00Z")]), ("y", [("y1", 10, "2026-01-01T00:00:00Z"),
                                                           ("y2", 10, "2026-01-01T00:00:00Z")]),
      ("z", [("z1", 10, "2026-01-01T00:00:00Z")]), ("w", [("w1", 10, "2026-02-01T00:00:00Z")])], "w"),
    ("only-the-highest-priority-victims-start-times-count",
     [("early-low", [("e-hi", 50, "2026-01-10T00:00:00Z"), ("e-lo", 10, "2026-01-01T00:00:00Z")]),
      ("late-low", [("l-hi", 50, "2026-01-05T00:00:00Z"), ("l-lo", 10, "2026-01-20T00:00:00Z")])], "early-low"),
    ("two-top-victims-the-earlier-of-them-counts",
     [("p", [("p1", 50, "2026-01-10T00:00:00Z"), ("p2", 50, "2026-01-02T00:00:00Z")]),
      ("q", [("q1", 50, "2026-01-05T00:00:00Z"), ("q2", 50, "2026-01-06T00:00:00Z")])], "q"),
    ("a-victim-without-startTime-counts-as-started-now",
     [("unstarted", [("u1", 10, "")]), ("started", [("s1", 10, "2026-02-01T00:00:00Z")])], "unstarted"),
    ("an-unstarted-top-victim-beats-an-early-lower-one",
     [("m", [("m-hi", 50, ""), ("m-lo", 10, "2020-01-01T00:00:00Z")]),
      ("n", [("n-hi", 50, "2026-01-01T00:00:00Z"), ("n-lo", 10, "2026-02-01T00:00:00Z")])], "m"),
    ("all-equal-the-name-decides",
     [("k2", [("k2v", 10, "")]), ("k1", [("k1v", 10, "")])], "k1"),
]


@pytest.mark.parametrize("candidates, picked", [c[1:] for c in CANDIDATE_RANKS], ids=[c[0] for c in CANDIDATE_RANKS])
def test_candidate_ranking(candidates: list[tuple[str, list[tuple[str, int, str]]]], picked: str) -> None:
    """pickOneNodeForPreemption's criteria after the budget violations: the lowest
    highest-priority victim, the lowest sum of priorities, the fewest victims, then the latest
    earliest start time among the victims of the highest priority only (GetEarliestPodStartTime),
    a victim with no status.startTime counting as started now (GetPodStartTime)."""
    cands = [logic.Candidate(node, tuple(victim(*v) for v in vs)) for node, vs in candidates]
    assert logic.pick(cands, NOW).node == picked
    assert logic.pick(list(reversed(cands)), NOW).node == picked


def test_debug_queue_shows_nominated_and_gated_pods() -> None:
    gated = pending("gated", 1, 7)
    gated["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    engine, cluster = setup(FULL, HOLDERS + [gated])
    filter_on(engine, cluster, pending("hi", 2, 100), ["a", "b"])
    state = engine.queue_state()
    assert [(n["pod"], n["node"]) for n in state["nominated"]] == [("default/hi", "a")]
    assert [(g["pod"], g["gates"]) for g in state["gated"]] == [("default/gated", ["kube-extender.io/admission"])]
    assert state["waitingInPermit"] == []


def test_a_victim_allowed_in_permit_before_the_reject_is_evicted_instead() -> None:
    """w waits in Permit on a and is allowed (a Gang quorum, say) just before hi preempts: its
    bind thread has woken but not yet left the waiting room, so a reject no longer takes. Such a
    victim is evicted instead (it is about to be bound); it was counted as rejected - a
    Preempted Event, recorded going - and, bound and running, held hi back for ever."""
    engine, cluster, entered = waiting_in_permit()
    room = engine.handle.waiting_pods
    woke, leave = threading.Event(), threading.Event()
    real_remove = room.remove

    def remove(uid: str) -> None:  # the bind thread, woken by allow(), is descheduled before it leaves
        if uid == "u-w":
            woke.set()
            leave.wait(5)
        real_remove(uid)

    room.remove = remove
    result: list[str] = []
    binding = threading.Thread(target=lambda: result.append(engine.bind("default", "w", "u-w", "a")))
    binding.start()
    assert entered.wait(5)
    room.get("u-w").allow("Gate")  # e.g. the group reached its quorum
    assert woke.wait(5)
    first = filter_on(engine, cluster, pending("hi", 2, 100), ["a"])
    leave.set()
    binding.join(5)
    assert len(result) == 1, "the bind ended (bound then evicted, or failed: w was deleted first)"
    preempted = ("default/w", "Preempted") in [(e["object"], e["reason"]) for e in cluster.events]
    again = engine.filter(cluster.get_pod("default", "hi"), ["a"])
    going = engine.handle.evictions.going(engine.cache.snapshot())
    assert first.nominated == "a" and preempted
    assert cluster.get_pod("default", "w") is None or cluster.get_pod("default", "w")["metadata"].get(
        "deletionTimestamp"), "the reject did not take: w is evicted instead"
    assert again.nominated == "a" or again.feasible == ["a"], f"hi is held back for ever (going: {sorted(going)})"


def test_a_victim_rejected_in_permit_that_binds_again_is_no_leaving_pod() -> None:
    """w (priority 10) waits in Permit on a when hi (100) preempts there: w is rejected (not
    deleted: its UID lives on, it is pending again) and recorded in Evictions as going. hi is then
    deleted before it binds, and w - retried by kube-scheduler - binds to a again (nothing asked
    Evictions.going in between: no PDB, no other preemption). Evictions only forgets a pod the
    snapshot shows deleting or gone from its node, so w, bound and running on a, stays "leaving":
    hi2 (100), which needs w's room, is merely nominated to wait for w (Candidate.waits, nothing
    evicted) and from then on is held back ("waiting for earlier victims to terminate") for as
    long as w runs."""
    engine, cluster, entered = waiting_in_permit(once=True)
    result: list[str] = []
    binding = threading.Thread(target=lambda: result.append(engine.bind("default", "w", "u-w", "a")))
    binding.start()
    assert entered.wait(5)
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a"]).nominated == "a"
    binding.join(5)
    assert result and result[0].startswith("permit failed"), result
    cluster.delete_pod("default", "hi")  # the preemptor goes away before it binds
    assert engine.filter(cluster.get_pod("default", "w"), ["a"]).feasible == ["a"]
    assert engine.bind("default", "w", "u-w", "a") == ""  # w is back, bound and running on a
    evicted_before = {p["metadata"]["name"] for p in cluster.pods()}
    outcome = filter_on(engine, cluster, pending("hi2", 2, 100), ["a"])
    evicted = evicted_before - {p["metadata"]["name"] for p in cluster.pods()}
    again = engine.filter(cluster.get_pod("default", "hi2"), ["a"])
    assert evicted == {"w"}, (f"w (bound, running on a) is taken for a pod leaving: hi2 nominated={outcome.nominated} "
                              f"evicting nothing; hi2's retry nominated={again.nominated} (held back), going="
                              f"{sorted(engine.handle.evictions.going(engine.cache.snapshot()))}")


def test_a_victim_whose_bind_fails_just_before_the_reject_is_not_left_going() -> None:
    """w waits in Permit on a; hi preempts. Right after evict() finds w in the waiting room, w's
    bind fails on its own (its Permit rejected it, or timed out): the bind thread unreserves,
    forgets w and discards it from the evictions - before evict() recorded it, which then
    recorded w going with nobody left to forget it (bound again, it would count as leaving for
    as long as it ran). w, out of the room by then, is evicted as any other victim is."""
    engine, cluster, entered = waiting_in_permit()
    room = engine.handle.waiting_pods
    real_get = room.get
    result: list[str] = []
    armed: list[bool] = []

    def get(uid: str) -> Any:
        found = real_get(uid)
        if uid == "u-w" and found is not None and armed:
            armed.clear()  # once: the bind fails first, and its thread ends before evict goes on
            found.reject("Gate", "rejected by the gate itself")
            binding.join(5)
            assert result and result[0].startswith("permit failed"), result
        return found

    room.get = get  # type: ignore[method-assign]
    binding = threading.Thread(target=lambda: result.append(engine.bind("default", "w", "u-w", "a")))
    binding.start()
    assert entered.wait(5)
    armed.append(True)
    assert filter_on(engine, cluster, pending("hi", 2, 100), ["a"]).nominated == "a"
    assert not armed, "evict never looked w up in the waiting room"
    assert "u-w" not in engine.handle.evictions.going(engine.cache.snapshot())
    assert "w" not in names(cluster), "out of the waiting room by then: evicted as any other victim"
