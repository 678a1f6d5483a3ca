"""Gang scheduling, admission through scheduling gates, nominations and the 1.29 nudge, end to
end (issue #6, item 7): the emulated kube-scheduler (``extender.sim``) drives kube-extender
in-process over one shared MemoryCluster and one virtual clock (``simkit.virtual_world``).

Binding cycles are real threads, as in kube-scheduler: a gang member's bind waits inside the
extender (Permit) while the emulator goes on scheduling the other members, and while only binds
are in flight virtual time follows the wall clock (``extender.sim.scheduler``, "Time"). The
extender's own timers (gang back-off, reservation TTL, nudge rate limits) run on the same
virtual clock; its background passes (admission, nudges) run as emulator actions
(``OurServer.drive``). The one Permit that must time out has httpTimeout 2s: a 1 s budget.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Callable, Sequence

import pytest
from builders import GPU, make_node, make_pod, make_pod_group
from simkit import OurServer, virtual_world

from extender.sim.records import CycleRecord
from extender.sim.scheduler import Scheduler

GROUP = "scheduling.x-k8s.io/pod-group"
MIN_MEMBER = "kube-extender.io/pod-group-min-member"
GATE = "kube-extender.io/admission"
OTHER_GATE = "other.io/quota"
NUDGED = "kube-extender.io/nudged-at"
ALLOCATION = "kube-extender.io/allocation"


# ---- helpers ----------------------------------------------------------------------------------------------

def gang_config(http_timeout: str = "5s", **gang_args: str) -> dict[str, Any]:
    """ExtenderConfiguration overrides: Gang enabled (beside the default NodeResources)."""
    profile: dict[str, Any] = {"schedulerName": "default-scheduler",
                               "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}}}
    if gang_args:
        profile["pluginConfig"] = [{"name": "Gang", "args": gang_args}]
    return {"extender": {"httpTimeout": http_timeout}, "profiles": [profile]}


def member(name: str, group: str, size: int | None = None, gpus: int = 1, gates: Sequence[str] = ()) -> dict[str, Any]:
    """A pod of ``group``; ``size`` sets the min-member annotation (None: none)."""
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).labels(**{GROUP: group}).obj()
    if size is not None:
        pod["metadata"]["annotations"] = {MIN_MEMBER: str(size)}
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def placed(ours: OurServer) -> dict[str, str]:
    """Pod name -> node, for the pods bound in the cluster."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in ours.cluster.pods() if p["spec"].get("nodeName")}


def pod_of(ours: OurServer, name: str) -> dict[str, Any]:
    pod = ours.cluster.get_pod("default", name)
    assert pod is not None, name
    return pod


def gates(ours: OurServer, name: str) -> list[str]:
    return [g["name"] for g in pod_of(ours, name)["spec"].get("schedulingGates") or []]


def at(scheduler: Scheduler, t: float) -> float:
    """Virtual seconds since the scheduler's start."""
    return round(t - scheduler.clock.start, 6)


def cycles_of(scheduler: Scheduler, name: str) -> list[CycleRecord]:
    return [c for c in scheduler.cycles if c.pod == f"default/{name}"]


def scheduled(scheduler: Scheduler) -> list[tuple[float, str]]:
    """(time, pod name) of every scheduling cycle that picked a node, in order."""
    return [(at(scheduler, c.time), c.pod.split("/")[1]) for c in scheduler.cycles if c.outcome == "scheduled"]


def bound_at(scheduler: Scheduler, name: str) -> float | None:
    trace = next(t for t in scheduler.traces.values() if t.key == f"default/{name}")
    return None if trace.bound_at is None else at(scheduler, trace.bound_at)


def bind_errors(ours: OurServer) -> dict[str, list[str]]:
    """Pod name -> the ``Error`` of each of its bind replies, in call order."""
    out: dict[str, list[str]] = {}
    for call in ours.calls("bind"):
        out.setdefault(call.json()["PodName"], []).append(json.loads(call.reply)["Error"])
    return out


