"""Structured logging: a constant message plus key=value fields (logfmt) or one JSON object.

Fields come from ``extra={...}``: ``log.info("request", extra={"verb": "filter", "nodes": 500})``
prints ``ts=... level=info logger=extender.api msg=request verb=filter nodes=500``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

import orjson

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_NEEDS_QUOTES = re.compile(r'[ "=\n\t]')


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _quote(value: Any) -> str:
    """The value as logfmt text: bare when it has no space, quote, ``=``, newline or tab (and is
    not empty), else double-quoted with backslash, quote and newline escaped."""
    text = value if type(value) is str else str(value)
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=... logger=... msg=...`` then the record's extra fields in order. One line
    is formatted per verb request, so the timestamp's seconds part is formatted once a second."""

    _second: tuple[int, str] = (-1, "")

    def _timestamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        cached = self._second
        if cached[0] != second:
            cached = self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{cached[1]}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        parts = [f"ts={self._timestamp(record)} level={record.levelname.lower()} logger={record.name} "
                 f"msg={_quote(record.getMessage())}"]
        standard = _STANDARD
        parts += [f"{k}={_quote(v)}" for k, v in vars(record).items() if k not in standard]
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": record.created, "level": record.levelname.lower(), "logger": record.name,
                               "msg": record.getMessage(), **_fields(record)}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
