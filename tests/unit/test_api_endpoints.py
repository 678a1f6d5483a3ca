"""The HTTP API end to end through Flask's test client: the four verbs over a small in-memory
cluster, error statuses, health/metrics/debug endpoints, internal failures and configured paths.

Cluster used by most tests (example.com/gpu is the managed resource)::

    free      4 GPUs, empty
    half      2 GPUs, low-half (priority 1, 1 GPU)
    full      2 GPUs, low-full (priority 1, 1 GPU) + high-full (priority 100, 1 GPU)
    zero      advertises 0 GPUs
    cpu-only  does not offer example.com/gpu
    pending:  p1 (1 GPU), p2 (2 GPUs), p3 (3 GPUs), all priority 50
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest
from builders import GPU, make_node, make_pod
from gunicorn.http.errors import ChunkMissingTerminator, InvalidChunkSize
from prometheus_client.parser import text_string_to_metric_families

from extender.runtime.engine import EngineError, InvalidRequest

PAYLOADS = Path(__file__).resolve().parents[1] / "payloads"
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
VERBS = ["filter", "prioritize", "preempt", "bind"]
ALL = ["free", "half", "full", "zero", "cpu-only"]

INSUFFICIENT = "Insufficient example.com/gpu"
TOO_LITTLE = "node(s) had too little allocatable example.com/gpu"
NOT_OFFERED = "node(s) didn't offer example.com/gpu"
NOT_IN_CACHE = "node not in extender cache"


def nodes() -> list[dict[str, Any]]:
    return [make_node("free").alloc(gpu=4).obj(), make_node("half").alloc(gpu=2).obj(),
            make_node("full").alloc(gpu=2).obj(), make_node("zero").alloc(gpu=0).obj(), make_node("cpu-only").obj()]


RUNNING = {
    "uid-low-half": make_pod("low-half").uid("uid-low-half").req(gpu=1).priority(1).node("half").obj(),
    "uid-low-full": make_pod("low-full").uid("uid-low-full").req(gpu=1).priority(1).node("full").obj(),
    "uid-high-full": make_pod("high-full").uid("uid-high-full").req(gpu=1).priority(100).node("full").obj(),
}
P1 = make_pod("p1").uid("uid-p1").req(gpu=1).priority(50).obj()
P2 = make_pod("p2").uid("uid-p2").req(gpu=2).priority(50).obj()
P3 = make_pod("p3").uid("uid-p3").req(gpu=3).priority(50).obj()


def pods() -> list[dict[str, Any]]:
    return [*RUNNING.values(), P1, P2, P3]


@pytest.fixture
def env(make_app: Callable[..., Any]) -> Any:
    app, cluster = make_app(nodes(), pods())
    return Env(app, cluster)


class Env:
    def __init__(self, app: Any, cluster: Any) -> None:
        self.app = app
        self.cluster = cluster
        self.client = app.test_client()

    def post(self, path: str, body: Any, prefix: str | None = "/scheduler") -> Any:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        # buffered: the body is read and the response closed, as a WSGI server does (a verb's
        # request is recorded when its response closes)
        return self.client.post(f"{prefix}/{path}" if prefix is not None else path, data=data,
                                content_type="application/json", buffered=True)

    def verb(self, verb: str, body: Any) -> Any:
        resp = self.post(verb, body)
        assert resp.status_code == 200, resp.get_data(as_text=True)
        assert resp.mimetype == "application/json"
        return resp.get_json()

    def filter(self, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
        reply = self.verb("filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        assert set(reply) == FILTER_KEYS
        return reply

    def bind(self, pod: dict[str, Any], node: str, uid: str | None = None) -> str:
        meta = pod["metadata"]
        reply = self.verb("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                   "PodUID": uid or meta["uid"], "Node": node})
        assert set(reply) == {"Error"} and isinstance(reply["Error"], str)
        return reply["Error"]

    def snapshot_node(self, name: str) -> dict[str, Any]:
        snap = self.client.get(f"/debug/snapshot?node={name}").get_json()
        assert len(snap["nodes"]) == 1, snap
        return dict(snap["nodes"][0])

    def metric(self, name: str, **labels: str) -> float:
        text = self.client.get("/metrics").get_data(as_text=True)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    @property
    def engine(self) -> Any:
        return self.app.extensions["kube_extender"].engine


# ---- filter -------------------------------------------------------------------------------------

@pytest.mark.parametrize("pod, feasible, failed, unresolvable", [
    pytest.param(P1, ["free", "half"], {"full": INSUFFICIENT},
                 {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED}, id="1-gpu"),
    pytest.param(P2, ["free"], {"half": INSUFFICIENT, "full": INSUFFICIENT},
                 {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED}, id="2-gpus"),
    pytest.param(P3, ["free"], {}, {"half": TOO_LITTLE, "full": TOO_LITTLE, "zero": TOO_LITTLE,
                                     "cpu-only": NOT_OFFERED}, id="3-gpus-exceeds-small-nodes"),
    pytest.param(make_pod("big").req(gpu=5).obj(), [], {},
                 {"free": TOO_LITTLE, "half": TOO_LITTLE, "full": TOO_LITTLE, "zero": TOO_LITTLE,
                  "cpu-only": NOT_OFFERED}, id="5-gpus-fits-nowhere"),
    pytest.param(make_pod("cpu").req(cpu="2").obj(), ALL, {}, {}, id="no-gpu-request"),
    pytest.param(make_pod("zero-gpu").req(gpu=0).obj(), ALL, {}, {}, id="gpu-0-request"),
    pytest.param(make_pod("lim").limits_only(gpu=2).obj(), ["free"], {"half": INSUFFICIENT, "full": INSUFFICIENT},
                 {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED}, id="limits-only-2-gpus"),
    pytest.param(make_pod("milli").req(gpu="1500m").obj(), ["free"], {"half": INSUFFICIENT, "full": INSUFFICIENT},
                 {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED}, id="fractional-1500m"),
    pytest.param(make_pod("init").req(gpu=1).init_container("setup", gpu=3).obj(), ["free"], {},
                 {"half": TOO_LITTLE, "full": TOO_LITTLE, "zero": TOO_LITTLE, "cpu-only": NOT_OFFERED},
                 id="init-container-peak-3"),
    pytest.param(make_pod("side").req(gpu=1).init_container("proxy", sidecar=True, gpu=1).obj(), ["free"],
                 {"half": INSUFFICIENT, "full": INSUFFICIENT}, {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED},
                 id="sidecar-adds-up-to-2"),
])
def test_filter_names_mode(env: Env, pod: dict[str, Any], feasible: list[str], failed: dict[str, str],
                           unresolvable: dict[str, str]) -> None:
    reply = env.filter(pod, [*ALL, "ghost"])
    assert reply["Error"] == ""
    assert reply["Nodes"] is None
    assert reply["NodeNames"] == feasible
    assert reply["FailedNodes"] == {**failed, "ghost": NOT_IN_CACHE}
    assert reply["FailedAndUnresolvableNodes"] == unresolvable


def test_filter_full_nodes_mode_echoes_exact_node_objects(env: Env) -> None:
    items = nodes() + [make_node("ghost").alloc(gpu=8).obj()]
    for item in items:  # what kube-scheduler really sends is richer than what the extender reads
        item["status"]["images"] = [{"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 321520}]
        item["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
        item["metadata"]["resourceVersion"] = "884100"
    body = {"Pod": P1, "Nodes": {"metadata": {"resourceVersion": "42"}, "items": items}, "NodeNames": None}
    reply = env.verb("filter", body)
    assert set(reply) == FILTER_KEYS
    assert reply["NodeNames"] is None
    assert reply["Nodes"] == {"metadata": {"resourceVersion": "42"}, "items": [items[0], items[1]]}
    assert reply["FailedNodes"] == {"full": INSUFFICIENT, "ghost": NOT_IN_CACHE}
    assert reply["FailedAndUnresolvableNodes"] == {"zero": TOO_LITTLE, "cpu-only": NOT_OFFERED}
    assert reply["Error"] == ""


@pytest.mark.parametrize("depth, status", [(240, 200), (300, 400)])
def test_filter_full_nodes_mode_echoes_only_what_it_can_encode(env: Env, depth: int, status: int) -> None:
    """Node objects are echoed back; one nested deeper than the encoder writes (orjson reads
    1,024 levels, writes 255) is a 400 naming it, not a 500 from the encoder."""
    deep: Any = "bottom"
    for _ in range(depth):
        deep = {"a": deep}
    items = [make_node("free").alloc(gpu=4).obj(), {**make_node("half").alloc(gpu=2).obj(), "spec": deep}]
    resp = env.post("filter", {"Pod": P1, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    assert resp.status_code == status, resp.get_data(as_text=True)[:300]
    if status == 200:
        assert resp.get_json()["Nodes"]["items"] == items
    else:
        assert resp.get_json()["message"].startswith("Nodes.items[1]: nested too deeply to be echoed back")
    assert env.metric("kube_extender_internal_errors_total") == 0


@pytest.mark.parametrize("body", [
    pytest.param({"pod": P1, "nodenames": ["free", "full"]}, id="lowercase"),
    pytest.param({"POD": P1, "NODENAMES": ["free", "full"], "NODES": None}, id="uppercase"),
    pytest.param({"Pod": P1, "nodeNames": ["free", "full"], "Extra": {"x": 1}}, id="camel-with-unknown-key"),
])
def test_filter_accepts_any_key_case(env: Env, body: dict[str, Any]) -> None:
    reply = env.verb("filter", body)
    assert reply["NodeNames"] == ["free"]
    assert reply["FailedNodes"] == {"full": INSUFFICIENT}


# ---- prioritize ---------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy, want", [
    # MostAllocated (binpack): free 1/4 used -> 25 -> 3 (2.5 rounds half up); half 2/2 -> 100 -> 10
    pytest.param(None, {"free": 3, "half": 10, "cpu-only": 0, "ghost": 0}, id="MostAllocated-default"),
    # LeastAllocated (spread): free 3/4 left -> 75 -> 8 (7.5 rounds half up); half 0 left -> 0
    pytest.param("LeastAllocated", {"free": 8, "half": 0, "cpu-only": 0, "ghost": 0}, id="LeastAllocated"),
])
def test_prioritize(make_app: Callable[..., Any], strategy: str | None, want: dict[str, int]) -> None:
    overrides: dict[str, Any] = {}
    if strategy:
        overrides["profiles"] = [{"schedulerName": "default-scheduler", "pluginConfig": [
            {"name": "NodeResources", "args": {"scoringStrategy": {"type": strategy}}}]}]
    app, cluster = make_app(nodes(), pods(), **overrides)
    env = Env(app, cluster)
    names = ["free", "half", "cpu-only", "ghost"]
    reply = env.verb("prioritize", {"Pod": P1, "Nodes": None, "NodeNames": names})
    assert reply == [{"Host": n, "Score": want[n]} for n in names]
    assert all(type(h["Score"]) is int for h in reply)


def test_prioritize_full_nodes_mode_returns_one_entry_per_item(env: Env) -> None:
    items = nodes()
    reply = env.verb("prioritize", {"Pod": P2, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    assert [h["Host"] for h in reply] == ALL
    assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in reply)


# ---- bind -----------------------------------------------------------------------------------------

def test_bind_then_filter_sees_the_capacity_taken(env: Env) -> None:
    assert env.filter(P2, ["free"])["NodeNames"] == ["free"]
    assert env.bind(P3, "free") == ""
    assert env.cluster.get_pod("default", "p3")["spec"]["nodeName"] == "free"
    reply = env.filter(P2, ["free", "half"])
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == {"free": INSUFFICIENT, "half": INSUFFICIENT}
    assert env.filter(P1, ["free"])["NodeNames"] == ["free"]  # one GPU is still free
    snap = env.snapshot_node("free")
    assert snap["allocated"] == {GPU: "3"} and snap["free"] == {GPU: "1"}
    assert [p["pod"] for p in snap["pods"]] == ["default/p3"]


def test_bind_is_idempotent(env: Env) -> None:
    assert env.bind(P3, "free") == ""
    assert env.bind(P3, "free") == ""
    assert env.bind(P3, "free") == ""
    snap = env.snapshot_node("free")
    assert snap["allocated"] == {GPU: "3"}, "a repeated bind must not count the pod twice"
    assert len(snap["pods"]) == 1


@pytest.mark.parametrize("first, pod, node, uid, why", [
    pytest.param(None, P3, "free", "uid-stale", "stale UID (pod deleted and re-created)", id="stale-uid"),
    pytest.param(None, make_pod("nobody").uid("uid-nobody").obj(), "free", None, "unknown pod", id="unknown-pod"),
    pytest.param(None, P3, "ghost", None, "node not in the cache", id="unknown-node"),
    pytest.param(None, P3, "half", None, "node too small", id="does-not-fit"),
    pytest.param((P3, "free"), P2, "free", None, "capacity taken by an earlier bind", id="no-longer-fits"),
    pytest.param((P3, "free"), P3, "half", None, "already bound to another node", id="bound-elsewhere"),
])
def test_bind_failures_are_reported_in_error(env: Env, first: tuple[dict[str, Any], str] | None,
                                              pod: dict[str, Any], node: str, uid: str | None, why: str) -> None:
    if first is not None:
        assert env.bind(*first) == ""
    before = env.client.get("/debug/snapshot").get_json()["nodes"]
    error = env.bind(pod, node, uid)
    assert error, f"bind must fail: {why}"
    assert env.client.get("/debug/snapshot").get_json()["nodes"] == before, "a failed bind must not hold capacity"
    stored = env.cluster.get_pod("default", pod["metadata"]["name"])
    if stored is not None and first is None:
        assert not stored["spec"].get("nodeName"), "a failed bind must not bind the pod"


def test_bind_of_a_pod_already_bound_there_is_success(env: Env) -> None:
    low = RUNNING["uid-low-half"]
    assert env.bind(low, "half") == ""
    assert env.bind(low, "free")
    assert env.snapshot_node("half")["allocated"] == {GPU: "1"}


def test_bind_of_a_pod_seen_in_filter_but_gone_from_the_cluster_fails(env: Env) -> None:
    ghost = make_pod("ghost-pod").uid("uid-ghost-pod").req(gpu=1).obj()
    assert env.filter(ghost, ["free"])["NodeNames"] == ["free"]
    before = env.snapshot_node("free")
    assert env.bind(ghost, "free")
    assert env.snapshot_node("free") == before


@pytest.mark.parametrize("old_resource_version", [
    pytest.param("old-rv", id="old-incarnation-with-resourceVersion"),
    pytest.param(None,
        id="old-incarnation-without-resourceVersion"),
])
def test_bind_of_a_previous_incarnation_leaves_the_new_pod_alone(make_app: Callable[..., Any],
                                                                 old_resource_version: str | None) -> None:
    new = make_pod("p").uid("uid-new").req(gpu=2).obj()
    old = make_pod("p").uid("uid-old").req(gpu=2).obj()
    if old_resource_version:
        old["metadata"]["resourceVersion"] = old_resource_version
    app, cluster = make_app([make_node("n").alloc(gpu=2).obj()], [new])
    env = Env(app, cluster)
    assert env.filter(old, ["n"])["NodeNames"] == ["n"]  # kube-scheduler saw the old pod...
    before = env.client.get("/debug/snapshot").get_json()["nodes"]
    assert env.bind(old, "n"), "...but binding the old UID must fail"
    assert env.client.get("/debug/snapshot").get_json()["nodes"] == before, "no capacity may stay held"
    stored = cluster.get_pod("default", "p")
    assert not stored["spec"].get("nodeName")
    assert not any(k.endswith("/allocation") for k in stored["metadata"].get("annotations") or {}), stored
    assert env.filter(new, ["n"])["NodeNames"] == ["n"], "the new pod still fits"


def test_bind_stale_uid_does_not_bind_the_new_pod(env: Env) -> None:
    env.filter(P1, ["free"])  # the extender has seen the current p1
    assert env.bind(P1, "free", uid="uid-p1-previous-incarnation")
    assert not env.cluster.get_pod("default", "p1")["spec"].get("nodeName")
    assert env.bind(P1, "free") == ""


# ---- preempt --------------------------------------------------------------------------------------

PREEMPT_CASES = [
    # (preemptor, {node: [victim uids]}, pdb, expected {node: [victim uids]})
    pytest.param(make_pod("pre").req(gpu=1).priority(50).obj(), {"full": ["uid-low-full"]}, 0,
                 {"full": ["uid-low-full"]}, id="keeps-node-where-lower-priority-victims-free-enough"),
    pytest.param(make_pod("pre").req(gpu=2).priority(50).obj(), {"full": ["uid-low-full"]}, 0, {},
                 id="drops-node-where-victims-free-too-little"),
    pytest.param(make_pod("pre").req(gpu=1).priority(50).obj(), {"full": ["uid-low-full", "uid-high-full"]}, 0,
                 {"full": ["uid-low-full"]}, id="removes-higher-priority-victim-keeps-node"),
    pytest.param(make_pod("pre").req(gpu=2).priority(50).obj(), {"full": ["uid-low-full", "uid-high-full"]}, 0, {},
                 id="removes-higher-priority-victim-then-too-little"),
    pytest.param(make_pod("pre").req(gpu=1).priority(1).obj(), {"half": ["uid-low-half"]}, 0, {},
                 id="equal-priority-victim-removed-none-left"),
    pytest.param(make_pod("pre").req(gpu=1).priority(0).obj(), {"full": ["uid-high-full"]}, 0, {},
                 id="higher-priority-victim-removed-none-left"),
    pytest.param(make_pod("pre").req(gpu=2).priority(200).obj(), {"full": ["uid-low-full", "uid-high-full"]}, 0,
                 {"full": ["uid-low-full", "uid-high-full"]}, id="keeps-all-victims-in-order"),
    pytest.param(make_pod("pre").req(gpu=2).priority(200).never_preempt().obj(),
                 {"full": ["uid-low-full", "uid-high-full"]}, 0, {}, id="preemptionPolicy-Never"),
    pytest.param(make_pod("pre").req(gpu=1).priority(50).obj(), {"ghost": ["uid-low-full"], "full": ["uid-low-full"]},
                 0, {"full": ["uid-low-full"]}, id="unknown-node-dropped"),
    pytest.param(make_pod("pre").req(gpu=1).priority(50).obj(), {"full": ["uid-low-full"]}, 3,
                 {"full": ["uid-low-full"]}, id="NumPDBViolations-passed-through"),
    pytest.param(make_pod("pre").req(gpu=3).priority(200).obj(), {"full": ["uid-low-full", "uid-high-full"]}, 0, {},
                 id="exceeds-allocatable-dropped"),
    pytest.param(make_pod("pre").req(gpu=2).priority(50).obj(),
                 {"half": ["uid-low-half"], "full": ["uid-low-full"]}, 0, {"half": ["uid-low-half"]},
                 id="two-candidates-one-kept"),
    pytest.param(make_pod("pre").req(gpu=2).priority(200).obj(), {"full": ["uid-high-full", "uid-low-full"]}, 1,
                 {"full": ["uid-high-full", "uid-low-full"]}, id="victim-order-kept-as-received"),
    pytest.param(make_pod("pre").req(cpu="4").priority(50).obj(), {"full": ["uid-low-full"]}, 0,
                 {"full": ["uid-low-full"]}, id="no-gpu-preemptor-candidates-pass-through"),
    pytest.param(make_pod("pre").req(gpu=1).priority(50).obj(), {"full": []}, 0, {}, id="zero-victims-dropped"),
]


@pytest.mark.parametrize("mode", ["meta", "full"])
@pytest.mark.parametrize("preemptor, candidates, pdb, want", PREEMPT_CASES)
def test_preempt(env: Env, mode: str, preemptor: dict[str, Any], candidates: dict[str, list[str]], pdb: int,
                 want: dict[str, list[str]]) -> None:
    if mode == "meta":  # nodeCacheCapable: true
        body = {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb} for node, uids in candidates.items()}}
    else:  # nodeCacheCapable: false: full victim pods
        body = {"Pod": preemptor, "NodeNameToMetaVictims": None, "NodeNameToVictims": {
            node: {"Pods": [RUNNING[u] for u in uids], "NumPDBViolations": pdb} for node, uids in candidates.items()}}
    reply = env.verb("preempt", body)
    assert reply == {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb} for node, uids in want.items()}}
    for mv in reply["NodeNameToMetaVictims"].values():
        assert type(mv["NumPDBViolations"]) is int


def test_preempt_never_evicts_anything_itself(env: Env) -> None:
    before = {p["metadata"]["uid"] for p in env.cluster.pods()}
    env.verb("preempt", {"Pod": make_pod("pre").req(gpu=2).priority(200).obj(),
                         "NodeNameToMetaVictims": {"full": {"Pods": [{"UID": "uid-low-full"}], "NumPDBViolations": 0}}})
    assert {p["metadata"]["uid"] for p in env.cluster.pods()} == before


# ---- bad input and unknown paths ------------------------------------------------------------------

GARBAGE = [
    pytest.param(b"", id="empty"),
    pytest.param(b"not json", id="not-json"),
    pytest.param(b'{"Pod": {', id="truncated"),
    pytest.param(b"[]", id="array"),
    pytest.param(b"null", id="null"),
    pytest.param(b'"filter"', id="string"),
    pytest.param(b"{}", id="empty-object"),
    pytest.param(b'{"Pod": 1, "PodName": 2}', id="wrong-types"),
    pytest.param(b"\x00\xff\xfe", id="binary"),
    pytest.param(b"[" * 5000, id="deep-nesting"),
]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("raw", GARBAGE)
def test_garbage_is_400_json(env: Env, verb: str, raw: bytes) -> None:
    resp = env.post(verb, raw)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.mimetype == "application/json"
    payload = resp.get_json()
    assert payload["error"] == "bad request" and payload["message"]


@pytest.mark.parametrize("body", [
    pytest.param({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [
        {"resources": {"requests": {GPU: "lots"}}}]}}, "NodeNames": ["free"]}, id="bad-quantity"),
    pytest.param({"Pod": {"metadata": {"name": "p"}, "spec": {"priority": "high"}}, "NodeNames": ["free"]},
                 id="priority-string"),
    pytest.param({"Pod": {"metadata": {"name": "p"}, "spec": []}, "NodeNames": ["free"]}, id="spec-array"),
    pytest.param({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": 5}}, "NodeNames": ["free"]},
                 id="containers-number"),
])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_malformed_pod_is_400(env: Env, verb: str, body: dict[str, Any]) -> None:
    resp = env.post(verb, body)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.get_json()["message"].startswith("Pod")


@pytest.mark.parametrize("resource, quantity, problem", [
    pytest.param(GPU, "-1", "'-1' is negative", id="negative-gpu"),
    pytest.param(GPU, -4, "-4 is negative", id="negative-gpu-number"),
    pytest.param(GPU, "\uff11", "is not a Kubernetes quantity", id="fullwidth-digit-gpu"),
    pytest.param("cpu", "-2", "'-2' is negative", id="negative-cpu"),
    pytest.param("memory", "lots", "'lots' is not a Kubernetes quantity", id="malformed-memory"),
])
@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
def test_a_bad_quantity_in_the_pod_is_400_never_fits(env: Env, verb: str, resource: str, quantity: Any,
                                                     problem: str) -> None:
    """A pod asking for less than nothing (or for garbage) would fit anywhere, and squeeze the
    pods the extender accounts: the API server refuses such a pod, and so does the extender."""
    pod = make_pod("neg").uid("uid-neg").req(gpu=1).priority(50).obj()
    pod["spec"]["containers"][0]["resources"]["requests"][resource] = quantity
    body = ({"Pod": pod, "NodeNameToMetaVictims": {"full": {"Pods": [{"UID": "uid-low-full"}]}}} if verb == "preempt"
            else {"Pod": pod, "NodeNames": ALL})
    resp = env.post(verb, body)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    message = resp.get_json()["message"]
    assert message.startswith(f"Pod: spec.containers[0].resources.requests[{resource}]: ") and problem in message


@pytest.mark.parametrize("method, path", [
    pytest.param("POST", "/scheduler/nope", id="unknown-verb"),
    pytest.param("GET", "/scheduler/nope", id="unknown-verb-get"),
    pytest.param("POST", "/scheduler/filter/extra", id="verb-subpath"),
    pytest.param("POST", "/scheduler", id="prefix-only"),
    pytest.param("POST", "/filter", id="verb-without-prefix"),
    pytest.param("GET", "/nope", id="unknown-path"),
    pytest.param("GET", "/debug/nope", id="unknown-debug-path"),
    pytest.param("POST", "/scheduler//filter", id="doubled-slash-verb"),
    pytest.param("GET", "/debug//config", id="doubled-slash-debug"),
])
def test_unknown_paths_are_404_json(env: Env, method: str, path: str) -> None:
    resp = env.client.open(path, method=method, data=b"{}", content_type="application/json")
    assert resp.status_code == 404
    assert resp.mimetype == "application/json"
    payload = resp.get_json()
    assert payload["error"] == "not found" and path in payload["message"]


def test_no_file_of_the_working_directory_is_served(make_app: Callable[..., Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Flask serves ``./static/`` at /static unless told not to: the server started in a
    directory holding one must not hand its files out."""
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "secret.txt").write_text("password")
    monkeypatch.chdir(tmp_path)
    app, _ = make_app(nodes(), pods())
    resp = app.test_client().get("/static/secret.txt")
    assert resp.status_code == 404 and resp.mimetype == "application/json"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("verb", VERBS)
