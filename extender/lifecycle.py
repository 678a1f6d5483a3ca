"""Lifecycle: the background threads an app starts, and one ``close()`` that stops them all.

Every loop the app runs (admission, nudges, orphan collection) is started through ``start`` and
waits on the lifecycle's ``stopping`` event (or its own, whose setter is registered with
``on_close``); every other part with threads of its own (the cluster source's watches, the leader
elector, the event recorder) registers how to stop it. ``close`` runs those stops in reverse
order of registration, joins the threads it started, and only then runs the stops registered
``after_loops`` (the leader - giving the Lease up, which it may do only once no loop can still
write: ``loops_ended`` - and the source): idempotent, and bounded by ``timeout`` seconds in all,
so a SIGTERM handler that calls it ends within the grace period whatever a stuck API call does
(the threads are daemons: one still stuck then does not keep the process alive).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(self) -> None:
        self.stopping = threading.Event()
        """Set by ``close``: the loops started here wait on it."""
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stops: list[tuple[str, Callable[[float], None], bool]] = []
        self._closed = False

    def start(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """Run ``target(*args)`` in a daemon thread named ``name``, joined by ``close``."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            if self._closed:
                raise RuntimeError("the app is closed")
            self._threads.append(thread)
        thread.start()
        return thread

    def on_close(self, name: str, stop: Callable[[float], None], *, after_loops: bool = False) -> None:
        """Have ``close`` call ``stop(seconds left)``; it should return within them.
        ``after_loops``: once the threads started here are joined (or the time is up)."""
        with self._lock:
            self._stops.append((name, stop, after_loops))

    def loops_ended(self) -> bool:
        """Every thread started here has ended (none can still be writing)."""
        with self._lock:
            return not any(t.is_alive() for t in self._threads)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 10.0) -> None:
        """Stop everything: set ``stopping``, run the registered stops (last registered first),
        join the threads started here. A second call does nothing. A stop that raises is logged
        and the others still run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stops, threads = list(reversed(self._stops)), list(self._threads)
        deadline = time.monotonic() + timeout
        self.stopping.set()
        self._run([s for s in stops if not s[2]], deadline)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._run([s for s in stops if s[2]], deadline)
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            log.warning("threads still running after close", extra={"threads": alive})

    @staticmethod
    def _run(stops: list[tuple[str, Callable[[float], None], bool]], deadline: float) -> None:
        for name, stop, _ in stops:
            try:
                stop(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - one part's failure must not leave the others running
                log.exception("stopping failed", extra={"part": name})
