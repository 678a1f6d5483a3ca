"""pods/binding, the bindings collection and pods/eviction with PodDisruptionBudgets."""

from __future__ import annotations

import json

import pydantic
import pytest
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
from extender.testing.fakeapi import builders as b


def binding(pod: str, node: str, uid: str | None = None) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod, uid=uid),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


# ---------------------------------------------------------------- binding


def test_pod_binding_subresource_success(api, core):
    api.create(b.node("n1"))
    pod = core.create_namespaced_pod("default", b.pod("p"))
    resp = core.create_namespaced_pod_binding("p", "default", binding("p", "n1", pod.metadata.uid),
                                              _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                     "code": 201}
    bound = core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    assert int(bound.metadata.resource_version) > int(pod.metadata.resource_version)


def test_bindings_collection_and_the_clients_deserialization_issue(api, core):
    core.create_namespaced_pod("default", b.pod("p1"))
    core.create_namespaced_pod("default", b.pod("p2"))
    # the server answers a Status (as the real one does) ...
    resp = core.create_namespaced_binding("default", binding("p1", "n1"), _preload_content=False)
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    assert api.get("Pod", "default", "p1")["spec"]["nodeName"] == "n1"
    # ... which the python client cannot turn into the V1Binding it declares: the bind happened anyway
    with pytest.raises((pydantic.ValidationError, ValueError)):
        core.create_namespaced_binding("default", binding("p2", "n2"))
    assert api.get("Pod", "default", "p2")["spec"]["nodeName"] == "n2"


@pytest.mark.parametrize(
    "setup,bind_kwargs,code,needle",
    [
        (lambda api: api.bind("default", "p", "n0"), {}, 409, 'pod p is already assigned to node "n0"'),
        (lambda api: None, {"uid": "11111111-1111-4111-8111-111111111111"}, 409, "Precondition failed: UID in precondition"),
        (lambda api: api.patch("Pod", "default", "p", {"spec": {"schedulingGates": [{"name": "g"}]}}), {}, 409,
         "non-empty .spec.schedulingGates"),
        (lambda api: api.delete("Pod", "default", "p"), {}, 404, 'pods "p" not found'),
    ],
    ids=["already-bound", "uid-mismatch", "gated", "missing"],
)
def test_binding_failures(api, core, setup, bind_kwargs, code, needle):
    api.create(b.pod("p"))
    setup(api)
    before = api.get("Pod", "default", "p")
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("p", "default", binding("p", "n1", **bind_kwargs), _preload_content=False)
    st = status_of(info.value)
    assert info.value.status == code and st["code"] == code
    assert needle in st["message"]
    if code == 409:
        assert st["reason"] == "Conflict"
    assert api.get("Pod", "default", "p") == before  # nothing changed


def test_binding_requires_target_name(api, core):
    api.create(b.pod("p"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding(
            "p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": ""}}, _preload_content=False)
    assert info.value.status == 422


@pytest.mark.parametrize("stale", [True, False], ids=["stale resourceVersion: 409, nothing written",
                                                      "current resourceVersion: bound with the annotations"])
def test_binding_resource_version_precondition(api, core, stale):
    created = api.create(b.pod("p"))
    rv = created["metadata"]["resourceVersion"]
    if stale:
        api.patch("Pod", "default", "p", {"metadata": {"labels": {"touched": "yes"}}})
    before = api.get("Pod", "default", "p")
    body = {"metadata": {"name": "p", "uid": created["metadata"]["uid"], "resourceVersion": rv,
                         "annotations": {"x/allocation": "n1"}},
            "target": {"kind": "Node", "name": "n1"}}
    if stale:
        with pytest.raises(ApiException) as info:
            core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        assert info.value.status == 409
        assert "Precondition failed: ResourceVersion in precondition" in status_of(info.value)["message"]
        assert api.get("Pod", "default", "p") == before
    else:
        core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        bound = api.get("Pod", "default", "p")
        assert bound["spec"]["nodeName"] == "n1" and bound["metadata"]["annotations"] == {"x/allocation": "n1"}


def test_binding_annotations_are_copied(api, core):
    api.create(b.pod("p"))
    body = {"metadata": {"name": "p", "annotations": {"scheduler/decision": "n1"}}, "target": {"kind": "Node", "name": "n1"}}
    core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert api.get("Pod", "default", "p")["metadata"]["annotations"] == {"scheduler/decision": "n1"}


# ---------------------------------------------------------------- eviction


def evict(core: client.CoreV1Api, name: str, namespace: str = "default", **delete_options) -> int:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                             delete_options=client.V1DeleteOptions(**delete_options) if delete_options else None)
    resp = core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
    assert json.loads(resp.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                     "code": 201}
    return resp.status


def test_eviction_without_pdb_deletes(api, core):
    api.create(b.pod("p", node="n1", phase="Running", labels={"app": "x"}))
    assert evict(core, "p") == 201
    assert api.get("Pod", "default", "p") is None


def test_eviction_of_missing_pod_is_404(api, core):
    with pytest.raises(ApiException) as info:
        evict(core, "ghost")
    assert info.value.status == 404


@pytest.mark.parametrize(
    "budget,running,evictable",
    [
        ({"min_available": 2}, 2, 0),
        ({"min_available": 2}, 3, 1),
        ({"max_unavailable": 1}, 3, 1),
        ({"max_unavailable": 0}, 3, 0),
        ({"min_available": "50%"}, 4, 2),
        ({"max_unavailable": "34%"}, 3, 2),  # 34% of 3 rounds up to 2 unavailable -> desired healthy 1
    ],
)
def test_eviction_honours_pdb(api, core, budget, running, evictable):
    api.create(b.pdb("budget", match_labels={"app": "web"}, **budget))
    for i in range(running):
        api.create(b.pod(f"web-{i}", node="n1", phase="Running", ready=True, labels={"app": "web"}))
    api.create(b.pod("unrelated", node="n1", phase="Running", labels={"app": "db"}))
    evicted = 0
    for i in range(running):
        try:
            evict(core, f"web-{i}")
            evicted += 1
        except ApiException as exc:
            st = status_of(exc)
            assert exc.status == 429 and st["reason"] == "TooManyRequests"
            assert st["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
            assert st["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert evicted == evictable
    assert len(api.list("pods", label_selector="app=web")) == running - evictable
    assert evict(core, "unrelated") == 201  # not covered by the budget


def test_eviction_ignores_pdb_for_pending_pods_and_allows_unhealthy_when_policy_says_so(api, core):
    api.create(b.pdb("budget", match_labels={"app": "web"}, min_available=5, unhealthy_pod_eviction_policy="AlwaysAllow"))
    api.create(b.pod("pending", labels={"app": "web"}))
    api.create(b.pod("unready", node="n1", phase="Running", ready=False, labels={"app": "web"}))
    api.create(b.pod("ready", node="n1", phase="Running", ready=True, labels={"app": "web"}))
    assert evict(core, "pending") == 201
    assert evict(core, "unready") == 201
    with pytest.raises(ApiException) as info:
        evict(core, "ready")
    assert info.value.status == 429


def test_eviction_with_two_matching_pdbs_is_500(api, core):
    api.create(b.pdb("one", match_labels={"app": "web"}, min_available=0))
    api.create(b.pdb("two", match_labels={"app": "web"}, max_unavailable=1))
    api.create(b.pod("p", node="n1", phase="Running", labels={"app": "web"}))
    with pytest.raises(ApiException) as info:
        evict(core, "p")
    assert info.value.status == 500 and "more than one PodDisruptionBudget" in status_of(info.value)["message"]


def test_eviction_delete_options_preconditions(api, core):
    api.create(b.pod("p", node="n1", phase="Running"))
    with pytest.raises(ApiException) as info:
        evict(core, "p", preconditions=client.V1Preconditions(uid="00000000-0000-4000-8000-000000000000"))
    assert info.value.status == 409
    assert api.get("Pod", "default", "p") is not None


def test_eviction_records_disruption_in_pdb_status_and_sync_confirms_it(api, core, policy):
    api.create(b.pdb("budget", match_labels={"app": "web"}, max_unavailable=1))
    for i in range(3):
        api.create(b.pod(f"web-{i}", node="n1", phase="Running", labels={"app": "web"}))
    assert api.sync_pdb_status() == 1
    st = policy.read_namespaced_pod_disruption_budget("budget", "default").status
    assert (st.current_healthy, st.desired_healthy, st.disruptions_allowed, st.expected_pods) == (3, 2, 1, 3)
    evict(core, "web-0")
    st = policy.read_namespaced_pod_disruption_budget("budget", "default").status
    assert st.disruptions_allowed == 0 and set(st.disrupted_pods) == {"web-0"}
    with pytest.raises(ApiException) as info:  # the evicted replica still counts as expected-but-unhealthy
        evict(core, "web-1")
    assert info.value.status == 429
    # a controller would recreate the replica; once it is back and the budget re-synced, one more may go
    api.create(b.pod("web-3", node="n1", phase="Running", labels={"app": "web"}))
    api.sync_pdb_status()
    st = policy.read_namespaced_pod_disruption_budget("budget", "default").status
    assert st.disrupted_pods is None and st.disruptions_allowed == 1
    evict(core, "web-1")
