"""The fast lane's HTTP/1.1 connections (``extender.api.http1``) without a server process: a real
socket pair, the connection served in a thread, requests written byte for byte - split,
pipelined, chunked, with ``Expect: 100-continue``, over the limits - and the replies read back in
order. And the worker's choices that need no server. Over real HTTP with gunicorn:
tests/integration/test_fastlane_http.py; generated: tests/integration/test_wire_fuzz_http.py."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from builders import make_node, make_pod
from gunicorn.config import Config

from extender.api.fastlane import FastLaneWorker, tls_context, unspoken
from extender.api.http1 import Connection, Limits, base_environ, reply_head
from extender.api.routes import VerbShortcut

LIMIT = 4096


def args(name: str = "p", names: tuple[str, ...] = ("n1", "n2")) -> bytes:
    return json.dumps({"Pod": make_pod(name).req(gpu=1).obj(), "Nodes": None, "NodeNames": list(names)},
                      separators=(",", ":")).encode()


def post(path: str, body: bytes, *extra: str, version: str = "HTTP/1.1", length: int | None = None) -> bytes:
    head = [f"POST {path} {version}", "Host: 127.0.0.1", "User-Agent: Go-http-client/1.1",
            *([] if length == -1 else [f"Content-Length: {len(body) if length is None else length}"]),
            "Content-Type: application/json", "Accept-Encoding: gzip", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7) -> bytes:
    return b"".join(b"%x\r\n" % len(body[i:i + size]) + body[i:i + size] + b"\r\n"
                    for i in range(0, len(body), size)) + b"0\r\n\r\n"


class Lane:
    """One connection of the fast lane on a socket pair: ``send`` writes, ``reply`` reads the next
    reply, ``closed`` tells whether the server side ended."""

    def __init__(self, app: Any, limits: Limits, answered: Any = None) -> None:
        ours, theirs = socket.socketpair()
        ours.settimeout(10)
        self.sock, self.buf = ours, b""
        shortcut = app.wsgi_app
        assert isinstance(shortcut, VerbShortcut)
        self.connection = Connection(theirs, ("127.0.0.1", 40000), app, shortcut.verbs, limits,
                                     base_environ("127.0.0.1", 8888, "http"), answered or (lambda: True))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.connection.serve()
        finally:
            self.connection.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def reply(self, bodiless: bool = False) -> tuple[int, dict[str, str], bytes]:
        """The next reply; ``bodiless``: the answer to a HEAD (a Content-Length, no body)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = 0 if bodiless else int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        self.thread.join(10)
        return not self.thread.is_alive() and not self.buf and self.sock.recv(1) == b""


@pytest.fixture
def app(make_app: Any) -> Any:
    built, _ = make_app([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=1).obj()],
                        server={"maxRequestBytes": LIMIT})
    return built


@pytest.fixture
def lane(app: Any) -> Iterator[Lane]:
    opened = Lane(app, Limits(body=LIMIT))
    yield opened
    opened.sock.close()


def test_pipelined_requests_are_answered_in_order_on_one_connection(lane: Lane) -> None:
    lane.send(post("/scheduler/filter", args()) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
              + post("/scheduler/prioritize", args()) + post("/scheduler/filter", b"not json")
              + post("/scheduler/filter?pretty", args()))
    status, headers, body = lane.reply()
    assert status == 200 and json.loads(body)["NodeNames"] == ["n1", "n2"]
    assert headers["connection"] == "keep-alive" and headers["content-type"] == "application/json"
    assert email.utils.parsedate_to_datetime(headers["date"]).tzname() == "UTC"
    assert lane.reply()[::2] == (200, b'{"status":"ok"}')
    status, _, body = lane.reply()
    assert status == 200 and [h["Host"] for h in json.loads(body)] == ["n1", "n2"]
    status, _, body = lane.reply()
    assert status == 400 and json.loads(body)["error"] == "bad request"
    status, _, body = lane.reply()
    assert status == 200 and body.startswith(b"{\n  ")
    lane.thread.join(0.05)
    assert lane.thread.is_alive(), "the connection is kept"


