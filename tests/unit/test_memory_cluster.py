"""MemoryCluster and cluster files: loading, writes with API-server-like preconditions."""

from __future__ import annotations

from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod

from extender.cluster.memory import MemoryCluster
from extender.cluster.objects import ClusterFileError, load_objects
from extender.framework.handle import WriteError


class Sink:
    def __init__(self) -> None:
        self.pods: dict[str, Any] = {}
        self.removed: list[str] = []
        self.synced = False

    def upsert_node(self, raw: Any) -> None: ...
    def remove_node(self, name: str) -> None: ...
    def upsert_pod(self, raw: Any) -> None:
        self.pods[raw["metadata"]["name"]] = raw
    def remove_pod(self, raw: Any) -> None:
        self.removed.append(raw["metadata"]["name"])
    def upsert_pdb(self, raw: Any) -> None: ...
    def remove_pdb(self, raw: Any) -> None: ...
    def upsert_pod_group(self, raw: Any) -> None: ...
    def remove_pod_group(self, raw: Any) -> None: ...
    def upsert_elastic_quota(self, raw: Any) -> None: ...
    def remove_elastic_quota(self, raw: Any) -> None: ...

    def mark_synced(self) -> None:
        self.synced = True


def test_list_documents_and_priority_classes() -> None:
    objs = load_objects("""
apiVersion: v1
kind: List
items:
- {kind: Node, metadata: {name: n1}}
- {kind: Pod, metadata: {name: p}, spec: {priorityClassName: high, containers: []}}
---
{kind: PriorityClass, metadata: {name: high}, value: 900}
---
{kind: PriorityClass, metadata: {name: default}, value: 5, globalDefault: true}
---
{kind: Pod, metadata: {name: q}, spec: {containers: []}}
---
{kind: ConfigMap, metadata: {name: ignored}}
""")
    assert [n["metadata"]["name"] for n in objs["Node"]] == ["n1"]
    assert {p["metadata"]["name"]: p["spec"]["priority"] for p in objs["Pod"]} == {"p": 900, "q": 5}


@pytest.mark.parametrize("text, fragment", [
    ("a: [", "not valid YAML"), ("- 1\n- 2", "expected a Kubernetes object"),
    ("kind: Node\nmetadata: {}", "needs metadata.name"), ("kind: Pod\nmetadata: {name: p}", "needs a spec"),
])
def test_bad_files_name_the_document(text: str, fragment: str) -> None:
    with pytest.raises(ClusterFileError, match=fragment) as err:
        load_objects(text, "f.yaml")
    assert "f.yaml" in str(err.value)


def cluster() -> MemoryCluster:
    return MemoryCluster(cluster_objects([make_node("n1").obj(), make_node("n2").obj()],
                                         [make_pod("p").uid("u1").obj()]))


def test_bind_preconditions_like_the_api_server() -> None:
    c = cluster()
    sink = Sink()
    c.start(sink)
    assert sink.synced
    with pytest.raises(WriteError) as err:
        c.bind("default", "p", "wrong", "n1")
    assert err.value.conflict
    c.bind("default", "p", "u1", "n1")
    assert sink.pods["p"]["spec"]["nodeName"] == "n1", "the change is delivered before bind returns"
    c.bind("default", "p", "u1", "n1")  # same node: success
    with pytest.raises(WriteError, match="already assigned"):
        c.bind("default", "p", "u1", "n2")
    with pytest.raises(WriteError, match="not found"):
        c.bind("default", "nope", "", "n1")


def test_patch_metadata_with_resource_version_precondition() -> None:
    c = cluster()
    rv = c.get_pod("default", "p")["metadata"]["resourceVersion"]
    c.patch_pod_metadata("default", "p", annotations={"a": "1"}, resource_version=rv)
    with pytest.raises(WriteError) as err:
        c.patch_pod_metadata("default", "p", annotations={"a": "2"}, resource_version=rv)
    assert err.value.conflict
    c.patch_pod_metadata("default", "p", annotations={"a": None})
    assert c.get_pod("default", "p")["metadata"]["annotations"] == {}


