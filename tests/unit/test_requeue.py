"""Nudges and timed wake-ups: pods the extender rejected are touched when a change their rejection
did not see frees room for them (so kube-scheduler retries them whatever its version and its
informer's timing) or when a plugin's back-off ends; rate-limited."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock

NUDGED = "kube-extender.io/nudged-at"


def setup(pending: int = 1, qps: float = 100.0, min_interval: str = "10s") -> tuple[Any, Any, MemoryCluster, FakeClock]:
    pods = [make_pod("running").uid("r").req(gpu=4).node("n1").obj()]
    pods += [make_pod(f"p{i}").uid(f"u-p{i}").req(gpu=1).obj() for i in range(pending)]
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods))
    clock = FakeClock()
    app = create_app(config_of(requeue={"nudge": True, "qps": qps, "minInterval": min_interval}), source=cluster,
                     clock=clock, background=False)
    state = app.extensions["kube_extender"]
    for i in range(pending):
        assert not state.engine.filter(cluster.get_pod("default", f"p{i}"), ["n1"]).feasible
    return state.engine, state.nudger, cluster, clock


def nudged(cluster: MemoryCluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.pods()
                  if NUDGED in (p["metadata"].get("annotations") or {}))


def test_a_rejected_pod_is_nudged_when_capacity_is_released_and_not_before() -> None:
    engine, nudger, cluster, _ = setup()
    assert [r.plugins for r in engine.queue.unschedulable_pods.list()] == [frozenset({"NodeResources"})]
    assert engine.queue_state()["rejectedInFilter"][0]["reason"].startswith("NodeResources: Insufficient")
    cluster.add_pod(make_pod("cpu-only").uid("c").obj())  # an event NodeResources did not declare
    assert nudger.run_once() == [] and nudged(cluster) == []
    cluster.delete_pod("default", "running")
    assert nudger.run_once() == ["default/p0"] and nudged(cluster) == ["p0"]
    assert engine.queue.unschedulable_pods.list() == [] and nudger.run_once() == [], "once: its own update does not count"


def test_one_freed_gpu_nudges_one_pod_in_queue_order() -> None:
    engine, nudger, cluster, _ = setup(pending=3)
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"], "room for one: the first in queue order"
    assert nudger.run_once() == []
    assert [r.pod.name for r in engine.queue.unschedulable_pods.list()] == ["p1", "p2"], "still rejected: a later change may help"
    cluster.add_node(make_node("n3").alloc(gpu=2).obj())
    assert sorted(nudger.run_once()) == ["default/p1", "default/p2"]


def test_a_change_that_frees_nothing_the_pod_needs_nudges_nothing() -> None:
    engine, nudger, cluster, _ = setup()
    cluster.add_node(make_node("n2").alloc(gpu=0).obj())  # a capacity event, but no GPU on it
    assert nudger.run_once() == [] and nudged(cluster) == []
    assert [r.pod.name for r in engine.queue.unschedulable_pods.list()] == ["p0"]


def test_a_pod_rejected_after_the_change_is_not_nudged() -> None:
    """kube-scheduler retried it once the extender had seen the change: that answer was not stale."""
    engine, nudger, cluster, _ = setup()
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible  # asked about n1 only
    assert nudger.run_once() == []


def test_nudges_are_rate_limited_and_due_pods_wait_for_a_token() -> None:
    engine, nudger, cluster, clock = setup(pending=5, qps=1.0)  # burst 2
    cluster.delete_pod("default", "running")  # room for 4 of the 5
    assert len(nudger.run_once()) == 2
    assert nudger.run_once() == [], "no token, no new event: the others stay due"
    clock.advance(1.0)
    assert len(nudger.run_once()) == 1
    clock.advance(10.0)
    assert len(nudger.run_once()) == 1 and nudged(cluster) == ["p0", "p1", "p2", "p3"]


def test_a_pod_is_nudged_at_most_once_per_min_interval() -> None:
    engine, nudger, cluster, clock = setup(min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    engine.filter(cluster.get_pod("default", "p0"), ["n1"])  # rejected again
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []
    clock.advance(31)
    assert nudger.run_once() == ["default/p0"]


def test_pods_bound_or_deleted_meanwhile_are_not_nudged() -> None:
    engine, nudger, cluster, _ = setup(pending=2)
    cluster.delete_pod("default", "p0")
    cluster.bind("default", "p1", "u-p1", "n1")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == [] and engine.queue.unschedulable_pods.list() == []


@pytest.mark.parametrize("nudge", [None, False], ids=["default: on", "turned off"])
def test_event_nudges_are_on_by_default_and_timed_wake_ups_always(nudge: bool | None) -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=1).obj()],
                                            [make_pod("p0").uid("u-p0").req(gpu=2).obj()]))
    clock = FakeClock()
    config = config_of() if nudge is None else config_of(requeue={"nudge": nudge})
    state = create_app(config, source=cluster, clock=clock, background=False).extensions["kube_extender"]
    engine, nudger = state.engine, state.nudger
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible
    cluster.add_node(make_node("n2").alloc(gpu=2).obj())
    assert nudger.run_once() == (["default/p0"] if nudge is None else [])
    clock.advance(1.0)
    engine.handle.requeue_after(engine.cache.pending_pod("default", "p0"), 5.0)
    assert nudger.run_once() == []
    clock.advance(5.0)
    assert nudger.run_once() == ["default/p0"] and nudged(cluster) == ["p0"]
    assert nudger.run_once() == [], "a wake-up is done once"


# ---- a pass over many rejections ------------------------------------------------------------------

MANY = 4096


def _own_release(cluster: MemoryCluster, engine: Any) -> None:
    """An ALLOCATION_RELEASED change to p0 itself (an assumption of it dropped)."""
    info = engine.cache.pending_pod("default", "p0")
    assert engine.cache.assume(info, "n1").ok and engine.cache.forget(info.uid)


def _room_elsewhere(cluster: MemoryCluster, engine: Any) -> None:
    """A node with room for 4 added: pods asked about n1 only stay rejected there."""
    cluster.add_node(make_node("n2").alloc(gpu=4).obj())


@pytest.mark.parametrize("first, between, expected", [
    # rejections of p0..p{first-1} (asked about n1, which is full), then `between` changes, then
    # the other rejections; 200 unrelated changes follow in every case
    pytest.param(MANY, [], [], id="unrelated changes only: none"),
    pytest.param(1000, [_room_elsewhere], ["p0", "p1", "p10", "p100"],
                 id="room for 4 after some rejections: the first 4 in queue order (ties by name) of those rejected before"),
    pytest.param(1, [_own_release], [], id="the pod's own change: none"),
    pytest.param(1, [_room_elsewhere, _own_release], ["p0"], id="room, then the pod's own change: woken"),
])
def test_a_pass_over_many_rejections_decides_hintless_plugins_without_going_change_by_change(
        first: int, between: list[Callable[[MemoryCluster, Any], None]], expected: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [make_pod("running").uid("r").req(gpu=4).node("n1").obj()]
    pods += [make_pod(f"p{i}").uid(f"u-p{i}").req(gpu=1).obj() for i in range(MANY)]
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods))
    app = create_app(config_of(requeue={"nudge": True, "qps": 1000}), source=cluster, clock=FakeClock(),
                     background=False)
    engine, nudger = app.extensions["kube_extender"].engine, app.extensions["kube_extender"].nudger
    for i in range(MANY):
        if i == first:
            for act in between:
                act(cluster, engine)
        assert not engine.filter(cluster.get_pod("default", f"p{i}"), ["n1"]).feasible
    assert len(engine.queue.unschedulable_pods.list()) == MANY
    assert {p for r in engine.queue.unschedulable_pods.list() for p in r.plugins} == {"NodeResources"}
    for i in range(200):
        cluster.add_pod(make_pod(f"cpu{i}").uid(f"c{i}").obj())  # Pod/Add: NodeResources did not register it
    calls = []
    for fw in engine.frameworks.values():
        monkeypatch.setattr(fw, "wakes", lambda *args, _real=fw.wakes: calls.append(args) or _real(*args))
    assert sorted(k.split("/")[1] for k in nudger.run_once()) == sorted(expected)
    assert calls == [], "a plugin without a queueing hint is decided by the latest change of each event"
    assert nudged(cluster) == sorted(expected)


def test_a_replica_that_was_not_leading_skips_the_changes_of_that_time() -> None:
    engine, nudger, cluster, _ = setup()
    cluster.delete_pod("default", "running")  # would wake p0, but happens while not leading
    answers = iter([False, True])

    def leading() -> bool:
        answer = next(answers, None)
        if answer is None:
            nudger.stop()
            return False
        return answer

    nudger.run_forever(leading, period=0.0)
    assert nudged(cluster) == [] and [r.pod.name for r in engine.queue.unschedulable_pods.list()] == ["p0"]
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"], "changes after it leads again count"


def test_a_change_between_a_rejections_snapshot_and_its_record_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filter judged p0 from a snapshot; the capacity is freed and a nudge pass runs (another
    thread) before Filter records the rejection: the next pass must still see that change."""
    engine, nudger, cluster, _ = setup(pending=0)
    cluster.add_pod(make_pod("p0").uid("u-p0").req(gpu=1).obj())
    record = engine.queue.unschedulable

    def meanwhile(pod: Any, rejected: Any, seq: int) -> None:
        cluster.delete_pod("default", "running")  # applied after Filter's snapshot
        assert nudger.run_once() == []  # nothing rejected yet
        record(pod, rejected, seq)

    monkeypatch.setattr(engine.queue, "unschedulable", meanwhile)
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible  # from the stale view
    assert nudger.run_once() == ["default/p0"] and nudged(cluster) == ["p0"]


