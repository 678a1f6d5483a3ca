"""HTTP/1.1 connections of the gevent worker: requests read off the socket with httptools, a POST
to a verb answered by ``Verbs.answer``, anything else by the WSGI app (the Flask app), each reply
written in one send.

httptools (the llhttp parser of Node.js, as uvicorn uses it) frames every request - pipelined or
split across reads, a Content-Length or a chunked body - in C, in ~2 us for kube-scheduler's
head; the verbs then cost what the engine costs, and nothing else runs per request. On top of
the parser this module keeps what the extender promised of its HTTP layer (``docs/openapi.yaml``):

* a body announced over the limit (``server.maxRequestBytes``) is a 413 and is never read; a
  chunked body that grows over it is a 413 as soon as it does; either closes the connection;
* ``Expect: 100-continue`` gets its ``100 Continue`` once the head is in (another expectation:
  417); a ``Transfer-Encoding`` other than ``chunked``: ``extender.api.codings``'s answer (400
  or 501), as under gthread; HTTP versions other than 1.0 and 1.1, and any head the parser
  refuses: 400; a request line or header fields over gunicorn's
  ``limit_request_line`` / ``limit_request_fields`` / ``limit_request_field_size``: 414 or 431.
  Each of these answers in JSON, ``{"error", "message"}``, and closes the connection;
* a request whose body came chunked is answered, then its connection closes, as under gthread;
  HTTP/1.0 and ``Connection: close`` close after their answer; otherwise the connection is kept
  until the client leaves or stays idle for the keep-alive timeout;
* headers with an underscore in their name are dropped before the WSGI app sees them (they
  would pass for their dashed twins, as gunicorn's default ``header_map: drop`` says).

A client that leaves mid-request, mid-reply, or ends TLS without ``close_notify`` just ends its
connection: nothing is logged above debug.
"""

from __future__ import annotations

import io
import logging
import socket
import sys
import time
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any, Callable
from urllib.parse import unquote_to_bytes

import httptools
import orjson

from extender.api import codings
from extender.api.errors import too_large
from extender.api.replies import REASONS, error_payload
from extender.api.verbs import Verbs

log = logging.getLogger("extender.api.http")

_RECV = 256 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                         "trailers", "transfer-encoding", "upgrade", "content-length"})
"""Headers of a WSGI reply the connection sets itself (PEP 3333 forbids apps the hop-by-hop ones)."""
SERVER = "kube-extender"
TURN_EVERY = 4
"""A connection lets the others in before every this many requests it answers (``Connection.turn``)."""


@dataclass(frozen=True)
class Limits:
    """What one request may be: gunicorn's ``limit_request_*`` settings (0 = no limit) and the
    app's body limit (``MAX_CONTENT_LENGTH``; 0 = none)."""

    line: int = 4094
    fields: int = 100
    field_size: int = 8190
    body: int = 0

    @property
    def head(self) -> int:
        """Bytes a head may take before it is refused, whatever its lines."""
        if not (self.line and self.fields and self.field_size):
            return 1 << 20
        return self.line + self.fields * (self.field_size + 2) + 4


class Refused(Exception):
    """A request the connection answers itself with ``status`` and closes: the message names
    the problem."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """One complete request, as read."""

    method: str
    target: str
    """As sent: ``/path?query``, not percent-decoded."""
    version: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    close: bool
    """The connection closes after the answer: HTTP/1.0 or ``Connection: close``, a chunked
    body, an upgrade the server does not speak."""


_date: tuple[int, bytes] = (-1, b"")


def http_date() -> bytes:
    """``Date`` as RFC 9110 wants it, formatted once a second."""
    global _date
    second = int(time.time())
    if _date[0] != second:
        _date = (second, formatdate(second, usegmt=True).encode())
    return _date[1]


def reply_head(status: int, length: int, close: bool, content_type: bytes = b"application/json",
               extra: bytes = b"") -> bytes:
    """Status line and headers of a reply with a body of ``length`` bytes; ``extra``: more header
    lines, each ending in CRLF."""
    return (b"HTTP/1.1 %d %s\r\nServer: %s\r\nDate: %s\r\nConnection: %s\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\n%s\r\n") % (status, REASONS.get(status, "").encode(), SERVER.encode(),
                                               http_date(), b"close" if close else b"keep-alive", content_type,
                                               length, extra)


def error_reply(status: int, message: str) -> bytes:
    """A whole JSON error reply that closes the connection."""
    body = orjson.dumps(error_payload(REASONS.get(status, "error").lower(), message))
    return reply_head(status, len(body), True) + body


def send(sock: Any, data: bytes) -> None:
    """``sock.sendall(data)``, tried first as one ``send``: a reply that fits the socket's buffer
    (every filter and prioritize reply up to thousands of names on a local socket) is written
    without gevent's sendall loop."""
    sent = sock.send(data)
    if sent < len(data):
        sock.sendall(memoryview(data)[sent:])


