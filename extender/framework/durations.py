"""Durations as Kubernetes writes them (Go's ``time.ParseDuration``), shared by the configuration
and plugin args."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits, on either side of the point, as Go reads
_UNITS = r"(h|ms|m|s|us|\u00b5s|\u03bcs|ns)"  # micro sign and Greek mu, as Go's unitMap
_DURATION = re.compile(rf"^\+?(?:{_NUMBER}{_UNITS})+$")
_DURATION_PART = re.compile(rf"({_NUMBER}){_UNITS}")
_UNIT = {"h": Fraction(3600), "m": Fraction(60), "s": Fraction(1), "ms": Fraction(1, 10**3),
         "us": Fraction(1, 10**6), "\u00b5s": Fraction(1, 10**6), "\u03bcs": Fraction(1, 10**6),
         "ns": Fraction(1, 10**9)}


def parse_duration(value: Any) -> float:
    """Go-style duration ("5s", "1m30s", "250ms", ".5s", "+1s"; no negative one) or a number of
    seconds. A text is read exactly
    (its parts summed as decimals) and then rounded once to the nearest float: "50000us" is the
    same value as "50ms" and "0.05s"."""
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
        try:
            total = sum((Fraction(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value)), Fraction(0))
        except ValueError:  # a number of more digits than Python converts (sys.get_int_max_str_digits)
            raise ValueError(f"{value[:20]!r} is not a duration: a number of too many digits") from None
        if total > GO_MAX_SECONDS:  # before float(), which raises OverflowError on a huge one
            raise ValueError(f"{value[:20]!r} is longer than the longest duration Go holds (2562047h)")
        return float(total)
    if isinstance(value, str) and value.strip() in ("0", "+0", "-0"):
        return 0.0
    if isinstance(value, str) and value.strip()[:1] == "-" and value.strip()[1:2] != "+" \
            and _DURATION.match(value.strip()[1:]):
        raise ValueError(f"{value[:20]!r} is negative")
    raise ValueError(f"{value!r} is not a duration (e.g. 5s, 1m30s, 250ms)")


GO_MAX_SECONDS = (2**63 - 1) / 1e9
"""The longest duration Go's time.Duration holds (~2562047h): kube-scheduler reads ours with it."""


def _within_go(seconds: float, value: Any) -> float:
    if not abs(seconds) <= GO_MAX_SECONDS:  # inf and nan too
        raise ValueError(f"{str(value)[:20]!r} is longer than the longest duration Go holds (2562047h)")
    return seconds


_SMALLER_UNITS = (("ms", 10**3), ("us", 10**6), ("ns", 10**9))


def format_duration(seconds: float) -> str:
    """``seconds`` as Kubernetes writes a duration: whole seconds as ``"5s"``, else in the largest
    of ms, us and ns that holds it whole (``"2500ms"``, ``"500us"``, ``"1000000001ns"``), else as
    decimal seconds (``"0.0000000015s"``). Exact: ``parse_duration`` reads every finite
    non-negative value back to the same float (a negative one is written with Go's ``-``)."""
    if not math.isfinite(seconds):
        raise ValueError(f"{seconds!r} is not a finite duration")
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    exact = Fraction(seconds)  # the float's own binary value
    for unit, per_second in _SMALLER_UNITS:
        text = f"{round(exact * per_second)}{unit}"
        try:
            if parse_duration(text) == seconds:
                return text
        except ValueError:  # rounded up past Go's longest duration
            continue
    # the shortest decimal that reads back as this float (repr's), written without an exponent
    return f"{Decimal(repr(seconds)):f}s"
