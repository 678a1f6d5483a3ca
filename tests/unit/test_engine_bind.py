"""The binding cycle behind the bind verb: re-validation, assume, Reserve, Permit, PreBind, Bind,
and what every failure leaves behind (nothing)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from builders import GPU, cluster_objects, make_node, make_pod
from conftest import config_of
from fakes import fake, spec_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.handle import WriteError
from extender.framework.status import Status
from extender.runtime.registry import Registry


def setup(pods: list[dict], plugins: dict[str, list[Any]] | None = None, nodes: list[dict] | None = None,
          **overrides: Any) -> tuple[Any, MemoryCluster]:
    nodes = nodes or [make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()]
    cluster = MemoryCluster(cluster_objects(nodes, pods))
    registry = Registry()
    points: dict[str, Any] = {}
    for point, plugs in (plugins or {}).items():
        for p in plugs:
            if p.name not in registry:
                registry.register(spec_of(p))
        points[point] = {"enabled": [{"name": p.name} for p in plugs], "disabled": ["*"] if point == "bind" else []}
    config = config_of(profiles=[{"schedulerName": "default-scheduler", "plugins": points}], **overrides)
    app = create_app(config, source=cluster, clock=FakeClock(), registry=registry)
    return app.extensions["kube_extender"].engine, cluster


def gpu_used(engine: Any, node: str) -> int:
    return engine.cache.snapshot().get(node).requested.get(GPU, 0)


def test_bind_writes_the_binding_and_the_cache_follows() -> None:
    pod = make_pod("p").uid("u1").req(gpu=2).obj()
    engine, cluster = setup([pod])
    assert engine.bind("default", "p", "u1", "n1") == ""
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert gpu_used(engine, "n1") == 2000 and not engine.cache.is_assumed("u1")


@pytest.mark.parametrize("ns, name, uid, node, fragment", [
    ("default", "p", "other-uid", "n1", "re-created"),
    ("default", "ghost", "u9", "n1", "not known"),
    ("default", "p", "u1", "n2", "no longer fits"),
    ("default", "p", "u1", "nowhere", "not in the extender cache"),
], ids=["uid mismatch", "unknown pod", "node too small", "unknown node"])
def test_bind_refusals_leave_no_reservation(ns: str, name: str, uid: str, node: str, fragment: str) -> None:
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj()])
    error = engine.bind(ns, name, uid, node)
    assert fragment in error
    assert engine.cache.sizes()["assumed_pods"] == 0
    assert gpu_used(engine, "n1") == 0 and cluster.get_pod("default", "p")["spec"].get("nodeName") is None


def test_bind_is_idempotent_and_refuses_another_node_once_bound() -> None:
    engine, _ = setup([make_pod("p").uid("u1").req(gpu=1).obj()])
    assert engine.bind("default", "p", "u1", "n1") == ""
    assert engine.bind("default", "p", "u1", "n1") == ""
    assert "already assigned to node n1" in engine.bind("default", "p", "u1", "n2")
    assert gpu_used(engine, "n1") == 1000


@pytest.mark.parametrize("point, answers, phase", [
    ("reserve", {"reserve": Status.unschedulable("quota")}, "reserve"),
    ("permit", {"permit": (Status.unschedulable("gang incomplete"), 0.0)}, "permit"),
    ("preBind", {"pre_bind": Status.failure("annotation write failed")}, "preBind"),
    ("bind", {"bind": Status.failure("api down")}, "bind"),
    ("preBind", {"pre_bind": RuntimeError("plugin bug")}, "preBind"),
])
def test_a_failure_after_assume_unreserves_and_forgets(point: str, answers: dict, phase: str) -> None:
    journal: list = []
    recorder = fake("Recorder", {"reserve"}, journal)
    culprit = fake("Culprit", {point} | ({"reserve"} if point == "reserve" else set()), journal, **answers)
    plugins = {"reserve": [recorder] + ([culprit] if point == "reserve" else [])}
    if point != "reserve":
        plugins[point] = [culprit]
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj()], plugins)
    error = engine.bind("default", "p", "u1", "n1")
    assert error.startswith(f"{phase} failed") and "Culprit" in error
    assert ("Recorder", "unreserve", "n1") in journal
    assert engine.cache.sizes()["assumed_pods"] == 0 and gpu_used(engine, "n1") == 0
    if point != "bind":
        assert cluster.get_pod("default", "p")["spec"].get("nodeName") is None


def unknown_outcome(*_args: Any, **_kwargs: Any) -> None:
    raise WriteError("binding failed: no reply, and the pod could not be read back: it may be bound",
                     uncertain=True)


def bind_of_unknown_outcome(engine: Any, cluster: MemoryCluster) -> None:
    """Bind p (u1) to n1 with a Binding of unknown outcome (not stored): the engine holds it."""
    real_bind = cluster.bind
    cluster.bind = unknown_outcome  # type: ignore[method-assign]
    try:
        assert "stays held" in engine.bind("default", "p", "u1", "n1")
    finally:
        cluster.bind = real_bind  # type: ignore[method-assign]


def test_a_binding_of_unknown_outcome_is_not_sent_again_in_a_later_term() -> None:
    """p's Binding (term 1) may have been stored; leadership is lost and won back (term 3): the
    leader of term 2 did not know p held n1 and may have given it away. kube-scheduler's retry
    does not send that Binding again: it is refused while the hold stands, and what settles the
    hold (the watch, the upkeep's read, its TTL) decides."""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj()])
    terms = [1]
    engine.handle.term = lambda: terms[0]
    bind_of_unknown_outcome(engine, cluster)
    sent: list[str] = []
    cluster.bind = lambda *args, **kwargs: sent.append(args[1])  # type: ignore[method-assign]
    terms[0] = 3
    error = engine.bind("default", "p", "u1", "n1")
    assert "term 1" in error and sent == []
    assert gpu_used(engine, "n1") == 2000 and engine.cache.unconfirmed("u1") is not None  # held as it was
    terms[0] = 1  # the same term: sent again
    assert engine.bind("default", "p", "u1", "n1") == "" and sent == ["p"]


@pytest.mark.parametrize("settle, held_after", [
    ("nothing yet", True),
    ("the hold expires", False),
    ("the watch shows the pod unbound (an update the Binding may be behind)", True),
    ("the pod is deleted", False),
    ("kube-scheduler's retry binds it", True),
])
def test_a_bind_of_unknown_outcome_keeps_the_capacity_until_something_settles_it(settle: str,
                                                                                held_after: bool) -> None:
    """Nobody can tell whether the Binding was stored: released, the capacity could go to a second
    pod while the first one is bound there. Held as the allocation the Binding carried, it ends as
    the ledger's holds do - or, as the bind takes it over, with the pod bound."""
    journal: list = []
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj(), make_pod("q").uid("u2").req(gpu=3).obj()],
                            {"reserve": [fake("Recorder", {"reserve"}, journal)]})
    real_bind = cluster.bind
    cluster.bind = unknown_outcome  # type: ignore[method-assign]
    error = engine.bind("default", "p", "u1", "n1")
    assert error.startswith("bind failed") and "stays held" in error
    assert ("Recorder", "unreserve", "n1") in journal, "the plugins unreserve as for any failed bind"
    assert gpu_used(engine, "n1") == 2000 and engine.cache.is_ledger_reservation("u1")
    cluster.bind = real_bind  # type: ignore[method-assign]
    if settle == "the hold expires":
        engine.handle.clock.advance(31)
        engine.cache.cleanup_expired()
    elif settle.startswith("the watch"):
        cluster.update_pod_status("default", "p", "u1", {"conditions": [{"type": "PodScheduled", "status": "False"}]})
    elif settle == "the pod is deleted":
        cluster.delete_pod("default", "p")
    elif settle.startswith("kube-scheduler"):
        assert engine.bind("default", "p", "u1", "n1") == ""
        assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert gpu_used(engine, "n1") == (2000 if held_after else 0)
    assert ("no longer fits" in engine.bind("default", "q", "u2", "n1")) is held_after


