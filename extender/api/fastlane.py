"""The fast lane: kube-scheduler's filter and prioritize answered straight off the socket.

gunicorn's gevent worker spends ~0.15 ms of pure Python on each request outside the app (its
request parser, the WSGI environ, response-header checks) and writes the status line and the
body in two sends; for the two verbs kube-scheduler calls one after the other for every pod, that
was a third of the latency the extender added. ``FastLaneWorker`` is that worker with a fast lane
in front of it, per keep-alive connection:

* it reads each request itself; when the head is the plain case (see ``parse_head``: ``HTTP/1.1``,
  one ``Content-Length`` within the body limit, no ``Transfer-Encoding``/``Expect``/``Upgrade``,
  well-formed lines within gunicorn's limits), the path is a hot verb and ``HotVerbs`` answers
  it, the reply goes out in one send, and only then is the request logged and counted;
* any other request framed that way (bind, preempt, probes, metrics, a verb the handler refuses
  as bad, a follower's 503) is handed to gunicorn exactly as it arrived - its parser, the Flask
  app, its response - and the connection comes back to the lane for the next request;
* a head that is not the plain case (chunked, HTTP/1.0, malformed, a body over the limit, an
  oversized head) hands the rest of the connection to gunicorn with the bytes already read, so
  whatever gunicorn and Flask answered before, they still answer.

The lane is off (plain gunicorn gevent worker) when the app has no ``HotVerbs``, or gunicorn is
set up for something the lane does not speak: HTTP/2, the PROXY protocol, uWSGI, no keep-alive.
"""

from __future__ import annotations

import errno
import re
import ssl
import time
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

import gevent
import gunicorn
from gunicorn.http import RequestParser
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.ggevent import GeventWorker

from extender.api.routes import HotVerbs, Record
from extender.api.workers import JsonErrors

_BLANK_LINE = b"\r\n\r\n"
_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[!-~]*) HTTP/1\.1")
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[!-~\x80-\xff]+(?:[ \t]+[!-~\x80-\xff]+)*)?)[ \t]*")
_MAX_HEAD = 64 * 1024
"""A head still unfinished after this many bytes is gunicorn's to judge (its limits apply)."""
_RECV = 256 * 1024
_RECV_MAX = 4 * 1024 * 1024
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_SERVER = getattr(gunicorn, "SERVER", "gunicorn")
_QUIET_ERRNOS = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN)


@dataclass(frozen=True, slots=True)
class Head:
    """A request head the fast lane can frame by itself."""

    method: str
    target: str
    """The request target as sent: ``/path`` with any query string, not percent-decoded."""
    length: int
    """Body bytes (``Content-Length``; 0 when absent)."""
    close: bool
    """The client sent ``Connection: close``."""


def parse_head(head: bytes, max_line: int = 4094, max_fields: int = 100, max_field: int = 8190) -> Head | None:
    """``head`` (the bytes before the blank line) if it is the plain case, else None: the request
    line ``METHOD /target HTTP/1.1``; header lines ``name: value`` with a token name and visible
    characters (spaces and tabs inside); at most one ``Content-Length``, all digits; no
    ``Transfer-Encoding``, ``Expect`` or ``Upgrade``; ``Connection`` only ``keep-alive`` or
    ``close``; within gunicorn's ``limit_request_*`` settings (0 = no limit), as ``max_*``.
    None means "let gunicorn's parser decide", never "reject"."""
    lines = head.split(b"\r\n")
    if (max_line and len(lines[0]) > max_line) or (max_fields and len(lines) - 1 > max_fields):
        return None
    request = _REQUEST_LINE.fullmatch(lines[0])
    if request is None:
        return None
    length: int | None = None
    close = False
    for line in lines[1:]:
        field = _FIELD.fullmatch(line)
        if field is None or (max_field and len(line) > max_field):
            return None
        name, value = field.group(1).lower(), field.group(2)
        if name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > 15:
                return None
            length = int(value)
        elif name == b"connection":
            token = value.lower()
            if token not in (b"keep-alive", b"close"):
                return None
            close = close or token == b"close"
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            return None
    return Head(request.group(1).decode(), request.group(2).decode("latin-1"), length or 0, close)


_date: tuple[int, bytes] = (-1, b"")


def _http_date() -> bytes:
    """``Date`` as RFC 9110 wants it, formatted once a second."""
    global _date
    second = int(time.time())
    if _date[0] != second:
        _date = (second, formatdate(second, usegmt=True).encode())
    return _date[1]


