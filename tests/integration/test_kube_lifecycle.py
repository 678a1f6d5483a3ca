"""The app against a (fake) Kubernetes API: close() stops the watches, the leader elector, the
event recorder and the loops - no thread the app started outlives it - and gives the lease up."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import config_of

from extender.app import create_kube_app
from extender.testing.fakeapi import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def wait_for(condition: Any, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_close_stops_every_thread_and_releases_the_lease(api: FakeApiServer, tmp_path: Path) -> None:
    config = config_of(leaderElection={"enabled": True, "leaseName": "ext", "leaseNamespace": "default",
                                       "leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "200ms"},
                       admission={"enabled": True}, kubernetes={"events": True})
    before = set(threading.enumerate())
    app = create_kube_app(config, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"))
    state = app.extensions["kube_extender"]
    assert state.source.wait_synced(10) and wait_for(state.leader.is_leader)
    # the fake API server's own threads (one per connection) are not the app's
    started = {t for t in set(threading.enumerate()) - before if "process_request_thread" not in t.name}
    names = {t.name for t in started}
    assert {"admission", "nudger", "orphan-collector", "leader-election", "event-recorder"} <= names
    assert any(n.startswith("kube-source-") for n in names)
    state.close(timeout=10.0)
    assert [t.name for t in started if t.is_alive()] == []
    lease = api.get("Lease", "default", "ext")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""
