"""PodGroups (scheduling.x-k8s.io/v1alpha1): the typed accessor, their storage in the cache, the
Handle's view, and cluster files / the memory cluster that deliver them."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from builders import GPU, cluster_objects, make_node, make_pod_group

from extender.cache.cache import ClusterCache
from extender.cluster.memory import MemoryCluster
from extender.cluster.objects import load_objects
from extender.framework.clock import FakeClock
from extender.framework.pod_group import PodGroupSpec
from extender.runtime.handle import EngineHandle
from extender.runtime.waiting_pods import WaitingPods


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache([GPU], FakeClock(), assumed_ttl=30)


# ---- the accessor -------------------------------------------------------------------------------

VALID: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("min member only", make_pod_group("g").min_member(3).obj(),
     {"min_member": 3, "schedule_timeout_seconds": None, "min_resources": {}}),
    ("with a timeout", make_pod_group("g").min_member(1).timeout(30).obj(),
     {"min_member": 1, "schedule_timeout_seconds": 30.0}),
    ("timeout 0 is the plugin's default", make_pod_group("g").min_member(2).timeout(0).obj(),
     {"schedule_timeout_seconds": None}),
    ("negative timeout is the plugin's default", make_pod_group("g").min_member(2).timeout(-5).obj(),
     {"schedule_timeout_seconds": None}),
    ("null timeout", make_pod_group("g").min_member(2).timeout(None).obj(), {"schedule_timeout_seconds": None}),
    ("min resources in milli-units", make_pod_group("g").min_member(2).min_resources(gpu=8, cpu="500m").obj(),
     {"min_resources": {GPU: 8000, "cpu": 500}}),
    ("identity", make_pod_group("g", "ml").uid("u-g").min_member(4).obj(),
     {"namespace": "ml", "name": "g", "key": "ml/g", "uid": "u-g"}),
    ("unknown spec fields are ignored", make_pod_group("g").spec(minMember=2, future="x").obj(), {"min_member": 2}),
]


@pytest.mark.parametrize("raw, want", [(r, w) for _, r, w in VALID], ids=[c for c, _, _ in VALID])
def test_valid_pod_groups_parse(raw: dict[str, Any], want: dict[str, Any]) -> None:
    spec = PodGroupSpec.from_raw(raw)
    assert spec is not None
    assert {k: (dict(v) if k == "min_resources" else v) for k, v in
            ((k, getattr(spec, k)) for k in want)} == want


def test_namespace_defaults_like_the_rest_of_the_cache() -> None:
    raw = make_pod_group("g").min_member(2).obj()
    del raw["metadata"]["namespace"]
    spec = PodGroupSpec.from_raw(raw)
    assert spec is not None and spec.key == "default/g"


MALFORMED: list[tuple[str, Any]] = [
    ("spec is a list", make_pod_group("g").spec_is([1, 2]).obj()),
    ("spec is a string", make_pod_group("g").spec_is("minMember: 3").obj()),
    ("spec is null", make_pod_group("g").spec_is(None).obj()),
    ("minMember missing", make_pod_group("g").spec_is({}).obj()),
    ("minMember a string", make_pod_group("g").min_member("3").obj()),
    ("minMember a float", make_pod_group("g").min_member(2.0).obj()),
    ("minMember a bool", make_pod_group("g").min_member(True).obj()),
    ("minMember zero", make_pod_group("g").min_member(0).obj()),
    ("minMember negative", make_pod_group("g").min_member(-1).obj()),
    ("minMember a map", make_pod_group("g").min_member({"value": 3}).obj()),
    ("timeout a duration string", make_pod_group("g").min_member(2).timeout("10s").obj()),
    ("timeout a float", make_pod_group("g").min_member(2).timeout(1.5).obj()),
    ("minResources a list", make_pod_group("g").min_member(2).spec(minResources=["cpu"]).obj()),
    ("minResources not quantities", make_pod_group("g").min_member(2).spec(minResources={"cpu": "lots"}).obj()),
    ("no name", {"metadata": {"namespace": "default"}, "spec": {"minMember": 2}}),
    ("not an object", ["PodGroup"]),
    ("nothing", None),
]


@pytest.mark.parametrize("raw", [r for _, r in MALFORMED], ids=[c for c, _ in MALFORMED])
def test_malformed_pod_groups_are_none_never_an_exception(raw: Any) -> None:
    assert PodGroupSpec.from_raw(raw) is None
    problem, spec = PodGroupSpec.parse(raw)
    assert spec is None and problem


# ---- the cache ----------------------------------------------------------------------------------

def test_stored_trimmed_listed_and_read_typed(cache: ClusterCache) -> None:
    raw = make_pod_group("g", "ml").uid("u-g").min_member(3).timeout(60).status(phase="Pending", running=0).obj()
    raw["metadata"].update(resourceVersion="7", labels={"a": "b"}, managedFields=[{"manager": "kubectl"}])
    cache.upsert_pod_group(raw)
    cache.upsert_pod_group(make_pod_group("h", "other").min_member(1).obj())
    assert cache.pod_group("ml", "g") == {
        "metadata": {"name": "g", "namespace": "ml", "uid": "u-g", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60}}
    raw["spec"]["minMember"] = 99  # the cache keeps its own copy
    assert cache.pod_group("ml", "g")["spec"]["minMember"] == 3  # type: ignore[index]
    spec = cache.pod_group_spec("ml", "g")
    assert spec is not None and (spec.min_member, spec.schedule_timeout_seconds, spec.resource_version) == (3, 60.0, "7")
    assert sorted(g["metadata"]["name"] for g in cache.pod_groups()) == ["g", "h"]
    assert [g["metadata"]["name"] for g in cache.pod_groups("ml")] == ["g"]
    assert cache.pod_group("ml", "h") is None and cache.pod_group_spec("ml", "missing") is None


@pytest.mark.parametrize("raw", [r for c, r in MALFORMED if isinstance(r, dict) and c != "no name"],
                         ids=[c for c, r in MALFORMED if isinstance(r, dict) and c != "no name"])
def test_malformed_pod_groups_are_stored_read_as_none_and_logged_once(
        cache: ClusterCache, raw: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="extender.cache.cache"):
        cache.upsert_pod_group(raw)
        cache.upsert_pod_group(raw)  # a relist delivers it again
        cache.upsert_pod_group({**raw, "metadata": {**raw["metadata"], "resourceVersion": "99"}})  # status update
    assert cache.pod_group("default", "g") is not None
    assert [g["metadata"]["name"] for g in cache.pod_groups()] == ["g"]
    assert cache.pod_group_spec("default", "g") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and getattr(warnings[0], "pod_group") == "default/g"


def test_a_pod_group_without_a_name_is_refused(cache: ClusterCache) -> None:
    with pytest.raises(ValueError):
        cache.upsert_pod_group({"metadata": {"namespace": "default"}, "spec": {"minMember": 1}})


def test_fixed_or_broken_later_follows_the_latest_spec(cache: ClusterCache) -> None:
    cache.upsert_pod_group(make_pod_group("g").uid("u").min_member("2").obj())
    assert cache.pod_group_spec("default", "g") is None
    cache.upsert_pod_group(make_pod_group("g").uid("u").min_member(2).obj())
    assert cache.pod_group_spec("default", "g").min_member == 2  # type: ignore[union-attr]
    cache.upsert_pod_group(make_pod_group("g").uid("u").spec_is(None).obj())
    assert cache.pod_group_spec("default", "g") is None


def test_every_change_bumps_the_change_count_and_only_changes(cache: ClusterCache) -> None:
    g = make_pod_group("g").uid("u-g").min_member(2).obj()
    g["metadata"]["resourceVersion"] = "1"
    steps: list[tuple[str, Any, int]] = [
        ("add", lambda: cache.upsert_pod_group(g), 1),
        ("same again", lambda: cache.upsert_pod_group(g), 0),
        ("status only", lambda: cache.upsert_pod_group(
            {**g, "metadata": {**g["metadata"], "resourceVersion": "2"}, "status": {"phase": "Running"}}), 0),
        ("spec change", lambda: cache.upsert_pod_group({**g, "spec": {"minMember": 5}}), 1),
        ("delete of an older incarnation", lambda: cache.remove_pod_group(
            {**g, "metadata": {**g["metadata"], "uid": "old"}}), 0),
        ("delete", lambda: cache.remove_pod_group(g), 1),
        ("delete again", lambda: cache.remove_pod_group(g), 0),
    ]
    for what, step, bump in steps:
        before = cache.change_count()
        step()
        assert cache.change_count() - before == bump, what
    assert cache.pod_groups() == []


def test_concurrent_writers_and_readers(cache: ClusterCache) -> None:
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for n in range(200):
                g = make_pod_group(f"g{n % 10}").uid(f"u{n % 10}").min_member(1 + (n + i) % 4).obj()
                cache.upsert_pod_group(g)
                if n % 7 == 0:
                    cache.remove_pod_group(g)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(500):
                for g in cache.pod_groups():
                    cache.pod_group_spec(g["metadata"]["namespace"], g["metadata"]["name"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(cache.pod_group_spec("default", g["metadata"]["name"]) is not None for g in cache.pod_groups())


def test_engine_handle_serves_the_typed_spec(cache: ClusterCache) -> None:
    handle = EngineHandle(cache, None, FakeClock(), WaitingPods(), frozenset({GPU}))  # type: ignore[arg-type]
    cache.upsert_pod_group(make_pod_group("g", "ml").min_member(4).timeout(20).obj())
    cache.upsert_pod_group(make_pod_group("bad", "ml").min_member("4").obj())
    spec = handle.pod_group("ml", "g")
    assert spec is not None and (spec.min_member, spec.schedule_timeout_seconds) == (4, 20.0)
    assert handle.pod_group("ml", "bad") is None
    assert handle.pod_group("ml", "missing") is None


# ---- cluster files and the memory cluster --------------------------------------------------------

CLUSTER_FILE = """
apiVersion: v1
kind: List
items:
- {kind: Node, metadata: {name: n1}, status: {allocatable: {example.com/gpu: "4"}}}
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: PodGroup
  metadata: {name: trainer, namespace: ml}
  spec: {minMember: 4, scheduleTimeoutSeconds: 120, minResources: {example.com/gpu: "8"}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: broken, namespace: ml}
