"""The fast lane's pieces without a server: which request heads it frames itself, the reply head
it writes, and when it is on. Over real HTTP: tests/integration/test_fastlane_http.py."""

from __future__ import annotations

import email.utils
from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_node

from extender.api.fastlane import Head, lane_of, parse_head, reply_head

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