def events(ours: OurServer, reason: str) -> list[str]:
    return [e["object"] for e in ours.cluster.events if e["reason"] == reason]


def look(ours: OurServer, scheduler: Scheduler) -> dict[str, Any]:
    """What is held right now, on both sides: bound pods, the extender's reservations, Permit
    waiters, managed GPUs allocated and assumed pods, and the emulator's assumed pods."""
    queue = ours.state.engine.queue_state()
    snap = ours.snapshot()
    return {
        "bound": placed(ours),
        "reserved": [r["owner"] for r in queue["reserved"]],
        "waiting": [w["pod"] for w in queue["waitingInPermit"]],
        "allocated": sum(int(n["allocated"].get(GPU, "0")) for n in snap["nodes"]),
        "assumed": snap["sizes"]["assumed_pods"],
        "emulator_assumed": sorted(p.key for n in scheduler.cache.snapshot().nodes.values() for p in n.pods.values()
                                   if scheduler.cache.is_assumed(p.uid)),
    }


def probe(ours: OurServer, scheduler: Scheduler, t: float, into: list[dict[str, Any]]) -> None:
    """Record :func:`look` at virtual time ``t`` (seconds from now)."""
    def record() -> None:
        into.append({"t": at(scheduler, scheduler.clock.now()), **look(ours, scheduler)})

    scheduler.after(t, "look", record)


# ---- 1: two gangs that together exceed the cluster ----------------------------------------------------------

def sequential(first: str, second: str) -> list[str]:
    return [f"{first}{i}" for i in range(5)] + [f"{second}{i}" for i in range(5)]


def interleaved(first: str, second: str) -> list[str]:
    return [name for i in range(5) for name in (f"{first}{i}", f"{second}{i}")]


TWO_GANGS = [
    # arrival order of the pods, the gang whose first member is scheduled first, how it is deleted
    pytest.param(sequential("a", "b"), "a", "together", id="a-then-b"),
    pytest.param(interleaved("a", "b"), "a", "together", id="interleaved"),
    pytest.param(interleaved("b", "a"), "b", "together", id="interleaved-b-first"),
    pytest.param(interleaved("a", "b"), "a", "one-by-one", id="interleaved-deleted-one-by-one"),
]


