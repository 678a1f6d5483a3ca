"""Gang through a real app: the adapter (policies/gang/plugin.py) and its side effects - binds held
in Permit and let go together, reservations planned at the first member, back-offs, requeues,
admission. The decisions themselves are tested against the manager (test_gang_manager.py) and the
planning rules against logic (test_gang_logic.py)."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest
from builders import cluster_objects, make_node, make_pod, make_pod_group
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.registration import PluginSpec
from extender.framework.status import Code, Status
from extender.runtime.registry import Registry
from policies.gang.plugin import _Offered

GROUP = "scheduling.x-k8s.io/pod-group"
NODES = ["n1", "n2"]
QUICK = "200ms"
"""A Permit timeout for tests in which members time out (Permit waits in real time)."""


def member(name: str, group: str = "g", size: int = 3, gpus: int = 1) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).labels(**{GROUP: group}).obj()
    pod["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": str(size)}
    return pod


def group_of(prefix: str, size: int, gpus: int = 1) -> list[dict[str, Any]]:
    return [member(f"{prefix}{i}", group=prefix, size=size, gpus=gpus) for i in range(size)]


def gang_state(nodes: dict[str, int], pods: list[dict], *, clock: Any = None, pod_groups: list[dict] | None = None,
               config: dict[str, Any] | None = None, probe: Any = None, points: dict[str, Any] | None = None,
               **gang_args: str) -> tuple[Any, MemoryCluster]:
    """The app state (engine, admitter, nudger) over nodes (name -> GPUs) with Gang and
    NodeResources; ``probe``: a test plugin enabled at ``points`` (plugin set per point)."""
    cluster = MemoryCluster(cluster_objects([make_node(n).alloc(gpu=g).obj() for n, g in nodes.items()], pods,
                                            pod_groups=pod_groups))
    registry = Registry()
    if probe is not None:
        registry.register(PluginSpec(probe.name, lambda args, handle: probe, parse_args=lambda raw: raw))
    cfg = config_of(**(config or {}),
                    profiles=[{"schedulerName": "default-scheduler",
                               "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}, **(points or {})},
                               "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s", **gang_args}}]}])
    return create_app(cfg, source=cluster, clock=clock, background=False, registry=registry).extensions["kube_extender"], cluster


def planned(nodes: dict[str, int], pods: list[dict], **kwargs: Any) -> tuple[Any, MemoryCluster]:
    state, cluster = gang_state(nodes, pods, **kwargs)
    return state.engine, cluster


def filter_pod(engine: Any, cluster: MemoryCluster, name: str, nodes: list[str]) -> Any:
    return engine.filter(cluster.get_pod("default", name), nodes)


def bind_each(engine: Any, nodes: dict[str, str]) -> dict[str, str]:
    """Bind every pod (name -> node) at once, each in its own thread; their results."""
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, engine.bind("default", n, f"u-{n}", nodes[n])))
               for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def bind_meanwhile(engine: Any, first: str, ready: threading.Event, then: str,
                   meanwhile: Callable[[], None] = lambda: None) -> dict[str, str]:
    """Bind ``first`` (to n1) in a thread; once ``ready`` is set, run ``meanwhile`` and bind
    ``then``; both results once both binds returned."""
    results: dict[str, str] = {}
    thread = threading.Thread(target=lambda: results.__setitem__(first, engine.bind("default", first, f"u-{first}", "n1")))
    thread.start()
    assert ready.wait(5)
    meanwhile()
    results[then] = engine.bind("default", then, f"u-{then}", "n1")
    thread.join(10)
    return results


def bound(cluster: MemoryCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName")}


def gang_plugin(engine: Any) -> Any:
    return next(p for p in engine.frameworks["default-scheduler"].permit_plugins if p.name == "Gang")


class PermitProbe:
    """A Permit plugin after Gang. ``through[name]`` is set once pod ``name`` is through Gang's
    Permit (it is in the waiting room and counted); a pod in ``hold`` waits there until the pod
    it names is through too."""

    name = "PermitProbe"

    def __init__(self, names: list[str], hold: dict[str, str] | None = None) -> None:
        self.through = {n: threading.Event() for n in names}
        self.hold = hold or {}

    def permit(self, state: Any, pod: Any, node: str) -> tuple[Status, float]:
        self.through[pod.name].set()
        if pod.name in self.hold:
            self.through[self.hold[pod.name]].wait(10)
        return Status(), 0.0


AFTER_GANG = {"permit": {"enabled": [{"name": "Gang"}, {"name": PermitProbe.name}]}}


# ---- binding together ------------------------------------------------------------------------------

def test_members_wait_in_bind_and_go_together() -> None:
    engine, cluster = planned({"n1": 8}, group_of("m", 3))
    assert bind_each(engine, dict.fromkeys(["m0", "m1", "m2"], "n1")) == {"m0": "", "m1": "", "m2": ""}
    assert bound(cluster) == {"m0", "m1", "m2"}


def test_a_member_arriving_while_another_is_being_counted_is_not_missed() -> None:
    """m0 is held right after Gang counted it until m1 is through its own Permit: the interleaving
    of concurrent binds in which a member arrives between another's count and its wait."""
    probe = PermitProbe(["m0", "m1"], hold={"m0": "m1"})
    engine, cluster = planned({"n1": 8}, group_of("m", 2), probe=probe, points=AFTER_GANG)
    assert bind_meanwhile(engine, "m0", probe.through["m0"], "m1") == {"m0": "", "m1": ""}
    assert bound(cluster) == {"m0", "m1"}


