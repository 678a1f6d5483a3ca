"""Error mapping: one Flask error handler per exception class, each turning it into a JSON answer
(as Flask's documentation recommends for APIs). The verbs answer their own errors
(``extender.api.verbs``); these are what the Flask app raises around them: a body that cannot be
read, routing (404, 405 naming the methods allowed), the body limit (413), and anything
unexpected in the debug views; OPTIONS is answered in JSON too."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from extender.api import wire
from extender.api.replies import error_payload, json_response
from extender.api.verbs import Verbs, bad_request_payload

log = logging.getLogger("extender.api")


def too_large(limit: Any) -> str:
    """The message of a 413."""
    return f"request body larger than the configured limit of {limit} bytes"


def register_errors(app: Flask, verbs: Verbs) -> None:
    """The JSON error handlers of ``app``; bad requests and internal errors are counted by verb
    (``other`` off the verb routes)."""

    def verb_kind() -> str:
        endpoint = request.endpoint or ""
        return endpoint.removeprefix("verb_") if endpoint.startswith("verb_") else "other"

    @app.errorhandler(wire.BadRequest)
    def bad_request(exc: wire.BadRequest) -> Response:
        verbs.bad_request(verb_kind(), request.path, exc)
        return json_response(bad_request_payload(exc), 400)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        message = exc.description or exc.name
        if exc.code == 413:
            message = too_large(app.config.get("MAX_CONTENT_LENGTH"))
        elif exc.code == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        response = json_response(error_payload(exc.name.lower(), message), exc.code or 500)
        for name, value in exc.get_headers():
            if name.lower() == "allow":  # a 405 names the methods allowed (RFC 9110 15.5.6)
                response.headers[name] = value
        return response

    @app.before_request
    def options() -> Response | None:
        """OPTIONS is answered in JSON, as every other answer (Flask's own is an empty HTML page):
        the methods the path allows, also in ``Allow``."""
        if request.method != "OPTIONS" or request.url_rule is None:
            return None
        allowed = sorted((request.url_rule.methods or set()) | {"OPTIONS"})
        response = json_response({"allow": allowed}, 200)
        response.headers["Allow"] = ", ".join(allowed)
        return response

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        verbs.metrics.internal_errors.labels(verb_kind()).inc()
        log.error("unhandled error", exc_info=exc, extra={"path": request.path})
        return json_response(error_payload("internal error", f"{type(exc).__name__}: {exc}"), 500)
