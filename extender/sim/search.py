"""The emulator's node search in array operations: which nodes pass the in-tree Filter plugins.

kube-scheduler's ``findNodesThatPassFilters`` evaluates nodes one by one from a rotating start
until it has found ``numFeasibleNodesToFind``; emulated in Python that was ~15-20 us per node, and
with 5,000 nodes (500 to find) the emulator spent most of every cycle there. ``NodeSearch`` keeps
the inputs of the filters as columns, one row per node in the snapshot's order, and answers
"does the pod pass every in-tree filter" for all rows at once:

* the node-only filters (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity) depend on
  the node object and the pod's own constraints alone: their verdict is computed per node once per
  distinct set of pod constraints (tolerations, nodeName, nodeSelector, affinity) and kept until a
  node object changes;
* NodeResourcesFit is arithmetic over the columns (pod count, every requested resource), exactly
  ``filters.insufficient_resources``'s.

Only the verdict (pass or not) is vectorized: the Status of a rejected node - its reasons, the
plugin - is computed by ``filters.run_filters`` for the rejected nodes the search looked at, so
diagnostics stay exact. Nodes with nominated pods counted against the pod are evaluated per node
by the caller. Amounts out of int64's comfortable range turn the columns off (``usable`` false):
the caller then evaluates every node per node, as before.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from extender.sim.cache import NodeState, PodRecord
from extender.sim.filters import (FILTERS, MAX_NODE_SCORE, POD_DEPENDENT, SCORE_WEIGHTS, _preferred_affinity,
                                  _prefer_no_schedule_count, is_extended_resource)

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
_LIMIT = 1 << 62
_FLOAT_EXACT = 1 << 53
"""Below this, an int converts to float64 exactly, so numpy's division equals Python's."""
_BASIC = ("cpu", "memory", "ephemeral-storage")
_NODE_ONLY = tuple(fn for name, fn in FILTERS if name not in POD_DEPENDENT)
_CACHED_CONSTRAINTS = 64
_NAME = operator.attrgetter("name")


def _constraints(pod: PodRecord) -> str:
    """What the node-only filters read of the pod, as a cache key."""
    spec = pod.raw.get("spec") or {}
    return repr((spec.get("tolerations"), spec.get("nodeName"), spec.get("nodeSelector"), spec.get("affinity")))


class NodeSearch:
    """Columns of the last synced snapshot's nodes (see the module docstring)."""

    def __init__(self, ignored: frozenset[str]) -> None:
        self.ignored = ignored
        self.nodes: list[NodeState] = []
        self._names: list[str] = []
        self._order: tuple[str, ...] | None = None
        self.usable = True
        self._index: dict[str, int] = {}
        self._alloc: dict[str, npt.NDArray[np.int64]] = {}
        self._requested: dict[str, npt.NDArray[np.int64]] = {}
        self._pods = np.zeros(0, np.int64)
        self._zeros = np.zeros(0, np.int64)
        self._nonzero = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._node_only: dict[str, Mask] = {}
        """Constraints key -> whether each row passes the node-only filters."""
        self._node_scores: dict[str, tuple[Ints, Ints]] = {}
        """Constraints key -> per row, the untolerated PreferNoSchedule taints and the preferred
        node affinity weight (the node-only score inputs)."""
        self._keyed: tuple[PodRecord, str] | None = None
        self._synced: int | None = None
        """The serial of the snapshot last followed (None: unknown)."""
        self._inexact: set[int] = set()
        """Rows holding a score input beyond float64's exact integers."""

    def sync(self, nodes: Sequence[NodeState], order: tuple[str, ...] | None = None,
             changes: tuple[int, frozenset[int], int] | None = None) -> None:
        """Follow ``nodes`` (the snapshot's order): rows whose NodeState changed are rewritten; a
        new order or a changed node object rebuilds what depends on it (as does any change while
        an out-of-range amount keeps the columns off: it may be gone). ``order``: the nodes' names
        as the snapshot holds them - the same tuple is the same order, so the names need no
        comparing. ``changes``: the snapshot's (``cache.Snapshot.changes``) - when the search
        last followed the snapshot they are counted from, only those rows are compared."""
        old = self.nodes
        synced, self._synced = self._synced, (changes[2] if changes is not None else None)
        if order is None or order is not self._order or not self.usable:
            self._order = order
            if list(map(_NAME, nodes)) != self._names or not self.usable:
                self._build(nodes)
                return
        if changes is not None and synced is not None and changes[0] == synced and len(old) == len(nodes):
            rows = sorted(row for row in changes[1] if nodes[row] is not old[row])
        else:
            rows = np.flatnonzero(np.fromiter(map(operator.is_not, nodes, old), np.bool_, len(nodes))).tolist()
        for row in rows:
            node = nodes[row]
            before, old[row] = old[row], node
            if node.raw is not before.raw:
                self._node_only.clear()
                self._node_scores.clear()
            if not self._write_row(row, node):
                self._build(nodes)
                return

    def _build(self, nodes: Sequence[NodeState]) -> None:
        self.nodes = list(nodes)
        self._names = list(map(_NAME, nodes))
        self._index = {n.name: i for i, n in enumerate(nodes)}
        self._node_only.clear()
        self._node_scores.clear()
        names: set[str] = set()
        for n in nodes:
            names.update(n.allocatable)
            names.update(n.requested)
        size = len(nodes)
        self._alloc = {r: np.zeros(size, np.int64) for r in names}
        self._requested = {r: np.zeros(size, np.int64) for r in names}
        self._pods = np.zeros(size, np.int64)
        self._zeros = np.zeros(size, np.int64)
        self._nonzero = (np.zeros(size, np.int64), np.zeros(size, np.int64))
        self._inexact.clear()
        self.usable = all(self._write_row(i, n) for i, n in enumerate(nodes))

    def _write_row(self, row: int, node: NodeState) -> bool:
        """Store ``node`` in ``row``; False when an amount is out of range (or names a resource
        without a column: the caller rebuilds)."""
        scored = (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0), node.nonzero_cpu,
                  node.nonzero_memory, node.requested.get("cpu", 0), node.requested.get("memory", 0))
        if all(-_FLOAT_EXACT < v < _FLOAT_EXACT for v in scored):
            self._inexact.discard(row)
        else:
            self._inexact.add(row)
        for r, values in self._alloc.items():
            values[row] = 0
            self._requested[r][row] = 0
        for source, columns in ((node.allocatable, self._alloc), (node.requested, self._requested)):
            for r, v in source.items():
                column = columns.get(r)
                if column is None or not -_LIMIT < v < _LIMIT:
                    return False
                column[row] = v
        self._pods[row] = node.pod_count
        if not (-_LIMIT < node.nonzero_cpu < _LIMIT and -_LIMIT < node.nonzero_memory < _LIMIT):
            return False
        self._nonzero[0][row] = node.nonzero_cpu
        self._nonzero[1][row] = node.nonzero_memory
        return True

    def row_of(self, name: str) -> int | None:
        return self._index.get(name)

    def passing(self, pod: PodRecord) -> Mask | None:
        """Per row, whether ``run_filters(pod, node).ok`` (nominated pods not counted); None when
        the columns cannot say (out-of-range amounts)."""
        if not self.usable or any(not -_LIMIT < v < _LIMIT for v in pod.requests.values()):
            return None
        return self._node_only_mask(pod) & self._fits(pod)

    def _constraints_of(self, pod: PodRecord) -> str:
        """:func:`_constraints`, worked out once for a cycle's pod (a PodRecord is immutable)."""
        if self._keyed is None or self._keyed[0] is not pod:
            self._keyed = (pod, _constraints(pod))
        return self._keyed[1]

    def _node_only_mask(self, pod: PodRecord) -> Mask:
        key = self._constraints_of(pod)
        mask = self._node_only.get(key)
        if mask is None:
            if len(self._node_only) >= _CACHED_CONSTRAINTS:
                self._node_only.clear()
            ignored = self.ignored
            mask = np.fromiter((all(fn(pod, node, ignored).ok for fn in _NODE_ONLY) for node in self.nodes),
                               np.bool_, len(self.nodes))
            self._node_only[key] = mask
        return mask

    def _column(self, columns: Mapping[str, Ints], resource: str) -> Ints:
        """A resource's column, or zeros for a resource no node has (never written to)."""
        column = columns.get(resource)
        return column if column is not None else self._zeros

    def _fits(self, pod: PodRecord) -> Mask:
        """``filters.insufficient_resources`` found nothing, per row."""
        allowed = self._column(self._alloc, "pods") // 1000
        short = self._pods + 1 > allowed
        req = pod.requests
        if any(v for v in req.values()):
            checked = [r for r in _BASIC if req.get(r, 0) > 0]
            checked += [r for r, need in req.items() if r not in _BASIC and need != 0
                        and not (is_extended_resource(r) and r in self.ignored)]
            for r in checked:
                short = short | (req[r] > self._column(self._alloc, r) - self._column(self._requested, r))
        out: Mask = ~short
        return out

    def scores(self, pod: PodRecord, nodes: Sequence[NodeState]) -> dict[str, dict[str, int]] | None:
        """``filters.score_nodes(pod, nodes)`` in array operations, the same node -> plugin ->
        weighted score; None when the columns cannot say (a node not of the synced snapshot,
        amounts beyond float64's exact integers)."""
        columns = self.score_columns(pod, nodes)
        if columns is None:
            return None
        plugins = [plugin for plugin, _ in columns]
        return {n.name: dict(zip(plugins, row)) for n, row in zip(nodes, zip(*(values for _, values in columns)))}

    def score_columns(self, pod: PodRecord, nodes: Sequence[NodeState]) -> list[tuple[str, list[int]]] | None:
        """:meth:`scores` as (plugin, weighted score of each of ``nodes``) in ``score_nodes``'s
        plugin order - what a cycle needs without a dict per node; None as for :meth:`scores`."""
        arrays = self.score_arrays(pod, nodes)
        return None if arrays is None else [(plugin, values.tolist()) for plugin, values in arrays]

    def score_arrays(self, pod: PodRecord, nodes: Sequence[NodeState]) -> list[tuple[str, Ints]] | None:
        """:meth:`score_columns` with each column an array (a cycle adds them up there)."""
        if not self.usable:
            return None
        rows = list(map(self._index.get, map(_NAME, nodes)))
        if None in rows or not all(map(operator.is_, map(self.nodes.__getitem__, rows), nodes)):  # type: ignore[arg-type]
            return None
        at = np.array(rows, dtype=np.intp)
        req = pod.requests
        inputs = [pod.nonzero_cpu, pod.nonzero_memory, req.get("cpu", 0), req.get("memory", 0)]
        if any(not -_FLOAT_EXACT < v < _FLOAT_EXACT for v in inputs):
            return None
        arrays = self._score_arrays()
        if arrays is None:
            return None
        cpu_alloc, mem_alloc, nz_cpu, nz_mem, used_cpu, used_mem = (a[at] for a in arrays)
        # NodeResourcesFit, LeastAllocated on cpu and memory with non-zero requests (filters.least_allocated)
        total = np.zeros(len(at), np.int64)
        weight = np.zeros(len(at), np.int64)
        for requested, alloc in ((nz_cpu + pod.nonzero_cpu, cpu_alloc), (nz_mem + pod.nonzero_memory, mem_alloc)):
            counted = alloc != 0
            share = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // np.where(counted, alloc, 1))
            total += np.where(counted, share, 0)
            weight += counted
        least = np.where(weight > 0, total // np.maximum(weight, 1), 0)
        # NodeResourcesBalancedAllocation (filters.balanced_allocation)
        fractions = []
        for used, alloc, want in ((used_cpu, cpu_alloc, req.get("cpu", 0)), (used_mem, mem_alloc, req.get("memory", 0))):
            counted = alloc != 0
            fractions.append((counted, np.minimum((used + want) / np.where(counted, alloc, 1), 1.0)))
        (has_cpu, f_cpu), (has_mem, f_mem) = fractions
        std = np.where(has_cpu & has_mem, np.abs(f_cpu - f_mem) / 2, 0.0)
        balanced = np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)
        taints, affinity = self._node_score_inputs(pod)
        taint_scores = _normalize(taints[at], reverse=True)
        affinity_scores = _normalize(affinity[at], reverse=False)
        w = SCORE_WEIGHTS
        return [("NodeResourcesFit", least * w["NodeResourcesFit"]),
                ("NodeResourcesBalancedAllocation", balanced * w["NodeResourcesBalancedAllocation"]),
                ("TaintToleration", taint_scores * w["TaintToleration"]),
                ("NodeAffinity", affinity_scores * w["NodeAffinity"])]

    def _score_arrays(self) -> list[Ints] | None:
        """The columns the resource scores read - allocatable cpu and memory, the non-zero
        requests, the requested cpu and memory - one value per row; None while a row holds an
        amount beyond float64's exact integers (``_write_row`` keeps count, so no cycle scans
        the columns for it)."""
        if self._inexact:
            return None
        return [self._column(self._alloc, "cpu"), self._column(self._alloc, "memory"), *self._nonzero,
                self._column(self._requested, "cpu"), self._column(self._requested, "memory")]

    def _node_score_inputs(self, pod: PodRecord) -> tuple[Ints, Ints]:
        key = self._constraints_of(pod)
        found = self._node_scores.get(key)
        if found is None:
            if len(self._node_scores) >= _CACHED_CONSTRAINTS:
                self._node_scores.clear()
            size = len(self.nodes)
            found = (np.fromiter((_prefer_no_schedule_count(pod, n) for n in self.nodes), np.int64, size),
                     np.fromiter((_preferred_affinity(pod, n) for n in self.nodes), np.int64, size))
            self._node_scores[key] = found
        return found


def _normalize(scores: Ints, reverse: bool) -> Ints:
    """``filters.default_normalize`` over an array."""
    top = int(scores.max()) if len(scores) else 0
    if top == 0:
        return np.full(len(scores), MAX_NODE_SCORE if reverse else 0, np.int64)
    out = MAX_NODE_SCORE * scores // top
    return MAX_NODE_SCORE - out if reverse else out
