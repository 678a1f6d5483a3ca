"""Gang: a group binds all together inside the bind calls, or not at all."""

from __future__ import annotations

import threading
import time
from typing import Any

from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster

GROUP = "scheduling.x-k8s.io/pod-group"


def member(name: str, group: str = "g", size: int = 3, gpus: int = 1) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).labels(**{GROUP: group}).obj()
    pod["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": str(size)}
    return pod


def setup(pods: list[dict], http_timeout: str = "5s", gpus: int = 8) -> tuple[Any, Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=gpus).obj()], pods))
    config = config_of(extender={"httpTimeout": http_timeout},
                       profiles=[{"schedulerName": "default-scheduler",
                                  "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}},
                                  "pluginConfig": [{"name": "Gang", "args": {"permitTimeout": "3s",
                                                                              "backoff": "30s"}}]}])
    app = create_app(config, source=cluster, background=False)
    state = app.extensions["kube_extender"]
    return state.engine, state.admitter, cluster


def bind_all(engine: Any, names: list[str], stagger: float = 0.05) -> dict[str, str]:
    results: dict[str, str] = {}

    def go(n: str) -> None:
        results[n] = engine.bind("default", n, f"u-{n}", "n1")

    threads = []
    for n in names:
        t = threading.Thread(target=go, args=(n,))
        t.start()
        threads.append(t)
        time.sleep(stagger)
    for t in threads:
        t.join(10)
    return results


def bound(cluster: MemoryCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName")}


def test_members_wait_in_bind_and_go_together() -> None:
    engine, _, cluster = setup([member(f"m{i}") for i in range(3)])
    results = bind_all(engine, ["m0", "m1", "m2"], stagger=0.2)
    assert results == {"m0": "", "m1": "", "m2": ""}
    assert bound(cluster) == {"m0", "m1", "m2"}


def test_an_incomplete_group_times_out_releases_everything_and_backs_off() -> None:
    engine, _, cluster = setup([member(f"m{i}") for i in range(3)], http_timeout="2s")  # Permit budget 1 s
    results = bind_all(engine, ["m0", "m1"])
    assert all("permit failed" in r for r in results.values()), results
    assert bound(cluster) == set()
    snap = engine.cache.snapshot().get("n1")
    assert snap.requested.get("example.com/gpu", 0) == 0 and engine.cache.sizes()["assumed_pods"] == 0
    outcome = engine.filter(cluster.get_pod("default", "m2"), ["n1"])
    assert outcome.failed == {"n1": "pod group g is backing off after a timeout"}


def test_pods_outside_groups_are_untouched() -> None:
    engine, _, cluster = setup([make_pod("solo").uid("u-solo").req(gpu=1).obj()])
    assert engine.bind("default", "solo", "u-solo", "n1") == ""


def test_admission_waits_until_the_group_is_complete() -> None:
    gated = [member(f"m{i}") for i in range(2)]
    for p in gated:
        p["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    engine, admitter, cluster = setup(gated)
    result = admitter.run_once()
    assert result.admitted == [] and "pod group g has 2 of 3 members" in result.held["default/m0"]
    third = member("m2")
    third["spec"]["schedulingGates"] = [{"name": "kube-extender.io/admission"}]
    cluster.add_pod(third)
    assert sorted(admitter.run_once().admitted) == ["default/m0", "default/m1", "default/m2"]