def test_a_verb_that_fails_is_answered_by_the_lane_once(lane: Lane, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def boom(*_: Any) -> Any:
        calls.append(1)
        raise RuntimeError("boom")

    assert lane.connection.verbs is not None
    monkeypatch.setattr(lane.connection.verbs.engine, "prioritize", boom)
    lane.send(post("/scheduler/prioritize", args()) + post("/scheduler/prioritize", b'{"Pod": 5}'))
    status, _, body = lane.reply()
    assert status == 500 and "boom" in json.loads(body)["message"]
    assert lane.reply()[0] == 400
    assert calls == [1], "the failing handler ran once, the refused one not at all"


@pytest.mark.parametrize("piece", [1, 7, 100], ids=["byte by byte", "7 bytes", "100 bytes"])
def test_a_request_split_across_reads(lane: Lane, piece: int) -> None:
    data = post("/scheduler/filter", args())
    for i in range(0, len(data), piece):
        lane.send(data[i:i + piece])
    status, _, body = lane.reply()
    assert status == 200 and json.loads(body)["NodeNames"] == ["n1", "n2"]


def test_a_chunked_body_is_answered_then_the_connection_closes(lane: Lane) -> None:
    lane.send(post("/scheduler/filter", chunked(args()), "Transfer-Encoding: chunked", length=-1))
    status, headers, body = lane.reply()
    assert status == 200 and json.loads(body)["NodeNames"] == ["n1", "n2"] and headers["connection"] == "close"
    assert lane.closed()


def test_expect_100_continue_is_asked_for_the_body(lane: Lane) -> None:
    body = args()
    lane.send(post("/scheduler/filter", b"", "Expect: 100-continue", length=len(body)))
    assert lane.reply()[0] == 100
    lane.send(body)
    status, _, reply = lane.reply()
    assert status == 200 and json.loads(reply)["NodeNames"] == ["n1", "n2"]


@pytest.mark.parametrize("request_bytes, status, message", [
    (post("/scheduler/filter", b"", length=LIMIT + 1), 413, f"limit of {LIMIT} bytes"),
    (post("/scheduler/filter", b"", "Expect: 100-continue", length=LIMIT + 1), 413, f"limit of {LIMIT} bytes"),
    (post("/scheduler/filter", chunked(b" " * (LIMIT + 1), 1000), "Transfer-Encoding: chunked", length=-1), 413,
     f"limit of {LIMIT} bytes"),
    (post("/scheduler/filter", b"{}", "Expect: 200-ok"), 417, "200-ok"),
    (post("/scheduler/filter", b"{}", "Transfer-Encoding: gzip", length=-1), 501, "gzip"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked, gzip", length=-1), 400,
     "Invalid `Transfer-Encoding`"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked", "Transfer-Encoding: gzip", length=-1),
     400, "Invalid `Transfer-Encoding`"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked, chunked", length=-1), 400,
     "Invalid `Transfer-Encoding`"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked", "Transfer-Encoding: chunked",
          length=-1), 400, "Invalid `Transfer-Encoding`"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked\t, gzip", length=-1), 400, "a tab"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked\t", length=-1), 400, "a tab"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked", length=-1, version="HTTP/1.0"), 400,
     "HTTP/1.0"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked", "Transfer-Encoding: br", length=-1),
     400, "Transfer-Encoding"),
    (post("/scheduler/filter", chunked(b"{}"), "Transfer-Encoding: chunked,", length=-1), 400, "Transfer-Encoding"),
    (post("/scheduler/filter", b"{}", version="HTTP/2.0"), 400, "HTTP Version"),
    (post("/scheduler/filter", b"{}", "Bad Name: x"), 400, "Invalid header token"),
    (post("/scheduler/filter", b"zz\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding: chunked", length=-1), 400,
     "request body could not be read"),
    (post("/scheduler/filter?" + "a" * 5000, b"{}"), 414, "Request Line is too large"),
    (post("/scheduler/filter", b"{}", *[f"X-H{i}: {i}" for i in range(101)]), 431, "limit request headers fields"),
    (post("/scheduler/filter", b"{}", "X-Long: " + "v" * 9000), 431, "limit request headers fields size"),
], ids=["over the limit", "over the limit, expecting 100", "chunked over the limit", "other expectation",
        "transfer coding", "chunked not last", "chunked not last, two headers", "chunked twice",
        "chunked twice, two headers", "chunked, tab, gzip", "chunked, tab", "HTTP/1.0 chunked",
        "chunked then unknown, two headers", "empty element",
        "HTTP/2.0", "header name", "broken chunks", "target too long", "too many headers",
        "header too long"])