class FailFirstPreBind:
    """A PreBind plugin that fails ``name``'s first PreBind: a member whose Binding fails after
    Permit let its group go."""

    name = "FailFirstPreBind"

    def __init__(self, pod_name: str) -> None:
        self.pod_name, self.failed = pod_name, False

    def pre_bind(self, state: Any, pod: Any, node: str) -> Status:
        if pod.name == self.pod_name and not self.failed:
            self.failed = True
            return Status(Code.ERROR, ("injected: the Binding failed",))
        return Status()


def test_a_member_that_fails_after_its_group_was_let_go_keeps_its_place() -> None:
    """Found by the soak: the member's failure backed the whole group off and released what it
    held while the other members were being bound; another pod took the capacity, and the group
    stayed partly bound (3 of 4, for 24 s) until capacity came free again."""
    fail = FailFirstPreBind("m1")
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 2}, group_of("m", 2) + [other], probe=fail,
                              points={"preBind": {"enabled": [{"name": fail.name}]}}, backoff="30s")
    results = bind_each(engine, {"m0": "n1", "m1": "n1"})
    assert results["m0"] == "" and "injected" in results["m1"]
    assert bound(cluster) == {"m0"}
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == [], "m1's place is held for it"
    assert filter_pod(engine, cluster, "m1", ["n1"]).feasible == ["n1"], "no back-off"
    assert engine.bind("default", "m1", "u-m1", "n1") == ""
    assert bound(cluster) == {"m0", "m1"}


def test_an_incomplete_group_times_out_releases_everything_and_backs_off() -> None:
    engine, cluster = planned({"n1": 4}, group_of("a", 3) + group_of("b", 3), permitTimeout=QUICK, backoff="30s")
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert not filter_pod(engine, cluster, "b0", ["n1"]).feasible, "a holds n1"
    results = bind_each(engine, {"a0": "n1", "a1": "n1"})
    assert all("permit failed" in r for r in results.values()), results
    assert bound(cluster) == set()
    snap = engine.cache.snapshot().get("n1")
    assert snap.requested.get("example.com/gpu", 0) == 0 and engine.cache.sizes()["assumed_pods"] == 0
    assert engine.queue_state()["reserved"] == []
    assert filter_pod(engine, cluster, "a2", ["n1"]).unresolvable == {"n1": "pod group a is backing off after a timeout"}
    assert filter_pod(engine, cluster, "b0", ["n1"]).feasible == ["n1"], "what a held is free"


def two_wait_then_the_third_binds(engine: Any, probe: PermitProbe, meanwhile: Callable[[], Any]) -> dict[str, str]:
    """m0 and m1 bound (each on its thread) until both wait in Permit; then ``meanwhile``; then m2
    bound; every bind's answer by name."""
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, engine.bind("default", n, f"u-{n}", "n1")))
               for n in ("m0", "m1")]
    for t in threads:
        t.start()
    assert probe.through["m0"].wait(5) and probe.through["m1"].wait(5)
    meanwhile()
    results["m2"] = engine.bind("default", "m2", "u-m2", "n1")
    for t in threads:
        t.join(10)
    return results


def test_members_waiting_when_their_pod_group_disappears_are_denied_not_let_go() -> None:
    pods = [make_pod(f"m{i}").uid(f"u-m{i}").req(gpu=1).labels(**{GROUP: "g"}).obj() for i in range(3)]
    probe = PermitProbe(["m0", "m1", "m2"])
    engine, cluster = planned({"n1": 8}, pods, pod_groups=[make_pod_group("g").min_member(4).obj()],
                              probe=probe, points=AFTER_GANG)
    results = two_wait_then_the_third_binds(engine, probe, lambda: cluster.delete_pod_group("default", "g"))
    assert "pod group g is not defined" in results["m2"], results
    assert all("member default/m2 did not make it" in results[n] for n in ("m0", "m1")), results
    assert bound(cluster) == set()