@pytest.mark.parametrize("order, winner, deletion", TWO_GANGS)
def test_two_gangs_exceeding_capacity_one_completes_the_other_holds_nothing(order: list[str], winner: str,
                                                                            deletion: str) -> None:
    """Two 5-member gangs (1 GPU each) on n1 (4 GPUs) and n2 (1): each needs the whole cluster.
    Without planning each could bind part and wait for the rest for ever. The first member
    scheduled plans its whole group and reserves it; the other gang's members are rejected ("0 of
    5 members have room") and hold nothing, none of them reaches bind. As the winner's pods are
    deleted (at once, or one per second) the other gang, retried after each deletion, still holds
    nothing until it fits, then completes. kube-scheduler's pod back-off is capped at 1 s here, so
    every member is retried within a second of the last deletion (its first members wait in
    Permit for the others meanwhile)."""
    loser = "b" if winner == "a" else "a"
    nodes = [make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()]
    ours, scheduler = virtual_world(nodes, scheduler={"pod_max_backoff_seconds": 1.0}, **gang_config())
    for name in order:
        ours.cluster.add_pod(member(name, group=name[0], size=5))
    seen: list[dict[str, Any]] = []
    probe(ours, scheduler, 10, seen)
    deletions = [20.0 + (i if deletion == "one-by-one" else 0) for i in range(5)]
    for i, t in enumerate(deletions):
        scheduler.after(t, f"delete {winner}{i}", lambda i=i: ours.cluster.delete_pod("default", f"{winner}{i}"))
        if t != deletions[-1]:
            probe(ours, scheduler, t + 0.9, seen)  # after the loser's retries, while it does not fit yet
    last_deletion = deletions[-1]
    scheduler.run()

    winners, losers = [f"{winner}{i}" for i in range(5)], [f"{loser}{i}" for i in range(5)]
    before, during, after = seen[0], seen[1:], look(ours, scheduler)
    # the winner completed: all bound, on as few nodes as possible; nothing left reserved or waiting
    assert sorted(before["bound"]) == winners
    assert Counter(before["bound"].values()) == {"n1": 4, "n2": 1}
    assert before["reserved"] == [] and before["waiting"] == []
    assert before["allocated"] == 5 and before["assumed"] == 0 and before["emulator_assumed"] == []
    # the loser was tried, rejected everywhere for want of room, and never reached bind before it fit
    for name in losers:
        tries = [c for c in cycles_of(scheduler, name) if at(scheduler, c.time) < last_deletion]
        assert tries and all(c.outcome == "unschedulable" for c in tries), name
        assert tries[0].statuses == dict.fromkeys(
            ["n1", "n2"], f"pod group {loser} does not fit: 0 of 5 members have room (capacity held for other groups "
                          "counted)"), name
    assert [n for t, n in scheduled(scheduler) if n.startswith(loser) and t < last_deletion] == []
    # while the winner's pods go one by one the loser is retried, does not fit, and holds nothing
    assert len(during) == (4 if deletion == "one-by-one" else 0)
    for snap in during:
        assert not any(p.startswith(loser) for p in snap["bound"]), snap
        assert snap["reserved"] == [] and snap["waiting"] == [], snap
        assert snap["allocated"] == len(snap["bound"]), snap
    if deletion == "one-by-one":
        for i, t in enumerate(deletions[:-1]):
            retried = [c for c in scheduler.cycles
                       if c.pod.startswith(f"default/{loser}") and t <= at(scheduler, c.time) < t + 1]
            assert retried and {m for c in retried for m in c.statuses.values()} == {
                f"pod group {loser} does not fit: {i + 1} of 5 members have room (capacity held for other groups "
                "counted)"}
    # no deadlock: once the capacity is free the loser completes together, every bind succeeded
    assert sorted(after["bound"]) == losers and Counter(after["bound"].values()) == {"n1": 4, "n2": 1}
    times = {bound_at(scheduler, n) for n in losers}
    assert len(times) == 1 and last_deletion <= min(t for t in times if t is not None) <= last_deletion + 1, times
    assert after["reserved"] == [] and after["waiting"] == [] and after["allocated"] == 5
    assert scheduler.bind_failures == 0
    assert sorted(bind_errors(ours)) == sorted(winners + losers)
    assert all(errors == [""] for errors in bind_errors(ours).values())


# ---- 2: a Permit timeout releases everything -----------------------------------------------------------------

INCOMPLETE_GANGS = [
    # members' min-member annotation, the PodGroup's minMember (None: no PodGroup)
    pytest.param(3, None, id="annotation-says-3"),
    pytest.param(None, 3, id="podgroup-says-3"),
    pytest.param(2, 3, id="podgroup-wins-over-the-annotation"),
]


