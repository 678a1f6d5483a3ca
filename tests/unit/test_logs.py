"""Structured log lines (``extender.logs``): one line per record whatever its fields hold, every
field readable back, and records that gather nothing the formatters do not print."""

from __future__ import annotations

import io
import logging
import re
import time
from typing import Any, Iterator

import orjson
import pytest

from extender.logs import JsonFormatter, LogfmtFormatter, info_line, setup_logging


def record(**fields: Any) -> logging.LogRecord:
    rec = logging.LogRecord("extender.api", logging.INFO, __file__, 1, "request", None, None)
    rec.__dict__.update(fields)
    return rec


@pytest.mark.parametrize("value, text", [
    (100, "100"),
    (0.235, "0.235"),
    ("default/p", "default/p"),
    ("", '""'),
    ("two words", '"two words"'),
    ('say "hi"', r'"say \"hi\""'),
    ("a=b", '"a=b"'),
    ("line\nbreak", r'"line\nbreak"'),
    ("carriage\rreturn", r'"carriage\rreturn"'),
    ("tab\there", r'"tab\there"'),
    ("bell\x07 and del\x7f", r'"bell\u0007 and del\u007f"'),
    ("back\\slash", "back\\slash"),
    ("back\\slash and space", r'"back\\slash and space"'),
    (True, "True"),
    (None, "None"),
], ids=lambda v: repr(v)[:20])
def test_a_logfmt_value_is_bare_or_quoted_and_never_breaks_its_line(value: Any, text: str) -> None:
    line = LogfmtFormatter().format(record(field=value))
    assert line.endswith(f" field={text}")
    assert "\n" not in line and "\r" not in line


def test_a_forged_field_stays_inside_its_value() -> None:
    line = LogfmtFormatter().format(record(pod='x" level=error msg="forged'))
    assert line.endswith(r' msg=request pod="x\" level=error msg=\"forged"')


def test_a_json_line_holds_every_field() -> None:
    line = JsonFormatter().format(record(verb="filter", nodes=100, error="a\nb"))
    out = orjson.loads(line)
    assert (out["level"], out["logger"], out["msg"]) == ("info", "extender.api", "request")
    assert (out["verb"], out["nodes"], out["error"]) == ("filter", 100, "a\nb")


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    saved = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing,
             logging.getLogger().handlers[:], logging.getLogger().level)
    setup_logging("info", "logfmt")
    stream = io.StringIO()
    logging.getLogger().handlers[0].setStream(stream)
    yield stream
    (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing,
     logging.getLogger().handlers[:], level) = saved
    logging.getLogger().setLevel(level)


def test_records_gather_nothing_the_formatters_do_not_print(logged: io.StringIO) -> None:
    seen: list[logging.LogRecord] = []
    logging.getLogger().handlers[0].addFilter(lambda rec: seen.append(rec) or True)
    logging.getLogger("extender.api").info("request", extra={"verb": "filter"})
    assert logged.getvalue().endswith("msg=request verb=filter\n")
    (rec,) = seen
    assert (rec.lineno, rec.thread, rec.processName) == (0, None, None)  # no frame walked


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_a_request_line_written_directly_is_the_line_a_record_makes(fmt: str, logged: io.StringIO) -> None:
    setup_logging("info", fmt)
    stream = io.StringIO()
    logging.getLogger().handlers[0].setStream(stream)
    api = logging.getLogger("extender.api")
    fields = {"verb": "filter", "pod": "default/p q", "nodes": 100, "outcome": "feasible", "duration_ms": 0.235}
    clock = [1795485751.0625]
    real = time.time
    time.time = lambda: clock[0]  # type: ignore[assignment]
    try:
        info_line(api, "request", dict(fields))
        api.info("request", extra=dict(fields))
    finally:
        time.time = real  # type: ignore[assignment]
    direct, recorded = stream.getvalue().splitlines()
    assert direct == recorded
    assert direct.startswith('ts=2026-11-24T02:02:31.062Z level=info') if fmt == "logfmt" else orjson.loads(direct)


def test_a_request_line_is_a_record_when_the_setup_is_not_ours(logged: io.StringIO,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A handler added (here pytest's own) sees every request line as a record."""
    with caplog.at_level(logging.INFO):
        info_line(logging.getLogger("extender.api"), "request", {"verb": "filter"})
    assert [(r.name, r.getMessage(), r.verb) for r in caplog.records] == [("extender.api", "request", "filter")]
    quiet = logging.getLogger("extender.quiet")
    quiet.setLevel(logging.WARNING)
    try:
        info_line(quiet, "request", {"verb": "filter"})
    finally:
        quiet.setLevel(logging.NOTSET)
    assert "quiet" not in logged.getvalue()
