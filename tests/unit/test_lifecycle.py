"""One close() stops every background thread an app starts, once, in a bounded time."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app, shutdown
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.lifecycle import Lifecycle


class Leader:
    """A leader that always leads; ``stopped(release)`` is told how it was stopped."""

    def __init__(self, stopped: Callable[[bool], None]) -> None:
        self.stopped = stopped

    def is_leader(self) -> bool:
        return True

    def term(self) -> int:
        return 1

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        self.stopped(release)


def test_close_stops_every_thread_the_app_started_and_is_idempotent() -> None:
    before = set(threading.enumerate())
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()],
                                            [make_pod("p").uid("u").req(gpu=1).obj()]))
    app = create_app(config_of(admission={"enabled": True}, cache={"orphanCollectionInterval": "1s"}),
                     source=cluster, clock=FakeClock())
    started = set(threading.enumerate()) - before
    assert {t.name for t in started} == {"admission", "nudger", "orphan-collector"}
    state = app.extensions["kube_extender"]
    state.close()
    assert [t.name for t in started if t.is_alive()] == []
    state.close()  # a second close does nothing
    shutdown(app)  # nor does the SIGTERM hook after it
    cluster.add_pod(make_pod("late").uid("late").obj())
    assert state.cache.pending_pod("default", "late") is None, "the source delivers nothing after close"


def test_the_stops_run_last_registered_first_those_after_the_loops_once_joined() -> None:
    """And a failing stop does not stop the others."""
    lifecycle, ran = Lifecycle(), []

    def failing(seconds: float) -> None:
        ran.append("failing")
        raise RuntimeError("boom")

    lifecycle.on_close("source", lambda seconds: ran.append("source"), after_loops=True)
    lifecycle.on_close("leader", failing, after_loops=True)
    lifecycle.on_close("events", lambda seconds: ran.append("events"))
    lifecycle.on_close("loops", lambda seconds: ran.append("loops"))
    thread = lifecycle.start("loop", lambda: (lifecycle.stopping.wait(), ran.append("loop ended")))
    lifecycle.close()
    lifecycle.close()
    assert not thread.is_alive()
    assert ran == ["loops", "events", "loop ended", "failing", "source"]


def test_each_stop_is_given_what_is_left_of_the_timeout() -> None:
    lifecycle, given = Lifecycle(), []
    lifecycle.on_close("a", given.append)
    lifecycle.close(timeout=3.0)
    assert len(given) == 1 and 0.0 < given[0] <= 3.0


def test_the_loops_end_on_close_and_nothing_starts_after_it() -> None:
    lifecycle = Lifecycle()
    thread = lifecycle.start("loop", lifecycle.stopping.wait)
    lifecycle.close(timeout=5.0)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        lifecycle.start("late", lambda: None)


def test_a_crash_keeps_the_lease_a_close_gives_it_up() -> None:
    """``close(release=False)`` (a simulated crash) tells the leader not to give the lease up."""
    stopped: list[Any] = []
    for release in (False, True):
        leader = Leader(lambda release: stopped.append(release))
        app = create_app(config_of(), source=MemoryCluster(), clock=FakeClock(), leader=leader, background=False)
        app.extensions["kube_extender"].close(release=release)
    assert stopped == [False, True]


@pytest.mark.parametrize("loop_ends", [True, False], ids=["the loops end", "a loop is stuck in a write"])
def test_the_lease_is_given_up_only_once_no_loop_can_still_write(loop_ends: bool) -> None:
    """A loop's write that passed the fence could land after a standby took the released Lease
    over: the leader steps down after the loops are joined, and leaves the Lease to expire when
    one of them is still running then."""
    seen: list[tuple[bool, bool]] = []
    written = threading.Event()

    def stopped(release: bool) -> None:
        seen.append((release, thread.is_alive()))
        written.set()  # a stuck write ends once the process gives up on it

    app = create_app(config_of(), source=MemoryCluster(), clock=FakeClock(), leader=Leader(stopped), background=False)
    state = app.extensions["kube_extender"]

    def loop() -> None:
        state.lifecycle.stopping.wait()
        if not loop_ends:
            written.wait(10)

    thread = state.lifecycle.start("loop", loop)
    state.close(timeout=0.2)
    assert seen == ([(True, False)] if loop_ends else [(False, True)])