@pytest.mark.parametrize("annotated, pod_group", INCOMPLETE_GANGS)
def test_a_permit_timeout_releases_everything_and_the_capacity_is_usable(annotated: int | None,
                                                                         pod_group: int | None) -> None:
    """Group g needs 3 members of 2 GPUs; only 2 exist (no gate holds them back). Their plan fits
    the 6-GPU node, both reach bind and wait in Permit for a third that never comes: the 1 s
    budget (httpTimeout 2s) ends, both binds are denied, and nothing stays bound, assumed,
    reserved (the reservation TTL, 120 s, is longer than the test: it must be released, not
    expire) or annotated. The freed capacity then goes to another pod of the same priority; the
    group, back after its 60 s back-off, finds no room and holds nothing."""
    groups = [make_pod_group("g").min_member(pod_group).obj()] if pod_group is not None else []
    pods = [member(f"m{i}", "g", size=annotated, gpus=2) for i in range(2)]
    # the group's back-off makes the extender's answers depend on time, not only on the cluster:
    # the run must not stop once every pod was tried against the current cluster ("settled")
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=6).obj()], pods, pod_groups=groups,
                                    scheduler={"stop_when_settled": False, "max_virtual_seconds": 400},
                                    **gang_config(http_timeout="2s", backoff="60s", reservationTimeout="120s"))
    seen: list[dict[str, Any]] = []
    probe(ours, scheduler, 30, seen)  # long after the denials (virtual time follows the wall clock during binds)
    scheduler.after(30, "solo arrives", lambda: ours.cluster.add_pod(make_pod("solo").uid("u-solo").req(gpu=6).obj()))
    scheduler.run()

    first = [cycles_of(scheduler, f"m{i}")[0] for i in range(2)]
    assert [(c.outcome, c.node) for c in first] == [("scheduled", "n1")] * 2, "both members reached bind"
    errors = bind_errors(ours)
    assert sorted(errors) == ["m0", "m1", "solo"] and errors["solo"] == [""]
    for name in ("m0", "m1"):
        (error,) = errors[name]
        assert error.startswith(f"permit failed for pod default/{name} on n1: "), error
        assert "timed out waiting in Permit for Gang" in error or "pod group g: member default/m" in error, error
    assert scheduler.bind_failures == 2
    # after the denials: nothing held anywhere
    (then,) = seen
    assert then["bound"] == {} and then["reserved"] == [] and then["waiting"] == []
    assert then["allocated"] == 0 and then["assumed"] == 0 and then["emulator_assumed"] == []
    assert all(ALLOCATION not in (pod_of(ours, f"m{i}")["metadata"].get("annotations") or {}) for i in range(2))
    # retries during the group's back-off are refused before any planning
    backing_off = [c for i in range(2) for c in cycles_of(scheduler, f"m{i}")[1:] if at(scheduler, c.time) < 60]
    assert backing_off and all(set(c.statuses.values()) == {"pod group g is backing off after a timeout"}
                               for c in backing_off)
    # the capacity went to another pod; the group, tried again later, holds nothing
    assert placed(ours) == {"solo": "n1"} and bound_at(scheduler, "solo") == 30.0
    final = look(ours, scheduler)
    assert final["reserved"] == [] and final["waiting"] == [] and final["allocated"] == 6
    last = [cycles_of(scheduler, f"m{i}")[-1] for i in range(2)]
    assert all(at(scheduler, c.time) >= 60 and c.outcome == "unschedulable" for c in last)
    assert all(set(c.statuses.values()) == {"pod group g does not fit: 0 of 3 members have room (capacity held for "
                                            "other groups counted)"} for c in last)


def test_the_plan_is_held_while_members_wait_in_permit() -> None:
    """Group g (3 x 2 GPUs) plans the 6-GPU node; m0 and m1 wait in Permit (up to 3 s) for m2,
    which arrives at t=1.0. At t=0.75 "rival" (same priority, 2 GPUs) arrives. The slot planned
    for m2 is the group's while its members wait: the rival must be refused and the group
    complete. The reservation's TTL is 0.5 s (no claim or consume since t=0), shorter than the
    Permit wait."""
    pods = [member(f"m{i}", "g", size=3, gpus=2) for i in range(2)]
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=6).obj()], pods,
                                    **gang_config(permitTimeout="3s", reservationTimeout="500ms"))
    scheduler.after(0.75, "rival", lambda: ours.cluster.add_pod(make_pod("rival").uid("u-rival").req(gpu=2).obj()))
    scheduler.after(1.0, "last member", lambda: ours.cluster.add_pod(member("m2", "g", size=3, gpus=2)))
    scheduler.run()

    rival = cycles_of(scheduler, "rival")
    assert rival[0].outcome == "unschedulable" and rival[0].statuses == {"n1": "Insufficient example.com/gpu"}
    assert placed(ours) == {"m0": "n1", "m1": "n1", "m2": "n1"}
    assert scheduler.bind_failures == 0


