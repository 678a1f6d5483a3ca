"""Gang: a group binds all together inside the bind calls, or not at all."""

from __future__ import annotations

import threading
import time
from typing import Any

from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.registration import PluginSpec
from extender.framework.status import Code, Status
from extender.runtime.registry import Registry

GROUP = "scheduling.x-k8s.io/pod-group"


def member(name: str, group: str = "g", size: int = 3, gpus: int = 1) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).labels(**{GROUP: group}).obj()
    pod["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": str(size)}
    return pod


def setup(pods: list[dict], http_timeout: str = "5s", gpus: int = 8) -> tuple[Any, Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=gpus).obj()], pods))
    config = config_of(extender={"httpTimeout": http_timeout},
                       profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}},
                                  "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s",
                                                                              "backoff": "30s"}}]}])
    app = create_app(config, source=cluster, background=False)
    state = app.extensions["kube_extender"]
    return state.engine, state.admitter, cluster


def bind_all(engine: Any, names: list[str], stagger: float = 0.05) -> dict[str, str]:
    results: dict[str, str] = {}

    def go(n: str) -> None:
        results[n] = engine.bind("default", n, f"u-{n}", "n1")

    threads = []
    for n in names:
        t = threading.Thread(target=go, args=(n,))
        t.start()
        threads.append(t)
        time.sleep(stagger)
    for t in threads:
        t.join(10)
    return results


def bound(cluster: MemoryCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName")}


def test_members_wait_in_bind_and_go_together() -> None:
    engine, _, cluster = setup([member(f"m{i}") for i in range(3)])
    results = bind_all(engine, ["m0", "m1", "m2"], stagger=0.2)
    assert results == {"m0": "", "m1": "", "m2": ""}
    assert bound(cluster) == {"m0", "m1", "m2"}


class HoldFirstMember:
    """A Permit plugin after Gang that holds m0 right after Gang counted it, until m1 is through its
    own Permit: the interleaving (concurrent binds) in which a member arrives between another
    member's count and that member joining the waiting room."""

    name = "HoldFirstMember"

    def __init__(self) -> None:
        self.m0_counted = threading.Event()
        self.m1_through = threading.Event()

    def permit(self, state: Any, pod: Any, node: str) -> tuple[Status, float]:
        if pod.name == "m0":
            self.m0_counted.set()
            self.m1_through.wait(10)
        elif pod.name == "m1":
            self.m1_through.set()
        return Status(), 0.0


def test_a_member_arriving_while_another_is_being_counted_is_not_missed() -> None:
    hold = HoldFirstMember()
    registry = Registry()
    registry.register(PluginSpec(hold.name, lambda args, handle: hold, parse_args=lambda raw: raw))
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=8).obj()],
                                            [member("m0", size=2), member("m1", size=2)]))
    config = config_of(profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]},
                                              "permit": {"enabled": [{"name": "Gang"}, {"name": hold.name}]}},
                                  "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s"}}]}])
    engine = create_app(config, source=cluster, background=False, registry=registry).extensions["kube_extender"].engine
    results: dict[str, str] = {}
    first = threading.Thread(target=lambda: results.update(m0=engine.bind("default", "m0", "u-m0", "n1")))
    first.start()
    assert hold.m0_counted.wait(5)
    second = threading.Thread(target=lambda: results.update(m1=engine.bind("default", "m1", "u-m1", "n1")))
    second.start()
    first.join(10)
    second.join(10)
    assert results == {"m0": "", "m1": ""}
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
    registry = Registry()
    registry.register(PluginSpec(fail.name, lambda args, handle: fail, parse_args=lambda raw: raw))
    other = make_pod("other").uid("u-other").req(gpu=1).obj()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=2).obj()],
                                            [member("m0", size=2), member("m1", size=2), other]))
    config = config_of(profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]},
                                              "preBind": {"enabled": [{"name": fail.name}]}},
                                  "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s",
                                                                              "backoff": "30s"}}]}])
    engine = create_app(config, source=cluster, background=False, registry=registry).extensions["kube_extender"].engine
    results = bind_all(engine, ["m0", "m1"])
    assert results["m0"] == "" and "injected" in results["m1"]
    assert bound(cluster) == {"m0"}
    outcome = engine.filter(cluster.get_pod("default", "other"), ["n1"])
    assert outcome.feasible == [], "m1's place is held for it"
    assert engine.filter(cluster.get_pod("default", "m1"), ["n1"]).feasible == ["n1"], "no back-off"
    assert engine.bind("default", "m1", "u-m1", "n1") == ""
    assert bound(cluster) == {"m0", "m1"}


