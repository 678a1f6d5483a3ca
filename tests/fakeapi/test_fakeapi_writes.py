"""Create / read / replace / patch / delete semantics of the fake API server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client
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
from extender.testing.fakeapi import FakeApiServer, json_patch, merge_patch, strategic_merge_patch
from extender.testing.fakeapi import builders as b
from extender.testing.fakeapi.patch import PatchApplyError, PatchFormatError

_HTTP = urllib3.PoolManager()


def raw(api: FakeApiServer, method: str, path: str, body: Any = None, content_type: str = "application/json",
        encode: bool = True) -> tuple[int, Any]:
    data = None
    if body is not None:
        data = json.dumps(body).encode() if encode else body
    r = _HTTP.request(method, api.url + path, body=data, headers={"Content-Type": content_type})
    try:
        return r.status, json.loads(r.data)
    except ValueError:
        return r.status, r.data


def status_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


# ---------------------------------------------------------------- create / get


def test_create_get_and_already_exists(api, core):
    created = core.create_namespaced_pod("default", b.pod("p1"))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.kind == "Pod" and created.api_version == "v1"
    got = core.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", b.pod("p1"))
    st = status_of(info.value)
    assert (info.value.status, st["reason"], st["message"]) == (409, "AlreadyExists", 'pods "p1" already exists')
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("nope", "default")
    assert info.value.status == 404 and status_of(info.value)["message"] == 'pods "nope" not found'


def test_generate_name(api, core):
    body = b.pod("x")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "worker-"
    names = {core.create_namespaced_pod("default", body).metadata.name for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("worker-") and len(n) == len("worker-") + 5 for n in names)


def test_pod_create_defaults_and_admission(api, core):
    api.create(b.priority_class("high", 1000))
    p = core.create_namespaced_pod("default", b.pod("p", priority_class="high", cpu="100m"))
    assert p.spec.priority == 1000 and p.spec.preemption_policy == "PreemptLowerPriority"
    assert p.spec.scheduler_name == "default-scheduler"
    assert p.status.phase == "Pending" and p.status.qos_class == "Burstable"
    assert {t.key for t in p.spec.tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    body = b.pod("direct-status", phase="Running")  # status sent over HTTP is reset, as by the real server
    assert core.create_namespaced_pod("default", body).status.phase == "Pending"
    crit = core.create_namespaced_pod("default", b.pod("crit", priority_class="system-node-critical"))
    assert crit.spec.priority == 2000001000


@pytest.mark.parametrize(
    "mutate,code,needle",
    [
        (lambda p: p["spec"].update(priorityClassName="missing"), 403, "no PriorityClass with name missing"),
        (lambda p: p["spec"].update(priority=5), 403, "must not be provided in pod spec"),
        (lambda p: p["spec"].update(containers=[]), 422, "spec.containers: Required value"),
        (lambda p: p["spec"]["containers"][0].pop("image"), 422, "spec.containers[0].image: Required value"),
        (lambda p: p["metadata"].update(name="Bad_Name"), 422, "metadata.name: Invalid value"),
        (lambda p: p["metadata"].update(resourceVersion="5"), 500, "resourceVersion should not be set"),
        (lambda p: p["spec"]["containers"][0].update(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
         422, "must be less than or equal to cpu limit"),
    ],
)
def test_pod_create_rejections(api, core, mutate, code, needle):
    body = b.pod("p")
    mutate(body)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", body)
    assert info.value.status == code
    assert needle in status_of(info.value)["message"]
    assert api.get("Pod", "default", body["metadata"]["name"]) is None


# ---------------------------------------------------------------- patch


def test_strategic_merge_removes_scheduling_gates_with_null(api, core):
    core.create_namespaced_pod("default", b.pod("p", gates=["a", "b"]))
    p = core.patch_namespaced_pod("p", "default", {"spec": {"schedulingGates": None}})
    assert p.spec.scheduling_gates is None
    req = api.requests("PATCH", r"/pods/p$")[-1]
    assert req.content_type == "application/strategic-merge-patch+json"


def test_scheduling_gates_can_be_removed_one_by_one_but_not_added(api, core):
    core.create_namespaced_pod("default", b.pod("p", gates=["a", "b"]))
    p = core.patch_namespaced_pod("p", "default", {"spec": {"schedulingGates": [{"name": "a", "$patch": "delete"}]}})
    assert [g.name for g in p.spec.scheduling_gates] == ["b"]
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("p", "default", {"spec": {"schedulingGates": [{"name": "c"}]}})
    assert info.value.status == 422
    assert "only deletion is allowed, but found new scheduling gate 'c'" in status_of(info.value)["message"]


def test_merge_patch_and_json_patch_through_the_client(api, core):
    core.create_namespaced_pod("default", b.pod("p", labels={"a": "1", "b": "2"}, gates=["g"]))
    p = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": None, "c": "3"}}},
                                  _content_type="application/merge-patch+json")
    assert p.metadata.labels == {"b": "2", "c": "3"}
    p = core.patch_namespaced_pod("p", "default", [
        {"op": "test", "path": "/metadata/labels/b", "value": "2"},
        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
        {"op": "remove", "path": "/spec/schedulingGates"},
    ])
    assert p.metadata.annotations == {"x": "y"} and p.spec.scheduling_gates is None
    assert api.requests("PATCH")[-1].content_type == "application/json-patch+json"
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("p", "default", [{"op": "test", "path": "/metadata/labels/b", "value": "nope"}])
    assert info.value.status == 422


def test_pod_spec_is_immutable_except_allowed_fields(api, core):
    core.create_namespaced_pod("default", b.pod("p"))
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "n1"}})
    assert info.value.status == 422 and "pod updates may not change fields" in status_of(info.value)["message"]
    p = core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "main", "image": "busybox:1"}]}})
    assert p.spec.containers[0].image == "busybox:1"


def test_status_subresource(api, core):
    core.create_namespaced_pod("default", b.pod("p"))
    p = core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert p.status.phase == "Running" and p.status.qos_class == "BestEffort"
    # the main resource ignores status changes (and so does not bump the rv)
    rv = p.metadata.resource_version
    p = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert p.status.phase == "Running" and p.metadata.resource_version == rv
    # status writes don't change the spec
    p = core.patch_namespaced_pod_status("p", "default", {"spec": {"nodeName": "sneaky"}, "status": {"podIP": "10.0.0.1"}})
    assert p.spec.node_name is None and p.status.pod_ip == "10.0.0.1"


@pytest.mark.parametrize("how", ["strategic", "merge", "json", "replace"])
def test_resource_version_precondition_conflicts(api, core, how):
    core.create_namespaced_pod("default", b.pod("p"))
    stale = core.read_namespaced_pod("p", "default")
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"bump": "1"}}})
    with pytest.raises(ApiException) as info:
        if how == "strategic":
            core.patch_namespaced_pod("p", "default", {"metadata": {"resourceVersion": stale.metadata.resource_version,
                                                                    "labels": {"x": "1"}}})
        elif how == "merge":
            core.patch_namespaced_pod("p", "default", {"metadata": {"resourceVersion": stale.metadata.resource_version}},
                                      _content_type="application/merge-patch+json")
        elif how == "json":
            core.patch_namespaced_pod("p", "default", [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": stale.metadata.resource_version}])
        else:
            stale.metadata.labels = {"x": "1"}
            core.replace_namespaced_pod("p", "default", stale)
    st = status_of(info.value)
    assert info.value.status == 409 and st["reason"] == "Conflict"
    assert st["message"] == ('Operation cannot be fulfilled on pods "p": the object has been modified; '
                             "please apply your changes to the latest version and try again")
    assert "x" not in (core.read_namespaced_pod("p", "default").metadata.labels or {})


def test_replace_with_current_resource_version_and_noop_writes(api, core):
    core.create_namespaced_pod("default", b.pod("p"))
    cur = core.read_namespaced_pod("p", "default")
    cur.metadata.labels = {"k": "v"}
    updated = core.replace_namespaced_pod("p", "default", cur)
    assert int(updated.metadata.resource_version) > int(cur.metadata.resource_version)
    rv = api.resource_version
    same = core.replace_namespaced_pod("p", "default", updated)  # unchanged object: no write
    assert same.metadata.resource_version == updated.metadata.resource_version and api.resource_version == rv
    assert core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"k": "v"}}}).metadata.resource_version \
        == updated.metadata.resource_version


# ---------------------------------------------------------------- delete


def test_delete_with_uid_and_resource_version_preconditions(api, core):
    created = core.create_namespaced_pod("default", b.pod("p"))
    for pre in ({"uid": "00000000-0000-0000-0000-000000000000"}, {"resourceVersion": "1"}):
        with pytest.raises(ApiException) as info:
            core.delete_namespaced_pod("p", "default", body=client.V1DeleteOptions(preconditions=pre))
        assert info.value.status == 409 and "Precondition failed" in status_of(info.value)["message"]
    deleted = core.delete_namespaced_pod(
        "p", "default", body=client.V1DeleteOptions(preconditions={"uid": created.metadata.uid}, grace_period_seconds=30))
    assert deleted.metadata.name == "p" and deleted.kind == "Pod"
    assert api.get("Pod", "default", "p") is None
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p", "default")
    assert info.value.status == 404


def test_finalizers_delay_deletion(api, core, collectors):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "finalizers": ["example.com/keep"]}})
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    col = collectors(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=2)
    core.delete_namespaced_config_map("cm", "default")
    cm = core.read_namespaced_config_map("cm", "default")
    assert cm.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}},
                                     _content_type="application/merge-patch+json")
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("cm", "default")
    col.wait_for(3)
    assert [t for t, _, _ in col.summary()] == ["MODIFIED", "MODIFIED", "DELETED"]


def test_delete_collection_with_label_selector(api, core):
    for i in range(4):
        api.create(b.pod(f"p{i}", labels={"grp": "a" if i % 2 else "b"}))
    core.delete_collection_namespaced_pod("default", label_selector="grp=a")
    assert [p["metadata"]["name"] for p in api.list("pods")] == ["p0", "p2"]


def test_graceful_pod_deletion_option():
    with FakeApiServer(graceful_pod_deletion=True, grace_period_scale=0.01) as api:
        api.create(b.pod("bound", node="n1", phase="Running"))
        api.create(b.pod("pending"))
        with api.api_client() as c:
            core = client.CoreV1Api(c)
            p = core.delete_namespaced_pod("bound", "default")  # 30 s grace * 0.01
            assert p.metadata.deletion_timestamp is not None and p.metadata.deletion_grace_period_seconds == 30
            core.delete_namespaced_pod("pending", "default")  # unscheduled: immediate
            assert api.get("Pod", "default", "pending") is None
            deadline = time.monotonic() + 3
            while api.get("Pod", "default", "bound") is not None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert api.get("Pod", "default", "bound") is None


def test_dry_run_does_not_persist(api, core):
    core.create_namespaced_pod("default", b.pod("p"), dry_run="All")
    assert api.get("Pod", "default", "p") is None
    rv = api.resource_version
    core.create_namespaced_pod("default", b.pod("p"))
    core.delete_namespaced_pod("p", "default", dry_run="All")
    assert api.get("Pod", "default", "p") is not None and api.resource_version == rv + 1


# ---------------------------------------------------------------- malformed requests


@pytest.mark.parametrize(
    "method,path,body,content_type,code",
    [
        ("POST", "/api/v1/namespaces/default/pods", b"{not json", "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"[1, 2]", "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"", "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b'{"metadata": "x"}', "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods",
         b'{"metadata": {"name": "p", "labels": {"a": 1}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}',
         "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b'{"kind": "Node", "metadata": {"name": "p"}}', "application/json", 400),
        ("POST", "/api/v1/namespaces/other/pods", b'{"metadata": {"name": "p", "namespace": "default"}}',
         "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"\xff\xfe", "application/json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"a: [", "application/yaml", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"<pod/>", "application/xml", 415),
        ("PATCH", "/api/v1/namespaces/default/pods/p", b"{bad", "application/merge-patch+json", 400),
        ("PATCH", "/api/v1/namespaces/default/pods/p", b'{"spec": {}}', "application/json-patch+json", 400),
        ("PATCH", "/api/v1/namespaces/default/pods/p", b'[{"op": "explode", "path": "/x"}]', "application/json-patch+json", 400),
        ("PATCH", "/api/v1/namespaces/default/pods/p", b'{"a": 1}', "application/json", 415),
        ("PATCH", "/api/v1/namespaces/default/pods/p", b"metadata: {}", "application/apply-patch+yaml", 415),
        ("PUT", "/api/v1/namespaces/default/pods/other", b'{"metadata": {"name": "p"}}', "application/json", 400),
        ("DELETE", "/api/v1/namespaces/default/pods/p", b'{"gracePeriodSeconds": "soon"}', "application/json", 400),
        ("GET", "/api/v1/pods?labelSelector=a+in+(b", None, "application/json", 400),
        ("GET", "/api/v1/pods?fieldSelector=spec.bogus%3Dx", None, "application/json", 400),
        ("GET", "/api/v1/pods?watch=true&resourceVersion=abc", None, "application/json", 400),
        ("GET", "/api/v1/pods?limit=many", None, "application/json", 400),
    ],
)
def test_malformed_requests_are_400_status(api, core, method, path, body, content_type, code):
    core.create_namespaced_pod("default", b.pod("p"))
    status, resp = raw(api, method, path, body, content_type, encode=False)
    assert status == code, resp
    assert resp["kind"] == "Status" and resp["status"] == "Failure" and resp["code"] == code
    # the server is still healthy afterwards
    assert core.read_namespaced_pod("p", "default").metadata.name == "p"


def test_unknown_paths(api):
    assert raw(api, "GET", "/api/v1/widgets")[0] == 404
    assert raw(api, "GET", "/apis/example.com/v1/things")[0] == 404
    assert raw(api, "GET", "/api/v1/pods/p")[0] == 404  # namespaced object without namespace
    assert raw(api, "POST", "/api/v1/pods", {"metadata": {"name": "x"}})[0] == 405
    assert raw(api, "GET", "/nonsense")[0] == 404


# ---------------------------------------------------------------- custom resources


def test_podgroup_crd_crud(api, custom):
    grp, ver, plural = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
    created = custom.create_namespaced_custom_object(grp, ver, "default", plural, b.podgroup("pg", min_member=3))
    assert created["metadata"]["resourceVersion"] and created["kind"] == "PodGroup"
    patched = custom.patch_namespaced_custom_object(grp, ver, "default", plural, "pg", {"spec": {"minMember": 4}})
    assert patched["spec"]["minMember"] == 4 and patched["metadata"]["generation"] == 2
    st = custom.patch_namespaced_custom_object_status(grp, ver, "default", plural, "pg", {"status": {"phase": "Running"}})
    assert st["status"] == {"phase": "Running"} and st["metadata"]["generation"] == 2
    listed = custom.list_namespaced_custom_object(grp, ver, "default", plural)
    assert listed["kind"] == "PodGroupList" and listed["items"][0]["kind"] == "PodGroup"
    # strategic merge is not supported for custom resources; replace requires a resourceVersion
    status, _ = raw(api, "PATCH", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/pg",
                    {"spec": {"minMember": 1}}, "application/strategic-merge-patch+json")
    assert status == 415
    body = dict(patched)
    body["metadata"] = {"name": "pg"}
    status, resp = raw(api, "PUT", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/pg", body)
    assert status == 422 and "must be specified for an update" in resp["message"]


def test_podgroup_crd_absent_is_404_and_can_be_installed():
    with FakeApiServer(crds=()) as api, api.api_client() as c:
        custom = client.CustomObjectsApi(c)
        with pytest.raises(ApiException) as info:
            custom.list_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", "default", "podgroups")
        assert info.value.status == 404
        groups = [g.name for g in client.ApisApi(c).get_api_versions().groups]
        assert "scheduling.x-k8s.io" not in groups and "coordination.k8s.io" in groups
        api.enable_crd("podgroups")
        assert custom.list_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", "default", "podgroups")["items"] == []
        assert "scheduling.x-k8s.io" in [g.name for g in client.ApisApi(c).get_api_versions().groups]


# ---------------------------------------------------------------- patch library (pure functions)


@pytest.mark.parametrize(
    "original,patch,expected",
    [
        ({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}},
         {"spec": {"containers": [{"name": "b", "image": "3"}]}},
         {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "3"}]}}),
        ({"spec": {"containers": [{"name": "a"}]}},
         {"spec": {"containers": [{"name": "c", "image": "x"}]}},
         {"spec": {"containers": [{"name": "a"}, {"name": "c", "image": "x"}]}}),
        ({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}},
         {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
         {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}}),
        ({"spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}]}},
         {"spec": {"schedulingGates": [{"name": "a", "$patch": "delete"}]}},
         {"spec": {"schedulingGates": [{"name": "b"}]}}),
        ({"spec": {"schedulingGates": [{"name": "a"}]}}, {"spec": {"schedulingGates": None}}, {"spec": {}}),
        ({"spec": {"tolerations": [{"key": "a"}]}}, {"spec": {"tolerations": [{"key": "b"}]}},
         {"spec": {"tolerations": [{"key": "b"}]}}),  # no merge key: replaced
        ({"metadata": {"finalizers": ["a"]}}, {"metadata": {"finalizers": ["b", "a"]}},
         {"metadata": {"finalizers": ["a", "b"]}}),
        ({"metadata": {"labels": {"a": "1", "b": "2"}}}, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
         {"metadata": {"labels": {"c": "3"}}}),
        ({"spec": {"x": 1, "y": 2}}, {"spec": {"$retainKeys": ["x"], "x": 5}}, {"spec": {"x": 5}}),
    ],
)
def test_strategic_merge_patch_table(original, patch, expected):
    before = json.dumps(original, sort_keys=True)
    assert strategic_merge_patch(original, patch) == expected
    assert json.dumps(original, sort_keys=True) == before  # inputs are not mutated


@pytest.mark.parametrize(
    "original,patch,expected",
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}, {"a": {"c": 2, "d": 3}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": 1}, {"b": {"c": None}}, {"a": 1, "b": {}}),
    ],
)
def test_merge_patch_table(original, patch, expected):
    assert merge_patch(original, patch) == expected


@pytest.mark.parametrize(
    "ops,expected,error",
    [
        ([{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3], "b": {"c": "d"}}, None),
        ([{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2], "b": {"c": "d"}}, None),
        ([{"op": "remove", "path": "/a/1"}], {"a": [1], "b": {"c": "d"}}, None),
        ([{"op": "replace", "path": "/b/c", "value": "e"}], {"a": [1, 2], "b": {"c": "e"}}, None),
        ([{"op": "move", "from": "/b/c", "path": "/z"}], {"a": [1, 2], "b": {}, "z": "d"}, None),
        ([{"op": "copy", "from": "/a", "path": "/b/a"}], {"a": [1, 2], "b": {"c": "d", "a": [1, 2]}}, None),
        ([{"op": "test", "path": "/b/c", "value": "x"}], None, PatchApplyError),
        ([{"op": "remove", "path": "/missing"}], None, PatchApplyError),
        ([{"op": "replace", "path": "/a/9", "value": 1}], None, PatchApplyError),
        ([{"op": "bogus", "path": "/a"}], None, PatchFormatError),
        ({"op": "add"}, None, PatchFormatError),
    ],
)
def test_json_patch_table(ops, expected, error):
    doc = {"a": [1, 2], "b": {"c": "d"}}
    if error is not None:
        with pytest.raises(error):
            json_patch(doc, ops)
    else:
        assert json_patch(doc, ops) == expected
    assert doc == {"a": [1, 2], "b": {"c": "d"}}