# ---- 3: admission order with gated pods ---------------------------------------------------------------------

def gated(name: str, gpus: int, priority: int, created: str, *others: str) -> dict[str, Any]:
    b = make_pod(name).uid(f"u-{name}").priority(priority).created(f"2026-01-01T00:00:{created}Z")
    pod = (b.req(gpu=gpus) if gpus else b).obj()
    pod["spec"]["schedulingGates"] = [{"name": g} for g in (*others, GATE)]
    return pod


GATED = [  # created in this (scrambled) order; queue order is priority, then creation time
    gated("small", 1, 10, "02"),
    gated("cpu-only", 0, 0, "00"),
    gated("big", 4, 100, "05"),
    gated("older-small", 1, 10, "01"),
    gated("quota", 1, 10, "00", OTHER_GATE),
    gated("mid", 1, 50, "03"),
]

ADMISSION = [
    # strategy, admission passes that removed gates (t, pods in the order their gates were removed),
    # scheduling cycles that picked a node (t, pod), pods still carrying the extender's gate at the end
    pytest.param("BestEffortFIFO",
                 [(0.0, ["mid", "quota", "older-small", "small", "cpu-only"])],
                 [(0.0, "mid"), (0.0, "older-small"), (0.0, "small"), (0.0, "cpu-only")],
                 ["big"], id="best-effort-skips-the-head-that-does-not-fit"),
    pytest.param("StrictFIFO",
                 [(0.0, ["cpu-only"]), (11.0, ["big"])],
                 [(0.0, "cpu-only"), (11.0, "big")],
                 ["mid", "older-small", "small"], id="strict-head-blocks-those-wanting-gpus-until-it-fits"),
]


@pytest.mark.parametrize("strategy, removals, picked, still_gated", ADMISSION)
def test_admission_strategies_decide_which_gated_pods_kube_scheduler_gets(
        strategy: str, removals: list[tuple[float, list[str]]], picked: list[tuple[float, str]],
        still_gated: list[str]) -> None:
    """n1 has 4 GPUs, 1 taken by "running" until t=10.5; admission passes every second. The
    head of the queue, "big" (4 GPUs, priority 100), does not fit until then. BestEffortFIFO
    admits the others at once (gates removed in queue order: priority, then creation time) and
    kube-scheduler binds them; big starves. StrictFIFO holds every GPU pod behind big (only
    "cpu-only", wanting no managed resource, goes) and admits big first once it fits; the others
    stay gated behind the capacity big now holds (never admitted into a failed attempt). "quota"
    loses only the extender's gate and stays gated by the other one, so kube-scheduler never
    tries it."""
    running = make_pod("running").uid("u-running").req(gpu=1).node("n1").obj()
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=4).obj()], [running],
                                    admission={"strategy": strategy})
    for pod in GATED:
        ours.cluster.add_pod(pod)
    ours.drive(scheduler, every=1.0, until=20)
    scheduler.after(10.5, "running completes", lambda: ours.cluster.delete_pod("default", "running"))
    scheduler.run()

    assert [(t, what, [k.split("/")[1] for k in keys]) for t, what, keys in ours.passes] == [
        (t, "admission", names) for t, names in removals]
    assert scheduled(scheduler) == picked
    assert sorted(placed(ours)) == sorted(name for _, name in picked)
    assert [n for n in ("big", "mid", "older-small", "small", "cpu-only") if GATE in gates(ours, n)] == still_gated
    # only the extender's gate is ever removed: quota waits for the other one, never tried
    assert gates(ours, "quota") == ([OTHER_GATE, GATE] if strategy == "StrictFIFO" else [OTHER_GATE])
    assert cycles_of(scheduler, "quota") == []
    quota = next(t for t in scheduler.traces.values() if t.key == "default/quota")
    assert quota.gated and quota.state == "pending"
    if strategy == "StrictFIFO":
        # behind big until it fit, then behind the capacity it holds: kube-scheduler never tried them
        for name in ("mid", "older-small", "small"):
            assert cycles_of(scheduler, name) == []
    else:
        assert cycles_of(scheduler, "big") == []
        held = [g for g in ours.state.engine.queue_state()["gated"] if g["pod"] == "default/big"]
        assert held and held[0]["gates"] == [GATE]
        assert "no node has enough free example.com/gpu" in ours.state.admitter.last.held["default/big"]


