"""Kubernetes resource quantities and pod requests, in exact integer arithmetic.

Every amount inside kube-extender is an ``int`` of *milli-units* (``"1"`` -> 1000, ``"250m"`` ->
250, ``"1Ki"`` -> 1_024_000): no floats anywhere, so accounting never drifts. Parsing follows
``k8s.io/apimachinery/pkg/api/resource``: an optional sign, a decimal number, then a binary
suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E-2).
Values that are not whole milli-units round *up*, as Kubernetes does for requests. Digits are
ASCII only (Go's parser knows no others). What a pod requests, limits or declares as overhead must
moreover be zero or more (the API server refuses anything else): ``pod_requests`` checks every one
of those quantities, tracked or not, so a pod that Kubernetes would never accept is an error,
never a pod that fits.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from collections.abc import Iterable, Mapping
from typing import Any

_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE])?)"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def _parse(text: str) -> Fraction:
    m = _QUANTITY.fullmatch(text.strip())
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
    return _ceil_milli(parse_quantity(value))


def _ceil_milli(q: Fraction) -> int:
    q *= 1000
    return -((-q.numerator) // q.denominator)


@lru_cache(maxsize=4096)
def _milli_text(text: str) -> int:
    """``milli`` of a quantity string, remembered: every request's pod repeats the same few
    strings ("1", "500m", "4Gi"), and exact Fraction arithmetic costs microseconds each."""
    return _ceil_milli(_parse(text))


def requested_milli(value: Any) -> int:
    """``milli`` of an amount a pod requests, limits or declares as overhead: QuantityError also
    when it is below zero (even ``-0.1m``, which would round up to 0)."""
    if type(value) is str:
        return _requested_text(value)
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"{value!r} is negative")
    return _ceil_milli(q)


@lru_cache(maxsize=4096)
def _requested_text(text: str) -> int:
    q = _parse(text)
    if q < 0:
        raise QuantityError(f"{text!r} is negative")
    return _ceil_milli(q)


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


def _requested_list(values: Any, where: str, wanted: frozenset[str] | None) -> dict[str, int]:
    """A pod's ResourceList (requests, limits, overhead) in milli-units, ``wanted`` names only;
    every quantity is checked (``requested_milli``), and a problem names its place ``where``."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise QuantityError(f"{where} must be a map of quantities, got {type(values).__name__}")
    out: dict[str, int] = {}
    for name, value in values.items():
        try:
            amount = requested_milli(value)
        except QuantityError as exc:
            raise QuantityError(f"{where}[{name}]: {exc}") from None
        if wanted is None or name in wanted:
            out[name] = amount
    return out


def _container_requests(container: Any, where: str, wanted: frozenset[str] | None) -> dict[str, int]:
    if not isinstance(container, Mapping):
        raise QuantityError(f"{where} must be an object, got {type(container).__name__}")
    res = container.get("resources")
    if res is None:
        return {}
    if not isinstance(res, Mapping):
        raise QuantityError(f"{where}.resources must be an object, got {type(res).__name__}")
    # The API server defaults a missing request from the limit (always so for extended resources);
    # objects read from files were never defaulted, so do it here.
    return {**_requested_list(res.get("limits"), f"{where}.resources.limits", wanted),
            **_requested_list(res.get("requests"), f"{where}.resources.requests", wanted)}


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    containers = spec.get(key)
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise QuantityError(f"spec.{key} must be an array, got {type(containers).__name__}")
    return containers


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def pod_requests(pod: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, int]:
    """Effective requests of a pod, as kube-scheduler computes them (``resourcehelper``):

    ``max(sum(app containers) + sum(sidecars), max over init containers i of (init_i + sidecars
    started before i))`` plus ``spec.overhead``. Sidecars are init containers with
    ``restartPolicy: Always``. Only ``names`` are computed when given, but every quantity is
    checked: QuantityError, naming the place (``spec.containers[0].resources.requests[cpu]``), on
    a malformed or negative one, or a resources section of the wrong shape.
    """
    spec = pod.get("spec") or {}
    wanted = None if names is None else frozenset(names)
    total: dict[str, int] = {}
    for i, c in enumerate(_containers(spec, "containers")):
        _add(total, _container_requests(c, f"spec.containers[{i}]", wanted))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(_containers(spec, "initContainers")):
        req = _container_requests(c, f"spec.initContainers[{i}]", wanted)
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
    _add(total, _requested_list(spec.get("overhead"), "spec.overhead", wanted))
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
