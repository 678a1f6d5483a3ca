"""Columns: a snapshot's managed-resource capacity as numpy arrays, one row per node.

The batch Filter and Score path (``extender.framework.batch``) reads these instead of one
NodeInfo per candidate. A ``Columns`` is immutable, like the snapshot it belongs to: the next
snapshot's columns are this one's arrays copied (a memcpy each: ~1 us per 5,000 nodes) with only
the changed nodes' rows rewritten (O(changed nodes) Python work). Rows are stable: a node keeps its
row while it exists; a removed node's row is cleared and its name leaves ``index`` (so lookups of
it miss), a new node is appended. Adding or removing a node copies the name index (rare next to
pod changes, which are what the cache sees most).
"""

from __future__ import annotations

import itertools
from typing import Iterable, Mapping, Sequence

import numpy as np

from extender.framework.batch import EXACT_LIMIT, Column, Ints, Mask, Rows
from extender.framework.views import NodeInfo

_MINUS_ONE = itertools.repeat(-1)
_ESCAPED = bytes(range(0x20)) + b'\x7f"\\'
"""What JSON escapes in a string (and DEL): control characters, the quote, the backslash."""


def json_plain(text: str) -> bool:
    """``text`` goes into a JSON string as it is: ASCII with nothing JSON escapes (node names,
    DNS subdomains, always are). Two C-level passes: a copy without those bytes is as long."""
    if not text.isascii():
        return False
    data = text.encode("ascii")
    return len(data.translate(None, _ESCAPED)) == len(data)


_Remembered = tuple[list[str], Rows]
"""Names and their rows (``Columns.remember``)."""


class _ByIndex:
    """What every Columns with the same name index shares (rows are the index's: they hold
    across snapshots while it does)."""

    __slots__ = ("recent", "names", "plain")

    def __init__(self) -> None:
        self.recent: _Remembered | None = None
        """The names ``remember`` was last told, with their rows."""
        self.names: np.ndarray | None = None
        """Node name by row as an object array (``names_at``), made on first use."""
        self.plain: bool | None = None
        """Whether every name is ``json_plain`` (``names_plain``), found on first use."""