class Detailing:
    """A PreBind plugin recording a detail in the allocation ledger entry, and removing an
    annotation (which takes a patch before the Binding)."""

    name = "Detailing"

    def __init__(self, detail: Any) -> None:
        self.detail = detail

    def pre_bind(self, state: Any, pod: Any, node: str) -> Status:
        state.allocation_extra["devices"] = self.detail
        state.pod_annotations["example.com/stale"] = None
        return Status()


def unexpected(*_args: Any, **_kwargs: Any) -> None:
    raise RuntimeError("connection pool is closed")  # not a WriteError: no writer promised it


@pytest.mark.parametrize("detail, patch, fragment", [
    ({0, 1}, None, "preBind failed for pod default/p on n1: ledger: a PreBind plugin's allocation detail cannot "
                   "be recorded: Object of type set is not JSON serializable"),
    ([0, 1], unexpected, "internal error while binding: RuntimeError: connection pool is closed"),
], ids=["a detail JSON cannot carry", "an exception no plugin reported"])
def test_a_failure_after_assume_that_no_plugin_reports_unreserves_and_forgets(detail: Any, patch: Any,
                                                                              fragment: str) -> None:
    journal: list = []
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj()],
                            {"reserve": [fake("Recorder", {"reserve"}, journal)], "preBind": [Detailing(detail)]})
    if patch is not None:
        cluster.patch_pod_metadata = patch  # type: ignore[method-assign]
    assert engine.bind("default", "p", "u1", "n1").startswith(fragment)
    assert ("Recorder", "unreserve", "n1") in journal
    assert engine.cache.sizes()["assumed_pods"] == 0 and gpu_used(engine, "n1") == 0
    assert cluster.get_pod("default", "p")["spec"].get("nodeName") is None


