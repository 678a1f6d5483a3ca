"""Fault injection and request logging for the fake API server.

Contract:
    * Rules match a request by HTTP method (``None``/``"*"`` = any, case-insensitive), a
      regular expression searched in the URL path (no query string), and an optional
      ``predicate(RequestRecord) -> bool`` for anything finer (query, body, watch-or-not).
    * :class:`FailureRule`: the next ``count`` matching requests (``count=None``: all of them
      until removed) are answered with a ``Status`` error of HTTP ``status`` — or, with
      ``disconnect=True``, the connection is closed without any response. Rules are checked
      in the order they were added; the first one with budget left answers the request and
      consumes one unit. A request that a rule failed never reaches the store.
    * :class:`LatencyRule`: matching requests are delayed by ``seconds`` before being handled
      (all matching latency rules add up). ``count`` limits how many requests are delayed.
    * Every request is appended to a bounded log as a :class:`RequestRecord` (method, path,
      parsed query, parsed JSON body or raw bytes, headers) before faults are applied; its
      ``status`` is filled in once answered (``None`` while a watch stream is open,
      ``0`` for an injected disconnect).
    * All operations are thread-safe and may be changed while requests are in flight.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["RequestRecord", "FailureRule", "LatencyRule", "FaultInjector"]


@dataclass
class RequestRecord:
    """One request as received by the fake server."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]
    time: float = field(default_factory=time.time)
    status: int | None = None
    #: which fault answered the request, if any ("fail", "disconnect")
    fault: str | None = None

    @property
    def watch(self) -> bool:
        return (self.query.get("watch") or [""])[0].lower() in ("1", "true", "t") or "/watch/" in self.path

    def param(self, name: str, default: str | None = None) -> str | None:
        vals = self.query.get(name)
        return vals[0] if vals else default

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def _method_matches(want: str | None, have: str) -> bool:
    return want is None or want == "*" or want.upper() == have.upper()


@dataclass(eq=False)
class _Rule:
    method: str | None
    path: re.Pattern[str]
    count: int | None
    predicate: Callable[[RequestRecord], bool] | None
    hits: int = 0
    _owner: "FaultInjector | None" = field(default=None, repr=False)

    def matches(self, rec: RequestRecord) -> bool:
        if not _method_matches(self.method, rec.method):
            return False
        if not self.path.search(rec.path):
            return False
        return self.predicate is None or bool(self.predicate(rec))

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.count <= 0

    def remove(self) -> None:
        """Deactivate this rule."""
        if self._owner is not None:
            self._owner._remove(self)


@dataclass(eq=False)
class FailureRule(_Rule):
    status: int = 500
    reason: str | None = None
    message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    disconnect: bool = False


@dataclass(eq=False)
class LatencyRule(_Rule):
    seconds: float = 0.0


class FaultInjector:
    """Holds the active rules and the request log."""

    def __init__(self, log_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._failures: list[FailureRule] = []
        self._latencies: list[LatencyRule] = []
        self._log: deque[RequestRecord] = deque(maxlen=log_size if log_size > 0 else None)

    # -- rules
    def add_failure(self, rule: FailureRule) -> FailureRule:
        rule._owner = self
        with self._lock:
            self._failures.append(rule)
        return rule

    def add_latency(self, rule: LatencyRule) -> LatencyRule:
        rule._owner = self
        with self._lock:
            self._latencies.append(rule)
        return rule

    def _remove(self, rule: _Rule) -> None:
        with self._lock:
            if rule in self._failures:
                self._failures = [r for r in self._failures if r is not rule]
            if rule in self._latencies:
                self._latencies = [r for r in self._latencies if r is not rule]

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latencies.clear()

    def take_failure(self, rec: RequestRecord) -> FailureRule | None:
        """The failure rule that answers ``rec`` (consuming one unit of its budget), if any."""
        with self._lock:
            for rule in self._failures:
                if rule.exhausted or not rule.matches(rec):
                    continue
                rule.hits += 1
                if rule.count is not None:
                    rule.count -= 1
                if rule.exhausted:
                    self._failures = [r for r in self._failures if r is not rule]
                return rule
        return None

    def delay_for(self, rec: RequestRecord) -> float:
        total = 0.0
        with self._lock:
            for rule in self._latencies:
                if rule.exhausted or not rule.matches(rec):
                    continue
                rule.hits += 1
                if rule.count is not None:
                    rule.count -= 1
                total += rule.seconds
            self._latencies = [r for r in self._latencies if not r.exhausted]
        return total

    def active_failures(self) -> list[FailureRule]:
        with self._lock:
            return list(self._failures)

    # -- log
    def record(self, rec: RequestRecord) -> None:
        with self._lock:
            self._log.append(rec)

    def requests(
        self,
        method: str | None = None,
        path: str | None = None,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> list[RequestRecord]:
        rx = re.compile(path) if path is not None else None
        with self._lock:
            snapshot = list(self._log)
        return [
            r for r in snapshot
            if _method_matches(method, r.method)
            and (rx is None or rx.search(r.path))
            and (predicate is None or predicate(r))
        ]

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()
