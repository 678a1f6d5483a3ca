"""Kubernetes resource quantities and pod requests, in exact integer arithmetic.

Every amount inside kube-extender is an ``int`` of *milli-units* (``"1"`` -> 1000, ``"250m"`` ->
250, ``"1Ki"`` -> 1_024_000): no floats anywhere, so accounting never drifts. Parsing follows
``k8s.io/apimachinery/pkg/api/resource``: an optional sign, a decimal number, then a binary
suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E-2).
Values that are not whole milli-units round *up*, as Kubernetes does for requests.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable, Mapping

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE])?)$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def _parse(text: str) -> Fraction:
    m = _QUANTITY.match(text.strip())
    if not m:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    value = Fraction(m["num"])
    if m["bin"]:
        return value * _BINARY[m["bin"]]
    if m["exp"]:
        exp = int(m["exp"][1:])
        if abs(exp) > 64:
            raise QuantityError(f"{text!r}: exponent out of range")
        return value * Fraction(10) ** exp
    return value * _DECIMAL[m["dec"] or ""]


def parse_quantity(value: Any) -> Fraction:
    """Exact value of a quantity given as a string (or a JSON number, which YAML files produce)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if isinstance(value, str):
        return _parse(value)
    raise QuantityError(f"{value!r} is not a Kubernetes quantity")


def milli(value: Any) -> int:
    """The quantity in milli-units, rounded up: ``milli("2") == 2000``, ``milli("0.5m") == 1``."""
    if type(value) is str:
        return _milli_text(value)
    q = parse_quantity(value) * 1000
    return -((-q.numerator) // q.denominator)


@lru_cache(maxsize=4096)
def _milli_text(text: str) -> int:
    """``milli`` of a quantity string, remembered: every request's pod repeats the same few
    strings ("1", "500m", "4Gi"), and exact Fraction arithmetic costs microseconds each."""
    q = _parse(text) * 1000
    return -((-q.numerator) // q.denominator)


def format_milli(amount: int) -> str:
    """Inverse of :func:`milli` for display: ``2000 -> "2"``, ``1500 -> "1500m"``."""
    return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"


def resource_list(values: Mapping[str, Any] | None, names: Iterable[str] | None = None) -> dict[str, int]:
    """Parse a ResourceList (``{"cpu": "2", ...}``) into milli-units, keeping only ``names`` if given."""
    if not values:
        return {}
    if not isinstance(values, Mapping):
        raise QuantityError(f"resource list must be a map, got {type(values).__name__}")
    wanted = None if names is None else set(names)
    return {k: milli(v) for k, v in values.items() if wanted is None or k in wanted}


def _container_requests(container: Mapping[str, Any], wanted: frozenset[str] | None) -> dict[str, int]:
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out: dict[str, int] = {}
    # The API server defaults a missing request from the limit (always so for extended resources);
    # objects read from files were never defaulted, so do it here.
    for source in (limits, requests):
        for name, value in source.items():
            if wanted is None or name in wanted:
                out[name] = milli(value)
    return out


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def pod_requests(pod: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, int]:
    """Effective requests of a pod, as kube-scheduler computes them (``resourcehelper``):

    ``max(sum(app containers) + sum(sidecars), max over init containers i of (init_i + sidecars
    started before i))`` plus ``spec.overhead``. Sidecars are init containers with
    ``restartPolicy: Always``. Only ``names`` are computed when given. Raises QuantityError on a
    malformed quantity.
    """
    spec = pod.get("spec") or {}
    wanted = None if names is None else frozenset(names)
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add(total, _container_requests(c, wanted))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        req = _container_requests(c, wanted)
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            candidate = dict(sidecars)
        else:
            candidate = dict(sidecars)
            _add(candidate, req)
        for k, v in candidate.items():
            if v > init_peak.get(k, 0):
                init_peak[k] = v
    _add(total, sidecars)
    for k, v in init_peak.items():
        if v > total.get(k, 0):
            total[k] = v
    overhead = spec.get("overhead")
    if overhead:
        _add(total, resource_list(overhead, wanted))
    return total


def names_requested(pod: Mapping[str, Any]) -> set[str]:
    """Every resource name a pod's containers or init containers mention in requests or limits
    (value irrelevant: ``"0"`` counts), which is kube-scheduler's ``IsInterested`` test."""
    spec = pod.get("spec") or {}
    found: set[str] = set()
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            res = c.get("resources") or {}
            found.update((res.get("requests") or {}).keys())
            found.update((res.get("limits") or {}).keys())
    return found
