"""The Permit waiting room: pods in Permit, held inside their bind request.

A pod joins the room *before* its Permit plugins decide (``Framework.run_permit``), so a plugin
that counts the pods in the room (Gang counts the members of a group) sees every pod that has
reached Permit, whatever the interleaving of concurrent binds: a member can never arrive unseen
between another member's count and its registration. An ``allow`` or ``reject`` that comes while
the pod's own plugins are still deciding is kept and applied when they are done (``settle``).

After ``settle`` a WaitingPod lists the plugins that asked it to wait, each with a deadline. It
is released when every one of them has called ``allow``, denied as soon as one calls
``reject``, and denied when the earliest deadline of those still pending passes. ``wait`` blocks the bind request's
thread until then.
"""

from __future__ import annotations

import threading
from typing import Iterator

from extender.framework.clock import Clock
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo


class WaitingPod:
    def __init__(self, pod: PodInfo, node_name: str, clock: Clock) -> None:
        self.pod = pod
        self.node_name = node_name
        self.clock = clock
        self.since = clock.monotonic()
        self._deadlines: dict[str, float] = {}
        self._pending: set[str] | None = None
        """None while the pod's Permit plugins are still deciding."""
        self._early: set[str] = set()
        """Plugins that allowed the pod before its own plugins were done."""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._status: Status | None = None
        self._cutoff = float("inf")
        """When the bind's budget runs out (set by ``wait``)."""

    def pending_plugins(self) -> list[str]:
        with self._lock:
            return sorted(self._pending or ())

    def settle(self, timeouts: dict[str, float]) -> Status | None:
        """The pod's Permit plugins are done; ``timeouts`` names those that asked it to wait. Allows
        that came meanwhile count. Returns the final status if the pod is already decided (allowed
        by every waiting plugin, or rejected), else None: call ``wait``."""
        with self._lock:
            now = self.clock.monotonic()
            self._pending = set(timeouts) - self._early
            self._deadlines = {name: now + t for name, t in timeouts.items() if name in self._pending}
            if not self._pending and self._status is None:
                self._status = Status()
                self._done.set()
            return self._status

    def allow(self, plugin: str) -> None:
        with self._lock:
            if self._pending is None:
                self._early.add(plugin)
                return
            self._pending.discard(plugin)
            self._deadlines.pop(plugin, None)
            if not self._pending and self._status is None:
                self._status = Status()
                self._done.set()

    def reject(self, plugin: str, message: str) -> bool:
        """Reject the pod unless it is decided already. True when it ends rejected (by this call,
        an earlier reject or a timeout); False when it was allowed already - it goes on to bind."""
        with self._lock:
            if self._status is None:
                self._status = Status(Code.UNSCHEDULABLE, (message,), plugin=plugin)
                self._done.set()
            return not self._status.ok

    def wait(self, budget: float) -> Status:
        """Block until allowed, rejected, the earliest deadline of the plugins still pending, or
        ``budget`` seconds (the remaining time is read from the clock once, then waited for in
        real time; when the plugin whose deadline came first allowed the pod meanwhile, as long
        again as the next deadline is later - as kube-scheduler stops a plugin's timer when it
        allows)."""
        with self._lock:
            self._cutoff = self.clock.monotonic() + budget
        deadline = self._timeout_at()
        remaining = deadline - self.clock.monotonic()
        while remaining > 0 and not self._done.wait(remaining):
            later = self._timeout_at()
            remaining, deadline = later - deadline, later
        return self._time_out()

    def expire(self) -> bool:
        """Time the pod out now if its deadline (or its bind's budget) has passed on the clock;
        True if it did. For a fake clock moved on by a test (the test kit's harness): on the real
        one ``wait`` wakes by itself."""
        with self._lock:
            deciding = self._pending is None
        if deciding or self._done.is_set() or self.clock.monotonic() < self._timeout_at():
            return False
        self._time_out()
        return True

    def _timeout_at(self) -> float:
        with self._lock:
            return min(self._cutoff, min(self._deadlines.values()) if self._deadlines else self.since)

    def _time_out(self) -> Status:
        """The final status: the decision if there is one, else a timeout naming the plugins."""
        with self._lock:
            if self._status is None:
                waiting_for = ", ".join(sorted(self._pending or ()))
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
        self._left = 0

    @property
    def left(self) -> int:
        """Grows by one whenever a pod leaves the room (removed, or replaced by a new entry for
        its UID), in the same step: equal values mean every pod seen in the room in between is
        still there."""
        with self._lock:
            return self._left

    def add(self, wp: WaitingPod) -> None:
        with self._lock:
            if wp.pod.uid in self._pods:
                self._left += 1
            self._pods[wp.pod.uid] = wp

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._pods.pop(uid, None) is not None:
                self._left += 1

    def get(self, uid: str) -> WaitingPod | None:
        with self._lock:
            return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        with self._lock:
            return iter(list(self._pods.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