def test_pods_outside_groups_are_untouched() -> None:
    engine, _ = planned({"n1": 8}, [make_pod("solo").uid("u-solo").req(gpu=1).obj()])
    assert engine.bind("default", "solo", "u-solo", "n1") == ""


def test_admission_waits_until_the_group_is_complete() -> None:
    gated = group_of("m", 3)[:2]
    for p in gated:
        p["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    state, cluster = gang_state({"n1": 8}, gated)
    result = state.admitter.run_once()
    assert result.admitted == [] and "pod group m has 2 of 3 members" in result.held["default/m0"]
    third = member("m2", group="m")
    third["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    cluster.add_pod(third)
    assert sorted(state.admitter.run_once().admitted) == ["default/m0", "default/m1", "default/m2"]


def test_strict_fifo_a_pod_woken_while_blocked_is_evaluated_once_unblocked() -> None:
    """b waits for room; the room comes while b is blocked behind a group still incomplete: once
    the group is admitted, b must be too, not wait for a resync."""
    def at_gate(pod: dict[str, Any], priority: int = 0) -> dict[str, Any]:
        pod["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
        pod["spec"]["priority"] = priority
        return pod

    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    state, cluster = gang_state({"n1": 4}, [at_gate(make_pod("b").uid("u-b").req(gpu=1).obj()), running],
                                config={"admission": {"strategy": "StrictFIFO"}})
    assert "NodeResources" in state.admitter.run_once().held["default/b"]  # the node is full
    cluster.add_pod(at_gate(member("h0", group="h", size=2), 100))  # ahead of b, waits for its group
    cluster.delete_pod("default", "running")  # what b waited for
    assert "StrictFIFO" in state.admitter.run_once().held["default/b"]
    cluster.add_pod(at_gate(member("h1", group="h", size=2), 100))
    assert sorted(state.admitter.run_once().admitted) == ["default/b", "default/h0", "default/h1"]


def test_a_group_admitted_at_the_gate_is_held_once_when_planned() -> None:
    """Admission holds each admitted member's capacity; the group's plan holds it from then on,
    and the admission holds end - else other pods would see it taken twice."""
    members = group_of("a", 2)
    for p in members:
        p["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    other = make_pod("other").uid("u-other").req(gpu=2).obj()
    state, cluster = gang_state({"n1": 4}, members + [other])
    engine = state.engine
    assert sorted(state.admitter.run_once().admitted) == ["default/a0", "default/a1"]  # 1 GPU held for each
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == ["n1"]  # 4 - 2 held
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]  # the plan: a slot for each on n1
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == ["n1"], "a0 and a1 held once"
    assert [r["owner"] for r in engine.queue_state()["reserved"]] == ["pod-group/default/a"]


class HoldInReserve:
    """A Reserve plugin before Gang that holds a0 between its assume and Gang's Reserve (which
    consumes its slot) until a1 has been assumed: the interleaving of two concurrent binds
    (threads: the gthread worker, or the engine driven in process) in which a0 counts on its node
    twice, as itself and as the slot it still holds."""

    name = "HoldInReserve"

    def __init__(self) -> None:
        self.a0_assumed = threading.Event()
        self.a1_assumed = threading.Event()

    def reserve(self, state: Any, pod: Any, node: str) -> Status:
        if pod.name == "a0":
            self.a0_assumed.set()
            self.a1_assumed.wait(5)
        elif pod.name == "a1":
            self.a1_assumed.set()
        return Status()

    def unreserve(self, state: Any, pod: Any, node: str) -> None:
        pass


def test_a_member_between_its_assume_and_its_reserve_is_not_counted_twice() -> None:
    """Both members fit n1 exactly; a1's bind checks n1 while a0 is assumed there and a0's slot
    is not consumed yet. a0 used to count twice: a1 was refused ("no longer fits") and the group
    timed out."""
    hold = HoldInReserve()
    engine, cluster = planned({"n1": 2}, group_of("a", 2), probe=hold,
                              points={"reserve": {"enabled": [{"name": hold.name}, {"name": "Gang"}]}})
    assert [filter_pod(engine, cluster, f"a{i}", ["n1"]).feasible for i in range(2)] == [["n1"], ["n1"]]
    assert bind_meanwhile(engine, "a0", hold.a0_assumed, "a1") == {"a0": "", "a1": ""}
    assert bound(cluster) == {"a0", "a1"}


class FailInReserveOnceOtherWaits:
    """Before Gang in Reserve, after it in Permit: ``failing`` is held between its assume and
    Gang's Reserve until ``waiting`` is through Gang's Permit, then its Reserve fails."""

    name = "FailInReserveOnceOtherWaits"

    def __init__(self, failing: str, waiting: str) -> None:
        self.failing, self.waiting = failing, waiting
        self.assumed, self.through = threading.Event(), threading.Event()

    def reserve(self, state: Any, pod: Any, node: str) -> Status:
        if pod.name != self.failing:
            return Status()
        self.assumed.set()
        self.through.wait(5)
        return Status(Code.ERROR, ("injected: Reserve failed",))

    def unreserve(self, state: Any, pod: Any, node: str) -> None:
        pass

    def permit(self, state: Any, pod: Any, node: str) -> tuple[Status, float]:
        if pod.name == self.waiting:
            self.through.set()
        return Status(), 0.0


def test_a_member_only_assumed_does_not_count_towards_its_group() -> None:
    """a1 is assumed on n1 (not bound) when a0 reaches Permit: a0 waits for it rather than going
    alone, and when a1 fails before its Permit the group stops - nothing is bound."""
    probe = FailInReserveOnceOtherWaits("a1", "a0")
    engine, cluster = planned({"n1": 2}, group_of("a", 2), probe=probe,
                              points={"reserve": {"enabled": [{"name": probe.name}, {"name": "Gang"}]},
                                      "permit": {"enabled": [{"name": "Gang"}, {"name": probe.name}]}})
    assert [filter_pod(engine, cluster, f"a{i}", ["n1"]).feasible for i in range(2)] == [["n1"], ["n1"]]
    results = bind_meanwhile(engine, "a1", probe.assumed, "a0")
    assert "injected" in results["a1"] and "member default/a1 did not make it" in results["a0"], results
    assert bound(cluster) == set()


# ---- placement planned at the first member -------------------------------------------------------

def test_the_first_member_reserves_the_whole_group_and_members_go_to_their_slots() -> None:
    engine, cluster = planned({"n1": 4, "n2": 2}, group_of("a", 5))
    first = filter_pod(engine, cluster, "a0", NODES)
    assert first.feasible == ["n1"], "the roomiest node is filled first"
    [res] = engine.queue_state()["reserved"]
    assert res["owner"] == "pod-group/default/a" and res["nodes"] == {"n1": 4, "n2": 1} and res["claimed"] == 1
    targets = [filter_pod(engine, cluster, f"a{i}", NODES).feasible for i in range(1, 5)]
    assert sorted(t[0] for t in targets) == ["n1", "n1", "n1", "n2"] and all(len(t) == 1 for t in targets)
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"], "a member keeps its slot on retry"


def test_a_second_group_that_does_not_fit_beside_the_first_holds_nothing_until_it_fits() -> None:
    engine, cluster = planned({"n1": 4, "n2": 4}, group_of("a", 5) + group_of("b", 5))
    nodes = {f"a{i}": filter_pod(engine, cluster, f"a{i}", NODES).feasible[0] for i in range(5)}
    out = filter_pod(engine, cluster, "b0", NODES)
    assert out.feasible == [] and set(out.unresolvable) == set(NODES)
    assert out.unresolvable["n1"] == "pod group b does not fit: 3 of 5 members have room (capacity held for other groups counted)"
    assert [r["owner"] for r in engine.queue_state()["reserved"]] == ["pod-group/default/a"]
    assert bind_each(engine, nodes) == dict.fromkeys(nodes, "") and bound(cluster) == set(nodes)
    assert engine.queue_state()["reserved"] == []
    assert filter_pod(engine, cluster, "b0", NODES).unresolvable["n1"].startswith("pod group b does not fit: 3 of 5")


def test_a_group_that_goes_releases_what_its_plan_held_beyond_its_members() -> None:
    """a1 did not exist when a0 planned the pair (a slot sized like a0 was held for it) and came
    asking for more: it consumes no slot, and the group going frees the one planned for it."""
    engine, cluster = planned({"n1": 4}, [member("a0", group="a", size=2)])
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    cluster.add_pod(member("a1", group="a", size=2, gpus=2))
    assert filter_pod(engine, cluster, "a1", ["n1"]).feasible == ["n1"]
    assert bind_each(engine, {"a0": "n1", "a1": "n1"}) == {"a0": "", "a1": ""}
    assert engine.queue_state()["reserved"] == []


def test_other_pods_see_the_reserved_capacity_unless_they_have_higher_priority() -> None:
    low = make_pod("low").uid("u-low").req(gpu=1).obj()
    high = make_pod("high").uid("u-high").req(gpu=1).priority(100).obj()
    engine, cluster = planned({"n1": 4}, group_of("a", 4) + [low, high])
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert filter_pod(engine, cluster, "low", ["n1"]).failed == {"n1": "Insufficient example.com/gpu"}
    assert engine.bind("default", "low", "u-low", "n1").startswith("node n1 no longer fits")
    assert filter_pod(engine, cluster, "high", ["n1"]).feasible == ["n1"]


def test_a_member_not_offered_its_planned_node_may_go_where_it_fits() -> None:
    engine, cluster = planned({"n1": 2, "n2": 2, "n3": 2}, group_of("a", 2))
    assert filter_pod(engine, cluster, "a0", ["n1", "n2"]).feasible == ["n1"]
    assert filter_pod(engine, cluster, "a1", ["n3"]).feasible == ["n3"], "kube-scheduler did not offer n1"


def test_the_rest_of_a_groups_slots_are_held_while_its_members_wait_in_permit(clock: Any) -> None:
    """a0 waits in Permit longer than a plan on which nobody makes progress is held: a1's slot
    stays held for as long as a0 may wait, so a pod outside the group cannot take it."""
    probe = PermitProbe(["a0", "a1"])
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 2}, group_of("a", 2) + [other], clock=clock, probe=probe, points=AFTER_GANG,
                              reservationTimeout="1s", permitTimeout="5s")
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    others_see: list[list[str]] = []

    def later() -> None:
        clock.advance(2)
        others_see.append(filter_pod(engine, cluster, "other", ["n1"]).feasible)

    assert bind_meanwhile(engine, "a0", probe.through["a0"], "a1", later) == {"a0": "", "a1": ""}
    assert others_see == [[]], "a1's slot was still held"
    assert bound(cluster) == {"a0", "a1"}


def test_a_members_claim_does_not_cut_short_the_hold_of_a_member_waiting_in_permit(clock: Any) -> None:
    """a2's claim restarts the plan's own timeout (1 s) while a0 waits in Permit (3 s): the other
    slots stay held as long as a0 may wait."""
    probe = PermitProbe(["a0", "a1", "a2"])
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 3}, group_of("a", 3) + [other], clock=clock, probe=probe, points=AFTER_GANG,
                              reservationTimeout="1s", permitTimeout="3s")
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    others_see: list[list[str]] = []

    def later() -> None:  # a0 waits in Permit
        assert filter_pod(engine, cluster, "a2", ["n1"]).feasible == ["n1"]
        clock.advance(2)
        others_see.append(filter_pod(engine, cluster, "other", ["n1"]).feasible)

    bind_meanwhile(engine, "a0", probe.through["a0"], "a1", later)
    assert others_see == [[]], "a1's and a2's slots were still held"


