"""Discovery, /version, health, YAML seeding, selectors and the direct store API."""

from __future__ import annotations

import urllib3
import pytest
from kubernetes import client

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
from extender.testing.fakeapi.selector import SelectorError, parse_field_selector, parse_label_selector


def test_version_health_and_discovery(api, api_client):
    info = client.VersionApi(api_client).get_code()
    assert (info.major, info.minor) == ("1", "33")
    http = urllib3.PoolManager()
    assert http.request("GET", api.url + "/healthz").data == b"ok"
    core_resources = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/status", "pods/binding", "pods/eviction", "nodes", "events", "bindings"} <= core_resources
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = {g.name: g.preferred_version.version for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups == {"events.k8s.io": "v1", "coordination.k8s.io": "v1", "policy": "v1",
                      "scheduling.k8s.io": "v1", "scheduling.x-k8s.io": "v1alpha1"}
    pg = client.CustomObjectsApi(api_client).get_api_resources("scheduling.x-k8s.io", "v1alpha1")
    assert [r.name for r in pg.resources] == ["podgroups", "podgroups/status"]


YAML = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: a}}
status: {allocatable: {cpu: "4"}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: team, labels: {app: web}}
  spec: {nodeName: n1, containers: [{name: c, image: i}]}
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: p2, namespace: team, labels: {app: db}}
  spec: {containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: PodList
items:
- metadata: {name: p3, namespace: other}
  spec: {containers: [{name: c, image: i}]}
  status: {phase: Succeeded}
"""


def test_load_yaml_text_and_file(api, core, tmp_path):
    created = api.load_yaml(YAML)
    assert [o["metadata"]["name"] for o in created] == ["n1", "p1", "p2", "p3"]
    assert core.read_namespaced_pod("p1", "team").status.phase == "Running"
    path = tmp_path / "more.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n2}\n")
    api.load_yaml(path)
    assert [n.metadata.name for n in core.list_node().items] == ["n1", "n2"]


@pytest.mark.parametrize(
    "label,field,expected",
    [
        (None, "spec.nodeName=", ["p2", "p3"]),
        (None, "spec.nodeName!=", ["p1"]),
        (None, "spec.nodeName=n1", ["p1"]),
        (None, "status.phase=Running", ["p1"]),
        (None, "status.phase!=Running,status.phase!=Succeeded", ["p2"]),
        (None, "metadata.namespace==team", ["p1", "p2"]),
        (None, "metadata.name=p3", ["p3"]),
        ("app=web", None, ["p1"]),
        ("app==web", None, ["p1"]),
        ("app!=web", None, ["p2", "p3"]),
        ("app in (web, db)", None, ["p1", "p2"]),
        ("app notin (web)", None, ["p2", "p3"]),
        ("app", None, ["p1", "p2"]),
        ("!app", None, ["p3"]),
        ("app=db", "spec.nodeName=", ["p2"]),
        ("!app", "status.phase=Succeeded", ["p3"]),
    ],
)
def test_list_selectors_table(api, core, label, field, expected):
    api.load_yaml(YAML)
    items = core.list_pod_for_all_namespaces(label_selector=label, field_selector=field).items
    assert sorted(p.metadata.name for p in items) == expected


def test_node_field_selector(api, core):
    api.create(b.node("a"))
    api.create(b.node("b", unschedulable=True))
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=false").items] == ["a"]
    assert [n.metadata.name for n in core.list_node(label_selector="kubernetes.io/hostname=b").items] == ["b"]


@pytest.mark.parametrize("text", ["a in (b", "a=(b)", "=x", "a,,b", "a in ()", "a>x"])
def test_bad_label_selectors(text):
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_field_selector_escapes():
    sel = parse_field_selector(r"metadata.name=a\,b,spec.nodeName!=")
    assert [(r.field, r.op, r.value) for r in sel.requirements] == [("metadata.name", "=", "a,b"), ("spec.nodeName", "!=", "")]


def test_direct_api_round_trip_and_events(api, core):
    created = api.create(b.pod("p", phase="Running"))
    created["metadata"]["labels"] = {"mutated": "locally"}  # copies: the store is unaffected
    assert "labels" not in api.get("Pod", "default", "p")["metadata"]
    rv = api.resource_version
    out = api.mutate("Pod", "default", "p", lambda p: p["status"].update(phase="Succeeded"))
    assert out["status"]["phase"] == "Succeeded" and int(out["metadata"]["resourceVersion"]) == rv + 1
    upd = api.get("Pod", "default", "p")
    upd["metadata"]["labels"] = {"x": "y"}
    api.update(upd, check_resource_version=True)
    with pytest.raises(Exception):
        api.update(upd, check_resource_version=True)  # stale now
    assert api.list("Pod", label_selector="x=y")[0]["metadata"]["name"] == "p"
    assert api.delete("Pod", "default", "p")["metadata"]["name"] == "p"
    assert api.delete("Pod", "default", "p") is None
    with pytest.raises(KeyError):
        api.get("Widget", None, "x")


def test_create_many_and_large_list_over_http():
    n_nodes, n_pods = 500, 20_000
    with FakeApiServer() as api:
        api.create_many([b.node(f"node-{i}") for i in range(n_nodes)], copy=False)
        api.create_many(
            (b.pod(f"pod-{i}", f"ns-{i % 20}", node=f"node-{i % n_nodes}" if i % 4 else None, phase="Running")
             for i in range(n_pods)),
            copy=False,
        )
        assert api.resource_version == 1 + n_nodes + n_pods
        http = urllib3.PoolManager()
        import json
        import time

        t0 = time.monotonic()
        r = http.request("GET", api.url + "/api/v1/pods")
        data = json.loads(r.data)
        assert len(data["items"]) == n_pods and time.monotonic() - t0 < 5
        r = http.request("GET", api.url + "/api/v1/pods?fieldSelector=spec.nodeName%3D")
        assert len(json.loads(r.data)["items"]) == n_pods // 4


def test_core_and_events_k8s_io_events(api, api_client):
    core = client.CoreV1Api(api_client)
    ev = core.create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="p."),
        involved_object=client.V1ObjectReference(kind="Pod", name="p", namespace="default"),
        reason="FailedScheduling", message="0/3 nodes are available", type="Warning"))
    assert ev.metadata.name.startswith("p.")
    listed = core.list_namespaced_event("default", field_selector="involvedObject.name=p,reason=FailedScheduling")
    assert [e.metadata.name for e in listed.items] == [ev.metadata.name]
    events_api = client.EventsV1Api(api_client)
    import datetime as dt

    new = events_api.create_namespaced_event("default", client.EventsV1Event(
        metadata=client.V1ObjectMeta(name="p.abc"), event_time=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        reporting_controller="extender", reporting_instance="x", action="Binding", reason="Scheduled",
        regarding=client.V1ObjectReference(kind="Pod", name="p", namespace="default"), type="Normal"))
    assert new.event_time == dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    assert [e.metadata.name for e in events_api.list_namespaced_event("default").items] == ["p.abc"]
    assert api.get("events.events.k8s.io", "default", "p.abc")["kind"] == "Event"


def test_legacy_watch_path_and_single_object_watch(api):
    import json

    api.create(b.node("n1"))
    api.create(b.node("n2"))
    http = urllib3.PoolManager()
    r = http.request("GET", api.url + "/api/v1/watch/nodes/n2?timeoutSeconds=1")
    lines = [json.loads(x) for x in r.data.splitlines() if x.strip()]
    assert [(x["type"], x["object"]["metadata"]["name"]) for x in lines] == [("ADDED", "n2")]


def test_unexpected_errors_become_500_status(api, core, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(api.store, "get", broken)
    with pytest.raises(client.exceptions.ApiException) as info:
        core.read_node("n1")
    assert info.value.status == 500 and "kaboom" in info.value.body
    monkeypatch.undo()
    api.create(b.node("n1"))
    assert core.read_node("n1").metadata.name == "n1"


def test_restart_keeps_store_and_clients_resume(collectors):
    api = FakeApiServer(bookmark_interval=0.2).start()
    try:
        port = api.port
        with api.api_client() as c:
            core = client.CoreV1Api(c)
            rv = core.list_node().metadata.resource_version
            col = collectors(core.list_node, resource_version=rv, timeout_seconds=20)
            api.create(b.node("before"))
            col.wait_for(1)
            api.stop()
            assert col.wait_done(5)  # the stream ended cleanly; its reconnect is refused
            api.create(b.node("during"))
            api.start()
            assert api.port == port
            resumed = collectors(core.list_node, resource_version=col.watch.resource_version, timeout_seconds=1)
            assert resumed.wait_done(5)
            assert [n for _, n, _ in resumed.summary()] == ["during"]
    finally:
        api.stop()


def test_watch_podgroups_through_custom_objects_api(api, custom, collectors):
    grp, ver, plural = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
    rv = custom.list_namespaced_custom_object(grp, ver, "default", plural)["metadata"]["resourceVersion"]
    col = collectors(custom.list_namespaced_custom_object, grp, ver, "default", plural, resource_version=rv,
                     timeout_seconds=2)
    assert api.wait_for_watchers(1, "podgroups")  # the watch must be open before the CRD goes away
    api.create(b.podgroup("pg", min_member=2))
    api.patch("PodGroup", "default", "pg", {"status": {"phase": "Scheduled"}}, "merge")
    api.disable_crd("podgroups")  # uninstalling the CRD deletes its objects and ends the watch
    assert col.wait_done(5) and col.error is None
    assert [(t, n) for t, n, _ in col.summary()] == [("ADDED", "pg"), ("MODIFIED", "pg"), ("DELETED", "pg")]
    assert api.watch_count() == 0
