"""List + watch against the fake API server with the real kubernetes client."""

from __future__ import annotations

import json
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
from extender.testing.fakeapi import FakeApiServer
from extender.testing.fakeapi import builders as b


def _raw_watch_lines(api: FakeApiServer, path: str, timeout: float = 5.0) -> list[dict]:
    http = urllib3.PoolManager()
    resp = http.request("GET", api.url + path, preload_content=False, timeout=urllib3.Timeout(read=timeout))
    assert resp.status == 200
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    body = resp.read()
    resp.release_conn()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def test_list_returns_kind_resource_version_and_items(api, core):
    api.create(b.node("n1"))
    api.create(b.pod("p1", node="n1", phase="Running"))
    pods = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in pods.items] == ["p1"]
    assert int(pods.metadata.resource_version) == api.resource_version
    assert pods.items[0].status.phase == "Running"  # direct writes keep status
    # the raw list is shaped like the real server's: list kind, no kind on items
    http = urllib3.PoolManager()
    raw = json.loads(http.request("GET", api.url + "/api/v1/pods").data)
    assert raw["kind"] == "PodList" and raw["apiVersion"] == "v1"
    assert raw["metadata"]["resourceVersion"] == str(api.resource_version)
    assert "kind" not in raw["items"][0]
    single = json.loads(http.request("GET", api.url + "/api/v1/namespaces/default/pods/p1").data)
    assert single["kind"] == "Pod" and single["apiVersion"] == "v1"


def test_resource_versions_are_global_and_monotonic(api, core):
    rvs = []
    for i in range(3):
        rvs.append(int(api.create(b.node(f"n{i}"))["metadata"]["resourceVersion"]))
        rvs.append(int(api.create(b.pod(f"p{i}"))["metadata"]["resourceVersion"]))
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    assert rvs[-1] == api.resource_version
    pod = core.read_namespaced_pod("p0", "default")
    assert pod.metadata.uid and pod.metadata.creation_timestamp is not None and pod.metadata.generation == 1


def test_watch_resume_from_list_resource_version(api, core, collectors):
    api.create(b.pod("before"))
    listed = core.list_namespaced_pod("default")
    rv = listed.metadata.resource_version
    api.create(b.pod("p1"))  # happens between list and watch: must be replayed
    col = collectors(core.list_namespaced_pod, "default", resource_version=rv)
    core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("p1", "default")
    events = col.wait_for(3)
    summary = col.summary()
    assert [(t, n) for t, n, _ in summary] == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    rvs = [r for _, _, r in summary]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert rvs[-1] == api.resource_version  # DELETED carries the deletion's resourceVersion
    assert events[1]["object"].metadata.labels == {"x": "1"}


