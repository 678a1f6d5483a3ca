"""The fast lane's pieces without a server: which request heads it frames itself, the reply head
it writes, when it is on, and HotVerbs.respond (the decision it shares with the WSGI path).
Over real HTTP: tests/integration/test_fastlane_http.py."""

from __future__ import annotations

import email.utils
import io
import json
from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_node, make_pod

from extender.api.fastlane import Head, lane_of, parse_head, reply_head
from extender.api.routes import HotVerbs

GO_HEAD = (b"POST /scheduler/filter HTTP/1.1\r\nHost: 127.0.0.1:8888\r\nUser-Agent: Go-http-client/1.1\r\n"
           b"Content-Length: 17433\r\nContent-Type: application/json\r\nAccept-Encoding: gzip")


@pytest.mark.parametrize("head, expected", [
    (GO_HEAD, Head("POST", "/scheduler/filter", 17433, False)),
    (b"POST /scheduler/prioritize HTTP/1.1\r\nhost: x\r\ncontent-length: 2", Head("POST", "/scheduler/prioritize", 2, False)),
    (b"GET /healthz HTTP/1.1\r\nHost: x", Head("GET", "/healthz", 0, False)),
    (b"GET /metrics?name=x HTTP/1.1", Head("GET", "/metrics?name=x", 0, False)),
    (b"POST /a HTTP/1.1\r\nContent-Length: 5\r\nConnection: close", Head("POST", "/a", 5, True)),
    (b"POST /a HTTP/1.1\r\nConnection: Keep-Alive\r\nContent-Length:5", Head("POST", "/a", 5, False)),
    (b"POST /a HTTP/1.1\r\nX-Note:  two  words \t\r\nContent-Length: 0", Head("POST", "/a", 0, False)),
    (b"POST /a HTTP/1.1\r\nX-Empty:\r\nContent-Length: 1", Head("POST", "/a", 1, False)),
], ids=["go client", "lower-case names", "no body", "query string", "connection close", "keep-alive any case",
        "spaces inside a value", "empty value"])
def test_plain_heads_are_framed(head: bytes, expected: Head) -> None:
    assert parse_head(head) == expected


@pytest.mark.parametrize("head", [
    b"POST /a HTTP/1.0\r\nContent-Length: 1",
    b"POST /a HTTP/2\r\nContent-Length: 1",
    b"post /a HTTP/1.1\r\nContent-Length: 1",
    b"POST http://x/a HTTP/1.1\r\nContent-Length: 1",
    b"POST  /a HTTP/1.1\r\nContent-Length: 1",
    b"POST /a b HTTP/1.1\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked",
    b"POST /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked",
    b"POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nContent-Length: -1",
    b"POST /a HTTP/1.1\r\nContent-Length: 1e3",
    b"POST /a HTTP/1.1\r\nContent-Length: 12345678901234567890",
    b"POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1",
    b"GET /a HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings",
    b"POST /a HTTP/1.1\r\nConnection: keep-alive, te\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nX-Folded: a\r\n continued\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nBad Name: 1\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nX-Bare-LF: a\nb: c\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nX-Nul: a\x00b\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\nNo-Colon\r\nContent-Length: 1",
    b"POST /a HTTP/1.1\r\n\r\nContent-Length: 1",
    b"POST /" + b"a" * 5000 + b" HTTP/1.1",
    b"POST /a HTTP/1.1\r\nX-Long: " + b"v" * 9000,
    b"POST /a HTTP/1.1" + b"\r\nX: 1" * 101,
], ids=["HTTP/1.0", "HTTP/2", "lower-case method", "absolute form", "double space", "space in target",
        "chunked", "length and chunked", "two lengths", "negative length", "not digits", "huge length",
        "expect 100-continue", "upgrade", "connection tokens", "obsolete folding", "space in a name", "bare LF",
        "control character", "no colon", "empty line inside", "request line over the limit", "field over the limit",
        "too many fields"])
def test_anything_else_is_left_to_gunicorn(head: bytes) -> None:
    assert parse_head(head) is None


def test_limits_of_zero_mean_unlimited() -> None:
    long = b"POST /" + b"a" * 5000 + b" HTTP/1.1\r\nX-Long: " + b"v" * 9000 + b"\r\nX: 1" * 101
    assert parse_head(long, 0, 0, 0) == Head("POST", "/" + "a" * 5000, 0, False)


def test_reply_head_is_one_complete_http_head() -> None:
    head = reply_head(200, "OK", 1234, close=False).decode("latin-1")
    assert head.endswith("\r\n\r\n")
    lines = head[:-4].split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Content-Type"] == "application/json" and fields["Content-Length"] == "1234"
    assert fields["Connection"] == "keep-alive" and fields["Server"]
    assert email.utils.parsedate_to_datetime(fields["Date"]).tzname() == "UTC"
    assert b"Connection: close\r\n" in reply_head(500, "Internal Server Error", 0, close=True)


def settings(**overrides: Any) -> Any:
    return SimpleNamespace(**{"keepalive": 90, "http_protocols": ["h1"], "protocol": "http", "proxy_protocol": "off",
                              **overrides})


@pytest.mark.parametrize("overrides, on", [
    ({}, True),
    ({"keepalive": 0}, False),
    ({"http_protocols": ["h2", "h1"]}, False),
    ({"protocol": "uwsgi"}, False),
    ({"proxy_protocol": "v1"}, False),
    ({"proxy_protocol": True}, False),
    ({"proxy_protocol": False}, True),
], ids=["defaults", "no keep-alive", "http/2", "uwsgi", "proxy protocol", "proxy protocol (old bool)",
        "proxy protocol off (old bool)"])
