"""Structured logging: a constant message plus key=value fields (logfmt) or one JSON object.

Fields come from ``extra={...}``: ``log.info("request", extra={"verb": "filter", "nodes": 500})``
prints ``ts=... level=info logger=extender.api msg=request verb=filter nodes=500``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, Mapping

import orjson

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_NEEDS_QUOTES = re.compile(r'[ "=\x00-\x1f\x7f]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


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


class _LineFormatter(logging.Formatter):
    """A formatter that can also make a line straight from its parts (``line``): what
    ``info_line`` writes without a LogRecord is the very line ``format`` makes of one."""

    def line(self, created: float, level: str, logger: str, msg: str, fields: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def format(self, record: logging.LogRecord) -> str:
        standard = _STANDARD
        fields = {k: v for k, v in vars(record).items() if k not in standard}
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        return self.line(record.created, record.levelname.lower(), record.name, record.getMessage(), fields)


class LogfmtFormatter(_LineFormatter):
    """``ts=... level=... logger=... msg=...`` then the record's extra fields in order. One line
    is formatted per verb request, so the timestamp's seconds part is formatted once a second."""

    _second: tuple[int, str] = (-1, "")

    def line(self, created: float, level: str, logger: str, msg: str, fields: Mapping[str, Any]) -> str:
        second = int(created)
        cached = self._second
        if cached[0] != second:
            cached = self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        head = f"ts={cached[1]}.{int((created - second) * 1000):03d}Z level={level} logger={logger} msg={_quote(msg)}"
        return " ".join([head, *[f"{k}={_quote(v)}" for k, v in fields.items()]])


class JsonFormatter(_LineFormatter):
    def line(self, created: float, level: str, logger: str, msg: str, fields: Mapping[str, Any]) -> str:
        return orjson.dumps({"ts": created, "level": level, "logger": logger, "msg": msg, **fields},
                            default=str).decode()


_installed: logging.StreamHandler | None = None  # type: ignore[type-arg]
"""The handler ``setup_logging`` installed on the root logger."""


def info_line(logger: logging.Logger, msg: str, fields: dict[str, Any]) -> None:
    """``logger.info(msg, extra=fields)``, for a line written on every verb request. When the
    logging set-up is still exactly ``setup_logging``'s - its one handler on the root logger,
    no other handler or filter on the way - the line is formatted from the fields and written
    under the handler's lock without making a LogRecord (the same line, ~3x cheaper); any other
    set-up (a test capturing records, a handler added) gets the record as usual."""
    handler = _installed
    root = logging.root
    formatter = handler.formatter if handler is not None else None
    plain = (handler is not None and isinstance(formatter, _LineFormatter) and logger.isEnabledFor(logging.INFO)
             and root.handlers == [handler] and not root.filters and not handler.filters
             and handler.level <= logging.INFO)
    node: logging.Logger | None = logger
    while plain and node is not None and node is not root:
        plain = not node.handlers and not node.filters and node.propagate
        node = node.parent
    if not plain or handler is None or not isinstance(formatter, _LineFormatter):
        logger.info(msg, extra=fields)
        return
    text = formatter.line(time.time(), "info", logger.name, msg, fields)
    handler.acquire()
    try:
        handler.stream.write(text + handler.terminator)
        handler.flush()
    except Exception:  # noqa: BLE001 - as Handler.emit: a broken stream never fails a request
        handler.handleError(logging.makeLogRecord({"name": logger.name, "msg": msg, "levelno": logging.INFO}))
    finally:
        handler.release()


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    """Every record to stderr, one line each, in ``fmt`` (logfmt or json), from ``level`` up.

    No formatter prints a record's source location, thread or process name, so records do
    not gather them (the logging HOWTO's "Optimization" settings): ~6 us less of each verb
    request's log line, a third of it. (The process id stays: gunicorn's own log format prints
    it.)"""
    logging._srcfile = None  # documented in the HOWTO: no sys._getframe walk per record
    logging.logThreads = False
    logging.logMultiprocessing = False
    global _installed
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    _installed = handler
    root.setLevel(level.upper())
