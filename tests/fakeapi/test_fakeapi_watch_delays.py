"""Test instruments of the fake API server: watch delivery delays per User-Agent, the request
log's User-Agent/verb/resource, and commit hooks."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any, Iterator

import pytest
from kubernetes import client

from extender.testing.fakeapi import FakeApiServer
from extender.testing.fakeapi import builders as b

SCHEDULER = "kube-scheduler/v1.30.0 (test)"
EXTENDER = "kube-extender/0.0.0"


class RawWatch:
    """A watch read on a thread, recording (arrival time, type, name) per event, bookmarks skipped."""

    def __init__(self, api: FakeApiServer, user_agent: str, path: str = "/api/v1/pods",
                 resource_version: str | None = None) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.error: dict[str, Any] | None = None
        self._conn = http.client.HTTPConnection(api.host, api.port, timeout=10)
        rv = f"&resourceVersion={resource_version}" if resource_version else f"&resourceVersion={api.resource_version}"
        self._conn.request("GET", f"{path}?watch=true&allowWatchBookmarks=true{rv}",
                           headers={"User-Agent": user_agent})
        self._resp = self._conn.getresponse()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    self.error = ev["object"]
                elif ev["type"] != "BOOKMARK":
                    self.events.append((time.monotonic(), ev["type"], ev["object"]["metadata"]["name"]))
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed under us
            return

    def names(self) -> list[str]:
        return [name for _, _, name in self.events]

    def wait(self, n: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.events) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self.events) >= n

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.1) as srv:
        yield srv


@pytest.fixture
def watches(api: FakeApiServer) -> Iterator[Any]:
    opened: list[RawWatch] = []

    def open_watch(user_agent: str, **kw: Any) -> RawWatch:
        w = RawWatch(api, user_agent, **kw)
        opened.append(w)
        assert api.wait_for_watchers(len(opened), "pods")
        return w

    yield open_watch
    for w in opened:
        w.close()


def test_only_the_matching_client_is_held_back(api: FakeApiServer, watches: Any) -> None:
    api.delay_watches("kube-scheduler", 1.0)
    held, free = watches(SCHEDULER), watches(EXTENDER)
    api.create(b.pod("p"))
    created = time.monotonic()
    assert free.wait(1)
    assert held.events == [], "the delayed watch has nothing while the other already got the event"
    assert held.wait(1)
    assert held.events[0][0] - created >= 1.0
    assert held.names() == free.names() == ["p"]


def test_order_is_kept_when_a_later_event_draws_a_shorter_delay(api: FakeApiServer, watches: Any) -> None:
    delays = iter([0.5, 0.0, 0.2, 0.0])
    api.delay_watches("kube-extender", lambda: next(delays, 0.0))
    w = watches(EXTENDER)
    start = time.monotonic()
    for name in ("a", "b", "c", "d"):
        api.create(b.pod(name))
    assert w.wait(4)
    assert w.names() == ["a", "b", "c", "d"]
    times = [t for t, _, _ in w.events]
    assert times == sorted(times) and times[1] - start >= 0.5, "b waits for a"


def test_a_rule_applies_to_open_watches_and_ends_when_removed(api: FakeApiServer, watches: Any) -> None:
    w = watches(SCHEDULER)
    rule = api.delay_watches("kube-scheduler", 0.4, path=r"/pods$")
    api.create(b.pod("held"))
    start = time.monotonic()
    assert w.wait(1)
    assert w.events[0][0] - start >= 0.4
    rule.remove()
    api.create(b.pod("free"))
    assert w.wait(2) and w.names() == ["held", "free"]
    assert api.faults.watch_delay(api.requests(predicate=lambda r: r.watch)[0]) == 0.0


def test_delays_add_up_and_a_path_filter_limits_a_rule(api: FakeApiServer, watches: Any) -> None:
    api.delay_watches("kube-scheduler", 0.1)
    api.delay_watches("kube-scheduler", 0.2)
    api.delay_watches("kube-scheduler", 5.0, path=r"/nodes$")
    watches(SCHEDULER)
    record = api.requests(predicate=lambda r: r.watch)[0]
    assert api.faults.watch_delay(record) == pytest.approx(0.3)


def test_an_expired_watch_still_gets_its_error_when_delayed(api: FakeApiServer) -> None:
    api.create(b.pod("old"))
    rv = api.resource_version
    api.create(b.pod("new"))
    api.compact()
    api.delay_watches("kube-scheduler", 0.2)
    w = RawWatch(api, SCHEDULER, resource_version=str(rv - 1))
    try:
        deadline = time.monotonic() + 3
        while w.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert w.error is not None and w.error["code"] == 410
    finally:
        w.close()


def test_request_log_names_the_client_verb_and_resource(api: FakeApiServer) -> None:
    api_client = api.api_client()
    api_client.user_agent = SCHEDULER
    core = client.CoreV1Api(api_client)
    api.create(b.node("n1"))
    core.create_namespaced_pod("default", b.pod("p"))
    core.list_namespaced_pod("default")
    core.list_pod_for_all_namespaces()
    core.read_namespaced_pod("p", "default")
    core.patch_namespaced_pod_status("p", "default", {"status": {"nominatedNodeName": "n1"}})
    core.create_namespaced_pod_binding("p", "default", client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1")),
        _preload_content=False)
    core.delete_namespaced_pod("p", "default")
    core.delete_collection_namespaced_pod("default")
    client.CoordinationV1Api(api_client).list_namespaced_lease("kube-system")
    api_client.close()
    assert api.request_counts() == {
        (SCHEDULER, "create", "pods"): 1, (SCHEDULER, "list", "pods"): 2, (SCHEDULER, "get", "pods"): 1,
        (SCHEDULER, "patch", "pods/status"): 1, (SCHEDULER, "create", "pods/binding"): 1,
        (SCHEDULER, "delete", "pods"): 1, (SCHEDULER, "deletecollection", "pods"): 1,
        (SCHEDULER, "list", "leases"): 1}


@pytest.mark.parametrize("path, verb, resource", [
    ("/api/v1/namespaces/default", "get", "namespaces"),
    ("/api/v1/namespaces", "list", "namespaces"),
    ("/api/v1/nodes/n1/status", "get", "nodes/status"),
    ("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x", "get", "leases"),
    ("/api/v1/watch/namespaces/default/pods", "watch", "pods"),
    ("/version", "get", ""),
    ("/apis", "get", ""),
])
def test_verb_and_resource_of_paths(path: str, verb: str, resource: str) -> None:
    from extender.testing.fakeapi import RequestRecord

    rec = RequestRecord("GET", path, {}, None, {"user-agent": "x"})
    assert (rec.verb, rec.resource, rec.user_agent) == (verb, resource, "x")


def test_commit_hooks_see_every_write_in_order_until_removed(api: FakeApiServer) -> None:
    seen: list[tuple[str, str, str, str | None]] = []

    def hook(kind: str, etype: str, obj: Any, prev: Any) -> None:
        seen.append((kind, etype, obj["metadata"]["name"], (prev or {}).get("spec", {}).get("nodeName")))

    remove = api.on_commit(hook)
    api.create(b.node("n1"))
    api.create(b.pod("p"))
    api.bind("default", "p", "n1")
    api.delete("Pod", "default", "p")
    remove()
    api.create(b.pod("q"))
    assert seen == [("Node", "ADDED", "n1", None), ("Pod", "ADDED", "p", None), ("Pod", "MODIFIED", "p", None),
                    ("Pod", "DELETED", "p", "n1")]


def test_a_failing_hook_does_not_break_the_write(api: FakeApiServer) -> None:
    def hook(kind: str, etype: str, obj: Any, prev: Any) -> None:
        raise RuntimeError("observer bug")

    api.on_commit(hook)
    api.create(b.pod("p"))
    assert api.get("Pod", "default", "p") is not None
