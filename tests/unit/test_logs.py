"""Structured log lines (``extender.logs``): one line per record whatever its fields hold, every
field readable back, and records that gather nothing the formatters do not print."""

from __future__ import annotations

import io
import logging
import re
from typing import Any, Iterator

import orjson
import pytest

from extender.logs import JsonFormatter, LogfmtFormatter, setup_logging


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
