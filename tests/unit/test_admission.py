"""Admission through scheduling gates: PreEnqueue with an unmodified kube-scheduler."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod, make_pod_group
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.handle import WriteError
from extender.framework.pod_group import GROUP_LABEL

GATE = "kube-extender.io/admission"


def gated(name: str, gpus: int, priority: int, created: str, *others: str) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).created(created).obj()
    pod["spec"]["schedulingGates"] = [{"name": g} for g in (*others, GATE)]
    return pod


def setup(pods: list[dict], strategy: str = "BestEffortFIFO", gpus: int = 4) -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=gpus).obj()], pods))
    app = create_app(config_of(admission={"strategy": strategy}), source=cluster, clock=FakeClock(),
                     background=False)
    return app.extensions["kube_extender"].admitter, cluster


def gates(cluster: MemoryCluster, name: str) -> list[str]:
    return [g["name"] for g in cluster.get_pod("default", name)["spec"].get("schedulingGates") or []]


QUEUE = [gated("big", 4, 100, "2026-01-01T00:00:00Z"), gated("small", 1, 10, "2026-01-01T00:00:01Z"),
         gated("older-small", 1, 10, "2026-01-01T00:00:00Z")]


@pytest.mark.parametrize("strategy, admitted", [
    ("BestEffortFIFO", ["default/older-small", "default/small"]),
    ("StrictFIFO", []),
])
def test_strategies_with_a_head_that_does_not_fit(strategy: str, admitted: list[str]) -> None:
    admitter, cluster = setup(QUEUE + [make_pod("running").uid("r").req(gpu=1).node("n1").obj()], strategy)
    result = admitter.run_once()
    assert result.admitted == admitted
    assert "no node has enough free example.com/gpu" in result.held["default/big"]
    if strategy == "StrictFIFO":
        assert "StrictFIFO" in result.held["default/small"]


def test_admission_follows_queue_order_and_counts_what_it_admitted() -> None:
    admitter, cluster = setup(QUEUE)
    # big takes all 4 GPUs: the small ones, which fit on their own, wait behind what big holds
    result = admitter.run_once()
    assert result.admitted == ["default/big"]
    assert "no node has enough free example.com/gpu" in result.held["default/small"]
    assert gates(cluster, "big") == [] and gates(cluster, "small") == [GATE]


def admitted_world(clock: FakeClock | None = None) -> tuple[Any, Any, MemoryCluster]:
    """4 GPUs, 2 in use; three gated pods of priorities 30, 20, 10 asking one GPU each."""
    pods = [gated(f"p{prio}", 1, prio, "2026-01-01T00:00:00Z") for prio in (30, 20, 10)]
    pods.append(make_pod("running").uid("r").req(gpu=2).node("n1").obj())
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods))
    app = create_app(config_of(admission={"holdTimeout": "30s"}), source=cluster, clock=clock or FakeClock(),
                     background=False)
    state = app.extensions["kube_extender"]
    return state.admitter, state.engine, cluster


def test_one_pass_admits_no_more_pods_than_fit() -> None:
    admitter, _, cluster = admitted_world()
    result = admitter.run_once()
    assert result.admitted == ["default/p30", "default/p20"]
    assert gates(cluster, "p10") == [GATE]
    assert admitter.run_once(full=True).admitted == [], "a later pass sees the capacity held for them too"


@pytest.mark.parametrize("priority, fits", [(5, False), (20, False), (50, True)],
                         ids=["lower priority", "equal priority", "higher priority"])
def test_filter_counts_admitted_pods_as_a_nomination_does(priority: int, fits: bool) -> None:
    admitter, engine, _ = admitted_world()
    admitter.run_once()
    other = make_pod("other").uid("o").req(gpu=1).priority(priority).obj()
    assert (engine.filter(other, ["n1"]).feasible == ["n1"]) is fits


def test_an_admitted_pod_does_not_compete_with_its_own_hold() -> None:
    admitter, engine, cluster = admitted_world()
    admitter.run_once()
    assert engine.filter(cluster.get_pod("default", "p20"), ["n1"]).feasible == ["n1"]
    assert engine.bind("default", "p30", "u-p30", "n1") == ""
    assert engine.bind("default", "p20", "u-p20", "n1") == ""
    used = engine.cache.snapshot().get("n1").requested.get("example.com/gpu")
    assert used == 4000 and engine.handle.reservations.nodes() == set(), "counted once, holds consumed"


@pytest.mark.parametrize("end", ["deleted", "timed out"])
def test_a_hold_ends_when_its_pod_is_deleted_or_the_timeout_passes(end: str) -> None:
    clock = FakeClock()
    admitter, _, cluster = admitted_world(clock)
    admitter.run_once()
    if end == "deleted":
        cluster.delete_pod("default", "p30")
    else:
        clock.advance(31)
    assert "default/p10" in admitter.run_once().admitted


def test_only_the_extenders_gate_is_removed() -> None:
    pod = gated("p", 1, 0, "2026-01-01T00:00:00Z", "other.io/quota")
    admitter, cluster = setup([pod])
    assert admitter.run_once().admitted == ["default/p"]
    assert gates(cluster, "p") == ["other.io/quota"]
    assert admitter.run_once().admitted == [], "removing it again is a no-op"


def test_pods_without_the_gate_are_left_alone() -> None:
    pod = make_pod("free").uid("u").req(gpu=9).obj()
    pod["spec"]["schedulingGates"] = [{"name": "other.io/quota"}]
    admitter, cluster = setup([pod])
    assert admitter.run_once().admitted == [] and gates(cluster, "free") == ["other.io/quota"]


def test_debug_queue_lists_gated_pods_in_order() -> None:
    admitter, cluster = setup(QUEUE)
    state = admitter.queue.describe([], admitter.plugins.sort)
    assert [g["pod"] for g in state["gated"]] == ["default/big", "default/older-small", "default/small"]


# ---- queueing hints ---------------------------------------------------------------------------------

def test_a_held_pod_is_evaluated_again_only_after_an_event_its_plugin_declared() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, cluster = setup([gated("waiting", 2, 0, "2026-01-01T00:00:00Z"), running])
    first = admitter.run_once()
    assert first.evaluated == 1 and "no node has enough free" in first.held["default/waiting"]
    steps = [
        ("nothing happened", lambda: None, 0, []),
        ("a pod elsewhere appeared (NodeResources does not care)",
         lambda: cluster.add_pod(make_pod("cpu-only", namespace="other").uid("c").obj()), 0, []),
        ("the pod itself changed", lambda: cluster.patch_pod_metadata("default", "waiting", labels={"x": "y"}), 1, []),
        ("capacity was released", lambda: cluster.delete_pod("default", "running"), 1, ["default/waiting"]),
    ]
    for what, act, evaluated, admitted in steps:
        act()
        result = admitter.run_once()
        assert (result.evaluated, result.admitted) == (evaluated, admitted), what
        if not admitted:
            assert "no node has enough free" in result.held["default/waiting"], what


def test_a_skipped_head_still_blocks_under_strict_fifo() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, cluster = setup([gated("head", 2, 10, "2026-01-01T00:00:00Z"), running], "StrictFIFO")
    admitter.run_once()
    cluster.add_pod(gated("behind", 1, 0, "2026-01-01T00:00:01Z"))
    result = admitter.run_once()
    assert result.evaluated == 0 and result.admitted == [], "the new pod is behind the head that wants the same"
    assert "StrictFIFO" in result.held["default/behind"]


def test_a_full_pass_evaluates_everyone() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, _ = setup([gated("a", 2, 0, "2026-01-01T00:00:00Z"), gated("b", 2, 0, "2026-01-01T00:00:01Z"), running])
    admitter.run_once()
    assert admitter.run_once().evaluated == 0
    assert admitter.run_once(full=True).evaluated == 2


def test_capacity_held_for_a_nominated_pod_of_higher_priority_is_not_admitted_to_others() -> None:
    nominee = make_pod("nominee").uid("u-nominee").req(gpu=4).priority(100).obj()
    nominee["status"]["nominatedNodeName"] = "n1"
    admitter, cluster = setup([gated("low", 1, 0, "2026-01-01T00:00:00Z"), nominee])
    result = admitter.run_once()
    assert result.admitted == [] and "no node has enough free example.com/gpu" in result.held["default/low"]
    cluster.delete_pod("default", "nominee")
    assert admitter.run_once().admitted == ["default/low"]


def test_a_pod_held_at_the_gate_says_why_once_per_verdict() -> None:
    """Found by the soak: a gated member of a group short of members stayed Pending with no
    condition and no Event anywhere - only /debug/queue knew why."""
    admitter, cluster = setup([gated("big", 4, 100, "2026-01-01T00:00:00Z"),
                               make_pod("running").uid("r").req(gpu=1).node("n1").obj()])
    admitter.run_once()
    admitter.run_once(full=True)  # the same verdict again: nothing new to say
    [event] = [e for e in cluster.events if e["object"] == "default/big"]
    assert (event["type"], event["reason"]) == ("Normal", "WaitingForAdmission")
    assert event["message"].startswith(f"held at scheduling gate {GATE}: ")
    assert "no node has enough free example.com/gpu" in event["message"]
    cluster.delete_pod("default", "running")
    assert admitter.run_once().admitted == ["default/big"]
    assert len([e for e in cluster.events if e["object"] == "default/big"]) == 1


def test_a_pod_kept_behind_the_head_under_strict_fifo_says_so_once() -> None:
    admitter, cluster = setup([gated("big", 4, 100, "2026-01-01T00:00:00Z"),
                               gated("small", 1, 10, "2026-01-01T00:00:01Z"),
                               make_pod("running").uid("r").req(gpu=1).node("n1").obj()], "StrictFIFO")
    admitter.run_once()
    admitter.run_once(full=True)

    def said(name: str) -> list[str]:
        return [e["message"] for e in cluster.events if e["object"] == f"default/{name}"]

    assert said("small") == [f"held at scheduling gate {GATE}: behind a pod of the queue that wants the same "
                             "resources (StrictFIFO)"]
    assert len(said("big")) == 1


def test_an_expired_admission_hold_is_a_change_the_loop_sees() -> None:
    """kube-scheduler never bound p30 and p20: their holds time out, and the loop's look at the
    cluster must count that as a change (a pass), not wait for the next resync."""
    clock = FakeClock()
    admitter, _, cluster = admitted_world(clock)
    assert admitter.run_once().admitted == ["default/p30", "default/p20"]
    before = admitter.change_count()
    clock.advance(31)
    assert admitter.change_count() > before
    assert admitter.run_once().admitted == ["default/p10"]


def test_strict_fifo_head_whose_gate_removal_failed_still_blocks_the_pods_behind_it() -> None:
    admitter, cluster = setup([gated("big", 4, 100, "2026-01-01T00:00:00Z"),
                               gated("small", 1, 10, "2026-01-01T00:00:01Z")], "StrictFIFO")
    real = admitter.writer.remove_scheduling_gate
    failures = iter([True])

    def flaky(namespace: str, name: str, gate: str, uid: str | None = None) -> None:
        if name == "big" and next(failures, False):
            raise WriteError("etcdserver: request timed out")  # transient, not a conflict
        real(namespace, name, gate, uid=uid)

    admitter.writer.remove_scheduling_gate = flaky  # type: ignore[method-assign]
    first = admitter.run_once()
    assert first.admitted == [] and "removing the gate failed" in first.held["default/big"]
    assert gates(cluster, "small") == [GATE], "small wants the GPUs big (the head) waits for"
    assert admitter.run_once().admitted == ["default/big"]


def test_an_admitted_pod_kube_scheduler_binds_ends_its_hold_at_once() -> None:
    """With kube-scheduler binding (no bindVerb), a's admission hold is not consumed by a bind of
    the extender: once the watch shows a bound, the hold ends at once - before the next pass it
    counted beside a itself, and y, filtered meanwhile, was refused the free GPU."""
    a = make_pod("a").uid("u-a").req(gpu=1).obj()
    a["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    y = make_pod("y").uid("u-y").req(gpu=1).obj()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=2).obj()], [a, y]))
    state = create_app(config_of(extender={"bindVerb": ""}, admission={}), source=cluster, clock=FakeClock(),
                       background=False).extensions["kube_extender"]
    assert state.admitter.run_once().admitted == ["default/a"]
    cluster.bind("default", "a", "u-a", "n1")  # kube-scheduler's own Binding; the watch shows it
    assert state.engine.filter(cluster.get_pod("default", "y"), ["n1"]).feasible == ["n1"]
    assert state.engine.handle.reservations.held() == []


def test_a_bind_between_admissions_placement_and_its_hold_leaves_no_node_overcommitted() -> None:
    """Admission places gated a on n1 (1 GPU), then holds it there; x's bind lands in between and,
    not seeing the hold, takes the GPU. Admission looks again with the hold in place: a goes
    nowhere now, so nothing stays held and a stays gated - not 1 used + 1 held on a 1-GPU node."""
    a = make_pod("a").uid("u-a").req(gpu=1).obj()
    a["spec"]["schedulingGates"] = [{"name": GATE}]
    x = make_pod("x").uid("u-x").req(gpu=1).obj()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=1).obj()], [a, x]))
    state = create_app(config_of(admission={}), source=cluster, clock=FakeClock(),
                       background=False).extensions["kube_extender"]
    admitter, engine = state.admitter, state.engine
    place = admitter.place

    def place_then_a_bind_lands(pod: Any, *args: Any, **kwargs: Any) -> Any:
        node = place(pod, *args, **kwargs)
        if pod.name == "a" and engine.cache.pod("u-x") is None:
            assert engine.bind("default", "x", "u-x", "n1") == ""  # a concurrent bind verb
        return node

    admitter.place = place_then_a_bind_lands
    result = admitter.run_once()
    assert result.admitted == [] and "no node has room" in result.held["default/a"]
    assert engine.handle.reservations.held() == []


PREEMPTING = [{"schedulerName": "default-scheduler", "plugins": {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}}]


def preempting_world(*pods: dict[str, Any]) -> tuple[Any, MemoryCluster, FakeClock]:
    clock = FakeClock()
    victim = make_pod("victim").uid("u-victim").req(gpu=4).priority(0).node("n1").obj()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], [victim, *pods]))
    app = create_app(config_of(admission={}, profiles=PREEMPTING), source=cluster, clock=clock, background=False)
    return app.extensions["kube_extender"].admitter, cluster, clock


def test_admission_preempts_for_a_pod_only_its_own_gate_holds_back() -> None:
    """kube-scheduler never tries a pod another controller still gates (nor preempts for it):
    before, admission evicted the victim for it and the nomination held the room for ever."""
    admitter, cluster, clock = preempting_world(gated("hi", 4, 100, "2026-01-01T00:00:00Z", "other.io/quota"))
    result = admitter.run_once()
    assert cluster.get_pod("default", "victim") is not None, "evicted for a pod still gated by another controller"
    assert result.admitted == [] and gates(cluster, "hi") == ["other.io/quota", GATE]
    hi = copy.deepcopy(cluster.get_pod("default", "hi"))
    hi["spec"]["schedulingGates"] = [{"name": GATE}]  # the other controller is done
    cluster.add_pod(hi)
    clock.advance(1)
    assert admitter.run_once().admitted == ["default/hi"]
    assert cluster.get_pod("default", "victim") is None  # now, as kube-scheduler's cycle would


def test_a_gated_pod_being_deleted_is_not_admitted_and_holds_nothing() -> None:
    """kube-scheduler never schedules a pod with a deletionTimestamp: it took the room (a hold)
    from the pod behind it for as long as its finalizer stayed."""
    dying = gated("dying", 4, 10, "2026-01-01T00:00:00Z")
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    dying["metadata"]["finalizers"] = ["example.com/cleanup"]
    admitter, cluster = setup([dying, gated("waiting", 4, 10, "2026-01-01T00:00:05Z")])
    assert admitter.run_once().admitted == ["default/waiting"]


def test_a_hold_ends_when_its_pending_pod_starts_deleting() -> None:
    admitter, cluster = setup([gated("a", 4, 10, "2026-01-01T00:00:00Z"), gated("b", 4, 10, "2026-01-01T00:00:05Z")])
    assert admitter.run_once().admitted == ["default/a"]
    a = copy.deepcopy(cluster.get_pod("default", "a"))
    a["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    a["metadata"]["finalizers"] = ["example.com/cleanup"]
    cluster.add_pod(a)
    assert admitter.run_once().admitted == ["default/b"]


def test_a_failed_gate_removal_is_a_reason_for_another_pass() -> None:
    """The loop runs a pass when the cluster changed (or at the resync, 60 s): a pod holding
    nothing whose gate removal failed changed nothing, and waited for the resync."""
    web = make_pod("web").uid("u-web").obj()  # no managed requests: nothing held, nothing released
    web["spec"]["schedulingGates"] = [{"name": GATE}]
    admitter, cluster = setup([web])
    real = admitter.writer.remove_scheduling_gate
    failures = iter([True])

    def flaky(namespace: str, name: str, gate: str, uid: str | None = None) -> None:
        if next(failures, False):
            raise WriteError("etcdserver: request timed out")
        real(namespace, name, gate, uid=uid)

    admitter.writer.remove_scheduling_gate = flaky  # type: ignore[method-assign]
    seen = admitter.change_count()
    assert "removing the gate failed" in admitter.run_once().held["default/web"]
    assert admitter.change_count() != seen
    assert admitter.run_once().admitted == ["default/web"]


def constrained(name: str, **spec: Any) -> dict[str, Any]:
    pod = gated(name, 2, 100, "2026-01-01T00:00:00Z")
    pod["spec"].update(spec)
    return pod


def node_world(pod: dict[str, Any], *, preempting: bool = False, free_a1: bool = False) -> tuple[Any, MemoryCluster]:
    """a1 (pool a) full of a low-priority pod, b1 (pool b) full of a high-priority one; ``pod``
    asks for 2 GPUs, which only a1 could give (by preemption, or once free)."""
    nodes = [make_node("a1").alloc(gpu=2).labels(pool="a").obj(), make_node("b1").alloc(gpu=2).labels(pool="b").obj()]
    pods = [make_pod("vip").uid("u-vip").req(gpu=2).priority(1000).node("b1").obj(), pod]
    if not free_a1:
        pods.append(make_pod("low").uid("u-low").req(gpu=2).priority(0).node("a1").obj())
    cluster = MemoryCluster(cluster_objects(nodes, pods))
    config = config_of(admission={}, **({"profiles": PREEMPTING} if preempting else {}))
    return create_app(config, source=cluster, clock=FakeClock(), background=False).extensions["kube_extender"], cluster


NOT_A1 = [
    pytest.param({"nodeSelector": {"pool": "b"}}, id="nodeSelector"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}]}}}},
        id="required node affinity"),
]


@pytest.mark.parametrize("spec", NOT_A1)
def test_admission_preempts_nothing_on_a_node_the_pod_cannot_use(spec: dict[str, Any]) -> None:
    """kube-scheduler filters such nodes before anything else (UnschedulableAndUnresolvable: no
    preemption there): admission evicted a1's pod for a pod that can never run on a1."""
    state, cluster = node_world(constrained("hi", **spec), preempting=True)
    result = state.admitter.run_once()
    assert cluster.get_pod("default", "low") is not None, f"evicted for a pod that cannot use a1: {result}"
    assert result.admitted == []


