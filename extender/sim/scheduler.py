"""The emulated kube-scheduler: serial scheduling cycles, asynchronous binding cycles, extenders.

One :class:`Scheduler` owns a queue (``extender.sim.queue``), a cache (``extender.sim.cache``) and
one :class:`~extender.sim.client.HTTPExtender` per configured extender, and works on a cluster
object it subscribes to (a ``MemoryCluster`` or anything with the same methods, see
:class:`ClusterLike`). A scheduling cycle (``schedule_one.go``, §4.1):

1. skip pods being deleted; snapshot the cache (0 nodes: error "no nodes available");
2. a nominated pod tries its nominated node first: in-tree filters, then the extender chain on
   that one node; an extender error there is only logged (§4.1.4);
3. in-tree filters from a rotating offset until ``numFeasibleNodesToFind`` nodes fit (§4.2,
   1.30+: 1 node when nothing filters or scores), nominated pods of higher or equal priority
   counted on their nodes;
4. the extender filter chain (§3.4, §3.7, §4.3): sequential in configured order (ignorable
   last), interested extenders only, survivors only, never an empty list; ``Error``/transport
   failures: ignorable -> skipped, else the attempt is an **Error** (backoffQ, no preemption,
   nominatedNodeName cleared); ``FailedAndUnresolvableNodes`` wins over ``FailedNodes``;
5. none feasible -> FitError -> DefaultPreemption (``extender.sim.preemption``);
   one feasible -> chosen without scoring; two or more -> in-tree scores plus every interested
   extender's prioritize concurrently (errors ignored, ``Score x weight x 10``, unknown hosts
   ignored, missing hosts 0), host picked with seeded reservoir sampling (``selectHost``);
6. assume in the cache, then a **binding cycle thread per pod** (unbounded; threads are reused,
   handed each cycle as a new one starts: ``extender.sim.binders``): the first
   interested binder extender binds (1.30+: an ignorable binder's error falls through), else
   the default binder writes the Binding to the cluster. Failure: forget, requeue with
   backoff unless the pod already has ``spec.nodeName`` (§5.3).

Where the parts are: the node-choosing steps 3-5 (filters, extender filter chain, scores, host)
in ``extender.sim.placement``, over the columnar node search of ``extender.sim.search``; the
clocks in ``extender.sim.clocks``; what a run records (cycles, pod traces, the summary) in
``extender.sim.records``; the binding cycle, failures and preemption here.

**Time.** The queue, backoffs, arrivals and deletions run on the scheduler's clock. With the
default :class:`VirtualClock`, scheduling cycles take no virtual time, and the clock jumps to the
next arrival, deletion, backoffQ flush or unschedulable flush when the active queue is empty and
no binding thread is in flight. Extender HTTP calls and binding threads are real (wall-clock)
work: while binding threads are the only thing in flight, virtual time follows the wall clock
(jumping to the next due time once that much real time has passed), so a bind held in an
extender's Permit sees the arrivals and backoff expiries that fall due meanwhile - a binding
cycle never freezes the queue. Binds that return in less time than the gap to the next due time
(the usual case) leave virtual time unchanged. Throughput is reported in both clocks.
:class:`RealClock` runs the same loop against wall time.

**Cluster.** With an in-process extender the scheduler and the extender share one cluster
object: the extender's bind writes the Binding and both see it. When the extender runs
elsewhere (``--extender URL``) the scheduler keeps its own cluster and is the only writer it
knows about: a successful extender bind is mirrored into it (``mirror_extender_binds``).
The cluster may also deliver its changes asynchronously, from other threads, like an informer
does (``extender.testing.harness`` drives the scheduler over a real API server that way): the
scheduler reads pods back only through ``get_pod`` and writes only through the
:class:`ClusterLike` operations, the status of a pending pod included (``update_pod_status``).
A change a scheduling cycle causes on its own thread - an in-process extender's write during
a verb call, the cycle's own victim deletions and status writes - reaches the scheduler after
that cycle, as an informer delivers a write asynchronously rather than inside the call that
made it: a pod the extender updates in each filter call is then found in the pool by its
update (moved to backoffQ if the update counts), not re-queued in activeQ before its cycle
failed, which at one virtual instant never ended. Changes delivered from other threads arrive
at once, during a cycle too (``extender.sim.queue``: a pod updated in its own cycle).

**A run ends** when nothing can change any more: no active pod, no binding in flight, no
pending workload action, and every waiting pod has been tried against the current cluster
state and did not fail with an error (``stop_when_settled``; this assumes an extender's answers
depend on the cluster only); at the latest ``max_virtual_seconds`` after the last action; or
at once when kube-scheduler would crash - a reply in which it dereferences a nil pointer
(:class:`~extender.sim.client.SchedulerPanic`): ``RunSummary.reason`` then starts with
``crashed:`` and the last cycle's outcome is ``crashed``.
``run(until_stopped=True)`` (real time only) instead keeps waiting for the cluster's changes
until another thread calls :meth:`Scheduler.stop`.
"""

from __future__ import annotations