def test_a_reservation_that_expires_nudges_the_pods_it_kept_out() -> None:
    """Reservations expire only when read: the nudge pass reads them, so their release is seen."""
    from test_gang import filter_pod, gang_state, group_of

    clock = FakeClock()
    low = make_pod("low").uid("u-low").req(gpu=1).obj()
    state, cluster = gang_state({"n1": 2}, group_of("a", 2) + [low], clock=clock,
                                config={"requeue": {"nudge": True}}, reservationTimeout="10s")
    assert filter_pod(state.engine, cluster, "a0", ["n1"]).feasible == ["n1"]  # a's plan holds both GPUs
    assert filter_pod(state.engine, cluster, "low", ["n1"]).failed == {"n1": "Insufficient example.com/gpu"}
    assert state.nudger.run_once() == []
    clock.advance(11)  # a1 never came: the plan expires
    assert state.nudger.run_once() == ["default/low"]


def test_the_release_of_an_earlier_pod_of_the_same_name_nudges_the_new_one() -> None:
    """A StatefulSet's web-0 is deleted and created again; the new one is rejected from a view
    that still counts the old one. The old one's release (a change to default/web-0) is what the
    new one waits for, not a change of its own: it is nudged."""
    from builders import cluster_objects, make_node, make_pod
    from conftest import config_of

    from extender.app import create_app
    from extender.cluster.memory import MemoryCluster
    from extender.framework.clock import FakeClock

    old = make_pod("web-0").uid("u-old").req(gpu=1).node("n1").obj()
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=1).obj()], [old]))
    state = create_app(config_of(requeue={"nudge": True}), source=cluster, clock=FakeClock(),
                       background=False).extensions["kube_extender"]
    new = make_pod("web-0").uid("u-new").req(gpu=1).obj()
    assert not state.engine.filter(new, ["n1"]).feasible  # the extender still counts the old web-0
    cluster.delete_pod("default", "web-0")  # the watch catches up: the old one's GPU is free
    cluster.add_pod(new)
    assert state.nudger.run_once() == ["default/web-0"]


