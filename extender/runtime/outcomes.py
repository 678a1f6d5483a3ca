"""What the verbs take and answer beyond pods and node names, and how they fail.

The engine knows no wire format: ``extender.api`` builds ``Candidate`` from the preempt request and
turns ``FilterOutcome`` and ``PreemptDecision`` into the wire's replies; ``InvalidRequest`` is an
HTTP 400, ``EngineError`` an answer naming the error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from extender.framework.status import Code, Status

NOT_IN_CACHE = Status(Code.UNSCHEDULABLE, ("node not in extender cache",), plugin="extender")
PREFILTER_EXCLUDED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                            ("node(s) excluded by the extender's PreFilter",), plugin="extender")


class InvalidRequest(ValueError):
    """The request cannot be acted on as sent (a malformed pod, a bad quantity): HTTP 400."""


class EngineError(RuntimeError):
    """An internal failure while answering a verb (a plugin error in Score, say)."""


V = TypeVar("V")

_MAKING = threading.RLock()
"""Held while a MadeOnRead makes its dict (a first read only: never on the verbs' path twice);
re-entrant: a maker may read another MadeOnRead."""


class MadeOnRead(Mapping[str, V]):
    """A name -> value mapping whose dict ``_make`` builds the first time it is read: what a
    verb answers is made from groups, and the per-name view is wanted only sometimes."""

    __slots__ = ("_dict",)

    def __init__(self) -> None:
        self._dict: dict[str, V] | None = None

    def _make(self) -> dict[str, V]:
        raise NotImplementedError

    def _made(self) -> dict[str, V]:
        made = self._dict
        if made is None:
            with _MAKING:  # two readers at once (two debug requests): one makes it, the other waits
                made = self._dict
                if made is None:
                    made = self._dict = self._make()
        return made

    def __getitem__(self, name: str) -> V:
        return self._made()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._made()!r})"


class NodeTexts(MadeOnRead[str]):
    """Rejected name -> the reply's text, kept as it is found: groups of names that share one
    text, in order (a name in several groups has the last one's text, as ``dict.update`` gives).
    The reply is encoded from the groups (``extender.api.wire``) with no dict of every name -
    a gang member's filter rejects all but one of 500 names with one text -; the dict is made
    the first time this is read as a mapping. A group is (names, text, plain): ``plain`` promises
    that no name needs an escape in JSON (names the cache holds, ``Columns.names_plain``);
    without it the encoder checks."""

    __slots__ = ("_groups", "_sent")

    def __init__(self, groups: Sequence[tuple[Sequence[str], str, bool]] = ()) -> None:
        super().__init__()
        self._groups = [group for group in groups if len(group[0])]
        self._sent = sum(len(group[0]) for group in self._groups)

    def groups(self) -> list[tuple[Sequence[str], str, bool]]:
        """The (names, text, plain) groups, none empty (read-only)."""
        return self._groups

    def sent(self) -> int:
        """How many names the groups hold, a name the request repeated counted each time."""
        return self._sent

    def _make(self) -> dict[str, str]:
        made: dict[str, str] = {}
        for names, text, _ in self._groups:
            made.update(dict.fromkeys(names, text))
        return made

    def __bool__(self) -> bool:
        return bool(self._groups)


@dataclass
class FilterOutcome:
    """``failed`` and ``unresolvable`` map rejected names to the reply's text (UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE): a dict, or ``NodeTexts`` from the batch path."""

    feasible: list[str] = field(default_factory=list)
    failed: Mapping[str, str] = field(default_factory=dict)
    unresolvable: Mapping[str, str] = field(default_factory=dict)
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
