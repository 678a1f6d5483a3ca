"""A small seeded churn (``extender.testing.harness.churn``) in both lag orders: pods arrive
faster than capacity frees, and every one of them must be bound - none may stay Pending while
the capacity it needs sits free. kube-scheduler's own backoff (up to 10 s after a pod's last
attempt) is allowed for: the run stops only after 12 s without a binding."""

from __future__ import annotations

import dataclasses

import pytest

from extender.testing.harness.churn import ChurnSpec, run_churn

SMALL = ChurnSpec(pods=100, nodes=4, gpus_per_node=4, arrival_rate=25.0, runtime=(0.2, 0.6), stall_timeout=12.0,
                  timeout=60.0, seed=11)


@pytest.mark.parametrize("scheduler_delay, extender_delay", [pytest.param(0.0, 0.15, id="scheduler-first"),
                                                             pytest.param(0.15, 0.0, id="extender-first")])
def test_churn_binds_every_pod_and_never_overcommits(scheduler_delay: float, extender_delay: float) -> None:
    result = run_churn(dataclasses.replace(SMALL, scheduler_delay=scheduler_delay, extender_delay=extender_delay))
    assert result.violations == []
    assert result.stuck == [], f"pending at the end with room for them: {result.stuck}"
    assert result.reason == "all bound", (result.reason, [life.key for life in result.lives if life.pending])
    assert result.rejected > 0, "pods arrived faster than capacity: some were turned away first"
    assert len(result.latencies) == result.rejected
