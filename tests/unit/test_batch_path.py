"""The batch path (columns, ``extender.runtime.batch``) decides exactly what the per-node path
decides: over random clusters, pods and candidate lists, filter's feasible names, reply maps, error
and every rejected node's Status (code, reasons, plugin, detail), and prioritize's scores, are
equal with ``SchedulingCycle.batch`` on and off. Profiles mix NodeResources with DeviceShare (in
batch for one device ask with nothing held on the candidates, else per node - its own property test
is ``test_device_share_batch.py``); nominated pods hold capacity on some nodes (filtered per node
on the adjusted NodeInfo) and reservations hold slots on others (counted in the columns for a pod
they do not concern): of any priority, slots claimed by the pod, by a pod already accounted on the
node or by another, planned for the pod, and reservations the pod is a member of; candidate lists
repeat names and name nodes the extender does not know; a PreFilter plugin may allow only some
nodes (few of many, as Gang steers a member to its slot's node, or many)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api import wire
from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.cycle_state import CycleState
from extender.framework.interfaces import PreFilterResult
from extender.framework.registration import PluginSpec
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.runtime.engine import Engine, FilterOutcome
from extender.runtime.registry import Registry

GPU, FPGA = "example.com/gpu", "vendor.io/fpga"

PROFILES = {
    "binpack": [],
    "spread, weighted": [{"name": "NodeResources", "args": {"scoringStrategy": {
        "type": "LeastAllocated", "resources": [{"name": GPU, "weight": 3}, {"name": FPGA, "weight": 1}]}}}],
    "gpu weight only": [{"name": "NodeResources", "args": {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": FPGA, "weight": 2}]}}}],
}

amount = st.one_of(st.none(), st.integers(0, 8).map(str), st.sampled_from(["500m", "1500m", "0"]))


@st.composite
def clusters(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 12))):
        name = f"n{i}"
        offered = {k: v for k, v in (("gpu", draw(amount)), (FPGA, draw(amount))) if v is not None}
        nodes.append(make_node(name).alloc(**offered).obj())
        for j in range(draw(st.integers(0, 3))):
            asks = {k: v for k, v in (("gpu", draw(amount)), (FPGA, draw(amount))) if v is not None}
            pods.append(make_pod(f"r{i}-{j}").uid(f"uid-r{i}-{j}").req(**asks).node(name).obj())
        if draw(st.booleans()) and draw(st.booleans()):  # capacity held for a nominated pod
            held = make_pod(f"nominee-{i}").req(gpu=draw(st.integers(1, 3))).priority(draw(st.sampled_from([0, 100])))
            raw = held.obj()
            raw["status"]["nominatedNodeName"] = name
            pods.append(raw)
    return nodes, pods


@st.composite
def requests(draw: Any) -> dict[str, Any]:
    asks = {k: v for k, v in (("gpu", draw(amount)), (FPGA, draw(amount))) if v is not None}
    return make_pod("p").uid("uid-p").req(**asks).priority(draw(st.sampled_from([0, 50, 100]))).obj()


Hold = tuple[int, bool, list[tuple[int, dict[str, Any], str, bool]]]
"""A reservation: priority, whether the pod is a member, slots (node index, requests, who
claims it - "" nobody, "p" the pod, "accounted" a pod bound on its node, "other" -, planned
for the pod)."""


@st.composite
def holds(draw: Any, nodes: int) -> list[Hold]:
    out = []
    for _ in range(draw(st.integers(0, 3))):
        slots = []
        for _ in range(draw(st.integers(1, 6))):
            asks = {k: v for k, v in (("gpu", draw(amount)), (FPGA, draw(amount))) if v is not None}
            slots.append((draw(st.integers(0, nodes - 1)), asks,
                          draw(st.sampled_from(["", "", "p", "accounted", "other"])), draw(st.integers(0, 5)) == 0))
        out.append((draw(st.sampled_from([0, 50, 100])), draw(st.integers(0, 3)) == 0, slots))
    return out


def place(engine: Engine, pods: list[dict[str, Any]], reservations: list[Hold]) -> None:
    """Hold ``reservations`` in ``engine``'s queue (the same calls for both engines)."""
    managed = engine.handle.managed_resources
    for k, (priority, member, slots) in enumerate(reservations):
        owner = f"group-{k}"
        placements = []
        for i, (node, asks, _claim, planned) in enumerate(slots):
            uid = "uid-p" if planned else f"uid-{owner}-{i}"
            placements.append((f"n{node}", PodInfo.from_pod(make_pod(f"m{k}-{i}").uid(uid).req(**asks).obj(), managed)))
        engine.handle.reservations.place(owner, priority, placements, ttl=600.0,
                                         member=(lambda pod: pod.uid == "uid-p") if member else (lambda pod: False))
        for i, (node, _asks, claim, _planned) in enumerate(slots):
            bound = [p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName") == f"n{node}"]
            claimer = {"p": "uid-p", "other": f"uid-other-{k}-{i}",
                       "accounted": bound[0] if bound else ""}.get(claim, "")
            if claimer:
                engine.handle.reservations.claim(owner, claimer, prefer={f"n{node}"})


class Steer:
    """PreFilter allowing only ``allowed`` (names known or not; None: every node)."""

    name = "Steer"

    def __init__(self, allowed: frozenset[str] | None) -> None:
        self.allowed = allowed

    def pre_filter(self, state: CycleState, pod: Any, snapshot: Any) -> tuple[PreFilterResult | None, Status]:
        if self.allowed is None:
            return None, Status(Code.SKIP)
        return PreFilterResult(self.allowed), Status()


def engines(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], profile: str, device_share: bool,
            steer: frozenset[str] | None = None, clusters: list[MemoryCluster] | None = None) -> tuple[Engine, Engine]:
    """The batch engine and the per-node one (``clusters``: where to put their clusters)."""
    enabled = [{"name": "Steer"}, *([{"name": "DeviceShare"}] if device_share else [])]
    registry = Registry([PluginSpec("Steer", lambda args, handle: Steer(steer), parse_args=lambda raw: raw)])
    out = []
    for batch in (True, False):
        config = config_of(managedResources=[{"name": GPU}, {"name": FPGA}],
                           profiles=[{"schedulerName": "default-scheduler",
                                      "plugins": {"multiPoint": {"enabled": enabled}},
                                      "pluginConfig": PROFILES[profile]}])
        cluster = MemoryCluster(cluster_objects(nodes, pods))
        if clusters is not None:
            clusters.append(cluster)
        app = create_app(config, source=cluster, clock=FakeClock(), background=False, registry=registry)
        engine = app.extensions["kube_extender"].engine
        engine.scheduling.batch = batch
        out.append(engine)
    return out[0], out[1]