def test_permit_wait_holds_the_bind_until_allowed_while_filters_go_on() -> None:
    gate = fake("Gate", {"permit"}, permit=(Status.wait(), 30.0))
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj(), make_pod("q").uid("u2").req(gpu=3).obj()],
                            {"permit": [gate]})
    result: list[str] = []
    t = threading.Thread(target=lambda: result.append(engine.bind("default", "p", "u1", "n1")))
    t.start()
    for _ in range(200):
        if engine.handle.waiting_pods.get("u1") is not None:
            break
        threading.Event().wait(0.01)
    # while p waits in Permit its GPUs are held: q (3 GPUs) no longer fits n1
    outcome = engine.filter(make_pod("q").uid("u2").req(gpu=3).obj(), ["n1"])
    assert outcome.failed == {"n1": "Insufficient example.com/gpu"}
    engine.handle.waiting_pods.get("u1").allow("Gate")
    t.join(5)
    assert result == [""] and cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"


def test_concurrent_binds_of_the_same_pod_share_one_result() -> None:
    gate = fake("Gate", {"permit"}, permit=(Status.wait(), 30.0))
    engine, _ = setup([make_pod("p").uid("u1").req(gpu=2).obj()], {"permit": [gate]})
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(engine.bind("default", "p", "u1", "n1")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(200):
        if engine.handle.waiting_pods.get("u1") is not None:
            break
        threading.Event().wait(0.01)
    engine.handle.waiting_pods.get("u1").allow("Gate")
    for t in threads:
        t.join(5)
    assert results == ["", "", ""] and gpu_used(engine, "n1") == 2000


def test_many_concurrent_binds_never_overallocate() -> None:
    pods = [make_pod(f"p{i}").uid(f"u{i}").req(gpu=1).obj() for i in range(30)]
    engine, cluster = setup(pods)
    results: dict[int, str] = {}

    def go(i: int) -> None:
        results[i] = engine.bind("default", f"p{i}", f"u{i}", "n1")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for r in results.values() if r == "") == 4
    assert gpu_used(engine, "n1") == 4000
    assert sum(1 for p in cluster.pods() if p["spec"].get("nodeName") == "n1") == 4


def test_bind_for_a_pod_known_only_from_filter() -> None:
    engine, cluster = setup([])
    pod = make_pod("late").uid("u7").req(gpu=1).obj()
    engine.filter(pod, ["n1"])
    assert "not found" in engine.bind("default", "late", "u7", "n1"), "the writer does not have it"
    cluster.add_pod(pod)
    assert engine.bind("default", "late", "u7", "n1") == ""


def test_extender_rejects_node_names_it_does_not_know_as_unschedulable() -> None:
    engine, _ = setup([])
    outcome = engine.filter(make_pod("p").req(gpu=1).obj(), ["n1", "mystery"])
    assert outcome.feasible == ["n1"] and outcome.failed == {"mystery": "node not in extender cache"}


def test_a_pod_no_node_fits_gets_an_aggregated_event() -> None:
    engine, cluster = setup([])
    engine.filter(make_pod("fits").uid("u8").req(gpu=1).obj(), ["n1", "n2"])
    assert list(cluster.events) == [], "no event while some node fits"
    engine.filter(make_pod("big").uid("u9").req(gpu=5).obj(), ["n1", "n2", "ghost"])
    (event,) = list(cluster.events)
    assert event["reason"] == "ExtenderFilterRejected" and event["type"] == "Warning"
    assert event["object"] == "default/big"
    assert event["message"].startswith("0/3 nodes are available to the extender: 2 node(s) had too little "
                                       "allocatable example.com/gpu, 1 node not in extender cache.")