def test_wrong_method_on_a_verb_is_405_json(env: Env, verb: str, method: str) -> None:
    resp = env.client.open(f"/scheduler/{verb}", method=method)
    assert resp.status_code == 405
    assert resp.mimetype == "application/json"
    assert resp.get_json()["error"] == "method not allowed"


@pytest.mark.parametrize("verb, body", [
    pytest.param("filter", {"Pod": P1, "NodeNames": ["free"]}, id="filter"),
    pytest.param("prioritize", {"Pod": P1, "NodeNames": ["free"]}, id="prioritize"),
    pytest.param("preempt", {"Pod": P1, "NodeNameToMetaVictims": {}}, id="preempt"),
    pytest.param("bind", {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-p1", "Node": "free"}, id="bind"),
])
def test_body_over_max_request_bytes_is_413_json(make_app: Callable[..., Any], verb: str, body: dict[str, Any]) -> None:
    app, cluster = make_app(nodes(), pods(), server={"maxRequestBytes": 1024})
    env = Env(app, cluster)
    small = json.dumps(body).encode()
    assert len(small) < 1024
    assert env.post(verb, small).status_code == 200
    exact = json.dumps({**body, "Padding": ""}).encode()
    exact = json.dumps({**body, "Padding": "x" * (1024 - len(exact))}).encode()
    assert len(exact) == 1024
    assert env.post(verb, exact).status_code == 200, "exactly maxRequestBytes is allowed"
    resp = env.post(verb, exact[:-1] + b" }")
    assert resp.status_code == 413, "one byte over is not"
    big = json.dumps({**body, "Padding": "x" * 1100}).encode()
    resp = env.post(verb, big)
    assert resp.status_code == 413
    assert resp.mimetype == "application/json"
    payload = resp.get_json()
    assert payload["error"] == "request entity too large" and "1024" in payload["message"]
    assert env.post(verb, small).status_code == 200, "still serving after an oversized body"


def _streamed(env: Env, body: bytes) -> Any:
    """A request without Content-Length (Transfer-Encoding: chunked), as a WSGI server that
    terminates the input stream (gunicorn) hands it over."""
    return env.client.post("/scheduler/filter", input_stream=io.BytesIO(body),
                           headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                           environ_overrides={"wsgi.input_terminated": True})


def test_streamed_body_within_max_request_bytes(make_app: Callable[..., Any]) -> None:
    app, cluster = make_app(nodes(), pods(), server={"maxRequestBytes": 1024})
    resp = _streamed(Env(app, cluster), json.dumps({"Pod": P1, "NodeNames": ["free"]}).encode())
    assert resp.status_code == 200 and resp.get_json()["NodeNames"] == ["free"]


def test_streamed_body_over_max_request_bytes_is_413(make_app: Callable[..., Any]) -> None:
    app, cluster = make_app(nodes(), pods(), server={"maxRequestBytes": 1024})
    resp = _streamed(Env(app, cluster), json.dumps({"Pod": P1, "NodeNames": ["free"], "Padding": "x" * 2000}).encode())
    assert resp.status_code == 413, resp.get_data(as_text=True)


class _BrokenChunks:
    """gunicorn's input stream of a chunked body whose framing breaks after ``good`` bytes."""

    def __init__(self, good: bytes, error: Exception) -> None:
        self.good, self.error = good, error

    def read(self, size: int = -1) -> bytes:
        if self.good:
            out, self.good = self.good, b""
            return out
        raise self.error


@pytest.mark.parametrize("error", [InvalidChunkSize(b"zz"), ChunkMissingTerminator(b"XX")],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("verb", VERBS)
def test_a_body_whose_chunked_framing_breaks_is_400_not_500(env: Env, verb: str, error: Exception) -> None:
    resp = env.client.post(f"/scheduler/{verb}",
                           headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                           environ_overrides={"wsgi.input": _BrokenChunks(b'{"Pod":', error),
                                              "wsgi.input_terminated": True})
    assert resp.status_code == 400, resp.get_data(as_text=True)
    payload = resp.get_json()
    assert payload["error"] == "bad request" and payload["message"].startswith("request body could not be read: ")
    assert env.metric("kube_extender_internal_errors_total") == 0


@pytest.mark.parametrize("verb", VERBS)
def test_a_body_shorter_than_its_content_length_is_400(env: Env, verb: str) -> None:
    """gunicorn hands over what arrived before the client stopped sending; a complete-looking
    JSON document that is not the whole announced body is still not the request."""
    body = json.dumps({"Pod": P1, "NodeNames": ["free"]}).encode()
    resp = env.client.post(f"/scheduler/{verb}", headers={"Content-Type": "application/json"},
                           environ_overrides={"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True,
                                              "CONTENT_LENGTH": str(len(body) + 10)})
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.get_json()["message"] == f"request body ended after {len(body)} of the {len(body) + 10} bytes " \
                                         "its Content-Length announced"


@pytest.mark.parametrize("path, body", [
    pytest.param("/healthz", None, id="healthz"),
    pytest.param("/debug/config", None, id="debug-config"),
    pytest.param("/scheduler/filter", {"Pod": P1, "NodeNames": ["free", "ghost"]}, id="filter"),
    pytest.param("/scheduler/prioritize", {"Pod": P1, "NodeNames": ["free", "half"]}, id="prioritize"),
    pytest.param("/scheduler/filter", {"Pod": P1}, id="bad-request"),
    pytest.param("/scheduler/nope", {}, id="not-found"),
])
def test_pretty_query_indents(env: Env, path: str, body: Any) -> None:
    def fetch(query: str) -> Any:
        if body is None:
            return env.client.get(path + query)
        return env.client.post(path + query, data=json.dumps(body), content_type="application/json")

    compact, pretty = fetch(""), fetch("?pretty")
    assert compact.status_code == pretty.status_code
    assert "\n" not in compact.get_data(as_text=True).strip()
    text = pretty.get_data(as_text=True)
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False)  # throughout (the filter's
    assert json.loads(text) == compact.get_json()                                # node maps were compact)


# ---- health, metrics, debug --------------------------------------------------------------------------

def test_healthz_and_readyz(env: Env) -> None:
    resp = env.client.get("/healthz")
    assert resp.status_code == 200 and resp.get_json() == {"status": "ok"}
    resp = env.client.get("/readyz")
    assert resp.status_code == 200 and resp.get_json()["ready"] is True


def test_metrics(env: Env) -> None:
    env.filter(P1, ALL)
    env.verb("prioritize", {"Pod": P1, "NodeNames": ["free", "half"]})
    assert env.bind(P1, "free") == ""
    resp = env.client.get("/metrics")
    assert resp.status_code == 200 and resp.mimetype == "text/plain"
    text = resp.get_data(as_text=True)
    for name in ("kube_extender_requests_total", "kube_extender_request_duration_seconds",
                 "kube_extender_cache_size_nodes", "kube_extender_cache_size_pods",
                 "kube_extender_cache_size_assumed_pods", "kube_extender_plugin_duration_seconds"):
        assert name in text, name
    assert env.metric("kube_extender_requests_total", verb="filter") == 1
    assert env.metric("kube_extender_requests_total", verb="prioritize", outcome="ok") == 1
    assert env.metric("kube_extender_requests_total", verb="bind", outcome="bound") == 1
    assert env.metric("kube_extender_request_duration_seconds_count", verb="filter") == 1
    assert env.metric("kube_extender_plugin_duration_seconds_count", plugin="NodeResources",
                      extension_point="Filter") >= 1
    assert env.metric("kube_extender_cache_size_nodes") == 5
    assert env.metric("kube_extender_cache_size_pods") == 4  # three running + p1 just bound
    assert env.metric("kube_extender_cache_size_assumed_pods") == 0


def test_bad_requests_are_counted(env: Env) -> None:
    env.post("filter", b"nope")
    env.post("filter", b"{}")
    assert env.metric("kube_extender_requests_total", verb="filter", outcome="bad_request") == 2


def test_debug_snapshot(env: Env) -> None:
    assert env.bind(P3, "free") == ""
    snap = env.client.get("/debug/snapshot").get_json()
    assert snap["nodeCount"] == 5
    assert snap["managedResources"] == [GPU]
    by_name = {n["name"]: n for n in snap["nodes"]}
    assert by_name["free"]["allocatable"] == {GPU: "4"}
    assert by_name["free"]["allocated"] == {GPU: "3"}
    assert by_name["full"]["free"] == {GPU: "0"}
    assert [p["pod"] for p in by_name["full"]["pods"]] == ["default/high-full", "default/low-full"]


@pytest.mark.parametrize("node", ["nope", "", "free "])
def test_debug_snapshot_of_an_unknown_node_is_404_naming_it(env: Env, node: str) -> None:
    resp = env.client.get("/debug/snapshot", query_string={"node": node})
    assert resp.status_code == 404 and resp.mimetype == "application/json"
    body = resp.get_json()
    assert body["error"] == "not found" and body["node"] == node and repr(node) in body["message"]


def test_debug_snapshot_of_a_node_without_managed_resources_is_shown_when_asked(env: Env) -> None:
    snap = env.client.get("/debug/snapshot?node=cpu-only").get_json()
    assert [(n["name"], n["allocatable"], n["pods"]) for n in snap["nodes"]] == [("cpu-only", {}, [])]
    assert "cpu-only" not in [n["name"] for n in env.client.get("/debug/snapshot").get_json()["nodes"]]


def test_debug_snapshot_shows_devices_per_device_and_per_node(make_app: Callable[..., Any]) -> None:
    """DeviceShare on a GPU Feature Discovery node: the device resources are not in the node's
    status, yet the snapshot shows their totals and use, and each device."""
    mem, compute, count = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
    node = make_node("gpu-1").obj()
    node["metadata"]["labels"].update({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "24576",
                                       "nvidia.com/gpu.product": "NVIDIA-L4"})
    held = make_pod("infer").uid("u-infer").req(**{mem: 8192, compute: 30}).node("gpu-1").obj()
    app, _ = make_app([node], [held], managedResources=[{"name": r} for r in (mem, compute, count)],
                      profiles=[{"schedulerName": "default-scheduler", "plugins": {
                          "multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]}}}])
    (view,) = app.test_client().get("/debug/snapshot").get_json()["nodes"]
    assert view["allocatable"] == {mem: "49152", compute: "200", count: "2"}
    assert view["allocated"] == {mem: "8192", compute: "30", count: "1"}
    assert view["free"] == {mem: "40960", compute: "170", count: "1"}
    (devices,) = view["devices"]
    assert (devices["plugin"], devices["source"]) == ("DeviceShare", "gpu-feature-discovery")
    assert devices["resources"] == sorted([mem, compute, count])
    assert [(d["id"], d["product"], d["memoryMiB"], d["compute"], d["pods"]) for d in devices["devices"]] == [
        (0, "NVIDIA-L4", {"used": 8192, "total": 24576}, {"used": 30, "total": 100}, ["default/infer"]),
        (1, "NVIDIA-L4", {"used": 0, "total": 24576}, {"used": 0, "total": 100}, [])]


def test_debug_pod_explains_the_last_filter(env: Env) -> None:
    env.filter(P1, [*ALL, "ghost"])
    resp = env.client.get("/debug/pods/default/p1")
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["pod"] == "default/p1" and body["state"] == "pending"
    verdict = body["verdicts"]["filter"]
    assert verdict["feasible"] == ["free", "half"]
    assert verdict["rejectedCount"] == 4
    rejected = verdict["rejected"]
    assert rejected["full"]["code"] == "UNSCHEDULABLE"
    assert rejected["full"]["plugin"] == "NodeResources"
    assert rejected["full"]["reasons"] == [INSUFFICIENT]
    assert rejected["zero"]["code"] == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    assert rejected["zero"]["plugin"] == "NodeResources"
    assert rejected["cpu-only"]["reasons"] == [NOT_OFFERED]
    assert rejected["ghost"] == {"code": "UNSCHEDULABLE", "plugin": "extender", "reasons": [NOT_IN_CACHE]}

    assert env.bind(P1, "free") == ""
    body = env.client.get("/debug/pods/default/p1").get_json()
    assert body["state"] == "bound" and body["node"] == "free"


@pytest.mark.parametrize("value, shown", [("1", 1), ("%C2%B2", 4), ("9" * 5000, 4), ("-1", 4)],
                         ids=["one", "a superscript two", "5,000 digits", "negative"])
def test_debug_pod_max_limits_the_nodes_named_and_anything_else_means_the_default(env: Env, value: str,
                                                                                   shown: int) -> None:
    env.filter(P1, [*ALL, "ghost"])
    resp = env.client.get(f"/debug/pods/default/p1?max={value}")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert len(resp.get_json()["verdicts"]["filter"]["rejected"]) == shown


@pytest.mark.parametrize("path", ["/debug/pods/default/nobody", "/debug/pods/elsewhere/p1"])
def test_debug_pod_unknown_is_404_json(env: Env, path: str) -> None:
    resp = env.client.get(path)
    assert resp.status_code == 404
    assert resp.mimetype == "application/json"
    assert resp.get_json()["error"] == "not found"


def test_debug_config(env: Env) -> None:
    cfg = env.client.get("/debug/config").get_json()
    assert cfg["managedResources"] == [{"name": GPU, "ignoredByScheduler": True}]
    assert {v: cfg["extender"][f"{v}Verb"] for v in VERBS} == {v: v for v in VERBS}
    assert cfg["extender"]["nodeCacheCapable"] is True
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler"]
    assert cfg["profiles"][0]["extensionPoints"]["filter"] == ["NodeResources"]


def _schema_keys(schema: Any, doc: Any, path: str = "") -> list[str]:
    """Keys the configuration schema defines that ``doc`` lacks (every section, every key)."""
    from marshmallow import fields
    missing = []
    for name, f in schema.fields.items():
        if name not in doc:
            missing.append(f"{path}{name}")
        elif isinstance(f, fields.Nested) and name != "plugins":  # plugins: only the points configured
            missing += _schema_keys(f.schema, doc[name], f"{path}{name}.")
    return missing


@pytest.mark.parametrize("overrides", [
    {},
    {"server": {"worker": "gthread", "threads": 8, "tls": {"certFile": "/tls/c", "keyFile": "/tls/k"}},
     "cache": {"assumedPodTTL": "1m30s"}, "leaderElection": {"enabled": True, "leaseDuration": "20s"},
     "admission": {"strategy": "StrictFIFO"}, "requeue": {"nudge": True, "minInterval": "250ms"},
     "kubernetes": {"watchTimeout": "1m", "events": False},
     "extender": {"tlsConfig": {"caFile": "/ca"}, "weight": 5},
     "profiles": [{"schedulerName": "gpu", "plugins": {"score": {"enabled": [{"name": "NodeResources", "weight": 3}]}},
                   "pluginConfig": [{"name": "NodeResources", "args": {"scoringStrategy": {"type": "LeastAllocated"}}}]}]},
], ids=["defaults", "every-section-set"])
def test_debug_config_is_the_whole_effective_configuration(make_app: Callable[..., Any], overrides: dict) -> None:
    """Every section and key of the configuration, after defaults; read back, it is the same
    configuration (so nothing is missing or shown differently from how a file says it)."""
    from extender.config.model import _Config, parse_config
    app, _ = make_app(nodes(), pods(), **overrides)
    cfg = app.test_client().get("/debug/config").get_json()
    assert _schema_keys(_Config(), cfg) == []
    for profile in cfg["profiles"]:
        assert set(profile.pop("extensionPoints")) >= {"filter", "score", "bind"}
    plugins = {p["name"]: p for p in cfg.pop("plugins")}
    assert plugins["NodeResources"]["package"] == "kube-extender" and "filter" in plugins["NodeResources"]["extensionPoints"]
    assert parse_config(cfg) == app.extensions["kube_extender"].config


# ---- internal failures ------------------------------------------------------------------------------

def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("boom")


def test_filter_internal_failure_is_200_with_error(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env.engine, "filter", _boom)
    before = env.metric("kube_extender_internal_errors_total", verb="filter")
    resp = env.post("filter", {"Pod": P1, "Nodes": None, "NodeNames": ["free"]})
    assert resp.status_code == 200
    reply = resp.get_json()
    assert set(reply) == FILTER_KEYS
    assert "boom" in reply["Error"]
    assert reply["Nodes"] is None and reply["NodeNames"] is None
    assert reply["FailedNodes"] is None and reply["FailedAndUnresolvableNodes"] is None
    assert env.metric("kube_extender_internal_errors_total", verb="filter") == before + 1


@pytest.mark.parametrize("verb, method, body, exc", [
    pytest.param("prioritize", "prioritize", {"Pod": P1, "NodeNames": ["free"]}, RuntimeError("boom"),
                 id="prioritize-crash"),
    pytest.param("prioritize", "prioritize", {"Pod": P1, "NodeNames": ["free"]}, EngineError("boom"),
                 id="prioritize-plugin-error"),
    pytest.param("preempt", "preempt", {"Pod": P1, "NodeNameToMetaVictims": {}}, RuntimeError("boom"),
                 id="preempt-crash"),
    pytest.param("preempt", "preempt", {"Pod": P1, "NodeNameToMetaVictims": {}}, EngineError("boom"),
                 id="preempt-plugin-error"),
])
def test_prioritize_and_preempt_internal_failure_is_500_and_counted(
        env: Env, monkeypatch: pytest.MonkeyPatch, verb: str, method: str, body: dict[str, Any],
        exc: Exception) -> None:
    def raise_(*_: Any, **__: Any) -> Any:
        raise exc

    monkeypatch.setattr(env.engine, method, raise_)
    before = env.metric("kube_extender_internal_errors_total", verb=verb)
    resp = env.post(verb, body)
    assert resp.status_code == 500
    assert resp.mimetype == "application/json"
    payload = resp.get_json()  # the documented Error shape (before: no "message")
    assert payload == {"error": "internal error", "message": payload["message"]}
    assert payload["message"].startswith(f"{verb} failed: ") and "boom" in payload["message"]
    assert env.metric("kube_extender_internal_errors_total", verb=verb) == before + 1
    monkeypatch.undo()
    assert env.post(verb, body).status_code == 200, "the next request is served normally"


@pytest.mark.parametrize("verb, body", [
    pytest.param("filter", {"Pod": P1, "NodeNames": ["free"]}, id="filter"),
    pytest.param("prioritize", {"Pod": P1, "NodeNames": ["free"]}, id="prioritize"),
    pytest.param("preempt", {"Pod": P1, "NodeNameToMetaVictims": {}}, id="preempt"),
])
def test_invalid_request_from_the_engine_is_400(env: Env, monkeypatch: pytest.MonkeyPatch, verb: str,
                                               body: dict[str, Any]) -> None:
    def raise_(*_: Any, **__: Any) -> Any:
        raise InvalidRequest("Pod: no good")

    monkeypatch.setattr(env.engine, verb, raise_)
    resp = env.post(verb, body)
    assert resp.status_code == 400
    assert resp.get_json()["message"] == "Pod: no good"


def test_bind_cycle_crash_is_200_with_error(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env.engine.binding, "_bind", _boom)
    assert "boom" in env.bind(P1, "free")
    monkeypatch.undo()
    assert env.bind(P1, "free") == "", "the failed attempt left nothing behind"


def test_bind_internal_failure_is_200_with_error(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The routes contract: filter / bind internal failure -> HTTP 200 with the failure in Error."""
    monkeypatch.setattr(env.engine, "bind", _boom)
    before = env.metric("kube_extender_internal_errors_total", verb="bind")
    resp = env.post("bind", {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-p1", "Node": "free"})
    assert resp.status_code == 200
    assert set(resp.get_json()) == {"Error"} and "boom" in resp.get_json()["Error"]
    assert env.metric("kube_extender_internal_errors_total", verb="bind") == before + 1


@pytest.mark.parametrize("spec", [
    pytest.param({"priority": "high"}, id="priority-string"),
    pytest.param({"containers": [{"resources": {"requests": {GPU: "lots"}}}]}, id="bad-quantity"),
    pytest.param({"containers": "abc"}, id="containers-string"),
    pytest.param({"containers": [{"resources": {"requests": ["x"]}}]}, id="requests-list"),
    pytest.param({"containers": [{"resources": "none"}]}, id="resources-string"),
])
def test_malformed_victim_pod_is_400_not_500(env: Env, spec: dict[str, Any]) -> None:
    """A victim pod in NodeNameToVictims that passes the envelope check (metadata.name, uid) but is
    broken inside, on a node the extender knows, is bad input: 400, not an internal error."""
    victim = {"metadata": {"name": "v", "uid": "uid-v"}, "spec": spec}
    resp = env.post("preempt", {"Pod": P1, "NodeNameToVictims": {"full": {"Pods": [victim]}}})
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert "NodeNameToVictims" in resp.get_json()["message"]
    assert env.metric("kube_extender_internal_errors_total", verb="preempt") == 0


# ---- configured verbs and prefix -----------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["/ext/v1", "", "/scheduler"])
def test_configured_verbs_and_prefix_are_served(make_app: Callable[..., Any], prefix: str) -> None:
    segments = {"filter": "filtr", "prioritize": "prio", "preempt": "pre-empt", "bind": "bind.v2"}
    app, cluster = make_app(nodes(), pods(), server={"pathPrefix": prefix},
                            extender={f"{k}Verb": v for k, v in segments.items()})
    env = Env(app, cluster)
    bodies = {"filter": {"Pod": P1, "NodeNames": ["free"]}, "prioritize": {"Pod": P1, "NodeNames": ["free"]},
              "preempt": {"Pod": P1, "NodeNameToMetaVictims": {}},
              "bind": {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-p1", "Node": "free"}}
    for kind, segment in segments.items():
        resp = env.post(f"{prefix}/{segment}", bodies[kind], prefix=None)
        assert resp.status_code == 200, (kind, resp.get_data(as_text=True))
        if prefix != "/scheduler" or segment != kind:
            assert env.post(f"/scheduler/{kind}", bodies[kind], prefix=None).status_code == 404
    described = env.client.get("/debug/config").get_json()["extender"]
    assert {k: described[f"{k}Verb"] for k in segments} == segments
    assert env.post(f"{prefix}/filtr", {"Pod": P1, "NodeNames": ["free"]}, prefix=None).get_json()["NodeNames"] == ["free"]


def test_disabled_verb_is_not_served(make_app: Callable[..., Any]) -> None:
    app, cluster = make_app(nodes(), pods(), extender={"bindVerb": "", "preemptVerb": ""})
    env = Env(app, cluster)
    assert env.post("bind", {"PodName": "p1", "PodUID": "uid-p1", "Node": "free"}).status_code == 404
    assert env.post("preempt", {"Pod": P1}).status_code == 404
    assert env.post("filter", {"Pod": P1, "NodeNames": ["free"]}).status_code == 200


def test_bad_request_metric_uses_the_verb_kind_with_custom_verbs(make_app: Callable[..., Any]) -> None:
    app, cluster = make_app(nodes(), pods(), extender={"filterVerb": "filtr"})
    env = Env(app, cluster)
    assert env.post("filtr", b"nope").status_code == 400
    assert env.post("filtr", {"Pod": P1, "NodeNames": ["free"]}).status_code == 200
    assert env.metric("kube_extender_requests_total", verb="filter", outcome="bad_request") == 1
    assert env.metric("kube_extender_requests_total", verb="filtr") == 0


# ---- golden bodies from the real kube-scheduler, against a cluster that matches them -------------

def _golden(version: str, verb: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / f"kube-scheduler-{version}" / f"{verb}.json").read_text())["body"]


@pytest.mark.parametrize("version", ["v1.30", "v1.36"])
def test_golden_filter_prioritize_bind(make_app: Callable[..., Any], version: str) -> None:
    pod = _golden(version, "filter")["Pod"]
    app, cluster = make_app([make_node(f"node-{i}").alloc(gpu=4).obj() for i in (1, 2, 3)], [pod])
    env = Env(app, cluster)
    reply = env.verb("filter", _golden(version, "filter"))
    assert reply == {"Nodes": None, "NodeNames": ["node-1", "node-2", "node-3"], "FailedNodes": {},
                     "FailedAndUnresolvableNodes": {}, "Error": ""}
    reply = env.verb("prioritize", _golden(version, "prioritize"))
    assert [h["Host"] for h in reply] == ["node-1", "node-2", "node-3"]
    assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in reply)
    bind = _golden(version, "bind")
    assert env.verb("bind", bind) == {"Error": ""}
    assert cluster.get_pod("default", "gpu-pod")["spec"]["nodeName"] == bind["Node"]
    assert env.snapshot_node(bind["Node"])["allocated"] == {GPU: "1"}


@pytest.mark.parametrize("version", ["v1.30", "v1.36"])
def test_golden_preempt(make_app: Callable[..., Any], version: str) -> None:
    body = _golden(version, "preempt")
    victims = [make_pod(f"victim-{node}").uid(mv["Pods"][0]["UID"]).req(gpu=1).priority(0).node(node).obj()
               for node, mv in body["NodeNameToMetaVictims"].items()]
    app, cluster = make_app([make_node(f"node-{i}").alloc(gpu=1).obj() for i in (1, 2, 3)], victims)
    reply = Env(app, cluster).verb("preempt", body)
    assert reply == {"NodeNameToMetaVictims": body["NodeNameToMetaVictims"]}
