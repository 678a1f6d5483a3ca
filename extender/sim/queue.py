"""The scheduling queue (§7, and the framework's PreEnqueue and
QueueSort points), as kube-scheduler 1.29-1.31 runs it with QueueingHints off.

* **activeQ**: a heap by priority (higher first), then the pod's queue timestamp (PrioritySort).
* **backoffQ**: pods whose backoff has not expired; backoff = ``podInitialBackoffSeconds``
  doubled per attempt up to ``podMaxBackoffSeconds``, counted from the last failure. A flush
  every second (``flushBackoffQCompleted``, ticks kept by the scheduler) moves the pods whose
  backoff is over to activeQ: a pod waits for the first tick at or after its expiry.
* **unschedulable pool**: pods whose attempt failed with rejector plugins recorded in
  ``unschedulable_plugins``. A cluster event moves a pod out when it is relevant to one of its
  rejectors (to backoffQ while still backing off, else activeQ); pods older than 5 min are
  flushed by a sweep every 30 s. ``Extender`` (1.30+) is relevant to every event; the in-tree
  plugins to the node events and assigned-pod deletions they register (:data:`IN_TREE_EVENTS`).
* **Node events** (``eventhandlers.go``): an added node moves only the pool pods that pass
  ``preCheckForNode`` against it (``extender.sim.filters.admits``: its free resources, ignored
  extended resources included, node affinity, nodeName, NoSchedule taints); an updated node
  moves pods only for the scheduling-relevant changes :func:`node_update_events` finds (one
  move per change, each with the same pre-check); a deleted node moves nothing and is no move
  request (1.32 added that event).
* A failed pod goes to backoffQ instead of the pool when it has no rejector (errors, 1.29
  extender-only rejections) or when a move request arrived during its own scheduling cycle
  (``moveRequestCycle >= podSchedulingCycle``).
* **An update of a pod in its own scheduling cycle** (in no queue: ``Update`` finds it nowhere;
  delivered from another thread - the scheduler holds back the updates its cycle causes
  itself until the cycle is over) puts a fresh entry for it straight into activeQ - no
  backoff, attempts counted from zero - whatever changed. When that cycle then fails,
  ``AddUnschedulableIfNotPresent`` finds the pod already queued and leaves it there; when it
  succeeds, the fresh entry is skipped when popped while the pod is assumed
  (``skipPodSchedule``).
* **gated**: pods with ``spec.schedulingGates`` wait outside the queues (PreEnqueue
  SchedulingGates) until an update empties the list.

Not thread-safe by itself: :class:`extender.sim.scheduler.Scheduler` holds its lock around every
call. Time comes from the scheduler's clock (virtual or real).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from extender.sim.cache import NodeState, PodRecord

EXTENDER_PLUGIN = "Extender"

# Cluster events the simulator produces, and which in-tree rejectors they may help.
POD_ADD = "PodAdd"
POD_UPDATE = "PodUpdate"
POD_DELETE = "PodDelete"
ASSIGNED_POD_ADD = "AssignedPodAdd"
ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
ASSIGNED_POD_DELETE = "AssignedPodDelete"
NODE_ADD = "NodeAdd"
NODE_DELETE = "NodeDelete"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
# A node update is one event per scheduling-relevant change (``nodeSchedulingPropertiesChange``),
# in this order; the action type each carries is in the comment.
NODE_SPEC_UNSCHEDULABLE_CHANGE = "NodeSpecUnschedulableChange"  # UpdateNodeTaint
NODE_ALLOCATABLE_CHANGE = "NodeAllocatableChange"  # UpdateNodeAllocatable
NODE_LABEL_CHANGE = "NodeLabelChange"  # UpdateNodeLabel
NODE_TAINT_CHANGE = "NodeTaintChange"  # UpdateNodeTaint
NODE_CONDITION_CHANGE = "NodeConditionChange"  # UpdateNodeCondition
NODE_ANNOTATION_CHANGE = "NodeAnnotationChange"  # UpdateNodeAnnotation

_TAINT_OR_LABEL = frozenset({NODE_SPEC_UNSCHEDULABLE_CHANGE, NODE_TAINT_CHANGE, NODE_LABEL_CHANGE})
IN_TREE_EVENTS: Mapping[str, frozenset[str]] = {
    # Node/Add plus UpdateNodeTaint|UpdateNodeLabel (registered by every plugin that registers
    # Node/Add while QueueingHints are off, #109437), and what each plugin adds to that.
    "NodeResourcesFit": frozenset({NODE_ADD, NODE_ALLOCATABLE_CHANGE, ASSIGNED_POD_DELETE}) | _TAINT_OR_LABEL,
    "NodeUnschedulable": frozenset({NODE_ADD}) | _TAINT_OR_LABEL,
    "NodeName": frozenset({NODE_ADD}) | _TAINT_OR_LABEL,
    "TaintToleration": frozenset({NODE_ADD}) | _TAINT_OR_LABEL,
    "NodeAffinity": frozenset({NODE_ADD}) | _TAINT_OR_LABEL,
}
"""The events each emulated in-tree filter registers (``EventsToRegister``, QueueingHints off)."""

PreCheck = Callable[["QueuedPod"], bool]


def _conditions(node: Mapping[str, Any]) -> dict[Any, Any]:
    return {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}


def node_update_events(old: NodeState, new: NodeState) -> list[str]:
    """``nodeSchedulingPropertiesChange``: the events a node update makes, in upstream's order -
    ``spec.unschedulable`` turned off (turning it on is no event), allocatable (as the emulator
    reads it), labels, taints, condition statuses by type (heartbeats are no change),
    annotations. Empty when nothing scheduling-relevant changed: no pod moves then."""
    o, n = old.raw, new.raw
    o_spec, n_spec = o.get("spec") or {}, n.get("spec") or {}
    o_meta, n_meta = o.get("metadata") or {}, n.get("metadata") or {}
    events: list[str] = []
    if bool(o_spec.get("unschedulable")) and not n_spec.get("unschedulable"):
        events.append(NODE_SPEC_UNSCHEDULABLE_CHANGE)
    if dict(old.allocatable) != dict(new.allocatable):
        events.append(NODE_ALLOCATABLE_CHANGE)
    if (o_meta.get("labels") or {}) != (n_meta.get("labels") or {}):
        events.append(NODE_LABEL_CHANGE)
    if (o_spec.get("taints") or []) != (n_spec.get("taints") or []):
        events.append(NODE_TAINT_CHANGE)
    if _conditions(o) != _conditions(n):
        events.append(NODE_CONDITION_CHANGE)
    if (o_meta.get("annotations") or {}) != (n_meta.get("annotations") or {}):
        events.append(NODE_ANNOTATION_CHANGE)
    return events

ACTIVE, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT, BINDING = (
    "active", "backoff", "unschedulable", "gated", "scheduling", "binding")
SUPERSEDED = "superseded"
"""An entry whose pod got a fresh entry while it was in flight, once its cycle is over."""


def _nominated(qp: QueuedPod) -> bool:
    """Whether the nominator counts ``qp``'s nomination: not once the pod is assumed - its
    binding entry, or a fresh one an update made during the cycle that assumed it
    (``DeleteNominatedPodIfExists`` at assume)."""
    return qp.state != BINDING and (qp.previous is None or qp.previous.state != BINDING)


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
    previous: QueuedPod | None = None
    """The entry that was in flight when an update made this one (until that cycle is over)."""

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
        return self._enqueue(QueuedPod(record.uid, record, now, arrival=now))

    def _enqueue(self, qp: QueuedPod) -> QueuedPod:
        """``qp`` becomes its pod's entry, through PreEnqueue: gated, it waits; else activeQ."""
        self.pods[qp.uid] = qp
        if qp.gated:
            qp.state = GATED
        else:
            self._push_active(qp)
        return qp

    def update(self, record: PodRecord, now: float, spec_changed: bool) -> QueuedPod | None:
        """A pending pod changed (``Update``, QueueingHints off); returns its entry now.

        * In flight (its scheduling cycle runs, so it is in no queue): a fresh entry - no
          rejectors, attempts from zero, timestamp now - goes straight to activeQ (through
          PreEnqueue: gated, it waits), whatever changed; the one in flight becomes its
          ``previous``. See :meth:`add_unschedulable`, :meth:`requeue_after_error`, :meth:`skip`.
        * Gated, and no gate left: enqueued.
        * In the unschedulable pool: a spec/metadata change (``isPodUpdated``: ``spec_changed``)
          moves it to backoffQ while backing off, else activeQ.
        * Active, backing off or binding (assumed: kube-scheduler ignores it): the entry keeps
          its place."""
        qp = self.pods.get(record.uid)
        if qp is None:
            return None
        if qp.state == IN_FLIGHT:
            return self._enqueue(QueuedPod(record.uid, record, now, arrival=qp.arrival, previous=qp))
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

    def _already_queued(self, qp: QueuedPod) -> QueuedPod | None:
        """The pod's other entry when an update queued it afresh during ``qp``'s cycle (``qp``
        is then over: superseded), else None."""
        current = self.pods.get(qp.uid)
        if current is None or current is qp:
            return None
        qp.state = SUPERSEDED
        if current.previous is qp:
            current.previous = None
        return current

    def add_unschedulable(self, qp: QueuedPod, now: float, plugins: frozenset[str]) -> str:
        """``AddUnschedulableIfNotPresent``; returns where the pod went. A pod an update queued
        afresh during this cycle is "already present": it stays where it is (returned)."""
        if qp.uid not in self.pods:
            return "deleted"
        current = self._already_queued(qp)
        if current is not None:
            return current.state
        qp.timestamp = now
        qp.unschedulable_plugins = plugins
        if self.move_request_cycle >= qp.cycle or not plugins:
            self._push_backoff(qp)
        else:
            qp.state = UNSCHEDULABLE
            self._pool[qp.uid] = qp
        return qp.state

    def requeue_after_error(self, qp: QueuedPod, now: float) -> None:
        """Errors and binding failures: no rejector, straight to backoffQ - unless an update
        queued the pod afresh meanwhile (it stays there, as for :meth:`add_unschedulable`)."""
        if qp.uid not in self.pods or self._already_queued(qp) is not None:
            return
        qp.timestamp = now
        qp.unschedulable_plugins = frozenset()
        self._push_backoff(qp)

    def binding(self, qp: QueuedPod) -> None:
        qp.state = BINDING

    def skip(self, qp: QueuedPod) -> None:
        """``skipPodSchedule`` for a popped entry of a pod that is assumed (an update queued it
        afresh during the cycle that then assumed it): the entry is dropped, the binding one is
        the pod's entry again - a failing bind requeues it as usual."""
        if self.pods.get(qp.uid) is qp:
            if qp.previous is not None and qp.previous.state == BINDING:
                self.pods[qp.uid] = qp.previous
            else:
                del self.pods[qp.uid]
                self._pool.pop(qp.uid, None)
        qp.state = SUPERSEDED
        qp.previous = None

    def move_all(self, event: str, now: float, pre_check: PreCheck | None = None) -> int:
        """What kube-scheduler's event handlers do with the queue for ``event`` (1.29-1.31,
        ``eventhandlers.go``); returns how many pods moved.

        * Node events (an add, or one change of an update: :func:`node_update_events`) and an assigned
          pod's deletion move the pool pods the event may help (``MoveAllToActiveOrBackoffQueue``):
          those ``pre_check`` passes (node events: ``preCheckForNode``; None: all) and whose
          rejectors include one interested in the event. Each counts as a move request for
          pods in flight, whether or not it moved anybody.
        * An assigned pod added or updated moves only pods with an affinity term matching it
          (``AssignedPodAdded`` / ``AssignedPodUpdated``: none here, the emulator has no
          inter-pod affinity) but still counts as a move request.
        * A node's deletion (no handler before 1.32) and an unscheduled pod's add, update or
          delete (they touch only that pod) do nothing here."""
        if event in (POD_ADD, POD_UPDATE, POD_DELETE, NODE_DELETE):
            return 0
        self.move_request_cycle = self.scheduling_cycle
        if event in (ASSIGNED_POD_ADD, ASSIGNED_POD_UPDATE):
            return 0
        moved = 0
        for qp in list(self._pool.values()):
            if qp.state != UNSCHEDULABLE or not self._relevant(qp, event):
                continue
            if pre_check is not None and not pre_check(qp):
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
        return [qp for qp in self.pods.values() if _nominated(qp) and qp.record.nominated_node_name == node]

    def nominated_nodes(self) -> dict[str, list[QueuedPod]]:
        out: dict[str, list[QueuedPod]] = {}
        for qp in self.pods.values():
            if _nominated(qp) and qp.record.nominated_node_name:
                out.setdefault(qp.record.nominated_node_name, []).append(qp)
        return out
