"""DeviceShare's batch Filter and Score decide exactly what its per-node ones decide: over random
nodes (device inventories from the annotation or GPU Feature Discovery labels, unhealthy devices,
none, malformed), pods holding devices (granted by annotation or placed where they would go,
whole devices and shares), and pods asking for whole devices, one share, or several containers'
asks (per node then), filter's feasible names, reply maps and every rejected node's Status, and
prioritize's scores, are equal with ``SchedulingCycle.batch`` on and off - also after the cluster changes between two
filters (the batch rows of changed nodes are made again) and after a reservation of this process
changes a node's devices without a cluster change."""

from __future__ import annotations

import json
from typing import Any, cast

import numpy as np
from builders import cluster_objects, make_node, make_pod
from conftest import config_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.cycle_state import CycleState
from extender.framework.status import Status
from extender.framework.views import NodeInfo
from extender.runtime.engine import Engine
from policies.device_share import logic
from policies.device_share.plugin import DeviceShare
from policies.device_share.rows import DeviceRows

MEM, COMPUTE, COUNT = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
INVENTORY = "kube-extender.io/device-inventory"
DEVICES = "kube-extender.io/devices"

CONFIG = dict(managedResources=[{"name": MEM}, {"name": COMPUTE}, {"name": COUNT}],
              profiles=[{"schedulerName": "default-scheduler",
                         "plugins": {"multiPoint": {"enabled": [{"name": "DeviceShare"}],
                                                    "disabled": ["NodeResources"]}}}])


@st.composite
def device_nodes(draw: Any, name: str) -> dict[str, Any]:
    """A node with devices from its annotation (uniform or listed, some unhealthy), GPU Feature
    Discovery labels, a malformed annotation, or no devices at all."""
    builder = make_node(name)
    kind = draw(st.sampled_from(["uniform", "listed", "labels", "none", "broken"]))
    if kind == "uniform":
        count = draw(st.integers(0, 4))
        builder = builder.annotations(**{INVENTORY: json.dumps({
            "devices": count, "memoryMiB": draw(st.sampled_from([8, 16, 24])),
            "compute": draw(st.sampled_from([100, 50])),
            "unhealthy": draw(st.lists(st.integers(0, 3), max_size=2))})})
    elif kind == "listed":
        listed = [{"id": i, "memoryMiB": draw(st.sampled_from([8, 16])), "compute": 100,
                   **({"healthy": False} if draw(st.integers(0, 4)) == 0 else {})}
                  for i in range(draw(st.integers(1, 4)))]
        builder = builder.annotations(**{INVENTORY: json.dumps({"devices": listed})})
    elif kind == "labels":
        builder = builder.labels(**{logic.GFD_COUNT: str(draw(st.integers(1, 3))), logic.GFD_MEMORY: "16"})
    elif kind == "broken":
        builder = builder.annotations(**{INVENTORY: "{nope"})
    return builder.obj()


@st.composite
def asks(draw: Any) -> dict[str, int]:
    """One container's device ask: whole devices, or a share (memory and/or compute)."""
    if draw(st.booleans()):
        return {COUNT: draw(st.integers(1, 3))}
    ask = {MEM: draw(st.sampled_from([0, 4, 8, 12, 16, 20])), COMPUTE: draw(st.sampled_from([0, 0, 30, 60, 100]))}
    ask = {k: v for k, v in ask.items() if v}
    return ask or {MEM: 4}


