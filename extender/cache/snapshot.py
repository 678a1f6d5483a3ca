"""A consistent, read-only view of the cluster for one request.

A Snapshot maps node names to NodeInfos. NodeInfos are immutable (the cache replaces them on
change), so a snapshot can share them with the cache and with older snapshots: taking a snapshot
when nothing changed returns the previous one, and after a change only the changed names are
re-pointed in a copy of the previous name table (one C-level dict copy plus O(changed nodes)
Python work). A request keeps its snapshot for its whole duration, whatever binds happen meanwhile.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from extender.framework.views import NodeInfo


class Snapshot:
    __slots__ = ("generation", "_nodes")

    def __init__(self, nodes: Mapping[str, NodeInfo] | None = None, generation: int = 0) -> None:
        self._nodes: dict[str, NodeInfo] = dict(nodes or {})
        self.generation = generation

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
        return snap
