"""KubeClient against the fake API server: what goes on the wire, and the connections it keeps."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import config_of
from kubernetes import client as k8s

from extender.app import api_connections, create_kube_app
from extender.cluster.kube.client import ApiError, KubeClient
from extender.cluster.kube.leader import LeaderElector
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


@pytest.mark.parametrize("lease_duration, renew_deadline, timeout", [
    (15.0, 10.0, 5.0),      # the defaults
    (60.0, 10.0, 30.0),     # at most the client's own timeout
    (15.0, 14.5, 0.5),      # built in code, past the file's 1 s minimum: still the gap, never more
], ids=["defaults", "client-timeout", "half-second-gap"])
def test_a_leaders_writes_give_up_within_the_lease_gap(api: FakeApiServer, tmp_path: Path, lease_duration: float,
                                                        renew_deadline: float, timeout: float) -> None:
    """The fence: a deposed leader stops writing renewDeadline after its last renewal and a standby
    may lead leaseDuration after it, so every write gives up within leaseDuration - renewDeadline.
    The write timeout used to be raised to at least 1 s, past a shorter gap."""
    base = config_of(leaderElection={"enabled": True, "leaseNamespace": "default"})
    config = replace(base, leader_election=replace(base.leader_election, lease_duration=lease_duration,
                                                   renew_deadline=renew_deadline))
    app = create_kube_app(config, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"))
    state = app.extensions["kube_extender"]
    try:
        assert state.writer.client.timeout == timeout
        assert state.source.client.timeout == 30.0  # reads and watches keep the client's own
    finally:
        state.close()


LEASE = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "kube-extender", "namespace": "default", "resourceVersion": "7"},
         "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15, "leaseTransitions": 1,
                  "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.000000Z"}}


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def answer(conn: socket.socket, obj: Any) -> None:
    body = json.dumps(obj).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def test_a_lease_renewal_put_on_a_keep_alive_connection_the_server_closes_is_retried() -> None:
    """The server closes the kept-alive connection the PUT went out on (its idle timeout racing
    the request: urllib3's is_connection_dropped cannot see it before sending). urllib3's
    default Retry re-sends an idempotent PUT on a new connection (DEFAULT_ALLOWED_METHODS); with
    retries=False for every non-GET the renewal round is lost. (POST was never retried in this
    case: not idempotent.) PUT of a Lease carries its resourceVersion, so a retry can't land late
    unsafely: a 409 if anything changed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    puts: list[bytes] = []

    def serve() -> None:
        first, _ = listener.accept()
        assert read_request(first).startswith(b"GET ")
        answer(first, LEASE)  # keep-alive
        head = read_request(first)  # the PUT, on the same connection...
        puts.append(head)
        first.close()  # ...which the server closes unanswered
        second, _ = listener.accept()
        head = read_request(second)
        puts.append(head)
        answer(second, {**LEASE, "metadata": {**LEASE["metadata"], "resourceVersion": "8"}})
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    elector = LeaderElector(KubeClient(k8s.ApiClient(configuration), timeout=5.0), name="kube-extender",
                            namespace="default", identity="me")
    try:
        assert elector.try_acquire_or_renew(), f"renewal lost; PUTs the server saw: {len(puts)}"
    finally:
        listener.close()
