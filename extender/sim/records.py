"""What the emulated scheduler records: each scheduling cycle (``CycleRecord``, with the
diagnosis of the nodes it looked at), each pod's life (``PodTrace``) and the run (``RunSummary``),
for tests, reports and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from extender.framework.status import Status


@dataclass
class Diagnosis:
    statuses: dict[str, Status] = field(default_factory=dict)
    plugins: set[str] = field(default_factory=set)
    evaluated: int = 0
    extender_rejected: set[str] = field(default_factory=set)


@dataclass
class CycleRecord:
    """What one scheduling attempt did (for tests and reports)."""

    pod: str
    attempt: int
    time: float
    outcome: str  # "scheduled", "unschedulable", "error", "skipped"
    node: str = ""
    feasible: list[str] = field(default_factory=list)
    evaluated: int = 0
    scores: dict[str, dict[str, int]] | None = None
    totals: dict[str, int] | None = None
    message: str = ""
    statuses: dict[str, str] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    preemption: dict[str, Any] | None = None
    queue: str = ""
    extender_rejected: int = 0
    """Nodes the extender filter chain rejected in this cycle (0: the extenders kept every node
    they were sent, or were not called)."""


@dataclass
class PodTrace:
    """A pod's life in the run."""

    key: str
    uid: str
    priority: int
    arrival: float
    state: str = "pending"  # pending, bound, completed, preempted, deleted
    node: str = ""
    bound_at: float | None = None
    attempts: int = 0
    message: str = ""
    nominated: str = ""
    preempted_by: str = ""
    bound_by: str = ""
    gated: bool = False
    requests: Mapping[str, int] = field(default_factory=dict)


@dataclass
class RunSummary:
    wall_seconds: float
    virtual_seconds: float
    cycles: int
    binds: int
    bind_failures: int
    reason: str
