"""One way into the verb handlers (``Verbs.answer``): every outcome answered there, once, and
its log line and metrics only when the transport calls the Record; and the WSGI shortcut in
front of the Flask app (``VerbShortcut``). Through Flask: tests/unit/test_api_endpoints.py;
through the fast lane: tests/integration/test_fastlane_http.py."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import orjson
import pytest
from builders import GPU, cluster_objects, make_node, make_pod
from conftest import config_of

from extender.api.routes import VerbShortcut
from extender.api.verbs import Verbs
from extender.app import create_app
from extender.cluster.memory import MemoryCluster


def args(names: list[str]) -> bytes:
    return json.dumps({"Pod": make_pod("p").req(gpu=1).obj(), "Nodes": None, "NodeNames": names}).encode()


@pytest.fixture
def app(make_app: Any) -> Any:
    built, _ = make_app([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()])
    return built


@pytest.fixture
def shortcut(app: Any) -> VerbShortcut:
    assert isinstance(app.wsgi_app, VerbShortcut)
    return app.wsgi_app


@pytest.fixture
def verbs(shortcut: VerbShortcut) -> Verbs:
    return shortcut.verbs


def test_the_configured_paths_name_their_verbs(verbs: Verbs) -> None:
    assert verbs.kinds == {"/scheduler/filter": "filter", "/scheduler/prioritize": "prioritize",
                           "/scheduler/preempt": "preempt", "/scheduler/bind": "bind"}


def test_filter_and_prioritize_are_answered(verbs: Verbs) -> None:
    status, raw, record = verbs.answer("filter", args(["n1", "n2", "ghost"]))
    assert status == 200 and callable(record)
    reply = orjson.loads(orjson.dumps(raw))  # parts of the reply come serialized
    assert reply["NodeNames"] == ["n1", "n2"] and list(reply["FailedNodes"]) == ["ghost"] and reply["Error"] == ""
    status, reply, _ = verbs.answer("prioritize", args(["n1", "n2"]))
    assert status == 200 and [h["Host"] for h in orjson.loads(orjson.dumps(reply))] == ["n1", "n2"]


def _body(pod: dict[str, Any], names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def _prioritize(verbs: Verbs, pod: dict[str, Any], names: list[str]) -> tuple[int, Any]:
    status, reply, _ = verbs.answer("prioritize", _body(pod, names))
    return status, orjson.loads(orjson.dumps(reply))


def test_prioritize_after_filter_judges_the_pod_it_is_sent(verbs: Verbs) -> None:
    """Filter's parse of the pod serves the prioritize that follows only for the same pod: one
    that differs - in its requests, or only in a type Python's == does not tell apart - is
    judged (or refused) as sent."""
    pod = make_pod("p").req(gpu=1).obj()
    assert verbs.answer("filter", _body(pod, ["n1", "n2"]))[0] == 200
    status, reply = _prioritize(verbs, pod, ["n1", "n2"])
    assert status == 200
    asks_two = copy.deepcopy(pod)  # the same pod, asking for two GPUs: n2 offers one
    asks_two["spec"]["containers"][0]["resources"] = {"requests": {GPU: "2"}, "limits": {GPU: "2"}}
    status, twice = _prioritize(verbs, asks_two, ["n1", "n2"])
    assert status == 200 and twice != reply and twice[1] == {"Host": "n2", "Score": 0}
    pod["spec"]["priority"] = 1
    for odd in (1.0, True):  # == 1 in Python, not an integer priority on the wire
        mistyped = copy.deepcopy(pod)
        mistyped["spec"]["priority"] = odd
        assert mistyped == pod
        assert verbs.answer("filter", _body(pod, ["n1"]))[0] == 200
        status, refused = _prioritize(verbs, mistyped, ["n1"])
        assert status == 400 and "priority" in refused["message"]


def _pair(verbs: Verbs, pod: dict[str, Any], names: list[str]) -> tuple[list[str], list[Any]]:
    """Filter then prioritize as kube-scheduler asks them (the filter's record called, as the
    transport does once the answer is sent)."""
    status, reply, record = verbs.answer("filter", _body(pod, names))
    record()
    status, scores = _prioritize(verbs, pod, reply["NodeNames"])
    assert status == 200
    return reply["NodeNames"], scores


def test_scores_made_ahead_are_what_prioritize_computes_on_the_cluster_it_sees(make_app: Any) -> None:
    """Once prioritize follows filter with its feasible nodes, each filter's record scores them
    ahead; prioritize answers with those scores only for that very pod, those names and an
    unchanged cluster."""
    app, cluster = make_app([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=2).obj()])
    verbs = app.wsgi_app.verbs
    first = make_pod("first").req(gpu=1).obj()
    assert _pair(verbs, first, ["n1", "n2"])[1] == [{"Host": "n1", "Score": 3}, {"Host": "n2", "Score": 5}]
    assert verbs._ahead_reply[0] is None  # nothing scored ahead before a prioritize followed a filter

    pod = make_pod("p").req(gpu=1).obj()
    status, reply, record = verbs.answer("filter", _body(pod, ["n1", "n2"]))
    record()
    assert verbs._ahead_reply[0] is not None  # scored ahead
    assert _prioritize(verbs, pod, ["n1", "n2"])[1] == [{"Host": "n1", "Score": 3}, {"Host": "n2", "Score": 5}]

    asks_two = copy.deepcopy(pod)  # the same pod asking for two GPUs
    asks_two["spec"]["containers"][0]["resources"] = {"requests": {GPU: "2"}, "limits": {GPU: "2"}}
    for change, asked, names, expected in [
        # another pod lands on n1 after the filter: n1 is fuller now (3 of 4 with this one)
        (lambda: cluster.add_pod(make_pod("q").req(gpu=2).node("n1").obj()), pod, ["n1", "n2"], [8, 5]),
        (lambda: None, pod, ["n2"], [5]),  # not the names filter found
        (lambda: None, pod, ["n2", "n1"], [5, 8]),  # nor in their order
        (lambda: None, asks_two, ["n1", "n2"], [10, 10]),  # another pod (its own text)
    ]:
        _pair(verbs, first, ["n1", "n2"])  # prioritize follows filter again
        before = verbs._ahead_reply[0]
        status, reply, record = verbs.answer("filter", _body(pod, ["n1", "n2"]))
        record()
        assert reply["NodeNames"] == ["n1", "n2"] and verbs._ahead_reply[0] is not before  # scored ahead
        change()
        _, scores = _prioritize(verbs, asked, names)
        assert [s["Score"] for s in scores] == expected and [s["Host"] for s in scores] == names


@pytest.mark.parametrize("kind, body, outcome", [
    ("filter", None, "feasible"),
    ("filter", b"not json", "bad_request"),
    ("prioritize", b'{"Pod": 5}', "bad_request"),
], ids=["answered", "bad json", "bad pod"])
def test_a_request_is_logged_and_counted_only_when_its_record_is_called(verbs: Verbs, kind: str, body: Any,
                                                                       outcome: str) -> None:
    before = _count(verbs, kind, outcome)
    *_, record = verbs.answer(kind, body if body is not None else args(["n1"]))
    assert _count(verbs, kind, outcome) == before
    record()
    assert _count(verbs, kind, outcome) == before + 1


@pytest.mark.parametrize("kind, body, message", [
    ("filter", b"not json", "request body is not valid JSON"),
    ("filter", b"", "empty request body"),
    ("prioritize", b'{"Pod": 5}', "Pod"),
    ("bind", b'{"PodName": 5}', "PodName"),
], ids=["bad json", "empty body", "bad pod", "bad bind"])
def test_bad_input_is_a_400_answered_where_it_is_found(verbs: Verbs, kind: str, body: bytes, message: str) -> None:
    status, reply, _ = verbs.answer(kind, body)
    assert status == 400 and reply["error"] == "bad request" and message in reply["message"]


def test_a_follower_answers_503(verbs: Verbs) -> None:
    verbs.serving = lambda: False
    status, reply, record = verbs.answer("filter", args(["n1"]))
    assert status == 503 and reply["error"] == "not the leader"
    record()
    assert _count(verbs, "filter", "not_leader") == 1


def test_a_handler_that_fails_runs_once_and_is_answered(app: Any, verbs: Verbs,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure inside a verb is its answer (prioritize: 500), whichever door the request came
    in by: nothing runs the handler again."""
    calls = []

    def boom(*_: Any) -> Any:
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(verbs.engine, "prioritize", boom)
    status, reply, _ = verbs.answer("prioritize", args(["n1"]))
    assert status == 500 and "boom" in reply["message"] and len(calls) == 1
    for query in ("", "?pretty"):  # the WSGI shortcut, then the Flask view
        resp = app.test_client().post(f"/scheduler/prioritize{query}", data=args(["n1"]),
                                      content_type="application/json")
        assert resp.status_code == 500 and "boom" in resp.get_json()["message"]
    assert len(calls) == 3