class _Reader:
    """httptools' callbacks for one connection: collects complete requests in ``ready``, refuses
    (``Refused``) what the limits or the HTTP layer's promises do not allow."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.parser = httptools.HttpRequestParser(self)
        self.ready: list[Request] = []
        self.started = False
        """A request has begun and is not complete."""
        self.head_done = False
        self.expects_continue = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._chunked = False
        self._length = 0
        """The request's Content-Length (0: none)."""
        self._line = 0
        """Bytes of the head's current line not ended yet (``feed``)."""
        self._line_ended = False
        """The head's request line has ended (``feed`` saw a newline in it)."""
        self._unsure = False
        """The head began in the middle of a read: whether its request line ended there is unknown."""
        self._begun = 0
        """Messages begun on this connection."""
        self._raw_left = 0
        """Body bytes still owed to ``_pending``, read by hand after an Upgrade stopped the parser
        (llhttp completes such a request at the end of its head)."""
        self._pending: Request | None = None

    # ---- httptools callbacks ----
    def on_message_begin(self) -> None:
        self.started, self.head_done, self.expects_continue = True, False, False
        self._url, self._headers, self._body, self._size, self._chunked = b"", [], [], 0, False
        self._length = 0
        self._begun += 1
        self._line_ended = self._unsure = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        # gunicorn's limit is the whole line: the method, the target, " HTTP/1.1" and the space
        # (the method looked up only near the limit: llhttp knows no method of 24 letters or more)
        if self.limits.line and len(self._url) + 33 > self.limits.line:
            line = len(self.parser.get_method()) + 1 + len(self._url) + 9
            if line > self.limits.line:
                raise Refused(414, f"Request Line is too large ({line} > {self.limits.line})")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        if self.limits.fields and len(self._headers) > self.limits.fields:
            raise Refused(431, "Error parsing headers: 'limit request headers fields'")
        if self.limits.field_size and len(name) + len(value) + 2 > self.limits.field_size:
            raise Refused(431, "Error parsing headers: 'limit request headers fields size'")

    def on_headers_complete(self) -> None:
        version = self.parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise Refused(400, f"Invalid HTTP Version 'HTTP/{version}'")
        limit = self.limits.body
        hosts = 0
        transfer: list[str] = []
        length = False
        for name, value in self._headers:
            lname = name.lower()
            if lname == b"host":
                hosts += 1
                if hosts > 1:  # RFC 9112 3.2: a request with more than one Host is a 400
                    raise Refused(400, "Invalid HTTP Header: 'HOST'")
            if lname == b"transfer-encoding":
                transfer.append(value.decode("latin-1"))
            elif lname == b"content-length":
                length = True
                self._length = int(value)
                if limit and self._length > limit:
                    raise Refused(413, too_large(limit))
            elif lname == b"expect":
                if value.strip().lower() != b"100-continue":
                    raise Refused(417, f"Unable to comply with expectation: {value.decode('latin-1')!r}")
                self.expects_continue = version == "1.1"
        if transfer:
            refused = codings.refusal(transfer, length=length, http10=version == "1.0")
            if refused is not None:
                raise Refused(*refused)
            self._chunked = True
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self.limits.body and self._size > self.limits.body:
            raise Refused(413, too_large(self.limits.body))
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self.parser
        self.ready.append(Request(parser.get_method().decode("latin-1"), self._url.decode("latin-1"),
                                  parser.get_http_version(), self._headers, b"".join(self._body),
                                  not parser.should_keep_alive() or self._chunked))
        self.started = False

    def _take_raw(self, data: bytes) -> None:
        """The next bytes of ``_pending``'s body; it is ready once all have come."""
        assert self._pending is not None
        part = data[:self._raw_left]
        self._pending.body += part
        self._raw_left -= len(part)
        if not self._raw_left:
            self.ready.append(self._pending)
            self._pending, self.started = None, False
        else:
            self.started = self.head_done = True

    def feed(self, data: bytes) -> None:
        """Parse ``data``; Refused for what the connection must answer itself - a line of the head
        that goes on beyond its limit too, before it ends (httptools holds an unfinished field
        and joins each read's part to it: without a bound, a field that never ends costs time
        growing with the square of its length)."""
        if self._raw_left:
            self._take_raw(data)
            return
        in_head, was_started, begun = self.started and not self.head_done, self.started, self._begun
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            # Upgrade or CONNECT: answered as a plain request, then the connection closes (the
            # server speaks nothing else; the rest of the bytes are not HTTP/1.1).
            if not self.ready:
                raise Refused(400, "Upgrade without a complete request") from None
            self.ready[-1].close = True
            if self._chunked:
                self.ready.pop()
                raise Refused(501, "a chunked body with Upgrade is not supported") from None
            if self._length:  # llhttp left the body unread: take it as it comes
                self._raw_left = self._length
                self._pending = self.ready.pop()
                self._take_raw(data[exc.args[0]:])
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, Refused):
                raise exc.__context__ from None
            raise
        except httptools.HttpParserError as exc:
            if self.started and self.head_done:
                raise Refused(400, f"request body could not be read: {exc}") from None
            raise Refused(400, f"Invalid request: {exc}") from None
        self._follow_line(data, continuing=in_head and self._begun == begun,
                          from_start=not was_started and self._begun == begun + 1)

    def _follow_line(self, data: bytes, continuing: bool, from_start: bool) -> None:
        """After ``data`` was parsed: the length of the head's line not ended yet, refused once it
        is beyond its limit (the field size's for a header line, 431; the request line's, 414).
        Known exactly when ``data`` is all this head's - it went on through the whole read
        (``continuing``), or began with the read (``from_start``) - or when this head began
        later in ``data`` and one of its header lines ended there; otherwise (a pipelined head
        begun after a body, no header line of it ended yet) counted from 0, lenient for that one
        read, and held to the larger limit until a line of it ends (the request line's end is not
        known then)."""
        if not self.started or self.head_done:
            self._line = 0
            return
        end = data.rfind(b"\n")
        if continuing:
            self._line = len(data) - end - 1 if end >= 0 else self._line + len(data)
        elif from_start:
            self._line = len(data) - end - 1 if end >= 0 else len(data)
        elif self._headers and end >= 0:
            self._line = len(data) - end - 1
        else:
            self._line, end, self._unsure = 0, -1, True
        if end >= 0 and (continuing or from_start):
            self._line_ended = True
        header = bool(self._headers) or self._line_ended
        field, line = self.limits.field_size, self.limits.line
        if header:
            limit = field
        elif self._unsure:  # the request line, or already the first header field: the larger bound
            limit = max(field, line) if field and line else 0  # either limit off: none on this line
            header = True
        else:
            limit = line
        if limit and self._line > limit + 2:  # a header line holds its ": " beyond the field's size
            if header:
                raise Refused(431, "Error parsing headers: 'limit request headers fields size'")
            raise Refused(414, f"Request Line is too large (more than {self.limits.line})")


