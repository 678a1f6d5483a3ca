"""The allocation ledger: the allocation annotation written with the Binding, and - for pods an
older version annotated before binding - reservations rebuilt from it after a restart, orphans
released and cleaned after their TTL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import GPU, cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework import ledger
from extender.framework.clock import FakeClock
from extender.framework.handle import WriteError

KEY = "kube-extender.io/allocation"


@pytest.mark.parametrize("text", [None, "", "{", "[]", '{"node": 3}', '{"node": "n", "resources": {"g": "x"}}',
                                  '{"node": "n", "reservedAt": "yesterday"}',
                                  '{"node": "n", "reservedAt": "2026-01-01T00:00:00Z", "term": 1e400}',
                                  '{"node": "n", "resources": {"g": 1e400}}', "[" * 5000], ids=lambda t: repr(t)[:60])
def test_malformed_annotations_are_ignored(text: str | None) -> None:
    assert ledger.decode(text) is None


def test_round_trip_is_exact() -> None:
    a = ledger.Allocation("n1", {GPU: 1500, "vendor.io/mem": 8192 * 2**20 * 1000}, 7, 1_800_000_000.25,
                          {"devices": [0, 1]})
    b = ledger.decode(ledger.encode(a))
    assert b is not None
    assert (b.node, dict(b.resources), b.term, b.extra) == ("n1", dict(a.resources), 7, {"devices": [0, 1]})
    assert abs(b.reserved_at - a.reserved_at) < 0.001


def app_over(cluster: MemoryCluster, clock: FakeClock, ttl: str = "30s") -> Any:
    return create_app(config_of(cache={"assumedPodTTL": ttl}), source=cluster, clock=clock)


def gpu_used(app: Any, node: str = "n1") -> int:
    return app.extensions["kube_extender"].cache.snapshot().get(node).requested.get(GPU, 0)


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()],
                                         [make_pod("p").uid("u1").req(gpu=3).obj()]))


def test_bind_writes_the_allocation_with_the_binding(cluster: MemoryCluster) -> None:
    clock = FakeClock()
    app = app_over(cluster, clock)
    assert app.extensions["kube_extender"].engine.bind("default", "p", "u1", "n1") == ""
    pod = cluster.get_pod("default", "p")
    alloc = json.loads(pod["metadata"]["annotations"][KEY])
    assert alloc["node"] == "n1" and alloc["resources"] == {GPU: "3"} and alloc["term"] == 0
    assert pod["spec"]["nodeName"] == "n1"


def test_restart_between_annotation_and_binding_allocates_nothing_twice(cluster: MemoryCluster) -> None:
    clock = FakeClock()
    entry = ledger.Allocation("n1", {GPU: 3000}, 1, clock.now())
    cluster.patch_pod_metadata("default", "p", annotations={KEY: ledger.encode(entry)})  # then the old process died
    app = app_over(cluster, clock)
    engine = app.extensions["kube_extender"].engine
    assert gpu_used(app) == 3000, "the reservation is rebuilt from the annotation"
    other = make_pod("q").uid("u2").req(gpu=2).obj()
    assert engine.filter(other, ["n1"]).failed == {"n1": "Insufficient example.com/gpu"}
    # kube-scheduler retries the bind of p: the extender takes the reservation over and binds for real
    assert engine.bind("default", "p", "u1", "n1") == ""
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert gpu_used(app) == 3000


def previous_leaders(clock: FakeClock) -> MemoryCluster:
    """p unbound, carrying the allocation a previous leader wrote for n1 (its Binding may still be
    in flight); q pending; n3 has room for either."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj(),
                                             make_node("n3").alloc(gpu=4).obj()],
                                            [make_pod("p").uid("u1").req(gpu=3).obj(),
                                             make_pod("q").uid("u2").req(gpu=2).obj()]))
    cluster.patch_pod_metadata("default", "p", annotations={
        KEY: ledger.encode(ledger.Allocation("n1", {GPU: 3000}, 1, clock.now()))})
    return cluster


def binding_refused(*_args: Any, **_kwargs: Any) -> None:
    raise WriteError("binding failed: 503 Service Unavailable")