def reply_head(status: int, reason: str, length: int, close: bool) -> bytes:
    """Status line and headers of a JSON reply of ``length`` bytes, as gunicorn writes them."""
    return (f"HTTP/1.1 {status} {reason}\r\nServer: {_SERVER}\r\nDate: ".encode() + _http_date()
            + (b"\r\nConnection: close" if close else b"\r\nConnection: keep-alive")
            + f"\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())


class _Replay:
    """The client socket with bytes already read from it served again first, for gunicorn's
    parser when it takes over a connection; everything else goes to the socket."""

    def __init__(self, sock: Any, data: bytes) -> None:
        self._sock = sock
        self._data = data

    def recv(self, size: int, *flags: int) -> bytes:
        if not self._data:
            return bytes(self._sock.recv(size, *flags))
        out, self._data = self._data[:size], self._data[size:]
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def lane_of(app: Any, cfg: Any) -> HotVerbs | None:
    """The app's HotVerbs when the fast lane may serve it under gunicorn settings ``cfg``."""
    hot = getattr(app, "wsgi_app", None)
    if not isinstance(hot, HotVerbs) or not cfg.keepalive:
        return None
    if "h2" in (getattr(cfg, "http_protocols", None) or ()) or getattr(cfg, "protocol", "http") != "http":
        return None
    if getattr(cfg, "proxy_protocol", "off") not in ("off", False, None):
        return None
    return hot


class FastLaneWorker(JsonErrors, GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker with the fast lane (module docstring) on every connection, and
    ``JsonErrors`` for what gunicorn answers itself."""

    lane: HotVerbs | None = None
    alive: bool  # gunicorn's: False once the worker is shutting down

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.lane = lane_of(self.wsgi, self.cfg)
        if self.lane is not None:
            self.log.info("Fast lane for %s", ", ".join(sorted(self.lane.routes)))
        else:
            self.log.info("Fast lane off (no hot verbs, or HTTP/2, PROXY protocol, uWSGI or no keep-alive)")

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        if self.lane is None:
            super().handle(listener, client, addr)
            return
        client.setblocking(1)
        try:
            if isinstance(client, ssl.SSLSocket) and not self.cfg.do_handshake_on_connect:
                client.do_handshake()
            self._serve(listener, client, addr)
        except OSError as exc:
            if exc.errno not in _QUIET_ERRNOS:
                self.log.exception("Socket error processing request.")
        except Exception:  # noqa: BLE001 - a bug here closes this connection, never the worker
            self.log.exception("Error handling request")
        finally:
            client.close()

    def _serve(self, listener: Any, client: Any, addr: Any) -> None:
        """Requests of one connection until it closes (see the module docstring)."""
        buf = bytearray()
        idle = gevent.Timeout(self.cfg.keepalive)  # the keep-alive timeout while waiting for a head
        try:
            self._requests(listener, client, addr, buf, idle)
        finally:
            idle.close()

    def _requests(self, listener: Any, client: Any, addr: Any, buf: bytearray, idle: gevent.Timeout) -> None:
        """The loop of ``_serve``: read a request, answer it or hand it over, until the end."""
        assert self.lane is not None
        lane, cfg = self.lane, self.cfg
        listener_name = None
        while True:
            # let the other connections in between two requests: a client that always has its
            # next request ready (pipelined, or sent as fast as a load generator sends) never
            # makes a read wait, and without this held the worker while every other waited
            gevent.sleep(0)
            end = _await_head(client, buf, idle)
            if end is None:
                return  # the client closed the connection, or stayed idle too long
            head = parse_head(bytes(buf[:end]), cfg.limit_request_line, cfg.limit_request_fields,
                              cfg.limit_request_field_size) if end >= 0 else None
            if head is None or (lane.limit and head.length > lane.limit):
                super().handle(listener, _Replay(client, bytes(buf)), addr)  # gunicorn's from here on
                return
            size = end + len(_BLANK_LINE) + head.length
            if not _read_to(client, buf, size):
                return  # the client left mid-body
            raw = bytes(buf[:size])
            del buf[:size]
            answer = lane.respond(head.target, raw[size - head.length:]) if head.method == "POST" else None
            if answer is not None:
                if not self._send(client, answer, head.close):
                    return
                continue
            if listener_name is None:
                listener_name = listener.getsockname()
            if not self._delegate(listener_name, client, addr, raw):
                return

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        self.close_if_unbounded(req)
        super().handle_request(listener_name, req, sock, addr)

    def _send(self, client: Any, answer: tuple[int, bytes, Record], close: bool) -> bool:
        """Write a lane answer in one send, then log and count the request; False when the
        connection must close (the client asked, or the worker is restarting or stopping)."""
        status, data, record = answer
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        close = close or not self.alive
        client.sendall(reply_head(status, _REASONS.get(status, ""), len(data), close) + data)
        record()
        return not close

    def _delegate(self, listener_name: Any, client: Any, addr: Any, raw: bytes) -> bool:
        """gunicorn answers one complete request (its bytes ``raw``) as it always did; False when
        the connection must close after it."""
        req = None
        try:
            req = next(RequestParser(self.cfg, [raw], addr))
            self.handle_request(listener_name, req, client, addr)
        except (StopIteration, NoMoreData):
            return False
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - gunicorn's own answer to a bad request or app failure
            self.handle_error(req, client, addr, exc)
            return False
        return True


def _await_head(sock: Any, buf: bytearray, idle: gevent.Timeout) -> int | None:
    """``_read_head`` within the keep-alive timeout ``idle``: None when it expires as well."""
    idle.start()
    try:
        return _read_head(sock, buf)
    except gevent.Timeout as exc:
        if exc is not idle:
            raise
        return None
    finally:
        idle.cancel()


def _read_head(sock: Any, buf: bytearray) -> int | None:
    """Read until ``buf`` holds a whole head: the index of its blank line; -1 when none shows up
    within ``_MAX_HEAD`` bytes; None when the client closes first."""
    seen = 0
    while True:
        end = buf.find(_BLANK_LINE, max(0, seen - 3))
        if end >= 0:
            return end
        if len(buf) > _MAX_HEAD:
            return -1
        seen = len(buf)
        data = sock.recv(_RECV)
        if not data:
            return None
        buf += data


def _read_to(sock: Any, buf: bytearray, size: int) -> bool:
    """Read until ``buf`` holds ``size`` bytes; False when the client closes first."""
    while len(buf) < size:
        data = sock.recv(min(max(_RECV, size - len(buf)), _RECV_MAX))
        if not data:
            return False
        buf += data
    return True
