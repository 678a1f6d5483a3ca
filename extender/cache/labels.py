"""LabelIndex: pods by (namespace, label value), for the label keys asked about.

label key -> (namespace, value) -> {(uid, pod key)}. The cache builds an index of a key the first
time ``pods_labelled`` asks about it (one scan), then keeps it current on pod upserts and
deletions (a pod's entry moves when its value changes and goes when it is deleted or turns
terminal); entries left stale by other paths (an assumption dropped) are checked and dropped when
read. Not thread-safe on its own: the cache calls it under its lock.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from extender.framework.views import PodInfo

Entry = tuple[str, str]
"""(uid, pod key)."""


class LabelIndex:
    def __init__(self) -> None:
        self._by_key: dict[str, dict[tuple[str, str], set[Entry]]] = {}

    def __bool__(self) -> bool:
        """Is some key indexed (else there is nothing to keep current)?"""
        return bool(self._by_key)

    def reindex(self, uid: str, namespace: str, key: str, current: PodInfo | None,
                before: Iterable[Mapping[str, Any]]) -> None:
        """Make the indexes agree with pod ``uid`` (``key``) as the cache stores it now
        (``current``: its accounted PodInfo, else its pending one, else None): its entry under its
        value is there, and those under the other values of ``before`` (label maps it may have
        been indexed with) are gone; with nothing stored for it, all of them go."""
        if not self._by_key:
            return
        now = current.labels if current is not None else {}
        entry = (uid, key)
        for label, index in self._by_key.items():
            value = now.get(label)
            for labels in before:  # values it may be indexed under
                old = labels.get(label)
                if old is None or old == value or not isinstance(old, str):
                    continue
                entries = index.get((namespace, old))
                if entries is not None:
                    entries.discard(entry)
                    if not entries:
                        del index[(namespace, old)]
            if isinstance(value, str):
                index.setdefault((namespace, value), set()).add(entry)

    def add(self, info: PodInfo) -> None:
        """Add the pod to the indexes built so far."""
        if not self._by_key:
            return
        labels = info.labels
        for key, index in self._by_key.items():
            value = labels.get(key)
            if value is not None:
                index.setdefault((info.namespace, value), set()).add((info.uid, info.key))

    def find(self, namespace: str, key: str, value: str, stored: Callable[[str, str], PodInfo | None],
             everyone: Callable[[], Iterable[PodInfo]]) -> list[PodInfo]:
        """Pods of ``namespace`` whose label ``key`` is ``value``: ``stored(uid, pod key)`` gives
        what the cache holds for an entry now (stale entries are dropped); ``everyone`` lists the
        pods to build the index of ``key`` from, the first time it is asked about."""
        index = self._by_key.get(key)
        if index is None:
            index = self._by_key[key] = {}
            for info in everyone():
                v = info.labels.get(key)
                if v is not None:
                    index.setdefault((info.namespace, v), set()).add((info.uid, info.key))
        entries = index.get((namespace, value))
        if not entries:
            return []
        found: list[PodInfo] = []
        stale = []
        for uid, pkey in entries:
            current = stored(uid, pkey)
            if current is None or current.uid != uid or current.labels.get(key) != value:
                stale.append((uid, pkey))
            else:
                found.append(current)
        entries.difference_update(stale)
        if not entries:
            del index[(namespace, value)]
        return found