class RemovesAnnotation:
    """A PreBind plugin that sets one annotation and removes another."""

    name = "RemovesAnnotation"

    def pre_bind(self, state: Any, pod: Any, node: str) -> Status:
        state.pod_annotations["x/added"] = node
        state.pod_annotations["x/stale"] = None
        return Status()


@pytest.mark.parametrize("plugins, writes", [
    ({}, ["bind"]),
    ({"preBind": [RemovesAnnotation()]}, ["patch", "bind"]),
], ids=["the common case: one write, the Binding", "a removal: a patch first (a Binding cannot remove)"])
def test_what_prebind_wants_on_the_pod_travels_with_the_binding(plugins: dict, writes: list[str]) -> None:
    pod = make_pod("p").uid("u1").req(gpu=1).obj()
    pod["metadata"]["annotations"] = {"x/stale": "old"}
    engine, cluster = setup([pod], plugins)
    seen: list[str] = []
    real_bind, real_patch = cluster.bind, cluster.patch_pod_metadata
    cluster.bind = lambda *a, **k: seen.append("bind") or real_bind(*a, **k)  # type: ignore[method-assign]
    cluster.patch_pod_metadata = lambda *a, **k: seen.append("patch") or real_patch(*a, **k)  # type: ignore[method-assign]
    assert engine.bind("default", "p", "u1", "n1") == ""
    assert seen == writes
    annotations = cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert "kube-extender.io/allocation" in annotations
    if plugins:
        assert annotations.get("x/added") == "n1" and "x/stale" not in annotations


def test_with_assumed_pod_ttl_0_a_read_settles_a_binding_of_unknown_outcome() -> None:
    """assumedPodTTL 0 ("never expire"): p's Binding to n1 has an unknown outcome - it was not
    stored - and n1 then goes. Nothing the watch shows ends the hold (an unbound p may be older
    than the Binding); the upkeep's read of p does, once the Binding can no longer be under way
    (a minute), and p may be bound elsewhere. (Found in review: the pod was refused everywhere
    but n1 for as long as the process lived.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=1).obj()], cache={"assumedPodTTL": "0"})
    bind_of_unknown_outcome(engine, cluster)
    cluster.delete_node("n1")
    assert "may be bound to n1 already" in engine.bind("default", "p", "u1", "n2")
    engine.handle.clock.advance(6)
    engine.collect_orphans()
    assert "may be bound to n1 already" in engine.bind("default", "p", "u1", "n2"), \
        "read unbound 6 s on: the API server may still be storing the Binding"
    engine.handle.clock.advance(55)
    engine.collect_orphans()
    assert engine.bind("default", "p", "u1", "n2") == ""


def test_while_a_binding_of_unknown_outcome_stands_filter_offers_only_its_node() -> None:
    """Bind refuses the pod anywhere but the node its first Binding named until that is settled:
    filter says so, rather than offering nodes kube-scheduler would pick in vain. (Found in
    review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=1).obj()])
    cluster.bind = unknown_outcome  # type: ignore[method-assign]
    assert "stays held" in engine.bind("default", "p", "u1", "n1")
    outcome = engine.filter(cluster.get_pod("default", "p"), ["n1", "n2"])
    assert outcome.feasible == ["n1"]
    assert outcome.unresolvable == {"n2": "the pod may be bound to n1 already (the outcome of its Binding there "
                                          "is unknown)"}


