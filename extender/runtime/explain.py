"""The extender's memory of why a pod is pending: its last verdicts, per node and plugin.

Bounded (least recently recorded pods are forgotten first). Statuses are stored as the immutable
values plugins returned (shared, not copied), and rendered only when someone asks.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping

from extender.framework.status import Status


@dataclass
class Verdict:
    verb: str
    uid: str
    at: float
    feasible: list[str] = field(default_factory=list)
    rejected: Mapping[str, Status] = field(default_factory=dict)
    outcome: str = ""
    error: str = ""

    def as_dict(self, max_nodes: int = 200) -> dict[str, Any]:
        reasons: Counter[str] = Counter()
        for st in self.rejected.values():
            for r in st.reasons or (st.code.name,):
                reasons[r] += 1
        nodes = {}
        for name in sorted(self.rejected)[:max_nodes]:
            nodes[name] = self.rejected[name].as_dict()
        return {
            "verb": self.verb, "uid": self.uid, "at": self.at, "outcome": self.outcome,
            "error": self.error, "feasibleCount": len(self.feasible), "feasible": self.feasible[:max_nodes],
            "rejectedCount": len(self.rejected),
            "summary": dict(reasons.most_common()),
            "rejected": nodes,
        }


class ExplainLog:
    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = capacity
        self._by_pod: OrderedDict[str, dict[str, Verdict]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, pod_key: str, verdict: Verdict) -> None:
        with self._lock:
            entry = self._by_pod.pop(pod_key, None) or {}
            entry[verdict.verb] = verdict
            self._by_pod[pod_key] = entry
            while len(self._by_pod) > self.capacity:
                self._by_pod.popitem(last=False)

    def get(self, pod_key: str) -> dict[str, Verdict] | None:
        with self._lock:
            entry = self._by_pod.get(pod_key)
            return dict(entry) if entry is not None else None