# ---- 4: a nominee's capacity, NodeResources ----------------------------------------------------------------

NOMINATION = [
    # newcomer (name, priority), where it binds (None: it waits), whether "hi" keeps gpu-1
    pytest.param(("sneaky", 10), None, True, id="lower-priority-waits"),
    pytest.param(("peer", 100), None, True, id="equal-priority-waits"),
    pytest.param(("boss", 1000), "gpu-1", False, id="higher-priority-takes-it-and-clears-the-nomination"),
]


@pytest.mark.parametrize("newcomer, newcomer_node, kept", NOMINATION)
def test_a_nominated_pod_keeps_its_gpus_against_lower_priority_pods(newcomer: tuple[str, int],
                                                                    newcomer_node: str | None, kept: bool) -> None:
    """NodeResources with ManagedPreemption (whole GPUs; test_sim_device_share covers DeviceShare).
    gpu-1: "victim" (priority 1, 2 GPUs, 2 s to terminate) and "keeper" (1000, 2); gpu-2: "vip"
    (1000, 4). "hi" (100, 2 GPUs) fits nowhere at t=0: the extender evicts victim and nominates
    hi to gpu-1; the nomination reaches kube-scheduler after hi's cycle (a status change: hi
    stays in the pool) and hi waits for victim. At t=0.5 a newcomer asks for the same 2 GPUs:
    below or at hi's priority it is refused the held capacity (and has nothing to preempt); above, it is
    nominated there with no eviction of its own, takes the GPUs once victim is gone, and hi's
    nomination is cleared."""
    nodes = [make_node("gpu-1").alloc(gpu=4).obj(), make_node("gpu-2").alloc(gpu=4).obj()]
    victim = make_pod("victim").uid("u-victim").req(gpu=2).priority(1).node("gpu-1").obj()
    victim["spec"]["terminationGracePeriodSeconds"] = 2
    pods = [victim, make_pod("keeper").uid("u-keeper").req(gpu=2).priority(1000).node("gpu-1").obj(),
            make_pod("vip").uid("u-vip").req(gpu=4).priority(1000).node("gpu-2").obj()]
    ours, scheduler = virtual_world(nodes, pods, profiles=[{
        "schedulerName": "default-scheduler", "plugins": {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}}],
        scheduler={"graceful_termination": True})
    ours.cluster.add_pod(make_pod("hi").uid("u-hi").req(gpu=2).priority(100).obj())
    who, priority = newcomer
    seen: dict[str, Any] = {}

    def arrive() -> None:
        seen["hi"] = pod_of(ours, "hi")
        seen["victim"] = pod_of(ours, "victim")
        seen["nominated"] = ours.state.engine.queue_state()["nominated"]
        ours.cluster.add_pod(make_pod(who).uid(f"u-{who}").req(gpu=2).priority(priority).obj())

    scheduler.after(0.5, f"{who} arrives", arrive)
    scheduler.run()

    # at the newcomer's arrival hi was nominated to gpu-1, not bound, and its GPUs were held
    assert seen["hi"]["status"].get("nominatedNodeName") == "gpu-1" and "nodeName" not in seen["hi"]["spec"]
    assert seen["victim"]["metadata"].get("deletionTimestamp"), "the race is real: victim still terminates"
    assert [(n["pod"], n["node"]) for n in seen["nominated"]] == [("default/hi", "gpu-1")]
    first, second = (who, "hi") if newcomer_node else ("hi", who)
    assert [(at(scheduler, c.time), c.pod.split("/")[1], c.outcome) for c in scheduler.cycles] == [
        (0, "hi", "unschedulable"), (0.5, who, "unschedulable"), (2, first, "scheduled"), (2, second, "unschedulable")]
    hi_cycles, late_cycles = cycles_of(scheduler, "hi"), cycles_of(scheduler, who)
    assert events(ours, "Preempted") == ["default/victim"]
    hi, late = pod_of(ours, "hi"), pod_of(ours, who)
    if newcomer_node is None:
        assert late_cycles[0].statuses["gpu-1"] == "Insufficient example.com/gpu"
        assert "nodeName" not in late["spec"] and "nominatedNodeName" not in late["status"]
        assert hi["spec"]["nodeName"] == "gpu-1" and hi_cycles[1].evaluated == 1, "its nominated node alone"
        assert events(ours, "NominationCleared") == [] and events(ours, "Preempting") == ["default/hi"]
    else:
        assert late["spec"]["nodeName"] == newcomer_node
        assert events(ours, "Preempting") == ["default/hi", f"default/{who}"], "nominated, nothing evicted"
        assert events(ours, "NominationCleared") == ["default/hi"]
        assert "nodeName" not in hi["spec"] and "nominatedNodeName" not in hi["status"]
    assert kept == (hi["spec"].get("nodeName") == "gpu-1")
    gpu_1 = next(n for n in ours.snapshot()["nodes"] if n["name"] == "gpu-1")
    assert gpu_1["allocated"] == {GPU: "4"}, "never overcommitted"


