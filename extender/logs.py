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
_NEEDS_QUOTES = re.compile(r'[ "=\x00-\x1f\x7f]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _quote(value: Any) -> str:
    """The value as logfmt text: bare when it has no space, quote, ``=`` or control character
    (and is not empty), else double-quoted with backslash and quote escaped, and every control
    character too (``\\n``, ``\\r``, ``\\t``, else ``\\u00XX``): a value never breaks its line,
    nor forges another."""
    kind = type(value)
    if kind is int or kind is float:
        return str(value)
    text = value if kind is str else str(value)
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _CONTROL.sub(lambda m: _ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04x}", text) + '"'


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
    """Every record to stderr, one line each, in ``fmt`` (logfmt or json), from ``level`` up.

    No formatter prints a record's source location, thread or process name, so records do
    not gather them (the logging HOWTO's "Optimization" settings): ~6 us less of each verb
    request's log line, a third of it. (The process id stays: gunicorn's own log format prints
    it.)"""
    logging._srcfile = None  # documented in the HOWTO: no sys._getframe walk per record
    logging.logThreads = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
