"""Leader fencing: no write of a replica that is no longer - or no longer surely - the leader,
and no write decided in an earlier term."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest
import urllib3
from builders import GPU, make_node, make_pod
from conftest import config_of
from test_kube import wait_for

from extender.app import create_app
from extender.cluster.kube.client import KubeClient
from extender.cluster.kube.leader import LeaderElector
from extender.cluster.kube.source import KubeSource, PodFilter
from extender.cluster.kube.writer import KubeWriter
from extender.framework.clock import FakeClock
from extender.framework.handle import WriteError
from extender.framework.registration import PluginSpec
from extender.framework.status import Status
from extender.runtime.registry import Registry
from extender.testing.fakeapi import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    server.create({"apiVersion": "v1", "kind": "Node", **make_node("n1").alloc(gpu=4).obj()})
    try:
        yield server
    finally:
        server.stop()


def pod(name: str, gpus: int) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Pod", **make_pod(name).req(gpu=gpus).obj()}
    obj["metadata"].pop("uid", None)  # the API server assigns it
    return obj


def uid(api: FakeApiServer, name: str) -> str:
    return api.get("Pod", "default", name)["metadata"]["uid"]


def elector(api: FakeApiServer, identity: str, clock: FakeClock) -> LeaderElector:
    return LeaderElector(KubeClient(api.api_client()), name="kube-extender", namespace="default",
                         identity=identity, lease_duration=3.0, renew_deadline=2.0, retry_period=0.25, clock=clock)


class Gate:
    """A Permit plugin that holds every pod until allowed (as Gang does for a group)."""

    name = "Gate"

    def permit(self, state: Any, pod: Any, node: str) -> tuple[Status, float]:
        return Status.wait("waiting"), 60.0


def extender(api: FakeApiServer, leader: LeaderElector, gated: bool) -> Any:
    client = KubeClient(api.api_client())
    registry = Registry()
    gate = Gate()
    registry.register(PluginSpec("Gate", lambda args, handle: gate, parse_args=lambda raw: raw))
    plugins = {"permit": {"enabled": [{"name": "Gate"}], "disabled": []}} if gated else {}
    config = config_of(profiles=[{"schedulerName": "default-scheduler", "plugins": plugins}],
                       extender={"httpTimeout": "30s"},
                       cache={"assumedPodTTL": "30s", "orphanCollectionInterval": "0s"})
    source = KubeSource(client, PodFilter(config.managed_names, config.annotation_prefix), watch_timeout=30)
    writer = KubeWriter(client, may_write=leader.is_leader)
    app = create_app(config, source=source, writer=writer, clock=FakeClock(), leader=leader, registry=registry,
                     background=False)
    assert source.wait_synced(10)
    return app.extensions["kube_extender"]


def test_a_bind_assumed_in_one_term_does_not_write_its_binding_in_a_later_term(api: FakeApiServer) -> None:
    """A (term 1) assumes p (2 GPUs) on n1 and waits in Permit. A cannot renew; B leads (term 2)
    and, not knowing A's assumption, binds q (3 GPUs) on n1. B dies and A leads again (term 3).
    p's Permit is allowed: A's Binding of p - decided on term 1's view - passes the fence
    (is_leader() is true again) and n1 holds 5 GPUs of pods on 4."""
    api.create(pod("p", 2))
    api.create(pod("q", 3))
    ca, cb = FakeClock(), FakeClock()
    a, b = elector(api, "a", ca), elector(api, "b", cb)
    ext_a, ext_b = extender(api, a, gated=True), extender(api, b, gated=False)
    try:
        assert a.try_acquire_or_renew() and a.is_leader() and a.term() == 1
        result: list[str] = []
        t = threading.Thread(target=lambda: result.append(ext_a.engine.bind("default", "p", uid(api, "p"), "n1")))
        t.start()
        wp = wait_for(lambda: ext_a.engine.handle.waiting_pods.get(uid(api, "p")), what="p waits in Permit")

        ca.advance(2.5)  # A cannot renew: fenced
        assert not a.is_leader()
        b.try_acquire_or_renew()
        cb.advance(3.5)
        assert b.try_acquire_or_renew() and b.is_leader() and b.term() == 2
        assert ext_b.engine.bind("default", "q", uid(api, "q"), "n1") == ""  # B's view: n1 is free

        a.try_acquire_or_renew()  # B dies; A takes the lease over once it expired
        ca.advance(3.5)
        assert a.try_acquire_or_renew() and a.is_leader() and a.term() == 3
        wait_for(lambda: ext_a.cache.pod(uid(api, "q")) is not None, what="A's watch shows q on n1")

        wp.allow("Gate")
        t.join(10)
        on_n1 = [p for p in api.list("Pod", "default") if p["spec"].get("nodeName") == "n1"]
        gpus = sum(int(c["resources"]["requests"][GPU]) for p in on_n1 for c in p["spec"]["containers"])
        assert gpus <= 4, f"n1 (4 GPUs) got {[p['metadata']['name'] for p in on_n1]}: {gpus} GPUs; bind said {result!r}"
    finally:
        for ext in (ext_a, ext_b):
            ext.close(timeout=2, release=False)


def test_a_binding_the_transport_retries_after_leadership_was_lost_is_not_sent(api: FakeApiServer,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer checks the fence once, then hands the POST to urllib3, whose default Retry
    (3, as the kubernetes client configures it) re-sends it after a connect timeout, each attempt
    with the full write timeout again. "Every API write gives up within leaseDuration -
    renewDeadline" (create_kube_app, docs/operations.md "Never twice") does not hold: the API
    server unreachable - the very partition that costs A its lease - the retry stores A's
    Binding after B took over."""
    api.create(pod("p", 2))
    p_uid = uid(api, "p")
    ca, cb = FakeClock(), FakeClock()
    a, b = elector(api, "a", ca), elector(api, "b", cb)
    assert a.try_acquire_or_renew() and a.is_leader()
    b.try_acquire_or_renew()
    # the write timeout create_kube_app gives: leaseDuration - renewDeadline (1 s); a fresh pool
    writer = KubeWriter(KubeClient(api.api_client(), timeout=1.0), may_write=a.is_leader)
    real_new_conn = urllib3.connection.HTTPConnection._new_conn
    timed_out: list[int] = []

    def new_conn(self: Any) -> Any:
        if len(timed_out) < 3:
            timed_out.append(1)
            ca.advance(1.0)  # each attempt times out after the write timeout (1 s)
            cb.advance(1.0)
            if len(timed_out) == 3:  # 3 s on: A stopped leading at 2 s, B may take over at 3 s
                assert b.try_acquire_or_renew() and b.is_leader() and b.term() == 2
            raise urllib3.exceptions.ConnectTimeoutError(self, "connect timed out")
        return real_new_conn(self)

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "_new_conn", new_conn)
    try:
        writer.bind("default", "p", p_uid, "n1")  # the fence passes: A leads, just renewed
    except WriteError:
        pass
    assert len(timed_out) == 3 and not a.is_leader() and b.is_leader()
    assert api.get("Pod", "default", "p")["spec"].get("nodeName") is None, \
        "A's Binding was stored after B had taken over"