# ---- 5: the 1.29 nudge -----------------------------------------------------------------------------------------

NUDGE = [
    # kube-scheduler version, nudge on, when the pod binds, whether the extender touched it
    pytest.param("1.29", False, lambda t: t == 330.0, False, id="1.29-waits-for-the-5-minute-flush"),
    pytest.param("1.29", True, lambda t: 5.2 < t <= 7.2, True, id="1.29-nudged-binds-within-seconds"),
    pytest.param("1.30", False, lambda t: t == 5.2, False, id="1.30-any-event-requeues"),
    pytest.param("1.30", True, lambda t: t == 5.2, False, id="1.30-needs-no-nudge"),
]


@pytest.mark.parametrize("version, nudge, binds_when, touched", NUDGE)
def test_the_nudge_gets_a_pod_rejected_by_an_in_tree_plugin_and_the_extender_retried(
        version: str, nudge: bool, binds_when: Callable[[float], bool], touched: bool) -> None:
    """Spec section 7, #122019: "picky" (1 GPU, nodeSelector zone=a) is rejected by NodeAffinity on
    b1 and by the extender on a1 ("holder" has both its GPUs). 1.29 records only NodeAffinity, so
    freeing a1's GPUs (holder deleted at t=5.2, an assigned-pod deletion NodeAffinity does not
    care about) leaves it in the unschedulable pool until the flush (t=330). With the nudge, the
    extender sees capacity released where NodeResources rejected, patches an annotation on the pod
    (an update 1.29 retries for) and the pod binds at the next pass (every 0.5 s). 1.30 records
    the Extender pseudo-plugin and retries on the deletion itself."""
    nodes = [make_node("a1").labels(zone="a").alloc(gpu=2).obj(), make_node("b1").labels(zone="b").alloc(gpu=4).obj()]
    holder = make_pod("holder").uid("u-holder").req(gpu=2).node("a1").obj()
    ours, scheduler = virtual_world(nodes, [holder], scheduler={"version": version},
                                    requeue={"nudge": nudge, "qps": 5, "minInterval": "10s"})
    picky = make_pod("picky").uid("u-picky").req(gpu=1).obj()
    picky["spec"]["nodeSelector"] = {"zone": "a"}
    ours.cluster.add_pod(picky)
    ours.drive(scheduler, every=0.5, until=20)
    scheduler.after(5.2, "holder completes", lambda: ours.cluster.delete_pod("default", "holder"))
    scheduler.run()

    first = cycles_of(scheduler, "picky")[0]
    assert first.outcome == "unschedulable" and first.queue == "unschedulable"
    assert first.statuses == {"a1": "Insufficient example.com/gpu",
                              "b1": "node(s) didn't match Pod's node affinity/selector"}
    assert first.plugins == (["NodeAffinity"] if version == "1.29" else ["Extender", "NodeAffinity"])
    when = bound_at(scheduler, "picky")
    assert when is not None and binds_when(when), when
    assert pod_of(ours, "picky")["spec"]["nodeName"] == "a1"
    annotations = pod_of(ours, "picky")["metadata"].get("annotations") or {}
    assert (NUDGED in annotations) == touched
    nudges = [(t, keys) for t, what, keys in ours.passes if what == "nudge"]
    assert nudges == ([(when, ["default/picky"])] if touched else [])
    assert len(cycles_of(scheduler, "picky")) == 2, "one failure, one success: no retry loop"


