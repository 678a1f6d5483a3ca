"""Property tests: Go-shaped filter/prioritize requests against random clusters, and garbage.

Every reply must satisfy the extender contract (§1, §3.3, §3.6, §12 in ``extender.sim``): HTTP 200, exact
field names, survivors a subset of the input, every input node accounted for exactly once,
integer scores 0..10, and never a 500 for bad input (400 with a JSON body instead).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from builders import GPU, cluster_objects, make_node, make_pod
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.config.model import default_config
from extender.framework.clock import FakeClock

SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
NOT_IN_CACHE = "node not in extender cache"
KNOWN_POOL = [f"node-{i}" for i in range(8)]
UNKNOWN_POOL = ["ghost-1", "ghost-2", "gone", "node-99"]
CONFIG = default_config()
VERBS = ["filter", "prioritize", "preempt", "bind"]


@dataclass
class World:
    nodes: dict[str, int | None]
    """node name -> GPUs it advertises (None: does not offer example.com/gpu at all)."""
    used: dict[str, int]
    """node name -> GPUs held by pods running there."""
    objects: dict[str, dict[str, Any]]
    running: list[dict[str, Any]]

    def client(self) -> Any:
        """A fresh app over this world."""
        cluster = MemoryCluster(cluster_objects(list(self.objects.values()), self.running))
        return create_app(CONFIG, source=cluster, clock=FakeClock()).test_client()

    def install(self, shared: tuple[Any, MemoryCluster]) -> Any:
        """Turn the shared app's cluster into this world through watch events (much cheaper than a
        new app per example, and it exercises the cache's incremental updates too)."""
        app, cluster = shared
        for pod in cluster.pods():
            cluster.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        for node in cluster.nodes():
            cluster.delete_node(node["metadata"]["name"])
        for node in self.objects.values():
            cluster.add_node(node)
        for pod in self.running:
            cluster.add_pod(pod)
        return app.test_client()


@st.composite
def worlds(draw: Any) -> World:
    names = draw(st.lists(st.sampled_from(KNOWN_POOL), min_size=1, max_size=6, unique=True))
    nodes: dict[str, int | None] = {}
    used: dict[str, int] = {}
    objects: dict[str, dict[str, Any]] = {}
    running: list[dict[str, Any]] = []
    for name in names:
        gpus = draw(st.one_of(st.none(), st.integers(0, 8)))
        builder = make_node(name)
        if gpus is not None:
            builder = builder.alloc(gpu=gpus)
        nodes[name] = gpus
        objects[name] = builder.obj()
        held = draw(st.integers(0, gpus or 0))
        used[name] = held
        if held:
            running.append(make_pod(f"run-{name}").uid(f"uid-run-{name}").req(gpu=held).node(name).obj())
    return World(nodes, used, objects, running)


@st.composite
def pending_pods(draw: Any) -> tuple[dict[str, Any], int]:
    """A pending pod and the GPUs it effectively requests."""
    gpus = draw(st.one_of(st.none(), st.integers(0, 9)))
    name = draw(st.sampled_from(["trainer-0", "p", "gpu-pod", "x-1"]))
    builder = make_pod(name, draw(st.sampled_from(["default", "ml", "batch"]))).uid(f"uid-pending-{name}")
    builder = builder.priority(draw(st.integers(-10, 10**6)))
    if gpus is not None:
        if draw(st.booleans()):
            builder = builder.req(gpu=gpus)
        else:
            builder = builder.limits_only(gpu=gpus)  # the API server would default requests from limits
    if draw(st.booleans()):
        builder = builder.req(cpu="2", memory="4Gi")
    return builder.obj(), gpus or 0


def random_case(key: str) -> st.SearchStrategy[str]:
    return st.tuples(*[st.sampled_from(sorted({c.lower(), c.upper()})) for c in key]).map("".join)


@st.composite
def requests(draw: Any, world: World) -> tuple[dict[str, Any], list[str], bool]:
    """A Go-shaped ExtenderArgs body (random key casing), the node names it carries, and the mode."""
    known = draw(st.lists(st.sampled_from(sorted(world.nodes)), unique=True))
    unknown = draw(st.lists(st.sampled_from(UNKNOWN_POOL), unique=True, max_size=2))
    names = draw(st.permutations(known + unknown))
    names_mode = draw(st.booleans())
    pod, _ = draw(pending_pods())
    body: dict[str, Any] = {draw(random_case("Pod")): pod}
    if names_mode:
        body[draw(random_case("NodeNames"))] = names
        unused = "Nodes"
    else:
        items = [world.objects.get(n) or make_node(n).alloc(gpu=8).obj() for n in names]
        body[draw(random_case("Nodes"))] = {"metadata": {}, "items": items}
        unused = "NodeNames"
    if draw(st.booleans()):
        body[draw(random_case(unused))] = None  # Go sends the unused field as null
    return body, names, names_mode


