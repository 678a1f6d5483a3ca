"""The threads binding cycles run on: reused, and handed each cycle the way a new thread starts.

kube-scheduler runs every binding cycle in a goroutine of its own, unbounded (§5.1); the emulator
ran each in a thread of its own, and ``Thread.start`` cost about 0.2 ms a cycle (creating the OS
thread, registering it, waiting for it to start). :class:`Binders` keeps the threads: a cycle takes
an idle one, or starts one when none is idle (so still unbounded: a bind held in an extender's
Permit never delays another).

**The handover is ``Thread.start``'s**, because when a bind runs relative to the next scheduling
cycle decides what the extender has seen when that cycle asks it (a thread pool that only queued
the work - the scheduling thread going on at once - changed placements). ``Thread.start`` returns
once the new thread has signalled that it runs; the new thread then goes on with the binding
cycle while the scheduling thread waits for the interpreter lock. :meth:`Binders.start` does the
same: it hands the job to the worker, waits until the worker has taken it, and returns; the
worker goes on with the job. In both cases the scheduling thread is blocked, without the
interpreter lock, until the binding thread has begun the cycle, and then competes for the lock
with it exactly as before.

A worker idle for ``idle_seconds`` (real time) ends; :meth:`Binders.close` ends every idle one.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

_STOP = None


class _Worker:
    __slots__ = ("pool", "job", "go", "taken", "thread")

    def __init__(self, pool: Binders) -> None:
        self.pool = pool
        self.job: tuple[Callable[..., None], tuple[Any, ...], str] | None = None
        self.go = threading.Lock()
        self.go.acquire()  # released by each handover
        self.taken = threading.Lock()
        self.taken.acquire()  # released by the worker when it has the job
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        pool = self.pool
        while True:
            if not self.go.acquire(timeout=pool.idle_seconds):
                with pool.lock:
                    if self in pool.idle:  # nobody is handing a job over: end
                        pool.idle.remove(self)
                        return
                self.go.acquire()  # taken from the idle list just now: its job is coming
            job, self.job = self.job, None
            self.taken.release()  # as a new thread's start: the caller may go on
            if job is _STOP:
                return
            self._run(*job)
            del job  # an idle thread keeps nothing of its last binding cycle alive
            with pool.lock:
                if pool.closed:
                    return
                pool.idle.append(self)

    def _run(self, fn: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        self.thread.name = name
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - reported as an uncaught exception of a thread
            threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), self.thread)))

    def hand(self, job: tuple[Callable[..., None], tuple[Any, ...], str] | None) -> None:
        self.job = job
        self.go.release()
        self.taken.acquire()


class Binders:
    """Runs binding cycles on reused daemon threads (see the module docstring). Thread-safe."""

    def __init__(self, idle_seconds: float = 5.0) -> None:
        self.idle_seconds = idle_seconds
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.closed = False

    def start(self, name: str, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on a thread named ``name``; returns once that thread has taken it,
        as ``threading.Thread(target=fn, args=args, name=name).start()`` would."""
        with self.lock:
            worker = self.idle.pop() if self.idle else None
        if worker is None:
            worker = _Worker(self)
            worker.thread.start()
        worker.hand((fn, args, name))

    def close(self) -> None:
        """End the idle threads; busy ones end after their binding cycle."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for worker in idle:
            worker.hand(_STOP)
