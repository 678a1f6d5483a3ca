"""Injected time. Production uses SystemClock; tests use FakeClock and advance it by hand."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (for timestamps in annotations and logs)."""

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (for TTLs, timeouts and durations)."""


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def monotonic(self) -> float:
        return self.now()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds
