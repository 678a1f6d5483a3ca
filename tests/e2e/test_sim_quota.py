"""Elastic quotas end to end (issue 17): the emulated kube-scheduler (``extender.sim``) drives
kube-extender in-process over one MemoryCluster and one virtual clock (``simkit.virtual_world``),
with CapacityQuota enabled. Quotas come from ElasticQuota objects or from the plugin's args.

Borrowing, the max cap, reclaim from borrowers (whatever their priority), quota-ordered admission
through the scheduling gate, and a gang judged whole at admission.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import GPU, make_elastic_quota, make_node, make_pod
from simkit import OurServer, virtual_world

from extender.sim.scheduler import Scheduler

GATE = "kube-extender.io/admission"
GROUP = "scheduling.x-k8s.io/pod-group"


def quota_config(quotas: dict[str, Any] | None = None) -> dict[str, Any]:
    """ExtenderConfiguration overrides: CapacityQuota (beside NodeResources), its PostFilter in
    place of any other preemption; ``quotas``: the plugin's args (quotas from configuration)."""
    profile: dict[str, Any] = {"schedulerName": "default-scheduler",
                               "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}, {"name": "Gang"}]}}}
    if quotas is not None:
        profile["pluginConfig"] = [{"name": "CapacityQuota", "args": {"quotas": quotas}}]
    return {"profiles": [profile]}


def pod(name: str, ns: str, gpus: int = 1, priority: int = 0, gated: bool = False,
        group: str | None = None) -> dict[str, Any]:
    built = make_pod(name, ns).uid(f"u-{ns}-{name}").req(gpu=gpus).priority(priority)
    if group:
        built = built.labels(**{GROUP: group})
    obj = built.obj()
    if group:
        obj["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": "1"}
    if gated:
        obj["spec"]["schedulingGates"] = [{"name": GATE}]
    return obj


def bound(ours: OurServer, ns: str | None = None) -> list[str]:
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in ours.cluster.pods()
                  if p["spec"].get("nodeName") and (ns is None or p["metadata"]["namespace"] == ns))


def statuses(scheduler: Scheduler, key: str) -> set[str]:
    return {m for c in scheduler.cycles if c.pod == key for m in c.statuses.values()}


def report(ours: OurServer) -> dict[str, Any]:
    reply = ours.app.test_client().get("/debug/quota")
    assert reply.status_code == 200
    return reply.get_json()


def events(ours: OurServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in ours.cluster.events if e["reason"] == reason]


TWO_TEAMS = {"team-a": {"min": {GPU: "2"}, "max": {GPU: "4"}}, "team-b": {"min": {GPU: "2"}, "max": {GPU: "4"}}}


def world(quotas_from: str, pods: list[dict[str, Any]], gpus: int = 4,
          quotas: dict[str, Any] = TWO_TEAMS) -> tuple[OurServer, Scheduler]:
    """One node of ``gpus`` GPUs; the quotas as ElasticQuota objects or as the plugin's args."""
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=gpus).obj()],
                                    scheduler={"pod_max_backoff_seconds": 1.0},
                                    **quota_config(quotas if quotas_from == "config" else None))
    if quotas_from == "crd":
        for ns, q in quotas.items():
            ours.cluster.add_elastic_quota(make_elastic_quota(ns, min=q.get("min"), max=q.get("max")))
    for p in pods:
        ours.cluster.add_pod(p)
    return ours, scheduler


SOURCES = ["crd", "config"]


@pytest.mark.parametrize("source", SOURCES)
def test_a_namespace_borrows_what_others_leave_unused_up_to_its_max(source: str) -> None:
    """team-a (min 2, max 4) asks for 5 GPUs while team-b uses nothing: it borrows team-b's 2
    unused guaranteed GPUs (4 bound), and the fifth pod is Unschedulable, saying the numbers."""
    ours, scheduler = world(source, [pod(f"a{i}", "team-a") for i in range(5)], gpus=8)
    scheduler.run()
    assert len(bound(ours, "team-a")) == 4
    left = next(p for p in ["a0", "a1", "a2", "a3", "a4"] if f"team-a/{p}" not in bound(ours))
    assert statuses(scheduler, f"team-a/{left}") == {
        "namespace team-a would use 5 example.com/gpu, above its max 4 (in use 4, asking 1)"}
    share = report(ours)["namespaces"]["team-a"][GPU]
    assert share == {"min": "2", "max": "4", "used": "4", "borrowed": "2", "lent": "0", "pending": "1"}
    assert report(ours)["namespaces"]["team-b"][GPU]["lent"] == "2"