def test_a_pod_kept_due_and_retried_after_the_change_is_not_nudged_once_its_interval_ends() -> None:
    """p0 is nudged (n2 added), rejected again; n3 is added within its minInterval, so it is kept
    due. kube-scheduler retries it on its own meanwhile and the extender, which has applied n3,
    rejects it: that answer is not stale, so when the interval ends nothing is left to nudge."""
    engine, nudger, cluster, clock = setup(min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # woken, but within its minInterval: kept due
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible  # retried after n3
    clock.advance(31)
    assert nudger.run_once() == []


def test_a_pod_kept_due_is_still_nudged_for_a_change_its_newer_rejection_did_not_see() -> None:
    """p0, kept due by its minInterval, is retried and rejected again (q3 took n3 first); then
    'running' is deleted, after that answer: p0 is nudged for it once the interval ends."""
    """p0 is woken by n3 but kept due by minInterval; q3 takes n3 and kube-scheduler retries p0:
    rejected from a view that saw n3 - not the deletion of `running` the extender applies right
    after (kube-scheduler's informer saw it first: the stale-view case nudges exist for). That
    rejection is stale for the deletion, so p0 must be nudged once its interval ends. Instead the
    next pass skips p0 when waking (it is still in _due), then drops it as 'retried since', and
    the deletion is never looked at for it again (the next pass starts after it)."""
    pods = [make_pod("running").uid("r").req(gpu=4).node("n1").obj(), make_pod("p0").uid("u-p0").req(gpu=1).obj()]
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods))
    clock = FakeClock()
    state = create_app(config_of(requeue={"nudge": True, "minInterval": "30s"}), source=cluster, clock=clock,
                       background=False).extensions["kube_extender"]
    engine, nudger = state.engine, state.nudger
    def p0() -> dict:
        return cluster.get_pod("default", "p0")
    assert not engine.filter(p0(), ["n1"]).feasible
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    cluster.add_pod(make_pod("q2").uid("u-q2").req(gpu=1).node("n2").obj())  # q2 got there first
    assert not engine.filter(p0(), ["n1", "n2"]).feasible  # p0 retried, rejected again
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # woken by n3, within its minInterval: kept due
    cluster.add_pod(make_pod("q3").uid("u-q3").req(gpu=1).node("n3").obj())  # q3 got there first
    assert not engine.filter(p0(), ["n1", "n2", "n3"]).feasible  # retried after n3: rejected
    cluster.delete_pod("default", "running")  # applied after that answer: n1's 4 GPUs are free
    touched = nudger.run_once()
    for _ in range(2):
        clock.advance(31)
        touched += nudger.run_once()
    assert touched == ["default/p0"], "the deletion p0's latest rejection did not see never nudged it"