def test_lane_is_on_only_where_it_speaks_the_protocol(make_app: Any, overrides: dict[str, Any], on: bool) -> None:
    app, _ = make_app([make_node("n1").alloc(gpu=4).obj()])
    assert (lane_of(app, settings(**overrides)) is app.wsgi_app) is on
    assert lane_of(object(), settings()) is None


# ---- HotVerbs.respond -----------------------------------------------------------------------

def args(names: list[str]) -> bytes:
    return json.dumps({"Pod": make_pod("p").req(gpu=1).obj(), "Nodes": None, "NodeNames": names}).encode()


@pytest.fixture
def hot(make_app: Any) -> HotVerbs:
    app, _ = make_app([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()])
    lane = app.wsgi_app
    assert isinstance(lane, HotVerbs)
    return lane


def test_respond_answers_filter_and_prioritize(hot: HotVerbs) -> None:
    status, data, record = hot.respond("/scheduler/filter", args(["n1", "n2", "ghost"])) or (0, b"", None)
    assert status == 200 and callable(record)
    reply = json.loads(data)
    assert reply["NodeNames"] == ["n1", "n2"] and list(reply["FailedNodes"]) == ["ghost"] and reply["Error"] == ""
    status, data, _ = hot.respond("/scheduler/prioritize", args(["n1", "n2"])) or (0, b"", None)
    assert status == 200 and [h["Host"] for h in json.loads(data)] == ["n1", "n2"]


def test_respond_logs_and_counts_only_when_the_record_is_called(hot: HotVerbs) -> None:
    metrics = _metrics_of(hot)
    before = _count(metrics, "filter")
    answer = hot.respond("/scheduler/filter", args(["n1"]))
    assert answer is not None and _count(metrics, "filter") == before
    answer[2]()
    assert _count(metrics, "filter") == before + 1


def test_respond_binds_and_leaves_a_bad_bind_to_flask(make_app: Any) -> None:
    app, cluster = make_app([make_node("n1").alloc(gpu=4).obj()], [make_pod("p").uid("uid-p").req(gpu=1).obj()])
    hot = app.wsgi_app
    assert hot.respond("/scheduler/bind", b'{"PodName": "p", "Node": 5}') is None  # Flask answers the 400
    assert not cluster.get_pod("default", "p")["spec"].get("nodeName")
    body = json.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n1"}).encode()
    status, data, record = hot.respond("/scheduler/bind", body) or (0, b"", None)
    assert status == 200 and json.loads(data) == {"Error": ""} and callable(record)
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize("path, body", [
    ("/scheduler/preempt", args(["n1"])),
    ("/scheduler/filter?pretty", args(["n1"])),
    ("/scheduler/filter", b"not json"),
    ("/scheduler/filter", b""),
    ("/scheduler/prioritize", b'{"Pod": 5}'),
], ids=["not a hot verb", "query string", "bad json", "empty body", "bad pod"])
def test_respond_leaves_everything_else_to_flask(hot: HotVerbs, path: str, body: bytes) -> None:
    assert hot.respond(path, body) is None


def test_respond_leaves_a_follower_to_flask(hot: HotVerbs) -> None:
    hot.serving = lambda: False
    assert hot.respond("/scheduler/filter", args(["n1"])) is None


def _metrics_of(hot: HotVerbs) -> Any:
    app = getattr(hot.app, "__self__")  # Flask.wsgi_app, bound to the app
    return app.extensions["kube_extender"].metrics


def _count(metrics: Any, verb: str) -> float:
    return sum(s.value for m in metrics.requests.collect() for s in m.samples
               if s.name.endswith("_total") and s.labels.get("verb") == verb)


# ---- HotVerbs as WSGI middleware ---------------------------------------------------------------

@pytest.mark.parametrize("method, path, length", [
    ("POST", "/scheduler/nope", 100_000),
    ("PUT", "/scheduler/filter", 100_000),
    ("GET", "/healthz", 5_000),
], ids=["404", "405", "GET with a body"])
def test_a_body_the_app_did_not_read_is_read_after_it_answered(hot: HotVerbs, method: str, path: str,
                                                               length: int) -> None:
    """gunicorn's gthread worker reads at most 64 KiB of a body the app left before the next
    request, else closes a connection it had just answered with keep-alive: the lane reads it."""
    stream = io.BytesIO(b"x" * length)
    answer = _call(hot, method, path, stream, str(length))
    assert answer[0].split()[0] in ("404", "405", "200") and stream.tell() == length


def test_nothing_past_the_body_is_read(hot: HotVerbs) -> None:
    """A WSGI server may hand over the connection itself (werkzeug's development server does):
    the next request's bytes stay where they are."""
    stream = io.BytesIO(b"x" * 1000 + b"GET /healthz HTTP/1.1\r\n\r\n")
    _call(hot, "POST", "/scheduler/nope", stream, "1000")
    assert stream.tell() == 1000


def test_a_body_over_the_limit_is_never_read(hot: HotVerbs) -> None:
    """Announced over the limit: 413 unread (the worker closes the connection instead)."""
    stream = io.BytesIO(b"x" * (hot.limit + 10))
    answer = _call(hot, "POST", "/scheduler/bind", stream, str(hot.limit + 10))
    assert answer[0].startswith("413") and stream.tell() == 0


def _call(hot: HotVerbs, method: str, path: str, stream: io.BytesIO, length: str) -> tuple[str, bytes]:
    seen: list[str] = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "x",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": stream, "CONTENT_LENGTH": length,
               "CONTENT_TYPE": "application/json"}
    body = b"".join(hot(environ, lambda status, headers, *_: seen.append(status)))
    return seen[0], body
