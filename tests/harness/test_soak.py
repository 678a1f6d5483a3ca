"""A small seeded fault-injection soak (``extender.testing.harness.soak``; the full run is
``benchmarks/soak.py``): plain, shared, gang, preempting and infeasible pods through the emulated
kube-scheduler and two kube-extender processes over a faulty API server, one of them SIGKILLed
mid-bind and restarted, a clean hand-over, leader failovers. Only invariants are asserted, all
checked from the API server's objects: never a node or a device over capacity, never an
allocation on an unbound pod, every pod still Pending says why, every gang all or nothing, never
a victim of equal or higher priority, and every pod that can run was resolved."""

from __future__ import annotations

import pytest

from extender.testing.harness.soak import VIOLATION_KINDS, SoakSpec, run_soak

SMALL = SoakSpec(pods=160, nodes=6, runtime=(0.5, 2.0), kill_every=5.0, restart_after=2.0, handover_every=11.0,
                 fault_rate=2.0, stall_timeout=30.0, timeout=150.0, seed=3)


@pytest.mark.slow
def test_a_small_soak_breaks_no_invariant() -> None:
    result = run_soak(SMALL)
    assert result.action_errors == []
    assert result.violations == {kind: [] for kind in VIOLATION_KINDS}
    assert result.reason == "all resolved"
    assert result.kills >= 1 and result.restarts >= 1 and result.failovers >= 1
    assert sum(result.faults.values()) > 0
    assert result.groups["complete"] > 0 and result.outcomes[("preemptor", "bound")] > 0
