"""Prometheus metrics of one extender instance (a registry per app, never the global one).

Names are prefixed ``kube_extender_``. The three cache gauges mirror kube-scheduler's
``scheduler_cache_size_*``; they are read from the cache at scrape time.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from typing import Any, Callable, Iterator, Mapping

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

_VERB_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_PLUGIN_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 1, 5)


class _Memo:
    """``labels(*values)`` answered from a memo of the children already made: one dict lookup per
    call on the request path instead of prometheus_client's lock plus ``str()`` of every value.
    Children are the library's own (same samples, same exposition); ``remove``/``clear`` drop
    the memo with them. Keyword labels take the library's path."""

    def labels(self, *values: Any, **by_name: Any) -> Any:
        memo: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_memo", {})
        child = memo.get(values) if values and not by_name else None
        if child is None:
            child = super().labels(*values, **by_name)  # type: ignore[misc]
            if values and not by_name:
                memo[values] = child
        return child

    def remove(self, *values: Any) -> None:
        self.__dict__.pop("_memo", None)
        super().remove(*values)  # type: ignore[misc]

    def clear(self) -> None:
        self.__dict__.pop("_memo", None)
        super().clear()  # type: ignore[misc]


class Counter(_Memo, prometheus_client.Counter):
    """A Counter whose ``labels`` is memoized (see ``_Memo``)."""


class Histogram(_Memo, prometheus_client.Histogram):
    """A Histogram whose ``labels`` is memoized (see ``_Memo``)."""


class _LeanChild:
    """One label set of a lean family: its bucket counts (a counter has one), sum and creation
    time, changed under the family's lock."""

    __slots__ = ("counts", "sum", "created", "_family")

    def __init__(self, family: _LeanFamily, buckets: int) -> None:
        self.counts = [0] * buckets
        self.sum = 0.0
        self.created = time.time()
        self._family = family

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (>= 0) to a counter."""
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        with self._family.lock:
            self.sum += amount

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose upper bound it does not exceed."""
        i = bisect_left(self._family.bounds, amount)
        with self._family.lock:
            self.counts[i] += 1
            self.sum += amount