Recorder = Callable[[], bool]
"""Called once per answered request: False when the worker wants the connection closed (it is
restarting or stopping)."""


class Connection:
    """One client connection: requests read, answered and written in order until it closes."""

    def __init__(self, sock: Any, addr: Any, app: Callable[..., Any], verbs: Verbs | None, limits: Limits,
                 environ: dict[str, Any], answered: Recorder, keepalive: bool = True,
                 turn: Callable[[], None] = lambda: None) -> None:
        self.sock = sock
        self.addr = addr
        self.app = app
        self.verbs = verbs
        self.limits = limits
        self.environ = environ
        """The WSGI environ every request starts from (server name and port, URL scheme)."""
        self.answered = answered
        self.keepalive = keepalive
        self.idle = True
        """Waiting for a request to begin: the worker may close it when it stops."""
        self.waiting = True
        """Waiting on the client - for its next request, the rest of one, or to take an answer -
        since ``since`` (``expire``); not while the connection works on an answer."""
        self.since = time.monotonic()
        self.turn = turn
        """Called before every ``TURN_EVERY``-th request is answered: the worker lets its other
        connections in. A client that always has its next request ready (pipelined, or sent the
        moment an answer arrives, as a load generator does) never makes a read wait, so without
        it one connection was served to its end while every other one waited. (Not before each
        one: a turn is a trip through the event loop, ~5% of a small request's time.)"""
        self._head_limit = limits.head

    def serve(self) -> None:
        """Serve until the client leaves, stays idle too long, or a request closes it."""
        reader = _Reader(self.limits)
        sock = self.sock
        continued = False
        head_bytes = 0
        unturned = 0
        while True:
            while not reader.ready:
                if reader.started and reader.head_done and reader.expects_continue and not continued:
                    self._write(_CONTINUE)
                    continued = True
                self.idle = not reader.started
                self.since, self.waiting = time.monotonic(), True
                try:
                    data = sock.recv(_RECV)
                except OSError:  # ssl.SSLError and ConnectionError are OSErrors
                    return  # the client left (TLS included), or the sweep ended the connection
                self.idle = self.waiting = False
                if not data:
                    return
                try:
                    reader.feed(data)
                except Refused as refused:
                    for request in reader.ready:  # complete requests before it are still answered
                        if not self._answer(request):
                            return
                    self._write(error_reply(refused.status, str(refused)))
                    return
                head_bytes = head_bytes + len(data) if reader.started and not reader.head_done else 0
                if head_bytes > self._head_limit:
                    self._write(error_reply(431, f"Request head larger than {self._head_limit} bytes"))
                    return
            continued = False
            unturned += 1
            if unturned == TURN_EVERY:
                unturned = 0
                self.turn()
            if not self._answer(reader.ready.pop(0)):
                return

    def expire(self, now: float, idle: float, stalled: float) -> bool:
        """End the connection if it has waited for a request for more than ``idle`` seconds,
        or for the client to go on with one (the rest of a request, or taking an answer) for
        more than ``stalled``: the worker asks every connection now and then, instead of a
        timeout on every read (a timer set and cancelled per request). True if it ended it."""
        if not self.waiting or now - self.since <= (idle if self.idle else stalled):
            return False
        self._shut()
        return True

    def _write(self, data: bytes) -> None:
        """Send ``data``, waiting on the client while its socket buffer is full."""
        self.since, self.waiting = time.monotonic(), True
        try:
            send(self.sock, data)
        finally:
            self.waiting = False

    def _shut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # its recv returns b"", its send fails
        except OSError:
            pass

    def close_if_idle(self) -> None:
        """End the connection if it waits for a request (the worker is stopping)."""
        if self.idle:
            self._shut()

    def _answer(self, request: Request) -> bool:
        """Answer ``request``; False when the connection must close after it."""
        target, verbs = request.target, self.verbs
        if verbs is not None and request.method == "POST" and (kind := verbs.kinds.get(target)) is not None:
            status, payload, record = verbs.answer(kind, request.body, target)
            data = orjson.dumps(payload)
            close = not self.answered() or request.close or not self.keepalive
            self._write(reply_head(status, len(data), close) + data)
            record()
            return not close
        return self._wsgi(request)

    def _wsgi(self, request: Request) -> bool:
        """The WSGI app's answer to ``request``."""
        started: list[Any] = []
        written: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            started[:] = [status, headers]
            return written.append  # PEP 3333's write(): what it is given comes first

        try:
            result = self.app(self._environ(request), start_response)
            try:
                chunks = list(result)
                body = b"".join(written) + b"".join(chunks)
            finally:
                if hasattr(result, "close"):
                    result.close()
            status_line, headers = started
        except Exception:  # noqa: BLE001 - a failure of the app is a 500 for this request, not the worker's end
            log.exception("unhandled error in the WSGI app", extra={"path": request.target})
            self.answered()
            self._write(error_reply(500, "the server failed to answer"))
            return False
        close = not self.answered() or request.close or not self.keepalive
        status = int(status_line.split(" ", 1)[0])
        content_type = b"application/octet-stream"
        extra = b""
        length = len(body)
        for name, value in headers:
            lname = name.lower()
            if lname == "content-type":
                content_type = value.encode("latin-1")
            elif lname == "content-length" and request.method == "HEAD":
                length = int(value)
            elif lname not in _HOP_BY_HOP:
                extra += f"{name}: {value}\r\n".encode("latin-1")
        head = reply_head(status, length, close, content_type, extra)
        self._write(head if request.method == "HEAD" else head + body)
        return not close

    def _environ(self, request: Request) -> dict[str, Any]:
        path, _, query = request.target.partition("?")
        path = path.partition("#")[0]
        if not path.startswith("/") and "://" in path:  # absolute form: the path is after the authority
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        environ = {**self.environ, "REQUEST_METHOD": request.method, "SCRIPT_NAME": "",
                   "PATH_INFO": unquote_to_bytes(path).decode("latin-1"), "QUERY_STRING": query.partition("#")[0],
                   "RAW_URI": request.target, "SERVER_PROTOCOL": f"HTTP/{request.version}",
                   "REMOTE_ADDR": self.addr[0] if isinstance(self.addr, tuple) else "",
                   "REMOTE_PORT": str(self.addr[1]) if isinstance(self.addr, tuple) else "",
                   "CONTENT_LENGTH": str(len(request.body)), "wsgi.input": io.BytesIO(request.body),
                   "wsgi.input_terminated": True}
        for name, value in request.headers:
            key = name.decode("latin-1").upper()
            if "_" in key:
                continue
            text = value.decode("latin-1").strip()
            if key == "CONTENT-TYPE":
                environ["CONTENT_TYPE"] = text
            elif key not in ("CONTENT-LENGTH", "TRANSFER-ENCODING"):
                key = "HTTP_" + key.replace("-", "_")
                environ[key] = f"{environ[key]},{text}" if key in environ else text
        return environ


def base_environ(server_name: str, port: int, scheme: str) -> dict[str, Any]:
    """The part of the WSGI environ every request of a listener shares."""
    return {"SERVER_NAME": server_name, "SERVER_PORT": str(port), "SERVER_SOFTWARE": SERVER,
            "wsgi.version": (1, 0), "wsgi.url_scheme": scheme, "wsgi.errors": sys.stderr,
            "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False}