def test_an_incomplete_group_times_out_releases_everything_and_backs_off() -> None:
    engine, _, cluster = setup([member(f"m{i}") for i in range(3)], http_timeout="2s")  # Permit budget 1 s
    results = bind_all(engine, ["m0", "m1"])
    assert all("permit failed" in r for r in results.values()), results
    assert bound(cluster) == set()
    snap = engine.cache.snapshot().get("n1")
    assert snap.requested.get("example.com/gpu", 0) == 0 and engine.cache.sizes()["assumed_pods"] == 0
    outcome = engine.filter(cluster.get_pod("default", "m2"), ["n1"])
    assert outcome.unresolvable == {"n1": "pod group g is backing off after a timeout"}


def test_pods_outside_groups_are_untouched() -> None:
    engine, _, cluster = setup([make_pod("solo").uid("u-solo").req(gpu=1).obj()])
    assert engine.bind("default", "solo", "u-solo", "n1") == ""


def test_admission_waits_until_the_group_is_complete() -> None:
    gated = [member(f"m{i}") for i in range(2)]
    for p in gated:
        p["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    engine, admitter, cluster = setup(gated)
    result = admitter.run_once()
    assert result.admitted == [] and "pod group g has 2 of 3 members" in result.held["default/m0"]
    third = member("m2")
    third["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    cluster.add_pod(third)
    assert sorted(admitter.run_once().admitted) == ["default/m0", "default/m1", "default/m2"]


# ---- placement planned at the first member -------------------------------------------------------

def gang_state(nodes: dict[str, int], pods: list[dict], *, clock: Any = None, http_timeout: str = "5s",
               pod_groups: list[dict] | None = None, config: dict[str, Any] | None = None,
               **gang_args: str) -> tuple[Any, MemoryCluster]:
    """The app state (engine, admitter, nudger) over nodes (name -> GPUs) with Gang and
    NodeResources; ``http_timeout`` "2s" gives a Permit budget of 1 s."""
    cluster = MemoryCluster(cluster_objects([make_node(n).alloc(gpu=g).obj() for n, g in nodes.items()], pods,
                                            pod_groups=pod_groups))
    cfg = config_of(extender={"httpTimeout": http_timeout}, **(config or {}),
                    profiles=[{"schedulerName": "default-scheduler",
                               "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}},
                               "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s", **gang_args}}]}])
    return create_app(cfg, source=cluster, clock=clock, background=False).extensions["kube_extender"], cluster


def planned(nodes: dict[str, int], pods: list[dict], clock: Any = None, **gang_args: str) -> tuple[Any, MemoryCluster]:
    """An engine over nodes (name -> GPUs) with Gang and NodeResources."""
    state, cluster = gang_state(nodes, pods, clock=clock, **gang_args)
    return state.engine, cluster


def group_of(prefix: str, size: int, gpus: int = 1, group: str | None = None) -> list[dict[str, Any]]:
    return [member(f"{prefix}{i}", group=group or prefix, size=size, gpus=gpus) for i in range(size)]


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


NODES = ["n1", "n2"]


