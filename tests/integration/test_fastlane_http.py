"""The gevent worker's fast lane (``extender.api.fastlane``) over real sockets, under gunicorn:
kube-scheduler's calls answered by the lane in every framing, everything else by the Flask app
on the same connection, one log line plus metrics per verb request, and a graceful stop.

Raw sockets, so requests can be pipelined and heads written byte by byte."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from typing import Callable

import pytest
from test_server_http import SMOKE, SMOKE_NODES, TRAINER_0, Server, pod, serve  # noqa: F401 - serve: a fixture

pytestmark = pytest.mark.slow

PREFIX = "/scheduler"


def post(path: str, body: bytes, *extra: str, version: str = "HTTP/1.1") -> bytes:
    head = [f"POST {path} {version}", "Host: 127.0.0.1", "User-Agent: Go-http-client/1.1",
            f"Content-Length: {len(body)}", "Content-Type: application/json", "Accept-Encoding: gzip", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def args(name: str, names: list[str], gpus: int = 1, uid: str | None = None) -> bytes:
    return json.dumps({"Pod": pod(name, gpus, uid), "Nodes": None, "NodeNames": names},
                      separators=(",", ":")).encode()


class Reader:
    """HTTP/1.1 responses framed by Content-Length, read off one socket in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def closed(self) -> bool:
        """The server closed the connection (nothing more to read)."""
        self.sock.settimeout(5)
        return not self.buf and self.sock.recv(1) == b""


def connect(server: Server) -> tuple[socket.socket, Reader]:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock, Reader(sock)