@pytest.mark.parametrize("ends", ["nominee deleted", "nomination cleared"])
def test_a_failed_plan_is_made_again_when_the_nomination_that_blocked_it_ends(ends: str) -> None:
    """A plan that failed is remembered until something it counted changes - a nomination
    ending too, though that changes neither the nodes nor the reservations."""
    nominee = make_pod("nom").uid("u-nom").req(gpu=2).priority(100).obj()
    nominee["status"]["nominatedNodeName"] = "n1"
    engine, cluster = planned({"n1": 2}, group_of("a", 2) + [nominee])
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == []  # n1 is held for nom
    if ends == "nominee deleted":
        cluster.delete_pod("default", "nom")
    else:
        cluster.set_nominated_node("default", "nom", None)
    again = filter_pod(engine, cluster, "a0", ["n1"])
    assert again.feasible == ["n1"], again.unresolvable


def test_a_member_deleted_while_it_waits_in_permit_no_longer_counts_for_its_group() -> None:
    """m0 and m1 wait for m2; m1 is deleted meanwhile: m2's arrival must not let the group go
    with a member that is gone (the deleted pod is rejected in the room, as kube-scheduler does)."""
    probe = PermitProbe(["m0", "m1", "m2"])
    engine, cluster = planned({"n1": 8}, group_of("m", 3), probe=probe, points=AFTER_GANG, permitTimeout="1s")
    results = two_wait_then_the_third_binds(engine, probe, lambda: cluster.delete_pod("default", "m1"))
    assert bound(cluster) == set(), results
    assert "deleted while it waited in Permit" in results["m1"]


