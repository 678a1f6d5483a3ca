"""RecentPods: the pods the verbs were asked about, parsed, the latest few thousand by UID.

kube-scheduler sends the whole pod with filter, prioritize and preempt but only its name and UID
with bind: a pod the cache does not hold as pending (not followed, or bound meanwhile) is found
here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from extender.framework.resources import QuantityError
from extender.framework.views import PodInfo
from extender.runtime.outcomes import InvalidRequest


class RecentPods:
    def __init__(self, managed_resources: Iterable[str], capacity: int = 4096) -> None:
        self.managed_resources = frozenset(managed_resources)
        self.capacity = capacity
        self._lock = threading.Lock()
        self._by_uid: OrderedDict[str, PodInfo] = OrderedDict()

    def parse(self, raw: Mapping[str, Any]) -> PodInfo:
        """Parse the request's pod and remember it. Always parsed anew: callers (tests, tools) may
        send different pods under one uid and resourceVersion, and a stale parse would decide
        wrongly. Raises InvalidRequest for a malformed pod."""
        try:
            pod = PodInfo.from_pod(raw, self.managed_resources)
        except (ValueError, QuantityError, TypeError, AttributeError) as exc:
            raise InvalidRequest(f"Pod: {exc}") from exc
        with self._lock:
            self._by_uid[pod.uid] = pod
            self._by_uid.move_to_end(pod.uid)
            while len(self._by_uid) > self.capacity:
                self._by_uid.popitem(last=False)
        return pod

    def get(self, uid: str) -> PodInfo | None:
        with self._lock:
            return self._by_uid.get(uid)
