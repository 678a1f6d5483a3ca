"""kube-extender in-process behind the emulated kube-scheduler: binpack vs spread, preemption
driven by an in-tree shortage with the preempt verb refining the candidates, and the §13.4
observation that an ignoredByScheduler-only shortage never reaches the preempt verb."""

from __future__ import annotations

from collections import Counter

import pytest
from builders import GPU, make_node, make_pod
from simkit import OurServer, profile, scheduler_for

from extender.sim.scheduler import Scheduler


def gpu_nodes(n: int, gpus: int = 4) -> list[dict]:
    return [make_node(f"node-{i}").alloc(gpu=gpus).obj() for i in range(n)]


@pytest.mark.parametrize("strategy, expected", [("MostAllocated", [4, 4]), ("LeastAllocated", [2, 2, 2, 2])])
def test_binpack_or_spread_follows_the_nodeResources_scoring_strategy(strategy: str, expected: list[int]) -> None:
    ours = OurServer(gpu_nodes(4), profiles=profile(strategy))
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], seed=7)
    for i in range(8):
        ours.cluster.add_pod(make_pod(f"p{i}").req(gpu=1).obj())
    summary = scheduler.run()
    assert summary.binds == 8
    per_node = Counter(p["spec"]["nodeName"] for p in ours.cluster.pods())
    assert sorted(per_node.values(), reverse=True) == expected
    # the extender's score decided: its term outweighs the in-tree spread of non-zero requests
    decided = [c for c in scheduler.cycles if c.scores]
    assert decided and all(c.totals[c.node] == max(c.totals.values()) for c in decided)
    snap = ours.snapshot()
    assert sorted((n["allocated"].get(GPU, "0") for n in snap["nodes"]), reverse=True)[:len(expected)] == [
        str(v) for v in expected]


def preemption_cluster() -> tuple[list[dict], list[dict]]:
    """n1: low-a (priority 10) holds 3 of 4 cpus; n2: low-b (priority 5) holds 3 cpus and high-c
    (priority 1000) holds all 4 GPUs. The preemptor (priority 500) needs 2 cpus and 2 GPUs."""
    nodes = [make_node(n).alloc(cpu="4", gpu=4).obj() for n in ("n1", "n2")]
    pods = [
        make_pod("low-a").uid("uid-low-a").req(cpu="3").priority(10).node("n1").obj(),
        make_pod("low-b").uid("uid-low-b").req(cpu="3").priority(5).node("n2").obj(),
        make_pod("high-c").uid("uid-high-c").req(gpu=4).priority(1000).node("n2").obj(),
    ]
    return nodes, pods


def test_in_tree_shortage_preemption_refined_by_the_preempt_verb() -> None:
    nodes, pods = preemption_cluster()
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)])
    preemptor = make_pod("urgent").uid("uid-urgent").req(cpu="2", gpu=2).priority(500).obj()
    ours.cluster.add_pod(preemptor)
    scheduler.run()

    first, second = scheduler.cycles[:2]
    assert first.outcome == "unschedulable"
    assert first.message == "0/2 nodes are available: 2 Insufficient cpu."
    # kube-scheduler's dry run (in-tree only) proposed both nodes; the extender kept n1 only
    assert first.preemption["candidates"] == {"n1": ["default/low-a"], "n2": ["default/low-b"]}
    (call,) = ours.calls("preempt")
    body = call.json()
    assert body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": "uid-low-a"}], "NumPDBViolations": 0},
                                             "n2": {"Pods": [{"UID": "uid-low-b"}], "NumPDBViolations": 0}}
    (round_,) = first.preemption["extenders"]
    assert round_["kept"] == {"n1": ["uid-low-a"]}
    assert first.preemption["chosen"] == "n1" and first.preemption["victims"] == ["default/low-a"]
    # victims deleted, low-b and high-c untouched, the preemptor nominated then bound on n1
    assert ours.cluster.get_pod("default", "low-a") is None
    assert ours.cluster.get_pod("default", "low-b") is not None
    assert second.outcome == "scheduled" and second.node == "n1" and second.evaluated == 1  # nominated node first
    assert ours.calls("filter")[-1].json()["NodeNames"] == ["n1"]  # the extender got a one-node list (§4.1.4)
    assert ours.calls("preempt")[0] is call and not ours.calls("prioritize")
    assert ours.cluster.get_pod("default", "urgent")["spec"]["nodeName"] == "n1"
    assert scheduler.traces["uid-low-a"].state == "preempted" and scheduler.traces["uid-low-a"].preempted_by == "default/urgent"
    assert [e["reason"] for e in ours.cluster.events if e["object"] == "default/low-a"] == ["Preempted"]


