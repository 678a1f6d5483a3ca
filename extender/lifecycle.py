"""Lifecycle: the background threads an app starts, and one ``close()`` that stops them all.

Every loop the app runs (admission, nudges, orphan collection) is started through ``start`` and
waits on the lifecycle's ``stopping`` event (or its own, whose setter is registered with
``on_close``); every other part with threads of its own (the cluster source's watches, the leader
elector, the event recorder) registers how to stop it. ``close`` runs those stops in reverse
order of registration (the loops, then the leader - giving the Lease up - then the source), then
joins the threads it started: idempotent, and bounded by ``timeout`` seconds in all, so a SIGTERM
handler that calls it ends within the grace period whatever a stuck API call does (the threads
are daemons: one still stuck then does not keep the process alive).
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
        self._stops: list[tuple[str, Callable[[float], None]]] = []
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

    def on_close(self, name: str, stop: Callable[[float], None]) -> None:
        """Have ``close`` call ``stop(seconds left)``; it should return within them."""
        with self._lock:
            self._stops.append((name, stop))

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
        for name, stop in stops:
            try:
                stop(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - one part's failure must not leave the others running
                log.exception("stopping failed", extra={"part": name})
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            log.warning("threads still running after close", extra={"threads": alive})