def on_the_wire(outcome: FilterOutcome, names: list[str]) -> Any:
    return orjson.loads(orjson.dumps(wire.filter_reply({"Pod": {}, "Nodes": None, "NodeNames": names}, outcome)))


def statuses(engine: Engine, key: str) -> dict[str, tuple[Any, ...]]:
    verdict = (engine.explain.get(key) or {})["filter"]
    return {name: _fields(s) for name, s in verdict.rejected.items()}


def _fields(s: Status) -> tuple[Any, ...]:
    return s.code, s.reasons, s.plugin, s.detail_text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), pod=requests(), profile=st.sampled_from(sorted(PROFILES)), device_share=st.booleans(),
       data=st.data())
def test_the_batch_path_decides_what_the_per_node_path_decides(cluster: Any, pod: dict[str, Any], profile: str,
                                                               device_share: bool, data: Any) -> None:
    nodes, pods = cluster
    known = [n["metadata"]["name"] for n in nodes]
    names = data.draw(st.lists(st.sampled_from([*known, "ghost"]), max_size=data.draw(st.sampled_from([20, 48]))),
                      label="candidates")
    steer = data.draw(st.one_of(st.none(), st.frozensets(st.sampled_from([*known, "ghost", "other"]), max_size=12)),
                      label="allowed by PreFilter")
    fast, slow = engines(nodes, pods, profile, device_share, steer)
    held = data.draw(holds(len(nodes)), label="reservations")
    place(fast, pods, held)
    place(slow, pods, held)

    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert (a.feasible, a.failed, a.unresolvable, a.error) == (b.feasible, b.failed, b.unresolvable, b.error)
    assert statuses(fast, "default/p") == statuses(slow, "default/p")
    assert on_the_wire(a, names) == on_the_wire(b, names)

    for asked in (a.feasible, names):  # as kube-scheduler asks, and nodes where the pod does not fit
        assert list(fast.prioritize(pod, asked)) == list(slow.prioritize(pod, asked))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reservations_count_alike_in_both_paths(data: Any) -> None:
    """Small, tight nodes and a pod that asks for GPUs, so that whether each slot counts decides
    the answer (the general test above rarely makes it so)."""
    nodes, pods = [], []
    for i in range(data.draw(st.integers(1, 5), label="nodes")):
        nodes.append(make_node(f"n{i}").alloc(gpu=data.draw(st.integers(0, 6))).obj())
        for j in range(data.draw(st.integers(0, 2))):
            gpus = data.draw(st.integers(0, 2))
            pods.append(make_pod(f"r{i}-{j}").uid(f"uid-r{i}-{j}").req(gpu=gpus).node(f"n{i}").obj())
    pod = make_pod("p").uid("uid-p").req(gpu=data.draw(st.integers(1, 3))).priority(
        data.draw(st.sampled_from([0, 50, 100]))).obj()
    held = data.draw(holds(len(nodes)), label="reservations")
    fast, slow = engines(nodes, pods, "binpack", device_share=False)
    place(fast, pods, held)
    place(slow, pods, held)
    names = [n["metadata"]["name"] for n in nodes]
    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert (a.feasible, a.failed, a.unresolvable, a.error) == (b.feasible, b.failed, b.unresolvable, b.error)
    assert statuses(fast, "default/p") == statuses(slow, "default/p")


