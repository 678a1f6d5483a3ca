"""Getting pods kube-scheduler would otherwise leave waiting retried: nudges and timed wake-ups.

kube-scheduler retries a pod the extender rejected only after a cluster event (1.30+: any event;
1.29: only events relevant to its own plugins that also rejected the pod, else the 5-minute
flush; spec section 7). Two cases need help, and the Nudger gives it by *touching* the pod - the
annotation ``<prefix>nudged-at`` - an update every version treats as a reason to retry:

* **Timed wake-ups** (always on): a plugin whose rejection ends with time rather than with an
  event (Gang's back-off after a timed-out group) asks ``handle.requeue_after(pod, seconds)``;
  the pod is touched when that time has come, so it is not left until the 5-minute flush.
* **Nudges** (``requeue.nudge: true``, for 1.29): a pod whose last Filter answer from the
  extender rejected every node is touched when an event that one of its rejecting plugins
  declared (``events_to_register`` / ``queueing_hint``) happens after that answer.

Rate limits for both: ``qps`` across all pods (burst of twice that) and at most one touch per pod
per ``minInterval``. A pod that is due but finds no token stays due.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Callable

from extender.framework.handle import WriteError
from extender.framework.views import PodInfo
from extender.runtime.engine import Engine

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


class Nudger:
    def __init__(self, engine: Engine, qps: float, min_interval: float, *, on_events: bool = True) -> None:
        self.engine = engine
        self.min_interval = min_interval
        self.on_events = on_events
        clock = engine.handle.clock
        self.bucket = TokenBucket(qps, max(1.0, 2 * qps), clock.monotonic())
        self.annotation = engine.handle.annotation_prefix + "nudged-at"
        self._seq = engine.cache.changes_since(None)[1]
        self._due: dict[str, PodInfo] = {}
        self._last: dict[str, float] = {}
        self._stop = threading.Event()

    def run_once(self) -> list[str]:
        """Touch the pods that are due; returns their keys."""
        for pod in self.engine.due_wakeups():
            self._due[pod.uid] = pod
        if self.on_events:
            self._wake_on_events()
        touched: list[str] = []
        for uid, pod in list(self._due.items()):
            current = self.engine.cache.pending_pod(pod.namespace, pod.name)
            if current is None or current.uid != uid:  # bound, deleted or re-created meanwhile
                self._forget(uid)
                continue
            now = self.engine.handle.clock.monotonic()
            if now - self._last.get(uid, float("-inf")) < self.min_interval or not self.bucket.take(now):
                continue
            if self._touch(pod):
                self._last[uid] = now
                touched.append(pod.key)
        if touched and self.engine.metrics is not None:
            self.engine.metrics.nudges.inc(len(touched))
        if len(self._last) > 4 * len(self._due) + 1024:  # forget old per-pod intervals
            horizon = self.engine.handle.clock.monotonic() - self.min_interval
            self._last = {uid: t for uid, t in self._last.items() if t > horizon}
        return touched

    def _wake_on_events(self) -> None:
        changes, self._seq, complete = self.engine.cache.changes_since(self._seq)
        if not changes:
            return
        for r in self.engine.rejections():
            if r.pod.uid in self._due:
                continue
            # changes its Filter answer already saw, and its own updates (our nudges), do not count
            later = [c for c in changes if c.seq > r.seq and c.key != r.pod.key]
            if not later:
                continue
            fw = self.engine.framework_for(r.pod)
            if not complete or any(fw.wakes(plugin, r.pod, later) for plugin in r.plugins):
                self._due[r.pod.uid] = r.pod

    def _touch(self, pod: PodInfo) -> bool:
        clock = self.engine.handle.clock
        stamp = datetime.fromtimestamp(clock.now(), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.engine.handle.writer.patch_pod_metadata(pod.namespace, pod.name,
                                                         annotations={self.annotation: stamp}, uid=pod.uid)
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
        self.engine.drop_rejection(uid)

    def run_forever(self, leading: Callable[[], bool], period: float = 0.2) -> None:
        while not self._stop.wait(period):
            if leading():
                try:
                    self.run_once()
                except Exception:  # noqa: BLE001 - the loop must survive anything
                    log.exception("nudge pass failed")

    def stop(self) -> None:
        self._stop.set()