def test_status_update_merges_conditions_by_type_and_checks_the_uid() -> None:
    c = cluster()
    sink = Sink()
    c.start(sink)
    c.update_pod_status("default", "p", "u1", {"conditions": [{"type": "Ready", "status": "False"}]})
    c.update_pod_status("default", "p", "u1", {"nominatedNodeName": "n1", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
    status = sink.pods["p"]["status"]
    assert status["nominatedNodeName"] == "n1" and status["phase"] == "Pending"
    assert [c["type"] for c in status["conditions"]] == ["Ready", "PodScheduled"]
    c.update_pod_status("default", "p", "u1", {"nominatedNodeName": None, "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]})
    status = c.get_pod("default", "p")["status"]
    assert "nominatedNodeName" not in status
    assert [(c["type"], c.get("reason")) for c in status["conditions"]] == [("Ready", None),
                                                                          ("PodScheduled", "SchedulerError")]
    with pytest.raises(WriteError) as err:
        c.update_pod_status("default", "p", "other-uid", {"nominatedNodeName": "n1"})
    assert err.value.conflict
    with pytest.raises(WriteError, match="not found"):
        c.update_pod_status("default", "nope", "", {"nominatedNodeName": "n1"})


def test_eviction_honours_pod_disruption_budgets() -> None:
    pods = [make_pod(f"w{i}").uid(f"w{i}").labels(app="w").node("n1").obj() for i in range(2)]
    objs = cluster_objects([make_node("n1").obj()], pods)
    objs["PodDisruptionBudget"] = [{"metadata": {"name": "pdb", "namespace": "default"},
                                    "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "w"}}}}]
    c = MemoryCluster(objs)
    with pytest.raises(WriteError, match="disruption budget"):
        c.evict("default", "w0", "w0")
    objs["PodDisruptionBudget"][0]["spec"]["minAvailable"] = 1
    c = MemoryCluster(objs)
    sink = Sink()
    c.start(sink)
    c.evict("default", "w0", "w0")
    assert sink.removed == ["w0"] and c.get_pod("default", "w0") is None


def test_malformed_pods_are_skipped_and_counted() -> None:
    c = MemoryCluster(cluster_objects([make_node("n1").obj()], [
        {"metadata": {"name": "bad"}, "spec": {"containers": [{"resources": {"requests": {"example.com/gpu": "x"}}}]}}]))

    class Strict(Sink):
        def upsert_pod(self, raw: Any) -> None:
            raise ValueError("bad quantity")

    c.start(Strict())
    assert c.skipped == 1


def test_demo_cluster_ships_in_the_package() -> None:
    demo = MemoryCluster.demo()
    assert {n["metadata"]["name"] for n in demo.nodes()} >= {"gpu-node-1", "gpu-node-2"}


# ---- graceful termination (a kubelet emulated) ------------------------------------------------------------------


class _Kubelet:
    """Records what the cluster asks it to finish; ``finish_all`` ends those terminations."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, Any]] = []

    def __call__(self, seconds: float, finish: Any) -> str:
        self.asked.append((seconds, finish))
        return f"T+{seconds:g}"

    def finish_all(self) -> None:
        for _, finish in self.asked:
            finish()


def _graceful(*pods: dict[str, Any], pdbs: list[dict[str, Any]] | None = None) -> tuple[MemoryCluster, _Kubelet]:
    objs = cluster_objects([make_node("n1").obj()], list(pods))
    objs["PodDisruptionBudget"] = pdbs or []
    cluster = MemoryCluster(objs)
    kubelet = _Kubelet()
    cluster.graceful(kubelet)
    return cluster, kubelet


def _bound(name: str = "p", **spec: Any) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").node("n1").obj()
    pod["spec"].update(spec)
    return pod


GRACEFUL = [
    # id, the pod, how it is deleted, the grace it terminates for (None: gone at once)
    ("bound-default-grace", _bound(), lambda c: c.delete_pod("default", "p"), 30),
    ("bound-own-grace", _bound(terminationGracePeriodSeconds=5), lambda c: c.delete_pod("default", "p"), 5),
    ("evicted-own-grace", _bound(terminationGracePeriodSeconds=5), lambda c: c.evict("default", "p", "u-p"), 5),
    ("evicted-grace-asked", _bound(terminationGracePeriodSeconds=5), lambda c: c.evict("default", "p", "u-p", 7), 7),
    ("grace-zero", _bound(terminationGracePeriodSeconds=5), lambda c: c.delete_pod("default", "p", 0), None),
    ("not-bound", make_pod("p").uid("u-p").obj(), lambda c: c.delete_pod("default", "p"), None),
    ("terminal", {**_bound(), "status": {"phase": "Succeeded"}}, lambda c: c.delete_pod("default", "p"), None),
]


@pytest.mark.parametrize("pod, delete, grace", [c[1:] for c in GRACEFUL], ids=[c[0] for c in GRACEFUL])
def test_a_bound_pod_terminates_gracefully_when_a_kubelet_is_emulated(pod: dict[str, Any], delete: Any,
                                                                      grace: int | None) -> None:
    cluster, kubelet = _graceful(pod)
    sink = Sink()
    cluster.start(sink)
    delete(cluster)
    if grace is None:
        assert cluster.get_pod("default", "p") is None and kubelet.asked == [] and sink.removed == ["p"]
        return
    terminating = cluster.get_pod("default", "p")
    assert terminating is not None and terminating["spec"]["nodeName"] == "n1", "still on its node"
    assert terminating["metadata"]["deletionTimestamp"] == f"T+{grace}"
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == grace
    assert sink.pods["p"]["metadata"]["deletionTimestamp"] == f"T+{grace}" and sink.removed == [], \
        "the watch shows it deleting"
    assert [s for s, _ in kubelet.asked] == [grace]
    assert cluster.delete_pod("default", "p") and len(kubelet.asked) == 1, "deleting it again changes nothing"
    kubelet.finish_all()
    assert cluster.get_pod("default", "p") is None and sink.removed == ["p"]


def test_without_a_kubelet_a_bound_pod_goes_at_once() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").obj()], [_bound()]))
    assert cluster.delete_pod("default", "p") and cluster.get_pod("default", "p") is None


def test_the_kubelet_finishing_late_leaves_a_new_pod_of_the_same_name() -> None:
    cluster, kubelet = _graceful(_bound())
    cluster.delete_pod("default", "p")
    cluster.add_pod(make_pod("p").uid("u-p2").obj())  # replaced by a pod of another UID meanwhile
    kubelet.finish_all()
    replacement = cluster.get_pod("default", "p")
    assert replacement is not None and replacement["metadata"]["uid"] == "u-p2"


def test_a_terminating_pod_is_evicted_without_a_budget_check_and_counts_unhealthy() -> None:
    """The Eviction API accepts a pod that is deleting already; the disruption controller does not
    count such a pod healthy."""
    pods = [_bound("a"), _bound("b")]
    for p in pods:
        p["metadata"]["labels"] = {"app": "x"}
    cluster, kubelet = _graceful(*pods, pdbs=[{"metadata": {"name": "x", "namespace": "default"},
                                               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}])
    cluster.evict("default", "a", "u-a")
    cluster.evict("default", "a", "u-a")  # again: accepted, nothing more happens
    assert len(kubelet.asked) == 1
    with pytest.raises(WriteError, match="disruption budget"):
        cluster.evict("default", "b", "u-b")  # a is not healthy any more: b is the last one


@pytest.mark.parametrize("unavailable, refused", [
    pytest.param("terminating", True, id="one-terminating"),
    pytest.param("pending", True, id="one-not-on-a-node"),
    pytest.param("none", False, id="all-available"),
])
def test_max_unavailable_counts_the_pods_already_unavailable(unavailable: str, refused: bool) -> None:
    """maxUnavailable: 1 over the selected pods: with one of them already unavailable (deleting,
    or not on a node) the disruption controller allows no eviction more."""
    pods = [_bound("a"), _bound("b")]
    if unavailable == "pending":
        pods.append(make_pod("c").uid("u-c").obj())
    for p in pods:
        p["metadata"]["labels"] = {"app": "x"}
    cluster, kubelet = _graceful(*pods, pdbs=[{"metadata": {"name": "x", "namespace": "default"},
                                               "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}])
    if unavailable == "terminating":
        cluster.evict("default", "a", "u-a")
    if refused:
        with pytest.raises(WriteError, match="disruption budget"):
            cluster.evict("default", "b", "u-b")
    else:
        cluster.evict("default", "b", "u-b")
        assert cluster.get_pod("default", "b")["metadata"]["deletionTimestamp"]


def test_a_percentage_budget_is_counted_too() -> None:
    """minAvailable 50% over two pods: one may go, the second not (the same arithmetic as the
    extender's preemption, percentages included)."""
    pods = [_bound("a"), _bound("b")]
    for p in pods:
        p["metadata"]["labels"] = {"app": "x"}
    cluster, _ = _graceful(*pods, pdbs=[{"metadata": {"name": "x", "namespace": "default"},
                                        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "x"}}}}])
    cluster.evict("default", "a", "u-a")
    with pytest.raises(WriteError, match="disruption budget"):
        cluster.evict("default", "b", "u-b")


# id, the budget's spec (over three healthy pods a, b, c), how many evictions it grants in a row
EVICTED_KEEP_COUNTING = [
    ("min-available-int", {"minAvailable": 2}, 1),
    ("min-available-percent", {"minAvailable": "50%"}, 1),  # 50% of 3 expected: 2 must stay
    ("max-unavailable-int", {"maxUnavailable": 1}, 1),
    ("max-unavailable-percent", {"maxUnavailable": "33%"}, 1),  # 33% of 3 expected: 1 may go
    ("max-unavailable-two", {"maxUnavailable": 2}, 2),
]


@pytest.mark.parametrize("graceful", [False, True], ids=["gone-at-once", "kubelet-finished"])
@pytest.mark.parametrize("spec, granted", [c[1:] for c in EVICTED_KEEP_COUNTING],
                         ids=[c[0] for c in EVICTED_KEEP_COUNTING])
def test_an_evicted_pod_keeps_counting_as_expected_until_it_is_replaced(spec: dict[str, Any], granted: int,
                                                                        graceful: bool) -> None:
    """The disruption controller takes the expected count of a percentage or ``maxUnavailable``
    budget from the workload's scale, and the API server records each granted eviction in
    ``status.disruptedPods``: an evicted pod, gone, is one expected pod down until its controller
    replaces it - not one expected pod fewer, which would grant another eviction."""
    pods = [_bound(n) for n in "abc"]
    for p in pods:
        p["metadata"]["labels"] = {"app": "x"}
    cluster, kubelet = _graceful(*pods, pdbs=[{"metadata": {"name": "x", "namespace": "default"},
                                               "spec": {**spec, "selector": {"matchLabels": {"app": "x"}}}}])
    if not graceful:
        cluster.graceful(None)
    for name in "abc"[:granted]:
        cluster.evict("default", name, f"u-{name}")
    kubelet.finish_all()
    assert [p["metadata"]["name"] for p in cluster.pods()] == list("abc"[granted:])
    last = "abc"[granted]
    with pytest.raises(WriteError, match="disruption budget"):
        cluster.evict("default", last, f"u-{last}")
    # the controller replaces one (under another name, as a ReplicaSet does): one more may go
    replacement = _bound("a2")
    replacement["metadata"]["labels"] = {"app": "x"}
    cluster.add_pod(replacement)
    cluster.evict("default", last, f"u-{last}")


def test_a_replacement_of_the_same_name_and_a_deletion_by_the_owner() -> None:
    """A pod recreated under the evicted one's name (a StatefulSet's) replaces it; a pod its
    owner deletes (not evicted) leaves the expected count, as a scale-down does."""
    pods = [_bound(n) for n in "abc"]
    for p in pods:
        p["metadata"]["labels"] = {"app": "x"}
    cluster = MemoryCluster({**cluster_objects([make_node("n1").obj()], pods), "PodDisruptionBudget": [
        {"metadata": {"name": "x", "namespace": "default"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}]})
    cluster.evict("default", "a", "u-a")
    cluster.add_pod({**_bound("a"), "metadata": {"name": "a", "uid": "u-a2", "labels": {"app": "x"}}})
    cluster.evict("default", "b", "u-b")
    with pytest.raises(WriteError, match="disruption budget"):
        cluster.evict("default", "c", "u-c")
    cluster.delete_pod("default", "a")  # scaled down: 2 expected (b evicted, c), c may not go yet
    with pytest.raises(WriteError, match="disruption budget"):
        cluster.evict("default", "c", "u-c")


def _owned(name: str, owner: str, uid: bool = True) -> dict[str, Any]:
    pod = _bound(name)
    pod["metadata"]["labels"] = {"app": "web"}
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                           "controller": True, **({"uid": f"rs-{owner}"} if uid else {})}]
    return pod


@pytest.mark.parametrize("uid", [True, False], ids=["owner-uid", "no-owner-uid"])
@pytest.mark.parametrize("new_pod, granted", [
    ("b2", False),  # B scaled up: 4 expected, a1 still missing - a2 may not go
    ("a3", True),  # A replaced a1: 3 expected, all there - a2 may go
], ids=["another-workload", "same-workload"])
def test_only_a_pod_of_the_evicted_ones_workload_replaces_it(new_pod: str, granted: bool, uid: bool) -> None:
    """One budget (maxUnavailable 1) over two ReplicaSets, A (a1, a2) and B (b1): the disruption
    controller adds their scales. a1 is evicted and gone. A new pod of B is B's scale growing, not
    a1 back (found in review: it was taken for a1's replacement, and a2's eviction granted with
    2 of 4 pods unavailable) - also when a hand-written file leaves the owners' uids out."""
    cluster = MemoryCluster({**cluster_objects([make_node("n1").obj()],
                                               [_owned("a1", "A", uid), _owned("a2", "A", uid),
                                                _owned("b1", "B", uid)]),
                             "PodDisruptionBudget": [{"metadata": {"name": "web", "namespace": "default"},
                                                      "spec": {"maxUnavailable": 1,
                                                               "selector": {"matchLabels": {"app": "web"}}}}]})
    cluster.evict("default", "a1", "u-a1")
    cluster.add_pod(_owned(new_pod, new_pod[0].upper(), uid))
    if granted:
        cluster.evict("default", "a2", "u-a2")
    else:
        with pytest.raises(WriteError, match="disruption budget"):
            cluster.evict("default", "a2", "u-a2")


def _web_budget(name: str, allowed: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"maxUnavailable": allowed, "selector": {"matchLabels": {"app": "web"}}}}


@pytest.mark.parametrize("phase, budgets, allowed, refused", [
    ("Running", 1, 5, None),
    ("Running", 1, 0, "disruption budget"),
    ("Running", 2, 5, "more than one PodDisruptionBudget"),  # the API server's 500, whatever they allow
    ("Succeeded", 2, 0, None),  # a terminal pod is evicted without a budget check
    ("Pending", 2, 5, None),  # nor is a Pending one (bound pods stay Pending here: one budget still counts)
    ("Failed", 1, 0, None),
], ids=["one-budget", "one-budget-spent", "two-budgets", "terminal-two-budgets", "terminal-budget-spent",
        "pending-two-budgets"])
def test_the_eviction_api_refuses_a_pod_of_two_budgets_unless_it_is_terminal(phase: str, budgets: int, allowed: int,
                                                                             refused: str | None) -> None:
    """As the API server's eviction subresource: a pod more than one budget covers cannot be
    evicted (500, not a 429: no retry makes it possible); a Succeeded or Failed pod is deleted
    without looking at its budgets."""
    pod = _owned("a1", "A")
    pod["status"] = {"phase": phase}
    cluster = MemoryCluster({**cluster_objects([make_node("n1").obj()], [pod, _owned("a2", "A")]),
                             "PodDisruptionBudget": [_web_budget(f"web{i}", allowed) for i in range(budgets)]})
    if refused:
        with pytest.raises(WriteError, match=refused) as caught:
            cluster.evict("default", "a1", "u-a1")
        assert caught.value.conflict is (refused == "disruption budget")
        assert "a1" in {p["metadata"]["name"] for p in cluster.pods()}
    else:
        cluster.evict("default", "a1", "u-a1")
        assert "a1" not in {p["metadata"]["name"] for p in cluster.pods()}