spec: {minMember: four}
---
kind: PodGroup
metadata: {name: no-api-version}
spec: {minMember: 2}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: volcano}
spec: {minMember: 2}
"""


def test_cluster_file_pod_groups_reach_the_cache() -> None:
    objects = load_objects(CLUSTER_FILE, "c.yaml")
    assert [g["metadata"]["name"] for g in objects["PodGroup"]] == ["trainer", "broken", "no-api-version"], \
        "another API group's PodGroup is not one"
    cluster = MemoryCluster(objects)
    cache = ClusterCache([GPU], FakeClock())
    cluster.start(cache)
    assert cache.synced
    trainer = cache.pod_group_spec("ml", "trainer")
    assert trainer is not None
    assert (trainer.min_member, trainer.schedule_timeout_seconds, dict(trainer.min_resources)) == (4, 120.0, {GPU: 8000})
    assert trainer.resource_version, "the memory cluster stamps resourceVersions"
    assert cache.pod_group("ml", "broken") is not None and cache.pod_group_spec("ml", "broken") is None
    assert cache.pod_group_spec("default", "no-api-version").min_member == 2  # type: ignore[union-attr]
    assert cache.pod_group("default", "volcano") is None


def test_memory_cluster_delivers_pod_group_changes() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], [],
                                            [make_pod_group("g").min_member(2).obj()]))
    cache = ClusterCache([GPU], FakeClock())
    cluster.start(cache)
    assert cache.pod_group_spec("default", "g").min_member == 2  # type: ignore[union-attr]
    before = cache.change_count()
    stored = cluster.add_pod_group(make_pod_group("g").min_member(3).obj())
    assert cache.pod_group_spec("default", "g").min_member == 3  # type: ignore[union-attr]
    assert cache.change_count() > before
    assert [g["metadata"]["resourceVersion"] for g in cluster.pod_groups()] == [stored["metadata"]["resourceVersion"]]
    cluster.add_pod_group(make_pod_group("h", "ml").min_member(1).obj())
    assert cluster.delete_pod_group("default", "g") and not cluster.delete_pod_group("default", "g")
    assert cache.pod_group("default", "g") is None
    assert [g["metadata"]["name"] for g in cache.pod_groups()] == ["h"]
