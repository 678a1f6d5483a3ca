"""What kube-extender adds to gunicorn's gthread worker: every answer JSON, and no connection
kept alive that gunicorn would then close. (The gevent worker, ``extender.api.fastlane``, has an
HTTP layer of its own that does both: ``extender.api.http1``.)

* gunicorn answers the requests it cannot parse by itself (a malformed request line or header, a
  Content-Length that is not a number or comes twice, an unsupported Transfer-Encoding, an
  ``Expect`` other than ``100-continue``, a broken chunked body, a head over its limits) with an
  HTML page. ``ThreadWorker`` sends the same status and gunicorn's message as
  ``{"error", "message"}``, like every answer of the app, and still closes the connection. The
  reason phrase - and so ``error`` - is the status's own (``extender.api.replies.REASONS``), not
  gunicorn's text (which says "Bad Request" for its 501).
* A ``Transfer-Encoding`` other than exactly ``chunked`` gets the answer ``extender.api.codings``
  gives, as in the fast lane, and its connection closes: gunicorn would pass ``gzip, chunked``
  (and ``deflate``, ``compress``, ``identity`` before ``chunked``) to the app still encoded,
  answers a lone ``gzip`` with a 400 and ``chunked, br`` with a 501. One gap: gunicorn stops at
  the first coding it does not know (not ``gzip``, ``deflate``, ``compress``, ``identity``) and
  tells only that field, so a request whose field with such a coding is otherwise fine
  (``br``) is a 501 here whatever its other fields, Content-Length or HTTP version say, where
  the fast lane may answer 400 (``chunked`` then ``br`` in two fields; ``br`` with Content-Length).
* A request whose body is announced over the app's limit (Content-Length) gets a 413 without
  the body being read, and a chunked body may turn out over the limit (or broken) only once
  read. Before the next request on the connection gunicorn would have to read what is left:
  gthread gives up after 64 KiB and closes the connection it had just announced as keep-alive.
  ``ThreadWorker`` marks such requests to close instead: the answer says ``Connection: close`` and nothing more is read.
  (kube-scheduler's Go client always sends a Content-Length.)

``ThreadWorker`` is gunicorn's gthread worker with these three. It overrides two methods gunicorn
does not document for custom workers - ``handle_error`` (the base class's: it writes the HTML
page) and gthread's ``handle_request`` - and sets ``must_close`` on gunicorn's request object:
no documented API closes a connection after an answer. The unit and integration tests
(tests/unit/test_workers.py, tests/integration/test_wire_fuzz_http.py) hold them to account on
every gunicorn version setup.cfg allows.
"""

from __future__ import annotations

import html
import re
from typing import Any

import orjson
from gunicorn import util
from gunicorn.http.errors import InvalidHeader, InvalidResponseHeader, UnsupportedTransferCoding
from gunicorn.workers import gthread

from extender.api import codings
from extender.api.replies import REASONS

_STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) ([^\r\n]*)")
_MESSAGE = re.compile(rb"</h1>\s*(.*?)\s*</body>", re.S)


class _Written:
    """A stand-in socket that keeps what gunicorn writes to it (its HTML error page)."""

    def __init__(self) -> None:
        self.data = b""

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.data += data


def json_error(page: bytes) -> bytes | None:
    """gunicorn's HTML error reply ``page`` (``gunicorn.util.write_error``) as the same reply
    with a JSON body; None if it is not one. The reason phrase (and ``error``, in lower case) is
    the status's (``REASONS``), not gunicorn's text: gunicorn says "Bad Request" for its 501."""
    status, message = _STATUS_LINE.match(page), _MESSAGE.search(page)
    if status is None:
        return None
    reason = REASONS.get(int(status.group(1)), status.group(2).decode("latin-1"))
    text = html.unescape(message.group(1).decode("latin-1")) if message is not None else ""
    body = orjson.dumps({"error": reason.lower(), "message": text or reason})
    return (f"HTTP/1.1 {status.group(1).decode()} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


def body_limit(app: Any) -> int:
    """The app's request body limit in bytes (Flask's ``MAX_CONTENT_LENGTH``); 0 = none."""
    return int(getattr(app, "config", {}).get("MAX_CONTENT_LENGTH") or 0)


class _Refused(InvalidHeader):
    """gunicorn's 400 for a request's Transfer-Encoding, saying why (``codings.refusal``)."""

    def __init__(self, message: str, req: Any = None) -> None:
        super().__init__("TRANSFER-ENCODING", req)
        self.message = message

    def __str__(self) -> str:
        return self.message


class _Unsupported(UnsupportedTransferCoding):
    """gunicorn's 501 for a request's Transfer-Encoding, saying which (``codings.refusal``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def coding_refusal(req: Any) -> Exception | None:
    """What to answer gunicorn's request ``req`` for its Transfer-Encoding (``codings.refusal``
    over all its fields, its Content-Length and version): None when it is exactly ``chunked``."""
    headers = req.headers
    values = [value for name, value in headers if name == "TRANSFER-ENCODING"]
    if not values:  # every request asks: most have no coding, nothing more to look at
        return None
    found = codings.refusal(values, length=any(name == "CONTENT-LENGTH" for name, _ in headers),
                            http10=tuple(req.version) < (1, 1))
    if found is None:
        return None
    status, message = found
    return _Refused(message, req) if status == 400 else _Unsupported(message)


def unbounded(req: Any, limit: int) -> bool:
    """gunicorn request ``req`` announces a body over ``limit`` bytes, or comes in chunks (the
    only Transfer-Encoding ``ThreadWorker`` serves): its size is known only once read."""
    for name, value in req.headers:
        if name == "TRANSFER-ENCODING":
            return True
        if name == "CONTENT-LENGTH" and limit and value.isdigit() and int(value) > limit:
            return True
    return False


class ThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, its own answers in JSON (see the module docstring)."""

    wsgi: Any  # gunicorn's: the app, once loaded

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's answer to ``exc``, in JSON. A request gunicorn refused for its
        Transfer-Encoding - as an invalid header (with the request: all its fields are known)
        or as a coding it does not know (only the field it was reading is) - gets the answer
        ``codings.refusal`` gives: ``chunked, br`` a 400, a lone ``gzip`` a 501."""
        if isinstance(exc, (_Refused, _Unsupported)):
            pass
        elif isinstance(exc, UnsupportedTransferCoding):  # the field it names, nothing else known
            found = codings.refusal([str(exc.hdr)])
            exc = _Refused(found[1]) if found and found[0] == 400 else exc
        elif isinstance(exc, InvalidHeader) and not isinstance(exc, InvalidResponseHeader) and exc.req is not None:
            req = req or exc.req  # the request for the access log
            exc = coding_refusal(exc.req) or exc
        page = _Written()
        super().handle_error(req, page, addr, exc)  # gunicorn logs it and writes the page
        reply = json_error(page.data)
        try:
            util.write_nonblock(client, reply if reply is not None else page.data)
        except Exception:  # noqa: BLE001 - as gunicorn: the client may be gone
            pass

    def handle_request(self, req: Any, conn: Any) -> bool:
        """gthread's, but a request whose Transfer-Encoding is not ``chunked`` (gunicorn lets
        ``gzip, chunked`` through, the body still encoded) gets ``codings.refusal``'s answer and
        its connection closed, the app never called; one whose body size is known only once
        read closes after its answer."""
        refused = coding_refusal(req)
        if refused is not None:
            self.handle_error(req, conn.sock, conn.client, refused)
            return False
        if unbounded(req, body_limit(self.wsgi)):
            req.must_close = True
        return bool(super().handle_request(req, conn))
