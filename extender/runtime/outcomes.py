"""What the verbs take and answer beyond pods and node names, and how they fail.

The engine knows no wire format: ``extender.api`` builds ``Candidate`` from the preempt request and
turns ``FilterOutcome`` and ``PreemptDecision`` into the wire's replies; ``InvalidRequest`` is an
HTTP 400, ``EngineError`` an answer naming the error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from extender.framework.status import Code, Status

NOT_IN_CACHE = Status(Code.UNSCHEDULABLE, ("node not in extender cache",), plugin="extender")
PREFILTER_EXCLUDED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                            ("node(s) excluded by the extender's PreFilter",), plugin="extender")


class InvalidRequest(ValueError):
    """The request cannot be acted on as sent (a malformed pod, a bad quantity): HTTP 400."""


class EngineError(RuntimeError):
    """An internal failure while answering a verb (a plugin error in Score, say)."""


@dataclass
class FilterOutcome:
    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""
    nominated: str | None = None


@dataclass(frozen=True)
class Candidate:
    """One node kube-scheduler proposes for preemption. ``victims`` pairs a UID with the full pod
    when kube-scheduler sent full pods (nodeCacheCapable: false), else None."""

    victims: list[tuple[str, Mapping[str, Any] | None]]
    num_pdb_violations: int = 0


@dataclass(frozen=True)
class PreemptDecision:
    victims: list[str]
    num_pdb_violations: int
