"""Gangs, admission and nudges against the fake API server, through the real `kubernetes` client:
PodGroups followed from the CRD, gates lifted over the API, a whole group bound together, a group
that does not fit holding nothing, and a nudge written to the pod."""

from __future__ import annotations

import threading
from typing import Any

from builders import make_pod_group
from test_kube import Extender, api, pod, uid, wait_for  # noqa: F401 - api is a fixture

from extender.testing.fakeapi import FakeApiServer

GANG = {"profiles": [{"schedulerName": "default-scheduler", "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}}}]}
GATE = "kube-extender.io/admission"


def member(name: str, group: str, gated: bool = True) -> dict[str, Any]:
    obj = pod(name, 1, labels={"scheduling.x-k8s.io/pod-group": group})
    if gated:
        obj["spec"]["schedulingGates"] = [{"name": GATE}]
    return obj


def group(name: str, size: int) -> dict[str, Any]:
    obj = make_pod_group(name).min_member(size).timeout(20).obj()
    del obj["metadata"]["uid"], obj["metadata"]["creationTimestamp"]
    return obj


def gates(api: FakeApiServer, name: str) -> list[Any]:
    return api.get("Pod", "default", name)["spec"].get("schedulingGates") or []


def test_a_pod_group_is_admitted_when_complete_then_planned_and_bound_together(api: FakeApiServer) -> None:
    api.create(group("a", 3))
    for i in range(2):
        api.create(member(f"a{i}", "a"))
    ext = Extender(api, **GANG)
    try:
        assert "pod group a has 2 of 3 members" in ext.state.admitter.run_once().held["default/a0"]
        api.create(member("a2", "a"))
        wait_for(lambda: ext.state.cache.pending_pod("default", "a2"), what="the third member")
        assert sorted(ext.state.admitter.run_once().admitted) == ["default/a0", "default/a1", "default/a2"]
        wait_for(lambda: all(ext.state.cache.pending_pod("default", f"a{i}").raw["spec"].get("schedulingGates") in
                             (None, []) for i in range(3)), what="the lifted gates to be watched")
        assert all(gates(api, f"a{i}") == [] for i in range(3))
        targets = {f"a{i}": ext.engine.filter(api.get("Pod", "default", f"a{i}"), ["n1", "n2"]).feasible
                   for i in range(3)}
        assert all(t == ["n1"] for t in targets.values()), targets  # the roomiest node holds all three
        results: dict[str, str] = {}
        threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, ext.engine.bind(
            "default", n, uid(api, n), "n1"))) for n in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert results == {"a0": "", "a1": "", "a2": ""}
        assert all(api.get("Pod", "default", n)["spec"]["nodeName"] == "n1" for n in targets)
        assert ext.engine.queue_state()["reserved"] == []
    finally:
        ext.stop()


def test_a_group_that_does_not_fit_beside_a_planned_one_holds_nothing(api: FakeApiServer) -> None:
    api.create(group("a", 4))
    api.create(group("b", 3))
    for i in range(4):
        api.create(member(f"a{i}", "a", gated=False))
    for i in range(3):
        api.create(member(f"b{i}", "b", gated=False))
    ext = Extender(api, **GANG)
    try:
        assert ext.engine.filter(api.get("Pod", "default", "a0"), ["n1", "n2"]).feasible == ["n1"]
        out = ext.engine.filter(api.get("Pod", "default", "b0"), ["n1", "n2"])
        assert out.feasible == [] and out.unresolvable["n2"].startswith("pod group b does not fit: 2 of 3")
        assert [r["owner"] for r in ext.engine.queue_state()["reserved"]] == ["pod-group/default/a"]
        api.delete("PodGroup", "default", "a")  # without its PodGroup, group a has no size: it stops
        wait_for(lambda: ext.state.cache.pod_group_spec("default", "a") is None, what="the PodGroup deletion")
    finally:
        ext.stop()


def test_a_rejected_pod_is_nudged_through_the_api_when_capacity_frees(api: FakeApiServer) -> None:
    api.create(pod("running", 4))
    ext = Extender(api, requeue={"nudge": True})
    try:
        assert ext.engine.bind("default", "running", uid(api, "running"), "n1") == ""
        api.create(pod("waiting", 3))
        wait_for(lambda: ext.state.cache.pending_pod("default", "waiting"), what="the pending pod")
        assert ext.engine.filter(api.get("Pod", "default", "waiting"), ["n1", "n2"]).feasible == []
        nudger = ext.state.nudger
        assert nudger.run_once() == [], "what its Filter answer already saw does not count"
        api.delete("Pod", "default", "running")
        wait_for(lambda: nudger.run_once() == ["default/waiting"], what="a nudge after the release")
        annotations = api.get("Pod", "default", "waiting")["metadata"].get("annotations") or {}
        assert "kube-extender.io/nudged-at" in annotations
    finally:
        ext.stop()