@pytest.mark.parametrize("spec", NOT_A1)
def test_admission_holds_no_room_on_a_node_the_pod_cannot_use(spec: dict[str, Any]) -> None:
    state, cluster = node_world(constrained("hi", **spec), free_a1=True)
    result = state.admitter.run_once(full=True)
    assert result.admitted == [] and "hi" not in str(state.engine.queue_state()["reserved"]), result


@pytest.mark.parametrize("node", [
    pytest.param(make_node("a1").alloc(gpu=2).labels(pool="a").obj() | {"spec": {"unschedulable": True}}, id="cordoned"),
    pytest.param(make_node("a1").alloc(gpu=2).labels(pool="a").obj() | {"spec": {"taints": [
        {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}, id="tainted"),
])
def test_admission_holds_no_room_on_a_cordoned_or_tainted_node(node: dict[str, Any]) -> None:
    pod = constrained("hi")
    cluster = MemoryCluster(cluster_objects([node], [pod]))
    state = create_app(config_of(admission={}), source=cluster, clock=FakeClock(),
                       background=False).extensions["kube_extender"]
    assert state.admitter.run_once(full=True).admitted == []
    tolerating = copy.deepcopy(pod)  # tolerating it, the pod goes there
    tolerating["spec"]["tolerations"] = [{"operator": "Exists"}]
    cluster.add_pod(tolerating)
    assert state.admitter.run_once(full=True).admitted == ["default/hi"]


def test_two_gangs_interleaved_in_queue_order_are_admitted_one_whole_group_at_a_time() -> None:
    """Members were admitted one by one: a0 and b0 each held half of n1 and neither group could
    be planned; 30 s later a1 and b1 did the same - two groups that together exceed the cluster
    each kept a part, the deadlock docs/gangs.md says cannot happen."""
    from test_gang import filter_pod, gang_state, member

    def at_gate(pod: dict[str, Any], created: str) -> dict[str, Any]:
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
        pod["metadata"]["creationTimestamp"] = created
        return pod

    pods = [at_gate(member("a0", group="a", size=2), "2026-01-01T00:00:00Z"),
            at_gate(member("b0", group="b", size=2), "2026-01-01T00:00:01Z"),
            at_gate(member("a1", group="a", size=2), "2026-01-01T00:00:02Z"),
            at_gate(member("b1", group="b", size=2), "2026-01-01T00:00:03Z")]
    state, cluster = gang_state({"n1": 2}, pods, clock=FakeClock())
    result = state.admitter.run_once()
    assert result.admitted == ["default/a0", "default/a1"] and "default/b0" in result.held, result
    assert filter_pod(state.engine, cluster, "a0", ["n1"]).feasible == ["n1"]  # group a can be planned


def test_a_hold_given_back_after_a_failed_bind_ends_when_the_pod_is_deleted() -> None:
    """A pass during the bind saw the hold consumed and forgot it; the hold the failed bind gave
    back was then no admission hold for the Admitter: deleting the pod left its room held for
    holdTimeout, and the next gated pod was refused."""
    clock = FakeClock()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()],
                                            [gated("a", 4, 10, "2026-01-01T00:00:00Z"),
                                             gated("b", 4, 10, "2026-01-01T00:00:05Z")]))
    state = create_app(config_of(admission={}), source=cluster, clock=clock, background=False).extensions["kube_extender"]
    admitter = state.admitter
    assert admitter.run_once().admitted == ["default/a"]

    def refused(*_: Any, **__: Any) -> None:
        admitter.run_once()  # the loop's pass while the Binding is in flight
        raise WriteError("the API server said no")

    cluster.bind = refused  # type: ignore[method-assign]
    assert "bind failed" in state.engine.bind("default", "a", "u-a", "n1")
    cluster.delete_pod("default", "a")
    clock.advance(1)
    assert admitter.run_once(full=True).admitted == ["default/b"]


