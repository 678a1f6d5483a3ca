"""What the emulated kube-scheduler puts on the wire, and how strictly it reads replies
(§1, §3, §6.2, §13.1-§13.2 in ``extender.sim``).

Requests are captured on a real socket (a recording HTTP server forwarding to kube-extender
in-process) and compared with the bodies captured from kube-scheduler v1.36
(``tests/payloads/kube-scheduler-v1.36``), in both nodeCacheCapable modes. Replies are fed
raw to the client to check Go's encoding/json strictness verb by verb.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from builders import cluster_objects, make_node, make_pod
from simkit import HttpExtenderServer, OurServer, WireRequest, gzip_reply, scheduler_for, slow

from extender.api import schemas, wire
from extender.cluster.memory import MemoryCluster
from extender.sim import gojson
from extender.sim.client import (CallableTransport, ExtenderError, HTTPExtender, HTTPTransport, RawResponse,
                                 SchedulerPanic, Victims, go_errorf)
from extender.sim.config import ExtenderSpec

GOLDEN = Path(__file__).resolve().parents[1] / "payloads" / "kube-scheduler-v1.36"
ARGS = {"filter": schemas.ExtenderArgsSchema(), "prioritize": schemas.ExtenderArgsSchema(),
        "preempt": schemas.ExtenderPreemptionArgsSchema(), "bind": schemas.ExtenderBindingArgsSchema()}


def golden(verb: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{verb}.json").read_text())


def capture_all_verbs(node_cache_capable: bool) -> tuple[OurServer, list[WireRequest]]:
    """One run that makes kube-extender see filter, prioritize, bind and preempt over HTTP: a
    small pod fits both nodes (prioritize, bind), a bigger higher-priority one is short of cpu
    everywhere (preempt), then binds to its nominated node."""
    nodes = [make_node(n).alloc(cpu="4", gpu=4).obj() for n in ("node-1", "node-2")]
    pods = [make_pod(f"low-{n}").uid(f"uid-low-{n}").req(cpu="3").node(n).obj() for n in ("node-1", "node-2")]
    ours = OurServer(nodes, pods, extender={"nodeCacheCapable": node_cache_capable})
    client = ours.app.test_client()

    def forward(req: WireRequest) -> tuple[int, bytes, dict[str, str]]:
        resp = client.post(req.path, data=req.body, headers={"Content-Type": "application/json"})
        return resp.status_code, resp.get_data(), {}

    server = HttpExtenderServer(forward, prefix="/scheduler")
    try:
        scheduler = scheduler_for(ours.cluster, [(ours.entry(urlPrefix=server.url), None)])
        ours.cluster.add_pod(make_pod("small").req(cpu="1", gpu=1).obj())
        ours.cluster.add_pod(make_pod("big").req(cpu="2", gpu=1).priority(100).created("2026-01-01T00:00:01Z").obj())
        scheduler.run()
        assert scheduler.binds == 2, [c.message for c in scheduler.cycles]
        return ours, list(server.requests)
    finally:
        server.close()


@pytest.fixture(scope="module", params=[True, False], ids=["nodeCacheCapable", "fullNodes"])
def captured(request: pytest.FixtureRequest) -> Iterator[tuple[bool, OurServer, list[WireRequest]]]:
    ours, requests = capture_all_verbs(request.param)
    yield request.param, ours, requests


def test_every_verb_was_called_over_the_socket(captured: Any) -> None:
    _, _, requests = captured
    verbs = [r.path.rsplit("/", 1)[-1] for r in requests]
    assert {"filter", "prioritize", "preempt", "bind"} <= set(verbs)
    assert all(r.method == "POST" and r.path.startswith("/scheduler/") for r in requests)


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt", "bind"])
def test_requests_match_the_golden_captures(captured: Any, verb: str) -> None:
    cache, ours, requests = captured
    gold = golden(verb)
    req = next(r for r in requests if r.path.endswith("/" + verb))
    # headers: Go's, in Go's order (after Host), Content-Length exact
    names = [k for k, _ in req.headers if k.lower() != "host"]
    assert names == list(gold["headers"])
    headers = dict(req.headers)
    for k in ("User-Agent", "Content-Type", "Accept-Encoding"):
        assert headers[k] == gold["headers"][k]
    assert int(headers["Content-Length"]) == len(req.body)
    # compact json.Marshal output
    body = req.json()
    assert req.body == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    # the same top-level keys, in the same order; null where kube-scheduler sends null
    assert list(body) == list(gold["body"])
    if verb in ("filter", "prioritize"):
        assert (body["Nodes"] is None, body["NodeNames"] is None) == ((True, False) if cache else (False, True))
        if cache:
            assert body["NodeNames"] and all(isinstance(n, str) for n in body["NodeNames"])
        else:
            assert list(body["Nodes"]) == ["metadata", "items"] and body["Nodes"]["metadata"] == {}
            assert all("kind" not in n and "apiVersion" not in n for n in body["Nodes"]["items"])
    if verb == "preempt":
        assert (body["NodeNameToVictims"] is None, body["NodeNameToMetaVictims"] is None) == (
            (True, False) if cache else (False, True))
        victims = body["NodeNameToMetaVictims"] if cache else body["NodeNameToVictims"]
        gold_victims = next(iter(gold["body"]["NodeNameToMetaVictims"].values()))
        for v in victims.values():
            assert list(v) == list(gold_victims)
            if cache:
                assert all(list(p) == ["UID"] for p in v["Pods"])
            else:
                assert all(p["metadata"]["uid"].startswith("uid-low-") for p in v["Pods"])
    if "Pod" in body:
        assert "kind" not in body["Pod"] and "apiVersion" not in body["Pod"]
        assert set(body["Pod"]) <= set(gold["body"]["Pod"])
    # kube-extender's own (tolerant) request parser accepts both the same way
    wire.load(ARGS[verb], body)
    wire.load(ARGS[verb], gold["body"])
    client = ours.app.test_client()
    assert client.post(f"/scheduler/{verb}", json=gold["body"]).status_code == 200


def test_bind_request_carries_exactly_the_pod_identity(captured: Any) -> None:
    _, ours, requests = captured
    binds = [r.json() for r in requests if r.path.endswith("/bind")]
    small = ours.cluster.get_pod("default", "small")
    assert {"PodName": "small", "PodNamespace": "default", "PodUID": small["metadata"]["uid"],
            "Node": small["spec"]["nodeName"]} in binds


def test_keep_alive_reuses_connections() -> None:
    calls = {"n": 0}

    def handler(req: WireRequest) -> tuple[int, bytes, dict[str, str]]:
        calls["n"] += 1
        return 200, b'{"Error":""}', {}

    with HttpExtenderServer(handler) as server:
        transport = HTTPTransport()
        ext = HTTPExtender(ExtenderSpec(server.url, bind_verb="bind"), transport)
        pod = make_pod("p").obj()
        for _ in range(5):
            ext.bind(pod, "n1")
        assert calls["n"] == 5 and transport.connections_opened == 1 and server.connections == 1
        transport.close()


def test_marshal_is_go_json() -> None:
    assert gojson.marshal({"Pod": {"metadata": {"labels": {"a": "<&>"}}}, "Nodes": None}) == (
        b'{"Pod":{"metadata":{"labels":{"a":"\\u003c\\u0026\\u003e"}}},"Nodes":null}')
    assert gojson.go_map({"b": 1, "a": 2}) == {"a": 2, "b": 1}
    # fmt.Errorf(msg) with no arguments (≤1.31): ' ' is a flag, so "% u" is the verb u
    assert go_errorf("50% used, %d left, 100%%, 7%") == "50%!u(MISSING)sed, %!d(MISSING) left, 100%, 7%!(NOVERB)"


@pytest.mark.parametrize("names", [
    ["n1", "n2"], [], ["a<b>&c", "line\u2028sep\u2029"], ['q"\\\n\x01\x1f\x7f', "é😀"],
])
def test_node_names_are_encoded_as_the_whole_args_would_be(names: list[str]) -> None:
    bodies: list[bytes] = []

    class Capture:
        def post(self, url: str, body: bytes, headers: Any, timeout: float) -> RawResponse:
            bodies.append(body)
            return RawResponse(200, b"[]" if url.endswith("prioritize") else b"{}")

    ext = HTTPExtender(ExtenderSpec("http://x/", filter_verb="filter", prioritize_verb="prioritize",
                                    node_cache_capable=True), Capture())
    ext.filter(POD, NODES, names)
    ext.prioritize(POD, NODES, names)
    expected = gojson.marshal({"Pod": POD, "Nodes": None, "NodeNames": names})
    assert bodies == [expected, expected]
    assert gojson.marshal_strings(names) == gojson.marshal(names)


def test_names_that_are_not_unicode_fail_as_the_general_encoding_does() -> None:
    with pytest.raises(UnicodeEncodeError):
        gojson.marshal_strings(["\ud800"])


# ---- strict decoding, verb by verb --------------------------------------------------------------------

POD = make_pod("p").uid("uid-p").obj()
NODES = [make_node("n1").obj(), make_node("n2").obj()]


def client_for(reply: Any, *, cache: bool = True, **spec: Any) -> HTTPExtender:
    def handler(verb: str, args: Any) -> Any:
        return reply if isinstance(reply, RawResponse) else RawResponse(200, reply)

    base = {"filter_verb": "filter", "prioritize_verb": "prioritize", "bind_verb": "bind", "preempt_verb": "preempt",
            "weight": 1}
    return HTTPExtender(ExtenderSpec("http://x/", node_cache_capable=cache, **{**base, **spec}),
                        CallableTransport(handler))


@pytest.mark.parametrize("reply, names, failed", [
    (b'{"NodeNames":["n1"],"FailedNodes":{"n2":"x"}}', ["n1"], {"n2": "x"}),
    (b'{"nodenames":["n1"],"NODES":null,"Unknown":{"a":[1,2]}}', ["n1"], {}),  # any case; unknown keys ignored
    (b'{"NodeNames":["n2"]}  trailing garbage is never read', ["n2"], {}),
    (b"{}", [], {}),  # no list: every node filtered out, not an error
    (b"null", [], {}),
    (b'{"Nodes":{"items":[{"metadata":{"name":"n1"}}]}}', ["n1"], {}),  # cache mode falls back to Nodes
])
def test_filter_reply_decoding(reply: bytes, names: list[str], failed: dict[str, str]) -> None:
    result = client_for(reply).filter(POD, NODES)
    assert result.names == names and result.failed == failed


@pytest.mark.parametrize("reply, error", [
    (b"", "EOF"),
    (b"   \n", "EOF"),
    (b'{"NodeNames":["n1"', "unexpected EOF"),
    (b"[]", "json: cannot unmarshal array into Go value of type v1.ExtenderFilterResult"),
    (b'{"NodeNames":"n1"}', "json: cannot unmarshal string into Go struct field ExtenderFilterResult.NodeNames of type []string"),
    (b'{"FailedNodes":{"n2":5}}', "json: cannot unmarshal number 5"),
    (b'{"NodeNames":["n1","n9"]}', 'extender "http://x/" claims a filtered node "n9" which is not found in the input node list'),
    (b'{"NodeNames":["n1"],"Error":"inventory 50% stale"}', "inventory 50%!s(MISSING)tale"),
    (RawResponse(500, b'{"NodeNames":["n1"]}'), "failed filter with extender at URL http://x/filter, code 500"),
    (RawResponse(201, b'{"NodeNames":["n1"]}'), "failed filter with extender at URL http://x/filter, code 201"),
])
def test_filter_reply_errors(reply: Any, error: str) -> None:
    with pytest.raises(ExtenderError) as info:
        client_for(reply).filter(POD, NODES)
    assert str(info.value) == error or str(info.value).startswith(error)


def test_filter_non_cache_mode_reads_nodes_only_and_trusts_them() -> None:
    assert client_for(b'{"NodeNames":["n1","n2"]}', cache=False).filter(POD, NODES).names == []
    reply = b'{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"}},{"metadata":{"name":"n9"}}]}}'
    result = client_for(reply, cache=False).filter(POD, NODES)
    assert result.names == ["n1", "n9"] and set(result.node_objects or {}) == {"n1", "n9"}


@pytest.mark.parametrize("reply, expected", [
    (b'[{"Host":"n1","Score":5},{"Host":"n2","Score":-3}]', [("n1", 5), ("n2", -3)]),
    (b'[{"host":"n1","score":70}]', [("n1", 70)]),  # any case; not clamped to 0..10
    (b"null", []),
    (b'[{"Host":"n1","Score":null}]', [("n1", 0)]),
    (b'[{"Host":"n1","Score":1},{"Host":"n2","Score":4},{"Host":"n1","Score":2}]', [("n1", 1), ("n2", 4), ("n1", 2)]),
    (b'[{"Score":3,"Host":"n1"}]', [("n1", 3)]),  # any order
    (b'[{"Host":"n1","Score":3,"Zone":"a"},{"Host":"n2"}]', [("n1", 3), ("n2", 0)]),  # unknown keys, missing ones
    (b'[{"Host":"n1","HOST":"n2","Score":3}]', [("n2", 3)]),  # the later of two spellings
    (b"[]", []),
])
def test_prioritize_reply_decoding(reply: bytes, expected: list[tuple[str, int]]) -> None:
    scores, weight = client_for(reply).prioritize(POD, NODES)
    assert [(s.host, s.score) for s in scores] == expected and weight == 1


@pytest.mark.parametrize("reply, error", [
    (b'[{"Host":"n1","Score":5.0}]', "json: cannot unmarshal number 5.0 into Go struct field HostPriority.Score of type int64"),
    (b'[{"Host":"n1","Score":5e0}]', "json: cannot unmarshal number 5e0 into Go struct field HostPriority.Score of type int64"),
    (b'[{"Host":"n1","Score":"5"}]', "json: cannot unmarshal string into Go struct field HostPriority.Score of type int64"),
    (b'[{"Host":"n1","Score":9223372036854775808}]', "json: cannot unmarshal number 9223372036854775808"),
    (b'{"Host":"n1","Score":5}', "json: cannot unmarshal object into Go value of type v1.HostPriorityList"),
    (b'[{"Host":"n1","Score":true}]', "json: cannot unmarshal bool into Go struct field HostPriority.Score of type int64"),
    (b'[{"Host":1,"Score":1}]', "json: cannot unmarshal number 1 into Go struct field HostPriority.Host of type string"),
    (b'[{"Host":"n1","Score":1},5]', "json: cannot unmarshal number 5 into Go value of type v1.HostPriority"),
    (b"", "EOF"),
])
def test_prioritize_reply_errors(reply: bytes, error: str) -> None:
    with pytest.raises(ExtenderError) as info:
        client_for(reply).prioritize(POD, NODES)
    assert str(info.value).startswith(error)


@pytest.mark.parametrize("reply, error", [
    (b'{"Error":""}', None), (b"{}", None), (b"null", None), (b'{"error":"conflict"}', "conflict"),
    (b'{"Error":"already assigned"}', "already assigned"), (b"", "EOF"), (b'{"Error":1}', "json: cannot unmarshal number 1"),
])
def test_bind_reply(reply: bytes, error: str | None) -> None:
    ext = client_for(reply)
    if error is None:
        ext.bind(POD, "n1")
    else:
        with pytest.raises(ExtenderError) as info:
            ext.bind(POD, "n1")
        assert str(info.value).startswith(error)


VICTIM = make_pod("victim").uid("uid-v").node("n1").obj()
PODS_ON = {"n1": {"uid-v": VICTIM}, "n2": {}}


@pytest.mark.parametrize("reply, kept", [
    (b'{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"uid-v"}],"NumPDBViolations":2}}}', {"n1": (["uid-v"], 2)}),
    (b'{"nodenametometavictims":{"n1":{"pods":[{"uid":"uid-v"}]}}}', {"n1": (["uid-v"], 0)}),
    (b'{"NodeNameToMetaVictims":{}}', {}),
    (b'{"Error":"no"}', {}),  # no error field for preempt: an empty map = veto all
    (b"null", {}),
    (b'{"NodeNameToMetaVictims":{"n1":{"Pods":[]}}}', {"n1": ([], 0)}),  # the caller rejects 0 victims
])
def test_preempt_reply_conversion(reply: bytes, kept: dict[str, tuple[list[str], int]]) -> None:
    result = client_for(reply).process_preemption(POD, {"n1": Victims([VICTIM])}, PODS_ON.get)
    assert {n: ([p["metadata"]["uid"] for p in v.pods], v.num_pdb_violations) for n, v in result.items()} == kept


@pytest.mark.parametrize("reply, error", [
    (b'{"NodeNameToMetaVictims":{"n9":{"Pods":[{"UID":"uid-v"}]}}}', 'nodeinfo not found for node name "n9"'),
    (b'{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"uid-zzz"}]}}}',
     "extender: http://x/ claims to preempt pod (UID: &{uid-zzz}) on node: n1, but the pod is not found on that node"),
    (b'{"NodeNameToMetaVictims":{"n2":{"Pods":[{"UID":"uid-v"}]}}}',
     "extender: http://x/ claims to preempt pod (UID: &{uid-v}) on node: n2"),
    # a null MetaPod on a node without pods is never dereferenced: Go prints the nil pointer
    (b'{"NodeNameToMetaVictims":{"n2":{"Pods":[null]}}}',
     "extender: http://x/ claims to preempt pod (UID: <nil>) on node: n2"),
    (b'{"NodeNameToMetaVictims":[]}', "json: cannot unmarshal array"),
    (b'{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"uid-v"}],"NumPDBViolations":1.5}}}', "json: cannot unmarshal number 1.5"),
    (RawResponse(404, b""), "failed preempt with extender at URL http://x/preempt, code 404"),
])
def test_preempt_reply_errors(reply: Any, error: str) -> None:
    with pytest.raises(ExtenderError) as info:
        client_for(reply).process_preemption(POD, {"n1": Victims([VICTIM])}, PODS_ON.get)
    assert str(info.value).startswith(error)


@pytest.mark.parametrize("reply", [
    b'{"NodeNameToMetaVictims":{"n1":null}}',  # convertToVictims reads metaVictims.NumPDBViolations
    b'{"NodeNameToMetaVictims":{"n1":{"Pods":[null]}}}',  # convertPodUIDToPod reads metaPod.UID
    b'{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"uid-v"},null]}}}',
], ids=["null-victims", "null-pod", "null-pod-after-a-good-one"])
def test_preempt_reply_with_a_nil_pointer_panics(reply: bytes) -> None:
    """kube-scheduler dereferences the reply's pointers: a null MetaVictims, or a null MetaPod
    looked up on a node with pods, is a nil pointer dereference - a panic, not an error."""
    with pytest.raises(SchedulerPanic) as info:
        client_for(reply).process_preemption(POD, {"n1": Victims([VICTIM])}, PODS_ON.get)
    assert str(info.value).startswith("runtime error: invalid memory address or nil pointer dereference")


# ---- over a socket ---------------------------------------------------------------------------------------


def test_gzip_replies_are_decoded() -> None:
    with HttpExtenderServer(lambda req: gzip_reply({"NodeNames": ["n1"]})) as server:
        ext = HTTPExtender(ExtenderSpec(server.url, filter_verb="filter", node_cache_capable=True))
        assert ext.filter(POD, NODES).names == ["n1"]


def test_timeout_covers_the_reply() -> None:
    with HttpExtenderServer(slow(0.5, {"NodeNames": ["n1"]})) as server:
        ext = HTTPExtender(ExtenderSpec(server.url, filter_verb="filter", node_cache_capable=True, http_timeout=0.1))
        t0 = time.monotonic()
        with pytest.raises(ExtenderError) as info:
            ext.filter(POD, NODES)
        assert time.monotonic() - t0 < 0.45
        assert str(info.value) == (f'Post "{server.url}/filter": context deadline exceeded '
                                   "(Client.Timeout exceeded while awaiting headers)")


def test_connection_refused_and_empty_body() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    ext = HTTPExtender(ExtenderSpec(f"http://127.0.0.1:{port}/x//", filter_verb="filter"))
    with pytest.raises(ExtenderError) as info:
        ext.filter(POD, NODES)
    assert str(info.value) == f'Post "http://127.0.0.1:{port}/x/filter": dial tcp 127.0.0.1:{port}: connect: connection refused'
    with HttpExtenderServer(lambda req: (200, b"", {})) as server:
        with pytest.raises(ExtenderError, match="^EOF$"):
            HTTPExtender(ExtenderSpec(server.url, filter_verb="filter")).filter(POD, NODES)


def test_redirects_replay_the_post_on_307() -> None:
    def handler(req: WireRequest) -> tuple[int, bytes, dict[str, str]]:
        if req.path.endswith("/old/filter"):
            return 307, b"", {"Location": "/new/filter"}
        assert req.method == "POST" and req.json()["NodeNames"] == ["n1", "n2"]
        return 200, b'{"NodeNames":["n2"]}', {}

    with HttpExtenderServer(handler, prefix="/old") as server:
        ext = HTTPExtender(ExtenderSpec(server.url, filter_verb="filter", node_cache_capable=True))
        assert ext.filter(POD, NODES).names == ["n2"]


# ---- strictness seen from the scheduler ------------------------------------------------------------------


def two_extender_run(bad_reply: bytes, **bad_entry: Any) -> Any:
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj(), make_node("n2").obj()]))

    def bad(verb: str, args: Any) -> Any:
        if verb == "filter":
            return {"NodeNames": args["NodeNames"]}
        return RawResponse(200, bad_reply)

    def good(verb: str, args: Any) -> Any:
        if verb == "filter":
            return {"NodeNames": args["NodeNames"]}
        return [{"Host": "n2", "Score": 1}]

    entries = [({"urlPrefix": "http://bad/", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 50,
                 "nodeCacheCapable": True, **bad_entry}, CallableTransport(bad)),
               ({"urlPrefix": "http://good/", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1,
                 "nodeCacheCapable": True}, CallableTransport(good))]
    scheduler = scheduler_for(cluster, entries, max_virtual_seconds=2)
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    return scheduler


def test_a_float_score_makes_the_whole_prioritize_reply_count_for_nothing() -> None:
    scheduler = two_extender_run(b'[{"Host":"n1","Score":10.0}]')
    first = scheduler.cycles[0]
    assert first.node == "n2" and "extender:http://bad/" not in first.scores["n1"]
    (sample,) = [s for s in scheduler.stats.snapshot() if s.verb == "prioritize" and s.extender == "http://bad/"]
    assert not sample.ok and sample.error.startswith("json: cannot unmarshal number 10.0")


def test_an_integer_score_from_the_same_extender_wins() -> None:
    scheduler = two_extender_run(b'[{"Host":"n1","Score":10}]')
    assert scheduler.cycles[0].node == "n1"
    assert scheduler.cycles[0].scores["n1"]["extender:http://bad/"] == 10 * 50 * 10


def test_a_host_named_twice_in_a_prioritize_reply_gets_the_sum_of_its_scores() -> None:
    """``combinedScores[host] += score * weight``: both entries count; a host that was not sent
    is ignored, a sent one the reply leaves out has no extender score."""
    cluster = MemoryCluster(cluster_objects([make_node(n).obj() for n in ("n1", "n2", "n3")]))

    def handler(verb: str, args: Any) -> Any:
        return [{"Host": "n2", "Score": 5}, {"Host": "n1", "Score": 3}, {"Host": "ghost", "Score": 10},
                {"Host": "n1", "Score": 4}]

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "prioritizeVerb": "prioritize", "weight": 2,
                                          "nodeCacheCapable": True}, CallableTransport(handler))], max_virtual_seconds=2)
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    first = scheduler.cycles[0]
    assert first.node == "n1" and first.scores is not None
    assert {n: first.scores[n].get("extender:http://x/") for n in ("n1", "n2", "n3")} == {"n1": 140, "n2": 100, "n3": None}


def test_an_extender_failing_a_node_the_filters_rejected_adds_its_reason() -> None:
    """``FailedNodes`` may name nodes that were not sent: a node that already has a status gets
    the message appended (its code and plugin kept); ``FailedAndUnresolvableNodes`` makes it
    unresolvable."""
    nodes = [make_node("small").alloc(cpu="1").obj(), make_node("tiny").alloc(cpu="1").obj(), make_node("n2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes))

    def handler(verb: str, args: Any) -> Any:
        assert args["NodeNames"] == ["n2"]
        return {"NodeNames": [], "FailedNodes": {"small": "and no", "n2": "maybe later"},
                "FailedAndUnresolvableNodes": {"tiny": "never"}}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(handler))], max_virtual_seconds=2)
    cluster.add_pod(make_pod("p").req(cpu="2").obj())
    scheduler.run()
    first = scheduler.cycles[0]
    assert dict(first.statuses) == {"small": "Insufficient cpu, and no", "tiny": "Insufficient cpu, never",
                                    "n2": "maybe later"}
    # small kept its code (preemption may help there), tiny became unresolvable (it may not)
    assert first.message.endswith("preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
                                  "2 No preemption victims found for incoming pod..")


def test_unknown_name_in_cache_mode_is_a_scheduling_error() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()]))
    handler = lambda verb, args: {"NodeNames": ["n1", "ghost"]}  # noqa: E731
    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(handler))], max_virtual_seconds=2)
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    assert scheduler.cycles[0].outcome == "error" and '"ghost"' in scheduler.cycles[0].message


def test_unresolvable_wins_over_failed_and_keeps_the_node_out_of_preemption() -> None:
    """Both nodes pass the in-tree filters; the extender fails both, n2 also as unresolvable.
    Preemption then only dry-runs n1 (n2: "Preemption is not helpful"), where the pod fits
    without victims: a single "expected at least one victim" error, not one per node."""
    nodes = [make_node("n1").obj(), make_node("n2").obj()]
    others = [make_pod(f"low-{n}").req(cpu="1").node(n).obj() for n in ("n1", "n2")]
    cluster = MemoryCluster(cluster_objects(nodes, others))

    def handler(verb: str, args: Any) -> Any:
        return {"NodeNames": [], "FailedNodes": {n: "maybe later" for n in args["NodeNames"]},
                "FailedAndUnresolvableNodes": {"n2": "never here"}}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True},
                                         CallableTransport(handler))])
    cluster.add_pod(make_pod("p").req(cpu="1").priority(10).obj())
    scheduler.run()
    first = scheduler.cycles[0]
    assert first.statuses == {"n1": "maybe later", "n2": "never here"}
    assert first.message == ('0/2 nodes are available: 1 maybe later, 1 never here. '
                             'preemption: expected at least one victim pod on node "n1".')
    assert all(cluster.get_pod("default", f"low-{n}") is not None for n in ("n1", "n2"))


@pytest.mark.parametrize("ignorable", [False, True])
def test_zero_victim_node_in_a_preempt_reply(ignorable: bool) -> None:
    nodes = [make_node(n).alloc(cpu="2").obj() for n in ("n1", "n2")]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod(f"low-{n}").uid(f"uid-{n}").req(cpu="2").node(n).obj()
                                                    for n in ("n1", "n2")]))

    def handler(verb: str, args: Any) -> Any:
        return {"NodeNameToMetaVictims": {"n1": {"Pods": []}, "n2": {"Pods": [{"UID": "uid-n2"}]}}}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "preemptVerb": "preempt", "ignorable": ignorable,
                                          "nodeCacheCapable": True}, CallableTransport(handler))])
    cluster.add_pod(make_pod("p").req(cpu="1").priority(10).obj())
    scheduler.run()
    first = scheduler.cycles[0]
    if ignorable:  # the empty node is dropped, n2 is used
        assert first.preemption["chosen"] == "n2" and cluster.get_pod("default", "low-n2") is None
    else:  # an error: nothing deleted, nominatedNodeName left unchanged
        assert first.message.endswith('preemption: expected at least one victim pod on node "n1".')
        assert cluster.get_pod("default", "low-n1") is not None and cluster.get_pod("default", "low-n2") is not None
        assert "nominatedNodeName" not in cluster.get_pod("default", "p")["status"]


@pytest.mark.parametrize("victims", [None, {"Pods": [None]}], ids=["null-victims", "null-pod"])
@pytest.mark.parametrize("ignorable", [False, True])
def test_a_nil_pointer_in_a_preempt_reply_crashes_the_scheduler(victims: Any, ignorable: bool) -> None:
    """The panic ends kube-scheduler's process whatever ``ignorable`` says (it happens inside
    ProcessPreemption): the run ends as crashed, with a cycle record saying why, and nothing is
    preempted - not a preemption that found no victims on n1."""
    nodes = [make_node("n1").alloc(cpu="2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("low").uid("uid-low").req(cpu="2").node("n1").obj()]))

    def handler(verb: str, args: Any) -> Any:
        return {"NodeNameToMetaVictims": {"n1": victims}}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "preemptVerb": "preempt", "ignorable": ignorable,
                                          "nodeCacheCapable": True}, CallableTransport(handler))])
    cluster.add_pod(make_pod("p").req(cpu="1").priority(10).obj())
    summary = scheduler.run()
    assert summary.reason.startswith("crashed: panic: runtime error: invalid memory address or nil pointer dereference")
    assert [(c.pod, c.outcome) for c in scheduler.cycles] == [("default/p", "crashed")]
    assert "http://x/" in scheduler.cycles[0].message and '"n1"' in scheduler.cycles[0].message
    assert cluster.get_pod("default", "low") is not None
    assert "nominatedNodeName" not in cluster.get_pod("default", "p")["status"]


@pytest.mark.parametrize("change, preempted", [("annotate", True), ("delete", False)])
def test_preemption_reads_the_preemptor_again_from_the_informer(change: str, preempted: bool) -> None:
    """``Evaluator.Preempt`` (1.30-1.36) starts by fetching the latest preemptor from the pod
    lister (the informer's copy), not the pod the cycle began with: an update delivered during
    the cycle is what the preempt verb is sent, and a pod deleted meanwhile ends preemption with
    the lister's error - nothing is evicted for it. n1 is full (in-tree), the extender filter
    rules n2 out for good and, meanwhile, the informer delivers the change (another thread)."""
    nodes = [make_node("n1").alloc(cpu="2").obj(), make_node("n2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("low").uid("uid-low").req(cpu="2").node("n1").obj()]))
    sent: list[Any] = []
    filtered: list[Any] = []

    def write() -> None:
        if change == "annotate":
            cluster.patch_pod_metadata("default", "p", annotations={"seen": "yes"})
        else:
            cluster.delete_pod("default", "p")

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter":
            if not filtered:
                writer = threading.Thread(target=write)
                writer.start()
                writer.join()
            filtered.append(args["Pod"])
            return {"NodeNames": [], "FailedAndUnresolvableNodes": {n: "never here" for n in args["NodeNames"]}}
        sent.append(args["Pod"])
        return {"NodeNameToMetaVictims": args["NodeNameToMetaVictims"]}

    scheduler = scheduler_for(cluster, [({"urlPrefix": "http://x/", "filterVerb": "filter", "preemptVerb": "preempt",
                                          "nodeCacheCapable": True}, CallableTransport(handler))])
    cluster.add_pod(make_pod("p").uid("uid-p").req(cpu="1").priority(10).obj())
    scheduler.run()
    first = scheduler.cycles[0]
    if preempted:
        assert [pod["metadata"].get("annotations") for pod in sent] == [{"seen": "yes"}]
        assert first.preemption["victims"] == ["default/low"] and cluster.get_pod("default", "low") is None
    else:
        assert sent == [] and first.message.endswith('preemption: pod "p" not found.')
        assert cluster.get_pod("default", "low") is not None and len(scheduler.cycles) == 1


def _stamping(name: str, seen: dict[str, list[tuple[str, list[dict[str, Any]]]]]) -> Any:
    """An extender that records the Node objects (or names) each verb receives and, in
    non-cache mode, returns every node it was sent with a label ``stamped-by: <name>`` added."""
    def handler(verb: str, args: Any) -> Any:
        items = (args.get("Nodes") or {}).get("items")
        seen.setdefault(name, []).append((verb, items if items is not None else args["NodeNames"]))
        if verb == "prioritize":
            return [{"Host": n["metadata"]["name"] if isinstance(n, dict) else n, "Score": 1}
                    for n in (items if items is not None else args["NodeNames"])]
        if items is None:
            return {"NodeNames": args["NodeNames"]}
        stamped = [{**n, "metadata": {**n["metadata"], "labels": {**n["metadata"].get("labels", {}),
                                                                    f"stamped-by-{name}": "yes"}}} for n in items]
        return {"Nodes": {"metadata": {}, "items": stamped}}
    return handler


def _stamps(items: list[Any]) -> list[list[str]]:
    return [sorted(k for k in n["metadata"].get("labels", {}) if k.startswith("stamped-by-")) for n in items]


RETURNED_OBJECTS = [
    # id, (name, nodeCacheCapable, verbs) per extender, the stamps each later call sees (extender, verb, stamps)
    ("non-cache-filter-then-non-cache-filter-and-prioritize",
     [("a", False, ("filter",)), ("b", False, ("filter", "prioritize"))],
     [("b", "filter", [["stamped-by-a"]] * 2), ("b", "prioritize", [["stamped-by-a", "stamped-by-b"]] * 2)]),
    ("non-cache-filter-then-cache-filter-then-non-cache-prioritize",
     [("a", False, ("filter", "prioritize")), ("b", True, ("filter",)), ("c", False, ("prioritize",))],
     [("a", "prioritize", [["stamped-by-a"]] * 2), ("c", "prioritize", [["stamped-by-a"]] * 2)]),
]


@pytest.mark.parametrize("extenders, expected", [c[1:] for c in RETURNED_OBJECTS], ids=[c[0] for c in RETURNED_OBJECTS])
def test_later_extenders_get_the_node_objects_a_non_cache_filter_returned(
        extenders: list[tuple[str, bool, tuple[str, ...]]], expected: list[tuple[str, str, list[list[str]]]]) -> None:
    """``nodeCacheCapable: false``: ``HTTPExtender.Filter`` hands on the Node objects of its
    reply (``result.Nodes.Items``) as the feasible list, and ``findNodesThatPassExtenders``
    passes that list to the next extender's filter, then to every prioritize - not the
    snapshot's objects. A nodeCacheCapable filter in between returns its input objects."""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj(), make_node("n2").obj()]))
    seen: dict[str, list[tuple[str, list[Any]]]] = {}
    entries = []
    for name, cache, verbs in extenders:
        entry: dict[str, Any] = {"urlPrefix": f"http://{name}/", "nodeCacheCapable": cache}
        for verb in verbs:
            entry[f"{verb}Verb"] = verb
        if "prioritize" in verbs:
            entry["weight"] = 1
        entries.append((entry, CallableTransport(_stamping(name, seen))))
    scheduler = scheduler_for(cluster, entries, max_virtual_seconds=2)
    cluster.add_pod(make_pod("p").obj())
    scheduler.run()
    assert [c.outcome for c in scheduler.cycles] == ["scheduled"]
    for name, verb, stamps in expected:
        (items,) = [items for v, items in seen[name] if v == verb]
        assert _stamps(items) == stamps, (name, verb)
    # the in-tree plugins still read the scheduler's own nodes
    assert all(not _stamps([n.raw])[0] for n in scheduler.cache.nodes())


def test_the_full_pass_after_a_failed_nominated_node_sends_the_snapshots_node_objects() -> None:
    """kube-scheduler runs the extenders on the nominated node alone first; when a later extender
    rejects it, the search over every node starts from the scheduler's own Node objects again:
    the first (non-cache) extender must not get back what it returned for the nominated node.
    (Found in review.)"""
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj(), make_node("n2").obj()]))
    seen: dict[str, list[list[Any]]] = {"a": [], "b": []}

    def a(verb: str, args: Any) -> Any:  # non-cache filter: stamps every node it is sent
        items = args["Nodes"]["items"]
        seen["a"].append(items)
        return {"Nodes": {"metadata": {}, "items": [
            {**n, "metadata": {**n["metadata"], "labels": {**n["metadata"].get("labels", {}), "stamped-by-a": "yes"}}}
            for n in items]}}

    def b(verb: str, args: Any) -> Any:  # non-cache filter: rejects n1
        items = args["Nodes"]["items"]
        seen["b"].append(items)
        return {"Nodes": {"metadata": {}, "items": [n for n in items if n["metadata"]["name"] != "n1"]}}

    entries = [({"urlPrefix": "http://a/", "filterVerb": "filter", "nodeCacheCapable": False}, CallableTransport(a)),
               ({"urlPrefix": "http://b/", "filterVerb": "filter", "nodeCacheCapable": False}, CallableTransport(b))]
    scheduler = scheduler_for(cluster, entries, max_virtual_seconds=2)
    pod = make_pod("p").obj()
    pod.setdefault("status", {})["nominatedNodeName"] = "n1"
    cluster.add_pod(pod)
    scheduler.run()
    assert [c.outcome for c in scheduler.cycles] == ["scheduled"]
    nominated_call, full_call = seen["a"][:2]
    assert [n["metadata"]["name"] for n in nominated_call] == ["n1"]
    assert [n["metadata"].get("labels", {}).get("stamped-by-a") for n in full_call] == [None, None]