def test_a_binding_sent_again_with_an_unknown_outcome_is_held_a_full_ttl_from_then() -> None:
    """p's Binding to n1 has an unknown outcome: held (assumedPodTTL 30 s). kube-scheduler retries
    p 29 s later: the same Binding is sent again, its outcome unknown again - the API server may
    store it any moment now. The hold must not expire 1 s later on the first Binding's TTL: q
    would get p's capacity, and p's Binding landing then put both on n1. (Found in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj(), make_pod("q").uid("u2").req(gpu=3).obj()])
    cluster.bind = unknown_outcome  # type: ignore[method-assign]
    assert "stays held" in engine.bind("default", "p", "u1", "n1")
    engine.handle.clock.advance(29)
    assert "stays held" in engine.bind("default", "p", "u1", "n1")  # sent again: unknown again
    engine.handle.clock.advance(2)  # 31 s after the first Binding, 2 s after the second
    assert "no longer fits" in engine.bind("default", "q", "u2", "n1")


def test_a_pod_refused_for_its_unknown_binding_is_nudged_once_a_read_releases_it() -> None:
    """p's Binding to n1 has an unknown outcome (it was not stored), then n1 goes: filter refuses
    n2 ("may be bound to n1 already") and kube-scheduler parks p until a cluster event. The
    upkeep's read releasing the hold is the one change that lets p go to n2, and no cluster
    event: the nudger must touch p. (Found in review: the release is p's own change, which the
    nudger ignores, and p waited for an unrelated event or the 5-minute flush.)"""
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()],
                                            [make_pod("p").uid("u1").req(gpu=1).obj()]))
    clock = FakeClock()
    state = create_app(config_of(requeue={"nudge": True, "qps": 100.0, "minInterval": "1s"}), source=cluster,
                       clock=clock, background=False).extensions["kube_extender"]
    engine, nudger = state.engine, state.nudger
    bind_of_unknown_outcome(engine, cluster)
    cluster.delete_node("n1")
    outcome = engine.filter(cluster.get_pod("default", "p"), ["n2"])
    assert outcome.feasible == [] and "may be bound to n1" in outcome.unresolvable["n2"]
    assert nudger.run_once() == []
    clock.advance(61)
    engine.collect_orphans()  # the upkeep's read: p is not bound; the hold is released
    assert engine.cache.unconfirmed("u1") is None
    assert nudger.run_once() == ["default/p"]


def test_a_bind_waiting_on_the_upkeeps_look_at_a_hold_gone_meanwhile_is_not_told_bound() -> None:
    """The upkeep lists p's hold (its Binding to n1 not stored); by the time it owns p's bind slot
    the hold has ended (the TTL passed; a watch event or a resend refused for good do the same).
    kube-scheduler's retry of p arriving just then waits for the upkeep's result: it must not be
    told p is bound - p is Pending with nothing held. (Found in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=1).obj()])
    bind_of_unknown_outcome(engine, cluster)
    engine.handle.clock.advance(6)
    cache = engine.cache
    real_unconfirmed = cache.unconfirmed
    results: dict[str, str] = {}
    retry = threading.Thread(target=lambda: results.__setitem__("p", engine.bind("default", "p", "u1", "n1")))

    def unconfirmed(uid: str) -> Any:  # the upkeep's second look, once it owns p's bind slot
        cache.unconfirmed = real_unconfirmed  # type: ignore[method-assign]
        engine.handle.clock.advance(30)
        cache.cleanup_expired()  # the hold's TTL passes (a filter's cleanup, say)
        retry.start()  # kube-scheduler's retry: it waits for the upkeep
        time.sleep(0.2)  # lets it reach that wait (a retry that comes later binds p itself: also right)
        return real_unconfirmed(uid)

    cache.unconfirmed = unconfirmed  # type: ignore[method-assign]
    engine.binding.settle_unconfirmed()
    retry.join(5)
    bound_to = (cluster.get_pod("default", "p")["spec"] or {}).get("nodeName")
    assert results["p"] != "" or bound_to == "n1", "the retry was told bound"