@pytest.mark.parametrize("replicas, room, admitted", [
    (3, 2, ["a0", "a1"]),  # more replicas than minMember (elastic): those that fit go
    (2, 2, ["a0", "a1"]),
    (2, 1, ["a0"]),        # as before: a group that cannot complete is no worse than one by one
])
def test_a_groups_gated_members_that_fit_at_once_are_admitted(replicas: int, room: int, admitted: list[str]) -> None:
    """Found in a second-look review: requiring every gated member to fit starved a group with
    more replicas than its minMember for good."""
    from test_gang import gang_state, member

    pods = []
    for i in range(replicas):
        pod = member(f"a{i}", group="a", size=2)
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
        pod["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
        pods.append(pod)
    state, _ = gang_state({"n1": room}, pods, clock=FakeClock())
    assert state.admitter.run_once(full=True).admitted == [f"default/{n}" for n in admitted]


# ---- a pod group's minMember at the gate ------------------------------------------------------------

def group_member(name: str, group: str = "a", *, created: str = "2026-01-01T00:00:00Z", at_gate: bool = True,
                 node: str | None = None) -> dict[str, Any]:
    """A 1-GPU member of ``group`` (sized by its PodGroup: no annotation), gated, pending or on ``node``."""
    pod = make_pod(name).uid(f"u-{name}").req(gpu=1).labels(**{GROUP_LABEL: group}).created(created)
    pod = pod.node(node) if node else pod
    obj = pod.obj()
    if at_gate:
        obj["spec"]["schedulingGates"] = [{"name": GATE}]
    return obj


def podgroup_world(gpus: int, pods: list[dict[str, Any]], strategy: str = "BestEffortFIFO",
                   min_member: int = 4) -> tuple[Any, MemoryCluster]:
    """Gang over one node of ``gpus`` GPUs; PodGroup ``a`` of ``min_member``."""
    from test_gang import gang_state
    return gang_state({"n1": gpus}, pods, clock=FakeClock(), config={"admission": {"strategy": strategy}},
                      pod_groups=[make_pod_group("a").min_member(min_member).obj()])


@pytest.mark.parametrize("strategy, behind, then", [
    ("BestEffortFIFO", "admitted", 2),  # the room the group's seats would have taken is the pod's
    ("StrictFIFO", "blocked", 3),       # a group without room blocks what it wants, as a pod without room
])
def test_a_pod_group_short_of_room_for_min_member_is_not_admitted_at_all(strategy: str, behind: str,
                                                                        then: int) -> None:
    """A known gap (the last session's notes): three of four gated members with room were admitted and
    held three GPUs that Gang's Permit could not use until it timed out, while a pod behind them
    that fitted waited - all-or-nothing broken at the gate."""
    members = [group_member(f"a{i}", created=f"2026-01-01T00:00:0{i}Z") for i in range(4)]
    later = gated("behind", 1, 0, "2026-01-01T00:00:09Z")
    running = make_pod("running").uid("u-running").req(gpu=1).node("n1").obj()
    state, cluster = podgroup_world(4, [*members, later, running], strategy)
    result = state.admitter.run_once()
    group_keys = [f"default/a{i}" for i in range(4)]
    assert not set(result.admitted) & set(group_keys), result
    for key in group_keys:
        assert result.held[key] == "pod group default/a: 3 of minMember 4 members have room", result
    assert gates(cluster, "a0") == [GATE]
    [event] = [e for e in cluster.events if e["object"] == "default/a0"]
    assert event["reason"] == "WaitingForAdmission" and "3 of minMember 4 members have room" in event["message"]
    again = state.admitter.run_once()  # behind's hold counted now, if admitted; a reason said once
    assert {again.held[k] for k in group_keys} == {f"pod group default/a: {then} of minMember 4 members have room"}
    said = 1 if then == 3 else 2
    assert [len([e for e in cluster.events if e["object"] == k]) for k in group_keys] == [said] * 4
    held = [uid for uid, _ in state.engine.handle.reservations.held()]
    if behind == "admitted":
        assert result.admitted == ["default/behind"] and held == ["u-behind"]
        cluster.delete_pod("default", "behind")  # it ran and finished
    else:
        assert result.admitted == [] and "StrictFIFO" in result.held["default/behind"] and held == []
    cluster.delete_pod("default", "running")  # room for the fourth
    assert state.admitter.run_once().admitted == group_keys, "all four together"


@pytest.mark.parametrize("gpus, admitted", [
    (2, ["default/a2", "default/a3"]),  # 2 bound + 2 with room = minMember
    (1, []),                            # 2 bound + 1 with room: none
])
def test_members_already_bound_count_towards_min_member_at_the_gate(gpus: int, admitted: list[str]) -> None:
    bound = [group_member(f"a{i}", at_gate=False, node="n1") for i in range(2)]
    waiting = [group_member(f"a{i}", created=f"2026-01-01T00:00:0{i}Z") for i in (2, 3)]
    state, _ = podgroup_world(2 + gpus, [*bound, *waiting])
    result = state.admitter.run_once()
    assert result.admitted == admitted, result
    if not admitted:
        assert result.held["default/a2"] == "pod group default/a: 3 of minMember 4 members have room"
        assert state.engine.handle.reservations.held() == []


def test_members_admitted_and_not_bound_yet_count_towards_min_member() -> None:
    """One member is bound, one is past the gate and not bound yet (kube-scheduler has it): with
    room for the last two, the group reaches minMember and they are admitted; a member being
    deleted does not count."""
    dying = group_member("a9", at_gate=False)
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    dying["metadata"]["finalizers"] = ["example.com/cleanup"]
    pods = [group_member("a0", at_gate=False, node="n1"), group_member("a1", at_gate=False),
            group_member("a2", created="2026-01-01T00:00:02Z"), group_member("a3", created="2026-01-01T00:00:03Z")]
    state, _ = podgroup_world(4, pods)
    assert state.admitter.run_once().admitted == ["default/a2", "default/a3"]
    state, _ = podgroup_world(4, [dying, *[p for p in pods if p["metadata"]["name"] != "a1"]])
    result = state.admitter.run_once()
    assert result.admitted == [] and "3 of minMember 4" in result.held["default/a2"], result


def test_a_member_assumed_in_permit_counts_once_towards_min_member() -> None:
    """a1 is assumed (its bind waits in Permit): the cache still lists it pending too, and it must
    count once - a0 bound, a1 assumed and room for one of a2 and a3 make 3 of 4."""
    pods = [group_member("a0", at_gate=False, node="n1"), group_member("a1", at_gate=False),
            group_member("a2", created="2026-01-01T00:00:02Z"), group_member("a3", created="2026-01-01T00:00:03Z")]
    state, _ = podgroup_world(3, pods)
    cache = state.engine.cache
    assert cache.assume(cache.pending_pod("default", "a1"), "n1").ok
    result = state.admitter.run_once()
    assert result.admitted == [] and result.held["default/a2"] == \
        "pod group default/a: 3 of minMember 4 members have room", result


def test_a_single_gated_member_is_admitted_only_when_it_completes_the_group() -> None:
    """Two members bound, one still behind another controller's gate (not past the gate: kube-
    scheduler cannot try it), a3 gated with room: 3 of 4, a3 waits; once the other controller
    lifts its gate, a3 completes the group."""
    other = group_member("a2", at_gate=False)
    other["spec"]["schedulingGates"] = [{"name": "other.io/quota"}]
    pods = [group_member("a0", at_gate=False, node="n1"), group_member("a1", at_gate=False, node="n1"), other,
            group_member("a3")]
    state, cluster = podgroup_world(4, pods)
    result = state.admitter.run_once()
    assert result.admitted == [] and result.held["default/a3"] == \
        "pod group default/a: 3 of minMember 4 members have room", result
    lifted = copy.deepcopy(cluster.get_pod("default", "a2"))
    lifted["spec"]["schedulingGates"] = []
    cluster.add_pod(lifted)
    assert state.admitter.run_once().admitted == ["default/a3"]


def held_uids(state: Any) -> list[str]:
    return sorted(uid for uid, _ in state.engine.handle.reservations.held())


def test_a_pod_group_is_held_at_the_gate_only_by_a_profile_that_runs_gang() -> None:
    """The default profile (PrioritySort, NodeResources, DefaultBinder) has no Gang: nothing waits
    for the group in Permit, so its PodGroup's minMember is nothing to the gate - two members with
    room of a PodGroup of minMember 3 are admitted as any pods."""
    pods = [group_member(f"a{i}", created=f"2026-01-01T00:00:0{i}Z") for i in range(2)]
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods,
                                            pod_groups=[make_pod_group("a").min_member(3).obj()]))
    admitter = create_app(config_of(admission={}), source=cluster, clock=FakeClock(),
                          background=False).extensions["kube_extender"].admitter
    result = admitter.run_once(full=True)
    assert result.admitted == ["default/a0", "default/a1"], result