def _sim_entry(**extra: Any) -> dict[str, Any]:
    return {"urlPrefix": "http://x/", "filterVerb": "filter", "nodeCacheCapable": True, **extra}


def test_a_crash_returns_only_once_the_binding_cycles_in_flight_are_settled() -> None:
    """"first" is scheduled and its bind (a binder extender) takes 0.3 s of real time; meanwhile
    "p"'s preempt reply holds a null MetaVictims: the run ends crashed - once the bind in flight
    is settled, as a normal end waits for it (run() returned at once, and the report said
    "pending" of a pod the cluster then held bound)."""
    nodes = [make_node("n1").alloc(cpu="2").obj(), make_node("n2").alloc(cpu="2").obj()]
    cluster = MemoryCluster(cluster_objects(nodes, [make_pod("low").uid("uid-low").req(cpu="2").node("n1").obj()]))
    release = threading.Event()

    def handler(verb: str, args: Any) -> Any:
        if verb == "filter":
            return {"NodeNames": args["NodeNames"], "Nodes": None, "FailedNodes": {}, "Error": ""}
        if verb == "preempt":
            return {"NodeNameToMetaVictims": {"n1": None}}
        release.wait(0.3)
        cluster.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        return {"Error": ""}

    scheduler = scheduler_for(cluster, [(_sim_entry(preemptVerb="preempt", bindVerb="bind"), CallableTransport(handler))])
    cluster.add_pod(make_pod("first").uid("first").req(cpu="2").priority(20).obj())  # takes n2
    cluster.add_pod(make_pod("p").uid("p").req(cpu="2").priority(10).obj())  # fits nowhere: preempts
    summary = scheduler.run()
    assert summary.reason.startswith("crashed: panic:")
    assert (summary.binds, scheduler.traces["first"].state) == (1, "bound")
