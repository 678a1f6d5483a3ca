"""Timed wake-ups: pods to retry when a back-off ends, which no cluster event announces.

A plugin whose rejection ends with time (Gang after a group timed out) asks for it through the
handle (``requeue_after``); the nudger touches the pod when it is due, so kube-scheduler retries
it instead of leaving it until its 5-minute flush.
"""

from __future__ import annotations

import threading

from extender.framework.clock import Clock
from extender.framework.views import PodInfo


class Wakeups:
    """At most ``capacity`` pending wake-ups, one per pod (the latest request wins; the oldest
    go first when full). Thread-safe."""

    def __init__(self, clock: Clock, capacity: int = 4096) -> None:
        self.clock = clock
        self.capacity = capacity
        self._lock = threading.Lock()
        self._due: dict[str, tuple[PodInfo, float]] = {}

    def requeue_after(self, pod: PodInfo, seconds: float) -> None:
        """Have ``pod`` touched after ``seconds`` so kube-scheduler retries it."""
        due = self.clock.monotonic() + max(0.0, seconds)
        with self._lock:
            self._due[pod.uid] = (pod, due)
            while len(self._due) > self.capacity:
                del self._due[next(iter(self._due))]

    def pending(self) -> int:
        with self._lock:
            return len(self._due)

    def take_due(self) -> list[PodInfo]:
        """The pods whose requested retry time has come (each returned once)."""
        now = self.clock.monotonic()
        with self._lock:
            due = [uid for uid, (_, at) in self._due.items() if at <= now]
            return [self._due.pop(uid)[0] for uid in due]
