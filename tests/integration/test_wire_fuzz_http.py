"""The wire fuzz (``tests/wire_fuzz``) against the real server, both workers: a short seeded run
(the full one is ``benchmarks/fuzz_wire.py``), and what it found at the HTTP level as focused
tests over raw sockets - gunicorn's own answers in JSON, connections closed when they are not
reusable and kept when they are."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

import pytest
from wire_fuzz import VERBS, WORKERS
from wire_fuzz.bodies import GOLDEN, LIMIT, encode
from wire_fuzz.client import Conn, Reply, ServerClosed, request
from wire_fuzz.run import OPENAPI, Fuzzer, fuzz
from wire_fuzz.server import Server

from extender.api.codings import EMPTY, HTTP10, TAB, UNFRAMED, WITH_LENGTH

pytestmark = pytest.mark.slow

EXAMPLES = 250
"""Generated requests per verb and worker: ~10 s per worker, every framing and mutation kind."""


@pytest.fixture(scope="module", params=WORKERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = Server(request.param, Path(tmp_path_factory.mktemp(f"fuzz-{request.param}"))).start()
    yield started
    started.stop()


def test_generated_requests_get_valid_answers_or_named_problems(server: Server) -> None:
    fuzzer = Fuzzer(server)
    for verb in VERBS:
        fuzz(fuzzer, verb, EXAMPLES)
    fuzzer.finish()
    assert not fuzzer.violations, "\n".join(map(str, fuzzer.violations[:10]))
    for verb in VERBS:  # the generator reaches both sides of every verb
        answered = sum(n for (v, _, outcome), n in fuzzer.counts.items() if v == verb and outcome == "200")
        refused = sum(n for (v, _, outcome), n in fuzzer.counts.items() if v == verb and outcome.startswith("4xx"))
        assert answered >= EXAMPLES // 20 and refused >= EXAMPLES // 4, (verb, fuzzer.counts)


def _exchange(server: Server, data: bytes, *, stop: bool = True) -> list[Reply]:
    """Write ``data`` on a new connection (then stop sending); every reply until it closes."""
    conn = Conn(server.port)
    replies = []
    try:
        conn.send(data)
        if stop:
            conn.stop_sending()
        while True:
            replies.append(conn.reply())
    except ServerClosed:
        return replies
    finally:
        conn.close()


GOOD = encode(GOLDEN["filter"]["v1.36"]).encode()


@pytest.mark.parametrize("head, status, message", [
    (b"HELLO\r\n\r\n", 400, {"gthread": "Invalid Request Line", "gevent": "Invalid method"}),
    (b"POST /scheduler/filter HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400,
     {"gthread": "CONTENT-LENGTH", "gevent": "Duplicate Content-Length"}),
    (b"POST /scheduler/filter HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400,
     {"gthread": "CONTENT-LENGTH", "gevent": "Invalid character in Content-Length"}),
    (b"POST /scheduler/filter HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417, "200-ok"),
    (b"POST /scheduler/filter?" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n", 414, "too large"),
    (b"POST /scheduler/filter HTTP/1.1\r\nBad Name: x\r\n\r\n", 400,
     {"gthread": "Bad Name", "gevent": "Invalid header token"}),
    (b"POST /scheduler/filter HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n{}", 501, "br"),
    (b"POST /scheduler/filter HTTP/1.1\r\n" + b"X-H: 1\r\n" * 150 + b"\r\n", 431, "limit request headers fields"),
], ids=["request line", "Content-Length twice", "negative Content-Length", "Expect", "target too long",
        "header name", "transfer coding", "too many headers"])
def test_what_the_http_layer_refuses_is_answered_in_json(server: Server, head: bytes, status: int,
                                                         message: str | dict[str, str]) -> None:
    """gunicorn's parser (gthread) and the fast lane's (gevent) word it differently; both name it."""
    [reply] = _exchange(server, head)
    assert reply.status == status and reply.close and reply.headers["content-type"] == "application/json"
    payload = reply.json()
    expected = message if isinstance(message, str) else message[server.worker]
    assert set(payload) == {"error", "message"} and expected in payload["message"], payload


def test_a_body_announced_over_the_limit_is_refused_unread_and_the_connection_closed(server: Server) -> None:
    head = request("POST", "/scheduler/filter", b"", length=LIMIT + 1)
    [reply] = _exchange(server, head + b" " * 1000, stop=False)  # the rest never comes: nothing waits for it
    assert reply.status == 413 and reply.close and str(LIMIT) in reply.json()["message"]


@pytest.mark.parametrize("chunks", [
    pytest.param(b"%x\r\n" % len(GOOD) + GOOD + b"\r\n0\r\n\r\n", id="well-formed"),
    pytest.param(b"zz\r\n" + GOOD + b"\r\n0\r\n\r\n", id="size not hex"),
    pytest.param(b"%x\r\n" % len(GOOD) + GOOD + b"XX0\r\n\r\n", id="no CRLF after the data"),
])
def test_a_chunked_body_is_answered_and_its_connection_closed(server: Server, chunks: bytes) -> None:
    """A chunked body's size is known only once read: its connection closes after the answer,
    and says so. One with broken framing is a 400 naming it, not a 500."""
    [reply] = _exchange(server, request("POST", "/scheduler/filter", chunks, "Transfer-Encoding: chunked"),
                        stop=False)
    assert reply.close
    if b"zz" in chunks or b"XX" in chunks:
        assert reply.status == 400 and reply.json()["message"].startswith("request body could not be read")
    else:
        assert reply.status == 200 and json.loads(reply.body)["Error"] == ""


def _chunks(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


@pytest.mark.parametrize("target, codings, chunks", [
    ("/scheduler/filter", ["gzip, chunked"], _chunks(gzip.compress(GOOD))),
    ("/scheduler/filter", ["gzip, chunked"], _chunks(GOOD)),
    ("/scheduler/filter", ["deflate, chunked"], _chunks(GOOD)),
    ("/scheduler/filter", ["identity, chunked"], _chunks(GOOD)),
    ("/scheduler/filter", ["br, chunked"], _chunks(GOOD)),
    ("/scheduler/filter", ["gzip"], GOOD),
    ("/scheduler/filter", ["gzip", "chunked"], _chunks(GOOD)),
    ("/healthz", ["gzip, chunked"], b"0\r\n\r\n"),
], ids=["gzip, chunked", "gzip, chunked: body not compressed", "deflate, chunked", "identity, chunked",
        "unknown before chunked", "gzip alone", "gzip, then chunked in a second header", "a probe"])
def test_a_transfer_coding_other_than_chunked_is_501_and_closes(server: Server, target: str, codings: list[str],
                                                                 chunks: bytes) -> None:
    """docs/openapi.yaml: 501, in JSON, and the connection closes - whatever the worker, whether
    gunicorn (gthread) knows the coding or not, and before the app sees the body: a request
    pipelined behind it is not answered."""
    method = "GET" if target == "/healthz" else "POST"
    refused = request(method, target, chunks, *(f"Transfer-Encoding: {c}" for c in codings))
    replies = _exchange(server, refused + request("POST", "/scheduler/filter", GOOD, length=len(GOOD)))
    assert [r.status for r in replies] == [501], [(r.status, r.body[:100]) for r in replies]
    [reply] = replies
    assert reply.close and reply.headers["content-type"] == "application/json"
    assert reply.json() == {"error": "not implemented", "message": f"Unsupported transfer coding: {codings[0]!r}"}


@pytest.mark.parametrize("codings", [
    ["chunked, gzip"], ["chunked, identity"], ["chunked", "gzip"], ["chunked, chunked"], ["chunked", "chunked"],
    ["gzip, chunked, chunked"], ["chunked, br"], ["br, chunked, chunked"], ["chunked, gzip;q=1"], ["chunked\t, gzip"],
    ["chunked,"], ["chunked,,"], ["chunked", ""],
], ids=["chunked then gzip", "chunked then identity", "chunked, then gzip in a second header", "chunked twice",
        "chunked twice in two headers", "unknown, then chunked twice", "chunked then unknown",
        "unknown then chunked twice", "chunked then gzip with a parameter", "chunked, tab, gzip",
        "empty last element", "two empty elements", "an empty second header"])
def test_chunked_not_last_or_twice_is_a_400_and_closes(server: Server, codings: list[str]) -> None:
    """RFC 9112 6.3: chunked that is not the final coding, or comes more than once, leaves the
    body's length unknown - a 400 (not the 501 of a coding the server does not implement), in
    JSON, and the connection closes: a request pipelined behind it is not answered. So is an
    empty element. Both workers alike (``extender.api.codings``), whichever parser noticed."""
    refused = request("POST", "/scheduler/filter", _chunks(GOOD), *(f"Transfer-Encoding: {c}" for c in codings))
    replies = _exchange(server, refused + request("POST", "/scheduler/filter", GOOD, length=len(GOOD)))
    assert [r.status for r in replies] == [400], [(r.status, r.body[:100]) for r in replies]
    [reply] = replies
    assert reply.close and reply.headers["content-type"] == "application/json"
    parsers = {"gthread": (), "gevent": ("Invalid request: Invalid `Transfer-Encoding` header value",
                                         "Invalid request: Empty Transfer-Encoding")}[server.worker]
    assert reply.json()["error"] == "bad request" and reply.json()["message"] in (UNFRAMED, EMPTY, TAB, *parsers)


@pytest.mark.parametrize("version, codings, length", [
    ("HTTP/1.0", ["chunked"], None),
    ("HTTP/1.0", ["gzip, chunked"], None),
    ("HTTP/1.1", ["chunked"], len(_chunks(GOOD))),
    ("HTTP/1.1", ["gzip"], len(_chunks(GOOD))),
    ("HTTP/1.1", ["identity"], len(_chunks(GOOD))),
    ("HTTP/1.1", ["gzip, chunked"], len(_chunks(GOOD))),
], ids=["HTTP/1.0 chunked", "HTTP/1.0 gzip, chunked", "chunked with Content-Length", "gzip with Content-Length",
        "identity with Content-Length", "gzip, chunked with Content-Length"])
def test_transfer_encoding_in_http_1_0_or_beside_content_length_is_a_400(server: Server, version: str,
                                                                         codings: list[str],
                                                                         length: int | None) -> None:
    """RFC 9112 6.1: framing to treat as faulty - a 400 from both workers (gthread answered 501
    for a coding beside Content-Length, the fast lane served HTTP/1.0 chunked: found in review),
    and the connection closes."""
    head = request("POST", "/scheduler/filter", _chunks(GOOD), *(f"Transfer-Encoding: {c}" for c in codings),
                   length=length).replace(b"HTTP/1.1", version.encode(), 1)
    replies = _exchange(server, head + request("POST", "/scheduler/filter", GOOD, length=len(GOOD)))
    assert [r.status for r in replies] == [400], [(r.status, r.body[:100]) for r in replies]
    parsers = {"gthread": (), "gevent": ("Invalid request: Transfer-Encoding can't be present with Content-Length",
                                         "Invalid request: Content-Length can't be present with Transfer-Encoding")}
    assert replies[0].close and replies[0].json()["message"] in (HTTP10, WITH_LENGTH, *parsers[server.worker])


def test_chunked_is_a_transfer_coding_in_any_case(server: Server) -> None:
    [reply] = _exchange(server, request("POST", "/scheduler/filter", _chunks(GOOD), "Transfer-Encoding: CHUNKED"))
    assert reply.status == 200 and reply.close and reply.json()["Error"] == ""


@pytest.mark.parametrize("method, path", [("POST", "/scheduler/nope"), ("PUT", "/scheduler/filter")])
def test_a_large_body_the_app_does_not_read_keeps_the_connection(server: Server, method: str, path: str) -> None:
    body = b" " * (LIMIT - 1000)  # far more than the 64 KiB gthread would read before the next request
    conn = Conn(server.port)
    try:
        conn.send(request(method, path, body, length=len(body))
                  + request("POST", "/scheduler/filter", GOOD, length=len(GOOD)))
        first, second = conn.reply(), conn.reply()
    finally:
        conn.close()
    assert first.status in (404, 405) and not first.close
    assert second.status == 200 and second.json()["Error"] == ""


def test_a_body_shorter_than_its_content_length_is_never_answered_as_whole(server: Server) -> None:
    """The client stops before the announced length: no answer (the fast lane), or a 400."""
    replies = _exchange(server, request("POST", "/scheduler/filter", GOOD, length=len(GOOD) + 10))
    assert all(r.status == 400 for r in replies), [(r.status, r.body[:100]) for r in replies]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/debug/snapshot", "/debug/snapshot?node=node-3",
                                  "/debug/snapshot?node=ghost",
                                  "/debug/pods/default/gpu-pod", "/debug/pods/default/nobody", "/debug/queue",
                                  "/debug/config?pretty", "/debug//config"])
def test_probes_and_debug_endpoints_answer_as_documented(server: Server, path: str) -> None:
    reply = server.get(path)
    assert reply.status in (200, 404)
    assert OPENAPI.problems("GET", path, reply.status, reply.headers["content-type"], reply.body) == []