def test_borrowing_stops_at_what_the_other_guarantees_leave_unused() -> None:
    """team-a (min 2, no max) may borrow only team-b's unused 2: with 8 GPUs free, 4 bind and the
    fifth says how much of the guarantees is unused."""
    quotas = {"team-a": {"min": {GPU: "2"}}, "team-b": {"min": {GPU: "2"}}}
    ours, scheduler = world("config", [pod(f"a{i}", "team-a") for i in range(5)], gpus=8, quotas=quotas)
    scheduler.run()
    assert len(bound(ours, "team-a")) == 4
    assert any("would borrow 3 example.com/gpu beyond its min 2, but only 0 of the namespaces' guaranteed 4 is unused"
               in m for c in scheduler.cycles for m in c.statuses.values())


@pytest.mark.parametrize("source", SOURCES)
def test_a_namespace_within_its_min_reclaims_from_borrowers_whatever_their_priority(source: str) -> None:
    """team-a's 4 high-priority pods fill the node (2 borrowed from team-b). team-b then asks
    for its guaranteed 2: two of team-a's pods - the lowest priority ones - are evicted although
    their priority is higher, team-b's pods bind, team-a keeps its min; Events on both sides."""
    priorities = [100, 50, 200, 60]
    ours, scheduler = world(source, [pod(f"a{i}", "team-a", priority=p) for i, p in enumerate(priorities)])
    scheduler.after(5, "team-b arrives", lambda: [ours.cluster.add_pod(pod(f"b{i}", "team-b")) for i in range(2)])
    scheduler.run()
    assert bound(ours) == ["team-a/a0", "team-a/a2", "team-b/b0", "team-b/b1"]
    preempted = events(ours, "Preempted")
    assert sorted(e["object"] for e in preempted) == ["team-a/a1", "team-a/a3"]
    assert all("namespace team-a borrows beyond its min" in e["message"] for e in preempted)
    preempting = events(ours, "Preempting")
    assert preempting and "reclaimed namespace team-b's guaranteed quota from borrowers" in preempting[0]["message"]
    shares = report(ours)["namespaces"]
    assert shares["team-a"][GPU]["used"] == "2" and shares["team-b"][GPU]["used"] == "2"


def test_reclaim_never_takes_a_namespace_below_its_min_and_a_borrower_cannot_reclaim() -> None:
    """team-a holds 3 GPUs (min 2: 1 borrowed), team-b 1 (of min 2) on a 4-GPU node. team-b's
    second pod reclaims one of team-a's (not two: team-a stays at its min). team-b's third pod
    is beyond its min: it may not take from team-a at all, though team-a's pods have a lower
    priority (nor from team-b's own, of higher priority)."""
    ours, scheduler = world("config", [pod(f"a{i}", "team-a") for i in range(3)]
                            + [pod("b0", "team-b", priority=2000)])
    scheduler.after(5, "b1", lambda: ours.cluster.add_pod(pod("b1", "team-b", priority=2000)))
    scheduler.after(10, "b2", lambda: ours.cluster.add_pod(pod("b2", "team-b", priority=1000)))
    scheduler.run()
    assert len(bound(ours, "team-a")) == 2
    assert bound(ours, "team-b") == ["team-b/b0", "team-b/b1"]
    assert len(events(ours, "Preempted")) == 1


def test_inside_a_namespace_preemption_stays_by_priority() -> None:
    """team-a at its max: a higher-priority pod of team-a evicts the lowest-priority one of its
    own namespace; a lower-priority one evicts nothing."""
    quotas = {"team-a": {"min": {GPU: "2"}, "max": {GPU: "2"}}}
    ours, scheduler = world("config", [pod("low", "team-a", priority=1), pod("mid", "team-a", priority=5)],
                            quotas=quotas)
    scheduler.after(5, "high", lambda: ours.cluster.add_pod(pod("high", "team-a", priority=10)))
    scheduler.after(10, "lowest", lambda: ours.cluster.add_pod(pod("lowest", "team-a", priority=0)))
    scheduler.run()
    assert bound(ours) == ["team-a/high", "team-a/mid"]
    assert [e["object"] for e in events(ours, "Preempted")] == ["team-a/low"]


