"""Per-attempt key/value state shared by the plugins of one cycle.

One CycleState lives for one verb call (filter, prioritize, preempt) or one binding cycle (bind);
the extender protocol gives no cycle identity across HTTP requests, so a plugin that needs its
PreFilter result in Score recomputes it in PreScore. Keys are conventionally the plugin name.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence


class CycleState:
    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        self.pod_annotations: dict[str, str | None] = {}
        """Written by PreBind plugins (None removes a key). The engine adds the allocation ledger
        entry, and the Bind plugin carries them on the Binding, which sets them on the pod in the
        same write that binds it. A Binding cannot remove an annotation: removals (rare) are a
        merge patch before the Binding, a second write."""
        self.candidates: Sequence[str] | None = None
        """The node names of a filter request (set before PreFilter): what kube-scheduler found
        feasible itself. None in other cycles (prioritize, preempt, bind)."""
        self.allocation_extra: dict[str, Any] = {}
        """Plugin details (devices picked, ...) recorded in the allocation ledger annotation."""
        self.binding_outcome_unknown = False
        """Set for Unreserve when the Binding may have been stored (its reply lost, the pod
        unreadable): the engine keeps the pod's capacity held on its node - as the allocation
        the Binding carried - until the cluster tells, so a plugin must not hold it again."""

    def clone(self) -> CycleState:
        """A copy for a simulation - preemption asking whether the pod fits a node without some
        pods - in which Filter plugins find what their PreFilter wrote (values shared, a shallow
        copy) and are skipped as their PreFilter asked; what they write there stays there, as
        kube-scheduler clones its cycle state for each node it tries. Added in API 1.2."""
        copy = CycleState()
        with self._lock:
            copy._data = dict(self._data)
        copy.skip_filter, copy.skip_score = set(self.skip_filter), set(self.skip_score)
        copy.candidates = self.candidates
        return copy

    def write(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value

    def read(self, key: str) -> Any:
        """Return the value under ``key``; raises KeyError if no plugin wrote it this cycle."""
        with self._lock:
            return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._data.get(key, default)

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)