def test_strict_fifo_keeps_a_booked_group_whole_around_a_pod_between_its_members() -> None:
    """Group a (minMember 4) fits exactly on the 4 GPUs; pod y (1 GPU) sits between a0 and a1 in
    queue order. The group's seats are booked at a0, ahead of y: y has no room and blocks under
    StrictFIFO, but not the members whose seats were booked before it - all four go, never a0
    alone (holding a GPU Gang's Permit cannot use)."""
    members = [group_member(f"a{i}", created=f"2026-01-01T00:00:0{2 * i}Z") for i in range(4)]
    y = gated("y", 1, 0, "2026-01-01T00:00:01Z")
    state, cluster = podgroup_world(4, [*members, y], "StrictFIFO")
    group = [f"default/a{i}" for i in range(4)]
    result = state.admitter.run_once()
    assert result.admitted == group and "StrictFIFO" not in result.held["default/y"], result
    again = state.admitter.run_once()
    assert again.admitted == [] and "default/y" in again.held, again
    assert held_uids(state) == [f"u-a{i}" for i in range(4)]


def test_a_member_behind_another_controllers_gate_is_not_counted_as_having_room() -> None:
    """As test_a_single_gated_member_is_admitted_only_when_it_completes_the_group, but a2 carries
    the extender's gate too (besides other.io/quota): kube-scheduler cannot try it either way, so
    it has no seat and a3 is not admitted alone (it would hold a GPU, waiting in Gang's Permit)."""
    other = group_member("a2", created="2026-01-01T00:00:02Z")
    other["spec"]["schedulingGates"] = [{"name": "other.io/quota"}, {"name": GATE}]
    pods = [group_member("a0", at_gate=False, node="n1"), group_member("a1", at_gate=False, node="n1"), other,
            group_member("a3", created="2026-01-01T00:00:03Z")]
    state, cluster = podgroup_world(4, pods)
    result = state.admitter.run_once()
    assert gates(cluster, "a2")[0] == "other.io/quota"
    assert result.admitted == [] and held_uids(state) == [], result
    assert result.held["default/a3"] == "pod group default/a: 3 of minMember 4 members have room", result