def test_a_claimer_accounted_later_is_noticed_in_both_paths() -> None:
    """A slot's claimer bound on the slot's node (its Reserve not run yet) stops the slot counting
    there: the batch path notices in the next snapshot although the claims did not change (it
    remembers which claimers were accounted only while the claims and the snapshot are the same)."""
    nodes = [make_node(f"n{i}").alloc(gpu=2).obj() for i in range(3)]
    clusters: list[MemoryCluster] = []
    fast, slow = engines(nodes, [], "binpack", device_share=False, clusters=clusters)
    member = PodInfo.from_pod(make_pod("m").uid("uid-m").req(gpu=1).obj(), fast.handle.managed_resources)
    pod = make_pod("p").uid("uid-p").req(gpu=1).obj()
    names = ["n0", "n1", "n2"]
    for engine in (fast, slow):
        engine.handle.reservations.place("g", 0, [("n1", member), ("n2", member)], ttl=600.0)
        assert engine.handle.reservations.claim("g", "uid-m", prefer={"n1"}) == "n1"
    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert (a.feasible, a.failed) == (b.feasible, b.failed) == (names, {})  # n1: 1 of 2 GPUs held
    for cluster in clusters:  # bound where it claimed its slot: the slot no longer counts, the pod does
        cluster.add_pod(make_pod("m").uid("uid-m").req(gpu=1).node("n1").obj())
    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert (a.feasible, a.failed) == (b.feasible, b.failed) == (names, {})  # n1: 1 of 2 GPUs used (counted once)


def decided(engine: Engine, status: str) -> float:
    return engine.metrics.registry.get_sample_value(
        "kube_extender_decisions_total", {"verb": "filter", "status": status}) or 0.0