import collections
import gc
import heapq
import itertools
import logging
import math
import operator
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from extender.framework.handle import WriteError
from extender.framework.status import Code
from extender.sim import queue as q
from extender.sim.binders import Binders
from extender.sim.cache import PodRecord, SchedulerCache, Snapshot, TERMINAL_PHASES, pod_uid
from extender.sim.client import CallStats, ExtenderError, HTTPExtender, SchedulerPanic
from extender.sim.clocks import RealClock, VirtualClock, iso
from extender.sim.config import SchedulerConfig
from extender.sim.filters import admits
from extender.sim.records import CycleRecord, Diagnosis, PodTrace, RunSummary, StatusMessages
from extender.sim.placement import Placement
from extender.sim.search import NodeSearch
from extender.sim.preemption import (Candidate, ExtenderRound, PDB, aggregate, call_extenders, find_candidates,
                                     fit_error_message, pdbs_from, pick_one_node)

log = logging.getLogger("extender.sim")
_NAME = operator.attrgetter("name")
BACKOFF_FLUSH_INTERVAL = 1.0
"""``flushBackoffQCompleted`` runs every second (``wait.Until`` in ``PriorityQueue.Run``)."""



class ClusterLike(Protocol):
    """What the scheduler needs from the cluster (``extender.cluster.memory.MemoryCluster``, or
    ``extender.testing.harness.ApiClusterView`` over an API server). Writes raise
    ``WriteError`` (or any exception, for ``bind``) when the cluster refuses them."""

    def start(self, sink: Any) -> None: ...

    def add_pod(self, pod: Mapping[str, Any]) -> Any: ...

    def delete_pod(self, namespace: str, name: str) -> bool: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the scheduler's view holds it now (a copy), or None."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def update_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, Any]) -> None:
        """Write the scheduler-owned status fields of the pod with this UID: each key of
        ``status`` replaces the pod's (``nominatedNodeName: None`` removes it), except
        ``conditions``, merged by ``type`` (a condition replaces the pod's of the same type)."""

    def pods(self) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...


@dataclass(order=True)
class _Action:
    at: float
    seq: int
    label: str = field(compare=False)
    fn: Callable[[], None] = field(compare=False)


_NOT_AN_UPDATE = frozenset({"resourceVersion", "generation", "managedFields", "finalizers"})


def _spec_or_meta_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """``isPodUpdated`` (1.30-1.36): a change outside resourceVersion, generation,
    managedFields, finalizers and status - ``status.resourceClaimStatuses`` excepted, a change
    there counts."""
    if old is None:
        return True

    def strip(p: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (p.get("metadata") or {}).items() if k not in _NOT_AN_UPDATE}
        claims = (p.get("status") or {}).get("resourceClaimStatuses")
        return {"metadata": meta, "spec": p.get("spec"), "claims": claims or None}

    return strip(old) != strip(new)


DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def _terminating_by_preemption(p: PodRecord) -> bool:
    """``podTerminatingByPreemption`` (PodDisruptionConditions on): ``p`` is being deleted and
    its DisruptionTarget condition says kube-scheduler preempted it - not a pod its owner
    deleted, nor one evicted through the Eviction API (reason EvictionByEvictionAPI)."""
    if not p.deleting:
        return False
    for c in (p.raw.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == DISRUPTION_TARGET:
            return c.get("status") == "True" and c.get("reason") == PREEMPTION_BY_SCHEDULER
    return False


class _FewerCollections:
    """The garbage collector's first threshold raised while runs last (``with``). Every cycle
    allocates and frees thousands of containers (replies, node lists, scores); at the default
    threshold (700) 1,000 cycles on 2,000 nodes set off ~930 young and 7 full collections,
    ~0.6 ms per cycle; at 20,000 ~0.15 ms. The thresholds are the process's: the first of
    overlapping runs raises them, the last one to end restores them."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._runs = 0
        self._saved: tuple[int, ...] = ()

    def __enter__(self) -> None:
        with self._lock:
            if not self._runs:
                self._saved = gc.get_threshold()
                gc.set_threshold(max(self._saved[0], self.threshold), *self._saved[1:])
            self._runs += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._runs -= 1
            if not self._runs:
                gc.set_threshold(*self._saved)


_fewer_collections = _FewerCollections(20_000)


class Scheduler(Placement):
    """See the module docstring. Thread-safe; :meth:`run` drives it from the calling thread."""

    def _append_cycle(self, record: CycleRecord) -> None:
        self.cycles.append(record)
        if len(self.cycles) > self.detailed_cycles:
            old = self.cycles[-self.detailed_cycles - 1]
            old.statuses, old.feasible, old.scores, old.totals = {}, [], None, None
        for hook in self.on_cycle:
            hook(record)

    def __init__(self, config: SchedulerConfig, cluster: ClusterLike, *, clock: VirtualClock | RealClock | None = None,
                 stats: CallStats | None = None, pdbs: Sequence[Mapping[str, Any]] = (),
                 mirror_extender_binds: bool = False, detailed_cycles: int = 1000,
                 graceful_termination: bool = False) -> None:
        self.cfg = config.validate()
        self.detailed_cycles = detailed_cycles
        """Per-node details (statuses, feasible, scores) are kept for this many recent cycles;
        older cycle records keep only their summary (a 5,000-node cycle's details are ~150 KB)."""
        self.cluster = cluster
        self.clock = clock or VirtualClock()
        self.stats = stats or CallStats()
        self.extenders = [HTTPExtender(spec, stats=self.stats) for spec in config.ordered]
        self.ignored = config.ignored_resources
        self.rng = random.Random(config.seed)
        self.cache = SchedulerCache()
        self.queue = q.SchedulingQueue(config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds,
                                       config.pod_max_in_unschedulable_seconds, config.extender_requeue)
        self.pdb_objects = list(pdbs)
        self.mirror_extender_binds = mirror_extender_binds
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._binding = 0
        self._next_start = 0
        self._actions: list[_Action] = []
        self._action_seq = itertools.count()
        self._last_action_at = self.clock.now()
        self._backoff_flushed = self.clock.now()  # the last backoffQ flush tick (the queue runs from here)
        self._cycle_thread: int | None = None  # the scheduling thread while a cycle runs (_deferring)
        self._deferred: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._draining: int | None = None  # the thread delivering them (_deliver_deferred)
        self._deferral = threading.Lock()  # guards the three above
        self._known: dict[str, Mapping[str, Any]] = {}
        self.generation = 0
        self.cycles: list[CycleRecord] = []
        self.traces: dict[str, PodTrace] = {}
        self.events: list[dict[str, Any]] = []
        self.on_bound: list[Callable[[PodTrace], None]] = []
        self.on_cycle: list[Callable[[CycleRecord], None]] = []
        """Called on the scheduling thread with each cycle's record as it is appended."""
        self._stopping = False
        self.binds = 0
        self.bind_failures = 0
        self.malformed = 0
        self._executor = ThreadPoolExecutor(max_workers=max(2, len(self.extenders)), thread_name_prefix="prioritize")
        self._binders = Binders()
        self._has_filter_extenders = any(e.spec.is_filter for e in self.extenders)
        self._has_scoring = config.in_tree_scoring or any(e.spec.is_prioritizer for e in self.extenders)
        self._search = NodeSearch(self.ignored)
        self._encoded = None
        if graceful_termination:
            self._emulate_kubelet(cluster)
        cluster.start(self)

    def _emulate_kubelet(self, cluster: ClusterLike) -> None:
        """Deleted pods terminate gracefully on the scheduler's clock (``MemoryCluster.graceful``)."""
        graceful = getattr(cluster, "graceful", None)
        if graceful is None:
            raise ValueError("graceful termination needs a cluster that emulates it (MemoryCluster)")

        def kubelet(seconds: float, finish: Callable[[], None]) -> str:
            self.after(seconds, "pod terminated", finish)
            return iso(self.clock.now() + seconds)
        graceful(kubelet)

    # ---- the cluster watch (ClusterEvents sink; called on any thread) --------------------------------

    def mark_synced(self) -> None:
        pass

    # PodDisruptionBudgets come in through ``pdbs=`` and kube-scheduler's core reads no PodGroups:
    # the cluster delivers both (a cluster file may hold them), and the simulated scheduler ignores them.
    def upsert_pdb(self, raw: Mapping[str, Any]) -> None:
        pass

    def remove_pdb(self, raw: Mapping[str, Any]) -> None:
        pass

    def upsert_pod_group(self, raw: Mapping[str, Any]) -> None:
        pass

    def remove_pod_group(self, raw: Mapping[str, Any]) -> None:
        pass

    def upsert_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        pass

    def remove_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        pass

    def upsert_node(self, raw: Mapping[str, Any]) -> None:
        """``addNodeToCache`` / ``updateNodeInCache``: a new node moves the pool pods that pass
        ``preCheckForNode`` against it; an update moves them once per scheduling-relevant change
        (``extender.sim.queue.node_update_events``), with the same pre-check, and not at all
        for any other change (a heartbeat, a status field the scheduler does not read)."""
        if self._deferring(self.upsert_node, raw):
            return
        name = str((raw.get("metadata") or {}).get("name"))
        with self._cond:
            before = self.cache.node(name)
            self.cache.upsert_node(raw)
            after = self.cache.node(name)
            self._changed()
            if after is None:  # pragma: no cover - upsert_node just stored it
                return
            node = after
            events = [q.NODE_ADD] if before is None else q.node_update_events(before, node)
            now = self.clock.now()
            for event in events:
                self.queue.move_all(event, now, lambda qp: admits(qp.record, node))

    def remove_node(self, name: str) -> None:
        """``deleteNodeFromCache``: the cache forgets the node; no pod moves (1.29-1.31)."""
        if self._deferring(self.remove_node, name):
            return
        with self._cond:
            self.cache.remove_node(name)
            self._event(q.NODE_DELETE)

    def upsert_pod(self, raw: Mapping[str, Any]) -> None:
        if self._deferring(self.upsert_pod, raw):
            return
        try:
            rec = PodRecord.from_raw(raw)
        except (ValueError, TypeError, ArithmeticError) as exc:
            self.malformed += 1
            log.warning("skipping malformed pod %s: %s", pod_uid(raw), exc)
            return
        phase = (raw.get("status") or {}).get("phase")
        with self._cond:
            now = self.clock.now()
            old = self._known.get(rec.uid)
            self._known[rec.uid] = raw
            trace = self.traces.get(rec.uid)
            if phase in TERMINAL_PHASES:
                was = self.cache.remove(rec.uid)
                self.queue.delete(rec.uid)
                if trace is not None and trace.state in ("pending", "bound"):
                    trace.state = "completed"
                self._event(q.ASSIGNED_POD_DELETE if was else q.POD_DELETE)
                return
            if rec.node_name:
                before = self.cache.assigned(rec.uid)
                confirmed_before = before is not None and not self.cache.is_assumed(rec.uid)
                self.cache.add_assigned(rec)
                self.queue.delete(rec.uid)
                if trace is not None and trace.state == "pending":
                    trace.state, trace.node = "bound", rec.node_name
                    if trace.bound_at is None:
                        trace.bound_at = now
                self._event(q.ASSIGNED_POD_UPDATE if confirmed_before else q.ASSIGNED_POD_ADD)
                return
            if (raw.get("spec") or {}).get("schedulerName", "default-scheduler") not in self.cfg.scheduler_names:
                return
            if rec.uid in self.queue.pods:
                version = (raw.get("metadata") or {}).get("resourceVersion")
                if old is not None and version and version == (old.get("metadata") or {}).get("resourceVersion"):
                    return  # the same object again: kube-scheduler bypasses such updates (#96071)
                changed = _spec_or_meta_changed(old, raw)
                qp = self.queue.update(rec, now, changed)
                if trace is not None and qp is not None:
                    trace.gated = qp.state == q.GATED
                    trace.nominated = rec.nominated_node_name
                if changed:
                    self._event(q.POD_UPDATE)
                return
            qp = self.queue.add(rec, now)
            if trace is None:
                self.traces[rec.uid] = PodTrace(rec.key, rec.uid, rec.priority, now, gated=qp.state == q.GATED,
                                                requests=dict(rec.requests))
            self._event(q.POD_ADD)

    def remove_pod(self, raw: Mapping[str, Any]) -> None:
        if self._deferring(self.remove_pod, raw):
            return
        uid = pod_uid(raw)
        with self._cond:
            self._known.pop(uid, None)
            was = self.cache.remove(uid)
            self.queue.delete(uid)
            trace = self.traces.get(uid)
            if trace is not None and trace.state in ("pending", "bound"):
                trace.state = "completed" if trace.state == "bound" else "deleted"
            self._event(q.ASSIGNED_POD_DELETE if was is not None and (raw.get("spec") or {}).get("nodeName")
                        else q.POD_DELETE)

    def _deferring(self, sink: Callable[..., None], *args: Any) -> bool:
        """Whether a cluster event is kept for later (:meth:`_deliver_deferred`) rather than
        delivered now: one arriving on the scheduling thread during a cycle - one the cycle
        caused (an in-process extender's write, a victim deleted, a status written) -, as an
        informer delivers a write asynchronously, not inside the call that made it; and, while
        any is kept, one from another thread (a binding cycle's, an informer's) too, behind
        them: an informer delivers each object's events in order, and an older copy of a pod
        delivered after a newer one would bring back what the newer one changed (a bound pod
        pending again, a deleted one running). Otherwise events from other threads arrive at
        once, a cycle running or not."""
        me = threading.get_ident()
        with self._deferral:
            if me == self._draining:
                return False
            if me == self._cycle_thread or self._deferred or self._draining is not None:
                self._deferred.append((sink, args))
                return True
        return False

    def _deliver_deferred(self) -> None:
        """The events kept by :meth:`_deferring`, one at a time in arrival order, after the
        cycle (those other threads add meanwhile included); a malformed object is skipped with
        a warning, as the cluster does."""
        me = threading.get_ident()
        while True:
            with self._deferral:
                if not self._deferred:
                    self._draining = None
                    return
                self._draining = me
                sink, args = self._deferred.popleft()
            try:
                sink(*args)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                log.warning("skipping a malformed object from a scheduling cycle: %s", exc)

    def _event(self, event: str) -> None:
        """A cluster event: bump the generation and move the pods it may help (lock held)."""
        self._changed()
        self.queue.move_all(event, self.clock.now())

    def _changed(self) -> None:
        """The cluster changed (lock held): waiting pods have not been tried against it yet."""
        self.generation += 1
        self._cond.notify_all()

    # ---- workload actions -------------------------------------------------------------------------------

    def at(self, t: float, label: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` (cluster writes) at virtual/clock time ``t``."""
        with self._cond:
            heapq.heappush(self._actions, _Action(t, next(self._action_seq), label, fn))
            self._cond.notify_all()

    def after(self, seconds: float, label: str, fn: Callable[[], None]) -> None:
        self.at(self.clock.now() + seconds, label, fn)

    def pending_actions(self) -> int:
        """Actions scheduled and not yet run (an action running now no longer counts)."""
        with self._cond:
            return len(self._actions)

    def _run_due_actions(self) -> int:
        ran = 0
        while True:
            with self._cond:
                if not self._actions or self._actions[0].at > self.clock.now():
                    return ran
                action = heapq.heappop(self._actions)
                self._last_action_at = max(self._last_action_at, action.at)
            action.fn()
            ran += 1

    # ---- the loop -----------------------------------------------------------------------------------------

    def stop(self) -> None:
        """End :meth:`run` (from any thread): it returns after the scheduling cycle in progress.
        Binding cycles in flight finish on their own threads."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def run(self, progress: Callable[[Scheduler], None] | None = None, progress_every: int = 0,
            progress_seconds: float = 0.0, until_stopped: bool = False) -> RunSummary:
        """Schedule until the run ends (module docstring). ``until_stopped``: never end on
        its own - the cluster may deliver new pods at any time - only when :meth:`stop` is
        called; real time only (a virtual clock would have nothing to wait for)."""
        if until_stopped and self.clock.virtual:
            raise ValueError("run(until_stopped=True) needs a RealClock")
        with _fewer_collections:
            return self._run(progress, progress_every, progress_seconds, until_stopped)

    def _run(self, progress: Callable[[Scheduler], None] | None, progress_every: int, progress_seconds: float,
             until_stopped: bool) -> RunSummary:
        wall0 = time.perf_counter()
        start = self.clock.now()
        last_flush = start
        last_report = wall0
        cycles = 0
        reason = "done"
        binding_wait: tuple[float, float] | None = None  # (wall, virtual) when only binds began running
        while True:
            if self._stopping:
                reason = "stopped"
                break
            if self._run_due_actions():
                binding_wait = None
            with self._cond:
                now = self.clock.now()
                while now - last_flush >= self.cfg.unschedulable_flush_interval:
                    last_flush += self.cfg.unschedulable_flush_interval
                    self.queue.flush_unschedulable(last_flush)
                self._flush_backoff(now)
                qp = self.queue.pop()
                assumed = qp is not None and self.cache.is_assumed(qp.uid)
                if qp is not None and assumed:  # skipPodSchedule (see queue.update)
                    self.queue.skip(qp)
            if qp is not None and assumed:
                self._append_cycle(CycleRecord(qp.record.key, qp.attempts, now, "skipped", message="pod is assumed"))
                continue
            if qp is not None:
                binding_wait = None
                self._cycle_thread = threading.get_ident()
                panic: SchedulerPanic | None = None
                try:
                    self._schedule_one(qp)
                except SchedulerPanic as exc:
                    panic = exc
                finally:
                    self._cycle_thread = None
                    self._deliver_deferred()
                if panic is not None:
                    self._crashed(qp, now, str(panic))
                    reason = f"crashed: panic: {panic}"
                    break
                cycles += 1
                if progress and ((progress_every and cycles % progress_every == 0) or
                                 (progress_seconds and time.perf_counter() - last_report >= progress_seconds)):
                    last_report = time.perf_counter()
                    progress(self)
                continue
            with self._cond:
                if self.queue.has_active():
                    continue
                if self._binding:
                    timeout = 0.05
                    if self.clock.virtual:
                        # Only binding cycles are running, on the wall clock (a Permit wait inside
                        # an extender's bind takes real time): virtual time follows the wall clock
                        # meanwhile, so what falls due during the wait (an arrival, a backoff
                        # expiry) happens while the binds are still in flight, as it would for
                        # kube-scheduler. It jumps to the due time exactly, never in between.
                        wall = time.monotonic()
                        if binding_wait is None:
                            binding_wait = (wall, self.clock.now())
                        wake = self._next_wake(last_flush)
                        if wake is not None and wake <= self._last_action_at + self.cfg.max_virtual_seconds:
                            remaining = wake - binding_wait[1] - (wall - binding_wait[0])
                            if remaining <= 0:
                                self.clock.advance_to(wake)
                                binding_wait = None
                                continue
                            timeout = min(timeout, remaining)
                    self._cond.wait(timeout)
                    continue
                binding_wait = None
                wake = self._next_wake(last_flush)
                if until_stopped:
                    if not self._stopping:
                        self._cond.wait(0.5 if wake is None else max(0.0, min(wake - self.clock.now(), 0.5)))
                    continue
                if wake is None:
                    break
                if wake > self._last_action_at + self.cfg.max_virtual_seconds:
                    reason = f"stopped at the horizon ({self.cfg.max_virtual_seconds:g}s after the last action)"
                    break
                if self.clock.virtual:
                    self.clock.advance_to(wake)
                else:
                    self._cond.wait(max(0.0, min(wake - self.clock.now(), 0.5)))
        return RunSummary(time.perf_counter() - wall0, self.clock.now() - start, cycles, self.binds,
                          self.bind_failures, reason)

    def _flush_backoff(self, now: float) -> None:
        """``flushBackoffQCompleted`` at its last 1-second tick up to ``now`` (lock held): a pod
        whose backoff is over waits in backoffQ until that tick, not a moment less."""
        ticks = math.floor((now - self._backoff_flushed) / BACKOFF_FLUSH_INTERVAL)
        if ticks >= 1:
            self._backoff_flushed += ticks * BACKOFF_FLUSH_INTERVAL
            self.queue.flush_backoff(self._backoff_flushed)

    def _backoff_tick(self, expiry: float) -> float:
        """The first backoffQ flush tick at or after ``expiry`` (lock held)."""
        ticks = math.ceil((expiry - self._backoff_flushed) / BACKOFF_FLUSH_INTERVAL - 1e-9)
        return self._backoff_flushed + max(1, ticks) * BACKOFF_FLUSH_INTERVAL

    def _next_wake(self, last_flush: float) -> float | None:
        """The next time anything can happen (lock held), or None when the run is over: no
        workload action is left and every waiting pod has been tried against the current
        cluster state without an error (retrying cannot change anything). While the run goes
        on, every backoffQ flush that ends a backoff and every unschedulable-pool flush counts,
        settled or not, so retries happen when kube-scheduler would make them."""
        waiting = self.queue.in_state(q.BACKOFF, q.UNSCHEDULABLE)
        unsettled = any(qp.last_was_error or qp.seen_generation < self.generation for qp in waiting)
        if not self._actions and not unsettled and (self.cfg.stop_when_settled or not waiting):
            return None
        times: list[float] = [self._actions[0].at] if self._actions else []
        interval = self.cfg.unschedulable_flush_interval
        for qp in waiting:
            if qp.state == q.BACKOFF:
                times.append(self._backoff_tick(self.queue.backoff_expiry(qp)))
            else:
                due = qp.timestamp + self.cfg.pod_max_in_unschedulable_seconds
                ticks = max(1, int((due - last_flush) // interval) + 1)
                times.append(last_flush + ticks * interval)
        return min(times) if times else None

    # ---- one scheduling cycle ----------------------------------------------------------------------------------

    def _schedule_one(self, qp: q.QueuedPod) -> None:
        pod = qp.record
        now = self.clock.now()
        trace = self.traces.get(pod.uid)
        if trace is not None:
            trace.attempts += 1  # every pop (an update during a cycle starts the entry's count afresh)
        if pod.deleting:
            with self._cond:
                self.queue.delete(pod.uid)
            self._append_cycle(CycleRecord(pod.key, qp.attempts, now, "skipped", message="pod is being deleted"))
            return
        with self._cond:
            snap = self.cache.snapshot()
            qp.seen_generation = self.generation
            nominated = self._nominated_records()
        record = CycleRecord(pod.key, qp.attempts, now, "error")
        if not snap.nodes:
            self._fail_with_error(qp, record, "no nodes available to schedule pods")
            return
        try:
            feasible, diag = self._find_nodes_that_fit(pod, snap, nominated)
        except ExtenderError as exc:
            record.evaluated = len(snap.nodes)
            self._fail_with_error(qp, record, str(exc))
            return
        record.evaluated = diag.evaluated
        record.extender_rejected = len(diag.extender_rejected)
        record.statuses = StatusMessages(diag.statuses)
        if not feasible:
            self._unschedulable(qp, pod, snap, diag, nominated, record)
            return
        record.feasible = list(map(_NAME, feasible))
        if len(feasible) == 1:
            host = feasible[0].name
        else:
            scores, totals = self._prioritize(pod, feasible, record.feasible, diag.node_objects)
            record.scores, record.totals = scores, dict(zip(record.feasible, totals))
            host = self._select_host(record.feasible, totals)
        record.outcome, record.node = "scheduled", host
        self._append_cycle(record)
        with self._cond:
            self.cache.assume(pod, host)
            self.queue.binding(qp)
            self._binding += 1
        self._binders.start(f"bind-{pod.key}", self._binding_cycle, qp, pod, host)

    def _crashed(self, qp: q.QueuedPod, now: float, message: str) -> None:
        """The cycle of ``qp`` made kube-scheduler panic (:class:`SchedulerPanic`): the process
        ends there, before the cycle records any outcome - so the run ends too (a restarted
        scheduler would pop the same pod and meet the same reply). Binding cycles in flight
        finish on their threads (the extender's binds are its own: they land or fail whatever
        becomes of the scheduler), and the run returns once they are settled, so that what it
        reports is what the cluster holds; the pod stays pending, its trace saying why."""
        self._append_cycle(CycleRecord(qp.record.key, qp.attempts, now, "crashed", message=message))
        with self._cond:
            trace = self.traces.get(qp.uid)
            if trace is not None:
                trace.message = f"kube-scheduler crashed: panic: {message}"
            while self._binding:
                self._cond.wait(0.05)

    def _nominated_records(self) -> dict[str, list[PodRecord]]:
        return {node: [x.record for x in pods] for node, pods in self.queue.nominated_nodes().items()}

    # ---- failures ---------------------------------------------------------------------------------------------

    def _fail_with_error(self, qp: q.QueuedPod, record: CycleRecord, message: str) -> None:
        """Status Error (§4.3): backoffQ, nominatedNodeName cleared, reason SchedulerError."""
        record.outcome, record.message = "error", message
        self._append_cycle(record)
        with self._cond:
            qp.last_was_error, qp.last_message = True, message
            self.queue.requeue_after_error(qp, self.clock.now())
            trace = self.traces.get(qp.uid)
            if trace is not None:
                trace.message = message
        self._record_event(qp.record, "Warning", "FailedScheduling", message)
        self._update_status(qp.record, nominated="", reason="SchedulerError", message=message)

    def _unschedulable(self, qp: q.QueuedPod, pod: PodRecord, snap: Snapshot, diag: Diagnosis,
                       nominated: Mapping[str, list[PodRecord]], record: CycleRecord) -> None:
        post_msg, nominate, prec = self._preempt(pod, snap, diag, nominated)
        record.preemption = prec
        message = fit_error_message(len(snap.nodes), diag.statuses, post_msg)
        record.outcome, record.message = "unschedulable", message
        plugins = frozenset(p for p in diag.plugins if p)
        record.plugins = sorted(plugins)
        self._append_cycle(record)
        with self._cond:
            qp.last_was_error, qp.last_message = False, message
            record.queue = self.queue.add_unschedulable(qp, self.clock.now(), plugins)
            trace = self.traces.get(qp.uid)
            if trace is not None:
                trace.message = message
                if nominate is not None:
                    trace.nominated = nominate
        self._record_event(pod, "Warning", "FailedScheduling", message)
        self._update_status(pod, nominated=nominate, reason="Unschedulable", message=message)

    # ---- preemption (PostFilter) -----------------------------------------------------------------------------

    def _preempt(self, pod: PodRecord, snap: Snapshot, diag: Diagnosis,
                 nominated: Mapping[str, list[PodRecord]]) -> tuple[str, str | None, dict[str, Any]]:
        """DefaultPreemption: (PostFilter message, nominatedNodeName to set or None to leave
        unchanged, a record for reports). Victims are deleted here.

        Like ``Evaluator.Preempt``, it works on the preemptor as the informer holds it now (the
        pod lister's copy: an update delivered during the cycle counts, for eligibility, the dry
        run and what the preempt verb is sent), not on the pod the cycle began with; a pod the
        informer no longer has ends preemption with the lister's error."""
        now = self.clock.now()
        prec: dict[str, Any] = {"candidates": {}, "extenders": [], "chosen": "", "victims": []}
        with self._cond:
            latest = self._known.get(pod.uid)
        if latest is None:
            prec["result"] = "error"
            return f'preemption: pod "{pod.name}" not found', None, prec
        if latest is not pod.raw:
            pod = PodRecord.from_raw(latest)  # upsert_pod kept only pods it could read
        if pod.preemption_policy == "Never":
            prec["result"] = "not eligible"
            return "preemption: not eligible due to preemptionPolicy=Never.", None, prec
        if pod.nominated_node_name:
            st = diag.statuses.get(pod.nominated_node_name)
            node = snap.get(pod.nominated_node_name)
            if (st is None or st.code is not Code.UNSCHEDULABLE_AND_UNRESOLVABLE) and node is not None and any(
                    _terminating_by_preemption(p) and p.priority < pod.priority for p in node.pods.values()):
                prec["result"] = "not eligible"
                return "preemption: not eligible due to a terminating pod on the nominated node.", None, prec
        pdbs = self.budgets(snap)
        dry = find_candidates(pod, snap, diag.statuses, lambda p, work, only: self._fits(p, work, nominated, only), pdbs,
                              self.rng, now, absent_are_candidates=self.cfg.absent_nodes_are_candidates,
                              min_pct=self.cfg.min_candidate_nodes_percentage,
                              min_abs=self.cfg.min_candidate_nodes_absolute)
        prec["candidates"] = {c.node: [v.key for v in c.victims] for c in dry.candidates}
        if not dry.candidates:
            if dry.errors:
                prec["result"] = "error"
                return "preemption: " + aggregate(dry.errors), None, prec
            prec["result"] = "no candidates"
            return "preemption: " + fit_error_message(len(snap.nodes), dry.statuses), "", prec
        rounds: list[ExtenderRound] = []
        candidates, error = call_extenders(pod, dry.candidates, self.extenders, snap, rounds)
        prec["extenders"] = [r.__dict__ for r in rounds]
        if candidates is None:
            prec["result"] = "extender error"
            return "preemption: " + error, None, prec
        best: Candidate | None = pick_one_node(candidates, self.rng, now)
        if best is None:
            prec["result"] = "vetoed"
            return "preemption: no candidate node for preemption", None, prec
        prec["result"], prec["chosen"] = "preempted", best.node
        prec["victims"] = [v.key for v in best.victims]
        self._prepare_candidate(pod, best)
        return "", best.node, prec

    def budgets(self, snap: Snapshot) -> list[PDB]:
        """The PodDisruptionBudgets as DefaultPreemption reads them over ``snap``: every covered
        pod expected - on a node in ``snap`` (assumed ones included), or pending, whatever its
        scheduler -, those on a node and not being deleted healthy (when a budget has no
        status)."""
        if not self.pdb_objects:
            return []
        bound = [p for n in snap.nodes.values() for p in n.pods.values()]
        with self._cond:
            raws = [raw for uid, raw in self._known.items()
                    if not (raw.get("spec") or {}).get("nodeName") and not self.cache.is_assumed(uid)
                    and (raw.get("status") or {}).get("phase") not in TERMINAL_PHASES]
        return pdbs_from(self.pdb_objects, bound, [PodRecord.from_raw(raw) for raw in raws])

    def _prepare_candidate(self, pod: PodRecord, best: Candidate) -> None:
        """``prepareCandidate``: delete the victims, clear lower-priority nominations to the node."""
        for victim in best.victims:
            with self._cond:
                trace = self.traces.get(victim.uid)
                if trace is not None:
                    trace.state, trace.preempted_by = "preempted", pod.key
                else:
                    self.traces[victim.uid] = PodTrace(victim.key, victim.uid, victim.priority, self.clock.now(),
                                                       state="preempted", node=best.node, preempted_by=pod.key,
                                                       requests=dict(victim.requests))
            self._record_event(victim, "Normal", "Preempted", f"Preempted by pod {pod.uid} on node {best.node}")
            scheduler = (pod.raw.get("spec") or {}).get("schedulerName") or "default-scheduler"
            try:  # PodDisruptionConditions (on by default from 1.26): why the victim terminates
                self.cluster.update_pod_status(victim.namespace, victim.name, victim.uid, {"conditions": [{
                    "type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER,
                    "message": f"{scheduler}: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": iso(self.clock.now())}]})
            except WriteError as exc:
                log.info("disruption condition of %s not written: %s", victim.key, exc)
            self.cluster.delete_pod(victim.namespace, victim.name)
        with self._cond:
            lower = [x.record for x in self.queue.nominated_to(best.node)
                     if x.priority < pod.priority and x.uid != pod.uid and x.state not in (q.IN_FLIGHT, q.BINDING)]
        for other in lower:
            self._update_status(other, nominated="")

    # ---- binding cycle (a thread per pod, reused: extender.sim.binders) --------------------------------------

    def _binding_cycle(self, qp: q.QueuedPod, pod: PodRecord, host: str) -> None:
        error = ""
        bound_by = "DefaultBinder"
        try:
            handled = False
            for ext in self.extenders:
                if not ext.spec.is_binder or not ext.spec.is_interested(pod.raw):
                    continue
                try:
                    ext.bind(pod.raw, host)
                    bound_by = ext.name
                except ExtenderError as exc:
                    if ext.spec.ignorable and self.cfg.ignorable_bind:
                        log.info("Skipping extender in bind as it returned error %r and has ignorable flag set", exc)
                        continue
                    error = str(exc)
                handled = True
                break
            if not handled:
                self.cluster.bind(pod.namespace, pod.name, pod.uid, host)
            elif not error and self.mirror_extender_binds:
                self.cluster.bind(pod.namespace, pod.name, pod.uid, host)
        except Exception as exc:  # noqa: BLE001 - a WriteError from the cluster, or a transport surprise
            error = str(exc) or type(exc).__name__
        try:
            if error:
                self._binding_failed(qp, pod, host, error)
            else:
                self._binding_done(pod, host, bound_by)
        finally:
            with self._cond:
                self._binding -= 1
                self._cond.notify_all()

    def _binding_done(self, pod: PodRecord, host: str, bound_by: str) -> None:
        with self._cond:
            self.binds += 1
            trace = self.traces.get(pod.uid)
            if trace is not None:
                trace.bound_by = bound_by
                if trace.state == "pending":
                    trace.state, trace.node = "bound", host
                if trace.bound_at is None:
                    trace.bound_at = self.clock.now()
                trace.node = trace.node or host
            hooks = list(self.on_bound)
        self._record_event(pod, "Normal", "Scheduled", f"Successfully assigned {pod.key} to {host}")
        if trace is not None:
            for hook in hooks:
                hook(trace)

    def _binding_failed(self, qp: q.QueuedPod, pod: PodRecord, host: str, error: str) -> None:
        """``handleBindingCycleError`` (§5.3). Only a successful ``ForgetPod`` is an
        AssignedPodDelete that moves pods: it fails for a pod the watch already confirmed (it
        is not assumed any more; its capacity stays taken), and succeeds for an assumed one.
        A pod no longer in the cache here was deleted while assumed: 1.30's cache still holds
        it as assumed and forgets it now, later releases' ForgetPod succeeds for a pod it no
        longer holds - a move either way."""
        with self._cond:
            self.bind_failures += 1
            if self.cache.forget(pod.uid) or self.cache.assigned(pod.uid) is None:
                self._event(q.ASSIGNED_POD_DELETE)
        current = self.cluster.get_pod(pod.namespace, pod.name)
        self._record_event(pod, "Warning", "FailedScheduling", error)
        if current is None or pod_uid(current) != pod.uid:
            return
        if (current.get("spec") or {}).get("nodeName"):
            return  # bound anyway (e.g. the extender bound it but the reply failed): not requeued
        with self._cond:
            qp.last_was_error, qp.last_message = True, error
            self.queue.requeue_after_error(qp, self.clock.now())
            trace = self.traces.get(pod.uid)
            if trace is not None:
                trace.message = error
        self._update_status(pod, nominated="", reason="SchedulerError", message=error)

    # ---- writes to the cluster (never with the lock held) ----------------------------------------------------------

    def _update_status(self, pod: PodRecord, *, nominated: str | None = None, reason: str = "",
                       message: str = "") -> None:
        """Patch status.nominatedNodeName (None: leave it) and the PodScheduled=False condition,
        only when something changes (``updatePod``), judged against the scheduler's view of the
        pod. A refused write (the pod is gone) is logged and dropped, as kube-scheduler does."""
        current = self.cluster.get_pod(pod.namespace, pod.name)
        if current is None or pod_uid(current) != pod.uid or (current.get("spec") or {}).get("nodeName"):
            return
        status = current.get("status") or {}
        patch: dict[str, Any] = {}
        if nominated is not None and (status.get("nominatedNodeName") or "") != nominated:
            patch["nominatedNodeName"] = nominated or None
        if reason:
            old = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            new = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
            if old is None or any(old.get(k) != v for k, v in new.items()):
                new["lastTransitionTime"] = iso(self.clock.now())
                patch["conditions"] = [new]
        if not patch:
            return
        try:
            self.cluster.update_pod_status(pod.namespace, pod.name, pod.uid, patch)
        except WriteError as exc:
            log.info("status update of %s failed (dropped): %s", pod.key, exc)

    def _record_event(self, pod: PodRecord, type_: str, reason: str, message: str) -> None:
        with self._cond:
            self.events.append({"time": self.clock.now(), "pod": pod.key, "type": type_, "reason": reason,
                                "message": message})
        recorder = getattr(self.cluster, "record_event", None)
        if recorder is not None:
            recorder(pod.raw, type_=type_, reason=reason, message=message)

    # ---- views -------------------------------------------------------------------------------------------------------

    def pending(self) -> list[q.QueuedPod]:
        with self._cond:
            return [qp for qp in self.queue.pods.values() if qp.state != q.BINDING]

    def close(self) -> None:
        """Stop the prioritize worker threads and the idle binding threads (the cluster
        subscription stays: a MemoryCluster has no per-sink unsubscribe)."""
        self._executor.shutdown(wait=False)
        self._binders.close()
