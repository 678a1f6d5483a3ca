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
from gunicorn.http.errors import (ExpectationFailed, InvalidRequestLine, LimitRequestLine, ParseException,
                                  UnsupportedTransferCoding)
from gunicorn.http.parser import RequestParser

from extender.api.codings import EMPTY, HTTP10, TAB, UNFRAMED, WITH_LENGTH
from extender.api.workers import ThreadWorker, body_limit, json_error, unbounded


def _gunicorn_page(status: int, reason: str, message: str) -> bytes:
    """What gunicorn writes for an error it answers itself."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        util.write_error(ours, status, reason, message)
        ours.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: theirs.recv(65536), b""))


@pytest.mark.parametrize("status, theirs, reason, message", [
    (400, "Bad Request", "Bad Request", "Invalid HTTP Header: 'CONTENT-LENGTH'"),
    (400, "Bad Request", "Bad Request", "Invalid Request Line 'Invalid HTTP request line: \"<script>&\"'"),
    (414, "URI Too Long", "URI Too Long", "Request Line is too large (5000 > 4094)"),
    (417, "Expectation Failed", "Expectation Failed", "Unable to comply with expectation: 'foo'"),
    (431, "Request Header Fields Too Large", "Request Header Fields Too Large",
     "Error parsing headers: 'limit request headers fields'"),
    (501, "Not Implemented", "Not Implemented", "Unsupported transfer coding: 'gzip'"),
    (501, "Bad Request", "Not Implemented", "Unsupported transfer coding: 'br, chunked'"),  # gunicorn's own 501
    (403, "Forbidden", "Forbidden", "Request forbidden"),
    (500, "Internal Server Error", "Internal Server Error", ""),
])
def test_gunicorns_error_pages_become_json(status: int, theirs: str, reason: str, message: str) -> None:
    """The reason, and ``error``, are the status's: not gunicorn's text (``theirs``)."""
    reply = json_error(_gunicorn_page(status, theirs, message))
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


def _parse_refusal(head: bytes) -> Exception:
    """What gunicorn's own request parser raises for the request ``head``."""
    try:
        next(iter(RequestParser(Config(), iter([head]), ("127.0.0.1", 40000))))
    except ParseException as exc:
        return exc
    raise AssertionError(f"gunicorn accepted {head!r}")


def _post(*headers: str) -> bytes:
    return ("POST /scheduler/filter HTTP/1.1\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in headers)
            + "\r\n").encode()


def _worker() -> ThreadWorker:
    log = SimpleNamespace(warning=lambda *_: None, exception=lambda *_: None, debug=lambda *_: None,
                          access=lambda *_: None)
    return ThreadWorker(0, 1, [], None, 30, Config(), log)


@pytest.mark.parametrize("error, status, message", [
    (InvalidRequestLine("HELLO"), 400, "Invalid Request Line"),
    (LimitRequestLine(5000, 4094), 414, "Request Line is too large (5000 > 4094)"),
    (ExpectationFailed("200-ok"), 417, "200-ok"),
    (UnsupportedTransferCoding("br, chunked"), 501, "Unsupported transfer coding: 'br, chunked'"),
    (_parse_refusal(_post("Transfer-Encoding: br, chunked")), 501, "Unsupported transfer coding: 'br, chunked'"),
    (_parse_refusal(_post("Transfer-Encoding: gzip")), 501, "Unsupported transfer coding: 'gzip'"),
    (_parse_refusal(_post("Transfer-Encoding: identity")), 501, "Unsupported transfer coding: 'identity'"),
    (_parse_refusal(_post("Transfer-Encoding: gzip", "Content-Length: 2")), 400, WITH_LENGTH),
    (_parse_refusal(_post("Transfer-Encoding: chunked, gzip")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked", "Transfer-Encoding: gzip")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked, identity")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked, chunked")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked", "Transfer-Encoding: chunked")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: gzip, chunked, chunked")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked, br")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: br, chunked, chunked")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked, gzip;q=1")), 400, UNFRAMED),
    (_parse_refusal(_post("Transfer-Encoding: chunked, , gzip")), 400, EMPTY),
    (_parse_refusal(_post("Transfer-Encoding: chunked,")), 400, EMPTY),
    (_parse_refusal(_post("Transfer-Encoding: chunked", "Transfer-Encoding: ")), 400, EMPTY),
    # the one gap (workers.py): gunicorn tells only the field with the coding it does not know
    (_parse_refusal(_post("Transfer-Encoding: chunked", "Transfer-Encoding: br")), 501,
     "Unsupported transfer coding: 'br'"),
    (_parse_refusal(_post("Transfer-Encoding: chunked", "Content-Length: 2")), 400, WITH_LENGTH),
    (_parse_refusal(_post("Transfer-Encoding: chunked").replace(b"HTTP/1.1", b"HTTP/1.0")), 400, HTTP10),
    (_parse_refusal(_post("Transfer-Encoding: chunked\t, gzip")), 400, TAB),
], ids=["request line", "line too long", "expectation", "unknown coding", "unknown coding, parsed", "gzip alone",
        "identity alone", "gzip and Content-Length: framing", "chunked then gzip: framing",
        "chunked, then gzip in a second header: framing", "chunked then identity: framing",
        "chunked twice: framing", "chunked twice in two headers: framing", "unknown, then chunked twice: framing",
        "chunked then unknown: framing", "unknown then chunked twice: framing", "chunked then gzip with a parameter",
        "empty element", "empty last element", "empty second header",
        "chunked, then unknown in a second header: the gap", "chunked and Content-Length: framing",
        "HTTP/1.0 chunked: framing", "a tab inside the field"])