def test_the_decisions_counted_are_the_same_in_both_paths_names_repeated_too() -> None:
    """A name the request repeats is a verdict each time, rejected as feasible."""
    fast, slow = engines([make_node("n0").alloc(gpu=1).obj(), make_node("n1").alloc(gpu=4).obj()], [], "binpack",
                         device_share=False)
    pod = make_pod("p").uid("uid-p").req(gpu=2).obj()
    names = ["n0", "n0", "n1", "n1", "ghost", "ghost"]
    assert on_the_wire(fast.filter(pod, names), names) == on_the_wire(slow.filter(pod, names), names)
    statuses = ("Success", "UNSCHEDULABLE", "UNSCHEDULABLE_AND_UNRESOLVABLE")
    assert [decided(fast, s) for s in statuses] == [2, 2, 2]  # n1 twice; ghost twice; n0 (too small) twice
    assert [decided(slow, s) for s in statuses] == [2, 2, 2]


def test_a_steered_filter_counts_a_repeated_rejected_name_each_time() -> None:
    """The steered path (PreFilter allowed n1 of 7): n1, allowed but full, named twice, is two
    rejections in the decisions counted - as on the per-node path and for the other names."""
    fast, slow = engines([make_node(f"n{i}").alloc(gpu=2).obj() for i in range(8)],
                         [make_pod("r").req(gpu=2).node("n1").obj()], "binpack", device_share=False,
                         steer=frozenset({"n1"}))
    pod = make_pod("p").uid("uid-p").req(gpu=1).obj()
    names = ["n1", "n1", *(f"n{i}" for i in range(2, 8))]
    assert on_the_wire(fast.filter(pod, names), names) == on_the_wire(slow.filter(pod, names), names)
    statuses = ("Success", "UNSCHEDULABLE", "UNSCHEDULABLE_AND_UNRESOLVABLE")
    assert [decided(fast, s) for s in statuses] == [decided(slow, s) for s in statuses] == [0, 2, 6]


@pytest.mark.parametrize("allowed, names", [
    (["n1", "n1"], [f"n{i}" for i in range(8)]),
    (["n1"], [*(f"n{i}" for i in range(8)), "ghost"]),
    (("n1", "n2"), [f"n{i}" for i in range(8)]),
], ids=["a list with a repeat", "a list, an unknown candidate", "a tuple"])
def test_a_prefilter_naming_its_nodes_in_any_collection_is_answered_alike(allowed: Any, names: list[str]) -> None:
    """``PreFilterResult.node_names`` is a frozenset by the API; a plugin giving a list or a tuple
    gets the same answer on both paths (the steered one had raised, or named a node twice)."""
    fast, slow = engines([make_node(f"n{i}").alloc(gpu=2).obj() for i in range(8)], [], "binpack",
                         device_share=False, steer=allowed)
    pod = make_pod("p").uid("uid-p").req(gpu=1).obj()
    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert not a.error and a.feasible == b.feasible == sorted(set(allowed))
    assert on_the_wire(a, names) == on_the_wire(b, names)


