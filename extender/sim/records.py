"""What the emulated scheduler records: each scheduling cycle (``CycleRecord``, with the
diagnosis of the nodes it looked at), each pod's life (``PodTrace``) and the run (``RunSummary``),
for tests, reports and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from extender.framework.status import Status


@dataclass
class Diagnosis:
    statuses: dict[str, Status] = field(default_factory=dict)
    plugins: set[str] = field(default_factory=set)
    evaluated: int = 0
    extender_rejected: set[str] = field(default_factory=set)
    node_objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Node objects a non-nodeCacheCapable extender's filter returned, by name: what the later
    extenders' filter and every extender's prioritize are sent for those nodes instead of the
    snapshot's (the in-tree plugins keep reading the snapshot)."""


class ScoreTable(Mapping[str, Mapping[str, int]]):
    """A cycle's scores as node -> plugin -> weighted score, kept as one column per plugin
    (``None``: the plugin - an extender that left the node out of its reply - has no score for
    that node, and the node's row has no such key). The per-node dicts are built on first read:
    most cycles' scores are never read, and building them cost more than scoring. A plugin named
    twice: a later column's values replace an earlier one's, as writing the rows one plugin after
    the other would."""

    __slots__ = ("_names", "_columns", "_rows")

    def __init__(self, names: Sequence[str], columns: Sequence[tuple[str, Sequence[int | None]]]) -> None:
        self._names = names
        self._columns = columns
        self._rows: dict[str, dict[str, int]] | None = None

    def _built(self) -> dict[str, dict[str, int]]:
        if self._rows is None:
            rows: dict[str, dict[str, int]] = {name: {} for name in self._names}
            for plugin, values in self._columns:
                for name, value in zip(self._names, values):
                    if value is not None:
                        rows[name][plugin] = value
            self._rows = rows
        return self._rows

    def __getitem__(self, name: str) -> Mapping[str, int]:
        return self._built()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())

    def __repr__(self) -> str:
        return f"ScoreTable({self._built()!r})"


class StatusMessages(Mapping[str, str]):
    """A cycle's diagnosis as node -> message, read from the nodes' Statuses when first asked
    for: a cycle rejects hundreds of nodes, and most records are never read. The statuses are
    the diagnosis' own dict, which nothing changes after the cycle."""

    __slots__ = ("_statuses", "_messages")

    def __init__(self, statuses: Mapping[str, Status]) -> None:
        self._statuses = statuses
        self._messages: dict[str, str] | None = None

    def _built(self) -> dict[str, str]:
        if self._messages is None:
            self._messages = {name: st.message for name, st in self._statuses.items()}
        return self._messages

    def __getitem__(self, name: str) -> str:
        return self._built()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._statuses)

    def __len__(self) -> int:
        return len(self._statuses)

    def __repr__(self) -> str:
        return f"StatusMessages({self._built()!r})"


@dataclass
class CycleRecord:
    """What one scheduling attempt did (for tests and reports)."""

    pod: str
    attempt: int
    time: float
    outcome: str  # "scheduled", "unschedulable", "error", "skipped", "crashed" (the run ends)
    node: str = ""
    feasible: list[str] = field(default_factory=list)
    evaluated: int = 0
    scores: Mapping[str, Mapping[str, int]] | None = None
    totals: dict[str, int] | None = None
    message: str = ""
    statuses: Mapping[str, str] = field(default_factory=dict)
    """Node -> the message of its Status (a :class:`StatusMessages` in the scheduler's records)."""
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
