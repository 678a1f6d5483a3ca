"""Pure rules for managed extended resources on a node: fit, scoring, preemption.

All amounts are integer milli-units (see ``extender.framework.resources``). Nothing here touches
the cache, the clock or I/O; ``plugin.py`` adapts these functions to the framework.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping

from extender.framework.resources import format_milli

MAX_SCORE = 100


class Lack(enum.Enum):
    ABSENT = "absent"
    """The node does not offer the resource at all: no eviction can help."""
    EXCEEDS_ALLOCATABLE = "exceeds-allocatable"
    """The request is larger than the node's whole allocatable: no eviction can help."""
    INSUFFICIENT = "insufficient"
    """Not enough is free right now: evicting pods could help."""


@dataclass(frozen=True, slots=True)
class Shortage:
    resource: str
    lack: Lack
    need: int
    free: int
    allocatable: int | None

    @property
    def reason(self) -> str:
        """Node-independent wording, so kube-scheduler's event aggregates counts per reason."""
        if self.lack is Lack.ABSENT:
            return f"node(s) didn't offer {self.resource}"
        if self.lack is Lack.EXCEEDS_ALLOCATABLE:
            return f"node(s) had too little allocatable {self.resource}"
        return f"Insufficient {self.resource}"

    @property
    def detail(self) -> str:
        """Per-node numbers, for the explain endpoint only."""
        if self.lack is Lack.ABSENT:
            return f"{self.resource}: requested {format_milli(self.need)}, node offers none"
        return (f"{self.resource}: requested {format_milli(self.need)}, free {format_milli(self.free)} "
                f"of {format_milli(self.allocatable or 0)} allocatable")


def check_fit(requests: Mapping[str, int], allocatable: Mapping[str, int], requested: Mapping[str, int],
              freed: Mapping[str, int] | None = None) -> Shortage | None:
    """The first resource (in the pod's request order) that does not fit, or None if all fit.
    ``freed`` is capacity that evictions would return (preemption). A zero request always fits."""
    for resource, need in requests.items():
        if need <= 0:
            continue
        alloc = allocatable.get(resource)
        if alloc is None:
            return Shortage(resource, Lack.ABSENT, need, 0, None)
        if need > alloc:
            return Shortage(resource, Lack.EXCEEDS_ALLOCATABLE, need, alloc - requested.get(resource, 0), alloc)
        free = alloc - requested.get(resource, 0) + (freed.get(resource, 0) if freed else 0)
        if need > free:
            return Shortage(resource, Lack.INSUFFICIENT, need, free, alloc)
    return None


def overcommitted(resources: Iterable[str], allocatable: Mapping[str, int],
                  requested: Mapping[str, int]) -> str | None:
    """The first of ``resources`` whose accounted usage exceeds allocatable, if any."""
    for resource in resources:
        if requested.get(resource, 0) > allocatable.get(resource, 0):
            return resource
    return None


def allocation_score(requests: Mapping[str, int], allocatable: Mapping[str, int], requested: Mapping[str, int],
                     weights: Mapping[str, int], most_allocated: bool) -> int:
    """0..100: how full (MostAllocated, binpack) or how empty (LeastAllocated, spread) the node
    would be with the pod on it, averaged over the requested resources by weight. Resources the
    pod does not request, or the node does not offer, do not count; no counted resource -> 0; a
    node where the pod does not fit scores 0."""
    total = 0
    weight_sum = 0
    for resource, need in requests.items():
        weight = weights.get(resource, 0)
        alloc = allocatable.get(resource, 0)
        if need <= 0 or weight <= 0 or alloc <= 0:
            continue
        used = requested.get(resource, 0) + need
        if used > alloc:
            return 0
        share = used * MAX_SCORE // alloc if most_allocated else (alloc - used) * MAX_SCORE // alloc
        total += share * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def freed_by(victim_requests: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Capacity returned by evicting pods with these requests."""
    out: dict[str, int] = {}
    for req in victim_requests:
        for k, v in req.items():
            out[k] = out.get(k, 0) + v
    return out