class _LeanFamily(Collector):
    """A labelled counter or histogram exposing exactly the samples prometheus_client's own
    would (``_total``/``_created``; ``_bucket``/``_count``/``_sum``/``_created``), for the
    metrics every verb request updates: an update is a lookup and plain arithmetic under one
    lock, against ~2 us of prometheus_client's (a check, two locks and a Python loop over the
    buckets per observation). ``labels`` takes the label values in order."""

    def __init__(self, name: str, documentation: str, labelnames: list[str], kind: str, *,
                 buckets: tuple[float, ...] = (), registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames, self.kind = name, documentation, tuple(labelnames), kind
        self.bounds = [float(b) for b in buckets] + [math.inf] if kind == "histogram" else []
        self.lock = threading.Lock()
        self._children: dict[tuple[str, ...], _LeanChild] = {}
        registry.register(self)

    def labels(self, *values: Any) -> _LeanChild:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values, got {len(values)}")
            key = tuple(str(v) for v in values)
            with self.lock:
                child = self._children.get(key) or _LeanChild(self, max(len(self.bounds), 1))
                self._children[key] = self._children[values] = child
        return child

    def describe(self) -> Iterator[Metric]:
        yield Metric(self.name, self.documentation, self.kind)

    def collect(self) -> Iterator[Metric]:
        family = Metric(self.name, self.documentation, self.kind)
        with self.lock:
            seen = {id(c): (k, c, list(c.counts), c.sum) for k, c in self._children.items()
                    if all(type(v) is str for v in k)}
        for key, child, counts, total in seen.values():
            labels = dict(zip(self.labelnames, key))
            if self.kind == "counter":
                family.add_sample(f"{self.name}_total", labels, total)
            else:
                running = 0
                for bound, n in zip(self.bounds, counts):
                    running += n
                    family.add_sample(f"{self.name}_bucket", {**labels, "le": floatToGoString(bound)}, float(running))
                family.add_sample(f"{self.name}_count", labels, float(running))
                family.add_sample(f"{self.name}_sum", labels, total)
            family.add_sample(f"{self.name}_created", labels, child.created)
        yield family


class _CacheCollector(Collector):
    def __init__(self, sizes: Callable[[], Mapping[str, int]]) -> None:
        self._sizes = sizes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sizes = self._sizes()
        for key, help_text in (("assumed_pods", "Pods assumed on a node while their binding is in flight."),
                               ("pods", "Pods accounted on nodes (bound or assumed)."),
                               ("nodes", "Nodes in the cache."),
                               ("pending_pods", "Unbound pods known to the cache.")):
            yield GaugeMetricFamily(f"kube_extender_cache_size_{key}", help_text, value=sizes.get(key, 0))


QuotaReport = Mapping[str, Mapping[str, Mapping[str, "int | None"]]]


class _QuotaCollector(Collector):
    """``kube_extender_quota_<field>{namespace, resource}`` for every field of the quota report
    (min, max, used, borrowed, lent, pending), in resource units; read at scrape time. A missing
    max is not exported (no ceiling)."""

    FIELDS = (("min", "Guaranteed amount (ElasticQuota spec.min)."),
              ("max", "Ceiling (ElasticQuota spec.max); absent when there is none."),
              ("used", "In use: bound, assumed, reserved or held for admitted and nominated pods."),
              ("borrowed", "Use beyond min."),
              ("lent", "This namespace's share of its unused min that borrowers use."),
              ("pending", "Asked by pods of the namespace that are not placed yet."))

    def __init__(self, report: Callable[[], QuotaReport]) -> None:
        self._report = report

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families, without reading the report (registration asks: no plugin code runs then)."""
        for field, help_text in self.FIELDS:
            yield GaugeMetricFamily(f"kube_extender_quota_{field}", help_text, labels=["namespace", "resource"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The report's figures; none when it raises (logged by the report): every other
        family of /metrics is still served."""
        try:
            report = self._report()
        except Exception:  # noqa: BLE001 - a quota plugin's bug must not take /metrics down
            return
        for field, help_text in self.FIELDS:
            family = GaugeMetricFamily(f"kube_extender_quota_{field}", help_text, labels=["namespace", "resource"])
            for namespace, per in report.items():
                for resource, values in per.items():
                    value = values.get(field)
                    if value is not None:
                        family.add_metric([namespace, resource], value / 1000)
            yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Updated by every verb request: lean families (same exposition, cheaper updates).
        self.requests = _LeanFamily("kube_extender_requests", "Extender verb requests by outcome.",
                                    ["verb", "outcome"], "counter", registry=r)
        self.request_duration = _LeanFamily("kube_extender_request_duration_seconds",
                                            "Time to answer an extender verb, parse to reply.", ["verb"],
                                            "histogram", buckets=_VERB_BUCKETS, registry=r)
        self.plugin_duration = _LeanFamily("kube_extender_plugin_duration_seconds",
                                           "Time spent in one plugin at one extension point during one request "
                                           "(summed over nodes for Filter and Score).",
                                           ["plugin", "extension_point"], "histogram", buckets=_PLUGIN_BUCKETS,
                                           registry=r)
        self.decisions = _LeanFamily("kube_extender_decisions", "Per-node verdicts by status.",
                                     ["verb", "status"], "counter", registry=r)
        self.internal_errors = Counter("kube_extender_internal_errors",
                                       "Internal failures; for prioritize and preempt kube-scheduler drops "
                                       "these silently, so watch this.", ["verb"], registry=r)
        self.nudges = Counter("kube_extender_nudges",
                              "Pods touched so kube-scheduler retries them after an event that may help.",
                              registry=r)
        self.admission_evaluations = Counter("kube_extender_admission_evaluations",
                                             "Gated pods run through PreEnqueue (evaluated) or left as they were "
                                             "because no event their rejecting plugin declared happened (skipped).",
                                             ["result"], registry=r)
        self.orphans = Counter("kube_extender_orphaned_allocations",
                               "Allocation annotations of never-bound pods removed after their TTL.", registry=r)
        self.watch_events = Counter("kube_extender_watch_events", "Watch events applied to the cache.",
                                    ["kind", "type"], registry=r)
        self.reconnects = Counter("kube_extender_watch_reconnects", "Watch streams re-established after an error.",
                                  ["kind"], registry=r)
        self.relists = Counter("kube_extender_relists", "Full relists after a 410 Gone.", ["kind"], registry=r)
        self.skipped = Counter("kube_extender_skipped_objects", "Malformed objects skipped from lists and watches.",
                               ["kind"], registry=r)
        self.permit_waits = Histogram("kube_extender_permit_wait_seconds", "Time pods waited in Permit.",
                                      ["result"], buckets=_VERB_BUCKETS, registry=r)

    def watch_cache(self, sizes: Callable[[], Mapping[str, int]]) -> None:
        self.registry.register(_CacheCollector(sizes))

    def watch_quotas(self, report: Callable[[], QuotaReport]) -> None:
        self.registry.register(_QuotaCollector(report))

    def observe_plugin(self, plugin: str, point: str, seconds: float) -> None:
        self.plugin_duration.labels(plugin, point).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
