"""Watch events and the watchers they are offered to.

An :class:`Event` is one committed change, shared by every watcher and serialized once per
delivered type. A :class:`Watcher` is one registered watch: the store offers it every event of
its type under the store lock (so ordering is global and exact), it keeps those its selectors
match, turning a change across its selectors into ADDED or DELETED as the apiserver's watch cache
does, and the serving thread drains it with :meth:`Watcher.take`, optionally holding each event
back for a delay (the watch-delay rules).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Mapping

from .codec import dumps
from .resources import ResourceType, field_value
from .selector import FieldSelector, LabelSelector

__all__ = ["Event", "Watcher", "encode_event", "with_rv", "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


class Event:
    """One committed change. ``obj`` is the new state (for DELETED: last state with the new rv);
    ``at`` is when it was committed (``time.monotonic()``)."""

    __slots__ = ("rv", "type", "key", "obj", "prev", "at", "_lines")

    def __init__(self, rv: int, etype: str, key: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> None:
        self.rv = rv
        self.type = etype
        self.key = key
        self.obj = obj
        self.prev = prev
        self.at = time.monotonic()
        self._lines: dict[str, bytes] | None = None

    def line(self, etype: str) -> bytes:
        """The serialized watch line for this event's object delivered as ``etype`` (cached)."""
        lines = self._lines
        if lines is None:
            lines = self._lines = {}
        cached = lines.get(etype)
        if cached is None:
            cached = lines[etype] = encode_event(etype, self.obj)
        return cached


def encode_event(etype: str, obj: Mapping[str, Any]) -> bytes:
    return b'{"type":"' + etype.encode() + b'","object":' + dumps(obj) + b"}\n"


def with_rv(obj: Mapping[str, Any], rv: int) -> dict[str, Any]:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["resourceVersion"] = str(rv)
    out["metadata"] = meta
    return out


# item queued for a watcher: (event type, shared Event or None, explicit object or None)
_Item = tuple[str, "Event | None", "Mapping[str, Any] | None"]


class Watcher:
    """A registered watch. Fed under the store lock; drained by the serving thread."""

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        label: LabelSelector | None,
        field: FieldSelector | None,
        queue_limit: int | None,
    ) -> None:
        self.rt = rt
        self.namespace = namespace or None
        self.label = None if label is None or label.empty else label
        self.field = None if field is None or field.empty else field
        self.queue_limit = queue_limit
        #: items queued while registering (initial state / replay) do not count against the limit
        self.initial_backlog = 0
        self.registering = True
        self._cond = threading.Condition(threading.Lock())
        #: (when the item was produced, item)
        self._items: deque[tuple[float, _Item]] = deque()
        #: why the watch is ending: None (open), "drop", "abort", "stop", "overflow", "error", "removed"
        self.closed: str | None = None
        self.created = time.monotonic()
        #: seconds to hold the next item after it was produced (asked once per item); None: no hold
        self.delay: Callable[[], float] | None = None
        self._head_release: float | None = None
        self._last_release = float("-inf")

    def matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        if self.label is not None and not self.label.matches_object(obj):
            return False
        if self.field is not None and not self.field.matches(obj, field_value):
            return False
        return True

    def push(self, item: _Item, at: float | None = None) -> None:
        """Queue ``item``, produced at ``at`` (``time.monotonic()``; default: now)."""
        with self._cond:
            if self.closed is not None:
                return
            if (self.queue_limit is not None and not self.registering
                    and len(self._items) >= self.queue_limit + self.initial_backlog):
                self.closed = "overflow"  # a consumer too slow for live events is cut off, as by the real cacher
            else:
                self._items.append((time.monotonic() if at is None else at, item))
            self._cond.notify()

    def offer(self, ev: Event) -> None:
        if self.closed is not None:
            return
        if ev.type == DELETED:
            if self.matches(ev.prev):
                self.push((DELETED, ev, None), ev.at)
            return
        cur = self.matches(ev.obj)
        old = ev.prev is not None and self.matches(ev.prev)
        if cur and old:
            self.push((MODIFIED, ev, None), ev.at)
        elif cur:
            self.push((ADDED, ev, None), ev.at)
        elif old:
            assert ev.prev is not None
            self.push((DELETED, None, with_rv(ev.prev, ev.rv)), ev.at)

    def close(self, reason: str) -> None:
        with self._cond:
            if self.closed is None:
                self.closed = reason
            self._cond.notify_all()

    def take(self, timeout: float, max_items: int = 512) -> list[_Item]:
        """Wait up to ``timeout`` seconds for items; returns those that may be sent now (maybe
        none). With a ``delay``, an item may be sent ``delay()`` seconds after it was produced
        and never before the item ahead of it: its release time is the later of the two."""
        with self._cond:
            if self.delay is None:
                if not self._items and self.closed is None and timeout > 0:
                    self._cond.wait(timeout)
                out: list[_Item] = []
                while self._items and len(out) < max_items:
                    out.append(self._items.popleft()[1])
                return out
            deadline = time.monotonic() + max(0.0, timeout)
            while True:
                now = time.monotonic()
                out = []
                while self._items and len(out) < max_items and self._release() <= now:
                    out.append(self._items.popleft()[1])
                    self._head_release = None
                if out or now >= deadline or (not self._items and self.closed is not None):
                    return out
                wait = deadline - now
                if self._items:
                    wait = min(wait, self._release() - now)
                self._cond.wait(wait)

    def _release(self) -> float:
        """When the head item may be sent (cond held, items not empty); asked once per item."""
        if self._head_release is None:
            assert self.delay is not None
            produced = self._items[0][0]
            self._head_release = max(self._last_release, produced + max(0.0, self.delay()))
            self._last_release = self._head_release
        return self._head_release

    def pending(self) -> int:
        with self._cond:
            return len(self._items)

