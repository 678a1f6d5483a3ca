"""Fault injection and request logging for the fake API server.

Contract:
    * Rules match a request by HTTP method (``None``/``"*"`` = any, case-insensitive), a
      regular expression searched in the URL path (no query string), and an optional
      ``predicate(RequestRecord) -> bool`` for anything finer (query, body, watch-or-not).
    * :class:`FailureRule`: the next ``count`` matching requests (``count=None``: all of them
      until removed) are answered with a ``Status`` error of HTTP ``status`` — or, with
      ``disconnect=True``, the connection is closed without any response. Rules are checked
      in the order they were added; the first one with budget left answers the request and
      consumes one unit. A request that a rule failed never reaches the store — unless the
      rule is ``after_commit``: then the request is handled (a write is committed) and only
      its answer is replaced by the error or the disconnect, as when a reply is lost or the
      API server times out after storage accepted the write.
    * :class:`LatencyRule`: matching requests are delayed by ``seconds`` before being handled
      (all matching latency rules add up). ``count`` limits how many requests are delayed.
    * :class:`WatchDelayRule`: watch events sent to a watch whose request's ``User-Agent``
      starts with ``user_agent`` (and whose path matches ``path``, if given) are held until
      ``delay`` seconds after the event was produced; ``delay`` is a number or a callable
      returning one per event (jitter). All matching rules add up. Order is always preserved:
      an event is never sent before an earlier one of the same stream, so a short delay drawn
      after a long one waits for it. Rules apply to watches already open, event by event.
    * Every request is appended to a bounded log as a :class:`RequestRecord` (method, path,
      parsed query, parsed JSON body or raw bytes, headers; ``user_agent``, ``verb`` and
      ``resource`` derived from them) before faults are applied; its ``status`` is filled in
      once answered (``None`` while a watch stream is open, ``0`` for an injected disconnect).
    * All operations are thread-safe and may be changed while requests are in flight.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["RequestRecord", "FailureRule", "LatencyRule", "WatchDelayRule", "FaultInjector"]

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


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
    #: which fault answered the request, if any ("fail", "disconnect"; "+committed" when the
    #: request was handled first)
    fault: str | None = None
    #: the client's (host, port): requests with the same peer came over the same connection
    peer: tuple[str, int] | None = None

    @property
    def watch(self) -> bool:
        return (self.query.get("watch") or [""])[0].lower() in ("1", "true", "t") or "/watch/" in self.path

    def param(self, name: str, default: str | None = None) -> str | None:
        vals = self.query.get(name)
        return vals[0] if vals else default

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def user_agent(self) -> str:
        """The client's ``User-Agent`` header ("" when absent)."""
        return self.headers.get("user-agent", "")

    def _resource_parts(self) -> list[str]:
        """The path after the group/version, ``watch/`` and ``namespaces/<ns>/``: [plural, name?,
        subresource?] ([] for discovery and other non-resource paths)."""
        parts = [p for p in self.path.split("/") if p]
        if parts[:1] == ["api"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"]:
            rest = parts[3:]
        else:
            return []
        if rest[:1] == ["watch"]:
            rest = rest[1:]
        if len(rest) >= 3 and rest[0] == "namespaces":
            rest = rest[2:]
        return rest

    @property
    def resource(self) -> str:
        """The resource addressed, as RBAC names it: ``pods``, ``pods/binding``, ``leases``, ...
        ("" for discovery and other non-resource paths)."""
        rest = self._resource_parts()
        if not rest:
            return ""
        return f"{rest[0]}/{rest[2]}" if len(rest) >= 3 else rest[0]

    @property
    def verb(self) -> str:
        """The Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection
        (the lower-cased method for non-resource paths)."""
        rest = self._resource_parts()
        if not rest:
            return self.method.lower()
        named = len(rest) >= 2
        if self.method in ("GET", "HEAD"):
            if self.watch:
                return "watch"
            return "get" if named else "list"
        if self.method == "DELETE" and not named:
            return "deletecollection"
        return _VERBS.get(self.method, self.method.lower())


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
    after_commit: bool = False


@dataclass(eq=False)
class LatencyRule(_Rule):
    seconds: float = 0.0


@dataclass(eq=False)
class WatchDelayRule:
    """Hold watch events sent to clients whose ``User-Agent`` starts with ``user_agent``."""

    user_agent: str
    delay: float | Callable[[], float]
    path: re.Pattern[str] | None = None
    _owner: "FaultInjector | None" = field(default=None, repr=False)

    def matches(self, rec: RequestRecord) -> bool:
        return rec.user_agent.startswith(self.user_agent) and (self.path is None or bool(self.path.search(rec.path)))

    def seconds(self) -> float:
        """This event's delay (a callable is asked once per event; negative counts as 0)."""
        value = self.delay() if callable(self.delay) else self.delay
        return max(0.0, float(value))

    def remove(self) -> None:
        """Deactivate this rule (events still held keep the delay they were given)."""
        if self._owner is not None:
            self._owner._remove(self)


class FaultInjector:
    """Holds the active rules and the request log."""

    def __init__(self, log_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._failures: list[FailureRule] = []
        self._latencies: list[LatencyRule] = []
        self._watch_delays: list[WatchDelayRule] = []
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

    def _remove(self, rule: object) -> None:
        with self._lock:
            self._failures = [r for r in self._failures if r is not rule]
            self._latencies = [r for r in self._latencies if r is not rule]
            self._watch_delays = [r for r in self._watch_delays if r is not rule]

    def add_watch_delay(self, rule: WatchDelayRule) -> WatchDelayRule:
        rule._owner = self
        with self._lock:
            self._watch_delays.append(rule)
        return rule

    def watch_delay(self, rec: RequestRecord) -> float:
        """How long to hold the next event of the watch opened by ``rec`` (the matching rules'
        delays added up; 0 when none matches)."""
        with self._lock:
            rules = [r for r in self._watch_delays if r.matches(rec)]
        return sum(r.seconds() for r in rules)

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latencies.clear()
            self._watch_delays.clear()

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
