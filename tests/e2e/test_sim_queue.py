"""Queue behaviour around extenders (§5.3, §7, §13.6, §13.8 in ``extender.sim``), in virtual time."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest
from builders import NodeBuilder, cluster_objects, make_node, make_pod
from simkit import FakeExtender, OurServer, scheduler_for

from extender.cluster.memory import MemoryCluster
from extender.sim.client import CallableTransport
from extender.sim.config import SchedulerConfig, SimConfigError
from extender.sim.workload import parse_workload


class Switch:
    """A fake extender's mood: rejects every node until ``open``."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, pod: Any, node: str) -> bool:
        return self.open


def entry(url: str = "http://fake.test/ext", **extra: Any) -> dict[str, Any]:
    return {"urlPrefix": url, "filterVerb": "filter", "nodeCacheCapable": True, **extra}


def bound_at(scheduler: Any, key: str) -> float | None:
    trace = next(t for t in scheduler.traces.values() if t.key == key)
    return None if trace.bound_at is None else trace.bound_at - scheduler.clock.start


@pytest.mark.parametrize("version, expected", [("1.30", 5.0), ("1.29", 330.0)])
def test_pod_rejected_by_extender_and_in_tree_plugin_requeue(version: str, expected: float) -> None:
    """#122019: rejected by NodeAffinity on one node and by the extender on the other. 1.30 moves
    it on any event kube-scheduler moves pods for (the ``Extender`` pseudo-plugin): here another
    pod's deletion; 1.29 waits for a node event - a deletion does not count for NodeAffinity - or
    the 5-minute flush (ticks every 30 s: t=330)."""
    nodes = [make_node("a1").labels(zone="a").obj(), make_node("b1").labels(zone="b").obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("unrelated").node("b1").obj()]))
    switch = Switch()
    fake = FakeExtender("ext", [switch], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(fake))], version=version)
    pod = make_pod("picky").obj()
    pod["spec"]["nodeSelector"] = {"zone": "a"}
    cluster.add_pod(pod)

    def event() -> None:
        switch.open = True
        cluster.delete_pod("default", "unrelated")

    scheduler.at(scheduler.clock.now() + 5, "extender changes its mind; an unrelated pod goes", event)
    scheduler.run()
    first = scheduler.cycles[0]
    assert first.outcome == "unschedulable"
    assert first.message == ("0/2 nodes are available: 1 extender failed: ext, 1 node(s) didn't match Pod's node "
                             "affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims found "
                             "for incoming pod, 1 Preemption is not helpful for scheduling..")
    assert first.plugins == (["Extender", "NodeAffinity"] if version == "1.30" else ["NodeAffinity"])
    assert first.queue == "unschedulable"
    assert bound_at(scheduler, "default/picky") == expected


@pytest.mark.parametrize("version, expected, attempts", [("1.29", 7.0, 4), ("1.30", 330.0, 2)])
def test_pod_rejected_only_by_an_extender(version: str, expected: float, attempts: int) -> None:
    """1.29: no rejector recorded -> backoffQ, retried at 1, 3, 7 s (backoff 1 s doubling).
    1.30: ``Extender`` recorded -> unschedulable pool; no cluster event here -> 5-minute flush."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    switch = Switch()
    fake = FakeExtender("ext", [switch], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(fake))], version=version,
                              stop_when_settled=False, max_virtual_seconds=400)
    cluster.add_pod(make_pod("p").obj())
    scheduler.at(scheduler.clock.now() + 5, "the extender changes its mind without a cluster event",
                 lambda: setattr(switch, "open", True))
    scheduler.run()
    assert bound_at(scheduler, "default/p") == expected
    assert len(scheduler.cycles) == attempts
    assert scheduler.cycles[0].queue == ("backoff" if version == "1.29" else "unschedulable")
    times = [round(c.time - scheduler.clock.start, 3) for c in scheduler.cycles]
    assert times == ([0.0, 1.0, 3.0, 7.0] if version == "1.29" else [0.0, 330.0])


def test_extender_unreachable_backs_off_and_recovers() -> None:
    """§13.6: connection errors are scheduling Errors: backoffQ, retried until the extender is back."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    state = {"up": False}

    def handler(verb: str, args: Any) -> Any:
        if not state["up"]:
            raise ConnectionRefusedError("dial tcp 10.0.0.9:8888: connect: connection refused")
        return {"NodeNames": args["NodeNames"], "Nodes": None, "FailedNodes": {}, "Error": ""}

    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(handler))])
    cluster.add_pod(make_pod("p").obj())
    scheduler.at(scheduler.clock.now() + 4, "extender back", lambda: state.update(up=True))
    scheduler.run()
    outcomes = [(round(c.time - scheduler.clock.start), c.outcome) for c in scheduler.cycles]
    assert outcomes == [(0, "error"), (1, "error"), (3, "error"), (7, "scheduled")]
    assert "connection refused" in scheduler.cycles[0].message
    assert scheduler.cycles[0].message.startswith('Post "http://fake.test/ext/filter": ')
    assert bound_at(scheduler, "default/p") == 7.0