def test_the_first_member_reserves_the_whole_group_and_members_go_to_their_slots() -> None:
    engine, cluster = planned({"n1": 4, "n2": 2}, group_of("a", 5))
    first = filter_pod(engine, cluster, "a0", NODES)
    assert first.feasible == ["n1"], "the roomiest node is filled first"
    [res] = engine.queue_state()["reserved"]
    assert res["owner"] == "pod-group/default/a" and res["nodes"] == {"n1": 4, "n2": 1} and res["claimed"] == 1
    targets = [filter_pod(engine, cluster, f"a{i}", NODES).feasible for i in range(1, 5)]
    assert sorted(t[0] for t in targets) == ["n1", "n1", "n1", "n2"] and all(len(t) == 1 for t in targets)
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"], "a member keeps its slot on retry"


def test_a_second_group_that_does_not_fit_beside_the_first_holds_nothing() -> None:
    engine, cluster = planned({"n1": 4, "n2": 4}, group_of("a", 5) + group_of("b", 5))
    assert filter_pod(engine, cluster, "a0", NODES).feasible
    out = filter_pod(engine, cluster, "b0", NODES)
    assert out.feasible == [] and set(out.unresolvable) == set(NODES)
    assert out.unresolvable["n1"] == "pod group b does not fit: 3 of 5 members have room (capacity held for other groups counted)"
    assert [r["owner"] for r in engine.queue_state()["reserved"]] == ["pod-group/default/a"]


def test_group_a_completes_while_group_b_waits_without_holding_anything() -> None:
    engine, cluster = planned({"n1": 4, "n2": 4}, group_of("a", 5) + group_of("b", 5))
    nodes = {f"a{i}": filter_pod(engine, cluster, f"a{i}", NODES).feasible[0] for i in range(5)}
    assert not filter_pod(engine, cluster, "b0", NODES).feasible
    assert bind_each(engine, nodes) == dict.fromkeys(nodes, "") and bound(cluster) == set(nodes)
    assert engine.queue_state()["reserved"] == []
    assert filter_pod(engine, cluster, "b0", NODES).unresolvable["n1"].startswith("pod group b does not fit: 3 of 5")


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


def test_a_stalled_plan_expires_and_frees_the_capacity(clock: Any) -> None:
    engine, cluster = planned({"n1": 4}, group_of("a", 4) + group_of("b", 4), clock=clock,
                              reservationTimeout="10s")
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible
    assert not filter_pod(engine, cluster, "b0", ["n1"]).feasible
    clock.advance(11)
    assert filter_pod(engine, cluster, "b0", ["n1"]).feasible == ["n1"]
    assert [r["owner"] for r in engine.queue_state()["reserved"]] == ["pod-group/default/b"]


def test_a_timed_out_group_releases_its_reservation() -> None:
    state, cluster = gang_state({"n1": 4}, group_of("a", 3) + group_of("b", 3), http_timeout="2s")
    engine = state.engine
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert not filter_pod(engine, cluster, "b0", ["n1"]).feasible
    assert "permit failed" in engine.bind("default", "a0", "u-a0", "n1")
    assert engine.queue_state()["reserved"] == []
    assert filter_pod(engine, cluster, "b0", ["n1"]).feasible == ["n1"]


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


def test_a_member_rejected_during_the_back_off_is_touched_when_it_ends() -> None:
    state, cluster = gang_state({"n1": 4}, group_of("a", 3), http_timeout="2s", backoff="1s")
    engine, nudger = state.engine, state.nudger
    assert filter_pod(engine, cluster, "a0", ["n1"]).feasible == ["n1"]
    assert "permit failed" in engine.bind("default", "a0", "u-a0", "n1")
    assert filter_pod(engine, cluster, "a1", ["n1"]).unresolvable == {"n1": "pod group a is backing off after a timeout"}
    assert nudger.run_once() == [], "not before the back-off ends"
    time.sleep(1.05)
    assert nudger.run_once() == ["default/a1"]
    assert "kube-extender.io/nudged-at" in cluster.get_pod("default", "a1")["metadata"]["annotations"]


# ---- findings of the concurrency review ------------------------------------------------------------