def test_a_stalled_plan_expires_and_frees_the_capacity(clock: Any) -> None:
    engine, cluster = planned({"n1": 4}, group_of("a", 4) + group_of("b", 4), clock=clock, reservationTimeout="10s")
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible
    assert not filter_pod(engine, cluster, "b0", ["n1"]).feasible
    clock.advance(11)
    assert filter_pod(engine, cluster, "b0", ["n1"]).feasible == ["n1"]
    assert [r["owner"] for r in engine.queue_state()["reserved"]] == ["pod-group/default/b"]


def test_a_group_with_no_size_anywhere_is_not_started() -> None:
    pod = make_pod("x0").uid("u-x0").req(gpu=1).labels(**{GROUP: "x"}).obj()
    engine, cluster = planned({"n1": 4}, [pod])
    assert filter_pod(engine, cluster, "x0", ["n1"]).unresolvable["n1"] == (
        "pod group x is not defined: create PodGroup x or annotate its pods with kube-extender.io/pod-group-min-member")


def test_a_slot_claimed_by_a_deleted_member_goes_to_its_replacement() -> None:
    engine, cluster = planned({"n1": 2, "n2": 2}, group_of("a", 2))
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"]
    assert filter_pod(engine, cluster, "a1", NODES).feasible == ["n1"]
    cluster.delete_pod("default", "a1")
    cluster.add_pod(member("a1-again", group="a", size=2))
    assert filter_pod(engine, cluster, "a1-again", NODES).feasible == ["n1"], "it takes a1's slot"
    [res] = engine.queue_state()["reserved"]
    assert (res["slots"], res["claimed"]) == (2, 2)