def test_what_the_connection_refuses_is_json_and_closes_it(lane: Lane, request_bytes: bytes, status: int,
                                                          message: str) -> None:
    lane.send(request_bytes)
    got, headers, body = lane.reply()
    assert got == status and headers["connection"] == "close" and headers["content-type"] == "application/json"
    payload = json.loads(body)
    assert set(payload) == {"error", "message"} and message in payload["message"], payload
    assert lane.closed()


def test_requests_before_a_refused_one_are_still_answered(lane: Lane) -> None:
    lane.send(post("/scheduler/filter", args()) + b"HELLO\r\n\r\n")
    assert lane.reply()[0] == 200
    status, _, body = lane.reply()
    assert status == 400 and "Invalid method" in json.loads(body)["message"]
    assert lane.closed()


def test_a_head_that_never_ends_is_refused(app: Any) -> None:
    lane = Lane(app, Limits(line=0, fields=0, field_size=0, body=LIMIT))  # no per-line limits: the head's
    lane.send(b"POST /scheduler/filter HTTP/1.1\r\n")
    with pytest.raises((EOFError, ConnectionError)):
        for _ in range(100):
            lane.send(b"X-A: " + b"v" * 65536 + b"\r\n")
    assert lane.buf.startswith(b"HTTP/1.1 431") or lane.reply()[0] == 431


@pytest.mark.parametrize("request_bytes", [
    post("/scheduler/prioritize", args(), "Connection: close"),
    post("/scheduler/prioritize", args(), version="HTTP/1.0"),
    b"GET /healthz HTTP/1.0\r\n\r\n",
], ids=["connection close", "HTTP/1.0 verb", "HTTP/1.0 to Flask"])
def test_the_connection_closes_when_the_client_says_so(lane: Lane, request_bytes: bytes) -> None:
    lane.send(request_bytes)
    status, headers, _ = lane.reply()
    assert status == 200 and headers["connection"] == "close"
    assert lane.closed()


