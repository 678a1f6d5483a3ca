"""The emulated scheduler's clocks: virtual time (the default: cycles take none, the loop jumps
to the next due time) and wall time (``--real-time``, and the harness against a real API server).
See "Time" in ``extender.sim.scheduler``."""

from __future__ import annotations

import time

from extender.framework.clock import FakeClock

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: virtual time 0


class VirtualClock(FakeClock):
    """Time that moves only when the scheduler advances it (thread-safe)."""

    virtual = True

    def __init__(self, start: float = EPOCH) -> None:
        super().__init__(start)
        self.start = start

    def advance_to(self, t: float) -> None:
        with self._lock:
            self._t = max(self._t, t)

    def elapsed(self) -> float:
        return self.now() - self.start


class RealClock:
    """Wall time, measured from the start of the run."""

    virtual = False

    def __init__(self) -> None:
        self.start = time.time()

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def advance_to(self, t: float) -> None:  # the loop waits instead
        pass

    def elapsed(self) -> float:
        return self.now() - self.start


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
