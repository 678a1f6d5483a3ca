"""JSON replies: every answer of the extender is a JSON document, errors included."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from flask import Response, request

REASONS: dict[int, str] = {s.value: s.phrase for s in HTTPStatus} | {413: "Request Entity Too Large",
                                                                     414: "URI Too Long"}
"""The reason phrase of each status, as every answer of the extender says it (lower case, its
``error``): ``http.HTTPStatus``'s, but 413 and 414 as Flask and gunicorn say them, whatever the
Python version."""


def json_response(payload: Any, status: int = 200) -> Response:
    """``payload`` as a Flask response; pretty-printed when the query string has ``?pretty``
    (what is already serialized - ``orjson.Fragment``, the payload or any part of it - is parsed
    again for that)."""
    option = orjson.OPT_INDENT_2 if "pretty" in request.args else 0
    if option:
        payload = orjson.loads(orjson.dumps(payload))
    return Response(orjson.dumps(payload, option=option), status=status, mimetype="application/json")


def error_payload(error: str, message: str) -> dict[str, Any]:
    """The body of every error answer: what kind of error (the HTTP reason, lower case), and a
    message naming the problem."""
    return {"error": error, "message": message}
