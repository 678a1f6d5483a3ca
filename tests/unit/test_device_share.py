"""DeviceShare: device fit, placement, scores and victim choice (pure), then through the engine:
annotations for the runtime, restart from the ledger, device-level preempt."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.handle import WriteError
from extender.runtime.engine import Candidate
from policies.device_share import logic
from policies.device_share.logic import Ask, Device, Grant, Holder, Usage

MEM, COMPUTE, COUNT = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
INVENTORY = "kube-extender.io/device-inventory"


def devs(*memories: int) -> tuple[Device, ...]:
    return tuple(Device(i, m) for i, m in enumerate(memories))


def used(**by_device: int) -> Usage:
    u = Usage()
    for i, (dev, mem) in enumerate(by_device.items()):
        u.add(f"pod{i}", [Grant("c", (int(dev[1:]),), mem, 0)])
    return u


DEEP = "[" * 5000 + "]" * 5000
"""JSON nested deeper than the parser recurses: malformed, like any other."""


# ---- inventory ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ('{"devices": 2, "memoryMiB": 16384}', (Device(0, 16384), Device(1, 16384))),
    ('{"devices": 2, "memoryMiB": 8192, "compute": 50, "unhealthy": [1]}',
     (Device(0, 8192, 50), Device(1, 8192, 50, healthy=False))),
    ('{"devices": [{"id": 3, "memoryMiB": 24576}, {"id": 7, "memoryMiB": 8192}]}',
     (Device(3, 24576), Device(7, 8192))),
    ('{"devices": [{"id": 1, "memoryMiB": 8192}, {"id": 0, "memoryMiB": 24576}]}',
     (Device(0, 24576), Device(1, 8192))),
    (None, ()),
])
def test_inventory_forms(text: str | None, expected: tuple[Device, ...]) -> None:
    assert logic.parse_inventory(text) == expected


@pytest.mark.parametrize("text", ["nope", "[]", '{"devices": 2}', '{"devices": "2", "memoryMiB": 1}',
                                  '{"devices": [{"id": 1, "memoryMiB": 1}, {"id": 1, "memoryMiB": 1}]}',
                                  '{"devices": 1, "memoryMiB": 8, "unhealthy": "0"}',
                                  DEEP, '{"devices": %s, "memoryMiB": 8}' % DEEP])
def test_bad_inventories_are_rejected(text: str) -> None:
    with pytest.raises(logic.InventoryError):
        logic.parse_inventory(text)


# ---- placement -----------------------------------------------------------------------------------

@pytest.mark.parametrize("asks, devices, usage, binpack, expected", [
    pytest.param([Ask("a", 8192)], devs(16384, 16384), used(d0=4096), True, [(0,)], id="binpack to the fuller device"),
    pytest.param([Ask("a", 8192)], devs(16384, 16384), used(d0=4096), False, [(1,)], id="spread to the emptier"),
    pytest.param([Ask("a", 8192)], devs(16384, 16384), used(d0=12288, d1=12288), True, None,
                 id="fragmented: 8 GiB free in total, 4 GiB per device"),
    pytest.param([Ask("a", count=2)], devs(16, 16, 16), used(d1=1), True, [(0, 2)], id="whole devices skip used ones"),
    pytest.param([Ask("a", count=2)], devs(16, 16), used(d1=1), True, None, id="not enough idle devices"),
    pytest.param([Ask("small", 4096), Ask("big", 12288)], devs(16384), Usage(), True, [(0,), (0,)],
                 id="two containers share one device"),
    pytest.param([Ask("a", 1, compute=60), Ask("b", 1, compute=60)], devs(16, 16), Usage(), True, [(0,), (1,)],
                 id="compute forces a second device"),
])
def test_place(asks: list[Ask], devices: Any, usage: Usage, binpack: bool, expected: Any) -> None:
    grants = logic.place(asks, devices, usage, binpack)
    assert (None if grants is None else [g.devices for g in grants]) == expected


@pytest.mark.parametrize("asks, devices, usage, expected", [
    pytest.param([Ask("w", count=1), Ask("s", 12288)], devs(16384, 8192), Usage(), [(1,), (0,)],
                 id="the whole device is not the one the share needs"),
    pytest.param([Ask("w", count=1), Ask("s", 12288)], devs(16384, 8192, 16384), used(d2=8192), [(1,), (0,)],
                 id="the lowest idle device is the only one with room for the share"),
    pytest.param([Ask("w", count=2), Ask("s", 8192, compute=60)], (Device(0, 16384), Device(1, 16384, 50),
                                                                    Device(2, 16384, 50)), Usage(), [(1, 2), (0,)],
                 id="the share needs the compute of device 0"),
    pytest.param([Ask(f"c{i}", m) for i, m in enumerate([5, 4, 4, 3, 2, 2])], devs(10, 10), Usage(),
                 [(0,), (1,), (1,), (0,), (0,), (1,)], id="shares packed as best fit decreasing cannot"),
    pytest.param([Ask("w", count=1), Ask("s", 12288)], devs(16384, 8192), used(d0=8192), None, id="none exists"),
])
def test_place_finds_an_assignment_whenever_one_exists(asks: list[Ask], devices: Any, usage: Usage,
                                                       expected: Any) -> None:
    """The greedy pass (whole devices first at the lowest ids, then shares best fit) misses these:
    a search finds them, and ``explain_misfit`` no longer calls them asks that never fit."""
    grants = logic.place(asks, devices, usage)
    assert (None if grants is None else [g.devices for g in grants]) == expected
    if grants is None:
        assert logic.explain_misfit(asks, devices, usage).could_help, "it fits the idle node"
    else:
        after = Usage({**usage.memory}, {**usage.compute}, set(usage.exclusive), {})
        after.add("new", grants)
        assert all(after.memory.get(d.id, 0) <= d.memory and after.compute.get(d.id, 0) <= d.compute
                   for d in devices)


def _fits_somehow(asks: list[Ask], devices: Any, usage: Usage) -> bool:
    """Every assignment tried: each whole ask any set of idle devices, each share any device."""
    def go(rest: list[Ask], u: Usage) -> bool:
        if not rest:
            return True
        ask, more = rest[0], rest[1:]
        if ask.whole:
            options = [tuple(d.id for d in c)
                       for c in itertools.combinations([d for d in devices if u.idle(d)], ask.count)]
        else:
            options = [(d.id,) for d in devices if d.healthy and u.free_memory(d) >= ask.memory
                       and u.free_compute(d) >= ask.compute]
        for ids in options:
            after = Usage({**u.memory}, {**u.compute}, set(u.exclusive), {k: list(v) for k, v in u.holders.items()})
            after.add("x", [Grant(ask.container, ids, 0 if ask.whole else ask.memory, 0 if ask.whole else ask.compute,
                                  ask.whole)])
            if go(more, after):
                return True
        return False
    return go(list(asks), usage)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([4, 8, 12, 16]), st.sampled_from([50, 100]), st.booleans()),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 2, 4, 8]), st.sampled_from([0, 30, 60])), max_size=3),
       st.lists(st.one_of(st.tuples(st.just(0), st.integers(1, 2), st.just(0)),
                          st.tuples(st.sampled_from([0, 2, 4, 6, 8, 12]), st.just(0), st.sampled_from([0, 30, 50]))),
                min_size=2, max_size=4),
       st.booleans())
def test_place_fits_exactly_when_some_assignment_does(spec: list[tuple[int, int, bool]],
                                                      held: list[tuple[int, int, int]],
                                                      wanted: list[tuple[int, int, int]], binpack: bool) -> None:
    """Over small nodes (some devices unhealthy, shared or held whole) and pods of several asks:
    ``place`` finds room exactly when some assignment has it, and what it grants fits."""
    devices = tuple(Device(i, m, c, h) for i, (m, c, h) in enumerate(spec))
    usage = Usage()
    for k, (dev, memory, compute) in enumerate(held):
        usage.add(f"h{k}", [Grant("c", (dev,), memory, compute, exclusive=memory == 0 and compute == 0)])
    asks = [Ask(f"c{k}", m, c, n) for k, (m, n, c) in enumerate(wanted) if m or n or c] or [Ask("c", 2)]
    grants = logic.place(asks, devices, usage, binpack)
    assert (grants is not None) == _fits_somehow(asks, devices, usage)
    if grants is not None:
        assert [g.container for g in grants] == [a.container for a in asks]
        after = Usage({**usage.memory}, {**usage.compute}, set(usage.exclusive),
                      {k: list(v) for k, v in usage.holders.items()})
        for a, g in zip(asks, grants):
            if a.whole:
                assert g.exclusive and len(set(g.devices)) == a.count and all(after.idle(devices[d]) for d in g.devices)
            else:
                d = devices[g.devices[0]]
                assert d.healthy and after.free_memory(d) >= a.memory and after.free_compute(d) >= a.compute
            after.add(a.container, [g])


def test_a_pod_of_a_whole_device_and_a_share_fits_a_node_of_unequal_devices() -> None:
    node = gpu_node("a", {"devices": [{"id": 0, "memoryMiB": 16384}, {"id": 1, "memoryMiB": 8192}]})
    pod = make_pod("p").uid("u-p").req(**{COUNT: 1}).container("share", **{MEM: 12288}).obj()
    engine, cluster = engine_over([node], [pod])
    assert engine.filter(pod, ["a"]).feasible == ["a"]
    assert engine.bind("default", "p", "u-p", "a") == ""
    containers = json.loads(cluster.get_pod("default", "p")["metadata"]["annotations"][DEVICES])["containers"]
    assert {name: c["devices"] for name, c in containers.items()} == {"main": [1], "share": [0]}


def test_unhealthy_devices_are_never_used() -> None:
    devices = (Device(0, 16384, healthy=False), Device(1, 8192))
    assert [g.devices for g in logic.place([Ask("a", 4096)], devices, Usage())] == [(1,)]  # type: ignore[union-attr]
    assert logic.place([Ask("a", 12000)], devices, Usage()) is None


def computing(percent: int) -> Usage:
    """Both devices running a compute share of ``percent`` (and no memory)."""
    u = Usage()
    u.add("busy", [Grant("c", (0,), 0, percent), Grant("d", (1,), 0, percent)])
    return u


@pytest.mark.parametrize("asks, usage, could_help, short_of, fragment", [
    ([Ask("a", 8192)], used(d0=12288, d1=12288), True, "memory",
     "no single device with 8192 MiB free; largest free is 4096 MiB; 8192 MiB free in total across devices (fragmented)"),
    ([Ask("a", 32768)], Usage(), False, "memory", "asks for 32768 MiB; largest device has 16384 MiB"),
    ([Ask("a", count=3)], Usage(), False, "count", "asks for 3 whole devices; node has 2 healthy"),
    ([Ask("a", count=2)], used(d1=1024), True, "count", "container a needs 2 idle devices; 1 idle"),
    ([Ask("a", 1024, compute=60)], computing(50), True, "compute", "no single device with 60% compute free"),
])
def test_misfit_explanations(asks: list[Ask], usage: Usage, could_help: bool, short_of: str, fragment: str) -> None:
    misfit = logic.explain_misfit(asks, devs(16384, 16384), usage)
    assert misfit.could_help is could_help and misfit.short_of == short_of and fragment in misfit.detail


# ---- NVIDIA GPU Feature Discovery labels -----------------------------------------------------------

GFD = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "24576", "nvidia.com/gpu.product": "NVIDIA-L4",
       "nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("labels, expected", [
    pytest.param(GFD, tuple(Device(i, 24576) for i in range(4)), id="four devices of 24 GiB"),
    pytest.param({"nvidia.com/gpu.count": "0", "nvidia.com/gpu.memory": "81920"}, (), id="zero devices"),
    pytest.param({"kubernetes.io/hostname": "cpu-1"}, (), id="not a GFD node"),
    pytest.param({"nvidia.com/gpu.memory": "81920"}, (), id="memory without count: no inventory"),
])
def test_inventory_from_gfd_labels(labels: dict[str, str], expected: tuple[Device, ...]) -> None:
    assert logic.inventory_from_labels(labels) == expected


@pytest.mark.parametrize("labels, problem", [
    ({"nvidia.com/gpu.count": "four", "nvidia.com/gpu.memory": "16384"}, "is not a device count"),
    ({"nvidia.com/gpu.count": "-1", "nvidia.com/gpu.memory": "16384"}, "is not a device count"),
    ({"nvidia.com/gpu.count": "2"}, "without nvidia.com/gpu.memory"),
    ({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "16GB"}, "is not a positive number of MiB"),
    ({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "0"}, "is not a positive number of MiB"),
    ({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "16384.5"}, "is not a positive number of MiB"),
])
def test_malformed_gfd_labels_are_refused_by_name(labels: dict[str, str], problem: str) -> None:
    with pytest.raises(logic.InventoryError, match=problem):
        logic.inventory_from_labels(labels)


# ---- victims -------------------------------------------------------------------------------------

def holder(uid: str, priority: int, device: int, memory: int, start: str = "2026-01-01T00:00:00Z") -> Holder:
    return Holder(uid, priority, start, (Grant("c", (device,), memory, 0),))


HOLDERS = [holder("low-big", 10, 0, 12288), holder("low-small", 10, 1, 4096), holder("mid", 50, 1, 8192),
           holder("high", 900, 1, 4096)]


@pytest.mark.parametrize("ask, prio, required, expected", [
    pytest.param(Ask("a", 4096), 100, [], [], id="already fits: no victim"),
    pytest.param(Ask("a", 8192), 100, [], ["low-big"], id="one victim frees device 0"),
    pytest.param(Ask("a", 6000), 100, [], ["low-big"], id="smallest set, lowest priority"),
    pytest.param(Ask("a", 16384), 100, [], ["low-big"], id="a whole device's memory"),
    pytest.param(Ask("a", 16384), 40, [], ["low-big"], id="only lower priorities"),
    pytest.param(Ask("a", 12288), 60, ["low-small"], ["low-big"], id="kube-scheduler's victims are not enough"),
    pytest.param(Ask("a", 4096), 60, ["low-big"], [], id="kube-scheduler's victims are enough"),
    pytest.param(Ask("a", 6000), 5, [], None, id="nothing of lower priority"),
    pytest.param(Ask("a", 20000), 1000, [], None, id="too large for any device"),
])
def test_choose_victims(ask: Ask, prio: int, required: list[str], expected: list[str] | None) -> None:
    assert logic.choose_victims([ask], devs(16384, 16384), HOLDERS, prio, required) == expected


def test_never_evicts_equal_or_higher_priority() -> None:
    holders = [holder("eq", 100, 0, 16384), holder("hi", 200, 1, 16384)]
    assert logic.choose_victims([Ask("a", 1)], devs(16384, 16384), holders, 100) is None


# ---- through the engine ------------------------------------------------------------------------

def gpu_node(name: str, inventory: dict[str, Any]) -> dict[str, Any]:
    n = make_node(name).obj()
    n["metadata"]["annotations"] = {INVENTORY: json.dumps(inventory)}
    return n


def share_pod(name: str, memory: int, compute: int = 0, priority: int = 0, node: str = "", **ann: str) -> dict:
    b = make_pod(name).uid(f"u-{name}").req(**{MEM: memory, **({COMPUTE: compute} if compute else {})}).priority(priority)
    if node:
        b = b.node(node)
    obj = b.obj()
    if ann:
        obj["metadata"]["annotations"] = dict(ann)
    return obj


DEVICE_CONFIG = dict(
    managedResources=[{"name": MEM}, {"name": COMPUTE}, {"name": COUNT}],
    profiles=[{"schedulerName": "default-scheduler",
               "plugins": {"multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]}}}],
)


def engine_over(nodes: list[dict], pods: list[dict], clock: FakeClock | None = None,
                args: dict[str, Any] | None = None) -> tuple[Any, MemoryCluster]:
    """An engine with DeviceShare alone (``args``: its args)."""
    config = DEVICE_CONFIG if args is None else {
        **DEVICE_CONFIG, "profiles": [{**DEVICE_CONFIG["profiles"][0], "pluginConfig": [{"name": "DeviceShare", "args": args}]}]}
    cluster = MemoryCluster(cluster_objects(nodes, pods))
    app = create_app(config_of(**config), source=cluster, clock=clock or FakeClock(), background=False)
    return app.extensions["kube_extender"].engine, cluster


NODES = [gpu_node("a", {"devices": 2, "memoryMiB": 16384}), gpu_node("b", {"devices": 1, "memoryMiB": 8192}),
         make_node("plain").obj()]


def test_filter_reasons_on_the_wire_and_details_in_explain() -> None:
    engine, _ = engine_over(NODES, [share_pod("x", 12288, node="a"), share_pod("y", 12288, node="a")])
    outcome = engine.filter(share_pod("p", 8192), ["a", "b", "plain"])
    assert outcome.feasible == ["b"]
    assert outcome.failed == {"a": "Insufficient example.com/gpu-memory on any single device"}
    assert outcome.unresolvable == {"plain": "node(s) had no shareable devices"}
    verdict = engine.explain.get("default/p")["filter"].as_dict()
    assert verdict["rejected"]["a"]["detail"].startswith("no single device with 8192 MiB free; largest free is 4096 MiB")


def test_bind_picks_devices_and_writes_the_assignment() -> None:
    engine, cluster = engine_over(NODES, [share_pod("x", 4096, node="a", **{
        "kube-extender.io/devices": json.dumps({"node": "a", "containers": {"main": {"devices": [1], "memoryMiB": 4096}}})})])
    p = share_pod("p", 8192, compute=50)
    cluster.add_pod(p)
    assert engine.bind("default", "p", "u-p", "a") == ""
    stored = cluster.get_pod("default", "p")["metadata"]["annotations"]
    assignment = json.loads(stored["kube-extender.io/devices"])
    assert assignment == {"node": "a", "containers": {"main": {"devices": [1], "memoryMiB": 8192, "compute": 50,
                                                               "exclusive": False}}}, "best fit: the used device"
    assert json.loads(stored["kube-extender.io/allocation"])["extra"]["devices"] == assignment["containers"]
    # device 1 now has 4096 free, device 0 16384: a 12 GiB pod fits only device 0
    outcome = engine.filter(share_pod("q", 12288), ["a"])
    assert outcome.feasible == ["a"]


def test_a_failed_binding_leaves_no_assignment_behind() -> None:
    """The Binding fails after PreBind wrote the device assignment: the pod is pending again and
    must not carry an assignment (or allocation) that a restarted extender would trust."""
    engine, cluster = engine_over(NODES, [share_pod("p", 8192)])

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise WriteError("the API server said no")

    cluster.bind = refuse  # type: ignore[method-assign]
    assert "bind failed" in engine.bind("default", "p", "u-p", "a")
    annotations = cluster.get_pod("default", "p")["metadata"].get("annotations") or {}
    assert not {"kube-extender.io/devices", "kube-extender.io/allocation"} & set(annotations), annotations
    restarted, _ = engine_over(NODES, [dict(p) for p in cluster.pods()])
    assert restarted.filter(share_pod("q", 16384), ["a"]).feasible == ["a"], "both devices are free"


def bind_of_unknown_outcome(engine: Any, cluster: MemoryCluster, name: str) -> None:
    """Bind ``name`` to node a with a Binding of unknown outcome (not stored): the engine holds it."""
    real_bind = cluster.bind

    def unknown(*args: Any, **kwargs: Any) -> None:
        raise WriteError("no reply, and the pod could not be read back", uncertain=True)

    cluster.bind = unknown  # type: ignore[method-assign]
    try:
        assert "stays held" in engine.bind("default", name, f"u-{name}", "a")
    finally:
        cluster.bind = real_bind  # type: ignore[method-assign]


def test_a_binding_of_unknown_outcome_keeps_its_devices_held() -> None:
    """Nobody can tell whether the Binding (and the device assignment it carried) was stored: the
    devices stay held until the cluster shows the pod, so no second pod is put on them."""
    engine, cluster = engine_over(NODES, [share_pod(name, 12288) for name in "pqr"])
    bind_of_unknown_outcome(engine, cluster, "p")
    assert engine.bind("default", "q", "u-q", "a") == "", "the other device is free"
    assert engine.filter(share_pod("r", 12288), ["a"]).feasible == []
    assert "no longer fits" in engine.bind("default", "r", "u-r", "a")


def test_a_retry_after_an_unknown_outcome_that_was_not_stored_sends_the_same_binding() -> None:
    """p's first Binding (device 1, beside x) has an unknown outcome - it was not stored. x goes;
    kube-scheduler's retry sends that same Binding again (device 1, which the hold kept), and
    until the watch shows it, the cache counts p there: q goes to device 0. (Found in review: the
    retry's new cycle picked device 0 while the first assignment rode along, and q was put on
    device 0 beside p.)"""
    x = share_pod("x", 4096, node="a", **{
        "kube-extender.io/devices": json.dumps({"node": "a", "containers": {"main": {"devices": [1], "memoryMiB": 4096}}})})
    engine, cluster = engine_over(NODES, [x, share_pod("p", 8192), share_pod("q", 12288)])
    bind_of_unknown_outcome(engine, cluster, "p")
    cluster.delete_pod("default", "x")
    lagging: list[dict] = []
    publish = cluster._publish_pod
    cluster._publish_pod = lagging.append  # type: ignore[method-assign]  # our watch lags from here on
    assert engine.bind("default", "p", "u-p", "a") == "", "kube-scheduler's retry"
    devices_of = lambda name: json.loads(  # noqa: E731
        cluster.get_pod("default", name)["metadata"]["annotations"]["kube-extender.io/devices"])["containers"]["main"]
    assert devices_of("p")["devices"] == [1], "the same Binding, sent again"
    assert engine.bind("default", "q", "u-q", "a") == ""
    for pod in lagging:
        publish(pod)
    assert devices_of("q")["devices"] == [0], "8 GiB (p) + 12 GiB (q) fit no one 16 GiB device"


@pytest.mark.parametrize("retry", ["bound there already", "unknown again"])
def test_a_retry_after_an_unknown_outcome_that_was_stored_counts_the_devices_the_pod_holds(retry: str) -> None:
    """p's first Binding (device 1, beside x) was stored, its reply lost, every read back failed:
    the hold carries device 1. x goes (our watch shows that, not p's Binding yet). kube-scheduler's
    retry must not pick devices anew (device 0 now looks free): the same Binding is sent again, so
    whatever the cluster holds, the cache counts p on device 1 and q goes to device 0. (Found in
    review: q was put on device 1 beside p.)"""
    x = share_pod("x", 4096, node="a", **{
        "kube-extender.io/devices": json.dumps({"node": "a", "containers": {"main": {"devices": [1], "memoryMiB": 4096}}})})
    engine, cluster = engine_over(NODES, [x, share_pod("p", 8192), share_pod("q", 12288)])
    real_bind = cluster.bind
    lagging: list[dict] = []
    publish = cluster._publish_pod

    def stored_reply_lost(*args: Any, **kwargs: Any) -> None:
        cluster.delete_pod("default", "x")  # before p's Binding in the API server's order; our watch shows it
        cluster._publish_pod = lagging.append  # type: ignore[method-assign]  # but not p's Binding, yet
        real_bind(*args, **kwargs)
        raise WriteError("no reply, and the pod could not be read back", uncertain=True)

    def unknown_again(*args: Any, **kwargs: Any) -> None:
        raise WriteError("binding conflict, and the pod could not be read back: it may be bound", uncertain=True)

    cluster.bind = stored_reply_lost  # type: ignore[method-assign]
    assert "stays held" in engine.bind("default", "p", "u-p", "a")
    devices_of = lambda name: json.loads(  # noqa: E731
        cluster.get_pod("default", name)["metadata"]["annotations"]["kube-extender.io/devices"])["containers"]["main"]
    assert devices_of("p")["devices"] == [1], "the first Binding put p on device 1, beside x"
    if retry == "bound there already":
        cluster.bind = real_bind  # type: ignore[method-assign]
        assert engine.bind("default", "p", "u-p", "a") == "", "kube-scheduler's retry: p is bound there already"
    else:
        cluster.bind = unknown_again  # type: ignore[method-assign]
        assert "stays held" in engine.bind("default", "p", "u-p", "a")
        cluster.bind = real_bind  # type: ignore[method-assign]
    assert engine.bind("default", "q", "u-q", "a") == ""
    for pod in lagging:
        publish(pod)
    assert devices_of("q")["devices"] == [0], "8 GiB (p, device 1) + 12 GiB (q) fit no one 16 GiB device"


def test_assignments_survive_a_restart() -> None:
    engine, cluster = engine_over(NODES, [])
    for i in range(3):
        cluster.add_pod(share_pod(f"p{i}", 8192))
        assert engine.bind("default", f"p{i}", f"u-p{i}", "a") == ""
    restarted, _ = engine_over(NODES, [dict(p) for p in cluster.pods()])
    outcome = restarted.filter(share_pod("q", 16384), ["a"])
    assert outcome.failed and "largest free is 8192 MiB" in restarted.explain.get("default/q")["filter"] \
        .as_dict()["rejected"]["a"]["detail"]


def test_fragmentation_is_reported_not_misscheduled() -> None:
    engine, _ = engine_over(NODES, [share_pod("x", 10240, node="a"), share_pod("y", 10240, node="a")])
    outcome = engine.filter(share_pod("p", 8192), ["a"])
    assert outcome.feasible == [] and "a" in outcome.failed
    detail = engine.explain.get("default/p")["filter"].as_dict()["rejected"]["a"]["detail"]
    assert "12288 MiB free in total across devices (fragmented)" in detail


def test_preempt_at_device_level_adds_victims_on_that_node() -> None:
    pods = [share_pod("low-a", 12288, priority=10, node="a"), share_pod("low-b", 12288, priority=10, node="a"),
            share_pod("cpu-victim", 0, priority=5, node="a")]
    pods[0]["status"]["startTime"] = "2026-01-01T00:00:00Z"
    pods[1]["status"]["startTime"] = "2026-01-02T00:00:00Z"
    engine, _ = engine_over(NODES, pods)
    # kube-scheduler proposes only a cpu victim; the device needs one GPU pod evicted too
    decisions = engine.preempt(share_pod("hi", 8192, priority=100),
                               {"a": Candidate([("u-cpu-victim", None)], 0)})
    assert decisions["a"].victims == ["u-low-b", "u-cpu-victim"], "the most recently started, most important first"


def gfd_node(name: str, count: str = "2", memory: str = "16384", **annotations: str) -> dict[str, Any]:
    n = make_node(name).obj()
    n["metadata"]["labels"] = {**n["metadata"].get("labels", {}), "nvidia.com/gpu.count": count,
                               "nvidia.com/gpu.memory": memory, "nvidia.com/gpu.product": "NVIDIA-A10"}
    if annotations:
        n["metadata"]["annotations"] = annotations
    return n


@pytest.mark.parametrize("node, fits_12g, source", [
    pytest.param(gfd_node("n"), True, "gpu-feature-discovery", id="GFD labels alone"),
    pytest.param(gfd_node("n", **{INVENTORY: json.dumps({"devices": 1, "memoryMiB": 8192})}), False, "annotation",
                 id="the annotation wins over the labels"),
    pytest.param(gfd_node("n", **{INVENTORY: "{broken"}), True, "gpu-feature-discovery",
                 id="a malformed annotation is ignored: the labels count"),
    pytest.param(gfd_node("n", **{INVENTORY: DEEP}), True, "gpu-feature-discovery",
                 id="an annotation nested too deep is ignored: the labels count"),
    pytest.param(gfd_node("n", memory="16GB"), None, "", id="malformed labels: no devices, no crash"),
    pytest.param(gfd_node("n", count="lots"), None, "", id="malformed count: no devices, no crash"),
])
def test_inventory_from_gfd_labels_through_the_engine(node: dict[str, Any], fits_12g: bool | None, source: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    engine, _ = engine_over([node], [])
    outcome = engine.filter(share_pod("p", 12288), ["n"])
    if fits_12g is None:
        assert outcome.unresolvable == {"n": "node(s) had no shareable devices"}
        assert any(r.getMessage() == "ignoring a malformed device inventory" for r in caplog.records)
    else:
        assert outcome.feasible == (["n"] if fits_12g else [])
    plugin = engine.frameworks["default-scheduler"].filter_plugins[0]
    capacity = plugin.node_capacity(engine.cache.snapshot().get("n"))
    assert (capacity.source if capacity is not None else "") == source


@pytest.mark.parametrize("pod, reason", [
    pytest.param(make_pod("p").uid("u-p").req(**{COUNT: 2}).obj(), "Insufficient example.com/gpu",
                 id="whole devices: the count resource"),
    pytest.param(share_pod("p", 10240), "Insufficient example.com/gpu-memory on any single device",
                 id="a memory share"),
    pytest.param(share_pod("p", 1024, compute=60), "Insufficient example.com/gpu-compute on any single device",
                 id="a compute share"),
])
def test_a_rejection_names_the_resource_the_pod_is_short_of(pod: dict[str, Any], reason: str) -> None:
    """Node a: device 0 holds an 8 GiB share at 50% compute, device 1 a 12 GiB share at 50%."""
    held = [share_pod("x", 8192, compute=50, node="a"), share_pod("y", 12288, compute=50, node="a")]
    engine, _ = engine_over([gpu_node("a", {"devices": 2, "memoryMiB": 16384})], held)
    assert engine.filter(pod, ["a"]).failed == {"a": reason}


def test_node_capacity_per_device_and_summed_per_node() -> None:
    """Placed deterministically (whole devices first, at the lowest id; shares best-fit): device 0
    is held whole, device 1 holds two shares, device 2 is idle, device 3 is unhealthy. Used/total
    per device, and per node the sums over healthy devices (a device held whole is fully used;
    the count resource counts busy devices)."""
    whole = make_pod("w").uid("u-w").req(**{COUNT: 1}).node("a").obj()
    held = [share_pod("x", 4096, compute=20, node="a"), share_pod("y", 2048, node="a"), whole]
    engine, _ = engine_over([gpu_node("a", {"devices": 4, "memoryMiB": 16384, "unhealthy": [3]})], held)
    plugin = engine.frameworks["default-scheduler"].filter_plugins[0]
    capacity = plugin.node_capacity(engine.cache.snapshot().get("a"))
    assert [(d["id"], d["memoryMiB"], d["compute"], d["exclusive"], d["pods"]) for d in capacity.devices] == [
        (0, {"used": 16384, "total": 16384}, {"used": 100, "total": 100}, True, ["default/w"]),
        (1, {"used": 6144, "total": 16384}, {"used": 20, "total": 100}, False, ["default/x", "default/y"]),
        (2, {"used": 0, "total": 16384}, {"used": 0, "total": 100}, False, []),
        (3, {"used": 0, "total": 16384}, {"used": 0, "total": 100}, False, []),
    ]
    assert [d["healthy"] for d in capacity.devices] == [True, True, True, False]
    assert dict(capacity.resources) == {MEM: (3 * 16384 * 1000, (6144 + 16384) * 1000),
                                        COMPUTE: (300 * 1000, 120 * 1000), COUNT: (3000, 2000)}


def test_preempt_drops_a_node_where_devices_cannot_be_freed() -> None:
    engine, _ = engine_over(NODES, [share_pod("hi-a", 16384, priority=500, node="b")])
    assert engine.preempt(share_pod("p", 8192, priority=100), {"b": Candidate([("u-hi-a", None)], 0)}) == {}


DEVICES = "kube-extender.io/devices"


def granted(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    return json.loads(cluster.get_pod("default", name)["metadata"]["annotations"][DEVICES])["containers"]["main"]


def test_concurrent_binds_never_grant_one_device_beyond_its_memory() -> None:
    """pb is bound while pa's Reserve holds a snapshot taken before pb was assumed: pa must see
    pb's grant, not place itself on a view that lacks pb."""
    z = share_pod("z", 6144, node="a")  # bound by someone else: placed by the rules, after those granted
    z["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z"
    engine, cluster = engine_over([gpu_node("a", {"devices": 2, "memoryMiB": 16384})],
                                  [z, share_pod("pa", 12288), share_pod("pb", 6144)])
    plugin = engine.frameworks["default-scheduler"].filter_plugins[0]
    real, took, go = plugin.handle, threading.Event(), threading.Event()

    class Paused:
        """pa's Reserve stops right after reading the snapshot until pb is bound."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def snapshot(self) -> Any:
            s = real.snapshot()
            if threading.current_thread().name == "bind-pa" and not took.is_set():
                took.set()
                go.wait(5)
            return s

    plugin.handle = Paused()
    result: dict[str, str] = {}
    t = threading.Thread(target=lambda: result.update(pa=engine.bind("default", "pa", "u-pa", "a")), name="bind-pa")
    t.start()
    assert took.wait(5)
    assert engine.bind("default", "pb", "u-pb", "a") == ""
    go.set()
    t.join(5)
    assert result == {"pa": ""}
    used: dict[int, int] = {}
    for name in ("pa", "pb"):
        for d in granted(cluster, name)["devices"]:
            used[d] = used.get(d, 0) + granted(cluster, name)["memoryMiB"]
    assert all(v <= 16384 for v in used.values()), used


def test_a_bind_leaves_the_device_capacity_held_for_a_nominated_pod() -> None:
    """q (nominated to a) needs a whole 16 GiB device, device 0; p fits either: Filter counts q's
    hold, and so must Reserve when it picks p's device (spreading: the emptier device)."""
    x = share_pod("x", 8192, node="a", **{DEVICES: json.dumps({"node": "a", "containers": {
        "main": {"devices": [1], "memoryMiB": 8192}}})})
    q = share_pod("q", 16384, priority=100)
    q["status"]["nominatedNodeName"] = "a"
    engine, cluster = engine_over([gpu_node("a", {"devices": 2, "memoryMiB": 16384})], [x, q],
                                  args={"scoringStrategy": {"type": "LeastAllocated"}})
    cluster.add_pod(share_pod("p", 4096))
    assert engine.filter(share_pod("p", 4096), ["a"]).feasible == ["a"]
    assert engine.bind("default", "p", "u-p", "a") == ""
    assert granted(cluster, "p")["devices"] == [1]
    assert engine.filter(q, ["a"]).feasible == ["a"], "the device held for q is still free"


def test_pods_bound_without_an_assignment_are_never_counted_as_holding_nothing() -> None:
    """Pods bound without an assignment are placed by the rules after the granted ones: once p's
    grant changes where they land, one may fit nowhere - it still holds what it asks for."""
    held = []
    for i, memory in enumerate([12288, 4096, 6144, 8192]):  # 30 of 32 GiB
        pod = share_pod(f"x{i}", memory, node="a")
        pod["metadata"]["creationTimestamp"] = f"2026-01-0{i + 1}T00:00:00Z"
        held.append(pod)
    engine, cluster = engine_over([gpu_node("a", {"devices": 2, "memoryMiB": 16384})], held)
    cluster.add_pod(share_pod("p", 2048))
    assert engine.bind("default", "p", "u-p", "a") == ""  # 32 of 32 GiB
    assert engine.filter(share_pod("q", 6144), ["a"]).feasible == []


@pytest.mark.parametrize("memory", ["1e999", "-8192", "8192.5e400", '"lots"', DEEP])
def test_a_malformed_assignment_is_ignored_not_a_failed_filter(memory: str) -> None:
    x = share_pod("x", 4096, node="a", **{DEVICES: '{"node":"a","containers":{"main":{"devices":[0],"memoryMiB":%s}}}'
                                          % memory})
    engine, _ = engine_over([gpu_node("a", {"devices": 1, "memoryMiB": 16384})], [x])
    outcome = engine.filter(share_pod("p", 8192), ["a"])
    assert not outcome.error and outcome.feasible == ["a"]  # x placed by the rules: 4 GiB of 16
    assert engine.filter(share_pod("q", 16384), ["a"]).feasible == []


def test_whole_devices_are_the_lowest_idle_ids_whatever_the_inventory_order() -> None:
    node = gpu_node("a", {"devices": [{"id": 1, "memoryMiB": 16384}, {"id": 0, "memoryMiB": 16384}]})
    pod = make_pod("p").uid("u-p").req(**{COUNT: 1}).obj()
    engine, cluster = engine_over([node], [pod])
    assert engine.bind("default", "p", "u-p", "a") == ""
    assert granted(cluster, "p")["devices"] == [0]


def test_a_sidecars_share_is_held_beside_the_containers() -> None:
    """A sidecar (an init container with restartPolicy: Always) runs for the pod's life: its
    device share counts like a container's."""
    x = share_pod("x", 0, node="a")
    x["spec"]["initContainers"] = [{"name": "side", "image": "x", "restartPolicy": "Always",
                                    "resources": {"requests": {MEM: "16384"}}}]
    x["spec"]["containers"][0]["resources"] = {}
    engine, _ = engine_over([gpu_node("a", {"devices": 1, "memoryMiB": 16384})], [x])
    assert engine.filter(share_pod("p", 16384), ["a"]).feasible == []
    plain = share_pod("y", 0, node="a")
    plain["spec"]["initContainers"] = [{"name": "setup", "image": "x", "resources": {"requests": {MEM: "16384"}}}]
    plain["spec"]["containers"][0]["resources"] = {}
    engine, _ = engine_over([gpu_node("a", {"devices": 1, "memoryMiB": 16384})], [plain])
    assert engine.filter(share_pod("p", 16384), ["a"]).feasible == ["a"], "a plain init container has ended"


TWO_PROFILES = dict(
    managedResources=DEVICE_CONFIG["managedResources"],
    profiles=[{"schedulerName": name, "plugins": {"multiPoint": {"enabled": [{"name": "DeviceShare"}],
                                                                 "disabled": ["NodeResources"]}}}
              for name in ("default-scheduler", "gpu-scheduler")],
)


def test_a_device_reserved_through_one_profile_is_taken_for_every_profile() -> None:
    """w (profile 1) is bound to device 1 whole; our watch has not shown its Binding yet, so the
    cache holds w assumed, with no assignment: only the reservation says where it is. z is bound
    by someone else (no assignment) and created after w. Profile 2's DeviceShare must count w's
    reservation, not place w by the rules (w first, on device 0: then z on device 1, and device 1
    looking like it has room for p). (Found in review: each profile's plugin kept its own
    reservations, and p was granted device 1 beside w holding it whole.)"""
    z = make_pod("z").uid("u-z").req(**{MEM: 6144}).node("a").created("2026-01-02T00:00:00Z").obj()
    w = make_pod("w").uid("u-w").req(**{COUNT: 1}).obj()
    p = make_pod("p").uid("u-p").req(**{MEM: 8192}).scheduler("gpu-scheduler").obj()
    cluster = MemoryCluster(cluster_objects([gpu_node("a", {"devices": 2, "memoryMiB": 16384})], [z, w, p]))
    app = create_app(config_of(**TWO_PROFILES), source=cluster, clock=FakeClock(), background=False)
    engine = app.extensions["kube_extender"].engine
    lagging: list[dict] = []
    cluster._publish_pod = lagging.append  # type: ignore[method-assign]  # the watch lags from here on
    assert engine.bind("default", "w", "u-w", "a") == ""
    assert granted(cluster, "w") == {"devices": [1], "memoryMiB": 0, "compute": 0, "exclusive": True}
    assert engine.bind("default", "p", "u-p", "a") == ""
    assert granted(cluster, "p")["devices"] == [0], "device 1 is held whole by w"


def test_preempt_judges_a_budget_over_the_victims_together_not_one_by_one() -> None:
    """Node a: device 0 holds db-1 and db-2 (8 GiB each, priority 10, one budget allowing one
    disruption), device 1 holds u (8 GiB, priority 20, no budget). Evicting db-1 and db-2 frees
    device 0 but takes two disruptions of a budget allowing one: as kube-scheduler's
    filterPodsWithPDBViolation counts, db-2 (the less important) violates it, so u goes instead.
    (Found in review: each pod was judged alone - each "allowed" - and both were chosen.)"""
    db = [make_pod(f"db-{i}").uid(f"u-db-{i}").labels(app="db").req(**{MEM: 8192}).priority(10).node("a").obj()
          for i in (1, 2)]
    db[0]["status"]["startTime"], db[1]["status"]["startTime"] = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    u = share_pod("u", 8192, priority=20, node="a")
    grants = {"db-1": 0, "db-2": 0, "u": 1}
    for pod in (*db, u):
        device = grants[pod["metadata"]["name"]]
        pod["metadata"]["annotations"] = {DEVICES: json.dumps({"node": "a", "containers": {
            "main": {"devices": [device], "memoryMiB": 8192}}})}
    cpu = share_pod("cpu-victim", 0, priority=5, node="a")  # kube-scheduler proposes it alone
    objects = cluster_objects([gpu_node("a", {"devices": 2, "memoryMiB": 16384})], [*db, u, cpu])
    objects["PodDisruptionBudget"] = [{"metadata": {"name": "db", "namespace": "default"},
                                       "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1}}]
    cluster = MemoryCluster(objects)
    app = create_app(config_of(**DEVICE_CONFIG), source=cluster, clock=FakeClock(), background=False)
    engine = app.extensions["kube_extender"].engine
    decisions = engine.preempt(share_pod("hi", 16384, priority=100), {"a": Candidate([("u-cpu-victim", None)], 0)})
    assert decisions["a"].victims == ["u-u", "u-cpu-victim"]
