"""ElasticQuotas (scheduling.x-k8s.io/v1alpha1) through the kube source against the fake API
server, with CapacityQuota enabled: followed by watch when the CRD is served (an object wins over
the configured quota of its namespace, a malformed one is ignored); when the CRD is missing (404)
or not readable (403) the extender is ready all the same, uses the configured quotas, says so once,
and follows the objects once they can be read."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import pytest
from builders import GPU, make_elastic_quota
from conftest import config_of
from test_kube import node, pod, wait_for

from extender.app import create_app
from extender.cluster.kube.client import KubeClient
from extender.cluster.kube.source import KubeSource, PodFilter
from extender.cluster.kube.writer import KubeWriter
from extender.testing.fakeapi import FakeApiServer

QUOTAS = r"/apis/scheduling.x-k8s.io/v1alpha1/elasticquotas"
RETRY = 0.2

CONFIG = {"profiles": [{"schedulerName": "default-scheduler",
                        "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}]}},
                        "pluginConfig": [{"name": "CapacityQuota", "args": {"quotas": {
                            "default": {"min": {GPU: "1"}, "max": {GPU: "1"}}}}}]}]}


def quota(namespace: str = "default", **spec: Any) -> dict[str, Any]:
    raw = make_elastic_quota(namespace, **spec)
    del raw["metadata"]["uid"]  # the API server assigns it
    return raw


class Running:
    def __init__(self, api: FakeApiServer) -> None:
        client = KubeClient(api.api_client())
        config = config_of(**CONFIG)
        self.source = KubeSource(client, PodFilter(config.managed_names, config.annotation_prefix), watch_timeout=30,
                                 crd_retry_interval=RETRY)
        self.app = create_app(config, source=self.source, writer=KubeWriter(client), background=False)
        assert self.source.wait_synced(10)

    def max_of(self, namespace: str = "default") -> str | None:
        body = self.app.test_client().get("/debug/quota").get_json()
        return body["namespaces"].get(namespace, {}).get(GPU, {}).get("max")


@pytest.fixture
def started() -> Iterator[list[tuple[FakeApiServer, Running | None]]]:
    runs: list[tuple[FakeApiServer, Running | None]] = []
    yield runs
    for api, ext in runs:
        if ext is not None:
            ext.source.stop()
        api.stop()


def start(runs: list[tuple[FakeApiServer, Running | None]], crds: tuple[str, ...], *seed: dict[str, Any],
          before: Callable[[FakeApiServer], Any] | None = None) -> tuple[FakeApiServer, Running]:
    api = FakeApiServer(crds=crds).start()
    runs.append((api, None))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    api.create(node("n1", 4))
    api.create(pod("p", 1))
    for obj in seed:
        api.create(obj)
    if before is not None:
        before(api)
    ext = Running(api)
    runs[-1] = (api, ext)
    return api, ext


def test_followed_by_watch_an_object_wins_over_the_configuration(started: Any) -> None:
    api, ext = start(started, ("elasticquotas",), quota(min={"gpu": "1"}, max={"gpu": "3"}))
    assert ext.max_of() == "3", "the object, not the configured max of 1"
    api.patch("ElasticQuota", "default", "quota", {"spec": {"max": {GPU: "2"}}}, "merge")
    wait_for(lambda: ext.max_of() == "2", what="an update")
    api.patch("ElasticQuota", "default", "quota", {"spec": {"max": {GPU: "lots"}}}, "merge")
    wait_for(lambda: ext.max_of() == "1", what="a malformed object counts as none: the configuration again")
    api.delete("ElasticQuota", "default", "quota")
    api.create(quota("ml", min={"gpu": "2"}))
    wait_for(lambda: ext.max_of("ml") is None and "ml" in ext.app.test_client().get("/debug/quota").get_json()[
        "namespaces"], what="a quota in another namespace")
    assert ext.max_of() == "1"


@pytest.mark.parametrize("missing", ["crd", "forbidden"])
def test_without_the_crd_or_the_right_the_configured_quotas_apply(started: Any, missing: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    rules: list[Any] = []

    def forbid(api: FakeApiServer) -> None:
        rules.append(api.fail_next("GET", QUOTAS + "$", status=403, count=None, reason="Forbidden"))

    with caplog.at_level(logging.INFO, logger="extender.cluster.kube.source"):
        api, ext = start(started, ("elasticquotas",) if missing == "forbidden" else (),
                         before=forbid if missing == "forbidden" else None)
        assert ext.app.test_client().get("/readyz").status_code == 200
        assert ext.source.unavailable >= {"elasticquota"}
        assert ext.max_of() == "1"
        if missing == "crd":
            api.enable_crd("elasticquotas")
        else:
            rules[0].remove()
        api.create(quota(max={"gpu": "4"}))
        wait_for(lambda: ext.max_of() == "4", what="followed once it can be read")
    records = [r for r in caplog.records if r.name == "extender.cluster.kube.source"
               and getattr(r, "kind", "") == "elasticquota"]
    assert not [r for r in records if r.levelno >= logging.WARNING], "no error spam"
    assert [r.getMessage() for r in records if r.getMessage().startswith("not served")][:1] == [
        "not served by the cluster, checking again periodically"]
