"""PodGroups (scheduling.x-k8s.io/v1alpha1) through the kube source against the fake API server:
listed and watched when the CRD is served; when it is not (404) or not readable (403) the source
still syncs everything else, reports ready, logs once and picks the CRD up once installed."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import pytest
from builders import make_pod_group
from conftest import config_of
from test_kube import node, pod, wait_for

from extender.app import create_app
from extender.cache.cache import ClusterCache
from extender.cluster.kube.client import KubeClient
from extender.cluster.kube.source import KubeSource, PodFilter
from extender.cluster.kube.writer import KubeWriter
from extender.framework.pod_group import PodGroupSpec
from extender.metrics import Metrics
from extender.testing.fakeapi import FakeApiServer

PODGROUPS = r"/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
RETRY = 0.2  # seconds between two lists of an absent CRD (minutes in production)


def group(name: str, min_member: Any = 2, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    raw = make_pod_group(name, namespace).min_member(min_member).spec(**spec).obj()
    del raw["metadata"]["uid"]  # the API server assigns it
    return raw


class Running:
    """An app over a KubeSource following the fake API server."""

    def __init__(self, api: FakeApiServer) -> None:
        self.metrics = Metrics()
        client = KubeClient(api.api_client())
        config = config_of()
        self.source = KubeSource(client, PodFilter(config.managed_names, config.annotation_prefix),
                                 metrics=self.metrics, watch_timeout=30, crd_retry_interval=RETRY)
        self.app = create_app(config, source=self.source, writer=KubeWriter(client), metrics=self.metrics,
                              background=False)
        self.state = self.app.extensions["kube_extender"]
        self.cache: ClusterCache = self.state.cache
        self.handle = self.state.engine.handle
        assert self.source.wait_synced(10)

    def spec(self, name: str, namespace: str = "default") -> PodGroupSpec | None:
        return self.handle.pod_group(namespace, name)  # type: ignore[no-any-return]

    def ready(self) -> int:
        return int(self.app.test_client().get("/readyz").status_code)


def make_api(crds: tuple[str, ...]) -> FakeApiServer:
    server = FakeApiServer(crds=crds).start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    server.create(node("n1", 4))
    server.create(pod("p", 1))
    return server


@pytest.fixture
def running() -> Iterator[Callable[..., tuple[FakeApiServer, Running]]]:
    started: list[tuple[FakeApiServer, Running | None]] = []

    def start(crds: tuple[str, ...] = ("podgroups", "elasticquotas"), before: Callable[[FakeApiServer], Any] | None = None
              ) -> tuple[FakeApiServer, Running]:
        api = make_api(crds)
        started.append((api, None))
        if before is not None:
            before(api)
        ext = Running(api)
        started[-1] = (api, ext)
        return api, ext

    try:
        yield start
    finally:
        for api, ext in started:
            if ext is not None:
                ext.source.stop()
            api.stop()


def test_listed_at_start_before_ready(running: Callable[..., tuple[FakeApiServer, Running]]) -> None:
    def seed(api: FakeApiServer) -> None:
        api.create(group("trainer", 4, scheduleTimeoutSeconds=60))
        api.create(group("broken", "four"))  # the fake server does not validate CRD schemas
        api.create(group("other", 3, namespace="ml"))

    api, ext = running(before=seed)
    assert ext.ready() == 200
    trainer = ext.spec("trainer")
    assert trainer is not None and (trainer.min_member, trainer.schedule_timeout_seconds) == (4, 60.0)
    assert trainer.uid == api.get("PodGroup", "default", "trainer")["metadata"]["uid"]
    assert ext.cache.pod_group("default", "broken") is not None and ext.spec("broken") is None
    assert ext.spec("other", "ml").min_member == 3  # type: ignore[union-attr]
    assert sorted(g["metadata"]["name"] for g in ext.cache.pod_groups()) == ["broken", "other", "trainer"]
    assert "status" not in ext.cache.pod_group("default", "trainer")  # type: ignore[operator]
    assert ext.source.unavailable == set()


WATCH_STEPS: list[tuple[str, Callable[[FakeApiServer], Any], int | None]] = [
    ("add", lambda api: api.create(group("g", 2)), 2),
    ("update the spec", lambda api: api.patch("PodGroup", "default", "g", {"spec": {"minMember": 5}}, "merge"), 5),
    ("update the status only", lambda api: api.patch("PodGroup", "default", "g", {"status": {"phase": "Running"}},
                                                      "merge"), 5),
    ("break the spec", lambda api: api.patch("PodGroup", "default", "g", {"spec": {"minMember": "x"}}, "merge"),
     None),
    ("repair the spec", lambda api: api.patch("PodGroup", "default", "g", {"spec": {"minMember": 3}}, "merge"), 3),
    ("delete", lambda api: api.delete("PodGroup", "default", "g"), None),
    ("re-create", lambda api: api.create(group("g", 7)), 7),
]


def test_watch_add_update_delete(running: Callable[..., tuple[FakeApiServer, Running]]) -> None:
    api, ext = running()
    assert api.wait_for_watchers(1, "podgroups")
    for what, step, min_member in WATCH_STEPS:
        before = api.get("PodGroup", "default", "g")
        step(api)
        after = api.get("PodGroup", "default", "g")
        rv = after["metadata"]["resourceVersion"] if after else None
        if after is None:
            wait_for(lambda: ext.cache.pod_group("default", "g") is None, what=what)
        else:
            wait_for(lambda: (ext.cache.pod_group("default", "g") or {}).get("metadata", {}).get("resourceVersion")
                     == rv, what=what)
        spec = ext.spec("g")
        assert (spec.min_member if spec else None) == min_member, what
        if before is not None and after is not None and before["metadata"]["uid"] != after["metadata"]["uid"]:
            assert spec is not None and spec.uid == after["metadata"]["uid"], what
    text = ext.metrics.exposition().decode()
    assert 'kube_extender_watch_events_total{kind="podgroup",type="ADDED"}' in text


def test_a_status_update_does_not_count_as_a_change(running: Callable[..., tuple[FakeApiServer, Running]]) -> None:
    api, ext = running(before=lambda api: api.create(group("g", 2)))
    count = ext.cache.change_count()
    api.patch("PodGroup", "default", "g", {"status": {"phase": "Running", "running": 2}}, "merge")
    rv = api.get("PodGroup", "default", "g")["metadata"]["resourceVersion"]
    wait_for(lambda: ext.cache.pod_group("default", "g")["metadata"]["resourceVersion"] == rv,  # type: ignore[index]
             what="status update delivered")
    assert ext.cache.change_count() == count
    api.patch("PodGroup", "default", "g", {"spec": {"minMember": 3}}, "merge")
    wait_for(lambda: ext.cache.change_count() > count, what="a spec update counts")


def test_crd_absent_syncs_the_rest_quietly_and_picks_it_up_once_installed(
        running: Callable[..., tuple[FakeApiServer, Running]], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="extender.cluster.kube.source"):
        api, ext = running(crds=("elasticquotas",))
        assert ext.ready() == 200, "ready without the CRD"
        assert ext.cache.snapshot().get("n1") is not None and ext.cache.pending_pod("default", "p") is not None
        assert ext.source.unavailable == {"podgroup"}
        assert ext.cache.pod_groups() == [] and ext.spec("anything") is None
        wait_for(lambda: len(api.requests("GET", PODGROUPS + "$")) >= 3, what="a few periodic retries")
        # the rest of the source works as usual meanwhile
        api.create(pod("q", 1))
        wait_for(lambda: ext.cache.pending_pod("default", "q"), what="watch of pods")

        api.enable_crd("podgroups")
        api.create(group("g", 4))
        wait_for(lambda: ext.spec("g") is not None, what="PodGroup followed once the CRD is installed")
        assert ext.spec("g").min_member == 4  # type: ignore[union-attr]
        assert ext.source.unavailable == set()
        assert api.wait_for_watchers(1, "podgroups")

        api.disable_crd("podgroups")  # uninstalled: its objects are deleted, the watch ends, paths 404
        wait_for(lambda: ext.source.unavailable == {"podgroup"}, what="CRD gone again")
        assert ext.cache.pod_groups() == []
        assert ext.ready() == 200

    records = [r for r in caplog.records if r.name == "extender.cluster.kube.source"]
    assert not [r for r in records if r.levelno >= logging.WARNING], "no error spam"
    absent = [r for r in records if r.getMessage().startswith("not served")]
    assert [getattr(r, "kind") for r in absent] == ["podgroup", "podgroup"], "once per time it goes missing"
    assert all(r.levelno == logging.INFO for r in absent)
    text = ext.metrics.exposition().decode()
    assert 'kube_extender_watch_reconnects_total{kind="podgroup"}' not in text


def test_forbidden_is_unavailable_too(running: Callable[..., tuple[FakeApiServer, Running]]) -> None:
    """Without features.gang the chart grants no podgroups access: 403, like a missing CRD."""
    rule: list[Any] = []
    api, ext = running(before=lambda api: rule.append(api.fail_next("GET", PODGROUPS + "$", status=403, count=None,
                                                                    reason="Forbidden")))
    assert ext.ready() == 200 and ext.source.unavailable == {"podgroup"}
    rule[0].remove()
    api.create(group("g", 2))
    wait_for(lambda: ext.spec("g") is not None, what="followed once allowed")


def test_list_errors_other_than_absent_back_off_and_block_readiness_until_listed(
        running: Callable[..., tuple[FakeApiServer, Running]]) -> None:
    api, ext = running(before=lambda api: (api.create(group("g", 3)),
                                           api.fail_next("GET", PODGROUPS + "$", status=500, count=2)))
    assert ext.spec("g").min_member == 3, "synced means the PodGroups are in"  # type: ignore[union-attr]
    assert 'kube_extender_watch_reconnects_total{kind="podgroup"} 2.0' in ext.metrics.exposition().decode()