def test_members_waiting_when_their_pod_group_disappears_are_denied_not_let_go() -> None:
    from builders import make_pod_group
    pods = [make_pod(f"m{i}").uid(f"u-m{i}").req(gpu=1).labels(**{GROUP: "g"}).obj() for i in range(3)]
    state, cluster = gang_state({"n1": 8}, pods, pod_groups=[make_pod_group("g").min_member(4).obj()])
    engine = state.engine
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, engine.bind("default", n, f"u-{n}", "n1")))
               for n in ("m0", "m1")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while len(list(engine.handle.waiting_pods)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    cluster.delete_pod_group("default", "g")
    results["m2"] = engine.bind("default", "m2", "u-m2", "n1")
    for t in threads:
        t.join(10)
    assert all(r for r in results.values()), results
    assert "pod group g is not defined" in results["m2"] and bound(cluster) == set()


def test_members_asking_for_no_managed_resource_need_no_slot() -> None:
    launcher = make_pod("launcher").uid("u-launcher").labels(**{GROUP: "g"}).obj()
    launcher["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": "3"}
    engine, cluster = planned({"n1": 2}, [launcher, member("w0", size=3), member("w1", size=3)])
    assert filter_pod(engine, cluster, "w0", ["n1"]).feasible == ["n1"], "2 GPUs are enough for the 3 members"
    [res] = engine.queue_state()["reserved"]
    assert res["slots"] == 2


def test_a_member_whose_planned_capacity_was_taken_gets_a_new_plan() -> None:
    high = make_pod("high").uid("u-high").req(gpu=2).priority(100).obj()
    engine, cluster = planned({"n1": 2, "n2": 2}, group_of("a", 2) + [high])
    assert filter_pod(engine, cluster, "a0", NODES).feasible == ["n1"]
    assert engine.bind("default", "high", "u-high", "n1") == "", "higher priority may take reserved capacity"
    assert filter_pod(engine, cluster, "a1", NODES).feasible == ["n2"]
    assert engine.queue_state()["reserved"][0]["nodes"] == {"n2": 2}


def test_a_released_reservation_is_an_event_that_nudges_pods_it_kept_out() -> None:
    low = make_pod("low").uid("u-low").req(gpu=1).obj()
    state, cluster = gang_state({"n1": 2}, group_of("a", 2) + [low], http_timeout="2s", config={"requeue": {"nudge": True}})
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


# ---- findings of the sustained load (benchmarks/sustained_load.py) ---------------------------------

def gang_plugin(engine: Any) -> Any:
    return next(p for p in engine.frameworks["default-scheduler"].permit_plugins if p.name == "Gang")


def test_groups_that_are_done_leave_nothing_behind_in_the_plugin(clock: Any) -> None:
    """What Gang keeps per group (members let go and not yet seen bound, a failed plan) is
    forgotten once the group is bound or gone: a long-running server schedules groups without
    end, and each completed group used to stay in memory for good."""
    solo = make_pod("solo").uid("u-solo").req(gpu=1).obj()
    state, cluster = gang_state({"n1": 4, "n2": 4}, group_of("a", 3) + group_of("b", 9) + [solo], clock=clock)
    engine, gang = state.engine, gang_plugin(state.engine)
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
    registry = Registry()
    registry.register(PluginSpec(hold.name, lambda args, handle: hold, parse_args=lambda raw: raw))
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=2).obj()], group_of("a", 2)))
    config = config_of(extender={"httpTimeout": "2s"},
                       profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]},
                                              "reserve": {"enabled": [{"name": hold.name}, {"name": "Gang"}]}},
                                  "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s"}}]}])
    engine = create_app(config, source=cluster, background=False, registry=registry).extensions["kube_extender"].engine
    assert [filter_pod(engine, cluster, f"a{i}", ["n1"]).feasible for i in range(2)] == [["n1"], ["n1"]]
    results: dict[str, str] = {}
    first = threading.Thread(target=lambda: results.update(a0=engine.bind("default", "a0", "u-a0", "n1")))
    first.start()
    assert hold.a0_assumed.wait(5)
    results["a1"] = engine.bind("default", "a1", "u-a1", "n1")
    first.join(10)
    assert results == {"a0": "", "a1": ""}
    assert bound(cluster) == {"a0", "a1"}