def test_columns_follow_the_cache_node_by_node() -> None:
    """After binds, deletions and a node leaving and coming back, the columns the batch path reads
    equal columns built afresh from the snapshot, and name the same rows the same."""
    nodes = [make_node(f"n{i}").alloc(gpu=4).obj() for i in range(4)]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("r").req(gpu=1).node("n0").obj()]))
    app = create_app(config_of(), source=cluster, clock=FakeClock(), background=False)
    cache = app.extensions["kube_extender"].cache
    base = cache.snapshot().columns()  # the base later columns are updated from
    assert base.names_at(base.rows_of(["n3", "n0"])) == ["n3", "n0"]
    cluster.add_pod(make_pod("s").req(gpu=2).node("n1").obj())
    cluster.delete_pod("default", "r")
    cluster.delete_node("n2")
    cluster.add_node(make_node("n9").alloc(gpu=8).obj())
    cluster.add_node(make_node("n2").alloc(gpu=2).obj())
    snap = cache.snapshot()
    updated = snap.columns()
    from extender.cache.columns import Columns
    fresh = Columns.build(snap)
    rows_u, rows_f = updated.rows_of(["n0", "n1", "n2", "n3", "n9"]), fresh.rows_of(["n0", "n1", "n2", "n3", "n9"])
    assert (rows_u >= 0).all() and (rows_f >= 0).all()
    cu, cf = updated.column(GPU), fresh.column(GPU)
    assert cu is not None and cf is not None
    for a, b in ((cu.allocatable, cf.allocatable), (cu.offered, cf.offered), (cu.requested, cf.requested)):
        assert a[rows_u].tolist() == b[rows_f].tolist()
    assert updated.rows_of(["gone"]).tolist() == [-1]
    assert updated.names_at(rows_u) == ["n0", "n1", "n2", "n3", "n9"]  # n2 on its new row, n9 on an added one
    assert updated.generations(rows_u).tolist() == fresh.generations(rows_f).tolist() == \
        [snap.get(n).generation for n in ("n0", "n1", "n2", "n3", "n9")]  # type: ignore[union-attr]
    assert base.updated({}).rowspace is base.rowspace and fresh.rowspace is not updated.rowspace  # kept, anew


def test_rows_remembered_from_filter_serve_prioritize_only_while_they_hold() -> None:
    """Prioritize reuses the rows filter looked up for its feasible names; once a node is gone
    and another took a new row, the same names are looked up again."""
    nodes = [make_node(f"n{i}").alloc(gpu=max(4 - i, 1)).obj() for i in range(12)]  # 3 changes: updated, not rebuilt
    cluster = MemoryCluster(cluster_objects(nodes, []))
    app = create_app(config_of(), source=cluster, clock=FakeClock(), background=False)
    engine = app.extensions["kube_extender"].engine
    pod = make_pod("p").req(gpu=1).obj()
    feasible = engine.filter(pod, ["n0", "n1", "n2", "n3"]).feasible
    before = dict(engine.prioritize(pod, feasible))
    assert feasible == ["n0", "n1", "n2", "n3"] and len(set(before.values())) == 4
    cluster.delete_node("n1")
    cluster.add_node(make_node("n20").alloc(gpu=1).obj())
    assert dict(engine.prioritize(pod, feasible))["n1"] == 0  # unknown: not in the cache
    cluster.add_node(make_node("n1").alloc(gpu=8).obj())  # back, on another row, larger
    after = dict(engine.prioritize(pod, feasible))
    assert 0 < after["n1"] < before["n0"] < before["n1"]  # the emptiest of the four now (bin-packing)
    assert {n: after[n] for n in ("n0", "n2")} == {n: before[n] for n in ("n0", "n2")}


@pytest.mark.parametrize("device_share, ahead", [(False, True), (True, False)], ids=["NodeResources", "DeviceShare"])
def test_only_scores_read_from_the_snapshot_alone_are_made_ahead(device_share: bool, ahead: bool) -> None:
    """Scoring ahead of prioritize (``score_ahead``) is for Score plugins that declare their
    scores depend on the pod and the snapshot only; DeviceShare's do not say so."""
    nodes = [make_node(f"n{i}").alloc(gpu=4).obj() for i in range(3)]
    engine, _ = engines(nodes, [], "binpack", device_share)
    pod = engine.pod_info(make_pod("p").req(gpu=1).obj())
    scores = engine.score_ahead(pod, ["n0", "n1"])
    assert (scores is not None) is ahead
    if ahead:
        assert engine.prioritize(pod, ["n0", "n1"]).scores is scores  # served as made
        assert engine.prioritize(engine.pod_info(make_pod("p").req(gpu=1).obj()), ["n0", "n1"]).scores is not scores


