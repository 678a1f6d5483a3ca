"""Verdicts of plugins: a Code plus reasons, naming the plugin that decided.

Verdicts are values, failures are exceptions: a plugin that finds a node unsuitable *returns*
``Status(UNSCHEDULABLE, ...)``; a plugin that breaks raises, and the runtime turns the exception
into ``Status(ERROR)`` naming the plugin. Each code's docstring says what happens next.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Callable, Union

Detail = Union[str, Callable[[], str]]


class Code(enum.IntEnum):
    """Outcome of one plugin call. The order is meaningful: higher is "worse" for a node."""

    SUCCESS = 0
    """The plugin agrees; the runtime goes on to the next plugin / extension point."""

    ERROR = 1
    """Something broke (a bug, an unreachable API). The attempt fails as an error: filter replies
    with ``Error`` (kube-scheduler backs the pod off), bind replies with ``Error`` after Unreserve;
    no preemption is attempted for an error."""

    UNSCHEDULABLE = 2
    """The node does not fit now, but evicting lower-priority pods could change that: the node is
    reported in ``FailedNodes`` and stays a preemption candidate."""

    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """The node can never fit this pod as it is (capacity, missing resource): reported in
    ``FailedAndUnresolvableNodes``; kube-scheduler will not preempt there."""

    WAIT = 4
    """Permit only: hold the pod in the waiting room until allowed, rejected or timed out; the bind
    request is held meanwhile (always less than the scheduler's httpTimeout)."""

    SKIP = 5
    """The plugin has nothing to do for this pod: PreFilter/PreScore skip means its Filter/Score
    is not called in this cycle; a Bind plugin's skip passes the pod to the next Bind plugin."""

    @property
    def is_rejection(self) -> bool:
        return self in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's verdict. ``reasons`` are node-independent texts (kube-scheduler aggregates
    identical texts into counts: "3 Insufficient example.com/gpu"); ``plugin`` is filled in by the
    runtime; ``detail`` is an optional per-node explanation shown only by the explain endpoint,
    given as text or as a function that makes it (so the hot path never formats numbers nobody
    reads)."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    detail: Detail = ""
    error: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    @property
    def detail_text(self) -> str:
        return self.detail() if callable(self.detail) else self.detail

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin == plugin else replace(self, plugin=plugin)

    @staticmethod
    def unschedulable(*reasons: str, detail: Detail = "") -> Status:
        return Status(Code.UNSCHEDULABLE, reasons, detail=detail)

    @staticmethod
    def unresolvable(*reasons: str, detail: Detail = "") -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, detail=detail)

    @staticmethod
    def failure(message: str, error: BaseException | None = None) -> Status:
        return Status(Code.ERROR, (message,), error=error)

    @staticmethod
    def wait(reason: str = "waiting") -> Status:
        return Status(Code.WAIT, (reason,))

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"code": self.code.name, "plugin": self.plugin, "reasons": list(self.reasons)}
        detail = self.detail_text
        if detail:
            out["detail"] = detail
        return out


SUCCESS = Status()
SKIP = Status(Code.SKIP)


class PluginError(Exception):
    """A plugin could not decide (as opposed to deciding "no"). Raised inside plugins; the runtime
    turns it into ``Status(ERROR)`` naming the plugin."""
