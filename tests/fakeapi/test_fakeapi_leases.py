"""coordination.k8s.io/v1 Leases: optimistic concurrency as leader election relies on it."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
import urllib3
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


def test_lease_create_get_replace_and_stale_conflict(api, coord):
    now = dt.datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    created = coord.create_namespaced_lease("kube-system", client.V1Lease(
        metadata=client.V1ObjectMeta(name="extender"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15, acquire_time=now, renew_time=now)))
    assert created.spec.holder_identity == "a" and created.spec.renew_time == now
    mine = coord.read_namespaced_lease("extender", "kube-system")
    theirs = coord.read_namespaced_lease("extender", "kube-system")
    mine.spec.renew_time = now + dt.timedelta(seconds=5)
    renewed = coord.replace_namespaced_lease("extender", "kube-system", mine)
    assert int(renewed.metadata.resource_version) > int(mine.metadata.resource_version)
    theirs.spec.holder_identity = "b"
    with pytest.raises(ApiException) as info:
        coord.replace_namespaced_lease("extender", "kube-system", theirs)
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "Conflict"
    assert coord.read_namespaced_lease("extender", "kube-system").spec.holder_identity == "a"
    with pytest.raises(ApiException) as info:
        coord.create_namespaced_lease("kube-system", client.V1Lease(metadata=client.V1ObjectMeta(name="extender")))
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "AlreadyExists"


def test_concurrent_acquire_has_exactly_one_winner(api):
    api.create(b.lease("race", holder=None))
    results: list[str] = []
    barrier = threading.Barrier(8)

    def contender(i: int) -> None:
        with api.api_client() as c:
            coord = client.CoordinationV1Api(c)
            lease = coord.read_namespaced_lease("race", "kube-system")
            barrier.wait()
            lease.spec.holder_identity = f"c{i}"
            try:
                coord.replace_namespaced_lease("race", "kube-system", lease)
                results.append(f"c{i}")
            except ApiException as exc:
                assert exc.status == 409
                results.append("conflict")

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    winners = [r for r in results if r != "conflict"]
    assert len(results) == 8 and len(winners) == 1
    assert api.get("Lease", "kube-system", "race")["spec"]["holderIdentity"] == winners[0]


def test_lease_micro_time_is_canonicalized_and_naive_times_rejected(api):
    http = urllib3.PoolManager()
    body = {"metadata": {"name": "l"}, "spec": {"renewTime": "2025-01-02T05:04:05.5+02:00"}}
    r = http.request("POST", api.url + "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                     body=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status == 201
    assert json.loads(r.data)["spec"]["renewTime"] == "2025-01-02T03:04:05.500000Z"
    body = {"metadata": {"name": "naive"}, "spec": {"renewTime": "2025-01-02T05:04:05.5"}}
    r = http.request("POST", api.url + "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                     body=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status == 400 and json.loads(r.data)["reason"] == "BadRequest"


def test_python_client_lease_lock_round_trip(api):
    """The kubernetes package's own LeaseLock (used by its leader election) works against the fake."""
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    lock = LeaseLock("le", "default", "me")
    with api.api_client() as c:
        lock.api_instance = client.CoordinationV1Api(c)
        ok, _ = lock.get("le", "default")
        assert not ok
        stamp = str(dt.datetime.now())
        assert lock.create("le", "default", LeaderElectionRecord("me", "15", stamp, stamp))
        ok, record = lock.get("le", "default")
        assert ok and record.holder_identity == "me"
        assert lock.update("le", "default", LeaderElectionRecord("me", "15", stamp, str(dt.datetime.now())))
        api.patch("Lease", "default", "le", {"spec": {"holderIdentity": "thief"}}, "merge")
        # our cached lease is now stale: the update must fail with a conflict
        assert not lock.update("le", "default", LeaderElectionRecord("me", "15", stamp, str(dt.datetime.now())))