def test_a_slot_claimed_by_a_pod_the_cache_does_not_know_goes_to_the_next_member() -> None:
    """A member filtered before the watch showed it (or never to be shown) claims a slot; the next
    member's filter frees it - nobody left the group, so only that unknown claimer says to look."""
    engine, cluster = planned({"n1": 2, "n2": 2}, group_of("a", 2))
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"]
    assert engine.filter(member("ghost", group="a", size=2), NODES).feasible == ["n1"], "a1's slot"
    assert filter_pod(engine, cluster, "a1", NODES).feasible == ["n1"], "it takes its slot back"
    [res] = engine.queue_state()["reserved"]
    assert (res["slots"], res["claimed"]) == (2, 2)


def test_a_member_whose_planned_capacity_was_taken_gets_a_new_plan() -> None:
    high = make_pod("high").uid("u-high").req(gpu=2).priority(100).obj()
    engine, cluster = planned({"n1": 2, "n2": 2}, group_of("a", 2) + [high])
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"]
    assert engine.bind("default", "high", "u-high", "n1") == "", "higher priority may take reserved capacity"
    assert filter_pod(engine, cluster, "a1", NODES).feasible == ["n2"]
    assert engine.queue_state()["reserved"][0]["nodes"] == {"n2": 2}


# ---- wake-ups and admission ----------------------------------------------------------------------

def test_a_member_rejected_during_the_back_off_is_touched_when_it_ends(clock: Any) -> None:
    state, cluster = gang_state({"n1": 4}, group_of("a", 3), clock=clock, permitTimeout=QUICK, backoff="5s")
    engine, nudger = state.engine, state.nudger
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert "permit failed" in engine.bind("default", "a0", "u-a0", "n1")
    assert filter_pod(engine, cluster, "a1", ["n1"]).unresolvable == {"n1": "pod group a is backing off after a timeout"}
    clock.advance(4)
    assert nudger.run_once() == [], "not before the back-off ends"
    clock.advance(1)
    assert nudger.run_once() == ["default/a1"]
    assert "kube-extender.io/nudged-at" in cluster.get_pod("default", "a1")["metadata"]["annotations"]


def test_a_released_reservation_is_an_event_that_nudges_pods_it_kept_out() -> None:
    low = make_pod("low").uid("u-low").req(gpu=1).obj()
    state, cluster = gang_state({"n1": 2}, group_of("a", 2) + [low], config={"requeue": {"nudge": True}},
                                permitTimeout=QUICK)
    engine, nudger = state.engine, state.nudger
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert filter_pod(engine, cluster, "low", ["n1"]).failed == {"n1": "Insufficient example.com/gpu"}
    assert nudger.run_once() == []
    assert "permit failed" in engine.bind("default", "a0", "u-a0", "n1")  # times out: the plan is released
    assert nudger.run_once() == ["default/low"]


