"""Getting pods kube-scheduler would otherwise leave waiting retried: nudges and timed wake-ups.

kube-scheduler retries a pod the extender rejected only after a cluster event (1.30+: any event;
1.29: only events relevant to its own plugins that also rejected the pod, else the 5-minute
flush). And its informer and the extender's watch do not see a change at the
same moment: kube-scheduler may retry a pod on a deletion the extender has not applied yet, get
it rejected from that stale view, and put it back in its unschedulable pool with no further
event coming - the pod then waits up to 5 minutes while the freed capacity sits idle, on every
version. The Nudger fixes both by *touching* the pod - the annotation ``<prefix>nudged-at`` -
an update every version treats as a reason to retry:

* **Nudges** (``requeue.nudge``, on by default): a pod whose last Filter answer from the
  extender rejected every node, from a view older than a change that one of its rejecting plugins
  declared (``events_to_register`` / ``queueing_hint``), is touched once the extender has applied
  that change - if it would fit now. Pods are considered in queue order and each nudged pod's
  place is counted for the next (``place``: where Filter and Score would put it, over the nodes
  that changed since its rejection), so one freed GPU nudges one pod, not every pod waiting for
  a GPU. A pod that
  kube-scheduler retried after the extender applied the change has a newer rejection (or none):
  it is not nudged.
* **Timed wake-ups** (always on): a plugin whose rejection ends with time rather than with an
  event (Gang's back-off after a timed-out group) asks ``handle.requeue_after(pod, seconds)``;
  the pod is touched when that time has come, so it is not left until the 5-minute flush.

Rate limits for both: ``qps`` across all pods (burst of twice that) and at most one touch per pod
per ``minInterval``. The defaults (20/s, 1 s) are above what a cluster freeing capacity for 20
pods per second needs, so they bound a misbehaving plugin's writes without delaying the pods
that capacity was freed for. A pod that is due but finds no token stays due. Only the leader
touches pods; a replica that is not leading skips the changes of that time (it starts from "now"
when it leads).

A nudge pass costs O(changes + rejections x rejecting plugins) for plugins that registered their
events without a queueing hint: the latest change of each event (not counting the rejected pod's
own) decides. Only a plugin with a hint looks at the changes one by one, and only at those after
the rejection; the fit check looks at the nodes changed since the rejection.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Sequence

from extender.framework.events import CAPACITY_EVENTS, NUDGE_ANNOTATION, Change, ClusterEvent
from extender.framework.handle import ClusterWriter, WriteError
from extender.framework.views import PodInfo
from extender.queue.interfaces import Place, QueueMetrics, QueuePlugins
from extender.queue.queue import SchedulingQueue
from extender.queue.unschedulable import Rejection

log = logging.getLogger(__name__)


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self._tokens, self._at = burst, now

    def take(self, now: float) -> bool:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(slots=True)
class _Latest:
    """The latest change of some kind (``seq``, to ``key``), and the latest one of that kind to
    another key than ``key`` (``other``; 0: none): the latest such change not to a given pod is
    then known in O(1) (``excluding``)."""

    seq: int
    key: str
    other: int = 0

    def note(self, seq: int, key: str) -> None:
        """A change (of this kind) to ``key``, later than all noted so far."""
        if key != self.key:
            self.other = self.seq  # the latest so far, and not to ``key``
            self.key = key
        self.seq = seq

    def excluding(self, key: str) -> int:
        """The sequence number of the latest noted change not to ``key`` (0: none)."""
        return self.seq if self.key != key else self.other


def _of_pod(change: Change) -> str:
    """The key ``change`` is the pod's own change to, for "not to this pod": its key, except for
    a capacity release - that of an earlier pod of the same name (a StatefulSet's pod deleted
    and created again) is exactly what the new one waits for."""
    return "" if change.event is ClusterEvent.ALLOCATION_RELEASED else change.key


class ChangeIndex:
    """One nudge pass's changes (in sequence order, as ``changes_since`` returns them), indexed
    to answer "did a change of these events, not to this pod, happen after seq?" in O(events)."""

    def __init__(self, changes: Sequence[Change]) -> None:
        self.changes = changes
        self.seqs = [c.seq for c in changes]
        self.any: _Latest | None = None
        self.by_event: dict[ClusterEvent, _Latest] = {}
        for c in changes:
            key = _of_pod(c)
            latest = self.by_event.get(c.event)
            if latest is None:
                self.by_event[c.event] = _Latest(c.seq, key)
            else:
                latest.note(c.seq, key)
            if self.any is None:
                self.any = _Latest(c.seq, key)
            else:
                self.any.note(c.seq, key)

    def any_after(self, seq: int, key: str) -> bool:
        """Is some change later than ``seq`` and not to ``key``?"""
        return self.any is not None and self.any.excluding(key) > seq

    def event_after(self, events: frozenset[ClusterEvent], seq: int, key: str) -> bool:
        """Is some change of one of ``events`` later than ``seq`` and not to ``key``?"""
        by_event = self.by_event
        for event in events:
            latest = by_event.get(event)
            if latest is not None and latest.excluding(key) > seq:
                return True
        return False

    def after(self, seq: int, key: str) -> list[Change]:
        """The changes later than ``seq`` and not to ``key``, in order."""
        return [c for c in self.changes[bisect_right(self.seqs, seq):] if _of_pod(c) != key]


class Nudger:
    """Handed what it needs rather than the engine: the queue (its rejections, wake-ups and the
    cache's view), the profiles' QueueSort and hints (``plugins``), ``place`` (where a pod would go
    now: ``Engine.placement``), the writer and the annotation prefix."""

    def __init__(self, queue: SchedulingQueue, plugins: QueuePlugins, place: Place, writer: ClusterWriter,
                 annotation_prefix: str, qps: float, min_interval: float, *, on_events: bool = True,
                 metrics: QueueMetrics | None = None) -> None:
        self.queue = queue
        self.cluster = queue.cluster
        self.clock = queue.clock
        self.plugins = plugins
        self.place = place
        self.writer = writer
        self.metrics = metrics
        self.min_interval = min_interval
        self.on_events = on_events
        self.bucket = TokenBucket(qps, max(1.0, 2 * qps), self.clock.monotonic())
        self.annotation = annotation_prefix + NUDGE_ANNOTATION
        self._seq = self.cluster.changes_since(None)[1]
        self._added = 0
        self._due: dict[str, PodInfo] = {}
        self._woken: dict[str, int] = {}
        """Of the pods due because of changes: the latest change seen when they were made due."""
        self._last: dict[str, float] = {}
        self._stop = threading.Event()

    def run_once(self) -> list[str]:
        """Touch the pods that are due; returns their keys."""
        self.queue.reservations.expire_due()
        for pod in self.queue.wakeups.take_due():
            self._due[pod.uid] = pod
            self._woken.pop(pod.uid, None)  # its time has come: touched whatever it saw since
        if self.on_events:
            self._wake_on_events()
        touched: list[str] = []
        for uid, pod in list(self._due.items()):
            current = self.cluster.pending_pod(pod.namespace, pod.name)
            if current is None or current.uid != uid:  # bound, deleted or re-created meanwhile
                self._forget(uid)
                continue
            woken = self._woken.get(uid)
            if woken is not None:
                latest = self.queue.unschedulable_pods.get(uid)
                if latest is None or latest.seq >= woken:
                    # retried since (kept due by the rate limits meanwhile): it fit, or a newer
                    # rejection already saw what woke it - touching it would say nothing new
                    self._due.pop(uid, None)
                    self._woken.pop(uid, None)
                    continue
            now = self.clock.monotonic()
            if now - self._last.get(uid, float("-inf")) < self.min_interval or not self.bucket.take(now):
                continue
            if self._touch(pod):
                self._last[uid] = now
                touched.append(pod.key)
        if touched and self.metrics is not None:
            self.metrics.nudges.inc(len(touched))
        if len(self._last) > 4 * len(self._due) + 1024:  # forget old per-pod intervals
            horizon = self.clock.monotonic() - self.min_interval
            self._last = {uid: t for uid, t in self._last.items() if t > horizon}
        return touched

    def _wake_on_events(self) -> None:
        """Make due, in queue order, the rejected pods that the changes since the last pass may
        help and that would fit now: a change after the rejection (changes its Filter answer
        already saw, and the pod's own updates - our nudges - do not count) of an event one of its
        rejecting plugins registered and, if the plugin has a queueing hint, that the hint
        accepts. Every such change counts when the change log has a gap. A rejection recorded
        since the last pass is looked at from its own snapshot's change on, even if an earlier
        pass read those changes already (Filter answered from a view older than that pass)."""
        prev, rejections = self._seq, self.queue.unschedulable_pods.list()
        fresh = {r.pod.uid for r in rejections if r.added > self._added}
        self._added = max([self._added, *(r.added for r in rejections)])
        start = min([prev, *(r.seq for r in rejections if r.pod.uid in fresh)])
        changes, self._seq, complete = self.cluster.changes_since(start)
        if not changes:
            return
        index = ChangeIndex(changes)
        taken: dict[str, list[PodInfo]] = {}
        """Where the pods made due in this pass would go: their places are not free for the next."""
        candidates: dict[str, Rejection] = {}
        for r in rejections:
            pod = r.pod
            if pod.uid not in fresh and r.seq < prev:
                r = dataclasses.replace(r, seq=prev)  # the changes up to prev were looked at already
            if not index.any_after(r.seq, pod.key):
                continue  # (a pod due already is looked at again: what wakes it now renews ``_woken``)
            current = self.cluster.pending_pod(pod.namespace, pod.name)
            if current is None or current.uid != pod.uid:  # bound, deleted or re-created meanwhile
                self._forget(pod.uid)
            elif not complete or self._wakes(index, pod, r.plugins, r.seq):
                if pod.uid not in self._due:
                    candidates[pod.uid] = r
                elif pod.uid in self._woken:  # due by a change before: only its mark is new
                    self._woken[pod.uid] = self._seq
        # the pods due already by a change (kept by the rate limits; timed wake-ups are touched
        # whatever) take their places again, in queue order with the new candidates, wherever they
        # fit now; one that fits nowhere any more has nothing left to be nudged for
        due: dict[str, PodInfo] = {}
        for uid, pod in list(self._due.items()):
            if uid in self._woken:
                current = self.cluster.pending_pod(pod.namespace, pod.name)
                if current is None or current.uid != uid:  # bound, deleted or re-created meanwhile
                    self._forget(uid)
                else:
                    due[uid] = pod
        for pod in self.plugins.sort([*due.values(), *(r.pod for r in candidates.values())]):
            if pod.uid in due:
                node = self._room(pod, None, taken)
                if node is None:
                    self._due.pop(pod.uid, None)
                    self._woken.pop(pod.uid, None)
                elif node:
                    taken.setdefault(node, []).append(pod)
                continue
            r = candidates[pod.uid]
            node = self._room(pod, index.after(r.seq, pod.key) if complete else None, taken)
            if node is None:
                continue  # nothing it needs came free: a later change may still help
            if node:
                taken.setdefault(node, []).append(pod)
            self._due[pod.uid] = pod
            self._woken[pod.uid] = self._seq

    def _room(self, pod: PodInfo, later: Sequence[Change] | None, taken: dict[str, list[PodInfo]]) -> str | None:
        """Where ``pod`` would fit now ("" if it asks for no managed resource: nothing to count),
        looking at the nodes the ``later`` changes (None: unknown, so every node) freed or
        changed; None when it fits nowhere."""
        if not pod.requests:
            return ""
        names: set[str] | None = set()
        for change in later or ():
            if change.event in CAPACITY_EVENTS:
                names.add(change.node or change.key)  # type: ignore[union-attr]
            else:  # an event that is not about one node's capacity: look everywhere
                names = None
                break
        if later is None:
            names = None
        return self.place(pod, names, extra=taken)

    def _wakes(self, index: ChangeIndex, pod: PodInfo, plugins: frozenset[str], seq: int) -> bool:
        """Does one of ``plugins`` (which rejected ``pod`` at ``seq``) want ``pod`` looked at
        again, given that some change not to ``pod`` came after ``seq``? The same answer as
        ``QueuePlugins.wakes`` over those changes; only a plugin with a queueing hint is asked
        change by change, and only if one of its events came after ``seq``."""
        later: list[Change] | None = None
        for plugin in plugins:
            rule = self.plugins.wake_rule(pod, plugin)
            if rule.events is None:  # registered nothing: any later change counts
                return True
            if not index.event_after(rule.events, seq, pod.key):
                continue
            if rule.hint is None:
                return True
            if later is None:
                later = index.after(seq, pod.key)
            if self.plugins.wakes(pod, plugin, later):
                return True
        return False

    def _touch(self, pod: PodInfo) -> bool:
        stamp = datetime.fromtimestamp(self.clock.now(), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.writer.patch_pod_metadata(pod.namespace, pod.name, annotations={self.annotation: stamp},
                                           uid=pod.uid)
        except WriteError as exc:
            log.info("nudge failed", extra={"pod": pod.key, "error": str(exc)})
            if exc.conflict:
                self._forget(pod.uid)
            return False
        self._forget(pod.uid)
        log.info("nudged", extra={"pod": pod.key})
        return True

    def _forget(self, uid: str) -> None:
        self._due.pop(uid, None)
        self._woken.pop(uid, None)
        self.queue.schedulable(uid)

    def run_forever(self, leading: Callable[[], bool], period: float = 0.2) -> None:
        """Every ``period`` seconds until ``stop``: a pass (``run_once``) while ``leading()``;
        otherwise the position in the change log moves to "now", so a replica that becomes
        leader later does not go through (up to CHANGE_LOG_SIZE) changes of a time it was not
        leading."""
        while not self._stop.wait(period):
            if leading():
                try:
                    self.run_once()
                except Exception:  # noqa: BLE001 - the loop must survive anything
                    log.exception("nudge pass failed")
            else:
                self._seq = self.cluster.changes_since(None)[1]
                self._added = max([self._added, *(r.added for r in self.queue.unschedulable_pods.list())])

    def stop(self) -> None:
        self._stop.set()