def _gang_app(nodes: dict[str, int], pods: list[dict], *, pod_groups: list[dict] | None = None,
             points: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([make_node(n).alloc(gpu=g).obj() for n, g in nodes.items()], pods,
                                            pod_groups=pod_groups))
    cfg = config_of(**{"admission": {}, **(config or {})},
                    profiles=[{"schedulerName": "default-scheduler",
                               "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}, **(points or {})},
                               "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s"}}]}])
    return create_app(cfg, source=cluster, clock=FakeClock(), background=False).extensions["kube_extender"], cluster


def _member(name: str, gpus: int, *, priority: int = 0, created: str = "2026-01-01T00:00:00Z",
           gated: bool = True, node: str | None = None, group: str = "a") -> dict[str, Any]:
    b = make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).labels(**{GROUP_LABEL: group}).created(created)
    if node:
        b = b.node(node)
    obj = b.obj()
    if gated:
        obj["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    return obj


def test_a_gang_that_fits_only_by_preemption_is_admitted() -> None:
    """PodGroup a (minMember 2), two 2-GPU members of priority 100, gated; n1 (4 GPUs) is full of
    a priority-0 pod. Preemption at admission evicts it and the whole group runs, as
    kube-scheduler's DefaultPreemption would for each member (judged all or nothing on the room
    free before preemption, the group was 'short' and no room was ever made: stuck for good)."""
    victim = make_pod("victim").uid("u-victim").req(gpu=4).priority(0).node("n1").obj()
    pods = [_member("a0", 2, priority=100), _member("a1", 2, priority=100, created="2026-01-01T00:00:01Z"), victim]
    state, cluster = _gang_app({"n1": 4}, pods, pod_groups=[make_pod_group("a").min_member(2).obj()], points={"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}})
    admitted: list[str] = []
    for _ in range(3):
        admitted += state.admitter.run_once(full=True).admitted
    assert cluster.get_pod("default", "victim") is None, state.admitter.last
    assert sorted(admitted) == ["default/a0", "default/a1"], state.admitter.last


def test_a_gang_within_its_namespaces_min_reclaims_lent_quota_at_admission() -> None:
    """Namespace b (min 2 GPUs) lent its share: a's x1 and x2 (borrowers) fill n1. PodGroup b/g
    (minMember 2): two gated 1-GPU members. CapacityQuota's reclaim at admission evicts the
    borrowers for them (judged all or nothing on the room free before reclaim, the group was
    'short' and no reclaim ever ran for it)."""
    from builders import make_elastic_quota

    def borrower(name: str) -> dict[str, Any]:
        raw = make_pod(name, "a").uid(f"u-{name}").req(gpu=1).node("n1").obj()
        raw["status"]["startTime"] = "2026-01-01T00:00:00Z"
        return raw

    def gm(name: str, created: str) -> dict[str, Any]:
        raw = make_pod(name, "b").uid(f"u-{name}").req(gpu=1).labels(**{GROUP_LABEL: "g"}).created(created).obj()
        raw["spec"]["schedulingGates"] = [{"name": GATE}]
        return raw

    cluster = MemoryCluster({**cluster_objects([make_node("n1").alloc(gpu=2).obj()],
                                               [borrower("x1"), borrower("x2"), gm("p0", "2026-01-01T00:00:00Z"),
                                                gm("p1", "2026-01-01T00:00:01Z")],
                                               pod_groups=[make_pod_group("g", "b").min_member(2).obj()]),
                             "ElasticQuota": [make_elastic_quota("a", min={"gpu": 0}, max={"gpu": 4}),
                                              make_elastic_quota("b", min={"gpu": 2})]})
    cfg = config_of(admission={}, profiles=[{"schedulerName": "default-scheduler", "plugins": {"multiPoint": {
        "enabled": [{"name": "Gang"}, {"name": "CapacityQuota"}]}}}])
    state = create_app(cfg, source=cluster, clock=FakeClock(), background=False).extensions["kube_extender"]
    admitted: list[str] = []
    for _ in range(3):
        admitted += state.admitter.run_once(full=True).admitted
    alive = {p["metadata"]["name"] for p in cluster.pods()}
    assert not {"x1", "x2"} & alive, state.admitter.last
    assert sorted(admitted) == ["b/p0", "b/p1"], state.admitter.last


def test_members_past_the_gate_count_only_when_they_have_room() -> None:
    """PodGroup a (minMember 3), 1-GPU members, one 2-GPU node where another pod uses 1 GPU: a0 and
    a1 are past the gate but pending and hold nothing (kube-scheduler found no room), a2 is gated.
    The group needs 3 GPUs and 1 is free: a2 is not admitted, and y behind it, which fits, is."""
    pods = [group_member("a0", at_gate=False), group_member("a1", at_gate=False),
            group_member("a2", created="2026-01-01T00:00:02Z"), gated("y", 1, 0, "2026-01-01T00:00:09Z"),
            make_pod("running").uid("u-running").req(gpu=1).node("n1").obj()]
    state, cluster = podgroup_world(2, pods, min_member=3)
    result = state.admitter.run_once()
    assert result.admitted == ["default/y"], f"{result}; held {held_uids(state)}"
    assert result.held["default/a2"] == "pod group default/a: 1 of minMember 3 members have room", result


def test_gangs_plan_for_its_gated_members_does_not_count_twice_against_them() -> None:
    """PodGroup a (minMember 3), 1-GPU members, n1 with 3 GPUs: the whole group fits. a0 is past
    the gate (e.g. a1's and a2's gate removal failed in the pass that admitted all three);
    kube-scheduler filters a0 and Gang plans a slot for each of a0, a1, a2. The next pass books
    a1 (a2's planned slot counted against it), then a2 - where a1 was counted twice, by its
    planned slot and its trial seat: a2 got no seat, and the group was 'short' (2 of 3)."""
    pods = [_member("a0", 1, gated=False), _member("a1", 1, created="2026-01-01T00:00:01Z"),
            _member("a2", 1, created="2026-01-01T00:00:02Z")]
    state, cluster = _gang_app({"n1": 3}, pods, pod_groups=[make_pod_group("a").min_member(3).obj()])
    assert state.engine.filter(cluster.get_pod("default", "a0"), ["n1"]).feasible == ["n1"]
    planned = sorted(uid for uid, _ in state.engine.handle.reservations.held())
    assert planned == ["u-a0", "u-a1", "u-a2"], planned
    result = state.admitter.run_once(full=True)
    assert result.admitted == ["default/a1", "default/a2"], result
