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
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite duration")
        return float(value)
    if isinstance(value, str) and _DURATION.match(value.strip()):
        return sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value))
    if value == "0":
        return 0.0
    raise ValueError(f"{value!r} is not a duration (e.g. 5s, 1m30s, 250ms)")


def format_duration(seconds: float) -> str:
    """``seconds`` as Kubernetes writes a duration: whole seconds as ``"5s"``, else milliseconds
    (``"2500ms"``). ``parse_duration`` reads it back to the same value (to the millisecond)."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{int(round(seconds * 1000))}ms"
