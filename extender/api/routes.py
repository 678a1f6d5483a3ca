"""The HTTP surface, wired: the four verbs under the configured prefix (``extender.api.verbs``),
the probes and debug views (``extender.api.debug``), JSON for every error
(``extender.api.errors``).

A verb request reaches ``Verbs.answer`` once, by whichever door it came in: the gevent worker's
fast lane (``extender.api.fastlane``), the WSGI shortcut ``VerbShortcut`` (a plain POST under any
WSGI server), or the Flask view (everything else: a query string such as ``?pretty``, a chunked
body, a body over the limit). The doors differ only in how they read the body and write the reply.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Callable, Mapping

import orjson
from flask import Flask, Response, request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import RequestEntityTooLarge

from extender.api import wire
from extender.api.debug import register_debug
from extender.api.errors import register_errors
from extender.api.replies import json_response
from extender.api.verbs import Verbs
from extender.metrics import Metrics
from extender.runtime.engine import Engine

_REASONS = {s.value: s.phrase for s in HTTPStatus}


@dataclass
class ApiSettings:
    path_prefix: str
    verbs: Mapping[str, str]
    """verb kind (filter, prioritize, preempt, bind) -> URL path segment."""
    ready: Callable[[], tuple[bool, str]]
    describe: Callable[[], Mapping[str, Any]] = field(default=lambda: {})
    serving: Callable[[], bool] = field(default=lambda: True)
    """False on a follower: the verbs answer 503 (only the leader decides)."""
    synced: Callable[[], bool] = field(default=lambda: True)
    """False until the cluster cache has synced: the verbs answer 503 (a partial view would give
    capacity twice)."""


class VerbShortcut:
    """WSGI middleware: a plain POST to a verb (no query string, a Content-Length within the
    limit, a body as long as it says) goes straight to ``Verbs.answer``, without Flask's
    per-request machinery (~0.3 ms); anything else goes to the Flask app. ``verbs`` and ``limit``
    are also what the fast lane serves."""

    def __init__(self, app: Callable[..., Any], verbs: Verbs, limit: int) -> None:
        self.app = app
        self.verbs = verbs
        self.limit = limit

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        kind = self.verbs.kinds.get(path)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if kind is None or environ.get("REQUEST_METHOD") != "POST" or environ.get("QUERY_STRING") \
                or length <= 0 or (self.limit and length > self.limit):
            return self._app(environ, start_response, length)
        body = environ["wsgi.input"].read(length)
        if len(body) != length:  # the client stopped sending: the Flask view names the problem
            environ["wsgi.input"] = io.BytesIO(body)
            return self.app(environ, start_response)
        status, payload, record = self.verbs.answer(kind, body, path)
        data = orjson.dumps(payload)
        start_response(f"{status} {_REASONS[status]}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return _ThenRecord(data, record)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any], length: int) -> Any:
        """The Flask app's answer; then what it left unread of a body of ``length`` bytes
        within the limit (a 404 or 405 reads none of it) is read and dropped before the answer
        goes out: gunicorn's gthread worker reads at most 64 KiB of it before the next request
        and otherwise closes the connection it had just answered with keep-alive. A chunked
        body, or one announced over the limit, is not read: the worker closes those
        connections, and says so (``extender.api.workers``)."""
        if not (self.limit and 0 < length <= self.limit):
            return self.app(environ, start_response)
        body = environ["wsgi.input"] = _Body(environ["wsgi.input"], length)
        answer = self.app(environ, start_response)
        try:
            while body.read(1 << 16):
                pass
        except Exception:  # noqa: BLE001 - a body that cannot be read (the client left) ends here
            pass
        return answer


class _ThenRecord(list[bytes]):
    """A verb's reply body whose request is recorded once the server has sent it: PEP 3333 has
    the server call ``close()`` when the response is done (or the client left). What the record
    does after its log line - scoring a filter's feasible nodes ahead of the prioritize to come
    - then never delays the reply."""

    def __init__(self, data: bytes, record: Callable[[], None]) -> None:
        super().__init__((data,))
        self._record: Callable[[], None] | None = record

    def close(self) -> None:
        record, self._record = self._record, None
        if record is not None:
            record()


class _Body:
    """A request body stream read no further than its Content-Length (a WSGI server need not
    bound it: werkzeug's development server hands over the connection itself)."""

    def __init__(self, stream: Any, length: int) -> None:
        self._stream = stream
        self._left = length

    def _take(self, data: bytes) -> bytes:
        self._left -= len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        return self._take(self._stream.read(size)) if size else b""

    def readline(self, size: int | None = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        return self._take(self._stream.readline(size)) if size else b""

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


def register(app: Flask, engine: Engine, metrics: Metrics, settings: ApiSettings) -> None:
    # A path with a doubled slash is a 404 naming it, not an HTML redirect to the path without
    # (kube-scheduler only sends one when a verb is configured with a leading slash).
    app.url_map.merge_slashes = False
    verbs = Verbs(engine, metrics, settings.path_prefix, settings.verbs, settings.serving, settings.synced)
    limit = int(app.config.get("MAX_CONTENT_LENGTH") or 0)

    def read_body() -> bytes:
        """The request body. Werkzeug stops silently at MAX_CONTENT_LENGTH when there is no
        Content-Length (a chunked upload): a body that reaches the limit is too large, not
        truncated JSON. A body that did not arrive as framed - its chunked framing broke, or the
        client stopped sending before its Content-Length (gunicorn hands over what came) - is a
        bad request, not an internal error nor a shorter request."""
        try:
            data = request.get_data()
        except ParseException as exc:
            raise wire.BadRequest(f"request body could not be read: {type(exc).__name__}: {exc}") from exc
        if request.content_length is None and limit and len(data) >= limit \
                and request.environ["wsgi.input"].read(1):  # werkzeug stops at the limit: one byte more?
            raise RequestEntityTooLarge()
        if request.content_length is not None and len(data) < request.content_length:
            raise wire.BadRequest(f"request body ended after {len(data)} of the {request.content_length} bytes "
                                  "its Content-Length announced")
        return data

    def view(kind: str) -> Callable[[], Response]:
        def answer() -> Response:
            status, payload, record = verbs.answer(kind, read_body(), request.path)
            record()
            return json_response(payload, status)
        return answer

    for path, kind in verbs.kinds.items():
        app.add_url_rule(path, f"verb_{kind}", view(kind), methods=["POST"])
    app.wsgi_app = VerbShortcut(app.wsgi_app, verbs, limit)  # type: ignore[method-assign]
    register_debug(app, engine, metrics, settings.ready, settings.describe)
    register_errors(app, verbs)