def expected_verdict(world: World, name: str, need: int) -> str:
    """Independent oracle for NodeResources: 'fit', 'failed' (preemption may help) or 'unresolvable'."""
    if name not in world.nodes:
        return "failed"
    if need == 0:
        return "fit"
    alloc = world.nodes[name]
    if alloc is None or need > alloc:
        return "unresolvable"
    if need > alloc - world.used[name]:
        return "failed"
    return "fit"


def post(client: Any, verb: str, body: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return client.post(f"/scheduler/{verb}", data=data, content_type="application/json")


@pytest.fixture(scope="module")
def shared() -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([]))
    return create_app(CONFIG, source=cluster, clock=FakeClock()), cluster


@SETTINGS
@given(data=st.data())
def test_filter_reply_honours_the_contract(shared: tuple[Any, MemoryCluster], data: Any) -> None:
    world = data.draw(worlds(), label="world")
    body, names, names_mode = data.draw(requests(world), label="request")
    pod = next(v for k, v in body.items() if k.lower() == "pod")
    need = int(((pod["spec"]["containers"][0]["resources"].get("limits") or {}).get(GPU)
                or (pod["spec"]["containers"][0]["resources"].get("requests") or {}).get(GPU) or 0))

    resp = post(world.install(shared), "filter", body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.mimetype == "application/json"
    reply = resp.get_json()
    assert isinstance(reply, dict) and set(reply) == FILTER_KEYS, reply
    assert reply["Error"] == ""

    if names_mode:
        assert reply["Nodes"] is None
        survivors = reply["NodeNames"]
        assert isinstance(survivors, list) and all(type(n) is str for n in survivors)
    else:
        assert reply["NodeNames"] is None
        items = reply["Nodes"]["items"]
        survivors = [i["metadata"]["name"] for i in items]
        sent = {n["metadata"]["name"]: n for n in body[next(k for k in body if k.lower() == "nodes")]["items"]}
        assert all(item == sent[item["metadata"]["name"]] for item in items), "Node objects must be echoed unchanged"

    failed = reply["FailedNodes"]
    unresolvable = reply["FailedAndUnresolvableNodes"]
    assert isinstance(failed, dict) and isinstance(unresolvable, dict)
    assert set(survivors) <= set(names)
    assert len(survivors) == len(set(survivors))
    for name in names:
        homes = [name in survivors, name in failed, name in unresolvable]
        assert sum(homes) == 1, f"{name} must be in exactly one of NodeNames/FailedNodes/Unresolvable: {reply}"
    assert set(failed) | set(unresolvable) <= set(names), "rejected names that were never sent"
    for reason in list(failed.values()) + list(unresolvable.values()):
        assert isinstance(reason, str) and reason
    for name in names:
        if name not in world.nodes:
            assert failed.get(name) == NOT_IN_CACHE
        verdict = expected_verdict(world, name, need)
        got = "fit" if name in survivors else "failed" if name in failed else "unresolvable"
        assert got == verdict, f"{name}: need {need}, alloc {world.nodes.get(name)}, used {world.used.get(name)}"


@SETTINGS
@given(data=st.data())
def test_prioritize_reply_honours_the_contract(shared: tuple[Any, MemoryCluster], data: Any) -> None:
    world = data.draw(worlds(), label="world")
    body, names, _ = data.draw(requests(world), label="request")

    resp = post(world.install(shared), "prioritize", body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    reply = resp.get_json()
    assert isinstance(reply, list), "prioritize answers a bare JSON array"
    assert [h["Host"] for h in reply] == names, "one entry per input host, in input order"
    for entry in reply:
        assert set(entry) == {"Host", "Score"}
        assert type(entry["Score"]) is int and 0 <= entry["Score"] <= 10, entry
        if entry["Host"] not in world.nodes:
            assert entry["Score"] == 0
    # the raw text must carry JSON integers (Go rejects 5.0 / 5e0 for int64)
    json.loads(resp.get_data(as_text=True), parse_float=lambda s: pytest.fail(f"float in reply: {s}"))


# ---- garbage never produces a 500 ---------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)
TOP_KEYS = ["Pod", "Nodes", "NodeNames", "NodeNameToVictims", "NodeNameToMetaVictims", "PodName", "PodNamespace",
            "PodUID", "Node", "items", "Pods", "UID", "NumPDBViolations"]
envelopes = st.dictionaries(st.one_of(st.sampled_from(TOP_KEYS).flatmap(random_case), st.text(max_size=8)),
                            json_values, max_size=6)
garbage_bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    envelopes.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"", b"null", b"{}", b"[]", b'{"Pod": {}}', b'{"Pod": null, "NodeNames": null}',
                     b"\xef\xbb\xbf{}", b'{"Pod": 1e999}', b"[" * 3000, b'{"a":' * 2000]),
)


