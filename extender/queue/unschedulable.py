"""The record of unschedulable pods: the last Filter answer that rejected every node, with the
plugins that rejected (their registered events and queueing hints decide what may help: the
nudger's hints) and the cache's change count it was made from (only later changes can help)."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Mapping

from extender.framework.clock import Clock
from extender.framework.status import Status
from extender.framework.views import PodInfo


def by_plugin(st: Status) -> str:
    """``plugin: message``, or the message alone when no plugin is named."""
    return f"{st.plugin}: {st.message}" if st.plugin else st.message


@dataclass(frozen=True)
class Rejection:
    """The extender's last Filter answer for ``pod`` rejected every node: which plugins rejected
    (``extender`` for nodes it did not know), why (the most common reason), when, and the cache's
    change count before the answer's snapshot (only later changes can help)."""

    pod: PodInfo
    plugins: frozenset[str]
    reason: str
    at: float
    seq: int
    added: int = 0
    """Grows with every ``add`` (which rejections a reader has seen)."""


class UnschedulablePods:
    """The latest rejection of at most ``capacity`` pods (the oldest go first). Thread-safe."""

    def __init__(self, clock: Clock, capacity: int = 4096) -> None:
        self.clock = clock
        self.capacity = capacity
        self._lock = threading.Lock()
        self._by_uid: OrderedDict[str, Rejection] = OrderedDict()
        self._adds = 0

    def add(self, pod: PodInfo, rejected: Mapping[str, Status], seq: int) -> None:
        """Every node rejected ``pod`` (``rejected``: node -> status) in an answer made from the
        cache as of change ``seq``."""
        reasons = Counter(by_plugin(st) for st in rejected.values())
        with self._lock:
            self._adds += 1
            entry = Rejection(pod, frozenset(st.plugin or "extender" for st in rejected.values()),
                              reasons.most_common(1)[0][0], self.clock.monotonic(), seq, self._adds)
            self._by_uid[pod.uid] = entry
            self._by_uid.move_to_end(pod.uid)
            while len(self._by_uid) > self.capacity:
                self._by_uid.popitem(last=False)

    def remove(self, uid: str) -> None:
        """The pod fits somewhere, is bound, or was nudged: no longer unschedulable."""
        with self._lock:
            self._by_uid.pop(uid, None)

    def get(self, uid: str) -> Rejection | None:
        """The pod's latest rejection, if it is unschedulable."""
        with self._lock:
            return self._by_uid.get(uid)

    def list(self) -> list[Rejection]:
        """Pods whose last Filter answer rejected every node (oldest first)."""
        with self._lock:
            return list(self._by_uid.values())