@pytest.mark.parametrize("node, binding_fails", [("n2", False), ("nowhere", False), ("n3", True)],
                         ids=["a node that does not fit", "an unknown node", "a Binding that fails"])
def test_a_failed_bind_elsewhere_keeps_a_previous_leaders_reservation(node: str, binding_fails: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bind of p to another node that is refused - or passes the check, takes the reservation
    over and then fails - must not give n1's capacity away."""
    clock = FakeClock()
    cluster = previous_leaders(clock)
    app = app_over(cluster, clock)
    engine = app.extensions["kube_extender"].engine
    if binding_fails:
        monkeypatch.setattr(cluster, "bind", binding_refused)
    assert engine.bind("default", "p", "u1", node) != ""
    monkeypatch.undo()
    assert gpu_used(app) == 3000, "the reservation on n1 is still held"
    assert gpu_used(app, "n3") == 0
    assert engine.bind("default", "q", "u2", "n1") != "", "q must not get the capacity p's Binding may still need"
    assert cluster.get_pod("default", "q")["spec"].get("nodeName") is None


def test_a_reservation_taken_over_elsewhere_frees_its_node_for_the_pods_waiting() -> None:
    """p binds to n3 instead of where its allocation said: n1's capacity comes free, an event
    the nudger acts on for q, which n1 rejected while p's reservation held it."""
    clock = FakeClock()
    cluster = previous_leaders(clock)
    app = create_app(config_of(requeue={"nudge": True, "qps": 100.0, "minInterval": "10s"}), source=cluster,
                     clock=clock)
    state = app.extensions["kube_extender"]
    assert not state.engine.filter(cluster.get_pod("default", "q"), ["n1"]).feasible
    assert state.engine.bind("default", "p", "u1", "n3") == ""
    assert gpu_used(app, "n1") == 0
    assert state.nudger.run_once() == ["default/q"]


def test_orphan_is_released_and_its_annotation_removed_after_the_ttl(cluster: MemoryCluster) -> None:
    clock = FakeClock()
    cluster.patch_pod_metadata("default", "p", annotations={
        KEY: ledger.encode(ledger.Allocation("n1", {GPU: 3000}, 1, clock.now()))})
    app = app_over(cluster, clock)
    engine = app.extensions["kube_extender"].engine
    clock.advance(29)
    assert engine.collect_orphans() == 0 and gpu_used(app) == 3000
    clock.advance(2)
    assert engine.collect_orphans() == 1
    assert gpu_used(app) == 0
    assert KEY not in (cluster.get_pod("default", "p")["metadata"].get("annotations") or {})
    assert "kube_extender_orphaned_allocations_total 1.0" in app.extensions["kube_extender"].metrics.exposition().decode()


def test_annotation_of_a_bound_pod_is_just_history(cluster: MemoryCluster) -> None:
    clock = FakeClock()
    app = app_over(cluster, clock)
    app.extensions["kube_extender"].engine.bind("default", "p", "u1", "n1")
    clock.advance(3600)
    assert app.extensions["kube_extender"].engine.collect_orphans() == 0
    assert gpu_used(app) == 3000


def test_a_bind_from_a_stale_view_of_the_pod_binds_and_keeps_what_others_wrote(cluster: MemoryCluster) -> None:
    """The Binding carries the UID, not the resourceVersion: an unbound pod's requests and
    priority cannot change, so a newer pod (a label, a nudge) is no reason to refuse, and the
    Binding merges its annotations without losing anyone else's."""
    clock = FakeClock()
    app = app_over(cluster, clock)
    engine = app.extensions["kube_extender"].engine
    cluster.stop()  # the cache stops following: its copy of p goes stale
    cluster.patch_pod_metadata("default", "p", labels={"touched": "yes"}, annotations={"someone/else": "x"})
    assert engine.bind("default", "p", "u1", "n1") == ""
    pod = cluster.get_pod("default", "p")
    assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["labels"]["touched"] == "yes"
    assert pod["metadata"]["annotations"]["someone/else"] == "x" and KEY in pod["metadata"]["annotations"]
