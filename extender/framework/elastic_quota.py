"""ElasticQuota (``scheduling.x-k8s.io/v1alpha1``, the scheduler-plugins CRD), as plugins read it.

An ElasticQuota gives its namespace a guaranteed share (``spec.min``) and a ceiling
(``spec.max``), per resource, as Kubernetes quantities. The cache stores the objects trimmed,
malformed ones included (what the cluster holds is never refused); ``QuotaSpec.parse`` is the one
place that reads them and says what is wrong with one that cannot be used:

* ``spec`` not a map; ``spec.min`` or ``spec.max`` present but not a map of quantities;
* a resource whose ``min`` is above its ``max`` (the CRD's own validation rule).

A resource absent from ``max`` has no ceiling; absent from ``min``, no guarantee (0). Amounts are
in milli-units (``extender.framework.resources``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from extender.framework.pod_group import named_spec
from extender.framework.resources import QuantityError, resource_list

KIND = "ElasticQuota"

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """The quota of one namespace: ``min`` and ``max`` per resource, in milli-units. ``source``
    says where it comes from (``ElasticQuota <name>`` or ``configuration``)."""

    namespace: str
    min: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    max: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    source: str = ""

    def limited_to(self, resources: frozenset[str]) -> QuotaSpec:
        """The same quota counting only ``resources`` (the managed ones)."""
        return QuotaSpec(self.namespace, MappingProxyType({r: v for r, v in self.min.items() if r in resources}),
                         MappingProxyType({r: v for r, v in self.max.items() if r in resources}), self.source)

    @classmethod
    def from_amounts(cls, namespace: str, min_: Mapping[str, Any] | None, max_: Mapping[str, Any] | None,
                     source: str) -> tuple[str | None, QuotaSpec | None]:
        """``(None, spec)`` when ``min_``/``max_`` (maps of quantities, or None) make a valid
        quota, ``(what is wrong, None)`` otherwise."""
        parsed: dict[str, dict[str, int]] = {}
        for key, values in (("min", min_), ("max", max_)):
            if values is not None and not isinstance(values, Mapping):
                return f"{key} must be a map of resource quantities, got {type(values).__name__}", None
            try:
                parsed[key] = resource_list(values)
            except (QuantityError, TypeError, AttributeError) as exc:
                return f"{key}: {exc}", None
            negative = sorted(r for r, v in parsed[key].items() if v < 0)
            if negative:
                return f"{key}: {negative[0]} must not be negative", None
        above = sorted(r for r, v in parsed["min"].items() if r in parsed["max"] and v > parsed["max"][r])
        if above:
            return f"min of {above[0]} is above its max", None
        return None, cls(namespace, MappingProxyType(parsed["min"]), MappingProxyType(parsed["max"]), source)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> tuple[str | None, QuotaSpec | None]:
        """``(None, spec)`` for a valid ElasticQuota object, ``(what is wrong, None)`` otherwise."""
        problem, meta, spec = named_spec(raw)
        if problem is not None:
            return problem, None
        problem, quota = cls.from_amounts(str(meta.get("namespace") or "default"), spec.get("min"), spec.get("max"),
                                          f"{KIND} {meta['name']}")
        return (f"spec.{problem}", None) if problem else (None, quota)