def test_a_standby_whose_lease_read_was_slow_does_not_lead_while_the_holder_still_does(
        api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """B dates what it observes by the moment its round started, before its GET of the Lease.
    When that GET is slow and A's renewal is committed meanwhile, B dates A's renewal earlier than
    it happened (client-go takes observedTime after the Get) and takes the lease over
    leaseDuration after that too-early date - while A, renewDeadline after its real renewal,
    still passes its write fence. Two leaders write."""
    ca, cb = FakeClock(), FakeClock()  # two machines, their monotonic clocks in step here
    a, b = elector(api, "a", ca), elector(api, "b", cb)  # leaseDuration 3 s, renewDeadline 2 s
    assert a.try_acquire_or_renew() and a.is_leader()
    real_get = b.client.get
    slow = [True]

    def slow_get(path: str, **query: Any) -> Any:
        if slow and path == b.path:
            slow.clear()
            ca.advance(1.5)  # B's GET takes 1.5 s; A renews meanwhile
            cb.advance(1.5)
            assert a.try_acquire_or_renew()
        return real_get(path, **query)

    monkeypatch.setattr(b.client, "get", slow_get)
    assert not b.try_acquire_or_renew()  # it sees A's fresh renewal
    ca.advance(1.5)  # 1.5 s after A's renewal: A leads until 2 s after it
    cb.advance(1.5)
    b.try_acquire_or_renew()
    assert not (a.is_leader() and b.is_leader()), "A and B both pass their write fences"


@pytest.mark.parametrize("lease_duration, renew_deadline", [(2.5, 1.5), (2.4, 1.4), (3.0, 2.0)])
def test_a_standby_waits_a_fractional_lease_duration_out_whole(api: FakeApiServer, lease_duration: float,
                                                              renew_deadline: float) -> None:
    """The holder may start a write until renewDeadline after its renewal and each write is given
    the gap to leaseDuration: a standby must not lead before leaseDuration. The Lease carries
    whole seconds and a standby waits what it says: 2.5 s written as 2 let B lead 0.5 s early."""
    ca, cb = FakeClock(), FakeClock()
    a, b = (LeaderElector(KubeClient(api.api_client()), name="kube-extender", namespace="default", identity=who,
                          lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=0.25, clock=clock)
            for who, clock in (("a", ca), ("b", cb)))
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew()  # it observes A's renewal
    ca.advance(lease_duration - 0.05)  # A's last write, started at renewDeadline, may still land now
    cb.advance(lease_duration - 0.05)
    assert not b.try_acquire_or_renew(), api.get("Lease", "default", "kube-extender")["spec"]