def test_bind_error_after_the_pod_was_bound_is_not_requeued() -> None:
    """§5.3: the binder wrote the Binding but its reply says error: the pod has spec.nodeName, so
    it is not requeued; the assumed pod is forgotten and the watch accounts it."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))

    def binder(ns: str, name: str, uid: str, node: str) -> None:
        cluster.bind(ns, name, uid, node)
        raise RuntimeError("context deadline exceeded")

    fake = FakeExtender("b", binder=binder)
    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://b.test/", "bindVerb": "bind"}, CallableTransport(fake))])
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    assert scheduler.bind_failures == 1 and len(scheduler.cycles) == 1
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert [p.key for p in scheduler.cache.snapshot().get("n1").pods.values()] == ["default/p"]  # type: ignore[union-attr]
    assert not scheduler.pending()


@pytest.mark.parametrize("arrival, errors, cycles", [
    (0.0, 1, [0.0, 1.0]),
    (0.5, 1, [0.5, 2.0]),  # backoff over at 1.5: the next flush is at 2
    (0.999, 1, [0.999, 2.0]),
    (2.25, 2, [2.25, 4.0, 6.0]),  # over at 3.25, then (2 s) at 6.0, a flush itself
])
def test_backoff_ends_at_the_queues_next_one_second_flush(arrival: float, errors: int, cycles: list[float]) -> None:
    """``flushBackoffQCompleted`` runs every second from the queue's start (``wait.Until``): a pod
    whose backoff is over waits in backoffQ for the next flush, it is not tried the instant its
    backoff ends."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    calls: list[str] = []

    def handler(verb: str, args: Any) -> Any:
        calls.append(verb)
        if len(calls) <= errors:
            return {"NodeNames": None, "Nodes": None, "FailedNodes": {}, "Error": "try again"}
        return {"NodeNames": args["NodeNames"], "Nodes": None, "FailedNodes": {}, "Error": ""}

    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(handler))])
    scheduler.at(scheduler.clock.now() + arrival, "arrival", lambda: cluster.add_pod(make_pod("p").uid("p").obj()))
    scheduler.run()
    assert [round(c.time - scheduler.clock.start, 3) for c in scheduler.cycles] == cycles
    assert [c.outcome for c in scheduler.cycles] == ["error"] * errors + ["scheduled"]