def test_without_the_preempt_verb_the_tie_breakers_pick_a_useless_victim() -> None:
    nodes, pods = preemption_cluster()
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(preemptVerb=None), ours.transport)],
                              max_virtual_seconds=30)
    ours.cluster.add_pod(make_pod("urgent").uid("uid-urgent").req(cpu="2", gpu=2).priority(500).obj())
    scheduler.run()
    first = scheduler.cycles[0]
    # lowest highest-victim priority wins: n2 (low-b, 5) over n1 (low-a, 10) - but n2 has no free GPU
    assert first.preemption["chosen"] == "n2" and ours.cluster.get_pod("default", "low-b") is None
    assert ours.calls("preempt") == []
    # next attempt: the nominated node n2 passes the in-tree filters but the extender rejects it
    # (GPUs); preemption runs again and now evicts low-a on n1 - two evictions where one was enough
    second, third = scheduler.cycles[1:3]
    assert second.outcome == "unschedulable" and second.preemption["chosen"] == "n1"
    assert "Insufficient example.com/gpu" in second.statuses["n2"]
    assert third.outcome == "scheduled" and third.node == "n1"
    assert ours.cluster.get_pod("default", "low-a") is None
    assert ours.cluster.get_pod("default", "urgent")["spec"]["nodeName"] == "n1"
    assert sorted(t.key for t in scheduler.traces.values() if t.state == "preempted") == ["default/low-a",
                                                                                          "default/low-b"]


def test_ignored_by_scheduler_only_shortage_never_calls_preempt() -> None:
    """§13.4: the dry run finds the pod fits every node without victims ("expected at least one
    victim pod on node X"), no candidates, the preempt verb is never called, the pod stays pending."""
    nodes = [make_node(n).alloc(gpu=2).obj() for n in ("g1", "g2", "g3")]
    pods = [make_pod(f"batch-{n}").req(gpu=2).priority(10).node(n).obj() for n in ("g1", "g2", "g3")]
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], max_virtual_seconds=60)
    ours.cluster.add_pod(make_pod("vip").req(gpu=2).priority(1000).obj())
    scheduler.run()

    assert ours.calls("filter") and ours.calls("preempt") == []
    first = scheduler.cycles[0]
    assert first.outcome == "unschedulable"
    assert first.message.startswith("0/3 nodes are available: 3 Insufficient example.com/gpu. preemption: [expected "
                                    "at least one victim pod on node")
    assert first.preemption["result"] == "error" and first.preemption["candidates"] == {}
    vip = ours.cluster.get_pod("default", "vip")
    assert "nodeName" not in vip["spec"] and "nominatedNodeName" not in vip["status"]
    assert all(ours.cluster.get_pod("default", f"batch-{n}") is not None for n in ("g1", "g2", "g3"))
    assert scheduler.traces[vip["metadata"]["uid"]].state == "pending"


def test_preemption_policy_never_is_not_eligible() -> None:
    nodes, pods = preemption_cluster()
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)])
    ours.cluster.add_pod(make_pod("polite").req(cpu="2", gpu=2).priority(500).never_preempt().obj())
    scheduler.run()
    assert scheduler.cycles[0].message.endswith("preemption: not eligible due to preemptionPolicy=Never..")
    assert ours.calls("preempt") == [] and ours.cluster.get_pod("default", "low-a") is not None


def test_preemption_clears_lower_priority_nominations_to_the_chosen_node() -> None:
    """``prepareCandidate``: pods of lower priority nominated to the node lose their nomination."""
    nodes = [make_node("n1").alloc(cpu="4").obj()]
    victim = make_pod("victim").req(cpu="3").priority(0).node("n1").obj()
    waiting = make_pod("waiting").req(cpu="3").priority(5).obj()
    waiting["status"]["nominatedNodeName"] = "n1"
    ours = OurServer(nodes, [victim])
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)])
    ours.cluster.add_pod(make_pod("boss").req(cpu="2").priority(100).obj())
    ours.cluster.add_pod(waiting)
    scheduler.run()
    first = scheduler.cycles[0]
    assert first.pod == "default/boss" and first.preemption["chosen"] == "n1"
    assert ours.cluster.get_pod("default", "boss")["spec"]["nodeName"] == "n1"
    waiting_now = ours.cluster.get_pod("default", "waiting")
    assert "nominatedNodeName" not in waiting_now["status"] and "nodeName" not in waiting_now["spec"]


def _bystander_leaves_at_one_second(ours: OurServer, scheduler: Scheduler) -> None:
    """A pod on n2 that requests nothing, deleted (at once) at t=1: an assigned pod's deletion,
    which moves a preemptor NodeResourcesFit rejected out of the pool - a retry while its
    victims still terminate. (The victims' own updates reach kube-scheduler after the
    preemptor's cycle, as an informer's do, and move nobody.)"""
    ours.cluster.add_pod(make_pod("bystander").uid("uid-bystander").priority(1000).node("n2").obj())
    scheduler.at(scheduler.clock.now() + 1, "bystander leaves",
                 lambda: ours.cluster.delete_pod("default", "bystander", grace_period_seconds=0))