class Columns:
    """Implements ``extender.framework.batch.NodeColumns``; see the module docstring."""

    __slots__ = ("_names", "index", "_alloc", "_offered", "_requested", "_inexact", "_empty", "_shared",
                 "_generation", "rowspace")

    def __init__(self, names: list[str], index: dict[str, int], alloc: dict[str, Ints], offered: dict[str, Mask],
                 requested: dict[str, Ints], inexact: frozenset[str],
                 shared: _ByIndex | None = None, generation: Ints | None = None,
                 rowspace: object | None = None) -> None:
        self._names = names
        """Node name by row (a removed node's row keeps its name; ``index`` says which rows hold
        the snapshot's nodes)."""
        self.index = index
        """Node name -> row, for the nodes the snapshot holds."""
        self._alloc = alloc
        self._offered = offered
        self._requested = requested
        self._inexact = inexact
        self._empty: Column | None = None
        self._shared = shared if shared is not None else _ByIndex()
        self._generation = generation if generation is not None else np.full(len(names), -1, np.int64)
        """Each row's ``NodeInfo.generation`` (-1: a cleared row)."""
        self.rowspace = rowspace if rowspace is not None else object()
        """Shared by every Columns ``updated`` from this one: rows keep their nodes."""

    @property
    def inexact(self) -> frozenset[str]:
        """The resources some node holds beyond what int64 columns hold exactly (no column)."""
        return self._inexact

    @classmethod
    def build(cls, nodes: Iterable[NodeInfo]) -> Columns:
        """Columns of ``nodes`` (each becomes a row, in order)."""
        infos = list(nodes)
        names = [n.name for n in infos]
        out = cls(names, dict(zip(names, range(len(names)))), {}, {}, {}, frozenset(),
                  generation=np.fromiter((n.generation for n in infos), np.int64, len(infos)))
        resources: set[str] = set()
        for info in infos:
            resources.update(info.allocatable)
            resources.update(info.requested)
        inexact: set[str] = set()
        for r in resources:
            alloc = [info.allocatable.get(r) for info in infos]
            used = [info.requested.get(r, 0) for info in infos]
            if any(v is not None and not -EXACT_LIMIT < v < EXACT_LIMIT for v in alloc) or \
                    any(not -EXACT_LIMIT < v < EXACT_LIMIT for v in used):
                inexact.add(r)
                continue
            out._offered[r] = np.array([v is not None for v in alloc], dtype=np.bool_)
            out._alloc[r] = np.array([v or 0 for v in alloc], dtype=np.int64)
            out._requested[r] = np.array(used, dtype=np.int64)
        out._inexact = frozenset(inexact)
        return out

    def updated(self, changed: Mapping[str, NodeInfo | None]) -> Columns:
        """These columns with ``changed`` applied (None: the node is gone); self is untouched."""
        names, index = self._names, self.index
        added = [n for n, info in changed.items() if info is not None and n not in index]
        removed = [n for n, info in changed.items() if info is None and n in index]
        if added or removed:
            names, index = list(names), dict(index)
            for n in removed:
                del index[n]
            for n in added:
                index[n] = len(names)
                names.append(n)
        grow = len(names) - len(self._names)
        alloc, offered, requested = {}, {}, {}
        for r in self._alloc:
            alloc[r] = np.concatenate((self._alloc[r], np.zeros(grow, np.int64))) if grow else self._alloc[r].copy()
            offered[r] = (np.concatenate((self._offered[r], np.zeros(grow, np.bool_))) if grow
                          else self._offered[r].copy())
            requested[r] = (np.concatenate((self._requested[r], np.zeros(grow, np.int64))) if grow
                            else self._requested[r].copy())
        inexact = set(self._inexact)
        generation = (np.concatenate((self._generation, np.full(grow, -1, np.int64))) if grow
                      else self._generation.copy())
        for n in removed:
            row = self.index[n]
            generation[row] = -1
            for r in alloc:
                alloc[r][row] = 0
                offered[r][row] = False
                requested[r][row] = 0
        for n, info in changed.items():
            if info is None:
                continue
            row = index[n]
            generation[row] = info.generation
            for r in set(info.allocatable).union(info.requested).difference(alloc, inexact):
                alloc[r] = np.zeros(len(names), np.int64)  # a resource seen for the first time
                offered[r] = np.zeros(len(names), np.bool_)
                requested[r] = np.zeros(len(names), np.int64)
            for r in list(alloc):
                a = info.allocatable.get(r)
                u = info.requested.get(r, 0)
                if (a is not None and not -EXACT_LIMIT < a < EXACT_LIMIT) or not -EXACT_LIMIT < u < EXACT_LIMIT:
                    inexact.add(r)
                    del alloc[r], offered[r], requested[r]
                    continue
                alloc[r][row] = a or 0
                offered[r][row] = a is not None
                requested[r][row] = u
        return Columns(names, index, alloc, offered, requested, frozenset(inexact),
                       self._shared if index is self.index else None, generation, self.rowspace)

    @property
    def size(self) -> int:
        """Rows (the snapshot's nodes and the cleared rows of removed ones)."""
        return len(self._names)

    def with_requested(self, extra: Mapping[str, Ints]) -> Columns:
        """These columns with ``extra`` (per resource, an amount per row, within the exact range)
        added to what is requested: capacity held on the nodes, as the batch Filter counts it.
        The other arrays are shared; self is untouched."""
        alloc, offered, requested = dict(self._alloc), dict(self._offered), dict(self._requested)
        for r, amounts in extra.items():
            if r in self._inexact:
                continue
            if r not in requested:  # held, but no node offers or requests it
                alloc[r] = np.zeros(len(self._names), np.int64)
                offered[r] = np.zeros(len(self._names), np.bool_)
                requested[r] = amounts
            else:
                requested[r] = requested[r] + amounts
        return Columns(self._names, self.index, alloc, offered, requested, self._inexact, self._shared,
                       self._generation, self.rowspace)

    def rows_of(self, names: Sequence[str]) -> Rows:
        """Row per name, -1 for a name the snapshot does not hold (one C-level pass; the rows
        ``remember`` was told when ``names`` equals its names)."""
        recent = self._shared.recent
        if recent is not None and recent[0] == names:
            return recent[1].copy()
        return np.fromiter(map(self.index.get, names, _MINUS_ONE), dtype=np.intp, count=len(names))

    def remember(self, names: list[str], rows: Rows) -> None:
        """``rows`` are the rows of ``names``, which are likely asked for next: the names a
        filter found feasible, which kube-scheduler sends to prioritize next. Looking names up
        is the costliest step of a batch on a cold CPU cache (a few cache misses per name, in a
        dict of every node); comparing the next request's names with these is not."""
        self._shared.recent = (list(names), rows)  # a copy: the caller's list may change

    def generations(self, rows: Rows) -> Ints:
        return self._generation[rows]

    def names_at(self, rows: Rows) -> list[str]:
        """The names of ``rows`` (which must be rows of nodes the snapshot holds), in order: one
        C-level gather (the names are the cache's strings, equal to any request's)."""
        by_row = self._shared.names
        if by_row is None:  # the index's rows: the same names while it is the same
            by_row = self._shared.names = np.array(self._names, dtype=object)
        return by_row[rows].tolist()  # type: ignore[no-any-return]

    def names_plain(self) -> bool:
        """Every name the index holds goes into JSON without an escape (``json_plain``): a
        reply names them by joining strings. Checked once per index."""
        plain = self._shared.plain
        if plain is None:
            plain = self._shared.plain = json_plain("".join(self.index))
        return plain

    def column(self, resource: str) -> Column | None:
        if resource in self._inexact:
            return None
        alloc = self._alloc.get(resource)
        if alloc is None:
            if self._empty is None:
                zeros = np.zeros(len(self._names), np.int64)
                self._empty = Column(zeros, np.zeros(len(self._names), np.bool_), zeros)
            return self._empty
        return Column(alloc, self._offered[resource], self._requested[resource])