@st.composite
def clusters(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [draw(device_nodes(f"n{i}")) for i in range(draw(st.integers(1, 6)))]
    pods = []
    for i, node in enumerate(nodes):
        for j in range(draw(st.integers(0, 3))):
            obj = make_pod(f"r{i}-{j}").uid(f"uid-r{i}-{j}").req(**draw(asks())).node(node["metadata"]["name"]).obj()
            if draw(st.integers(0, 3)) == 0:  # granted by annotation (whatever it says)
                device = draw(st.integers(0, 3))
                grant = {"devices": [device], "memoryMiB": draw(st.sampled_from([4, 8, 16])), "compute": 50,
                         "exclusive": draw(st.booleans())}
                obj["metadata"]["annotations"] = {DEVICES: json.dumps(
                    {"node": node["metadata"]["name"], "containers": {"main": grant}})}
            pods.append(obj)
    return nodes, pods


@st.composite
def pending(draw: Any) -> dict[str, Any]:
    builder = make_pod("p").uid("uid-p").req(**draw(asks()))
    if draw(st.integers(0, 4)) == 0:  # several containers' asks: the per-node path
        builder = builder.container("side", **draw(asks()))
    return builder.obj()


def engines(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[tuple[Engine, MemoryCluster]]:
    """The batch engine and the per-node one, each over its own copy of the cluster."""
    out = []
    for batch in (True, False):
        cluster = MemoryCluster(cluster_objects(nodes, pods))
        engine = create_app(config_of(**CONFIG), source=cluster, clock=FakeClock(),
                            background=False).extensions["kube_extender"].engine
        engine.scheduling.batch = batch
        out.append((engine, cluster))
    return out


def answer(engine: Engine, pod: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    out = engine.filter(pod, names)
    verdict = (engine.explain.get("default/p") or {})["filter"]
    statuses = {name: _fields(s) for name, s in verdict.rejected.items()}
    return out.feasible, out.failed, out.unresolvable, out.error, statuses


def _fields(s: Status) -> tuple[Any, ...]:
    return s.code, s.reasons, s.plugin, s.detail_text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), pod=pending(), data=st.data())
def test_the_batch_filter_decides_what_the_per_node_filter_decides(cluster: Any, pod: dict[str, Any],
                                                                  data: Any) -> None:
    nodes, pods = cluster
    known = [n["metadata"]["name"] for n in nodes]
    names = data.draw(st.lists(st.sampled_from([*known, "ghost"]), max_size=10), label="candidates")
    (fast, fast_cluster), (slow, slow_cluster) = engines(nodes, pods)
    first = answer(fast, pod, names)
    assert first == answer(slow, pod, names)
    for asked in (first[0], names):  # as kube-scheduler asks, and nodes where the pod does not fit
        assert list(fast.prioritize(pod, asked)) == list(slow.prioritize(pod, asked))

    # the cluster changes between two filters: a pod holding devices comes or goes
    node = data.draw(st.sampled_from(known), label="changed node")
    if pods and data.draw(st.booleans(), label="a pod goes"):
        gone = data.draw(st.sampled_from(pods), label="gone")
        for c in (fast_cluster, slow_cluster):
            c.delete_pod("default", gone["metadata"]["name"])
    else:
        new = make_pod("late").uid("uid-late").req(**data.draw(asks(), label="late ask")).node(node).obj()
        for c in (fast_cluster, slow_cluster):
            c.add_pod(new)
    assert answer(fast, pod, names) == answer(slow, pod, names)
    assert list(fast.prioritize(pod, names)) == list(slow.prioritize(pod, names))


def test_a_reservation_changing_a_node_s_devices_is_seen_by_the_batch_rows() -> None:
    """A pod accounted on a node holds devices as this process reserved them (Reserve) rather than
    where they would be placed: the node's row is made again though the cluster did not change."""
    nodes = [make_node("n0").annotations(**{INVENTORY: json.dumps({"devices": 2, "memoryMiB": 16})}).obj()]
    holder = make_pod("x").uid("uid-x").req(**{MEM: 4}).node("n0").obj()
    pod = make_pod("p").uid("uid-p").req(**{COUNT: 1}).obj()
    pair = engines(nodes, [holder])
    assert [answer(e, pod, ["n0"])[0] for e, _ in pair] == [["n0"], ["n0"]]  # x placed on device 0: 1 idle
    plugins = [cast(DeviceShare, e.framework_for(e.pod_info(holder)).filter_plugins[0]) for e, _ in pair]
    for plugin in plugins:
        with plugin._lock:  # recorded as Reserve records it (its placement would not differ here):
            plugin._set_reserved("uid-x", ("n0", (logic.Grant("main", (0, 1), 4, 0),)))  # x on both devices
    fast, slow = (answer(e, pod, ["n0"]) for e, _ in pair)
    assert fast == slow and fast[0] == []  # no idle device now
    for plugin, (engine, _) in zip(plugins, pair):
        plugin.unreserve(CycleState(), engine.pod_info(holder), "n0")
    fast, slow = (answer(e, pod, ["n0"]) for e, _ in pair)
    assert fast == slow and fast[0] == ["n0"]


@st.composite
def node_devices(draw: Any) -> tuple[tuple[logic.Device, ...], logic.Usage]:
    """A node's devices (maybe none, some unhealthy) and what pods use of them: shares, whole
    devices, and over-committed amounts (an annotation may say anything)."""
    devices = tuple(logic.Device(i, draw(st.sampled_from([8, 16])), draw(st.sampled_from([50, 100])),
                                 draw(st.integers(0, 5)) > 0) for i in range(draw(st.integers(0, 4))))
    usage = logic.Usage()
    for k in range(draw(st.integers(0, 4))):
        device = draw(st.integers(0, 4))
        usage.add(f"u{k}", [logic.Grant("c", (device,), draw(st.sampled_from([0, 4, 8, 12, 20])),
                                        draw(st.sampled_from([0, 25, 50, 120])), draw(st.integers(0, 4)) == 0)])
    return devices, usage


@settings(max_examples=1500, deadline=None)
@given(found=node_devices(), ask=st.one_of(
    st.builds(logic.Ask, st.just("c"), count=st.integers(1, 4)),
    st.builds(logic.Ask, st.just("c"), st.sampled_from([0, 4, 8, 12, 16]), st.sampled_from([0, 25, 50, 100]))
    .filter(lambda a: a.memory or a.compute)))
def test_a_node_s_row_fits_and_misfits_as_place_and_explain_misfit(found: Any, ask: logic.Ask) -> None:
    """The array rule (``logic.lacks``) on a row ``DeviceRows`` made of a node's devices says what
    ``place`` and ``explain_misfit`` say of that node for one ask - the wording of every kind of
    misfit, including ties of free amounts and asks, and devices used beyond their size."""
    devices, usage = found
    table = DeviceRows(object())
    rows = np.array([0], np.intp)
    assert table.refresh(rows, np.array([1], np.int64), lambda r: ["n"], lambda name: NodeInfo("n", None, generation=1),
                         lambda info: (devices, usage))
    kinds = [lack for lack, mask in logic.lacks(ask, table.listed[rows], table.healthy[rows], table.idle[rows],
                                                 table.free_memory[rows], table.free_compute[rows], table.memory[rows],
                                                 table.compute[rows]) if mask[0]]
    grants = logic.place([ask], devices, usage) if devices else None
    if not devices:
        expected = [logic.Lack(True, False, "")]
    elif grants is not None:
        expected = []
    else:
        misfit = logic.explain_misfit([ask], devices, usage)
        expected = [logic.Lack(False, misfit.could_help, misfit.short_of)]
    assert kinds == expected
    fits = logic.fitting(ask, table.idle[rows], table.free_memory[rows], table.free_compute[rows])
    for binpack in (True, False):
        per_node = logic.device_score(grants, devices, usage, binpack) if grants else 0
        assert logic.scores(ask, fits, table.used[rows], table.total[rows], table.idle_memory[rows],
                            binpack).tolist() == [per_node]


def test_where_the_pod_itself_holds_devices_its_own_use_is_left_out_as_per_node() -> None:
    """The pod asked about is accounted on a node already (assumed by this process, or a retry
    after its bind): per node, its own devices are left out of that node's use; the batch rows,
    made for every pod, count them - so that node is decided per node."""
    nodes = [make_node(f"n{i}").annotations(**{INVENTORY: json.dumps({"devices": 1, "memoryMiB": 16})}).obj()
             for i in range(2)]
    other = make_pod("o").uid("uid-o").req(**{MEM: 8}).node("n1").obj()
    pod = make_pod("p").uid("uid-p").req(**{MEM: 16}).obj()
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n0"}}
    pair = engines(nodes, [bound, other])
    fast, slow = (answer(e, pod, ["n0", "n1"]) for e, _ in pair)
    assert fast == slow and fast[0] == ["n0"]  # its own 16 MiB on n0 are not counted against it
    assert list(pair[0][0].prioritize(pod, ["n0", "n1"])) == list(pair[1][0].prioritize(pod, ["n0", "n1"]))


def test_device_amounts_beyond_the_rows_range_are_scored_per_node() -> None:
    """Device sizes are any JSON integer and the per-node path computes with Python ints: a node
    whose amounts the int64 rows cannot hold exactly - beyond int64 (2^64 MiB), or near it so
    that a score's (used + added) * 100 would wrap (2^60 MiB) - is judged per node, and filter
    and prioritize answer what the per-node path answers (no error, no wrapped score)."""
    for big, held in ((2**64, 0), (2**50, 2**62)):  # an inventory refused; a grant far beyond its device
        nodes = [make_node("big").annotations(**{INVENTORY: json.dumps({"devices": 1, "memoryMiB": big})}).obj(),
                 make_node("small").annotations(**{INVENTORY: json.dumps({"devices": 1, "memoryMiB": 16})}).obj()]
        pods = []
        if held:
            holder = make_pod("x").uid("uid-x").req(**{MEM: 4}).node("big").obj()
            holder["metadata"]["annotations"] = {DEVICES: json.dumps(
                {"node": "big", "containers": {"main": {"devices": [0], "memoryMiB": held, "compute": 0}}})}
            pods.append(holder)
        pod = make_pod("p").uid("uid-p").req(**{MEM: 4}).obj()
        (fast, _), (slow, _) = engines(nodes, pods)
        names = ["big", "small"]
        assert answer(fast, pod, names) == answer(slow, pod, names)
        assert list(fast.prioritize(pod, names)) == list(slow.prioritize(pod, names)), big


def test_a_rejected_node_s_status_is_the_one_filter_decided_though_a_reservation_came_since() -> None:
    """The batch Filter makes a rejected node's Status when it is read (the explain log): it is
    the one filter decided, not one made from a reservation of this process that changed the
    node's devices since (n0 had 1 idle device of 2 when p, asking for 2, was filtered)."""
    nodes = [make_node(n).annotations(**{INVENTORY: json.dumps({"devices": 2, "memoryMiB": 16})}).obj()
             for n in ("n0", "n1")]
    holder = make_pod("x").uid("uid-x").req(**{MEM: 4}).node("n0").obj()  # placed on device 0: 1 idle
    pod = make_pod("p").uid("uid-p").req(**{COUNT: 2}).obj()
    pair = engines(nodes, [holder])
    for engine, _ in pair:
        assert engine.filter(pod, ["n0", "n1"]).feasible == ["n1"]
    for engine, _ in pair:  # then a Reserve of this process changes n0's devices
        plugin = cast(DeviceShare, engine.framework_for(engine.pod_info(holder)).filter_plugins[0])
        with plugin._lock:
            plugin._set_reserved("uid-x", ("n0", (logic.Grant("main", (0, 1), 4, 0),)))
    got = [{n: _fields(s) for n, s in e.explain.get("default/p")["filter"].rejected.items()} for e, _ in pair]
    assert got[0] == got[1]


def test_every_reservation_the_cluster_now_carries_is_dropped_not_only_the_first() -> None:
    """x1 and x2 were reserved by this process on n0; the watch then shows both bound there with
    their devices annotation. One read of n0 drops both reservations (the cluster carries them
    now): none is left behind once the pods are gone."""
    nodes = [make_node("n0").annotations(**{INVENTORY: json.dumps({"devices": 2, "memoryMiB": 16})}).obj()]
    for engine, cluster in engines(nodes, []):
        probe = make_pod("p").uid("uid-p").req(**{MEM: 4}).obj()
        plugin = cast(DeviceShare, engine.framework_for(engine.pod_info(probe)).filter_plugins[0])
        held = []
        for i in (1, 2):
            grant = logic.Grant("main", (i - 1,), 4, 0)
            with plugin._lock:  # as Reserve records it
                plugin._set_reserved(f"uid-x{i}", ("n0", (grant,)))
            pod = make_pod(f"x{i}").uid(f"uid-x{i}").req(**{MEM: 4}).node("n0").obj()
            pod["metadata"]["annotations"] = {DEVICES: json.dumps({"node": "n0", "containers": {"main": grant.as_dict()}})}
            held.append(pod)
        for pod in held:
            cluster.add_pod(pod)
        engine.filter(probe, ["n0"])  # reads n0's devices: the cluster carries both now
        for pod in held:
            cluster.delete_pod("default", pod["metadata"]["name"])
        engine.filter(probe, ["n0"])
        assert dict(plugin._shared.reserved) == {}