@pytest.mark.parametrize("bound_first, moved", [(True, False), (False, True)], ids=["confirmed", "still-assumed"])
def test_a_bind_error_moves_waiting_pods_only_when_it_forgets_the_assumed_pod(bound_first: bool, moved: bool) -> None:
    """``handleBindingCycleError``: a successful ``ForgetPod`` counts as an AssignedPodDelete and
    moves the pods that event may help. When the watch already confirmed the pod (the binder
    wrote the Binding, then its reply failed) ForgetPod fails - the pod is not assumed any more,
    its capacity stays taken - and no pod moves: ``big``, waiting for room on n1, stays in the
    pool instead of being tried again a second later."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(cpu="2").obj()]))

    def binder(ns: str, name: str, uid: str, node: str) -> None:
        if bound_first:
            cluster.bind(ns, name, uid, node)
        raise RuntimeError("context deadline exceeded")

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://b.test/", "bindVerb": "bind"},
                                         CallableTransport(FakeExtender("b", binder=binder)))], max_virtual_seconds=60)
    cluster.add_pod(make_pod("big").uid("big").req(cpu="4").priority(10).obj())
    cluster.add_pod(make_pod("p").uid("p").req(cpu="1").obj())
    scheduler.run()
    big = [(round(c.time - scheduler.clock.start), c.outcome) for c in scheduler.cycles if c.pod == "default/big"]
    assert big[:2] == ([(0, "unschedulable"), (1, "unschedulable")] if moved else [(0, "unschedulable")])
    assert scheduler.bind_failures >= 1
    if bound_first:
        assert "big" in scheduler.queue.pods and scheduler.queue.pods["big"].state == "unschedulable"


def test_bind_error_requeues_with_backoff_and_retries() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    calls = {"n": 0}

    def binder(ns: str, name: str, uid: str, node: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("try again")
        cluster.bind(ns, name, uid, node)

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://b.test/", "bindVerb": "bind"},
                                         CallableTransport(FakeExtender("b", binder=binder)))])
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    assert scheduler.bind_failures == 1 and [c.outcome for c in scheduler.cycles] == ["scheduled", "scheduled"]
    assert round(scheduler.cycles[1].time - scheduler.clock.start) == 1  # backoffQ, 1 s
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"


def test_gated_pods_wait_for_their_gates() -> None:
    """§13.8: schedulingGates keep a pod out of the queues (PreEnqueue) until the list is empty."""
    ours = OurServer([make_node("n1").alloc(gpu=2).obj()])
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)])
    workload = parse_workload({"pods": [
        {"name": "gated", "requests": {"example.com/gpu": 1}, "gates": ["example.com/quota"], "ungateAfter": 5},
        {"name": "forever", "requests": {"example.com/gpu": 1}, "gates": ["example.com/never"]},
    ]})
    workload.install(scheduler, ours.cluster)
    scheduler.run()
    assert [c.pod for c in scheduler.cycles] == ["default/gated"]
    assert bound_at(scheduler, "default/gated") == 5.0
    forever = next(t for t in scheduler.traces.values() if t.key == "default/forever")
    assert forever.state == "pending" and forever.gated and forever.attempts == 0
    assert ours.calls("filter") and all(c.json()["Pod"]["metadata"]["name"] == "gated" for c in ours.calls("filter"))


def test_scheduler_side_validation_matches_kube_scheduler() -> None:
    def problems(*extenders: dict[str, Any]) -> list[str]:
        with pytest.raises(SimConfigError) as info:
            SchedulerConfig.from_dict({"extenders": list(extenders)})
        return [f"{p}: {m}" for p, m in info.value.problems]

    assert problems({"urlPrefix": "u", "prioritizeVerb": "p"}) == [
        "extenders[0].weight: must have a positive weight applied to it"]
    assert problems({"urlPrefix": "a", "bindVerb": "b"}, {"urlPrefix": "b", "bindVerb": "b"}) == [
        'extenders: Invalid value: "found 2 extenders implementing bind": only one extender can implement bind']
    bad = problems({"urlPrefix": "a", "managedResources": [{"name": "cpu"}, {"name": "nvidia.com/"},
                                                             {"name": "kubernetes.io/foo"}]})
    assert len(bad) == 3 and all("invalid extended resource name" in p for p in bad)
    assert problems({"urlPrefix": "a", "managedResources": [{"name": "example.com/gpu"}]},
                    {"urlPrefix": "b", "managedResources": [{"name": "example.com/gpu"}]}) == [
        "extenders[1].managedResources[0].name: duplicate extender managed resource name"]
    cfg = SchedulerConfig.from_dict({"extenders": [
        {"urlPrefix": "first", "ignorable": True}, {"urlPrefix": "second"},
        {"urlPrefix": "third", "managedResources": [{"name": "example.com/gpu", "ignoredByScheduler": True},
                                                    {"name": "example.com/fpga"}]}]})
    assert [e.url_prefix for e in cfg.ordered] == ["second", "third", "first"]
    assert cfg.ignored_resources == {"example.com/gpu"}
    assert cfg.extenders[0].timeout == 5.0  # httpTimeout 0 -> DefaultExtenderTimeout


@pytest.mark.parametrize("event, moved, move_request", [
    ("AssignedPodDelete", True, True),
    ("NodeAdd", True, True),
    ("AssignedPodAdd", False, True),
    ("AssignedPodUpdate", False, True),
    ("PodAdd", False, False),
    ("PodUpdate", False, False),
], ids=lambda v: str(v))
def test_which_events_move_a_pod_the_extender_rejected(event: str, moved: bool, move_request: bool) -> None:
    """kube-scheduler 1.30's event handlers: a node event or an assigned pod's deletion moves every
    pod the ``Extender`` rejected; an assigned pod added or updated moves only pods with a matching
    affinity term (none here) yet counts as a move request for a pod in flight; an unscheduled
    pod's own add or update moves nobody else."""
    from extender.sim import queue as q
    from extender.sim.cache import PodRecord

    queue = q.SchedulingQueue()
    waiting = queue.add(PodRecord.from_raw(make_pod("waiting").uid("w").obj()), 0.0)
    queue.pop()
    queue.add_unschedulable(waiting, 0.0, frozenset({q.EXTENDER_PLUGIN}))
    in_flight = queue.add(PodRecord.from_raw(make_pod("in-flight").uid("f").obj()), 0.0)
    queue.pop()
    queue.move_all(event, 20.0)  # long after any backoff
    assert (waiting.state == q.ACTIVE) is moved
    assert queue.add_unschedulable(in_flight, 20.0, frozenset({q.EXTENDER_PLUGIN})) == \
        (q.BACKOFF if move_request else q.UNSCHEDULABLE)


