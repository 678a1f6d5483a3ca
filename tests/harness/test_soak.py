"""A small seeded fault-injection soak (``extender.testing.harness.soak``; the full run is
``benchmarks/soak.py``): plain, shared, gang, preempting and infeasible pods through the emulated
kube-scheduler and two kube-extender processes over a faulty API server, one of them SIGKILLed
mid-bind and restarted, a clean hand-over, leader failovers. Only invariants are asserted, all
checked from the API server's objects: never a node or a device over capacity, never an
allocation on an unbound pod, every pod still Pending says why, every gang all or nothing, never
a victim of equal or higher priority (but for reclaim from another namespace), never a namespace
over its quota's max nor kept from its min for long, and every pod that can run was resolved.
A second small run is one quota tide, which must reclaim by eviction."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
from kubernetes import client

from extender.testing.fakeapi import builders
from extender.testing.fakeapi.fixtures import api, api_client, core  # noqa: F401 - pytest fixtures
from extender.runtime import scheduling
from extender.runtime.outcomes import FilterOutcome
from extender.testing.harness.soak import FAULT_WINDOW, VIOLATION_KINDS, SoakSpec, _Soak, run_soak

# A run may stall while the faults go on - the last pods' retries meeting a replica killed or a
# Binding failed, again and again -; the feasible pods left must then resolve once they stop.
ENDED = ("all resolved", "stalled, resolved once the faults stopped")

SMALL = SoakSpec(pods=160, nodes=6, runtime=(0.5, 2.0), kill_every=5.0, restart_after=2.0, handover_every=11.0,
                 fault_rate=2.0, stall_timeout=30.0, timeout=150.0, tide_every=0.0, seed=3)
TIDE = SoakSpec(pods=90, nodes=4, arrival_rate=15.0, runtime=(0.5, 2.0), kill_every=8.0, restart_after=2.0,
                handover_every=0.0, fault_rate=1.0, tide_every=30.0, tide_delay=2.0, tide_hold=(10.0, 12.0),
                tide_borrow=0.875, stall_timeout=30.0, timeout=120.0, seed=5)
QUIET = SoakSpec(pods=24, nodes=6, arrival_rate=12.0, runtime=(0.5, 1.0), fault_rate=0.0, kill_every=0.0,
                 handover_every=0.0, replicas=1, processes=False, tide_every=0.0, stall_timeout=5.0, timeout=120.0,
                 seed=3)


def bind(core: client.CoreV1Api, pod: str, node: str) -> int:  # noqa: F811
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod), target=client.V1ObjectReference(kind="Node", name=node))
    return int(core.create_namespaced_pod_binding(pod, "default", body, _preload_content=False).status)


@pytest.mark.slow
def test_a_small_soak_breaks_no_invariant() -> None:
    result = run_soak(SMALL)
    assert result.action_errors == []
    assert result.violations == {kind: [] for kind in VIOLATION_KINDS}
    assert result.reason in ENDED
    assert result.kills >= 1 and result.restarts >= 1 and result.failovers >= 1
    assert sum(result.faults.values()) > 0
    assert result.groups["complete"] > 0 and result.outcomes[("preemptor", "bound")] > 0


@pytest.mark.slow
def test_a_tide_of_borrowers_is_reclaimed_from_under_faults() -> None:
    """One tide: ml-a borrows most of a 4-node cluster for 10-12 s; 2 s later ml-b's pods within
    its min arrive, at the borrowers' priority, so only reclaim by quota makes room for them in
    time - while the API server fails requests and the serving replica is killed."""
    result = run_soak(TIDE)
    assert result.action_errors == []
    assert result.violations == {kind: [] for kind in VIOLATION_KINDS}
    assert result.reason in ENDED
    assert result.quota_evictions >= 1 and result.borrowed_peak["ml-a"] > 0
    # every reclaim pod is bound: one bound and later preempted by a pod of higher priority (the
    # "preemption" check above holds every Preempted Event to that) was reclaimed all the same
    reclaimed = result.outcomes[("reclaim", "bound")] + result.outcomes[("reclaim", "preempted")]
    assert reclaimed == sum(n for (kind, _), n in result.outcomes.items() if kind == "reclaim")


def test_the_quota_check_sees_a_namespace_over_max_and_a_reclaim_that_takes_too_long() -> None:
    """The soak's ``quota`` check on its own, fed Pod writes: 6 nodes x 8 GPUs, so each namespace
    has its min and max: ml-a 18 and 42 GPUs, ml-b 30 and 36."""
    from extender.testing.harness.soak import RECLAIM_WITHIN, _QuotaWatch

    clock = [0.0]

    def gpu_pod(name: str, ns: str, gpus: int, node: str = "") -> dict:
        obj = builders.pod(name, ns, node=node or None)
        obj["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": str(gpus)}}
        return obj

    watch = _QuotaWatch(SMALL, {"ml-a/wait"}, {}, lambda: clock[0])
    assert watch.quotas == {"ml-a": (18, 42), "ml-b": (30, 36)}
    watch.write("ADDED", gpu_pod("big", "ml-b", 34, node="n1"))  # ml-b borrows 4
    watch.write("ADDED", gpu_pod("wait", "ml-a", 4))  # ml-a, under its min, waits
    clock[0] = RECLAIM_WITHIN + 1
    watch.write("ADDED", gpu_pod("more", "ml-b", 3, node="n2"))  # 37 > max 36
    watch.write("DELETED", gpu_pod("big", "ml-b", 34, node="n1"))  # too late
    assert watch.violations == [
        "31.00s ml-b: 37 GPUs bound, above its max 36 (ml-b/more bound)",
        "0.00s ml-a: under its min with pending demand while others borrowed, for 31.0s"]
    watch.write("DELETED", gpu_pod("more", "ml-b", 3, node="n2"))
    watch.write("ADDED", gpu_pod("big2", "ml-b", 34, node="n1"))
    clock[0] += 5
    watch.write("MODIFIED", gpu_pod("wait", "ml-a", 4, node="n3"))  # reclaimed in time
    watch.finish()
    assert len(watch.violations) == 2 and watch.stretches == [RECLAIM_WITHIN + 1, 5.0]
    assert watch.borrowed_peak == {"ml-a": 0, "ml-b": 7}


class _Timeline:
    """What ``_Soak.inject`` needs of the harness: the API server and ``after``, which only records."""

    def __init__(self, api: object) -> None:
        self.api = api
        self.later: list[tuple[float, Callable[[], None]]] = []

    def after(self, seconds: float, fn: Callable[[], None], label: str = "") -> None:
        self.later.append((seconds, fn))

    def now(self) -> float:
        return 0.0


@pytest.mark.parametrize("kind", ["binding-500", "binding-409", "binding-disconnect"])
def test_a_binding_fault_lapses_when_no_binding_comes_in_its_window(api, core, kind) -> None:  # noqa: F811
    """A Binding fault waits for its request FAULT_WINDOW seconds, not for ever: the faults of a
    stream that outlived the traffic piled up, and every Binding of the last pod met one."""
    h = _Timeline(api)
    soak = _Soak(SMALL, h, [])  # type: ignore[arg-type]
    api.create(builders.pod("p"))
    soak.inject(kind)
    soak.inject(kind)
    [(first, lapse), (second, _)] = h.later
    assert first == second == FAULT_WINDOW
    lapse()  # the first one's window is over: the second still waits
    with pytest.raises(Exception):
        bind(core, "p", "n1")
    assert bind(core, "p", "n1") == 201, "the lapsed fault failed a Binding after its window"


@pytest.mark.parametrize("kind", ["list-500", "eviction-500", "lease-500"])
def test_a_fault_of_a_rare_request_waits_for_it(api, kind) -> None:  # noqa: F811
    """Lists, evictions and lease renewals come seldom or on their own clock: their faults do
    not lapse (in 0.5 s most would never meet their request)."""
    h = _Timeline(api)
    _Soak(SMALL, h, []).inject(kind)  # type: ignore[arg-type]
    assert h.later == []


def test_a_stall_without_any_fault_or_kill_is_stuck_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a stall under faults or kills gets SETTLE_SECONDS once they stop: a run with neither,
    stalled by the extender itself (its filter failing for 20 s here, then healing), ends
    "stalled without a fault" with the pods left stuck - not passed once they resolve later."""
    real = scheduling.SchedulingCycle.filter
    started: list[float] = []

    def wedged(self: scheduling.SchedulingCycle, raw_pod: Any, node_names: Any) -> FilterOutcome:
        now = time.monotonic()
        started[:] = started or [now]
        if started[0] + 1.0 <= now < started[0] + 21.0:
            return FilterOutcome(error="device accounting wedged")
        return real(self, raw_pod, node_names)

    monkeypatch.setattr(scheduling.SchedulingCycle, "filter", wedged)
    result = run_soak(QUIET)
    assert sum(result.faults.values()) == 0 and result.kills == result.handovers == 0
    assert result.reason == "stalled without a fault"
    assert result.violations["stuck"]
