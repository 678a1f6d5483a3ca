"""EventRecorder: events.k8s.io/v1 Events on pods, aggregated and rate-limited, never blocking.

A pending pod should explain itself in ``kubectl describe``, but filter runs for every
scheduling attempt: identical (object, reason, message) events within ``window`` seconds are
folded into one Event whose ``series.count`` grows (patched at most every ``window``), and each
object gets at most ``burst`` new Events per ``window``. Writes happen on a background thread;
when its queue is full, events are dropped and counted rather than slowing a verb down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping
from urllib.parse import quote

from extender.cluster.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _reference(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ObjectReference of a pod, from its metadata."""
    return {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
            "namespace": str(meta.get("namespace") or "default"), "uid": str(meta.get("uid") or ""),
            "resourceVersion": meta.get("resourceVersion")}


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    first: float
    last_written: float


class EventRecorder:
    def __init__(self, client: KubeClient, *, component: str = "kube-extender", instance: str = "",
                 window: float = 600.0, burst: int = 10, queue_size: int = 1000) -> None:
        self.client = client
        self.component = component
        self.instance = instance or uuid.uuid4().hex[:8]
        self.window = window
        self.burst = burst
        self._queue: queue.Queue[tuple[Mapping[str, Any], str, str, str, float, Mapping[str, Any] | None] | None] = \
            queue.Queue(queue_size)
        """Events to write; None tells the writer thread to end (``close``)."""
        self._closed = False
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._budget: dict[str, list[float]] = {}
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name="event-recorder", daemon=True)
        self._thread.start()

    def record(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
               related: Mapping[str, Any] | None = None) -> None:
        if self._closed:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait((obj, type_, reason, message[:1024], time.time(), related))
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 5.0) -> None:
        """For tests: wait until queued events are written."""
        end = time.monotonic() + timeout
        while not self._queue.empty() and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.05)

    def close(self, timeout: float = 5.0) -> None:
        """End the writer thread: Events recorded before are still written if that takes less than
        ``timeout`` seconds (the thread, a daemon, is left to finish otherwise); later ones are
        dropped. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            obj, type_, reason, message, at, related = item
            try:
                self._write(obj, type_, reason, message, at, related)
            except ApiError as exc:
                log.warning("event not recorded", extra={"reason": reason, "error": str(exc)})
            except Exception:  # noqa: BLE001 - the recorder must survive anything
                log.exception("event recorder failed")

    def _write(self, obj: Mapping[str, Any], type_: str, reason: str, message: str, at: float,
               related: Mapping[str, Any] | None = None) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        uid = str(meta.get("uid") or "")
        key = (uid or f"{namespace}/{meta.get('name')}", reason, message)
        series = self._series.get(key)
        events = f"/apis/events.k8s.io/v1/namespaces/{quote(namespace, safe='')}/events"
        if series is not None and at - series.first < self.window:
            series.count += 1
            if at - series.last_written >= min(60.0, self.window):
                series.last_written = at
                self.client.merge_patch(f"{events}/{series.name}", {
                    "series": {"count": series.count, "lastObservedTime": _micro_time(at)}})
            return
        recent = [t for t in self._budget.get(key[0], []) if at - t < self.window]
        if len(recent) >= self.burst:
            self.dropped += 1
            return
        self._budget[key[0]] = recent + [at]
        name = f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:12]}"
        event = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(at), "type": type_, "reason": reason, "note": message,
            "action": "Scheduling", "reportingController": f"{self.component}.io/{self.component}",
            "reportingInstance": f"{self.component}-{self.instance}",
            "regarding": _reference(meta),
        }
        if related is not None:
            event["related"] = _reference(related.get("metadata") or {})
        self.client.post(events, event)
        self._series[key] = _Series(name, namespace, 1, at, at)
        if len(self._series) > 10000:
            for old in [k for k, s in self._series.items() if at - s.first >= self.window]:
                del self._series[old]
