"""The Permit waiting room: pods whose Permit said WAIT, held inside their bind request.

A WaitingPod lists the plugins that asked it to wait, each with a deadline. It is released when
every one of them has called ``allow``, denied as soon as one calls ``reject``, and denied when
the earliest deadline passes. ``wait`` blocks the bind request's thread until then.
"""

from __future__ import annotations

import threading
from typing import Iterator

from extender.framework.clock import Clock
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo


class WaitingPod:
    def __init__(self, pod: PodInfo, node_name: str, timeouts: dict[str, float], clock: Clock) -> None:
        self.pod = pod
        self.node_name = node_name
        self.clock = clock
        self.since = clock.monotonic()
        self._deadlines = {name: self.since + t for name, t in timeouts.items()}
        self._pending = set(timeouts)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._status: Status | None = None

    def pending_plugins(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def deadline(self) -> float:
        with self._lock:
            return min(self._deadlines.values()) if self._deadlines else self.since

    def allow(self, plugin: str) -> None:
        with self._lock:
            self._pending.discard(plugin)
            self._deadlines.pop(plugin, None)
            if not self._pending and self._status is None:
                self._status = Status()
                self._done.set()

    def reject(self, plugin: str, message: str) -> None:
        with self._lock:
            if self._status is None:
                self._status = Status(Code.UNSCHEDULABLE, (message,), plugin=plugin)
                self._done.set()

    def wait(self, budget: float) -> Status:
        """Block until allowed, rejected, the earliest plugin deadline, or ``budget`` seconds."""
        remaining = min(self.deadline() - self.clock.monotonic(), budget)
        if remaining > 0:
            self._done.wait(remaining)
        with self._lock:
            if self._status is None:
                waiting_for = ", ".join(sorted(self._pending))
                self._status = Status(Code.UNSCHEDULABLE, (f"timed out waiting in Permit for {waiting_for}",),
                                      plugin=waiting_for)
                self._done.set()
            return self._status

    def as_dict(self) -> dict[str, object]:
        return {"pod": self.pod.key, "uid": self.pod.uid, "node": self.node_name,
                "waitingFor": self.pending_plugins(),
                "waitingSeconds": round(self.clock.monotonic() - self.since, 3)}


class WaitingPods:
    """Thread-safe map UID -> WaitingPod; what ``handle.waiting_pods`` exposes to plugins."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}
        self._lock = threading.Lock()

    def add(self, wp: WaitingPod) -> None:
        with self._lock:
            self._pods[wp.pod.uid] = wp

    def remove(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        with self._lock:
            return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        with self._lock:
            return iter(list(self._pods.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