# ---- node events and the pods the extender rejected (eventhandlers.go, preCheckForNode) ---------------------


def _changed(node: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    change(node)
    return node


def _small() -> NodeBuilder:
    """n1: 8 cpu, 4 of them taken by a bound pod."""
    return make_node("n1").alloc(gpu=1).labels(pool="gpu")


def _big() -> NodeBuilder:
    """n2: room for the pod; the extender rejects it."""
    return make_node("n2").alloc(cpu="16", gpu=1).labels(pool="gpu")


def _new(**alloc: Any) -> NodeBuilder:
    return make_node("n3").alloc(**alloc).labels(pool="gpu")


def _taint(effect: str) -> Callable[[dict[str, Any]], None]:
    return lambda n: n["spec"].update(taints=[{"key": "dedicated", "value": "x", "effect": effect}])


NODE_EVENT_CASES: list[tuple[str, Callable[[MemoryCluster], None], bool, bool]] = [
    # id, the node change, the pod moved, a move request
    ("add-a-node-that-admits-it", lambda c: c.add_node(_new(gpu=1).obj()), True, True),
    ("add-a-node-without-room", lambda c: c.add_node(_new(cpu="2", gpu=1).obj()), False, True),
    ("add-a-node-without-the-ignored-resource", lambda c: c.add_node(_new(gpu=0).obj()), False, True),
    ("add-a-node-with-an-untolerated-NoSchedule-taint",
     lambda c: c.add_node(_changed(_new(gpu=1).obj(), _taint("NoSchedule"))), False, True),
    ("add-a-node-with-a-NoExecute-taint", lambda c: c.add_node(_changed(_new(gpu=1).obj(), _taint("NoExecute"))),
     True, True),
    ("add-a-node-the-nodeSelector-does-not-match", lambda c: c.add_node(_new(gpu=1).labels(pool="other").obj()),
     False, True),
    ("update-a-heartbeat", lambda c: c.add_node(_changed(_big().obj(), lambda n: n["status"]["conditions"][0].update(
        lastHeartbeatTime="2026-01-01T00:05:00Z"))), False, False),
    ("update-a-status-field-the-scheduler-does-not-read",
     lambda c: c.add_node(_changed(_big().obj(), lambda n: n["status"].update(nodeInfo={"kubeletVersion": "v1.30.1"}))),
     False, False),
    ("cordon-a-node", lambda c: c.add_node(_changed(_big().obj(), lambda n: n["spec"].update(unschedulable=True))),
     False, False),
    ("annotate-a-node-that-admits-it", lambda c: c.add_node(_big().annotations(touched="1").obj()), True, True),
    ("label-a-node-that-admits-it", lambda c: c.add_node(_big().labels(touched="1").obj()), True, True),
    ("change-a-condition-of-a-node-that-admits-it",
     lambda c: c.add_node(_changed(_big().obj(), lambda n: n["status"]["conditions"].append(
         {"type": "DiskPressure", "status": "False"}))), True, True),
    ("annotate-the-full-node", lambda c: c.add_node(_small().annotations(touched="1").obj()), False, True),
    ("delete-a-node", lambda c: c.delete_node("n2"), False, False),
]


@pytest.mark.parametrize("change, moved, move_request", [c[1:] for c in NODE_EVENT_CASES],
                         ids=[c[0] for c in NODE_EVENT_CASES])
def test_node_events_move_an_extender_rejected_pod_only_when_upstream_does(
        change: Callable[[MemoryCluster], None], moved: bool, move_request: bool) -> None:
    """kube-scheduler 1.30 with QueueingHints off (``eventhandlers.go``): the pod (6 cpu, one
    ``example.com/gpu`` the extender manages and the scheduler ignores, nodeSelector pool=gpu)
    was rejected by NodeResourcesFit on n1 (4 of its 8 cpu taken) and by the extender on n2, so
    it waits in the pool with ``Extender`` among its rejectors. A node add moves it only when the
    new node passes ``preCheckForNode`` - free resources with no resource ignored, node affinity,
    NoSchedule taints; a node update only for a scheduling-relevant change (labels, annotations,
    taints, allocatable, condition statuses, spec.unschedulable turned off), with the same
    pre-check against the updated node; a node deletion moves nothing and is no move request."""
    nodes = [_small().obj(), _big().obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("busy").node("n1").req(cpu="4").obj()]))
    fake = FakeExtender("ext", [Switch()], node_cache_capable=True)
    managed = [{"name": "example.com/gpu", "ignoredByScheduler": True}]
    scheduler = scheduler_for(cluster, [(entry(managedResources=managed), CallableTransport(fake))])
    pod = make_pod("p").uid("p").req(cpu="6", gpu=1).obj()
    pod["spec"]["nodeSelector"] = {"pool": "gpu"}
    cluster.add_pod(pod)
    scheduler.run()
    (first,) = scheduler.cycles
    assert first.outcome == "unschedulable" and first.plugins == ["Extender", "NodeResourcesFit"]
    waiting = scheduler.queue.pods["p"]
    assert waiting.state == "unschedulable"
    requests = scheduler.queue.move_request_cycle

    change(cluster)
    assert (waiting.state != "unschedulable") is moved
    assert (scheduler.queue.move_request_cycle != requests) is move_request


