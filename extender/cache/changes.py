"""ChangeLog: the cache's numbered record of cluster changes, for queueing hints and nudges.

Every node, pod (pending pods included), PodDisruptionBudget and PodGroup event the cache
applies, and every capacity release (a pod's, a nomination's, a reservation's), is one Change
with the next sequence number. The latest CHANGE_LOG_SIZE are kept. Not thread-safe on its own:
the cache calls it under its lock.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from extender.framework.events import Change, ClusterEvent

CHANGE_LOG_SIZE = 50_000
"""Changes kept for ``since`` (a minute of a busy cluster's events)."""


class ChangeLog:
    def __init__(self, size: int = CHANGE_LOG_SIZE) -> None:
        self.count = 0
        """The sequence number of the latest change (0: none yet)."""
        self._log: deque[Change] = deque(maxlen=size)

    def record(self, event: ClusterEvent, key: str, node: str = "") -> None:
        """Note a change. Sequence numbers are contiguous (each is the previous one + 1, the last
        is ``count``): ``since`` relies on it."""
        self.count += 1
        self._log.append(Change(self.count, event, key, node))

    def since(self, seq: int | None) -> tuple[list[Change], int, bool]:
        """(changes after ``seq``, the latest sequence number, complete). ``complete`` is False
        when the log no longer reaches back to ``seq`` (more than its size changes since): the
        caller must then assume anything changed. ``seq=None``: no changes, just the latest."""
        if seq is None or seq >= self.count:
            return [], self.count, True
        complete = not self._log or self._log[0].seq <= seq + 1
        # the log's sequence numbers are contiguous and end at self.count: the changes after
        # ``seq`` are its last (self.count - seq) entries, read from the right end
        wanted = min(self.count - seq, len(self._log))
        after = list(islice(reversed(self._log), wanted))
        after.reverse()
        return after, self.count, complete
