"""One close() stops every background thread an app starts, once, in a bounded time."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app, shutdown
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.lifecycle import Lifecycle


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


def test_the_stops_run_last_registered_first_and_a_failing_one_does_not_stop_the_others() -> None:
    lifecycle, ran = Lifecycle(), []

    def failing(seconds: float) -> None:
        ran.append("failing")
        raise RuntimeError("boom")

    lifecycle.on_close("source", lambda seconds: ran.append("source"))
    lifecycle.on_close("leader", failing)
    lifecycle.on_close("loops", lambda seconds: ran.append("loops"))
    lifecycle.close()
    lifecycle.close()
    assert ran == ["loops", "failing", "source"]


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

    class Leader:
        def is_leader(self) -> bool:
            return True

        def term(self) -> int:
            return 1

        def stop(self, release: bool = True, timeout: float | None = None) -> None:
            stopped.append(release)

    for release in (False, True):
        app = create_app(config_of(), source=MemoryCluster(), clock=FakeClock(), leader=Leader(), background=False)
        app.extensions["kube_extender"].close(release=release)
    assert stopped == [False, True]
