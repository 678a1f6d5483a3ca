"""Durations as Kubernetes writes them (Go's ``time.ParseDuration``), shared by the configuration
and plugin args."""

from __future__ import annotations

import math
import re
from typing import Any

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(value: Any) -> float:
    """Go-style duration ("5s", "1m30s", "250ms") or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
        if not math.isfinite(seconds):
            raise ValueError(f"{str(value)[:20]!r} is not a finite duration")
        return _within_go(seconds, value)
    if isinstance(value, str) and _DURATION.match(value.strip()):
        return _within_go(sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value)), value)
    if value == "0":
        return 0.0
    raise ValueError(f"{value!r} is not a duration (e.g. 5s, 1m30s, 250ms)")


GO_MAX_SECONDS = (2**63 - 1) / 1e9
"""The longest duration Go's time.Duration holds (~2562047h): kube-scheduler reads ours with it."""


def _within_go(seconds: float, value: Any) -> float:
    if not abs(seconds) <= GO_MAX_SECONDS:  # inf and nan too
        raise ValueError(f"{str(value)[:20]!r} is longer than the longest duration Go holds (2562047h)")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as Kubernetes writes a duration: whole seconds as ``"5s"``, else milliseconds
    (``"2500ms"``). ``parse_duration`` reads it back to the same value (to the millisecond)."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{int(round(seconds * 1000))}ms"
