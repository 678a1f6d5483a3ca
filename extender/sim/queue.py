"""The scheduling queue (§7, and the framework's PreEnqueue and
QueueSort points), as kube-scheduler 1.29-1.31 runs it with QueueingHints off.

* **activeQ**: a heap by priority (higher first), then the pod's queue timestamp (PrioritySort).
* **backoffQ**: pods whose backoff has not expired; backoff = ``podInitialBackoffSeconds``
  doubled per attempt up to ``podMaxBackoffSeconds``, counted from the last failure.
* **unschedulable pool**: pods whose attempt failed with rejector plugins recorded in
  ``unschedulable_plugins``. A cluster event moves a pod out when it is relevant to one of its
  rejectors (to backoffQ while still backing off, else activeQ); pods older than 5 min are
  flushed by a sweep every 30 s. ``Extender`` (1.30+) is relevant to every event; the in-tree
  plugins to node add/update and assigned-pod deletions (simplified from their
  EventsToRegister).
* A failed pod goes to backoffQ instead of the pool when it has no rejector (errors, 1.29
  extender-only rejections) or when a move request arrived during its own scheduling cycle
  (``moveRequestCycle >= podSchedulingCycle``).
* **gated**: pods with ``spec.schedulingGates`` wait outside the queues (PreEnqueue
  SchedulingGates) until an update empties the list.

Not thread-safe by itself: :class:`extender.sim.scheduler.Scheduler` holds its lock around every
call. Time comes from the scheduler's clock (virtual or real).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from extender.sim.cache import PodRecord

EXTENDER_PLUGIN = "Extender"

# Cluster events the simulator produces, and which in-tree rejectors they may help.
POD_ADD = "PodAdd"
POD_UPDATE = "PodUpdate"
POD_DELETE = "PodDelete"
ASSIGNED_POD_ADD = "AssignedPodAdd"
ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
ASSIGNED_POD_DELETE = "AssignedPodDelete"
NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"
NODE_DELETE = "NodeDelete"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"

IN_TREE_EVENTS: Mapping[str, frozenset[str]] = {
    "NodeResourcesFit": frozenset({NODE_ADD, NODE_UPDATE, ASSIGNED_POD_DELETE}),
    "NodeUnschedulable": frozenset({NODE_ADD, NODE_UPDATE}),
    "NodeName": frozenset({NODE_ADD}),
    "TaintToleration": frozenset({NODE_ADD, NODE_UPDATE}),
    "NodeAffinity": frozenset({NODE_ADD, NODE_UPDATE}),
}

ACTIVE, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT, BINDING = (
    "active", "backoff", "unschedulable", "gated", "scheduling", "binding")


@dataclass
class QueuedPod:
    """A pending pod and its queue bookkeeping (``QueuedPodInfo``)."""

    uid: str
    record: PodRecord
    timestamp: float
    state: str = ACTIVE
    attempts: int = 0
    initial_attempt: float | None = None
    unschedulable_plugins: frozenset[str] = frozenset()
    cycle: int = 0
    seq: int = 0
    seen_generation: int = -1
    last_was_error: bool = False
    last_message: str = ""
    arrival: float = 0.0

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def raw(self) -> Mapping[str, Any]:
        return self.record.raw

    @property
    def priority(self) -> int:
        return self.record.priority

    @property
    def gated(self) -> bool:
        return bool(((self.raw.get("spec") or {}).get("schedulingGates")))


@dataclass
class SchedulingQueue:
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    max_in_unschedulable: float = 300.0
    extender_requeue: bool = True
    pods: dict[str, QueuedPod] = field(default_factory=dict)
    scheduling_cycle: int = 0
    move_request_cycle: int = -1
    moves: int = 0
    _active: list[tuple[int, float, int, str]] = field(default_factory=list)
    _backoff: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)
    _pool: dict[str, QueuedPod] = field(default_factory=dict)

    # ---- bookkeeping ----------------------------------------------------------------------------------

    def _push_active(self, qp: QueuedPod) -> None:
        self._pool.pop(qp.uid, None)
        qp.state = ACTIVE
        qp.seq = next(self._seq)
        heapq.heappush(self._active, (-qp.priority, qp.timestamp, qp.seq, qp.uid))

    def _push_backoff(self, qp: QueuedPod) -> None:
        self._pool.pop(qp.uid, None)
        qp.state = BACKOFF
        qp.seq = next(self._seq)
        heapq.heappush(self._backoff, (self.backoff_expiry(qp), qp.seq, qp.uid))

    def backoff_duration(self, qp: QueuedPod) -> float:
        return self.backoff_for(qp.attempts)

    def backoff_for(self, attempts: int) -> float:
        """``calculateBackoffDuration`` after ``attempts`` attempts: initial, doubled per further
        attempt, capped."""
        duration = self.initial_backoff
        for _ in range(1, attempts):
            if duration > self.max_backoff - duration:
                return self.max_backoff
            duration += duration
        return duration

    def backoff_expiry(self, qp: QueuedPod) -> float:
        return qp.timestamp + self.backoff_duration(qp)

    def _move(self, qp: QueuedPod, now: float) -> None:
        if self.backoff_expiry(qp) > now:
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    # ---- pending pods come and go -------------------------------------------------------------------------

    def add(self, record: PodRecord, now: float) -> QueuedPod:
        qp = QueuedPod(record.uid, record, now, arrival=now)
        self.pods[qp.uid] = qp
        if qp.gated:
            qp.state = GATED
        else:
            self._push_active(qp)
        return qp

    def update(self, record: PodRecord, now: float, spec_changed: bool) -> QueuedPod | None:
        """A pending pod changed. Ungating enqueues it; a spec/metadata change moves it out of the
        unschedulable pool (``isPodUpdated``); active/backoff entries keep their place."""
        qp = self.pods.get(record.uid)
        if qp is None:
            return None
        qp.record = record
        if qp.state == GATED and not qp.gated:
            qp.timestamp = now
            self._push_active(qp)
        elif qp.state == UNSCHEDULABLE and spec_changed:
            self._move(qp, now)
        return qp

    def delete(self, uid: str) -> QueuedPod | None:
        qp = self.pods.pop(uid, None)
        self._pool.pop(uid, None)
        if qp is not None:
            qp.state = "deleted"
        return qp

    # ---- scheduling ------------------------------------------------------------------------------------------

    def pop(self) -> QueuedPod | None:
        while self._active:
            _, _, seq, uid = heapq.heappop(self._active)
            qp = self.pods.get(uid)
            if qp is None or qp.state != ACTIVE or qp.seq != seq:
                continue
            self.scheduling_cycle += 1
            qp.cycle = self.scheduling_cycle
            qp.attempts += 1
            qp.state = IN_FLIGHT
            return qp
        return None

    def add_unschedulable(self, qp: QueuedPod, now: float, plugins: frozenset[str]) -> str:
        """``AddUnschedulableIfNotPresent``; returns where the pod went."""
        if qp.uid not in self.pods:
            return "deleted"
        qp.timestamp = now
        qp.unschedulable_plugins = plugins
        if self.move_request_cycle >= qp.cycle or not plugins:
            self._push_backoff(qp)
        else:
            qp.state = UNSCHEDULABLE
            self._pool[qp.uid] = qp
        return qp.state

    def requeue_after_error(self, qp: QueuedPod, now: float) -> None:
        """Errors and binding failures: no rejector, straight to backoffQ."""
        if qp.uid not in self.pods:
            return
        qp.timestamp = now
        qp.unschedulable_plugins = frozenset()
        self._push_backoff(qp)

    def binding(self, qp: QueuedPod) -> None:
        qp.state = BINDING

    def move_all(self, event: str, now: float) -> int:
        """What kube-scheduler's event handlers do with the queue for ``event`` (1.29-1.31,
        ``eventhandlers.go``): node events and an assigned pod's deletion move the pool pods the
        event may help (``MoveAllToActiveOrBackoffQueue``); an assigned pod added or updated moves
        only pods with an affinity term matching it (``AssignedPodAdded`` /
        ``AssignedPodUpdated``: none here, the emulator has no inter-pod affinity) but, being of
        interest, still counts as a move request for pods in flight; an unscheduled pod's add,
        update or delete touches only that pod."""
        if event in (POD_ADD, POD_UPDATE, POD_DELETE):
            return 0
        self.move_request_cycle = self.scheduling_cycle
        if event in (ASSIGNED_POD_ADD, ASSIGNED_POD_UPDATE):
            return 0
        moved = 0
        for qp in list(self._pool.values()):
            if qp.state != UNSCHEDULABLE or not self._relevant(qp, event):
                continue
            self._move(qp, now)
            moved += 1
        self.moves += moved
        return moved

    def _relevant(self, qp: QueuedPod, event: str) -> bool:
        if event == UNSCHEDULABLE_TIMEOUT:
            return True
        for plugin in qp.unschedulable_plugins:
            if plugin == EXTENDER_PLUGIN and self.extender_requeue:
                return True
            if event in IN_TREE_EVENTS.get(plugin, ()):
                return True
        return False

    def flush_backoff(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff)
            qp = self.pods.get(uid)
            if qp is not None and qp.state == BACKOFF and qp.seq == seq:
                self._push_active(qp)

    def flush_unschedulable(self, now: float) -> int:
        """``flushUnschedulablePodsLeftover``: pods in the pool longer than the limit."""
        stale = [qp for qp in self._pool.values()
                 if qp.state == UNSCHEDULABLE and now - qp.timestamp > self.max_in_unschedulable]
        for qp in stale:
            self._move(qp, now)
        if stale:
            self.move_request_cycle = self.scheduling_cycle
        return len(stale)

    # ---- views ---------------------------------------------------------------------------------------------

    def next_backoff_expiry(self) -> float | None:
        while self._backoff:
            expiry, seq, uid = self._backoff[0]
            qp = self.pods.get(uid)
            if qp is not None and qp.state == BACKOFF and qp.seq == seq:
                return expiry
            heapq.heappop(self._backoff)
        return None

    def has_active(self) -> bool:
        while self._active:
            _, _, seq, uid = self._active[0]
            qp = self.pods.get(uid)
            if qp is not None and qp.state == ACTIVE and qp.seq == seq:
                return True
            heapq.heappop(self._active)
        return False

    def pool(self) -> list[QueuedPod]:
        return list(self._pool.values())

    def in_state(self, *states: str) -> list[QueuedPod]:
        return [qp for qp in self.pods.values() if qp.state in states]

    def nominated_to(self, node: str) -> list[QueuedPod]:
        """The nominator's pods for ``node``: pending pods (not assumed) with that nominatedNodeName."""
        return [qp for qp in self.pods.values()
                if qp.state != BINDING and qp.record.nominated_node_name == node]

    def nominated_nodes(self) -> dict[str, list[QueuedPod]]:
        out: dict[str, list[QueuedPod]] = {}
        for qp in self.pods.values():
            if qp.state != BINDING and qp.record.nominated_node_name:
                out.setdefault(qp.record.nominated_node_name, []).append(qp)
        return out