def test_a_due_pod_looked_at_again_does_not_take_the_new_room_from_the_next_pod() -> None:
    """p0 is due already (woken by n3, kept by its minInterval). n4 comes with one more GPU: the
    pass looks at p0 again, places it on n4 (only the nodes changed since the pass before are
    looked at) and counts it in ``taken`` - a second place for one pod - so p1, which n4 is
    for, is not nudged. Before 0fbaa4d a due pod was skipped and p1 got n4. 3 free GPUs, 2
    pods: p1 is never nudged (no later change comes)."""
    engine, nudger, cluster, clock = setup(pending=2, min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]  # one GPU: p0 (queue order)
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible  # retried, rejected
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # p0 woken by n3, kept due by its interval; n3 counted as p0's
    cluster.add_node(make_node("n4").alloc(gpu=1).obj())  # room for p1 now
    touched = nudger.run_once()
    clock.advance(31)
    touched += nudger.run_once()
    assert "default/p1" in touched, f"p1 never nudged though n4 came free for it: {touched}, {nudged(cluster)}"


def test_one_free_gpu_does_not_nudge_a_due_pod_and_the_next_pod_for_it() -> None:
    """q2 takes n2 (p0's first nudge); p0 is retried and rejected; n3 brings ONE GPU: p0 is made
    due for it (kept by its minInterval). n3 is then updated (a label): a NODE_UPDATE on n3. p0,
    due already, only renews its mark - its place on n3 is not counted in ``taken`` - so p1 is
    placed on n3 too and made due: one free GPU, two pods nudged (docstring: "one freed GPU nudges
    one pod"). Before 75c63da p0 was placed first (queue order) and took n3."""
    engine, nudger, cluster, clock = setup(pending=2, min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    cluster.add_pod(make_pod("q2").uid("u-q2").req(gpu=1).node("n2").obj())  # q2 got n2 first
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2"]).feasible
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())  # one GPU free in the whole cluster
    assert nudger.run_once() == []  # p0 due for n3, kept by its minInterval
    cluster.add_node(make_node("n3").alloc(gpu=1).labels(zone="a").obj())  # n3 updated: still one GPU
    touched = nudger.run_once()
    clock.advance(31)
    touched += nudger.run_once()
    assert touched == ["default/p0"], f"one free GPU (n3), yet nudged: {touched} ({nudged(cluster)})"


