"""Where a pod goes: the node-choosing steps of the emulated scheduling cycle (§4.1-§4.4).

``Placement`` is the part of :class:`~extender.sim.scheduler.Scheduler` that, given a pod and the
cycle's snapshot, finds the nodes that pass the in-tree filters (from a rotating start until
``numFeasibleNodesToFind``, nominated pods counted; ``extender.sim.search`` answers for most
nodes at once), runs the extender filter chain over them, scores the survivors (in-tree scores
and every interested extender's prioritize) and picks the host. It reads the scheduler's
configuration, extenders, seeded random source and node search, declared below; the scheduler
owns them and the rest of the cycle (queue, assume, binding, failures, preemption).
"""

from __future__ import annotations

import itertools
import logging
import operator
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import numpy as np

from extender.framework.status import Code, Status
from extender.sim import queue as q
from extender.sim.cache import NodeState, PodRecord, Snapshot
from extender.sim.client import ExtenderError, HTTPExtender, encode_pod
from extender.sim.config import SchedulerConfig
from extender.sim.filters import WorkingNode, run_filters, score_nodes
from extender.sim.records import Diagnosis, ScoreTable
from extender.sim.search import NodeSearch

log = logging.getLogger("extender.sim")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
MAX_EXTENDER_SCORE_SCALE = 10  # MaxNodeScore / MaxExtenderPriority
_PASSED = Status()
_NAME = operator.attrgetter("name")
_RAW = operator.attrgetter("raw")