def test_watch_resume_after_timeout_replays_missed_events_exactly_once(api, core, collectors):
    base = core.list_namespaced_pod("default").metadata.resource_version
    api.create(b.pod("a"))
    first = collectors(core.list_namespaced_pod, "default", resource_version=base, timeout_seconds=1)
    assert first.wait_done(5) and first.error is None
    assert [n for _, n, _ in first.summary()] == ["a"]
    last_rv = first.watch.resource_version
    # while nobody watches
    api.create(b.pod("b"))
    api.delete("Pod", "default", "a")
    second = collectors(core.list_namespaced_pod, "default", resource_version=last_rv, timeout_seconds=1)
    assert second.wait_done(5) and second.error is None
    assert [(t, n) for t, n, _ in second.summary()] == [("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_resource_version_sends_current_objects_first(api, core, collectors):
    api.create(b.pod("existing"))
    col = collectors(core.list_namespaced_pod, "default", timeout_seconds=2)
    assert api.wait_for_watchers(1, "pods")
    api.create(b.pod("new"))
    col.wait_for(2)
    assert [(t, n) for t, n, _ in col.summary()] == [("ADDED", "existing"), ("ADDED", "new")]


@pytest.mark.parametrize(
    "list_func,args,make",
    [
        ("list_pod_for_all_namespaces", (), lambda i: b.pod(f"p{i}", namespace=f"ns{i}")),
        ("list_node", (), lambda i: b.node(f"n{i}")),
        ("list_namespaced_pod", ("ns1",), lambda i: b.pod(f"p{i}", namespace="ns1")),
    ],
)
def test_watch_variants(api, core, collectors, list_func, args, make):
    rv = getattr(core, list_func)(*args).metadata.resource_version
    col = collectors(getattr(core, list_func), *args, resource_version=rv, timeout_seconds=2)
    for i in range(3):
        api.create(make(i))
    api.create(b.pod("other", namespace="elsewhere"))  # only the all-namespaces watch may see it
    col.wait_for(3)
    time.sleep(0.2)
    names = [n for _, n, _ in col.summary()]
    expected = [make(i)["metadata"]["name"] for i in range(3)]
    if list_func == "list_pod_for_all_namespaces":
        expected.append("other")
    assert names == expected


def test_compacted_history_gives_410_through_the_client(api, core):
    old_rv = core.list_namespaced_pod("default").metadata.resource_version
    api.create(b.pod("p1"))
    api.compact()
    w = watch.Watch()
    # without timeout_seconds the client retries once after 410 and then raises
    with pytest.raises(ApiException) as info:
        for _ in w.stream(core.list_namespaced_pod, "default", resource_version=old_rv):
            pass
    assert info.value.status == 410
    assert "Expired" in info.value.reason
    # the wire format: a 200 stream with one ERROR event holding a 410 Status, then the end
    lines = _raw_watch_lines(api, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={old_rv}")
    assert len(lines) == 1 and lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {old_rv}")


def test_bounded_history_expires_old_resource_versions():
    with FakeApiServer(history=5) as api:
        start = api.resource_version
        for i in range(10):
            api.create(b.node(f"n{i}"))
        lines = _raw_watch_lines(api, f"/api/v1/nodes?watch=1&resourceVersion={start}")
        assert lines[0]["type"] == "ERROR" and lines[0]["object"]["code"] == 410
        recent = api.resource_version - 3
        lines = _raw_watch_lines(api, f"/api/v1/nodes?watch=1&resourceVersion={recent}&timeoutSeconds=1")
        assert [ln["object"]["metadata"]["name"] for ln in lines] == ["n7", "n8", "n9"]


def test_timeout_seconds_ends_stream_cleanly(api, core):
    t0 = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    elapsed = time.monotonic() - t0
    assert events == []
    assert 0.9 <= elapsed < 3


def test_unscheduled_field_selector_watch_sees_delete_on_bind(api, core, collectors):
    api.create(b.node("n1"))
    rv = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").metadata.resource_version
    pending = collectors(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=", resource_version=rv,
                         timeout_seconds=3)
    on_node = collectors(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=n1", resource_version=rv,
                         timeout_seconds=3)
    core.create_namespaced_pod("default", b.pod("p1"))
    api.bind("default", "p1", "n1")
    pending.wait_for(2)
    on_node.wait_for(1)
    assert [(t, n) for t, n, _ in pending.summary()] == [("ADDED", "p1"), ("DELETED", "p1")]
    assert [(t, n) for t, n, _ in on_node.summary()] == [("ADDED", "p1")]
    # the DELETED event carries the old state stamped with the bind's resourceVersion
    deleted = pending.events[1]["raw_object"]
    assert "nodeName" not in deleted["spec"]
    assert deleted["metadata"]["resourceVersion"] == on_node.events[0]["raw_object"]["metadata"]["resourceVersion"]


def test_label_selector_watch(api, core, collectors):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    col = collectors(core.list_namespaced_pod, "default", label_selector="app in (web,api),tier!=db",
                     resource_version=rv, timeout_seconds=2)
    api.create(b.pod("web", labels={"app": "web"}))
    api.create(b.pod("db", labels={"app": "api", "tier": "db"}))
    api.create(b.pod("other", labels={"app": "batch"}))
    api.patch("Pod", "default", "other", {"metadata": {"labels": {"app": "api"}}}, "merge")
    col.wait_for(2)
    time.sleep(0.2)
    assert [(t, n) for t, n, _ in col.summary()] == [("ADDED", "web"), ("ADDED", "other")]


def test_bookmarks_carry_current_resource_version(api, core, collectors):
    rv = core.list_node().metadata.resource_version
    col = collectors(core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=2)
    api.create(b.node("n1"))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not any(e["type"] == "BOOKMARK" for e in col.events):
        time.sleep(0.05)
    bookmarks = [e for e in col.events if e["type"] == "BOOKMARK"]
    assert bookmarks, "expected a BOOKMARK within the bookmark interval"
    assert bookmarks[0]["raw_object"]["kind"] == "Node"
    assert int(bookmarks[0]["raw_object"]["metadata"]["resourceVersion"]) == api.resource_version


def test_send_initial_events_ends_with_annotated_bookmark(api):
    api.create(b.node("n1"))
    api.create(b.node("n2"))
    lines = _raw_watch_lines(
        api, "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
             "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    )
    assert [ln["type"] for ln in lines[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    assert lines[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_pagination_with_limit_and_continue(api, core):
    for i in range(7):
        api.create(b.pod(f"p{i}", namespace=f"ns{i % 3}"))
    seen: list[tuple[str, str]] = []
    token: str | None = None
    rvs: set[str] = set()
    while True:
        page = core.list_pod_for_all_namespaces(limit=3, _continue=token)
        seen.extend((p.metadata.namespace, p.metadata.name) for p in page.items)
        rvs.add(page.metadata.resource_version)
        token = page.metadata._continue
        if not token:
            break
    assert seen == sorted(seen) and len(seen) == 7
    assert len(rvs) == 1  # every page reports the first page's resourceVersion
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(limit=3, _continue="not-a-token")
    assert info.value.status == 400


def test_continue_token_older_than_compaction_is_410(api, core):
    for i in range(4):
        api.create(b.node(f"n{i}"))
    page = core.list_node(limit=2)
    api.create(b.node("n9"))
    api.compact()
    with pytest.raises(ApiException) as info:
        core.list_node(limit=2, _continue=page.metadata._continue)
    assert info.value.status == 410


def test_closed_client_watch_is_released(api, core):
    w = watch.Watch()
    stream = w.stream(core.list_node, allow_watch_bookmarks=True)
    api.create(b.node("n1"))
    assert next(stream)["type"] == "ADDED"
    assert api.watch_count("nodes") == 1
    w.stop()
    stream.close()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and api.watch_count("nodes"):
        time.sleep(0.05)
    assert api.watch_count("nodes") == 0


def test_kubeconfig_works_with_load_kube_config(api, tmp_path):
    from kubernetes import config

    path = api.kubeconfig(tmp_path / "kubeconfig")
    cfg = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=cfg)
    assert cfg.host == api.url
    api.create(b.node("n1"))
    with client.ApiClient(cfg) as c:
        assert [n.metadata.name for n in client.CoreV1Api(c).list_node().items] == ["n1"]
