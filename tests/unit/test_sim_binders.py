"""The binding cycles' threads (``extender.sim.binders``): reused, never a bound on how many
cycles run at once, handed over as ``Thread.start`` hands a new thread its target."""

from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest

from extender.sim.binders import Binders

WAIT = 10.0  # seconds: only ever reached when the behaviour is broken


@pytest.fixture
def binders() -> Iterator[Binders]:
    pool = Binders()
    yield pool
    pool.close()


def test_a_job_runs_on_a_thread_with_the_given_name(binders: Binders) -> None:
    seen: list[str] = []
    done = threading.Event()
    binders.start("bind-default/p", lambda *args: (seen.append(threading.current_thread().name), done.set()), 1, 2)
    assert done.wait(WAIT) and seen == ["bind-default/p"]


def test_a_held_job_never_delays_another(binders: Binders) -> None:
    """A bind held in an extender's Permit: the next cycle's bind still runs at once."""
    release, second = threading.Event(), threading.Event()
    binders.start("held", release.wait, WAIT)
    binders.start("next", second.set)
    assert second.wait(WAIT) and not release.is_set()
    release.set()


def test_a_finished_thread_is_reused(binders: Binders) -> None:
    threads: list[threading.Thread] = []
    for name in ("first", "second", "third"):
        done = threading.Event()

        def job(done: threading.Event = done) -> None:
            threads.append(threading.current_thread())
            done.set()

        binders.start(name, job)
        assert done.wait(WAIT)
        _until_idle(binders, 1)
    assert len(set(threads)) == 1


def test_start_returns_once_the_thread_has_the_job(binders: Binders) -> None:
    """As ``Thread.start``: by the time ``start`` returns, the worker has taken the job (it is
    no longer idle), so a second ``start`` cannot be handed to the same thread."""
    release = threading.Event()
    binders.start("held", release.wait, WAIT)
    assert binders.idle == []
    other = threading.Event()
    binders.start("other", other.set)
    assert other.wait(WAIT)
    release.set()


def test_an_exception_is_reported_and_the_thread_serves_on(binders: Binders, monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", reported.append)

    def boom() -> None:
        raise RuntimeError("bind exploded")

    binders.start("bind-boom", boom)
    _until_idle(binders, 1)
    assert [(type(r.exc_value), str(r.exc_value), r.thread.name) for r in reported] == [
        (RuntimeError, "bind exploded", "bind-boom")]
    done = threading.Event()
    binders.start("after", done.set)
    assert done.wait(WAIT)


def test_close_ends_the_idle_threads() -> None:
    binders = Binders()
    threads: list[threading.Thread] = []
    binders.start("one", lambda: threads.append(threading.current_thread()))
    _until_idle(binders, 1)
    binders.close()
    threads[0].join(WAIT)
    assert not threads[0].is_alive()


def test_an_idle_thread_ends_after_its_idle_time() -> None:
    binders = Binders(idle_seconds=0.01)
    threads: list[threading.Thread] = []
    done = threading.Event()
    binders.start("one", lambda: (threads.append(threading.current_thread()), done.set()))
    assert done.wait(WAIT)
    threads[0].join(WAIT)
    assert not threads[0].is_alive() and binders.idle == []


def _until_idle(binders: Binders, count: int) -> None:
    """Wait until ``count`` workers are idle (polled: a worker says nothing when it is done)."""
    for _ in range(int(WAIT * 1000)):
        with binders.lock:
            if len(binders.idle) >= count:
                return
        threading.Event().wait(0.001)
    raise AssertionError("the worker never became idle")