# ---- 6: a gang sized by its PodGroup -----------------------------------------------------------------------------

POD_GROUPS = [
    # members gated, when the third member is created (0: with the others)
    pytest.param(False, 0.0, id="plain"),
    pytest.param(False, 1.0, id="last-member-arrives-while-the-others-wait-in-permit"),
    pytest.param(True, 5.0, id="gated-until-the-group-is-complete"),
]


@pytest.mark.parametrize("with_gate, third_at", POD_GROUPS)
def test_a_gang_sized_by_its_podgroup_completes(with_gate: bool, third_at: float) -> None:
    """PodGroup "pg" says minMember 3; the members carry only the label. They bind together:
    all three at once (plain); the first two held in Permit until the third arrives 1 s later
    (their binds wait in the extender while kube-scheduler goes on); or, gated, admitted only
    once the third exists (nothing tried before)."""
    gate = (GATE,) if with_gate else ()
    ours, scheduler = virtual_world([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=4).obj()],
                                    [member(f"w{i}", "pg", gpus=2, gates=gate) for i in range(2)],
                                    pod_groups=[make_pod_group("pg").min_member(3).obj()],
                                    **gang_config(permitTimeout="4s"))
    third = member("w2", "pg", gpus=2, gates=gate)
    if third_at:
        scheduler.after(third_at, "third member", lambda: ours.cluster.add_pod(third))
    else:
        ours.cluster.add_pod(third)
    ours.drive(scheduler, every=1.0, until=10)
    scheduler.run()

    names = ["w0", "w1", "w2"]
    assert sorted(placed(ours)) == names
    assert scheduler.bind_failures == 0 and all(e == [""] for e in bind_errors(ours).values())
    assert [bound_at(scheduler, n) for n in names] == [third_at] * 3, "all bound when the group was complete"
    final = look(ours, scheduler)
    assert final["reserved"] == [] and final["waiting"] == [] and final["allocated"] == 6
    if with_gate:
        assert [c for c in scheduler.cycles if at(scheduler, c.time) < third_at] == [], "nothing tried gated"
        assert [(t, what, sorted(keys)) for t, what, keys in ours.passes] == [
            (third_at, "admission", [f"default/{n}" for n in names])]
    elif third_at:
        early = [c for c in scheduler.cycles if at(scheduler, c.time) < third_at]
        assert [(c.pod, c.outcome) for c in early] == [("default/w0", "scheduled"), ("default/w1", "scheduled")]
