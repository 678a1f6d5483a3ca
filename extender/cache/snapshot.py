"""A consistent, read-only view of the cluster for one request.

A Snapshot maps node names to NodeInfos. NodeInfos are immutable (the cache replaces them on
change), so a snapshot can share them with the cache and with older snapshots: taking a snapshot
when nothing changed returns the previous one, and after a change only the changed names are
re-pointed in a copy of the previous name table (one C-level dict copy plus O(changed nodes)
Python work). A request keeps its snapshot for its whole duration, whatever binds happen meanwhile.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from extender.cache.columns import Columns
from extender.framework.views import NodeInfo


class Snapshot:
    __slots__ = ("generation", "_nodes", "_columns", "_base", "_pending")

    def __init__(self, nodes: Mapping[str, NodeInfo] | None = None, generation: int = 0) -> None:
        self._nodes: dict[str, NodeInfo] = dict(nodes or {})
        self.generation = generation
        self._columns: Columns | None = None
        self._base: Columns | None = None
        """Columns of an earlier snapshot in this one's line, and the names changed since
        (``_pending``): what ``columns()`` updates from."""
        self._pending: set[str] = set()

    def columns(self) -> Columns:
        """This snapshot's nodes as columns (the batch path), made on first use from the closest
        earlier snapshot's columns plus the nodes changed since (a full build when there are
        none, when more than a quarter of the nodes changed, or while a resource is beyond the
        columns' exact range - a build tells when it is back within it). Concurrent first calls
        may both build: the results are equal."""
        cols = self._columns
        if cols is None:
            base, pending = self._base, self._pending
            if base is None or base.inexact or len(pending) * 4 > len(self._nodes):
                cols = Columns.build(self._nodes.values())
            else:
                cols = base.updated({name: self._nodes.get(name) for name in pending})
            self._columns = cols
            self._base, self._pending = None, set()
        return cols

    def get(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def getter(self) -> Callable[[str], NodeInfo | None]:
        """The lookup function itself (a bound ``dict.get``), for loops over thousands of names."""
        return self._nodes.get

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def names(self) -> list[str]:
        return list(self._nodes)

    def updated(self, changed: Mapping[str, NodeInfo | None], generation: int) -> Snapshot:
        """A new snapshot with ``changed`` applied (None removes a node); self is left untouched."""
        nodes = self._nodes.copy()
        for name, info in changed.items():
            if info is None:
                nodes.pop(name, None)
            else:
                nodes[name] = info
        snap = Snapshot.__new__(Snapshot)
        snap._nodes = nodes
        snap.generation = generation
        snap._columns = None
        if self._columns is not None:
            snap._base, snap._pending = self._columns, set(changed)
        else:
            snap._base, snap._pending = self._base, self._pending | changed.keys()
        return snap
