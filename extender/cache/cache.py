"""ClusterCache: nodes, the pods that hold tracked resources, and pods assumed during binding.

Pod life cycle in the cache (the same state machine as kube-scheduler's cache)::

                 +------------------------------------------------+
                 |                        watch: pod bound/updated |
                 |                                                 v
    Initial --assume--> Assumed --finish_binding--> Assumed+Finished --(TTL passes)--> Expired
       |                   |                              |
       |                 forget                    watch confirms: pod bound
       |                   v                              v
       |                Initial                         Added ---watch: deleted/terminal--> Deleted
       +---------------------- watch: pod bound by someone else ------------^

* **Assumed**: the extender accepted a bind; the pod counts on its node *now*, so filters of later
  pods see the capacity as taken while the Binding is still being written.
* **Finished**: the Binding call returned; if the watch does not confirm the pod as bound within
  ``assumed_ttl`` seconds, the assumption expires and the capacity is released (TTL 0: never).
* **Added**: the cluster says the pod is bound; from now on only watch events change it.
* Pending pods (not bound, not assumed) are remembered by namespace/name so bind can find them.
* **Ledger** (``extender.framework.ledger``): an unbound pod carrying an allocation annotation
  (written ahead of the Binding by kube-extender 0.2, which may have crashed before binding)
  counts as assumed on the annotated node, binding finished at ``reservedAt``; it expires like
  any assumption and is then an orphan whose annotation the leader removes (``take_expired``).
  Today's Binding carries the annotation, so a pod is bound with it or has none. A Binding whose
  outcome nobody could read is held much the same way, as the allocation it carried, until the
  pod is seen bound or gone, its Binding is sent again or its pod read, or the TTL passes
  (``keep_unconfirmed``).

PodDisruptionBudgets, PodGroups and ElasticQuotas (``scheduling.x-k8s.io``) are kept beside, by
namespace/name; a PodGroup or ElasticQuota is stored trimmed even when malformed, and read typed
through ``pod_group_spec`` (``extender.framework.pod_group.PodGroupSpec``, None when malformed)
and ``quota_specs`` (``extender.framework.elastic_quota.QuotaSpec``, the valid ones).

Every NodeInfo is immutable; each change stores a new one and bumps the cache generation, and
``snapshot()`` re-points only the changed names (see ``extender.cache.snapshot``). All methods are
thread-safe; ``assume`` checks and assumes atomically.

Beside the state machine, under the same lock: the numbered change log queueing hints and nudges
read (``extender.cache.changes``), the label indexes that find a pod group's members
(``extender.cache.labels``), the pod groups' member counts (``extender.cache.group_counts``,
brought up to date by every change to what is stored for a pod: upserts, deletions, assumes,
forgets and expiries), and the pod change fan-out the queue's nominator follows
(``on_pod_change``).
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from extender.cache.changes import ChangeLog
from extender.cache.group_counts import GroupCounts
from extender.cache.labels import LabelIndex
from extender.cache.pod_groups import StoredObject, trim_pod_group, without_rv
from extender.cache.snapshot import Snapshot
from extender.framework import ledger
from extender.framework.clock import Clock
from extender.framework.disruption import Budget
from extender.framework.elastic_quota import QuotaSpec
from extender.framework.events import NUDGE_ANNOTATION, Change, ClusterEvent
from extender.framework.pod_group import GroupCount, MemberState, PodGroupSpec
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo, pod_key

log = logging.getLogger(__name__)


class AssumeError(Exception):
    """The pod cannot be assumed (already assumed or bound, or the node is gone)."""


SIMULATED_GENERATION = -1
"""The generation of a NodeInfo made up for a check (never cached by plugins: negative)."""

@dataclass(slots=True)
class _PodState:
    info: PodInfo
    assumed: bool = False
    binding_finished: bool = False
    deadline: float = 0.0
    ledger: bool = False
    """Reserved because of an allocation annotation, not by a bind in this process."""
    sent: Mapping[str, str] | None = None
    """For a hold of a Binding of unknown outcome (``keep_unconfirmed``): the annotations that
    Binding carried. Only the pod shown bound or gone, the Binding sent again, a read of the
    pod or the TTL end such a hold."""
    held_at: float = 0.0
    """When such a hold was made (monotonic)."""


class ClusterCache:
    def __init__(self, resources: Iterable[str], clock: Clock, assumed_ttl: float = 30.0,
                 annotation_prefix: str | None = None) -> None:
        self.resources = frozenset(resources)
        self.annotation_prefix = annotation_prefix
        self._expired: list[PodInfo] = []
        self.clock = clock
        self.assumed_ttl = assumed_ttl
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, _PodState] = {}
        self._pending: dict[str, PodInfo] = {}
        self._assumed: dict[str, _PodState] = {}
        self._deadlines: list[tuple[float, str]] = []
        """Heap of (deadline, uid) of the assumptions whose binding finished, so that expiring
        them looks only at those due, not at every pod waiting in Permit. An entry whose pod was
        confirmed, forgotten or given a later deadline meanwhile is dropped when it comes up."""
        self._budgets: dict[str, Budget] = {}
        self._pod_groups: dict[str, StoredObject] = {}
        self._quotas: dict[str, StoredObject] = {}
        self._generation = 0
        self._dirty: set[str] = set()
        self._snapshot = Snapshot()
        self._changes = ChangeLog()
        self._labels = LabelIndex()
        self._groups = GroupCounts()
        self._synced = threading.Event()
        self._sync_listeners: list[Callable[[], None]] = []
        self._pod_listeners: list[Callable[[str, PodInfo | None], None]] = []
        self._outbox: deque[tuple[str, PodInfo | None]] = deque()
        """Pod changes not delivered to ``_pod_listeners`` yet, in the order the lock saw them."""
        self._delivering = threading.Lock()

    # ---- sync state -------------------------------------------------------------------------

    def mark_synced(self) -> None:
        """The initial lists are in; readiness may be reported. Listeners run once."""
        if self._synced.is_set():
            return
        self._synced.set()
        for listener in self._sync_listeners:
            listener()

    def on_synced(self, listener: Callable[[], None]) -> None:
        """Run ``listener`` once the initial lists are in (at once if they already are)."""
        self._sync_listeners.append(listener)
        if self._synced.is_set():
            listener()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    # ---- change fan-out ---------------------------------------------------------------------

    def on_pod_change(self, listener: Callable[[str, PodInfo | None], None]) -> None:
        """Call ``listener(uid, pod)`` after every pod event from the cluster (``upsert_pod``:
        the pod as received; ``remove_pod``: None), outside the cache lock - so a listener may
        call back into the cache - in the order the cache applied the events, one at a time, and
        before the ``upsert_pod``/``remove_pod`` call that applied it returns. Register before
        the source starts: earlier events are not replayed."""
        self._pod_listeners.append(listener)

    def _announce(self, uid: str, pod: PodInfo | None) -> None:
        """Queue a pod change for the listeners (lock held)."""
        if self._pod_listeners:
            self._outbox.append((uid, pod))

    def _deliver(self) -> None:
        """Hand the queued pod changes to the listeners (lock NOT held). Whoever holds
        ``_delivering`` drains the outbox, so events reach listeners in order even when several
        threads apply them; taking it unconditionally means an event queued by this thread has
        been delivered when this returns, whoever drained it."""
        if not self._pod_listeners:
            return
        with self._delivering:
            while self._outbox:
                uid, pod = self._outbox.popleft()
                for listener in self._pod_listeners:
                    try:
                        listener(uid, pod)
                    except Exception:  # noqa: BLE001 - one listener's bug must not stop the watch
                        log.exception("pod change listener failed", extra={"uid": uid})

    # ---- nodes ------------------------------------------------------------------------------

    def _record(self, event: ClusterEvent, key: str, node: str = "") -> None:
        """Note a change (lock held): for ``change_count`` and ``changes_since``."""
        self._changes.record(event, key, node)

    def _store(self, info: NodeInfo) -> None:
        self._nodes[info.name] = info
        self._dirty.add(info.name)

    def _bump(self) -> int:
        self._generation += 1
        return self._generation

    def upsert_node(self, raw: Mapping[str, Any]) -> None:
        """Add or update a Node. Raises ValueError for an object without a name or with a malformed
        quantity (the caller logs, counts and skips it)."""
        name = (raw.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("node metadata.name must be a non-empty string")
        allocatable = NodeInfo.allocatable_of(raw, self.resources)
        with self._lock:
            current = self._nodes.get(name) or NodeInfo(name, None)
            new = current.with_node(raw, allocatable, self._bump())
            if current.node is None:
                self._record(ClusterEvent.NODE_ADD, name)
            elif (current.allocatable, current.labels, current.annotations) != (new.allocatable, new.labels,
                                                                               new.annotations):
                self._record(ClusterEvent.NODE_UPDATE, name)
            self._store(new)

    def remove_node(self, name: str) -> None:
        """Remove a node. Pods still accounted on it are kept on a hidden placeholder, so their
        usage is right again if the node comes back before their deletions arrive."""
        with self._lock:
            current = self._nodes.get(name)
            if current is None:
                return
            self._record(ClusterEvent.NODE_DELETE, name)
            if current.pods:
                self._store(NodeInfo(name, None, current.allocatable, current.requested, current.pods, self._bump()))
            else:
                del self._nodes[name]
                self._bump()
                self._dirty.add(name)

    # ---- pods -------------------------------------------------------------------------------

    def _account(self, info: PodInfo) -> None:
        node = self._nodes.get(info.node_name) or NodeInfo(info.node_name, None)
        self._store(node.with_pod(info, self._bump()))

    def _only_nudged(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
        """``after`` is ``before`` with a new ``NUDGE_ANNOTATION`` and nothing else (the
        resourceVersion and managedFields any write changes aside) - on a pod not gated: the
        touch of a gated pod (a timed wake-up) is what tells admission to look at it again."""
        if self.annotation_prefix is None or (after.get("spec") or {}).get("schedulingGates"):
            return False
        key = self.annotation_prefix + NUDGE_ANNOTATION
        b_meta, a_meta = before.get("metadata") or {}, after.get("metadata") or {}
        b_notes, a_notes = b_meta.get("annotations") or {}, a_meta.get("annotations") or {}
        if b_notes.get(key) == a_notes.get(key):
            return False

        def rest(raw: Mapping[str, Any], meta: Mapping[str, Any], notes: Mapping[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields", "annotations")}
            kept["annotations"] = {k: v for k, v in notes.items() if k != key}
            return {**raw, "metadata": kept}
        return rest(before, b_meta, b_notes) == rest(after, a_meta, a_notes)

    def _release(self, info: PodInfo) -> None:
        """Unaccount a pod whose capacity is now free for others (lock held)."""
        self._unaccount(info)
        if info.requests:
            self._record(ClusterEvent.ALLOCATION_RELEASED, info.key, info.node_name)

    def _moved_off(self, info: PodInfo, node_name: str) -> None:
        """Unaccount ``info`` (assumed or reserved by the ledger) now that the pod counts on
        ``node_name``: released - an event for queueing hints and nudges - if that is another
        node (lock held)."""
        if info.node_name != node_name:
            self._release(info)
        else:
            self._unaccount(info)

    def _unaccount(self, info: PodInfo) -> None:
        node = self._nodes.get(info.node_name)
        if node is None:
            return
        node = node.without_pod(info.uid, self._bump())
        if node.node is None and not node.pods:
            del self._nodes[node.name]
            self._dirty.add(node.name)
        else:
            self._store(node)

    def upsert_pod(self, raw: Mapping[str, Any]) -> PodInfo:
        """Add or update a Pod from the cluster. A bound pod confirms its assumption (or is
        accounted if nobody assumed it); a terminal pod releases its resources; an unbound pod is
        remembered as pending. Raises ValueError on a malformed pod. The label indexes follow:
        entries for label values the pod no longer has go, and a terminal pod leaves them."""
        info = PodInfo.from_pod(raw, self.resources)
        with self._lock:
            before = [p.labels for p in self._stored(info.uid, info.key)]
            displaced = self._pending.get(info.key)  # another pod of that name (re-created)
            self._apply_pod(info)
            self._reindex(info.uid, info.namespace, info.key, [*before, info.labels])
            self._regroup(info.uid, info.key)
            if displaced is not None and displaced.uid != info.uid:
                self._reindex(displaced.uid, displaced.namespace, displaced.key, [displaced.labels])
                self._regroup(displaced.uid, displaced.key)
            self._announce(info.uid, info)
        self._deliver()
        return info

    def _apply_pod(self, info: PodInfo) -> None:
        """``upsert_pod`` without the label indexes (lock held). An update that only touched the
        pod (``NUDGE_ANNOTATION``: the nudger's own write) is no change others wait for."""
        state = self._pods.get(info.uid)
        pending = self._pending.get(info.key)
        before = state.info if state is not None else (pending if pending is not None and pending.uid == info.uid
                                                      else None)
        if before is None or not self._only_nudged(before.raw, info.raw):
            self._record(ClusterEvent.POD_UPDATE if before is not None else ClusterEvent.POD_ADD, info.key,
                         info.node_name)
        if info.terminal:
            if (pending := self._pending.get(info.key)) is not None and pending.uid == info.uid:
                del self._pending[info.key]
            if state is not None:
                del self._pods[info.uid]
                self._assumed.pop(info.uid, None)
                self._release(state.info)
            return
        if not info.node_name:
            self._pending[info.key] = info
            if state is None or state.ledger:
                self._follow_ledger(info, state)
            return
        if self._pending.get(info.key) is not None and self._pending[info.key].uid == info.uid:
            del self._pending[info.key]
        if state is not None:
            if state.info.node_name != info.node_name:
                log.warning("pod assumed on one node was bound to another",
                            extra={"pod": info.key, "assumed": state.info.node_name, "bound": info.node_name})
            self._moved_off(state.info, info.node_name)
            self._assumed.pop(info.uid, None)
        self._pods[info.uid] = _PodState(info)
        self._account(info)

    def _follow_ledger(self, info: PodInfo, state: _PodState | None) -> None:
        """Mirror an unbound pod's allocation annotation as a reservation (lock held). An
        unconfirmed hold stays: an unbound version of the pod may be older than its Binding."""
        if state is not None and state.sent is not None:
            return
        alloc = ledger.of_pod(info.annotations, self.annotation_prefix) if self.annotation_prefix else None
        if state is not None:
            if alloc is not None and alloc.node == state.info.node_name:  # the same hold, of the pod
                state.info = replace(info, node_name=alloc.node)           # as it is now (labels,
                self._account(state.info)                                  # requests)
                return
            del self._pods[info.uid]
            self._assumed.pop(info.uid, None)
            self._release(state.info)
        if alloc is None:
            return
        remaining = alloc.reserved_at + self.assumed_ttl - self.clock.now() if self.assumed_ttl > 0 else float("inf")
        held = PodInfo(info.uid, info.namespace, info.name, info.priority, info.preemption_policy,
                       info.creation_timestamp, info.start_time, alloc.node, info.nominated_node_name, info.phase,
                       info.scheduler_name, info.deleting, info.resource_version, info.requests, info.raw)
        self._hold(_PodState(held, assumed=True, ledger=True), self.clock.monotonic() + remaining)

    def remove_pod(self, raw: Mapping[str, Any]) -> None:
        """The pod was deleted: release whatever it held and forget it, label index entries
        included."""
        meta = raw.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        namespace = str(meta.get("namespace") or "default")
        key = pod_key(namespace, str(meta.get("name") or ""))
        labels = meta.get("labels")
        with self._lock:
            self._record(ClusterEvent.POD_DELETE, key)
            gone: list[PodInfo] = []
            pending = self._pending.get(key)
            if pending is not None and (not uid or pending.uid == uid):
                del self._pending[key]
                gone.append(pending)
            state = self._pods.pop(uid, None)
            self._assumed.pop(uid, None)
            if state is not None:
                self._release(state.info)
                gone.append(state.info)
            for u in {uid, *(p.uid for p in gone)} - {""}:
                self._regroup(u, key)
                if self._labels:
                    seen = [p.labels for p in gone if p.uid == u]
                    if isinstance(labels, Mapping):  # the deleted object's own labels
                        seen.append(labels)
                    self._reindex(u, namespace, key, seen)
            self._announce(uid, None)
        self._deliver()

    def assume(self, pod: PodInfo, node_name: str,
               check: Callable[[NodeInfo], Status] | None = None) -> Status:
        """Count ``pod`` on ``node_name`` now. ``check`` runs on the node's current NodeInfo under
        the cache lock first; if it does not succeed nothing is assumed and its status is returned.
        A reservation held only by the ledger (an allocation annotation of an unbound pod) is
        taken over in the same step - and only then: when the node is unknown or the check fails,
        the reservation stays where it was (a previous leader's Binding may still need it). The
        check of the ledger's own node sees that node without the pod's reservation, so a pod
        re-bound where its ledger says is not counted twice. Raises AssumeError if the pod is
        already assumed by this process or bound, the node is unknown, or the pod's Binding's
        outcome is unknown (``keep_unconfirmed``: that Binding is sent again instead)."""
        with self._lock:
            state = self._pods.get(pod.uid)
            if state is not None and (not state.ledger or state.sent is not None):
                raise AssumeError(f"pod {pod.key} is already assumed or bound")
            node = self._nodes.get(node_name)
            if node is None or node.node is None:
                raise AssumeError(f"node {node_name} is not in the extender cache")
            if check is not None:
                own = state is not None and state.info.node_name == node_name
                status = check(node.without_pod(pod.uid, SIMULATED_GENERATION) if own else node)
                if not status.ok:
                    return status
            if state is not None:
                del self._pods[pod.uid]
                self._assumed.pop(pod.uid, None)
                self._moved_off(state.info, node_name)
            info = pod.bound_to(node_name)
            self._labels.add(info)
            self._pods[pod.uid] = self._assumed[pod.uid] = _PodState(info, assumed=True)
            self._account(info)
            self._regroup(pod.uid, pod.key)
            return Status()

    def finish_binding(self, uid: str) -> None:
        """The Binding was written: start the confirmation TTL. No-op if the watch already
        confirmed the pod or it is unknown."""
        with self._lock:
            state = self._pods.get(uid)
            if state is not None and state.assumed:
                self._finish(state, self.clock.monotonic() + self.assumed_ttl)

    def _finish(self, state: _PodState, deadline: float) -> None:
        """``state``'s Binding is done: it expires at ``deadline`` unless confirmed (lock held)."""
        state.binding_finished, state.deadline = True, deadline
        if self.assumed_ttl > 0:
            heapq.heappush(self._deadlines, (deadline, state.info.uid))

    def _hold(self, state: _PodState, deadline: float) -> None:
        """Count ``state`` (a hold: assumed, its Binding done) on its node until ``deadline``
        (lock held)."""
        uid = state.info.uid
        self._pods[uid] = self._assumed[uid] = state
        self._finish(state, deadline)
        self._account(state.info)

    def forget(self, uid: str) -> bool:
        """Drop an assumption (the binding cycle failed) or a hold of a Binding of unknown outcome
        (it was not stored). A reservation the assumption took over from the ledger (the pod still
        carries the allocation annotation: a previous leader's Binding may still land) holds
        again, as before the bind. Returns False if the pod was not assumed (never assumed, or
        already confirmed by the cluster: then the cluster is right)."""
        with self._lock:
            state = self._assumed.pop(uid, None)
            if state is None:
                return False
            del self._pods[uid]
            self._release(state.info)
            pending = self._pending.get(state.info.key)
            if state.sent is None and pending is not None and pending.uid == uid:
                self._follow_ledger(pending, None)  # a previous leader's allocation it took over holds again
            self._reindex(uid, state.info.namespace, state.info.key, [state.info.labels])  # updated meanwhile
            self._regroup(uid, state.info.key)
            return True

    def keep_unconfirmed(self, uid: str, annotations: Mapping[str, str]) -> bool:
        """End the assumption of pod ``uid`` whose Binding, carrying ``annotations``, may or may
        not have been stored (its reply was lost and the pod could not be read back). When the
        annotations hold its allocation (``extender.framework.ledger``) for the assumed node, the
        capacity stays held there - as the allocation the Binding carried, annotations included
        (DeviceShare's devices) - until what settles the outcome: the watch showing the pod bound
        (counted there) or gone, the Binding sent again (``unconfirmed``, ``confirm_written``), a
        read of the pod (``forget`` when unbound), or ``assumed_ttl`` from now. An unbound
        version of the pod from the watch does not end it (it may be older than the Binding);
        the pod cannot be assumed meanwhile. Returns whether the capacity stays held; False
        (released, as ``forget``) when the annotations hold no such allocation, False when the
        pod is not assumed."""
        with self._lock:
            state = self._assumed.get(uid)
            if state is None:
                return False
            info = state.info
            alloc = ledger.of_pod(annotations, self.annotation_prefix) if self.annotation_prefix else None
            if alloc is None or alloc.node != info.node_name:
                self.forget(uid)
                return False
            meta = info.raw.get("metadata") or {}
            raw = {**info.raw, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **annotations}}}
            self._unaccount(info)
            now = self.clock.monotonic()
            self._hold(_PodState(replace(info, raw=raw), assumed=True, ledger=True, sent=dict(annotations),
                                 held_at=now), now + self.assumed_ttl if self.assumed_ttl > 0 else float("inf"))
            self._regroup(uid, info.key)
            return True

    def unconfirmed(self, uid: str) -> tuple[PodInfo, Mapping[str, str]] | None:
        """The hold of pod ``uid``'s Binding of unknown outcome (the pod as held, on its node; the
        annotations that Binding carried), or None."""
        with self._lock:
            state = self._assumed.get(uid)
            return (state.info, state.sent) if state is not None and state.sent is not None else None

    def unconfirmed_holds(self, older_than: float = 0.0) -> list[tuple[PodInfo, Mapping[str, str]]]:
        """The holds of Bindings of unknown outcome (as ``unconfirmed``) made at least
        ``older_than`` seconds ago."""
        before = self.clock.monotonic() - older_than
        with self._lock:
            return [(s.info, s.sent) for s in self._assumed.values() if s.sent is not None and s.held_at <= before]

    def unconfirmed_age(self, uid: str) -> float:
        """Seconds since the hold of pod ``uid``'s Binding of unknown outcome was made or renewed
        (0 when there is none)."""
        with self._lock:
            state = self._assumed.get(uid)
            return self.clock.monotonic() - state.held_at if state is not None and state.sent is not None else 0.0

    def renew_unconfirmed(self, uid: str) -> None:
        """The held Binding was sent again, with an unknown outcome again: the hold's age (what
        ``unconfirmed_holds`` compares) and its TTL start over - that Binding too may still be
        stored, as late as a first one."""
        with self._lock:
            state = self._assumed.get(uid)
            if state is not None and state.sent is not None:
                state.held_at = self.clock.monotonic()
                self._finish(state, state.held_at + self.assumed_ttl if self.assumed_ttl > 0 else state.deadline)

    def pause_unconfirmed(self, uid: str) -> bool:
        """A Binding of the held pod is being sent again, or the pod read: the hold does not
        expire meanwhile (as an assumption does not while its Binding is under way) - until
        ``renew_unconfirmed``, ``confirm_written``, ``forget`` or ``resume_unconfirmed``. False
        when there is no such hold."""
        with self._lock:
            state = self._assumed.get(uid)
            if state is None or state.sent is None:
                return False
            state.binding_finished = False
            return True

    def resume_unconfirmed(self, uid: str) -> None:
        """``pause_unconfirmed`` ended with nothing learnt: the hold expires at its deadline again
        (at once if that has passed)."""
        with self._lock:
            state = self._assumed.get(uid)
            if state is not None and state.sent is not None and not state.binding_finished:
                self._finish(state, state.deadline)

    def confirm_written(self, uid: str) -> bool:
        """The held pod's Binding is known stored now (sent again, or read): the hold becomes an
        ordinary assumption whose Binding finished, confirmed by the watch or expired by the
        TTL from now. False when there is no such hold."""
        with self._lock:
            state = self._assumed.get(uid)
            if state is None or state.sent is None:
                return False
            state.sent, state.ledger = None, False
            self._finish(state, self.clock.monotonic() + self.assumed_ttl)
            return True

    def cleanup_expired(self) -> list[PodInfo]:
        """Expire assumed pods whose binding finished but was never confirmed within the TTL."""
        if self.assumed_ttl <= 0:
            return []
        now = self.clock.monotonic()
        expired: list[PodInfo] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, uid = heapq.heappop(self._deadlines)
                state = self._assumed.get(uid)
                if state is None or not state.binding_finished or state.deadline > now:
                    continue  # confirmed, forgotten, or due later (its own entry comes then)
                del self._assumed[uid]
                del self._pods[uid]
                self._release(state.info)
                self._reindex(uid, state.info.namespace, state.info.key, [state.info.labels])
                self._regroup(uid, state.info.key)
                expired.append(state.info)
            self._expired.extend(expired)
            if len(self._expired) > 10_000:  # nobody drains them on a follower: keep the newest
                del self._expired[:-10_000]
        for info in expired:
            log.warning("assumed pod expired: binding never confirmed by the cluster",
                        extra={"pod": info.key, "node": info.node_name})
        return expired

    def upsert_pdb(self, raw: Mapping[str, Any]) -> None:
        budget = Budget.from_object(raw)
        with self._lock:
            self._record(ClusterEvent.DISRUPTION_BUDGET_CHANGE, f"{budget.namespace}/{budget.name}")
            self._budgets[f"{budget.namespace}/{budget.name}"] = budget

    def remove_pdb(self, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        with self._lock:
            self._record(ClusterEvent.DISRUPTION_BUDGET_CHANGE, f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
            self._budgets.pop(f"{meta.get('namespace') or 'default'}/{meta.get('name')}", None)

    def budgets(self) -> list[Budget]:
        with self._lock:
            return list(self._budgets.values())

    # ---- pod groups (scheduling.x-k8s.io PodGroup) ------------------------------------------

    def upsert_pod_group(self, raw: Mapping[str, Any]) -> None:
        """Add or update a PodGroup, stored trimmed (``trim_pod_group``) even when malformed; a
        malformed one is logged once (when it arrives or its spec changes) and reads as None from
        ``pod_group_spec``. Raises ValueError for an object without a name (nothing to key it by).
        Only a change of what is stored other than the resourceVersion (a status update) counts
        as a change for ``change_count``."""
        self._keep(self._pod_groups, raw, "PodGroup", PodGroupSpec.parse, ClusterEvent.POD_GROUP_CHANGE, "pod_group")

    def remove_pod_group(self, raw: Mapping[str, Any]) -> None:
        """The PodGroup was deleted. A deletion naming another UID than the stored one (an older
        incarnation) is ignored."""
        self._drop(self._pod_groups, raw, ClusterEvent.POD_GROUP_CHANGE)

    def _keep(self, store: dict[str, StoredObject], raw: Mapping[str, Any], kind: str,
              parse: Callable[[Mapping[str, Any]], tuple[str | None, Any]], event: ClusterEvent, field: str) -> None:
        """Store a custom object of ``kind`` (see ``upsert_pod_group``); a malformed one is logged
        with its key under ``field``."""
        name = (raw.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind} metadata.name must be a non-empty string")
        trimmed = trim_pod_group(raw)
        problem, spec = parse(trimmed)
        key = pod_key(trimmed["metadata"]["namespace"], name)
        with self._lock:
            previous = store.get(key)
            store[key] = StoredObject(trimmed, spec)
            if previous is None or without_rv(previous.raw) != without_rv(trimmed):
                self._record(event, key)
                if problem is not None:
                    log.warning("malformed object: plugins will ignore it",
                                extra={"kind": kind, field: key, "error": problem})

    def _drop(self, store: dict[str, StoredObject], raw: Mapping[str, Any], event: ClusterEvent) -> None:
        meta = raw.get("metadata") or {}
        key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        uid = meta.get("uid")
        with self._lock:
            current = store.get(key)
            if current is None:
                return
            stored_uid = current.raw["metadata"].get("uid")
            if uid and stored_uid and uid != stored_uid:
                return
            del store[key]
            self._record(event, key)

    def pod_group(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The stored PodGroup (trimmed raw dict: metadata name/namespace/uid/resourceVersion/
        creationTimestamp and the spec as received). Read-only: never mutate it."""
        with self._lock:
            entry = self._pod_groups.get(pod_key(namespace, name))
            return entry.raw if entry is not None else None

    def pod_group_spec(self, namespace: str, name: str) -> PodGroupSpec | None:
        """The PodGroup's typed spec; None when there is no such PodGroup or it is malformed."""
        with self._lock:
            entry = self._pod_groups.get(pod_key(namespace, name))
            return entry.spec if entry is not None else None

    def pod_groups(self, namespace: str | None = None) -> list[Mapping[str, Any]]:
        """Every stored PodGroup (of ``namespace`` if given), malformed ones included."""
        with self._lock:
            return [e.raw for e in self._pod_groups.values()
                    if namespace is None or e.raw["metadata"]["namespace"] == namespace]

    # ---- elastic quotas (scheduling.x-k8s.io ElasticQuota) ------------------------------------

    def upsert_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        """Add or update an ElasticQuota, as ``upsert_pod_group`` does a PodGroup (a malformed one
        is left out of ``quota_specs``)."""
        self._keep(self._quotas, raw, "ElasticQuota", QuotaSpec.parse, ClusterEvent.QUOTA_CHANGE, "elastic_quota")

    def remove_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        """The ElasticQuota was deleted (a deletion naming another UID than the stored one is
        ignored)."""
        self._drop(self._quotas, raw, ClusterEvent.QUOTA_CHANGE)

    def quota_specs(self) -> list[QuotaSpec]:
        """The valid ElasticQuotas, ordered by namespace then name."""
        with self._lock:
            return [e.spec for _, e in sorted(self._quotas.items()) if e.spec is not None]

    def accounted_pods(self) -> list[PodInfo]:
        """Every pod accounted on a node (bound or assumed)."""
        with self._lock:
            return [s.info for s in self._pods.values()]

    def change_count(self) -> int:
        """Grows with every node, pod (pending pods included), PDB or PodGroup event: "did anything
        change?"."""
        with self._lock:
            return self._changes.count

    def note_released(self, nodes: Iterable[str], key: str = "") -> None:
        """Capacity held outside the cache (a reservation) came free on ``nodes``: recorded as
        ALLOCATION_RELEASED changes, so queueing hints and nudges see it like a pod's release."""
        with self._lock:
            for node in sorted(nodes):
                self._record(ClusterEvent.ALLOCATION_RELEASED, key, node)

    def changes_since(self, seq: int | None) -> tuple[list[Change], int, bool]:
        """(changes after ``seq``, the latest sequence number, complete). ``complete`` is False
        when the log no longer reaches back to ``seq`` (more than ``CHANGE_LOG_SIZE`` changes since):
        the caller must then assume anything changed. ``seq=None``: no changes, just the latest."""
        with self._lock:
            return self._changes.since(seq)

    def take_expired(self) -> list[PodInfo]:
        """Assumptions that expired since the last call (for orphan garbage collection)."""
        with self._lock:
            out, self._expired = self._expired, []
            return out

    # ---- reads ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current consistent view; O(1) when nothing changed since the last call."""
        with self._lock:
            if self._dirty:
                changed: dict[str, NodeInfo | None] = {}
                for name in self._dirty:
                    info = self._nodes.get(name)
                    changed[name] = info if info is not None and info.node is not None else None
                self._dirty.clear()
                self._snapshot = self._snapshot.updated(changed, self._generation)
            return self._snapshot

    def pod(self, uid: str) -> PodInfo | None:
        """A pod accounted on a node (bound or assumed), by UID."""
        with self._lock:
            state = self._pods.get(uid)
            return state.info if state is not None else None

    def is_assumed(self, uid: str) -> bool:
        with self._lock:
            state = self._pods.get(uid)
            return state is not None and state.assumed

    def is_ledger_reservation(self, uid: str) -> bool:
        """Held only because of an allocation annotation (no bind of this process is behind it),
        or for a Binding of unknown outcome (``keep_unconfirmed``)."""
        with self._lock:
            state = self._pods.get(uid)
            return state is not None and state.ledger

    def own_hold(self, uid: str) -> tuple[PodInfo, bool] | None:
        """The pod as a ledger reservation or an unconfirmed hold counts it (no rival of the pod
        itself), and whether it is an unconfirmed hold (the pod may be bound there: no other node
        will do); None when it is neither."""
        with self._lock:
            state = self._pods.get(uid)
            return (state.info, state.sent is not None) if state is not None and state.ledger else None

    def pending_pod(self, namespace: str, name: str) -> PodInfo | None:
        with self._lock:
            return self._pending.get(pod_key(namespace, name))

    def _stored(self, uid: str, key: str) -> list[PodInfo]:
        """The PodInfos stored for pod ``uid`` named ``key``: accounted and/or pending (lock held)."""
        out = []
        state = self._pods.get(uid)
        if state is not None:
            out.append(state.info)
        pending = self._pending.get(key)
        if pending is not None and pending.uid == uid:
            out.append(pending)
        return out

    def _reindex(self, uid: str, namespace: str, key: str, before: Iterable[Mapping[str, Any]]) -> None:
        """Make the label indexes agree with pod ``uid`` (``key``) as it is stored now: the one
        ``pods_labelled`` would find it by (its accounted PodInfo, else its pending one) - lock
        held; see ``LabelIndex.reindex``."""
        if self._labels:
            self._labels.reindex(uid, namespace, key, self._current(uid, key), before)

    def _current(self, uid: str, key: str) -> PodInfo | None:
        """What is stored for pod ``uid`` (``key``): its accounted PodInfo, else its pending one
        (lock held)."""
        state = self._pods.get(uid)
        if state is not None:
            return state.info
        pending = self._pending.get(key)
        return pending if pending is not None and pending.uid == uid else None

    def _regroup(self, uid: str, key: str) -> None:
        """Bring the pod groups' counts up to date with what is stored for pod ``uid`` now (lock
        held)."""
        self._groups.update(uid, self._current(uid, key))

    def group_count(self, namespace: str, name: str) -> GroupCount:
        """The counts of pod group ``namespace/name``'s members - the pods ``pods_labelled``
        finds by its label -: O(1), kept current by every change."""
        with self._lock:
            return self._groups.count(namespace, name)

    def group_member(self, namespace: str, name: str, uid: str) -> MemberState | None:
        """Pod ``uid`` as a member of that group (None when it is not one)."""
        with self._lock:
            return self._groups.member(namespace, name, uid)

    def pods_labelled(self, namespace: str, key: str, value: str) -> list[PodInfo]:
        """Pods (pending, assumed or bound) of ``namespace`` whose label ``key`` is ``value``.
        The first call for a ``key`` builds an index of it (one scan); later calls cost what they
        return, so a pod group's members are found without scanning the cluster."""
        def stored(uid: str, pkey: str) -> PodInfo | None:
            state = self._pods.get(uid)
            return state.info if state is not None else self._pending.get(pkey)

        with self._lock:
            return self._labels.find(namespace, key, value, stored,
                                     lambda: [*(st.info for st in self._pods.values()), *self._pending.values()])

    def pending_pods(self) -> list[PodInfo]:
        with self._lock:
            return list(self._pending.values())

    def sizes(self) -> dict[str, int]:
        """Counts for the cache metrics: nodes, pods (accounted on nodes), assumed pods."""
        with self._lock:
            nodes = sum(1 for n in self._nodes.values() if n.node is not None)
            return {"nodes": nodes, "pods": len(self._pods), "assumed_pods": len(self._assumed),
                    "pending_pods": len(self._pending)}