def test_the_connection_closes_when_the_worker_stops_or_restarts(app: Any) -> None:
    left = [2]

    def answered() -> bool:
        left[0] -= 1
        return left[0] > 0

    lane = Lane(app, Limits(body=LIMIT), answered)
    lane.send(post("/scheduler/filter", args()) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert lane.reply()[1]["connection"] == "keep-alive"
    assert lane.reply()[1]["connection"] == "close"
    assert lane.closed()


def test_without_keep_alive_every_answer_closes(app: Any) -> None:
    lane = Lane(app, Limits(body=LIMIT))
    lane.connection.keepalive = False  # gunicorn's keepalive: 0
    lane.send(post("/scheduler/filter", args()))
    assert lane.reply()[1]["connection"] == "close"
    assert lane.closed()


def _waiting(lane: Lane, idle: bool) -> None:
    for _ in range(500):
        if lane.connection.waiting and lane.connection.idle is idle:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the connection did not come to wait")


@pytest.mark.parametrize("sent, idle, stalled, ends", [
    (b"", 5.0, 100.0, True),  # waited for a request longer than the keep-alive limit
    (b"", 100.0, 5.0, False),  # not yet
    (b"POST /scheduler/filter HTTP/1.1\r\nHost", 100.0, 5.0, True),  # stuck mid-request
    (b"POST /scheduler/filter HTTP/1.1\r\nHost", 5.0, 100.0, False),  # mid-request is not idle
], ids=["idle, past", "idle, within", "mid-request, past", "mid-request, within"])
def test_a_connection_that_waits_on_its_client_too_long_ends_at_the_sweep(lane: Lane, sent: bytes, idle: float,
                                                                          stalled: float, ends: bool) -> None:
    """The worker asks each connection now and then (``Connection.expire``) instead of a timeout
    on every read: one that has waited on its client longer than the limit for what it waits
    for ends; the others go on."""
    lane.send(post("/scheduler/filter", args()))
    assert lane.reply()[0] == 200
    lane.send(sent)
    _waiting(lane, idle=not sent)
    assert lane.connection.expire(lane.connection.since + 10, idle, stalled) is ends
    if ends:
        assert lane.closed()
    else:
        lane.send(post("/scheduler/filter", args())[len(sent):])
        assert lane.reply()[0] == 200


def test_a_connection_working_on_an_answer_is_never_expired(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bind held in Permit may take minutes: the connection waits on the engine, not on its client."""
    working, go_on = threading.Event(), threading.Event()
    verbs = app.wsgi_app.verbs
    answer = verbs.answer

    def slow(*a: Any, **k: Any) -> Any:
        working.set()
        go_on.wait(10)
        return answer(*a, **k)

    monkeypatch.setattr(verbs, "answer", slow)
    lane = Lane(app, Limits(body=LIMIT))
    lane.send(post("/scheduler/filter", args()))
    assert working.wait(10)
    assert lane.connection.expire(lane.connection.since + 1000, 1.0, 1.0) is False
    go_on.set()
    assert lane.reply()[0] == 200


def test_an_idle_connection_is_closed_when_the_worker_stops(lane: Lane) -> None:
    lane.send(post("/scheduler/filter", args()))
    assert lane.reply()[0] == 200
    for _ in range(500):  # the worker tries every 0.1 s while it stops
        lane.connection.close_if_idle()
        if not lane.thread.is_alive():
            break
        threading.Event().wait(0.01)
    assert lane.closed()


def test_a_connection_in_the_middle_of_a_request_is_not_idle(lane: Lane) -> None:
    data = post("/scheduler/filter", args())
    lane.send(data[:50])
    for _ in range(100):
        if not lane.connection.idle:
            break
        threading.Event().wait(0.01)
    lane.connection.close_if_idle()
    lane.send(data[50:])
    assert lane.reply()[0] == 200


def test_a_client_that_leaves_mid_request_ends_the_connection(lane: Lane) -> None:
    lane.send(post("/scheduler/filter", args())[:-10])
    lane.sock.shutdown(socket.SHUT_WR)
    assert lane.closed()


@pytest.mark.parametrize("request_bytes, status, body", [
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, b'{"status":"ok"}'),
    (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, b""),
    (b"GET /debug/../healthz HTTP/1.1\r\n\r\n", 404, None),
    (post("/scheduler/%66ilter", args()), 200, None),
    (post("http://127.0.0.1/scheduler/filter", args()), 200, None),
    (b"GET /scheduler/filter HTTP/1.1\r\n\r\n", 405, None),
], ids=["get", "head", "dot segments", "percent-encoded path", "absolute form", "405"])
def test_everything_else_is_the_flask_apps(lane: Lane, request_bytes: bytes, status: int, body: bytes | None) -> None:
    lane.send(request_bytes)
    got, headers, reply = lane.reply(bodiless=request_bytes.startswith(b"HEAD"))
    assert got == status and headers["content-type"].startswith("application/json")
    if body is not None:
        assert reply == body
    if request_bytes.startswith(b"HEAD"):
        assert int(headers["content-length"]) == len(b'{"status":"ok"}')
        lane.send(b"GET /healthz HTTP/1.1\r\n\r\n")  # and nothing else came before the next reply
        assert lane.reply()[::2] == (200, b'{"status":"ok"}')


def test_the_wsgi_environ(app: Any) -> None:
    lane = Lane(app, Limits(body=LIMIT))
    seen: dict[str, Any] = {}

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        seen.update(environ, body=environ["wsgi.input"].read())
        start_response("204 No Content", [("X-Reply", "yes"), ("Connection", "upgrade")])
        return []

    lane.connection.app = wsgi
    lane.send(b"PUT /a%2Fb/c?x=1&y HTTP/1.1\r\nHost: ext:8888\r\nContent-Type: text/plain\r\nX-Forwarded-For: a\r\n"
              b"X_Forwarded_For: b\r\nAccept: x\r\nAccept: y\r\nContent-Length: 2\r\n\r\nhi")
    status, headers, _ = lane.reply()
    assert status == 204 and headers["x-reply"] == "yes" and headers["connection"] == "keep-alive"
    assert {k: seen[k] for k in ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "RAW_URI", "CONTENT_TYPE",
                                 "CONTENT_LENGTH", "HTTP_HOST", "HTTP_X_FORWARDED_FOR", "HTTP_ACCEPT",
                                 "SERVER_PROTOCOL", "REMOTE_ADDR", "wsgi.url_scheme", "body")} == {
        "REQUEST_METHOD": "PUT", "PATH_INFO": "/a/b/c", "QUERY_STRING": "x=1&y", "RAW_URI": "/a%2Fb/c?x=1&y",
        "CONTENT_TYPE": "text/plain", "CONTENT_LENGTH": "2", "HTTP_HOST": "ext:8888", "HTTP_X_FORWARDED_FOR": "a",
        "HTTP_ACCEPT": "x,y", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "wsgi.url_scheme": "http",
        "body": b"hi"}


def test_an_app_that_fails_is_a_500_for_that_request_only(app: Any) -> None:
    lane = Lane(app, Limits(body=LIMIT))

    def broken(environ: dict[str, Any], start_response: Any) -> Any:
        raise RuntimeError("boom")

    lane.connection.app = broken
    lane.send(b"GET /healthz HTTP/1.1\r\n\r\n")
    status, headers, body = lane.reply()
    assert status == 500 and headers["connection"] == "close" and json.loads(body)["error"] == "internal server error"
    assert lane.closed()


def test_reply_head_is_one_complete_http_head() -> None:
    head = reply_head(200, 1234, close=False).decode("latin-1")
    assert head.endswith("\r\n\r\n")
    lines = head[:-4].split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Content-Type"] == "application/json" and fields["Content-Length"] == "1234"
    assert fields["Connection"] == "keep-alive" and fields["Server"]
    assert b"Connection: close\r\n" in reply_head(500, 0, close=True)


# ---- the worker's choices ------------------------------------------------------------------------

def settings(**overrides: Any) -> Any:
    return SimpleNamespace(**{"http_protocols": ["h1"], "protocol": "http", "proxy_protocol": "off", **overrides})


@pytest.mark.parametrize("overrides, refused", [
    ({}, ""),
    ({"http_protocols": ["h2", "h1"]}, "HTTP/2"),
    ({"protocol": "uwsgi"}, "the uwsgi protocol"),
    ({"proxy_protocol": "v1"}, "the PROXY protocol"),
    ({"proxy_protocol": True}, "the PROXY protocol"),
    ({"proxy_protocol": False}, ""),
], ids=["defaults", "http/2", "uwsgi", "proxy protocol", "proxy protocol (old bool)", "proxy protocol off (old bool)"])
def test_the_worker_refuses_what_it_does_not_speak(overrides: dict[str, Any], refused: str) -> None:
    assert unspoken(settings(**overrides)) == refused


def test_tls_goes_through_gunicorns_ssl_context_hook() -> None:
    made: list[Any] = []

    def hook(cfg: Any, default: Any) -> Any:
        made.append(cfg)
        return "context"

    cfg = SimpleNamespace(ssl_context=hook)
    assert tls_context(cfg) == "context" and made == [cfg]


def worker(**settings: Any) -> tuple[FastLaneWorker, list[str]]:
    """A worker under gunicorn ``settings`` (not started), and what it logs at info."""
    cfg = Config()
    for name, value in settings.items():
        cfg.set(name, value)
    logged: list[str] = []
    log = SimpleNamespace(info=lambda msg, *args: logged.append(msg % args))
    return FastLaneWorker(0, 1, [], None, 30, cfg, log), logged


def test_max_requests_stops_the_worker_after_the_last_answer() -> None:
    fast, logged = worker(max_requests=3, max_requests_jitter=0)
    assert [fast._answered() for _ in range(3)] == [True, True, False]
    assert logged == ["Autorestarting worker after current request."] and fast._stopping


def test_no_max_requests_means_no_limit() -> None:
    fast, logged = worker()
    assert all(fast._answered() for _ in range(1000)) and not logged


def test_the_worker_quits_once_and_stops_on_term() -> None:
    calls: list[Any] = []
    fast, _ = worker(worker_int=lambda w: calls.append(w))
    fast._on_quit(2, None)
    fast._on_quit(2, None)  # Ctrl-C reaches the worker twice
    assert calls == [fast] and not fast._answered()
    fast, _ = worker()
    fast._on_term(15, None)
    assert not fast._answered()


@pytest.mark.parametrize("keepalive, timeout, limit", [(2, 30, 2), (0, 30, 30)])
def test_the_sweep_asks_every_connection_with_the_keep_alive_limit(keepalive: int, timeout: int, limit: int) -> None:
    """gunicorn's keepalive, or its timeout when keep-alive is off, as the socket timeout was."""
    asked: list[tuple[float, float]] = []
    connection = SimpleNamespace(expire=lambda now, idle, stalled: asked.append((idle, stalled)) or False)
    worker = SimpleNamespace(cfg=SimpleNamespace(keepalive=keepalive, timeout=timeout), _connections=[connection])
    FastLaneWorker._sweep(worker)  # type: ignore[arg-type]
    assert asked == [(limit, limit)]


UPGRADE = ("Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA")
"""What ``curl --http2 http://...`` adds to a POST: the server does not upgrade, and answers as HTTP/1.1."""


@pytest.mark.parametrize("split", [False, True], ids=["sent at once", "the body sent later"])
def test_a_post_offering_an_upgrade_is_answered_with_its_body(lane: Lane, split: bool) -> None:
    request = post("/scheduler/filter", args(), *UPGRADE)
    cut = len(request) - len(args()) // 2 if split else len(request)
    lane.send(request[:cut])
    if request[cut:]:  # (sent whole, nothing is left: an empty send after the lane closed can break the pipe)
        lane.send(request[cut:])
    status, headers, body = lane.reply()
    assert status == 200, json.loads(body)
    assert json.loads(body)["NodeNames"] == ["n1", "n2"] and headers["connection"] == "close"


def test_a_chunked_post_offering_an_upgrade_is_refused_not_answered_without_its_body(lane: Lane) -> None:
    body = args()
    lane.send(post("/scheduler/filter", b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body), *UPGRADE,
                   "Transfer-Encoding: chunked", length=-1))
    assert lane.reply()[0] == 501


def test_the_100_continue_of_a_pipelined_request_comes_after_the_answer_before_it(lane: Lane) -> None:
    first = post("/scheduler/filter", args())
    second = post("/scheduler/filter", b"", "Expect: 100-continue", length=len(args()))
    lane.send(first + second)  # request 1 whole, then request 2's head: it waits for its 100
    assert lane.reply()[0] == 200, "request 1's answer comes first"
    assert lane.reply()[0] == 100, "then request 2's 100 Continue"
    lane.send(args())
    assert lane.reply()[0] == 200