def _count(verbs: Verbs, verb: str, outcome: str) -> float:
    return sum(s.value for m in verbs.metrics.requests.collect() for s in m.samples
               if s.name.endswith("_total") and s.labels == {"verb": verb, "outcome": outcome})


# ---- the WSGI shortcut ---------------------------------------------------------------------------

def test_a_plain_post_is_answered_without_flask(shortcut: VerbShortcut, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shortcut, "app", None)  # the Flask app: never called
    sent = args(["n1"])
    status, body = _call(shortcut, "POST", "/scheduler/filter", io.BytesIO(sent), str(len(sent)))
    assert status == "200 OK" and json.loads(body)["NodeNames"] == ["n1"]
    status, body = _call(shortcut, "POST", "/scheduler/filter", io.BytesIO(b"nope"), "4")
    assert status == "400 Bad Request" and json.loads(body)["error"] == "bad request"


@pytest.mark.parametrize("method, path, length", [
    ("POST", "/scheduler/nope", 100_000),
    ("PUT", "/scheduler/filter", 100_000),
    ("GET", "/healthz", 5_000),
], ids=["404", "405", "GET with a body"])
def test_a_body_the_app_did_not_read_is_read_after_it_answered(shortcut: VerbShortcut, method: str, path: str,
                                                               length: int) -> None:
    """gunicorn's gthread worker reads at most 64 KiB of a body the app left before the next
    request, else closes a connection it had just answered with keep-alive: the shortcut reads it."""
    stream = io.BytesIO(b"x" * length)
    answer = _call(shortcut, method, path, stream, str(length))
    assert answer[0].split()[0] in ("404", "405", "200") and stream.tell() == length