def assert_never_500(resp: Any) -> None:
    assert resp.status_code in (200, 400), (resp.status_code, resp.get_data(as_text=True)[:300])
    assert resp.mimetype == "application/json"
    payload = resp.get_json()
    if resp.status_code == 400:
        assert isinstance(payload, dict) and payload.get("error") and payload.get("message"), payload


@pytest.fixture(scope="module")
def small_world_client() -> Any:
    world = World({"node-0": 4, "node-1": None}, {"node-0": 1, "node-1": 0},
                  {"node-0": make_node("node-0").alloc(gpu=4).obj(), "node-1": make_node("node-1").obj()},
                  [make_pod("run").uid("uid-run").req(gpu=1).priority(5).node("node-0").obj()])
    return world.client()


@SETTINGS
@given(verb=st.sampled_from(VERBS), body=garbage_bodies)
def test_garbage_bodies_never_500(small_world_client: Any, verb: str, body: bytes) -> None:
    assert_never_500(post(small_world_client, verb, body))


# Pods that pass the envelope check (an object with metadata.name) but are broken inside.
pod_like = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.sampled_from(["p", "q"]), "uid": st.sampled_from(["u-p", "u-q"])},
                                       optional={"namespace": json_values})},
    optional={"spec": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "containers": st.one_of(json_values, st.lists(st.one_of(json_values, st.fixed_dictionaries(
            {"resources": st.one_of(json_values, st.fixed_dictionaries({}, optional={
                "requests": st.one_of(json_values, st.dictionaries(st.sampled_from([GPU, "cpu"]), json_values)),
                "limits": st.one_of(json_values, st.dictionaries(st.sampled_from([GPU, "cpu"]), json_values))}))})),
            max_size=2)),
        "initContainers": json_values, "overhead": json_values, "priority": json_values,
        "preemptionPolicy": json_values, "schedulerName": json_values})),
        "status": json_values})


@SETTINGS
@given(verb=st.sampled_from(["filter", "prioritize"]), pod=pod_like,
       names=st.lists(st.sampled_from(["node-0", "node-1", "ghost"]), unique=True))
def test_broken_pods_never_500(small_world_client: Any, verb: str, pod: dict[str, Any], names: list[str]) -> None:
    assert_never_500(post(small_world_client, verb, {"Pod": pod, "Nodes": None, "NodeNames": names}))


@SETTINGS
@given(pod=pod_like, names=st.lists(st.sampled_from(["node-0", "node-1", "ghost"]), unique=True))
def test_broken_preemptor_never_500(small_world_client: Any, pod: dict[str, Any], names: list[str]) -> None:
    body = {"Pod": pod, "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {n: {"Pods": [{"UID": "uid-run"}], "NumPDBViolations": 0} for n in names}}
    assert_never_500(post(small_world_client, "preempt", body))


GOOD_PREEMPTOR = make_pod("hi").uid("uid-hi").req(gpu=4).priority(1000).obj()


@SETTINGS
@given(victim=pod_like, node=st.sampled_from(["node-0", "node-1", "ghost"]))
@example(victim={"metadata": {"name": "v", "uid": "u-v"}, "spec": {"containers": "abc"}}, node="node-0")
@example(victim={"metadata": {"name": "v", "uid": "u-v"}, "spec": {"containers": [{"resources": {"requests": ["x"]}}]}},
         node="node-0")
def test_broken_victims_never_500(small_world_client: Any, victim: dict[str, Any], node: str) -> None:
    body = {"Pod": GOOD_PREEMPTOR, "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {node: {"Pods": [victim], "NumPDBViolations": 0}}}
    assert_never_500(post(small_world_client, "preempt", body))
