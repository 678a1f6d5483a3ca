"""KubeClient against the fake API server: what goes on the wire, and the connections it keeps."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import config_of
from kubernetes import client as k8s

from extender.app import api_connections, create_kube_app
from extender.cluster.kube.client import ApiError, KubeClient
from extender.testing.fakeapi import FakeApiServer

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def test_every_request_carries_the_token_the_configuration_has_then(api: FakeApiServer) -> None:
    """A refresh hook (exec plugins, rotated service-account tokens) is asked before every request."""
    configuration = api.configuration()
    tokens = iter(["Bearer one", "Bearer two"])

    def refresh(conf: k8s.Configuration) -> None:
        conf.api_key["authorization"] = next(tokens)

    configuration.api_key = {"authorization": "Bearer stale"}
    configuration.refresh_api_key_hook = refresh
    client = KubeClient(k8s.ApiClient(configuration))
    client.get(PODS)
    client.get(PODS)
    assert [r.headers.get("authorization") for r in api.requests("GET", PODS)] == ["Bearer one", "Bearer two"]


def test_query_body_and_content_type_as_the_api_server_reads_them(api: FakeApiServer) -> None:
    client = KubeClient(api.api_client())
    client.get(PODS, labelSelector="app in (a,b),tier!=x", limit=2, watch=False, fieldSelector=None)
    listed = api.requests("GET", PODS)[-1]
    assert listed.query == {"labelSelector": ["app in (a,b),tier!=x"], "limit": ["2"], "watch": ["false"]}
    created = client.post(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"note": "é ü"}},
                                 "spec": {"containers": [{"name": "c", "image": "i"}]}})
    assert created["metadata"]["annotations"] == {"note": "é ü"}
    client.merge_patch(f"{PODS}/p", {"metadata": {"annotations": {"a": "1"}}})
    patch = api.requests("PATCH", f"{PODS}/p$")[-1]
    assert patch.content_type == "application/merge-patch+json" and patch.body == {"metadata": {"annotations": {"a": "1"}}}
    assert all(r.headers["accept"] == "application/json" for r in api.requests())


@pytest.mark.parametrize("host, proxy, path", [
    ("{url}/clusters/c1", None, "/clusters/c1/api/v1/namespaces/default/pods"),
    ("http://cluster.invalid:6443", "{url}", "http://cluster.invalid:6443/api/v1/namespaces/default/pods"),
], ids=["a server URL with a path keeps it", "through a proxy: the request goes to the proxy"])
def test_where_requests_go(api: FakeApiServer, host: str, proxy: str | None, path: str) -> None:
    configuration = api.configuration()
    configuration.host = host.format(url=api.url)
    configuration.proxy = proxy and proxy.format(url=api.url)
    client = KubeClient(k8s.ApiClient(configuration))
    with pytest.raises(ApiError) as info:
        client.get(PODS)  # the fake API server serves neither path
    assert info.value.status == 404 and [r.path for r in api.requests()] == [path]


@pytest.mark.parametrize("pool, burst, reused", [(8, 8, True), (2, 8, False)],
                         ids=["a pool as large as the burst: its connections serve the next one",
                              "a smaller pool: connections beyond it are closed and opened again"])
def test_the_pool_keeps_as_many_connections_as_it_is_sized_for(api: FakeApiServer, tmp_path: Path, pool: int,
                                                                burst: int, reused: bool) -> None:
    client = KubeClient.from_kubeconfig(api.kubeconfig(tmp_path / "kubeconfig"), connections=pool)
    assert client.connections == pool
    api.add_latency("GET", PODS, 0.2)  # the burst's requests are all in flight at once

    def one_burst() -> None:
        start = threading.Barrier(burst)

        def call() -> None:
            start.wait()
            client.get(PODS)
        threads = [threading.Thread(target=call) for _ in range(burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    one_burst()
    one_burst()
    peers = {r.peer for r in api.requests("GET", PODS)}
    assert (len(peers) == burst) is reused, f"{len(peers)} connections for 2 bursts of {burst}"


@pytest.mark.parametrize("server, expected", [
    ({}, 200),
    ({"connections": 50}, 66),
    ({"worker": "gthread"}, 80),
    ({"worker": "gthread", "threads": 500}, 200),
], ids=["gevent default: kube-apiserver's limit", "gevent, 50 at once", "gthread default", "gthread, 500 threads"])
def test_the_api_connections_follow_the_requests_the_server_answers_at_once(server: dict[str, Any],
                                                                             expected: int) -> None:
    assert api_connections(config_of(server=server)) == expected


def test_the_extender_sizes_its_pool_from_its_configuration(api: FakeApiServer, tmp_path: Path) -> None:
    config = config_of(server={"connections": 50})
    app = create_kube_app(config, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"))
    state = app.extensions["kube_extender"]
    try:
        assert state.writer.client.connections == state.source.client.connections == 66
        assert state.source.wait_synced(10)  # stopping while the first watches open waits for them
    finally:
        state.close()
