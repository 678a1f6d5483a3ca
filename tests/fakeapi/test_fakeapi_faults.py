"""Fault injection: failing requests, dropped watches, latency, disconnects and the request log."""

from __future__ import annotations

import json
import threading
import time

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from extender.testing.fakeapi.fixtures import (  # noqa: F401 - pytest fixtures
    api,
    api_client,
    collectors,
    coord,
    core,
    custom,
    policy,
)
from extender.testing.fakeapi import builders as b

BIND_PATH = r"/pods/[^/]+/binding$"


def bind(core: client.CoreV1Api, pod: str, node: str) -> int:
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod), target=client.V1ObjectReference(kind="Node", name=node))
    return core.create_namespaced_pod_binding(pod, "default", body, _preload_content=False).status


@pytest.mark.parametrize(
    "status,reason",
    [(500, "InternalError"), (409, "Conflict"), (429, "TooManyRequests"), (503, "ServiceUnavailable")],
)
def test_fail_next_bind(api, core, status, reason):
    api.create(b.pod("p"))
    rule = api.fail_next("POST", BIND_PATH, status, message="boom")
    with pytest.raises(ApiException) as info:
        bind(core, "p", "n1")
    st = json.loads(info.value.body)
    assert info.value.status == status and (st["reason"], st["message"], st["code"]) == (reason, "boom", status)
    assert api.get("Pod", "default", "p")["spec"].get("nodeName") is None  # never reached the store
    assert bind(core, "p", "n1") == 201  # budget of one used up
    assert rule.hits == 1
    records = api.requests("POST", BIND_PATH)
    assert [(r.status, r.fault) for r in records] == [(status, "fail"), (201, None)]
    assert records[0].body["target"]["name"] == "n1"


@pytest.mark.parametrize("status", [0, 504])
def test_a_lost_reply_comes_after_the_write_was_committed(api, core, status):
    api.create(b.pod("p"))
    rule = api.lose_reply_next("POST", BIND_PATH, status)
    with pytest.raises((ApiException, urllib3.exceptions.HTTPError)) as info:
        bind(core, "p", "n1")
    if status:
        assert info.value.status == 504
    assert api.get("Pod", "default", "p")["spec"]["nodeName"] == "n1", "the Binding was stored all the same"
    assert rule.hits == 1
    [record] = api.requests("POST", BIND_PATH)
    assert (record.status, record.fault) == (status, ("disconnect" if not status else "fail") + "+committed")
    api.create(b.pod("q"))
    assert bind(core, "q", "n1") == 201  # budget of one used up


def test_fail_count_predicate_and_composition(api, core):
    for i in range(4):
        api.create(b.pod(f"p{i}"))
    only_p2 = api.fail_next("POST", BIND_PATH, 500, count=None, predicate=lambda r: "/pods/p2/" in r.path)
    twice = api.fail_next(None, BIND_PATH, 409, count=2)
    outcomes = []
    for i in range(4):
        try:
            outcomes.append(bind(core, f"p{i}", "n1"))
        except ApiException as exc:
            outcomes.append(exc.status)
    assert outcomes == [409, 409, 500, 201]
    assert twice.hits == 2 and only_p2.hits == 1
    only_p2.remove()
    assert bind(core, "p2", "n1") == 201
    api.fail_next("GET", r"/api/v1/nodes$", 500, count=None)
    with pytest.raises(ApiException):
        core.list_node()
    api.clear_faults()
    assert core.list_node().items == []


def test_429_retry_after(api, core):
    api.create(b.pod("p"))
    api.fail_next("POST", BIND_PATH, 429, headers={"Retry-After": "7"})
    with pytest.raises(ApiException) as info:  # POST is not retried by urllib3
        bind(core, "p", "n1")
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "7"
    # urllib3's default Retry transparently retries an idempotent GET answered 429 + Retry-After
    api.fail_next("GET", r"/api/v1/nodes$", 429, headers={"Retry-After": "0"})
    assert core.list_node().items == []
    assert [r.status for r in api.requests("GET", r"/api/v1/nodes$")] == [429, 200]


def test_latency_injection(api, core):
    api.add_latency("GET", r"/api/v1/nodes$", 0.3, count=1)
    t0 = time.monotonic()
    core.list_node()
    slow = time.monotonic() - t0
    t0 = time.monotonic()
    core.list_node()
    fast = time.monotonic() - t0
    assert slow >= 0.3 and fast < 0.25


def test_dropped_watch_then_resume_loses_no_events(api, core, collectors):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    # no timeout_seconds: Watch.stream reconnects by itself from its last resourceVersion
    col = collectors(core.list_namespaced_pod, "default", resource_version=rv)
    names = [f"p{i}" for i in range(30)]
    assert api.wait_for_watchers(1, "pods")

    def writer() -> None:
        for i, n in enumerate(names):
            api.create(b.pod(n))
            if i % 7 == 3:
                api.drop_watches("pods")
            time.sleep(0.005)

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    col.wait_for(len(names), timeout=10)
    seen = [n for typ, n, _ in col.summary()]
    assert seen == names, "every event exactly once, in order"
    assert len(api.requests("GET", r"/api/v1/namespaces/default/pods$", lambda r: r.watch)) > 1


def test_aborted_watch_surfaces_as_client_error(api, core):
    w = watch.Watch()
    stream = w.stream(core.list_node, allow_watch_bookmarks=True)
    api.create(b.node("n1"))
    assert next(stream)["type"] == "ADDED"
    assert api.drop_watches(abort=True) == 1
    with pytest.raises(Exception) as info:  # urllib3 ProtocolError: the chunked body never finished
        next(stream)
    assert "ProtocolError" in type(info.value).__name__ or "IncompleteRead" in repr(info.value)


def test_compact_after_drop_forces_relist(api, core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    api.create(b.pod("p1"))
    api.compact()
    with pytest.raises(ApiException) as info:
        list(watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2))
    assert info.value.status == 410
    fresh = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in fresh.items] == ["p1"]
    events = list(watch.Watch().stream(core.list_namespaced_pod, "default",
                                       resource_version=fresh.metadata.resource_version, timeout_seconds=1))
    assert events == []


def test_disconnect_next_and_request_log(api):
    http = urllib3.PoolManager(retries=False)
    api.disconnect_next("GET", r"/api/v1/nodes$")
    with pytest.raises(urllib3.exceptions.HTTPError):
        http.request("GET", api.url + "/api/v1/nodes?limit=5")
    r = http.request("GET", api.url + "/api/v1/nodes?limit=5")
    assert r.status == 200
    recs = api.requests("GET", r"/api/v1/nodes$")
    assert [(rec.status, rec.fault) for rec in recs] == [(0, "disconnect"), (200, None)]
    assert recs[0].query == {"limit": ["5"]} and recs[0].param("limit") == "5"
    api.clear_requests()
    assert api.requests() == []


def test_slow_watcher_overflow_is_cut_off_but_replay_is_not():
    from extender.testing.fakeapi import NODES, FakeApiServer

    api = FakeApiServer(watch_queue_limit=3)  # the store alone: no HTTP needed to fill a queue
    for i in range(10):
        api.create(b.node(f"old-{i}"))
    w = api.store.watch(NODES, None, None, None, "1")  # replays 10 events: more than the limit, still fine
    assert w.closed is None and w.pending() == 10
    for i in range(3):
        api.create(b.node(f"live-{i}"))
    assert w.closed is None
    api.create(b.node("one-too-many"))
    assert w.closed == "overflow"