@pytest.mark.parametrize("resend", ["unknown again", "stored"])
def test_a_hold_whose_ttl_passes_while_its_binding_is_sent_again_is_not_given_away(resend: str) -> None:
    """p's Binding to n1 has an unknown outcome: held (assumedPodTTL 30 s). kube-scheduler's retry
    sends it again while the API server struggles, and a filter's clean-up runs while that call
    is under way past the first hold's TTL. An ordinary assumption cannot expire while its
    Binding is under way; neither may this hold - q would get p's capacity while p's Binding may
    land (or has landed, our watch behind it). (Found in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj(), make_pod("q").uid("u2").req(gpu=3).obj()])
    real_bind = cluster.bind
    cluster.bind = unknown_outcome  # type: ignore[method-assign]
    assert "stays held" in engine.bind("default", "p", "u1", "n1")
    engine.handle.clock.advance(25)
    lagging: list[dict] = []
    publish = cluster._publish_pod

    def slow_resend(namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        engine.handle.clock.advance(10)  # the API server takes its time
        engine.cache.cleanup_expired()  # a filter meanwhile: every verb cleans up first
        if resend == "unknown again":
            unknown_outcome()
        cluster._publish_pod = lagging.append  # type: ignore[method-assign]  # our watch behind p's Binding
        try:
            real_bind(namespace, name, uid, node, annotations)
        finally:
            cluster._publish_pod = publish  # type: ignore[method-assign]

    cluster.bind = slow_resend  # type: ignore[method-assign]
    error = engine.bind("default", "p", "u1", "n1")
    assert ("stays held" in error) if resend == "unknown again" else error == ""
    cluster.bind = real_bind  # type: ignore[method-assign]
    assert gpu_used(engine, "n1") == 2000
    assert "no longer fits" in engine.bind("default", "q", "u2", "n1")


def test_a_hold_that_expires_just_before_its_resend_is_not_sent_unheld() -> None:
    """p's Binding to n1 has an unknown outcome: held (assumedPodTTL 30 s). 31 s later
    kube-scheduler retries p: bind finds the hold (nobody cleaned up yet) and goes to send it
    again. Just then a filter's clean-up expires the hold and q takes the capacity. The resend
    must not go out unheld - p bound and kube-scheduler told so, with q on the same GPUs. (Found
    in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=2).obj(), make_pod("q").uid("u2").req(gpu=3).obj()])
    bind_of_unknown_outcome(engine, cluster)
    engine.handle.clock.advance(31)  # the TTL has passed; nobody has cleaned up yet
    cache = engine.cache
    real_pause = cache.pause_unconfirmed
    q_result: list[str] = []

    def pause(uid: str) -> bool:  # between bind's look at the hold and its pause: another verb runs
        cache.pause_unconfirmed = real_pause  # type: ignore[method-assign]
        cache.cleanup_expired()  # a filter's clean-up: the hold expires
        q_result.append(engine.bind("default", "q", "u2", "n1"))  # q is placed on what p held
        return real_pause(uid)

    cache.pause_unconfirmed = pause  # type: ignore[method-assign]
    p_result = engine.bind("default", "p", "u1", "n1")
    assert q_result == [""]
    assert "no longer fits" in p_result
    assert [p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName") == "n1"] == ["q"]


def test_a_bind_waiting_on_an_upkeep_read_that_raised_is_not_told_bound() -> None:
    """The upkeep reads p (its Binding to n1 of unknown outcome, not stored) and the read fails
    with an exception that is no WriteError. kube-scheduler's retry of p, waiting for the upkeep's
    result meanwhile, must not be told p is bound: p is Pending. (Found in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=1).obj()])
    bind_of_unknown_outcome(engine, cluster)
    engine.handle.clock.advance(6)
    results: dict[str, str] = {}
    retry = threading.Thread(target=lambda: results.__setitem__("p", engine.bind("default", "p", "u1", "n1")))

    def bound_node(namespace: str, name: str, uid: str) -> Any:
        retry.start()  # kube-scheduler's retry: it waits for the upkeep's read
        time.sleep(0.2)  # lets it reach that wait (one that comes later sends p's Binding itself: also right)
        raise RuntimeError("answer not understood")

    cluster.bound_node = bound_node  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        engine.binding.settle_unconfirmed()
    retry.join(5)
    assert results["p"] != "" or cluster.get_pod("default", "p")["spec"].get("nodeName") == "n1"


def test_a_retry_waiting_on_the_upkeeps_read_is_answered_within_http_timeout() -> None:
    """p's Binding to n1 has an unknown outcome; the upkeep reads p while the API server is slow
    to answer. kube-scheduler's retry of p waits for that read: its answer must reach
    kube-scheduler before httpTimeout, not at it. (Found in review.)"""
    engine, cluster = setup([make_pod("p").uid("u1").req(gpu=1).obj()], extender={"httpTimeout": "1s"})
    bind_of_unknown_outcome(engine, cluster)
    engine.handle.clock.advance(6)
    reading = threading.Event()
    real_read = cluster.bound_node

    def slow_read(namespace: str, name: str, uid: str) -> Any:
        reading.set()
        time.sleep(1.5)  # reads are slow when replies get lost
        return real_read(namespace, name, uid)

    cluster.bound_node = slow_read  # type: ignore[method-assign]
    upkeep = threading.Thread(target=engine.binding.settle_unconfirmed)
    upkeep.start()
    assert reading.wait(5)
    started = time.monotonic()
    assert "in progress" in engine.bind("default", "p", "u1", "n1")  # kube-scheduler's retry
    elapsed = time.monotonic() - started
    upkeep.join(5)
    assert elapsed < engine.handle.http_timeout, f"answered after {elapsed:.2f}s: kube-scheduler gave up at 1s"