def test_a_due_pod_is_not_kept_due_by_a_change_that_frees_nothing_for_it() -> None:
    """p0 is due for n3 (kept by its minInterval); q3 takes n3 and kube-scheduler retries p0: rejected
    from a view that saw both. A node without GPUs is added next: it frees nothing p0 needs
    (test_a_change_that_frees_nothing_the_pod_needs_nudges_nothing), yet p0, being in _due, only
    renews its mark to after its newer rejection and is nudged when the interval ends."""
    engine, nudger, cluster, clock = setup(pending=1, min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible  # stale: n2 unseen
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # due, kept by its minInterval
    cluster.add_pod(make_pod("q2").uid("u-q2").req(gpu=1).node("n2").obj())
    cluster.add_pod(make_pod("q3").uid("u-q3").req(gpu=1).node("n3").obj())
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2", "n3"]).feasible  # not stale
    cluster.add_node(make_node("n4").alloc(gpu=0).obj())  # a capacity event, but no GPU on it
    touched = nudger.run_once()
    clock.advance(31)
    touched += nudger.run_once()
    assert touched == [], f"nothing free for p0, yet nudged: {touched}"


def test_a_timed_wake_up_is_not_lost_to_a_change_that_frees_too_little() -> None:
    """A plugin asked for a timed wake-up (requeue_after): the nudger touches the pod when the
    time comes, whether or not it fits ("Timed wake-ups (always on)"). If, in that same pass, a
    change its rejecting plugin registered comes too (a node too small for it), the pod - due
    from its wake-up - gets a ``_woken`` mark, is then 'placed' by the due-pods loop, fits
    nowhere, and is dropped from ``_due``: the wake-up is never delivered."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=1).obj()],
                                            [make_pod("p0").uid("u-p0").req(gpu=2).obj()]))
    clock = FakeClock()
    state = create_app(config_of(), source=cluster, clock=clock, background=False).extensions["kube_extender"]
    engine, nudger = state.engine, state.nudger
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible
    engine.handle.requeue_after(engine.cache.pending_pod("default", "p0"), 5.0)
    assert nudger.run_once() == []
    clock.advance(5.0)
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())  # a NodeResources event; p0 still fits nowhere
    touched = nudger.run_once()
    touched += nudger.run_once()
    assert touched == ["default/p0"], f"the timed wake-up of p0 was lost: {touched}, {nudged(cluster)}"


def test_a_due_low_priority_pod_does_not_take_the_place_of_a_higher_priority_candidate() -> None:
    """p0 (priority 0) is due for n3's one GPU, kept by its minInterval. hi (priority 1000) was
    rejected from a view without n3; n3 then changes (a NODE_UPDATE after hi's rejection). In
    queue order hi comes first and kube-scheduler, retrying both, would give n3 to hi. The
    due-pods loop places p0 first whatever its rank, so hi finds n3 taken and is never nudged:
    only p0 is (at the end of its interval)."""
    engine, nudger, cluster, clock = setup(pending=1, min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    cluster.add_pod(make_pod("q2").uid("u-q2").req(gpu=1).node("n2").obj())  # q2 got n2 first
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2"]).feasible
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # p0 due for n3, kept by its minInterval
    hi = make_pod("hi").uid("u-hi").req(gpu=1).priority(1000).obj()
    cluster.add_pod(hi)
    assert not engine.filter(cluster.get_pod("default", "hi"), ["n1", "n2"]).feasible  # stale: n3 unseen
    cluster.add_node(make_node("n3").alloc(gpu=1).labels(zone="a").obj())  # n3 changes after hi's rejection
    touched = nudger.run_once()
    clock.advance(31)
    touched += nudger.run_once()
    assert "default/hi" in touched, f"hi (higher priority) never nudged for n3: {touched}, {nudged(cluster)}"


def test_a_due_pod_bound_meanwhile_does_not_take_a_place_from_the_next_pod() -> None:
    """p0 is due for n3 (kept by its minInterval). kube-scheduler retries it on its own: it fits
    n3 (its rejection is dropped) and is bound there. n4 then comes with one GPU: the room p1
    waits for. The due-pods loop (new in 8f58ab6) still places p0 - only the touch loop, which
    runs after it, sees that p0 is no longer pending -: n3 counts p0 itself, so p0's stale
    PodInfo is 'placed' on n4 and p1 finds n4 taken. p0 is then forgotten (bound), no later
    change comes, and p1 is never nudged though n4's GPU is free for it."""
    engine, nudger, cluster, clock = setup(pending=2, min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == ["default/p0"]
    cluster.add_pod(make_pod("q2").uid("u-q2").req(gpu=1).node("n2").obj())  # q2 got n2 first
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2"]).feasible
    cluster.add_node(make_node("n3").alloc(gpu=1).obj())
    assert nudger.run_once() == []  # p0 due for n3, kept by its minInterval; p1: no room
    assert engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2", "n3"]).feasible == ["n3"]
    cluster.bind("default", "p0", "u-p0", "n3")  # kube-scheduler placed p0 on its own
    cluster.add_node(make_node("n4").alloc(gpu=1).obj())  # room for p1
    touched = nudger.run_once()
    clock.advance(31)
    touched += nudger.run_once()
    assert touched == ["default/p1"], f"n4 came free for p1, yet: {touched} ({nudged(cluster)})"