def test_the_gthread_worker_answers_gunicorns_refusals_in_json(error: Exception, status: int, message: str) -> None:
    """Through gunicorn's own handle_error: holds on every gunicorn version setup.cfg allows. A
    Transfer-Encoding gunicorn refused gets ``codings.refusal``'s answer, whichever of its errors
    gunicorn raised: a coding the extender does not read is a 501; a ``chunked`` framed
    ambiguously - not the final coding, more than once, beside an empty element (RFC 9112 6.3:
    the body's length cannot be determined) - a 400 saying so; with Content-Length, gunicorn's."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        _worker().handle_error(None, ours, ("127.0.0.1", 40000), error)
        ours.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: theirs.recv(65536), b""))
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"Content-Type: application/json" in head
    payload = json.loads(body)
    assert message in payload["message"]
    assert payload["error"] == {400: "bad request", 414: "uri too long", 417: "expectation failed",
                                501: "not implemented"}[status]


@pytest.mark.parametrize("coding, status, message", [
    # gunicorn's parser accepts these (the body would reach the app still encoded)
    *[(c, "501 Not Implemented", f"Unsupported transfer coding: {c!r}")
      for c in ("gzip, chunked", "deflate, chunked", "compress, chunked", "identity, chunked")],
    # gunicorn 27 refuses these itself; were one let through, the worker still answers 400
    ("chunked, gzip", "400 Bad Request", UNFRAMED),
    ("chunked, chunked", "400 Bad Request", UNFRAMED),
])
def test_a_coding_gunicorn_lets_through_is_refused_and_the_app_never_sees_it(coding: str, status: str,
                                                                             message: str) -> None:
    """The worker answers and closes the connection without calling the app."""
    req = next(iter(RequestParser(Config(), iter([_post("Transfer-Encoding: gzip, chunked") + b"0\r\n\r\n"]),
                                  ("127.0.0.1", 40000))))
    req.headers = [(name, coding if name == "TRANSFER-ENCODING" else value) for name, value in req.headers]
    worker = _worker()
    worker.wsgi = lambda *_: pytest.fail("the app was called")
    ours, theirs = socket.socketpair()
    with ours, theirs:
        keep = worker.handle_request(req, SimpleNamespace(sock=ours, client=("127.0.0.1", 40000)))
        ours.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: theirs.recv(65536), b""))
    head, _, body = reply.partition(b"\r\n\r\n")
    assert keep is False
    assert head.startswith(f"HTTP/1.1 {status}\r\n".encode()) and b"Connection: close" in head
    assert json.loads(body) == {"error": status.split(" ", 1)[1].lower(), "message": message}


@pytest.mark.parametrize("coding", ["gzip", "identity", "chunked, gzip"])
def test_a_transfer_coding_refused_is_access_logged_with_its_request(coding: str) -> None:
    """gunicorn refuses these with the request attached: the answer changes (``codings``), the
    access log still gets its line for that request (found in review: lost for the 501s)."""
    error = _parse_refusal(_post(f"Transfer-Encoding: {coding}"))
    accessed: list[object] = []
    worker = _worker()
    worker.log.access = lambda resp, req, *_: accessed.append(req)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        worker.handle_error(None, ours, ("127.0.0.1", 40000), error)
        assert theirs.recv(65536).startswith(b"HTTP/1.1 ")
    assert accessed == [getattr(error, "req", None)] and accessed[0] is not None