def test_nothing_past_the_body_is_read(shortcut: VerbShortcut) -> None:
    """A WSGI server may hand over the connection itself (werkzeug's development server does):
    the next request's bytes stay where they are."""
    stream = io.BytesIO(b"x" * 1000 + b"GET /healthz HTTP/1.1\r\n\r\n")
    _call(shortcut, "POST", "/scheduler/nope", stream, "1000")
    assert stream.tell() == 1000


def test_a_body_over_the_limit_is_never_read(shortcut: VerbShortcut) -> None:
    """Announced over the limit: 413 unread (the worker closes the connection instead)."""
    stream = io.BytesIO(b"x" * (shortcut.limit + 10))
    answer = _call(shortcut, "POST", "/scheduler/bind", stream, str(shortcut.limit + 10))
    assert answer[0].startswith("413") and stream.tell() == 0


def test_a_body_shorter_than_announced_is_named_by_the_flask_view(shortcut: VerbShortcut) -> None:
    status, body = _call(shortcut, "POST", "/scheduler/filter", io.BytesIO(b'{"Pod": {}}'), "50")
    assert status.startswith("400") and "ended after 11 of the 50 bytes" in json.loads(body)["message"]


def _call(shortcut: VerbShortcut, method: str, path: str, stream: io.BytesIO, length: str) -> tuple[str, bytes]:
    seen: list[str] = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "x",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": stream, "CONTENT_LENGTH": length,
               "CONTENT_TYPE": "application/json", "wsgi.input_terminated": True}
    body = b"".join(shortcut(environ, lambda status, headers, *_: seen.append(status)))
    return seen[0], body


class _Listing(MemoryCluster):
    """A cluster whose initial lists are still coming in: the node is in, the pod that fills it is
    not (the pods list is paged and slower than the nodes'), and the sink is not synced yet."""

    def start(self, sink: Any) -> None:
        self.sink = sink
        for node in self.nodes():
            sink.upsert_node(node)

    def finish(self) -> None:
        for pod in self.pods():
            self.sink.upsert_pod(pod)
        self.sink.mark_synced()


def test_the_verbs_answer_503_until_the_cache_has_synced() -> None:
    """Without leader election nothing else held them back: a bind onto a node whose pods were not
    listed yet gave the capacity twice (a kube-scheduler calling the extender directly - the
    chart's second-scheduler sidecar - does not go through readiness)."""
    running = make_pod("running").uid("u-running").req(gpu=4).node("n1").obj()
    new = make_pod("new").uid("u-new").req(gpu=4).obj()
    cluster = _Listing(cluster_objects([make_node("n1").alloc(gpu=4).obj()], [running, new]))
    app = create_app(config_of(), source=cluster, background=False)
    verbs = app.wsgi_app.verbs
    filter_body = json.dumps({"Pod": new, "Nodes": None, "NodeNames": ["n1"]}).encode()
    for kind, body in (("filter", filter_body),
                       ("bind", json.dumps({"PodName": "new", "PodNamespace": "default", "PodUID": "u-new",
                                            "Node": "n1"}).encode())):
        status, reply, record = verbs.answer(kind, body)
        assert (status, reply["error"]) == (503, "not synced"), reply
        record()
        assert _count(verbs, kind, "not_synced") == 1
    assert cluster.get_pod("default", "new")["spec"].get("nodeName") is None
    cluster.finish()
    status, reply, _ = verbs.answer("filter", filter_body)
    assert status == 200 and reply["NodeNames"] == [] and "n1" in orjson.loads(orjson.dumps(reply["FailedNodes"]))


def test_the_loops_decide_nothing_until_the_cache_has_synced() -> None:
    """Admission, nudges and orphan collection act on the cache too (lift gates, patch pods): on
    a partial view admission would lift the gates of more pods than fit."""
    from extender.lifecycle import Lifecycle

    class Recording(Lifecycle):
        started: dict[str, tuple[Any, ...]] = {}

        def start(self, name: str, target: Any, *args: Any) -> Any:
            self.started[name] = args
            return None

    cluster = _Listing(cluster_objects([make_node("n1").alloc(gpu=4).obj()], []))
    lifecycle = Recording()
    create_app(config_of(admission={}), source=cluster, lifecycle=lifecycle)
    deciding = {"admission": lifecycle.started["admission"][1], "nudger": lifecycle.started["nudger"][0],
                "orphan-collector": lifecycle.started["orphan-collector"][1]}
    assert {name: leading() for name, leading in deciding.items()} == dict.fromkeys(deciding, False)
    cluster.finish()
    assert {name: leading() for name, leading in deciding.items()} == dict.fromkeys(deciding, True)
