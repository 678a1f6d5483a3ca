"""What kube-extender adds to gunicorn's workers (``extender.api.workers``), without a server:
gunicorn's own error pages turned into JSON, and which requests close after their answer.
Over real sockets, for both workers: tests/integration/test_wire_fuzz_http.py."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest
from gunicorn import util
from gunicorn.config import Config
from gunicorn.http.errors import ExpectationFailed, InvalidRequestLine, LimitRequestLine

from extender.api.workers import ThreadWorker, body_limit, json_error, unbounded


def _gunicorn_page(status: int, reason: str, message: str) -> bytes:
    """What gunicorn writes for an error it answers itself."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        util.write_error(ours, status, reason, message)
        ours.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: theirs.recv(65536), b""))


@pytest.mark.parametrize("status, reason, message", [
    (400, "Bad Request", "Invalid HTTP Header: 'CONTENT-LENGTH'"),
    (400, "Bad Request", "Invalid Request Line 'Invalid HTTP request line: \"<script>&\"'"),
    (414, "URI Too Long", "Request Line is too large (5000 > 4094)"),
    (417, "Expectation Failed", "Unable to comply with expectation: 'foo'"),
    (431, "Request Header Fields Too Large", "Error parsing headers: 'limit request headers fields'"),
    (501, "Not Implemented", "Unsupported transfer coding: 'gzip'"),
    (500, "Internal Server Error", ""),
])
def test_gunicorns_error_pages_become_json(status: int, reason: str, message: str) -> None:
    reply = json_error(_gunicorn_page(status, reason, message))
    assert reply is not None
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == f"HTTP/1.1 {status} {reason}"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers == {"Connection": "close", "Content-Type": "application/json", "Content-Length": str(len(body))}
    assert json.loads(body) == {"error": reason.lower(), "message": message or reason}


def test_anything_else_is_left_as_it_is() -> None:
    assert json_error(b"garbage") is None


@pytest.mark.parametrize("headers, limit, close", [
    ([("HOST", "x"), ("CONTENT-LENGTH", "1025")], 1024, True),
    ([("CONTENT-LENGTH", "1024")], 1024, False),
    ([("TRANSFER-ENCODING", "chunked")], 1024, True),
    ([("CONTENT-LENGTH", "99999999")], 0, False),
    ([], 1024, False),
], ids=["over the limit", "exactly the limit", "chunked: size unknown", "no limit", "no body"])
def test_which_requests_close_their_connection(headers: list[tuple[str, str]], limit: int, close: bool) -> None:
    assert unbounded(SimpleNamespace(headers=headers), limit) is close


def test_body_limit_is_the_apps() -> None:
    assert body_limit(SimpleNamespace(config={"MAX_CONTENT_LENGTH": 4096})) == 4096
    assert body_limit(SimpleNamespace(config={})) == 0


@pytest.mark.parametrize("error, status, message", [
    (InvalidRequestLine("HELLO"), 400, "Invalid Request Line"),
    (LimitRequestLine(5000, 4094), 414, "Request Line is too large (5000 > 4094)"),
    (ExpectationFailed("200-ok"), 417, "200-ok"),
], ids=["request line", "line too long", "expectation"])
def test_the_gthread_worker_answers_gunicorns_refusals_in_json(error: Exception, status: int, message: str) -> None:
    """Through gunicorn's own handle_error: holds on every gunicorn version setup.cfg allows."""
    log = SimpleNamespace(warning=lambda *_: None, exception=lambda *_: None, debug=lambda *_: None)
    worker = ThreadWorker(0, 1, [], None, 30, Config(), log)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        worker.handle_error(None, ours, ("127.0.0.1", 40000), error)
        ours.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: theirs.recv(65536), b""))
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"Content-Type: application/json" in head
    assert message in json.loads(body)["message"]
