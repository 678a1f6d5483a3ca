"""The harness itself: the whole path over the API, what it observes, delays reaching the right
client, replicas that crash and come back."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from extender import __version__
from extender.cluster.kube.client import KubeClient
from extender.framework.handle import WriteError
from extender.testing.fakeapi import FakeApiServer
from extender.testing.harness import (ApiClusterView, DeviceAccounting, GPU, Harness, ProcessExtender, Recorder,
                                      node, pod,
                                      scheduler_user_agent)

EXTENDER = f"kube-extender/{__version__}"
SCHEDULER = "kube-scheduler/v1.30.0 (harness)"


def test_pods_are_bound_through_the_api_and_every_side_is_observed() -> None:
    with Harness(objects=[node("n1", gpus=2), node("n2", gpus=2), node("cpu")]) as h:
        for name in ("a", "b", "c"):
            h.create_pod(pod(name, 1))
        h.create_pod(pod("no-gpu", 0))
        assert h.wait_until(lambda: all(life.bound_at is not None for life in h.lives), timeout=10), h.pending()
        assert {h.pod(n).node for n in ("a", "b", "c")} <= {"n1", "n2"}
        h.delete_pod("a")
        assert h.wait_until(lambda: h.releases, timeout=5)
        release = h.releases[0]
        assert (release.pod, release.node, release.freed, release.how) == \
            ("default/a", h.pod("a").node, {GPU: 1000}, "deleted")
        assert h.pod("a").finished_at == release.time and not h.violations
        counts = h.request_counts()
        # the extender binds the pods it is interested in (one write each: the allocation rides on
        # the Binding); kube-scheduler's default binder binds the one it is not interested in
        assert counts[(EXTENDER, "create", "pods/binding")] == 3
        assert (EXTENDER, "patch", "pods") not in counts
        assert counts[(SCHEDULER, "create", "pods/binding")] == 1
        assert counts[(SCHEDULER, "watch", "pods")] == counts[(EXTENDER, "watch", "pods")] == 1
        assert h.request_counts("kube-scheduler").keys() <= {k for k in counts if k[0] == SCHEDULER}


def test_every_bound_pod_costs_the_extender_one_write_its_binding() -> None:
    with Harness(objects=[node(f"n{i}", gpus=4) for i in range(5)]) as h:
        for i in range(20):
            h.create_pod(pod(f"p{i}", 1))
        assert h.wait_until(lambda: all(life.bound_at is not None for life in h.lives), timeout=20), h.pending()
        writes = [r for r in h.api.requests() if r.user_agent == EXTENDER and r.method in ("POST", "PUT", "PATCH", "DELETE")]
        assert sorted(r.path.rsplit("/", 2)[1] for r in writes) == sorted(f"p{i}" for i in range(20))
        assert {(r.verb, r.resource) for r in writes} == {("create", "pods/binding")}
        assert all(life.node for life in h.lives) and not h.violations


def test_rejections_are_recorded_with_the_status_kube_scheduler_writes() -> None:
    with Harness(objects=[node("n1", gpus=1)]) as h:
        h.create_pod(pod("big", 2))
        assert h.wait_until(lambda: h.pod("big").rejections, timeout=5)
        rejection = h.pod("big").rejections[0]
        assert rejection.outcome == "unschedulable" and rejection.by_extender
        assert "too little allocatable example.com/gpu" in rejection.message

        def condition() -> Any:
            stored = h.api.get("Pod", "default", "big") or {}
            return next((c for c in stored.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None)

        assert h.wait_until(condition, timeout=5)
        assert (condition()["status"], condition()["reason"]) == ("False", "Unschedulable")
        assert h.request_counts()[(SCHEDULER, "patch", "pods/status")] >= 1


def test_a_watch_delay_holds_back_only_its_side() -> None:
    with Harness(objects=[node("n1", gpus=1)], scheduler_delay=0.5) as h:
        h.create_pod(pod("p", 1))
        created = h.pod("p").created
        ext = h.replicas[0].state  # type: ignore[attr-defined]
        assert h.wait_until(lambda: ext.cache.pending_pod("default", "p") is not None, timeout=2)
        assert h.wait_until(lambda: h.pod("p").bound_at is not None, timeout=5)
        first_cycle = next(c for c in h.scheduler.cycles if c.pod == "default/p")  # type: ignore[union-attr]
        assert first_cycle.time - h.t0 - created >= 0.5, "kube-scheduler saw the pod only after its delay"


class NullSink:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_the_scheduler_view_writes_through_the_api_with_the_pods_uid() -> None:
    with FakeApiServer() as api:
        api.create(node("n1", gpus=1))
        view = ApiClusterView(KubeClient(api.api_client(), user_agent=scheduler_user_agent("1.29")), events=False)
        view.start(NullSink())
        try:
            assert view.wait_synced(5)
            uid = view.add_pod(pod("p", 1))["metadata"]["uid"]
            scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
            view.update_pod_status("default", "p", uid, {"nominatedNodeName": "n1", "conditions": [scheduled]})
            assert api.get("Pod", "default", "p")["status"]["nominatedNodeName"] == "n1"
            view.update_pod_status("default", "p", uid, {"nominatedNodeName": None})
            stored = api.get("Pod", "default", "p")["status"]
            assert "nominatedNodeName" not in stored and stored["conditions"] == [scheduled]
            for write in (lambda: view.update_pod_status("default", "p", "other", {"nominatedNodeName": "n1"}),
                          lambda: view.bind("default", "p", "other", "n1")):
                with pytest.raises(WriteError) as err:
                    write()
                assert err.value.conflict
            view.bind("default", "p", uid, "n1")
            assert api.get("Pod", "default", "p")["spec"]["nodeName"] == "n1"
            assert wait_for(lambda: (view.get_pod("default", "p") or {}).get("spec", {}).get("nodeName") == "n1")
            assert (view.delete_pod("default", "p"), view.delete_pod("default", "p")) == (True, False)
            assert [n["metadata"]["name"] for n in view.nodes()] == ["n1"]
            agents = {r.user_agent for r in api.requests()}
            assert agents == {"kube-scheduler/v1.29.0 (harness)"}
        finally:
            view.stop()


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_capacity_tracker_catches_the_write_that_overfills_a_node() -> None:
    recorder = Recorder([GPU])
    with FakeApiServer() as api:
        api.on_commit(recorder.commit)
        api.create(node("n1", gpus=2))
        for name in ("a", "b", "c", "d"):
            api.create(pod(name, 1))
        api.bind("default", "a", "n1")
        api.bind("default", "b", "n1")
        api.patch("Pod", "default", "b", {"status": {"phase": "Succeeded"}}, "merge")  # terminal: frees its GPU
        api.bind("default", "c", "n1")
        assert recorder.violations == []
        api.bind("default", "d", "n1")
        [violation] = recorder.violations
        assert (violation.node, violation.resource, violation.used, violation.allocatable, violation.pods) == \
            ("n1", GPU, 3000, 2000, ["default/a", "default/c", "default/d"])
        api.delete("Pod", "default", "d")
        api.update({**node("n1", gpus=1)})  # allocatable shrinks under two running pods
        assert len(recorder.violations) == 2 and recorder.violations[1].allocatable == 1000
        assert [(r.pod, r.how, r.freed) for r in recorder.releases] == [
            ("default/b", "Succeeded", {GPU: 1000}), ("default/d", "deleted", {GPU: 1000})]
        assert recorder.free() == {"n1": {GPU: -1000}}
        assert not recorder.fits_somewhere({GPU: 1000})


DEVICES = DeviceAccounting("kube-extender.io/device-inventory", "kube-extender.io/devices", "example.com/gpu-memory",
                           "example.com/gpu-compute", GPU)


def device_pod(name: str, memory: int = 0, whole: int = 0) -> dict[str, Any]:
    obj = pod(name, whole)
    if memory:
        obj["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu-memory"] = str(memory)
    return obj


def bind_with_devices(api: FakeApiServer, name: str, node_name: str, devices: list[int], memory: int = 0,
                      whole: bool = False, named: str | None = None) -> None:
    """Bind as the extender does: the device assignment rides on the Binding."""
    grant = {"devices": devices, "memoryMiB": memory, "compute": 0, "exclusive": whole}
    assignment = json.dumps({"node": named or node_name, "containers": {"main": grant}})
    api.store.bind("default", name, {"metadata": {"name": name, "annotations": {"kube-extender.io/devices": assignment}},
                                     "target": {"kind": "Node", "name": node_name}})


def test_the_capacity_tracker_checks_every_device_from_the_assignments() -> None:
    recorder = Recorder([GPU, "example.com/gpu-memory"], devices=DEVICES,
                        ledger_keys=["kube-extender.io/allocation", "kube-extender.io/devices"])
    with FakeApiServer() as api:
        api.on_commit(recorder.commit)
        gpu_node = node("n1", gpus=2)
        gpu_node["metadata"]["annotations"] = {"kube-extender.io/device-inventory":
                                               '{"devices": 2, "memoryMiB": 16384, "unhealthy": [1]}'}
        api.create(gpu_node)
        for name in ("a", "b"):
            api.create(device_pod(name, memory=8192))
            bind_with_devices(api, name, "n1", [0], 8192)
        assert recorder.violations == [] and recorder.leaks == []
        cases = [(device_pod("c", memory=1024), dict(devices=[0], memory=1024), "example.com/gpu-memory on device 0"),
                 (device_pod("d", whole=1), dict(devices=[0], whole=True), "example.com/gpu device 0 held whole and shared"),
                 (device_pod("e", memory=1024), dict(devices=[1], memory=1024), "device 1 (unhealthy)"),
                 (device_pod("f", memory=1024), dict(devices=[0], memory=1024, named="n2"), "no device assignment"),
                 (device_pod("g", memory=4096), dict(devices=[0], memory=1024), "does not cover ask")]
        for obj, grant, problem in cases:
            name = obj["metadata"]["name"]
            api.create(obj)
            bind_with_devices(api, name, "n1", **grant)  # type: ignore[arg-type]
            assert any(problem in v.resource for v in recorder.violations), (problem, recorder.violations)
            api.delete("Pod", "default", name)
            recorder.violations.clear()
        api.create(pod("unbound", 1, annotations={"kube-extender.io/allocation": "{}"}))
        [leak] = recorder.leaks
        assert (leak.pod, leak.annotations) == ("default/unbound", ["kube-extender.io/allocation"])
        assert recorder.devices is not None and not recorder.devices.fits_somewhere(device_pod("h", memory=1024))
        api.delete("Pod", "default", "a")
        assert recorder.devices.fits_somewhere(device_pod("h", memory=8192))


def test_two_replicas_one_serves_and_a_crash_hands_over() -> None:
    with Harness(objects=[node("n1", gpus=4)], replicas=2) as h:
        assert h.service is not None and len(h.service.endpoints()) == 1
        h.create_pod(pod("before", 1))
        assert h.wait_until(lambda: h.pod("before").bound_at is not None, timeout=5)
        leader = h.leader()
        assert leader is not None
        h.kill_extender(h.replicas.index(leader))
        assert h.wait_until(lambda: (r := h.leader()) is not None and r is not leader, timeout=10), \
            "the standby takes over once the lease expires"
        h.create_pod(pod("after", 1))
        assert h.wait_until(lambda: h.pod("after").bound_at is not None, timeout=10)
        assert not h.violations


@pytest.mark.slow
def test_an_extender_process_is_killed_and_restarted() -> None:
    with Harness(objects=[node("n1", gpus=4)], processes=True) as h:
        h.create_pod(pod("first", 1))
        assert h.wait_until(lambda: h.pod("first").bound_at is not None, timeout=10)
        replica = h.replicas[0]
        port = replica.port  # type: ignore[attr-defined]
        h.kill_extender()
        assert replica.pid is None and h.leader() is None  # type: ignore[attr-defined]
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()  # the worker died with the master
        h.restart_extender()
        assert h.wait_until(lambda: h.leader() is replica, timeout=30), "the restarted process serves again"
        h.create_pod(pod("second", 1))
        assert h.wait_until(lambda: h.pod("second").bound_at is not None, timeout=10)
        assert (h.pod("first").node, h.pod("second").node) == ("n1", "n1") and not h.violations
        assert replica.starts == 2  # type: ignore[attr-defined]


def test_a_process_replica_runs_the_executable_it_is_given(tmp_path: Path) -> None:
    """Another installation's kube-extender, to measure it with the same harness."""
    seen = tmp_path / "args"
    exe = tmp_path / "kube-extender"
    exe.write_text(f'#!/bin/sh\necho "$@" > {seen}\nexec sleep 30\n')
    exe.chmod(0o755)
    with FakeApiServer() as api:
        replica = ProcessExtender(api, {}, name="other", workdir=tmp_path, executable=exe)
        replica.start()
        try:
            deadline = time.monotonic() + 5
            while not (seen.exists() and seen.read_text()) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert seen.read_text().startswith("serve --cluster kube --kubeconfig ")
        finally:
            replica.kill()


def test_actions_run_at_their_time_and_errors_are_kept() -> None:
    with Harness(objects=[node("n1", gpus=1)]) as h:
        start = h.now()
        h.at(start + 0.3, lambda: h.create_pod(pod("late", 1)), "create late")
        h.after(0.1, lambda: h.delete_pod("missing") or 1 / 0, "fails")
        assert h.wait_until(lambda: h.pending_actions() == 0 and h.lives, timeout=5)
        time.sleep(0.05)
        assert h.pod("late").created - start >= 0.3
        assert [label for label, _ in h.action_errors] == ["fails"]