def test_pipelined_verbs_and_other_requests_are_answered_in_order(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        bind = json.dumps({"PodName": "trainer-0", "PodNamespace": "default", "PodUID": TRAINER_0,
                           "Node": "node-a"}).encode()
        sock.sendall(post(f"{PREFIX}/filter", args("trainer-0", SMOKE_NODES, uid=TRAINER_0))
                     + get("/healthz")
                     + post(f"{PREFIX}/prioritize", args("trainer-0", ["node-a", "node-b"], uid=TRAINER_0))
                     + post(f"{PREFIX}/filter", b"not json")
                     + post(f"{PREFIX}/bind", bind)
                     + post(f"{PREFIX}/filter", args("trainer-1", SMOKE_NODES, gpus=4)))
        status, headers, body = reader.response()
        assert status == 200 and headers["content-type"] == "application/json"
        assert headers["connection"] == "keep-alive" and headers.get("date")
        reply = json.loads(body)
        assert reply["NodeNames"] == ["node-a"] and reply["Error"] == "" and reply["Nodes"] is None
        assert set(reply["FailedNodes"]) == {"node-b"} and set(reply["FailedAndUnresolvableNodes"]) == {"node-c", "node-d"}
        assert reader.response()[::2] == (200, b'{"status":"ok"}')
        status, _, body = reader.response()
        assert status == 200 and [h["Host"] for h in json.loads(body)] == ["node-a", "node-b"]
        status, headers, body = reader.response()
        assert status == 400 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"] == "bad request" and "not valid JSON" in json.loads(body)["message"]
        assert reader.response()[::2] == (200, b'{"Error":""}')
        status, _, body = reader.response()  # node-a now has 3 GPUs left: the bind is accounted
        assert status == 200 and json.loads(body)["NodeNames"] == []


def test_a_head_that_arrives_in_pieces(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        raw = post(f"{PREFIX}/filter", args("p", SMOKE_NODES))
        for i in range(0, len(raw), 7):
            sock.sendall(raw[i:i + 7])
            time.sleep(0.001)
        status, _, body = reader.response()
        assert status == 200 and json.loads(body)["NodeNames"] == ["node-a"]


def test_a_connection_that_always_has_a_next_request_does_not_hold_the_worker(serve: Callable[..., Server]) -> None:
    """Between two requests of a connection the worker lets the others in: a client that sends
    its next request at once (pipelined here; or as fast as a load generator) used to be served
    to the end while every other connection waited (found by benchmarks/sustained_load.py)."""
    server = serve(SMOKE)
    busy, busy_reader = connect(server)
    other, other_reader = connect(server)
    total = 1500
    answered: list[int] = []

    def drain() -> None:  # read the busy connection's answers as they come, so its sends never block
        for _ in range(total):
            answered.append(busy_reader.response()[0])

    with busy, other:
        reading = threading.Thread(target=drain)
        reading.start()
        busy.sendall(post(f"{PREFIX}/prioritize", args("p", SMOKE_NODES)) * total)
        while not answered:
            time.sleep(0.001)
        other.sendall(post(f"{PREFIX}/filter", args("p", SMOKE_NODES)))
        assert other_reader.response()[0] == 200
        before = len(answered)
        reading.join(60)
    assert answered == [200] * total
    assert before < total // 2, f"the other connection was answered only after {before} of {total} busy requests"


def test_connection_close_is_honoured(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        sock.sendall(post(f"{PREFIX}/prioritize", args("p", ["node-a"]), "Connection: close"))
        status, headers, body = reader.response()
        assert status == 200 and headers["connection"] == "close" and json.loads(body)[0]["Host"] == "node-a"
        assert reader.closed()


@pytest.mark.parametrize("request_bytes", [
    post(f"{PREFIX}/filter", args("p", SMOKE_NODES), version="HTTP/1.0"),
    post(f"{PREFIX}/%66ilter", args("p", SMOKE_NODES)),
    b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in (args("p", SMOKE_NODES)[:10],
                                                                 args("p", SMOKE_NODES)[10:])) + b"0\r\n\r\n",
], ids=["HTTP/1.0", "percent-encoded path", "chunked body"])
def test_other_framings_get_the_same_answer(serve: Callable[..., Server], request_bytes: bytes) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        sock.sendall(request_bytes)
        status, _, body = reader.response()
        assert status == 200 and json.loads(body)["NodeNames"] == ["node-a"]


def test_expect_100_continue_asks_for_the_body(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        body = args("p", SMOKE_NODES)
        raw = post(f"{PREFIX}/filter", body, "Expect: 100-continue")
        sock.sendall(raw[:-len(body)])
        assert reader.response()[0] == 100
        sock.sendall(body)
        status, _, reply = reader.response()
        assert status == 200 and json.loads(reply)["NodeNames"] == ["node-a"]


def test_pretty_query_goes_through_flask(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        sock.sendall(post(f"{PREFIX}/filter?pretty", args("p", SMOKE_NODES)))
        status, _, body = reader.response()
        assert status == 200 and body.startswith(b"{\n  ") and json.loads(body)["NodeNames"] == ["node-a"]


def test_each_verb_request_is_logged_once_and_counted(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    sock, reader = connect(server)
    with sock:
        for _ in range(3):
            sock.sendall(post(f"{PREFIX}/filter", args("logged", SMOKE_NODES))
                         + post(f"{PREFIX}/prioritize", args("logged", ["node-a", "node-b"])))
            assert reader.response()[0] == 200 and reader.response()[0] == 200
    metrics = _metrics(server)
    assert metrics[("kube_extender_requests_total", (("outcome", "feasible"), ("verb", "filter")))] == 3
    assert metrics[("kube_extender_requests_total", (("outcome", "ok"), ("verb", "prioritize")))] == 3
    assert metrics[("kube_extender_request_duration_seconds_count", (("verb", "filter"),))] == 3
    assert metrics[("kube_extender_request_duration_seconds_count", (("verb", "prioritize"),))] == 3
    assert metrics[("kube_extender_decisions_total", (("status", "Success"), ("verb", "filter")))] == 3
    log = server.log_path.read_text()
    assert "Fast lane for /scheduler/bind, /scheduler/filter, /scheduler/preempt, /scheduler/prioritize" in log
    lines = [line for line in log.splitlines() if "msg=request" in line and "pod=default/logged" in line]
    assert len(lines) == 6
    for line in lines:
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        assert fields["verb"] in ("filter", "prioritize") and fields["nodes"] in ("4", "2")
        assert fields["outcome"] == ("feasible" if fields["verb"] == "filter" else "ok")
        assert float(fields["duration_ms"]) > 0


def _metrics(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    sock, reader = connect(server)
    with sock:
        sock.sendall(get("/metrics"))
        status, _, body = reader.response()
    assert status == 200
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in body.decode().splitlines():
        m = re.fullmatch(r'(\w+)(?:\{(.*)\})? (\S+)', line)
        if m and not line.startswith("#"):
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def test_sigterm_closes_idle_connections_and_answers_the_last_request(serve: Callable[..., Server]) -> None:
    """A graceful stop does not wait out the keep-alive timeout of idle clients: their connections
    end, a request still arriving is answered with Connection: close, and the worker exits 0."""
    server = serve(SMOKE)
    idle, idle_reader = connect(server)
    busy, busy_reader = connect(server)
    with idle, busy:
        idle.sendall(post(f"{PREFIX}/filter", args("p", SMOKE_NODES)))
        assert idle_reader.response()[1]["connection"] == "keep-alive"
        raw = post(f"{PREFIX}/filter", args("q", SMOKE_NODES))
        busy.sendall(raw[:40])  # a request begun: not idle
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert idle_reader.closed(), "the idle keep-alive connection was closed"
        busy.sendall(raw[40:])
        status, headers, _ = busy_reader.response()
        assert status == 200 and headers["connection"] == "close"
        assert busy_reader.closed()
    assert server.stop() == 0
    log = server.log_path.read_text()
    assert "graceful timeout" not in log and "Traceback" not in log, log[-2000:]