class Placement:
    """Mixed into ``Scheduler``; see the module docstring."""

    cfg: SchedulerConfig
    extenders: list[HTTPExtender]
    ignored: frozenset[str]
    rng: random.Random
    _next_start: int
    _search: NodeSearch
    _executor: ThreadPoolExecutor
    _has_filter_extenders: bool
    _has_scoring: bool
    _encoded: tuple[PodRecord, bytes] | None

    def _fits(self, pod: PodRecord, node: NodeState | WorkingNode, nominated: Mapping[str, list[PodRecord]],
              pods_only: bool = False) -> Status:
        """``RunFilterPluginsWithNominatedPods``: nominated pods of equal or higher priority count."""
        extra = [p for p in nominated.get(node.name, ()) if p.priority >= pod.priority and p.uid != pod.uid
                 and p.uid not in node.pods]
        if not extra:
            return run_filters(pod, node, self.ignored, pods_only)
        work = node if isinstance(node, WorkingNode) else WorkingNode(node)
        for p in extra:
            work.add(p)
        try:
            return run_filters(pod, work, self.ignored, pods_only)
        finally:
            for p in extra:
                work.remove(p)

    def num_feasible_nodes_to_find(self, num_all: int) -> int:
        """§4.2: all below 100 nodes; else the (adaptive) percentage, at least 100."""
        if num_all < MIN_FEASIBLE_NODES_TO_FIND:
            return num_all
        pct = self.cfg.percentage_of_nodes_to_score
        if pct == 0:
            pct = max(50 - num_all // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
        return max(num_all * pct // 100, MIN_FEASIBLE_NODES_TO_FIND)

    def _find_nodes_that_fit(self, pod: PodRecord, snap: Snapshot,
                             nominated: Mapping[str, list[PodRecord]]) -> tuple[list[NodeState], Diagnosis]:
        diag = Diagnosis()
        nnn = pod.nominated_node_name
        if nnn and snap.get(nnn) is not None:
            node = snap.nodes[nnn]
            st = self._fits(pod, node, nominated)
            if st.ok:
                try:
                    survivors = self._extender_filters(pod, [node], diag, snap)
                except ExtenderError as exc:
                    log.info("evaluation failed on nominated node %s for %s: %s", nnn, pod.key, exc)
                    survivors = []
                if survivors:
                    diag.evaluated = 1
                    return survivors, diag
            else:
                diag.statuses[nnn] = st
            diag.node_objects.clear()  # the full pass starts from the snapshot's Node objects again
        nodes = snap.ordered()
        n = len(nodes)
        to_find = self.num_feasible_nodes_to_find(n)
        if self.cfg.one_node_shortcut and not self._has_filter_extenders and not self._has_scoring:
            to_find = 1
        feasible: list[NodeState] = []
        processed = 0
        known = self._search_order(pod, nodes, snap, nominated, to_find)
        steps = nodes[self._next_start:] + nodes[:self._next_start]  # step i looks at steps[i]
        # the steps in kube-scheduler's order; a run of nodes known to pass is taken at once
        checked, end = (range(n), n) if known is None else known
        taken = 0
        earlier = set(diag.statuses)  # the nominated node's, if it failed: a step may look at it again
        for i in (*checked, end):
            run = steps[taken:min(i, taken + to_find - len(feasible))]
            if run and earlier:
                for node in run:
                    if node.name in earlier:
                        diag.statuses.pop(node.name, None)
            feasible += run
            processed = taken + len(run)
            if len(feasible) >= to_find or i == end:
                break
            node = steps[i]
            processed = i + 1
            taken = i + 1
            st = self._fits(pod, node, nominated)
            if st.ok:
                diag.statuses.pop(node.name, None)
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            else:
                diag.statuses[node.name] = st
                diag.plugins.add(st.plugin)
        self._next_start = (self._next_start + processed) % n if n else 0
        diag.evaluated = processed
        before = len(feasible)
        feasible = self._extender_filters(pod, feasible, diag, snap)
        if self.cfg.extender_requeue and len(feasible) != before:
            diag.plugins.add(q.EXTENDER_PLUGIN)
        return feasible, diag

    def _search_order(self, pod: PodRecord, nodes: list[NodeState], snap: Snapshot,
                      nominated: Mapping[str, list[PodRecord]], to_find: int) -> tuple[list[int], int] | None:
        """For the search's steps from ``_next_start`` (step i looks at ``nodes[(start + i) % n]``)
        up to the last it can need - the one where the ``to_find``-th node known to pass is found,
        else the last node - the steps whose node is not known to pass every in-tree filter
        (``NodeSearch``; a node with nominated pods counted against ``pod`` is not known: ``_fits``
        decides it, as it does every node that fails, whose Status the diagnosis needs), and the
        number of steps. None when the columns cannot tell: every node then goes through ``_fits``."""
        search = self._search
        search.sync(nodes, snap.order, snap.changes)
        passing = search.passing(pod)
        if passing is None:
            return None
        n = len(nodes)
        for name, extra in nominated.items():
            row = search.row_of(name)
            if row is not None and any(p.priority >= pod.priority and p.uid != pod.uid for p in extra):
                passing[row] = False
        steps = (np.arange(n) + self._next_start) % n
        known = passing[steps]
        hits = np.flatnonzero(known)
        last = int(hits[to_find - 1]) if len(hits) >= to_find else n - 1
        unsure: list[int] = np.flatnonzero(~known[: last + 1]).tolist()
        return unsure, last + 1

    def _extender_filters(self, pod: PodRecord, feasible: list[NodeState], diag: Diagnosis,
                          snap: Snapshot) -> list[NodeState]:
        """``findNodesThatPassExtenders`` (§4.1.6); raises ExtenderError for non-ignorable errors.
        Each extender gets what the one before it returned: with ``nodeCacheCapable: false``,
        the Node objects of its reply (kept in ``diag.node_objects`` for the next filters and for
        prioritize; ``HTTPExtender.Filter`` hands ``result.Nodes.Items`` on as the feasible
        list), in-tree filtering and scoring still read the snapshot's node of that name."""
        objects = diag.node_objects
        for ext in self.extenders:
            if not feasible:
                break
            if not ext.spec.is_interested(pod.raw):
                continue
            try:
                sent = list(map(_NAME, feasible))
                reply = ext.filter(pod.raw, _raws(ext, feasible, objects), sent, self._pod_body(pod))
            except ExtenderError as exc:
                if ext.spec.ignorable:
                    log.info("Skipping extender %s as it returned error %r and has ignorable flag set", ext.name, exc)
                    continue
                raise
            _record_failures(diag.statuses, reply.unresolvable, reply.failed)
            states = snap.nodes
            if reply.node_objects is None:
                survivors = [state for state in map(states.get, reply.names) if state is not None]
                kept = reply.names if len(survivors) == len(reply.names) else map(_NAME, survivors)
            else:
                survivors = []
                for name in reply.names:
                    returned = reply.node_objects[name]
                    objects[name] = returned
                    state = states.get(name)
                    if state is None:
                        state = NodeState.of(returned)  # trusted, pod-less (non-cache mode)
                    survivors.append(state)
                kept = map(_NAME, survivors)
            diag.extender_rejected.update(set(sent).difference(kept))
            feasible = survivors
        return feasible

    def _pod_body(self, pod: PodRecord) -> bytes:
        """The cycle's pod as the requests carry it, encoded once for every verb of the cycle (a
        PodRecord is immutable: the same record, the same bytes)."""
        if self._encoded is None or self._encoded[0] is not pod:
            self._encoded = (pod, encode_pod(pod.raw))
        return self._encoded[1]

    def _prioritize(self, pod: PodRecord, feasible: list[NodeState], names: list[str] | None = None,
                    objects: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[ScoreTable, list[int]]:
        """``prioritizeNodes``: in-tree plugin scores, then every interested extender concurrently.
        Returns the scores and each feasible node's total, in ``feasible``'s order (``names``:
        the nodes' names, when the caller has them; ``objects``: the Node objects extender
        filters returned, sent in place of the snapshot's - ``Diagnosis.node_objects``)."""
        names = list(map(_NAME, feasible)) if names is None else names
        interested = [e for e in self.extenders if e.spec.is_interested(pod.raw)]
        if not interested and not self.cfg.in_tree_scoring:
            ones = [1] * len(names)
            return ScoreTable(names, [("default", ones)]), ones
        columns: list[tuple[str, Sequence[int | None]]] = []
        summed: list[int] | None = None  # the in-tree columns' sum, when the arrays gave it
        if self.cfg.in_tree_scoring:
            arrays = self._search.score_arrays(pod, feasible)
            if arrays is not None:
                columns += [(plugin, values.tolist()) for plugin, values in arrays]
                summed = sum((values for _, values in arrays), np.zeros(len(names), np.int64)).tolist()
            else:
                rows = score_nodes(pod, feasible)
                plugins = list(rows[names[0]]) if names else []  # score_nodes gives every node each plugin
                columns += [(plugin, [rows[name][plugin] for name in names]) for plugin in plugins]
        in_tree = len(columns)
        body = self._pod_body(pod) if interested else b""

        def call(ext: HTTPExtender) -> tuple[HTTPExtender, list[str], list[int], int, str]:
            try:
                return (ext, *ext.prioritize_columns(pod.raw, _raws(ext, feasible, objects), names, body), "")
            except ExtenderError as exc:
                return ext, [], [], 0, str(exc)

        if len(interested) > 1:
            results = list(self._executor.map(call, interested))
        else:
            results = [call(e) for e in interested]
        for ext, hosts, scores, weight, error in results:
            if error:
                log.debug("prioritize of %s failed for %s (ignored): %s", ext.name, pod.key, error)
                continue
            scale = weight * MAX_EXTENDER_SCORE_SCALE
            scaled = list(map(operator.mul, scores, itertools.repeat(scale, len(scores))))
            if len(set(hosts)) == len(hosts):
                sums = dict(zip(hosts, scaled))
            else:  # a host named twice: its scores add up
                sums = {}
                for host, score in zip(hosts, scaled):
                    sums[host] = sums.get(host, 0) + score
            columns.append((f"extender:{ext.name}", list(map(sums.get, names))))
        table = ScoreTable(names, columns)
        plugins = [plugin for plugin, _ in columns]
        if len(set(plugins)) < len(plugins):  # a repeated name: the rows hold what its later columns left
            return table, [sum(table[name].values()) for name in names]
        totals = [0] * len(names) if summed is None else summed
        for _, values in columns if summed is None else columns[in_tree:]:
            if None in values:
                values = [0 if v is None else v for v in values]
            totals = list(map(operator.add, totals, values))
        return table, totals

    def _select_host(self, names: Sequence[str], totals: Sequence[int]) -> str:
        """``selectHost``: highest total, ties broken uniformly by reservoir sampling."""
        return names[select_index(totals, self.rng)]


def select_index(totals: Sequence[int], rng: random.Random) -> int:
    """``selectHost``'s choice among ``totals`` (at least one): node by node, a higher total
    than the best so far becomes the best, an equal one draws ``rng.randrange(count)`` (count:
    the nodes with that total so far) and becomes the best on 0. Only the nodes that draw are
    visited in Python - the running best, where it rises and where it is tied come from array
    operations - so the draws, and the choice, are the loop's."""
    try:
        scores = np.array(totals, dtype=np.int64)
    except OverflowError:  # totals beyond int64: the same operations on Python ints
        scores = np.array(totals, dtype=object)
    best_before = np.maximum.accumulate(scores)[:-1]
    later = scores[1:]
    ties = np.flatnonzero(later == best_before) + 1
    if not len(ties):
        return int(np.argmax(scores))
    rises = np.flatnonzero(later > best_before) + 1
    segment = np.searchsorted(rises, ties)  # how many rises came before each tie
    first = np.searchsorted(segment, segment)  # the index in ``ties`` of its segment's first tie
    counts = np.arange(len(ties)) - first + 2
    last = len(rises)
    best = int(rises[-1]) if last else 0
    for at, count, seg in zip(ties.tolist(), counts.tolist(), segment.tolist()):
        if rng.randrange(count) == 0 and seg == last:
            best = at
    return best


def _raws(ext: HTTPExtender, nodes: list[NodeState],
          objects: Mapping[str, Mapping[str, Any]] | None = None) -> list[Mapping[str, Any]]:
    """The Node objects a request to ``ext`` carries: none in nodeCacheCapable mode, which sends
    the names only; else each node as an earlier extender's filter returned it (``objects``),
    or the snapshot's."""
    if ext.spec.node_cache_capable:
        return []
    if not objects:
        return list(map(_RAW, nodes))
    return [objects.get(n.name, n.raw) for n in nodes]


def _record_failures(statuses: dict[str, Status], unresolvable: Mapping[str, str], failed: Mapping[str, str]) -> None:
    """An extender's failure maps into the diagnosis, as ``findNodesThatPassExtenders`` does:
    ``FailedAndUnresolvableNodes`` first and winning over ``FailedNodes``; a node that already
    has a status gets the message added to its reasons (unresolvable: its code becomes
    UnschedulableAndUnresolvable). A node without one gets a Status made once per code and
    message - immutable, so shared: a reply names hundreds of nodes with a handful of messages -
    and those are stored at C speed."""
    for code, failures in ((Code.UNSCHEDULABLE_AND_UNRESOLVABLE, unresolvable), (Code.UNSCHEDULABLE, failed)):
        if not failures:
            continue
        if failures is failed and unresolvable:
            failures = {name: msg for name, msg in failures.items() if name not in unresolvable}
        known = failures.keys() & statuses.keys()
        if known:  # rare: such nodes keep their place in the diagnosis, as an assignment would
            fresh = {name: msg for name, msg in failures.items() if name not in known}
            for name in [name for name in failures if name in known]:
                old, msg = statuses[name], failures[name]
                if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    statuses[name] = Status(code, old.reasons + (msg,))
                else:
                    statuses[name] = Status(old.code, old.reasons + (msg,), old.plugin)
            failures = fresh
        made = {msg: Status(code, (msg,)) for msg in set(failures.values())}
        statuses.update(zip(failures.keys(), map(made.__getitem__, failures.values())))
