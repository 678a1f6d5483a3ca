"""The fast lane and the Flask error answers against what HTTP/1.1 asks of a server: the whole
request line within its limit, an unfinished header field bounded, 405 with Allow, OPTIONS in JSON, one Host."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from test_fastlane import LIMIT, Lane, app, args, lane, post  # noqa: F401 - fixtures

from extender.api.http1 import Limits, Refused, _Reader


def test_request_line_limit_counts_the_whole_request_line(app: Any) -> None:
    """gunicorn's limit_request_line (4094) bounds the whole request line; the fast lane only
    compares the target with it, so a 4105-byte request line that gthread answers 414 is served."""
    lane = Lane(app, Limits(line=4094, body=LIMIT))
    target = "/healthz?" + "a" * (4092 - len("/healthz?"))  # the target alone fits: 4092 <= 4094
    line = f"GET {target} HTTP/1.1"
    assert len(line) > 4094
    lane.send(f"{line}\r\nHost: x\r\n\r\n".encode())
    status, headers, body = lane.reply()
    assert status == 414, (status, body[:80])
    assert headers["connection"] == "close"


def test_an_unfinished_header_field_over_its_limit_is_refused_at_once(lane: Lane) -> None:
    """limit_request_field_size (8190) is checked only when a field is complete (on_header).
    A field that never ends is read and buffered up to the whole head limit (~820 KB), with
    httptools concatenating the partial value on every read (quadratic: ~17 s CPU for 800 KB
    fed one byte per read) - nothing refuses it at 8190 bytes."""
    lane.sock.settimeout(3)
    lane.send(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nX-Long: " + b"v" * 20000)  # 2.4x the limit
    status, headers, body = lane.reply()  # today: no answer, the connection keeps reading
    assert status == 431 and headers["connection"] == "close"
    assert json.loads(body)["error"] == "request header fields too large"


def test_a_405_names_the_allowed_methods(lane: Lane) -> None:
    """RFC 9110 15.5.6: a 405 MUST carry Allow. The JSON error handler rebuilds the response
    from the exception and drops werkzeug's Allow header (both workers)."""
    lane.send(b"GET /scheduler/filter HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, _ = lane.reply()
    assert status == 405
    assert "allow" in headers and "POST" in headers["allow"], headers


@pytest.mark.parametrize("target", ["/scheduler/filter", "/healthz"])
def test_options_is_answered_in_json(lane: Lane, target: str) -> None:
    """docs/openapi.yaml: 'Every answer is JSON (metrics aside)'. Flask's automatic OPTIONS
    answer is a 200 text/html with an empty body (both workers)."""
    lane.send(f"OPTIONS {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    status, headers, body = lane.reply()
    assert headers["content-type"].startswith("application/json"), (status, headers, body)
    json.loads(body)


def test_two_host_headers_are_a_bad_request(lane: Lane) -> None:
    """RFC 9112 3.2: a server MUST answer 400 to a request with more than one Host field line
    (gunicorn's gthread does: 'Invalid HTTP Header: HOST'); the fast lane serves it."""
    lane.send(b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    status, headers, body = lane.reply()
    assert status == 400 and headers["connection"] == "close", (status, body)


# ---- what the bound on an unfinished head line must let through ----------------------------

BODY = b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["' + b"n" * 10000 + b'"]}'  # json.Marshal: no newline


def head(length: int) -> bytes:
    return (b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def test_head_split_then_rest_of_head_and_body_in_one_read() -> None:
    """The head arrives in two reads; the second holds the head's end and a newline-free body
    over 8 KB. feed() takes the bytes after the read's last newline - the body - for the
    head's unfinished line and refuses the request."""
    reader = _Reader(Limits(body=1 << 20))
    data = head(len(BODY)) + BODY
    reader.feed(data[:20])  # "POST /scheduler/filt"
    reader.feed(data[20:])  # 414 today
    assert [r.body for r in reader.ready] == [BODY]


def test_body_without_newline_then_pipelined_request_begins() -> None:
    """One read: a whole request whose body has no newline, then the start of the next one.
    The next head's unfinished line is counted from the last newline - in the first head."""
    reader = _Reader(Limits(body=1 << 20))
    reader.feed(head(len(BODY)) + BODY + b"GET /hea")  # 414 today
    reader.feed(b"lthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [r.target for r in reader.ready] == ["/scheduler/filter", "/healthz"]


def test_chunked_body_after_a_split_head() -> None:
    reader = _Reader(Limits(body=1 << 20))
    data = (b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n")
    reader.feed(data[:10])
    reader.feed(data[10:])  # the read ends with CRLF: passes; the same with the chunk cut:
    assert reader.ready[0].body == BODY
    reader = _Reader(Limits(body=1 << 20))
    cut = data.index(BODY) + 9000
    reader.feed(data[:10])
    reader.feed(data[10:cut])  # 414 today
    reader.feed(data[cut:])
    assert reader.ready[0].body == BODY


@pytest.mark.parametrize("limits", [Limits(line=0, body=1 << 20), Limits(field_size=0, body=1 << 20)],
                         ids=["line-unlimited", "field-size-unlimited"])
def test_a_zero_limit_stays_unlimited_when_the_line_is_split(limits: Limits) -> None:
    """gunicorn: limit_request_line 0 / limit_request_field_size 0 = unlimited. The new bound
    takes max(line, field_size), i.e. the other limit, for every line of the head."""
    if limits.line == 0:
        data = b"GET /healthz?" + b"a" * 12000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    else:
        data = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 12000 + b"\r\n\r\n"
    reader = _Reader(limits)
    for i in range(0, len(data), 1000):  # a long line arriving over several reads
        reader.feed(data[i:i + 1000])
    assert len(reader.ready) == 1
    # the same bytes in one read are served: only the split is refused
    one = _Reader(limits)
    one.feed(data)
    assert len(one.ready) == 1


def test_first_header_field_too_long_is_431_not_414() -> None:
    """An over-long first header field (request line complete) is called a too-long request
    line (414): on_header comes only once the next field begins, so _headers is still empty."""
    reader = _Reader(Limits(body=1 << 20))
    reader.feed(b"GET /healthz HTTP/1.1\r\nX-Long: ")
    with pytest.raises(Refused) as refused:
        reader.feed(b"v" * 9000)
    assert refused.value.status == 431, str(refused.value)


def test_over_a_socket_a_pipelined_request_after_a_large_body_is_answered(app: Any) -> None:
    """End to end on the fast lane: kube-scheduler's filter body (json.Marshal, no newline) of
    ~14 KB, and the start of a pipelined probe in the same read: refused 414 and closed."""
    lane = Lane(app, Limits(body=1 << 20))
    try:
        body = args("p", tuple(f"node-{i}" for i in range(1500)))
        assert len(body) > 8192 and b"\n" not in body
        lane.send(post("/scheduler/filter", body) + b"GET /hea")  # one read holds both
        assert lane.reply()[0] == 200
        try:
            lane.send(b"lthz HTTP/1.1\r\nHost: x\r\n\r\n")
        except BrokenPipeError:  # today the lane has already answered 414 and closed
            pass
        status, _, reply = lane.reply()
        assert (status, reply) == (200, b'{"status":"ok"}'), (status, reply)
    finally:
        lane.sock.close()


def test_pipelined_request_after_a_large_body_when_the_head_was_split() -> None:
    """The read goes on with a head begun in an earlier read (in_head), ends it, carries a
    newline-free body over 8 KB and the start of a pipelined request. _follow_line takes the
    in_head branch and counts everything after the read's last newline - the first head's
    end - i.e. the body, for the new head's unfinished line: 431 for a legitimate request."""
    reader = _Reader(Limits(body=1 << 20))
    data = head(len(BODY)) + BODY
    reader.feed(data[:20])                 # "POST /scheduler/filt"
    reader.feed(data[20:] + b"GET /hea")   # Refused(431) today
    reader.feed(b"lthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [r.target for r in reader.ready] == ["/scheduler/filter", "/healthz"]


def test_over_a_socket_pipelined_request_after_a_split_head_and_large_body(app: Any) -> None:
    lane = Lane(app, Limits(body=1 << 20))
    try:
        body = args("p", tuple(f"node-{i}" for i in range(1500)))
        assert len(body) > 8192 and b"\n" not in body
        request = post("/scheduler/filter", body)
        lane.send(request[:20])
        threading.Event().wait(0.2)  # the lane reads the head's start on its own
        lane.send(request[20:] + b"GET /hea")
        assert lane.reply()[0] == 200
        try:
            lane.send(b"lthz HTTP/1.1\r\nHost: x\r\n\r\n")
        except BrokenPipeError:
            pass
        status, _, reply = lane.reply()
        assert (status, reply) == (200, b'{"status":"ok"}'), (status, reply)
    finally:
        lane.sock.close()


def test_first_header_field_in_the_heads_first_read_is_not_counted() -> None:
    """A connection's first read: the request line, then an unfinished first header field far
    over limit_request_field_size. The whole read is the head's, yet _follow_line counts 0 for
    it (the head began in this read and no header is complete yet); the next reads, a byte
    each, count from 0 - the field grows to ~108 KB unrefused (httptools re-joins it each read)."""
    reader = _Reader(Limits(body=1 << 20))
    with pytest.raises(Refused) as refused:
        reader.feed(b"GET /healthz HTTP/1.1\r\nX-Long: " + b"v" * 100_000)
        for _ in range(8000):
            reader.feed(b"v")
    assert refused.value.status == 431


@pytest.mark.parametrize("line", [0, 1 << 16], ids=["line-unlimited", "line-64k"])
def test_first_header_field_bounded_by_field_size_when_line_limit_is_larger_or_zero(line: int) -> None:
    """limit_request_line 0 (no limit) or above the field size: until the first header is
    complete the bound is max(line, field) or none at all - a first header field (the request
    line long complete) arriving slowly is held to the request line's limit, not its own."""
    reader = _Reader(Limits(line=line, body=1 << 20))
    reader.feed(b"GET /healthz HTTP/1.1\r\n")
    reader.feed(b"X-Long: ")
    with pytest.raises(Refused) as refused:
        for _ in range(20):  # 20 KB, 1 KB a read: over field_size 8190 by far
            reader.feed(b"v" * 1000)
    assert refused.value.status == 431


PIPELINED_FIRST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def test_pipelined_first_header_field_within_field_size_is_not_a_414() -> None:
    """One read: a whole request, then the next one's request line (ended) and the start of its
    first header field. That read takes _follow_line's last branch (a head begun after another,
    no header complete): _line 0 and _line_ended stays False. The next reads continue the field
    without a newline: they are held to limit_request_line (4094) as if still the request line,
    so a legitimate 5000-byte field (limit_request_field_size is 8190) is refused with a 414."""
    reader = _Reader(Limits(body=1 << 20))
    reader.feed(PIPELINED_FIRST + b"GET /healthz HTTP/1.1\r\nX-Long: ")
    reader.feed(b"v" * 5000)  # Refused(414, 'Request Line is too large (more than 4094)')
    reader.feed(b"\r\nHost: x\r\n\r\n")
    assert [r.target for r in reader.ready] == ["/healthz", "/healthz"]


@pytest.mark.parametrize("pipelined", [False, True], ids=["alone", "pipelined"])
def test_a_long_request_line_with_no_line_limit_is_accepted_pipelined_or_not(pipelined: bool) -> None:
    """limit_request_line 0 means no limit on the request line (gunicorn's meaning; the
    non-pipelined request is accepted). A pipelined head begun mid-read is 'unsure', and with
    the line limit 0 its unfinished line is held to limit_request_field_size and reported as a
    header field: a 20 KB request line is refused 431 - only because it was pipelined."""
    reader = _Reader(Limits(line=0, body=1 << 20))
    reader.feed((PIPELINED_FIRST if pipelined else b"") + b"GET /")
    for _ in range(20):  # 20 KB of target, 1 KB a read
        reader.feed(b"a" * 1000)
    reader.feed(b" HTTP/1.1\r\nHost: x\r\n\r\n")  # Refused(431) before this line when pipelined
    assert len(reader.ready[-1].target) == 20001