def test_admission_lets_through_only_what_the_quota_allows_in_queue_order() -> None:
    """Five gated pods of team-a (max 2; one of higher priority, created last): the two first in
    queue order (the high-priority one first) are admitted, the others stay gated with the
    numbers on a WaitingForAdmission Event; when an admitted pod ends, the next one goes."""
    quotas = {"team-a": {"min": {GPU: "2"}, "max": {GPU: "2"}}}
    pods = [pod(f"p{i}", "team-a", gated=True, priority=100 if i == 4 else 0) for i in range(5)]
    for i, p in enumerate(pods):
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
    ours, scheduler = world("config", pods, gpus=8, quotas=quotas)
    ours.drive(scheduler, every=1.0, until=20)
    scheduler.after(10.5, "p0 ends", lambda: ours.cluster.delete_pod("team-a", "p0"))
    scheduler.run()
    admitted = [names for _, name, names in ours.passes if name == "admission"]
    assert admitted[0] == ["team-a/p4", "team-a/p0"]
    assert admitted[1] == ["team-a/p1"]
    assert bound(ours) == ["team-a/p1", "team-a/p4"]
    held = [e for e in events(ours, "WaitingForAdmission") if e["object"] == "team-a/p2"]
    assert held and "CapacityQuota: namespace team-a would use 3 example.com/gpu, above its max 2 (in use 2, asking 1)" \
        in held[0]["message"]
    # no pod over quota ever reached kube-scheduler
    assert {c.pod for c in scheduler.cycles} == {"team-a/p0", "team-a/p1", "team-a/p4"}


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    """team-a may use 3 GPUs: a group of 4 members stays gated entirely (the numbers name the
    group); a group of 3 is admitted at once and binds."""
    quotas = {"team-a": {"min": {GPU: "3"}, "max": {GPU: "3"}}}
    big = [pod(f"big{i}", "team-a", gated=True, group="big") for i in range(4)]
    small = [pod(f"small{i}", "team-a", gated=True, group="small") for i in range(3)]
    for p in big:
        p["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": "4"}
    for p in small:
        p["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": "3"}
        p["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"  # behind the big group in the queue
    ours, scheduler = world("config", big + small, gpus=8, quotas=quotas)
    ours.drive(scheduler, every=1.0, until=10)
    scheduler.run()
    assert bound(ours) == ["team-a/small0", "team-a/small1", "team-a/small2"]
    held = [e["message"] for e in events(ours, "WaitingForAdmission") if e["object"] == "team-a/big0"]
    assert "would use 4 example.com/gpu, above its max 3 (in use 0, asking 4) for pod group big (4 pending members)" \
        in held[0]
    assert not any(c.pod.startswith("team-a/big") for c in scheduler.cycles)


def test_a_gated_pod_within_its_min_reclaims_at_admission() -> None:
    """The node is full of team-a's borrowed pods; team-b's gated pods, within team-b's min, find
    no room at the gate: admission runs the PostFilter, which evicts two borrowers, and admits
    them nominated to the node - they bind without ever being rejected for room."""
    ours, scheduler = world("config", [pod(f"a{i}", "team-a", priority=100) for i in range(4)])
    ours.drive(scheduler, every=1.0, until=20)
    scheduler.after(5, "team-b arrives",
                    lambda: [ours.cluster.add_pod(pod(f"b{i}", "team-b", gated=True)) for i in range(2)])
    scheduler.run()
    assert bound(ours, "team-b") == ["team-b/b0", "team-b/b1"] and len(bound(ours, "team-a")) == 2
    assert len(events(ours, "Preempted")) == 2
    assert not any(c.pod.startswith("team-b/") and c.outcome != "scheduled" for c in scheduler.cycles)


def test_an_incomplete_gang_does_not_preempt_at_admission() -> None:
    """team-b's gated group of 3 has 2 members: Gang holds it at the gate, so no room is made for
    it though it is within team-b's min - nothing is evicted."""
    ours, scheduler = world("config", [pod(f"a{i}", "team-a", priority=100) for i in range(4)])
    ours.drive(scheduler, every=1.0, until=10)

    def arrive() -> None:
        for i in range(2):
            member = pod(f"b{i}", "team-b", gated=True, group="g")
            member["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": "3"}
            ours.cluster.add_pod(member)
    scheduler.after(5, "team-b arrives", arrive)
    scheduler.run()
    assert len(bound(ours, "team-a")) == 4 and events(ours, "Preempted") == []
    still = ours.cluster.get_pod("team-b", "b0")
    assert still is not None and still["spec"].get("schedulingGates") == [{"name": GATE}]


def test_kube_schedulers_own_preemption_never_takes_a_namespace_below_its_min() -> None:
    """GPUs counted by kube-scheduler too (``ignoredByScheduler: false``), so its own preemption
    proposes victims through the preempt verb. team-b's high-priority pod is beyond team-b's min:
    kube-scheduler proposes one of team-a's pods (lower priority, but within team-a's min); the
    extender drops it, and with it the node: team-a keeps its guarantee, the pod stays pending."""
    config = quota_config(TWO_TEAMS)
    config["managedResources"] = [{"name": GPU, "ignoredByScheduler": False}]
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=4).obj()], scheduler={"pod_max_backoff_seconds": 1.0},
                                    **config)
    for p in [pod("a0", "team-a"), pod("a1", "team-a"), pod("b0", "team-b", priority=50),
              pod("b1", "team-b", priority=50)]:
        ours.cluster.add_pod(p)
    scheduler.after(5, "b2", lambda: ours.cluster.add_pod(pod("b2", "team-b", priority=100)))
    scheduler.run()
    assert bound(ours, "team-a") == ["team-a/a0", "team-a/a1"] and events(ours, "Preempted") == []
    (attempt, *_) = [c for c in scheduler.cycles if c.pod == "team-b/b2"]
    assert attempt.preemption is not None and attempt.preemption["result"] == "vetoed"
    assert attempt.preemption["candidates"] == {"n1": ["team-a/a1"]} and attempt.preemption["extenders"][0]["kept"] == {}