def test_victims_terminate_gracefully_when_the_kubelet_is_emulated() -> None:
    """With graceful termination on, low-a (3 s grace) stays on n1, deleting, after the
    preemption: urgent's retry (at t=1, a bystander's deletion) finds it still there and is not
    eligible to preempt again (a terminating victim on its nominated node); it binds once low-a
    is gone, at t=3."""
    nodes, pods = preemption_cluster()
    pods[0]["spec"]["terminationGracePeriodSeconds"] = 3
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], graceful_termination=True)
    _bystander_leaves_at_one_second(ours, scheduler)
    ours.cluster.add_pod(make_pod("urgent").uid("uid-urgent").req(cpu="2", gpu=2).priority(500).obj())
    scheduler.run()
    timeline = [(round(c.time - scheduler.clock.start, 3), c.outcome) for c in scheduler.cycles]
    assert timeline == [(0, "unschedulable"), (1, "unschedulable"), (3, "scheduled")]
    assert scheduler.cycles[0].preemption["victims"] == ["default/low-a"]
    assert scheduler.cycles[1].message.endswith("preemption: not eligible due to a terminating pod on the nominated node..")
    assert ours.cluster.get_pod("default", "urgent")["spec"]["nodeName"] == "n1"
    assert ours.cluster.get_pod("default", "low-a") is None and ours.cluster.get_pod("default", "low-b") is not None


def test_graceful_termination_needs_a_cluster_that_emulates_it() -> None:
    class NoKubelet:
        def start(self, sink: object) -> None: ...

    with pytest.raises(ValueError, match="graceful termination"):
        scheduler_for(NoKubelet(), [], graceful_termination=True)


def test_only_victims_of_kube_schedulers_preemption_make_a_nominee_wait() -> None:
    """kube-scheduler 1.29-1.31 (PodDisruptionConditions on) calls a nominated pod not eligible
    to preempt again only for lower-priority pods terminating *by its preemption* (condition
    DisruptionTarget, reason PreemptionByScheduler, written on each victim before deleting it).
    low-a, deleted by its owner, terminates on urgent's nominated node n1: urgent is eligible,
    and its dry run takes low-a for its victim like any lower-priority pod (nothing else is
    deleted); from then on low-a terminates by preemption and urgent, tried again at t=1 (a
    bystander's deletion), waits for it."""
    nodes, pods = preemption_cluster()
    ours = OurServer(nodes, pods)
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], graceful_termination=True)
    _bystander_leaves_at_one_second(ours, scheduler)
    ours.cluster.delete_pod("default", "low-a")  # its owner deletes it: it terminates for 30 s
    urgent = make_pod("urgent").uid("uid-urgent").req(cpu="2", gpu=2).priority(500).obj()
    urgent["status"]["nominatedNodeName"] = "n1"
    ours.cluster.add_pod(urgent)
    scheduler.run()
    first, second = scheduler.cycles[:2]
    assert first.preemption["result"] == "preempted" and first.preemption["victims"] == ["default/low-a"]
    assert "not eligible due to a terminating pod" in second.message
    assert [(round(c.time - scheduler.clock.start), c.outcome) for c in scheduler.cycles][-1] == (30, "scheduled")
    assert ours.cluster.get_pod("default", "low-b") is not None


BUDGET = {"metadata": {"name": "w", "namespace": "default"},
          "spec": {"selector": {"matchLabels": {"app": "w"}}, "minAvailable": "50%"}}


def _covered(name: str, node: str = "", scheduler: str = "") -> dict:
    builder = make_pod(name).uid(f"u-{name}").labels(app="w").req(cpu="1")
    builder = builder.node(node) if node else builder
    return (builder.scheduler(scheduler) if scheduler else builder).obj()


def test_budgets_expect_every_covered_pod_once() -> None:
    """As the disruption controller counts (minAvailable 50%): pending covered pods of any
    scheduler are expected too (2 bound + 2 pending of another scheduler: none allowed), and a
    pod assumed after an update during its own cycle is on its node, not also pending (1 bound
    + 1 assumed: one allowed)."""
    nodes = [make_node("n1").alloc(cpu="4").obj()]
    ours = OurServer(nodes, [_covered("w0", "n1"), _covered("w1", "n1"), _covered("o0", scheduler="other"),
                             _covered("o1", scheduler="other")])
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], pdbs=[BUDGET])
    (budget,) = scheduler.budgets(scheduler.cache.snapshot())
    assert budget.disruptions_allowed == 0

    ours = OurServer(nodes, [_covered("w0", "n1"), _covered("x")])
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], pdbs=[BUDGET])
    qp = scheduler.queue.pop()
    assert qp is not None
    ours.cluster.patch_pod_metadata("default", "x", annotations={"touched": "1"})  # a fresh entry for x
    scheduler.cache.assume(qp.record, "n1")
    scheduler.queue.binding(qp)
    (budget,) = scheduler.budgets(scheduler.cache.snapshot())
    assert budget.disruptions_allowed == 1