def test_amounts_beyond_the_columns_range_take_the_per_node_path() -> None:
    """A node offering more than int64 columns hold exactly (here 10**14 GPUs, 10**17 milli-units)
    is decided with Python ints, the same with the batch path on."""
    nodes = [make_node("huge").alloc(gpu=10**14).obj(), make_node("small").alloc(gpu=2).obj()]
    pods = [make_pod("r").req(gpu=1).node("small").obj()]
    fast, slow = engines(nodes, pods, "binpack", device_share=False)
    pod = make_pod("p").req(gpu=2).obj()
    a, b = fast.filter(pod, ["huge", "small"]), slow.filter(pod, ["huge", "small"])
    assert a.feasible == b.feasible == ["huge"] and a.failed == b.failed == {"small": "Insufficient example.com/gpu"}
    assert list(fast.prioritize(pod, ["huge", "small"])) == list(slow.prioritize(pod, ["huge", "small"]))


def test_a_resource_takes_the_batch_path_again_once_no_node_is_beyond_range() -> None:
    """Columns updated node by node carried the resource's "inexact" mark for ever (only a
    rebuild, after a quarter of the nodes changed, cleared it): one transient huge allocatable
    sent every pod asking for it down the per-node path for good."""
    from extender.cache.cache import ClusterCache
    from extender.cache.columns import Columns

    cache = ClusterCache([GPU], FakeClock(), assumed_ttl=30)
    for i in range(8):
        cache.upsert_node(make_node(f"n{i}").alloc(gpu=4).obj())
    assert cache.snapshot().columns().column(GPU) is not None
    cache.upsert_node(make_node("n0").alloc(gpu=10**15).obj())
    assert cache.snapshot().columns().column(GPU) is None
    cache.upsert_node(make_node("n0").alloc(gpu=4).obj())
    snapshot = cache.snapshot()
    assert Columns.build(snapshot).column(GPU) is not None
    assert snapshot.columns().column(GPU) is not None


FEW = frozenset({"n0", "n7", "n3", "gone"})
MANY = frozenset({"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "gone"})  # past the names scanned one by one
OTHERS = [f"n{i}" for i in range(9, 25)]


@pytest.mark.parametrize("allowed, names, feasible, others", [
    (FEW, ["n7", "n0", "ghost", "n3", "n8", *OTHERS], ["n7", "n0"], ["n8", *OTHERS]),
    (FEW, ["n7", "n0", "ghost", "n3", "n7", "n8", *OTHERS], ["n7", "n0", "n7"], ["n8", *OTHERS]),
    (MANY, ["n7", "n0", "ghost", "n3", "n7", "n8", *OTHERS, *OTHERS, "ghost", "n8"], ["n7", "n0", "n7", "n8", "n8"],
     OTHERS),
])
def test_a_prefilter_allowing_few_of_many_names_answers_as_the_per_node_path(
        allowed: frozenset[str], names: list[str], feasible: list[str], others: list[str]) -> None:
    """PreFilter allows at most a quarter of the candidates (the batch path then filters only
    those, per node): the feasible names keep the input order and repeats, the others are
    excluded or unknown - as maps and on the wire."""
    nodes = [make_node(f"n{i}").alloc(gpu=2).obj() for i in range(25)]
    pods = [make_pod("r").req(gpu=2).node("n3").obj()]
    fast, slow = engines(nodes, pods, "binpack", device_share=False, steer=allowed)
    pod = make_pod("p").uid("uid-p").req(gpu=1).obj()
    a, b = fast.filter(pod, names), slow.filter(pod, names)
    assert (a.feasible, a.failed, a.unresolvable, a.error) == (b.feasible, b.failed, b.unresolvable, b.error)
    assert a.feasible == feasible
    assert a.failed == {"ghost": "node not in extender cache", "n3": "Insufficient example.com/gpu"}
    assert a.unresolvable == dict.fromkeys(others, "node(s) excluded by the extender's PreFilter")
    assert on_the_wire(a, names) == on_the_wire(b, names)
    assert statuses(fast, "default/p") == statuses(slow, "default/p")