# ---- an update of a pod waiting in the pool (scheduling_queue.go Update, isPodUpdated) --------------------


POOL_UPDATES: list[tuple[str, Callable[[dict[str, Any]], None], bool]] = [
    # id, the change, the pod moved out of the pool
    ("add-a-finalizer", lambda p: p["metadata"].update(finalizers=["example.com/keep"]), False),
    ("change-managed-fields", lambda p: p["metadata"].update(managedFields=[{"manager": "kubectl"}]), False),
    ("change-the-generation", lambda p: p["metadata"].update(generation=7), False),
    ("add-a-condition", lambda p: p["status"].update(conditions=[{"type": "Example", "status": "True"}]), False),
    ("change-resource-claim-statuses",
     lambda p: p["status"].update(resourceClaimStatuses=[{"name": "gpu", "resourceClaimName": "p-gpu"}]), True),
    ("add-an-annotation", lambda p: p["metadata"].update(annotations={"touched": "1"}), True),
    ("add-a-label", lambda p: p["metadata"].update(labels={"touched": "1"}), True),
    ("add-a-toleration", lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]), True),
]


@pytest.mark.parametrize("change, moved", [c[1:] for c in POOL_UPDATES], ids=[c[0] for c in POOL_UPDATES])
def test_an_update_moves_a_pod_out_of_the_pool_only_when_is_pod_updated_says_so(
        change: Callable[[dict[str, Any]], None], moved: bool) -> None:
    """``isPodUpdated`` (1.30-1.36) compares the pods without resourceVersion, generation,
    managedFields, finalizers and status - except ``status.resourceClaimStatuses``: only a change
    elsewhere moves a pod the extender rejected out of the pool (here to backoffQ, its backoff
    still running)."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    fake = FakeExtender("ext", [Switch()], node_cache_capable=True)
    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(fake))])
    cluster.add_pod(make_pod("p").uid("p").obj())
    scheduler.run()
    waiting = scheduler.queue.pods["p"]
    assert waiting.state == "unschedulable"

    pod = cluster.get_pod("default", "p")
    assert pod is not None
    change(pod)
    cluster.add_pod(pod)  # a replacement: an update with a new resourceVersion
    assert waiting.state == ("backoff" if moved else "unschedulable")


# ---- a pod updated during its own scheduling cycle (scheduling_queue.go Update, QueueingHints off) ---------


def _delivered_during_the_cycle(write: Callable[[], None]) -> None:
    """``write`` made on another thread (joined), so that the scheduler gets its events while
    the cycle that called the extender runs, as an informer may deliver them; a write on the
    scheduling thread itself (an in-process extender's) reaches the scheduler after the cycle."""
    writer = threading.Thread(target=write)
    writer.start()
    writer.join()


def _annotate(cluster: MemoryCluster) -> None:
    cluster.patch_pod_metadata("default", "p", annotations={"touched": "1"})


def _write_status(cluster: MemoryCluster) -> None:
    cluster.update_pod_status("default", "p", "p", {"conditions": [{"type": "Example", "status": "True"}]})


IN_FLIGHT_UPDATES = [
    # id, version, what happens to the pod during the first filter call, the first reply,
    # (time, outcome) of each cycle, where the first attempt left the pod, the last backoff expiry
    ("annotated-rejected-1.30", "1.30", _annotate, "reject",
     [(0, "unschedulable"), (0, "unschedulable")], "active", None),
    ("annotated-rejected-1.29", "1.29", _annotate, "reject",
     [(0, "unschedulable"), (0, "unschedulable")], "active", 1.0),
    ("status-written-rejected-1.30", "1.30", _write_status, "reject",
     [(0, "unschedulable"), (0, "unschedulable")], "active", None),
    ("annotated-filter-error-1.30", "1.30", _annotate, "error",
     [(0, "error"), (0, "unschedulable")], "", None),  # an Error's cycle record names no queue
    ("nothing-happens-rejected-1.30", "1.30", None, "reject", [(0, "unschedulable")], "unschedulable", None),
    ("nothing-happens-rejected-1.29", "1.29", None, "reject", [(0, "unschedulable")], "backoff", 1.0),
]


@pytest.mark.parametrize("version, during, reply, cycles, first_queue, backoff_until",
                         [c[1:] for c in IN_FLIGHT_UPDATES], ids=[c[0] for c in IN_FLIGHT_UPDATES])
def test_a_pod_updated_during_its_own_cycle_goes_straight_back_to_the_active_queue(
        version: str, during: Callable[[MemoryCluster], None] | None, reply: str, cycles: list[tuple[int, str]],
        first_queue: str, backoff_until: float | None) -> None:
    """kube-scheduler 1.29-1.31, QueueingHints off: ``Update`` finds a pod in its scheduling
    cycle in no queue and puts a fresh entry for it into activeQ - any change counts (a status
    write too), attempts start again from zero. ``AddUnschedulableIfNotPresent`` then finds it
    already queued and leaves it there: the pod is tried again at once, not parked in the pool
    (1.30: ``Extender``) nor backed off (1.29 extender-only rejection, or an error); its next
    backoff is the initial one. The extender rejects every node from its second call on."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    calls: list[str] = []

    def handler(verb: str, args: Any) -> Any:
        calls.append(verb)
        first = len(calls) == 1
        if first and during is not None:
            _delivered_during_the_cycle(lambda: during(cluster))
        if first and reply == "error":
            return {"NodeNames": None, "Nodes": None, "FailedNodes": {}, "Error": "try again"}
        return {"NodeNames": [], "Nodes": None, "FailedNodes": {"n1": "extender failed"}, "Error": ""}

    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(handler))], version=version)
    cluster.add_pod(make_pod("p").uid("p").obj())
    scheduler.run()
    assert [(round(c.time - scheduler.clock.start), c.outcome) for c in scheduler.cycles] == cycles
    assert scheduler.cycles[0].queue == first_queue
    qp = scheduler.queue.pods["p"]
    if backoff_until is None:
        assert qp.state == "unschedulable"
    else:
        assert qp.state == "backoff" and scheduler.queue.backoff_expiry(qp) - scheduler.clock.start == backoff_until


def test_an_extender_writing_the_pod_in_every_filter_call_sees_it_backed_off_not_retried_at_once() -> None:
    """An extender that annotates the pod in each filter call and rejects it: the informer
    delivers each write after the cycle, as a real one does (asynchronously), so the update
    finds the pod in the pool, moves it (an annotation counts) to backoffQ, and the pod is
    tried again after its backoff - 1, 2, 4, 8, then 10 s - until the run's horizon. Delivered
    during the cycle, each write queued a fresh entry straight into activeQ and the run never
    left virtual time 0 (the call count stops it here)."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    calls: list[int] = []

    def handler(verb: str, args: Any) -> Any:
        calls.append(len(calls))
        if len(calls) >= 50:
            scheduler.stop()  # a safety net: never needed when the writes come after the cycle
        cluster.patch_pod_metadata("default", "p", annotations={"seen": str(len(calls))})
        return {"NodeNames": [], "Nodes": None, "FailedNodes": {"n1": "not yet"}, "Error": ""}

    scheduler = scheduler_for(cluster, [(entry(), CallableTransport(handler))], max_virtual_seconds=30)
    cluster.add_pod(make_pod("p").uid("p").obj())
    summary = scheduler.run()
    assert summary.reason.startswith("stopped at the horizon"), summary.reason
    assert [(round(c.time - scheduler.clock.start), c.outcome) for c in scheduler.cycles] == [
        (0, "unschedulable"), (1, "unschedulable"), (3, "unschedulable"), (7, "unschedulable"),
        (15, "unschedulable"), (25, "unschedulable")]
    assert cluster.get_pod("default", "p")["metadata"]["annotations"] == {"seen": "6"}
    assert scheduler.queue.pods["p"].state == "backoff"


def test_a_pod_updated_during_the_cycle_that_assumed_it_is_skipped_not_scheduled_twice() -> None:
    """The same update during a cycle that then assumes the pod: the fresh entry is popped while
    the pod is assumed (its bind is still running) and skipped (``skipPodSchedule``); the pod is
    bound once, by one bind call."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    skipped = threading.Event()
    binds: list[str] = []

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter":
            _delivered_during_the_cycle(lambda: _annotate(cluster))
            return {"NodeNames": args["NodeNames"], "Nodes": None, "FailedNodes": {}, "Error": ""}
        binds.append(args["PodName"])
        skipped.wait(2.0)  # bind once the fresh entry was skipped (2 s: it never is)
        cluster.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        return {"Error": ""}

    scheduler = scheduler_for(cluster, [(entry(bindVerb="bind"), CallableTransport(handler))])
    scheduler.on_cycle.append(lambda record: record.outcome == "skipped" and skipped.set())
    cluster.add_pod(make_pod("p").uid("p").obj())
    scheduler.run()
    assert [(c.outcome, c.message) for c in scheduler.cycles] == [("scheduled", ""), ("skipped", "pod is assumed")]
    assert binds == ["p"] and cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert not scheduler.pending() and scheduler.bind_failures == 0


def test_a_pod_assumed_after_an_update_in_its_cycle_no_longer_holds_its_old_nomination() -> None:
    """p (priority 10) is nominated to n2 from an earlier preemption, but this cycle places it on
    n1 (the extender keeps only n1). During that filter call q (priority 10, fits n2 only)
    arrives and p is annotated, so a fresh entry for p waits in activeQ. kube-scheduler drops a
    pod's nomination when it assumes it (``DeleteNominatedPodIfExists``): q is scheduled on n2
    while p's bind runs, not refused as if p still held n2."""
    nodes = [make_node("n1").alloc(cpu="1").obj(), make_node("n2").alloc(cpu="1").obj()]
    cluster = MemoryCluster(cluster_objects(nodes))
    q_tried = threading.Event()
    calls: list[str] = []

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter":
            name = args["Pod"]["metadata"]["name"]
            calls.append(name)
            if name == "p" and calls.count("p") == 1:
                _delivered_during_the_cycle(lambda: (
                    cluster.add_pod(make_pod("q").uid("q").req(cpu="1").priority(10).obj()), _annotate(cluster)))
            keep = ["n1"] if name == "p" else ["n2"]
            return {"NodeNames": [n for n in args["NodeNames"] if n in keep], "Nodes": None,
                    "FailedNodes": {n: "no" for n in args["NodeNames"] if n not in keep}, "Error": ""}
        q_tried.wait(2.0)  # p's bind runs until q has been tried (2 s: a safety net)
        cluster.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        return {"Error": ""}

    scheduler = scheduler_for(cluster, [(entry(bindVerb="bind"), CallableTransport(handler))])
    scheduler.on_cycle.append(lambda record: record.pod == "default/q" and q_tried.set())
    p = make_pod("p").uid("p").req(cpu="1").priority(10).obj()
    p["status"]["nominatedNodeName"] = "n2"
    cluster.add_pod(p)
    scheduler.run()
    first_q = next(c for c in scheduler.cycles if c.pod == "default/q")
    assert (first_q.outcome, first_q.node) == ("scheduled", "n2"), first_q.message


def _sim_entry(**extra: Any) -> dict[str, Any]:
    return {"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True, **extra}


# Events a cycle causes are held until it ends; an informer delivers each object's events in
# order, so events from other threads wait behind them (found in a second-look review).
def test_a_write_in_filter_to_a_pod_that_then_binds_does_not_requeue_the_bound_pod() -> None:
    """An in-process extender annotates the pod in its filter call and accepts n1: the pod is
    scheduled once and bound. The annotation's event is held until the cycle is over - but the
    binding thread's confirmation (nodeName set) arrives before it, and the held event, an
    older copy of the pod without nodeName, is then delivered after it: the bound pod is added
    to the queue again as a new pending pod and gets a second scheduling cycle. An informer
    never delivers an older resourceVersion after a newer one."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj(), make_node("n2").obj()]))

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter":
            cluster.patch_pod_metadata("default", "p", annotations={"seen": "1"})
            return {"NodeNames": ["n1"], "Nodes": None, "FailedNodes": {"n2": "no"}, "Error": ""}
        raise AssertionError(verb)

    scheduler = scheduler_for(cluster, [(_sim_entry(), CallableTransport(handler))], max_virtual_seconds=30)
    cluster.add_pod(make_pod("p").uid("p").obj())
    scheduler.run()
    outcomes = [(c.pod, c.outcome) for c in scheduler.cycles]
    assert outcomes[0] == ("default/p", "scheduled")
    assert [o for o in outcomes if o[1] != "skipped"] == [("default/p", "scheduled")], outcomes
    assert "p" not in scheduler.queue.pods, scheduler.queue.pods.get("p")
    assert scheduler.bind_failures == 0


def test_a_held_event_never_resurrects_a_pod_deleted_meanwhile() -> None:
    """During a's cycle the extender's filter annotates the running pod "holder" (n1 full), and
    the informer meanwhile delivers holder's deletion from another thread (at once). The held
    annotation event - an older copy of holder - is delivered after the deletion and puts holder
    back into the scheduler cache: its 2 cpus stay taken on n1 for good, and "big", arriving
    later and fitting only in that room, never schedules."""
    nodes = [make_node("n1").alloc(cpu="2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("holder").uid("holder").req(cpu="2").node("n1").obj()]))
    done: list[bool] = []

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter" and args["Pod"]["metadata"]["name"] == "a" and not done:
            done.append(True)
            cluster.patch_pod_metadata("default", "holder", annotations={"seen": "1"})
            deleter = threading.Thread(target=lambda: cluster.delete_pod("default", "holder"))
            deleter.start()
            deleter.join()
        return {"NodeNames": args["NodeNames"], "Nodes": None, "FailedNodes": {}, "Error": ""}

    scheduler = scheduler_for(cluster, [(_sim_entry(), CallableTransport(handler))], max_virtual_seconds=30)
    cluster.add_pod(make_pod("a").uid("a").obj())  # requests nothing: fits n1
    scheduler.at(scheduler.clock.now() + 1, "big arrives",
                 lambda: cluster.add_pod(make_pod("big").uid("big").req(cpu="2").obj()))
    scheduler.run()
    assert cluster.get_pod("default", "holder") is None
    big = cluster.get_pod("default", "big")
    assert big is not None and big["spec"].get("nodeName") == "n1", [(c.pod, c.outcome, c.message) for c in scheduler.cycles]
    assert scheduler.cache.assigned("holder") is None, "holder is gone from the cluster, not from the cache"
