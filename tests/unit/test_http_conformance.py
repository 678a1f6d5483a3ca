"""The fast lane and the Flask error answers against what HTTP/1.1 asks of a server: the whole
request line within its limit, an unfinished header field bounded, 405 with Allow, OPTIONS in JSON, one Host."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_fastlane import LIMIT, Lane, app, lane  # noqa: F401 - fixtures

from extender.api.http1 import Limits


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