def test_admission_counts_capacity_reserved_for_a_group_as_taken() -> None:
    gated = make_pod("gated").uid("u-gated").req(gpu=1).obj()
    gated["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    state, cluster = gang_state({"n1": 2}, group_of("a", 2) + [gated])
    assert filter_pod(state.engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    result = state.admitter.run_once()
    assert result.admitted == [] and "no node has enough free example.com/gpu" in result.held["default/gated"]
    state.engine.handle.reservations.release("pod-group/default/a")
    assert state.admitter.run_once().admitted == ["default/gated"], "the release is an event the hint sees"


# ---- forgetting ----------------------------------------------------------------------------------

def test_groups_that_are_done_leave_nothing_behind_in_the_plugin(clock: Any) -> None:
    """What Gang keeps per group (members let go and not yet seen bound, a failed plan) is
    forgotten once the group is bound or gone: the adapter tells the manager's sweep which
    members the cluster shows bound."""
    solo = make_pod("solo").uid("u-solo").req(gpu=1).obj()
    engine, cluster = planned({"n1": 4, "n2": 4}, group_of("a", 3) + group_of("b", 9) + [solo], clock=clock)
    gang = gang_plugin(engine)
    nodes = {f"a{i}": filter_pod(engine, cluster, f"a{i}", NODES).feasible[0] for i in range(3)}
    assert not filter_pod(engine, cluster, "b0", NODES).feasible, "group b never fits"
    assert bind_each(engine, nodes) == dict.fromkeys(nodes, "") and bound(cluster) == set(nodes)
    for i in range(9):
        cluster.delete_pod("default", f"b{i}")
    kept = gang.groups.kept()
    assert kept.allowed and kept.failed_plans, "kept while the groups were being decided"
    clock.advance(11)
    assert engine.bind("default", "solo", "u-solo", "n1") == ""  # any Permit call looks
    kept = gang.groups.kept()
    assert kept.allowed == {} and kept.failed_plans == frozenset()


def test_the_offered_names_answer_as_a_set_however_often_asked() -> None:
    """PreFilter's "is the slot's node offered?" scans the list for the first answers and makes a
    set for more: the answers are the same either way."""
    offered = _Offered(["n2", "n1", "n3", "n1"])
    asked = ["n1", "n9", "n1", "n3", "n2", "n9", "n4", "n1"]
    assert [name in offered for name in asked] == [name in {"n1", "n2", "n3"} for name in asked]
    assert len(offered) == 3 and sorted(offered) == ["n1", "n2", "n3"]


def bind_m0_and_m1_of_unknown_outcome(engine: Any, cluster: MemoryCluster, *, stored: bool,
                                       watch: str = "on time") -> tuple[dict[str, str], Callable[[], None]]:
    """Bind members m0 and m1 to n1 at once, m1's Binding of unknown outcome (its reply lost, the
    pod unreadable): ``stored`` or not; when stored, our ``watch`` shows it "on time" or "late"
    (its events are then delivered when the callable returned with the results is called)."""
    from extender.framework.handle import WriteError
    real_bind = cluster.bind
    publish = cluster._publish_pod
    lagging: list[dict] = []

    def bind(namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        if name != "m1":
            return real_bind(namespace, name, uid, node, annotations)
        if stored:
            if watch == "late":
                cluster._publish_pod = lagging.append  # type: ignore[method-assign]
            try:
                real_bind(namespace, name, uid, node, annotations)
            finally:
                cluster._publish_pod = publish  # type: ignore[method-assign]
        raise WriteError("binding failed: no reply, and the pod could not be read back: it may be bound",
                         uncertain=True)

    cluster.bind = bind  # type: ignore[method-assign]
    try:
        results = bind_each(engine, {"m0": "n1", "m1": "n1"})
    finally:
        cluster.bind = real_bind  # type: ignore[method-assign]

    def deliver() -> None:
        for pod in lagging:
            publish(pod)
    return results, deliver


def test_a_member_whose_binding_outcome_is_unknown_is_held_once() -> None:
    """m1's Binding (after Permit let the group go) was stored, its reply lost, every read back
    failed: the engine holds m1's capacity on n1. Gang's Unreserve must not hold m1's place once
    more (a reservation slot on n1): m1 would count twice and a pod that fits beside m0 and m1 be
    refused - even once the watch shows m1 bound. (Found in review.)"""
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 3}, group_of("m", 2) + [other])
    results, watch_catches_up = bind_m0_and_m1_of_unknown_outcome(engine, cluster, stored=True, watch="late")
    assert results["m0"] == "" and "stays held" in results["m1"]
    assert engine.cache.snapshot().get("n1").requested["example.com/gpu"] == 2000, "m0 bound, m1 held"
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == ["n1"], "3 GPUs, m0 and m1 hold 2"
    watch_catches_up()
    assert not engine.cache.is_assumed("u-m1"), "the watch shows m1 bound"
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == ["n1"], "m1 counts once, bound"


def test_a_member_whose_unknown_binding_was_not_stored_keeps_its_place() -> None:
    """As a member that fails after its group was let go keeps its place (a slot on its node), so
    does one whose Binding had an unknown outcome once a read shows it was not stored: while the
    engine held it the slot must not count twice, and once that hold is gone it must. (Found in
    review: nobody held m1's place any more, another pod took it, the group stayed partly bound.)"""
    from extender.framework.clock import FakeClock
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    clock = FakeClock()
    engine, cluster = planned({"n1": 2}, group_of("m", 2) + [other], clock=clock, backoff="30s")
    results, _ = bind_m0_and_m1_of_unknown_outcome(engine, cluster, stored=False)
    assert results["m0"] == "" and "stays held" in results["m1"]
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == [], "m1 held by the engine"
    clock.advance(6)
    engine.binding.settle_unconfirmed(release_age=0)  # a read: m1 is not bound
    assert engine.cache.unconfirmed("u-m1") is None
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == [], "m1's place is held for it"
    assert engine.bind("default", "m1", "u-m1", "n1") == ""
    assert bound(cluster) == {"m0", "m1"}


def test_a_member_whose_binding_outcome_is_unknown_is_offered_its_node_and_not_planned_again() -> None:
    """m0 is bound, m1's Binding to n1 has an unknown outcome (held there by the engine). When
    kube-scheduler retries m1, filter offers it n1 - so that its bind sends the same Binding
    again - and Gang plans nothing more for it. (Found in review: Gang's PreFilter planned m1
    anew where it fit beside its own hold, n2, filter then allowed no node at all, and the new
    slot held n2 against others.)"""
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 2, "n2": 1}, group_of("m", 2) + [other])
    results, _ = bind_m0_and_m1_of_unknown_outcome(engine, cluster, stored=False)
    assert results["m0"] == "" and "stays held" in results["m1"]
    outcome = filter_pod(engine, cluster, "m1", ["n1", "n2"])
    assert outcome.feasible == ["n1"], (outcome.failed, outcome.unresolvable)
    assert filter_pod(engine, cluster, "other", ["n2"]).feasible == ["n2"], "n2 is free: nothing of m1's is there"
    assert engine.bind("default", "m1", "u-m1", "n1") == ""
    assert bound(cluster) == {"m0", "m1"}


