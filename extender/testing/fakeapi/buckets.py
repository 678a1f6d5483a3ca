"""Objects of one type in (namespace, name) order, and the pages a paginated list returns.

A list's continue token names the resourceVersion the list was taken at and the last key
returned, so the next page starts strictly after it (and a token older than the store's history
horizon gets 410 Expired, as from the real server).
"""

from __future__ import annotations

import base64
import bisect
from dataclasses import dataclass
from typing import Any, Iterator

from . import errors
from .codec import dumps, loads

__all__ = ["Bucket", "ListResult", "encode_continue", "decode_continue"]


@dataclass
class ListResult:
    items: list[dict[str, Any]]
    resource_version: int
    continue_token: str | None
    remaining: int | None



class Bucket:
    """Objects of one type: namespace -> name -> object, with cached sorted key lists."""

    __slots__ = ("objs", "_sorted_ns", "_sorted_names", "count")

    def __init__(self) -> None:
        self.objs: dict[str, dict[str, dict[str, Any]]] = {}
        self._sorted_ns: list[str] | None = None
        self._sorted_names: dict[str, list[str]] = {}
        self.count = 0

    def get(self, ns: str, name: str) -> dict[str, Any] | None:
        d = self.objs.get(ns)
        return None if d is None else d.get(name)

    def put(self, ns: str, name: str, obj: dict[str, Any]) -> None:
        d = self.objs.get(ns)
        if d is None:
            d = self.objs[ns] = {}
            self._sorted_ns = None
        if name not in d:
            self._sorted_names.pop(ns, None)
            self.count += 1
        d[name] = obj

    def remove(self, ns: str, name: str) -> None:
        d = self.objs.get(ns)
        if d is None or name not in d:
            return
        del d[name]
        self.count -= 1
        self._sorted_names.pop(ns, None)
        if not d:
            del self.objs[ns]
            self._sorted_ns = None

    def _names(self, ns: str) -> list[str]:
        names = self._sorted_names.get(ns)
        if names is None:
            names = self._sorted_names[ns] = sorted(self.objs.get(ns, {}))
        return names

    def iter_sorted(self, ns: str | None, after: tuple[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Objects in (namespace, name) order, optionally restricted to ``ns``, strictly after ``after``."""
        if ns is not None:
            namespaces = [ns] if ns in self.objs else []
        else:
            if self._sorted_ns is None:
                self._sorted_ns = sorted(self.objs)
            namespaces = self._sorted_ns
        start_ns = 0
        if after is not None:
            start_ns = bisect.bisect_left(namespaces, after[0])
        for i in range(start_ns, len(namespaces)):
            n = namespaces[i]
            names = self._names(n)
            d = self.objs[n]
            j = 0
            if after is not None and n == after[0]:
                j = bisect.bisect_right(names, after[1])
            for k in range(j, len(names)):
                yield d[names[k]]

    def iter_all(self) -> Iterator[dict[str, Any]]:
        for d in self.objs.values():
            yield from d.values()


def encode_continue(rv: int, ns: str, name: str) -> str:
    raw = dumps({"v": "fake.k8s.io/v1", "rv": rv, "start": [ns, name]})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str, str]:
    try:
        pad = "=" * (-len(token) % 4)
        data = loads(base64.urlsafe_b64decode(token + pad))
        rv = int(data["rv"])
        ns, name = data["start"]
        return rv, str(ns), str(name)
    except Exception:  # noqa: BLE001 - any malformed token is a 400
        raise errors.bad_request(f"continue key is not valid: {token!r}") from None