def test_a_member_bound_before_its_unknown_outcome_is_reported_holds_no_place_for_itself() -> None:
    """m1's Binding to n1 is stored and our watch shows m1 bound while the writer still reads it
    back in vain, then reports an unknown outcome. There is nothing to hold: m1 is bound and
    counted, and Gang must not hold a place on n1 for a retry besides. (Found in review.)"""
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    engine, cluster = planned({"n1": 3}, group_of("m", 2) + [other])
    results, _ = bind_m0_and_m1_of_unknown_outcome(engine, cluster, stored=True)
    assert (results["m0"], results["m1"]) == ("", "") and bound(cluster) == {"m0", "m1"}
    assert engine.cache.snapshot().get("n1").requested["example.com/gpu"] == 2000
    assert filter_pod(engine, cluster, "other", ["n1"]).feasible == ["n1"]


def test_nudges_of_a_gang_that_does_not_fit_do_not_wake_each_other() -> None:
    """Group a (2 members, 1 GPU each) never fits on the single 1-GPU node, though each member
    alone fits the nudger's check. After one real event, the only updates are the nudger's own
    touches of the members - no change for anyone else (Gang's hint would take a member's
    Pod/Update for one): a0 is nudged once (the one GPU counted for it), not the two in turn for
    ever."""
    from extender.framework.clock import FakeClock

    clock = FakeClock()
    state, cluster = gang_state({"n1": 1}, group_of("a", 2), clock=clock,
                                config={"requeue": {"nudge": True, "minInterval": "1s"}})
    engine, nudger = state.engine, state.nudger
    for name in ("a0", "a1"):
        assert not filter_pod(engine, cluster, name, ["n1"]).feasible
    cluster.add_pod(make_pod("cpu-only").uid("c").obj())  # one real event in the namespace
    touched: list[str] = []
    for _ in range(10):
        clock.advance(1.5)
        for key in nudger.run_once():
            touched.append(key)  # kube-scheduler retries the touched pod; the extender rejects it again
            assert not filter_pod(engine, cluster, key.split("/")[1], ["n1"]).feasible
    assert touched == ["default/a0"]


def test_a_gated_member_is_admitted_when_its_groups_back_off_ends() -> None:
    """a0 times out in Permit: group a backs off 5 s. Gated a2 is evaluated meanwhile: Gang's
    PreFilter (admission's place) refuses it for the back-off and asks requeue_after - no cluster
    event says when a back-off ends, so the timed wake-up's touch of a2 is what tells the Admitter
    (its hints: 'a change to the pod itself'; a nudge of a pod not gated is no change for others,
    of a gated one it is). Once the back-off is over and a2 touched, the next pass admits it."""
    from extender.framework.clock import FakeClock

    clock = FakeClock()
    pods = group_of("a", 3)
    pods[2]["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    state, cluster = gang_state({"n1": 4}, pods, clock=clock, permitTimeout=QUICK, backoff="5s")
    engine, nudger, admitter = state.engine, state.nudger, state.admitter
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert "permit failed" in engine.bind("default", "a0", "u-a0", "n1")  # the group backs off
    first = admitter.run_once()
    assert first.admitted == [] and "default/a2" in first.held
    clock.advance(5)
    assert nudger.run_once() == ["default/a2"]  # the back-off is over: the wake-up touches a2
    assert admitter.run_once().admitted == ["default/a2"], "a2 waits for the resync"
