"""Issue 11 scenarios, end to end: the emulated kube-scheduler and kube-extender each follow the
fake API server through their own watch, one of them lagging (``extender.testing.harness``).

Lag orders: "scheduler first" = kube-scheduler's informer sees every change at once and the
extender's watch 300 ms later (what was observed with a real v1.30 scheduler, protocol spec
13.9); "extender first" = the reverse. Bounds are generous: outcomes, never speed.
"""

from __future__ import annotations

import time

import pytest

from extender.testing.harness import ADMISSION_GATE, Harness, node, pod, priority_class

LAG = 0.3


LAG_ORDERS = [pytest.param(0.0, LAG, id="scheduler-first"), pytest.param(LAG, 0.0, id="extender-first")]
"""(scheduler delay, extender delay) for both orders."""


@pytest.mark.parametrize("scheduler_delay, extender_delay", LAG_ORDERS)
def test_a_pod_rejected_for_a_managed_resource_is_bound_soon_after_the_resource_frees(
        scheduler_delay: float, extender_delay: float) -> None:
    """A pending pod rejected by the extender for lack of a GPU; the pod holding the GPU is
    deleted once the waiting pod's backoff is over, so only the deletion event retries it."""
    with Harness(objects=[node("n1", gpus=1), pod("holder", 1, node="n1")],
                 scheduler_delay=scheduler_delay, extender_delay=extender_delay) as h:
        h.create_pod(pod("waiter", 1))
        assert h.wait_until(lambda: h.pod("waiter").rejections, timeout=5), "the extender rejects it first"
        time.sleep(1.2)  # kube-scheduler's initial backoff (1 s) is over: an event, not the backoff, retries it
        h.delete_pod("holder")
        deleted = h.now()
        bound = h.wait_until(lambda: h.pod("waiter").bound_at is not None, timeout=4)
        waiter = h.pod("waiter")
        assert bound, (f"still Pending {h.now() - deleted:.1f}s after the deletion, the GPU idle; "
                       f"attempts after it: {[(round(r.time - deleted, 3), r.by_extender) for r in waiter.rejections if r.time >= deleted]}")
        assert waiter.node == "n1" and not h.violations


@pytest.mark.parametrize("scheduler_delay, extender_delay", LAG_ORDERS)
def test_one_admission_pass_admits_no_more_pods_than_fit(scheduler_delay: float, extender_delay: float) -> None:
    """Two GPUs free, three gated pods of different priorities asking one each: the two highest
    are admitted and bound, the third stays gated until capacity frees, then it is admitted."""
    objects = [priority_class("high", 1000), priority_class("mid", 500), priority_class("low", 100),
               node("n1", gpus=4), pod("run-1", 1, node="n1"), pod("run-2", 1, node="n1")]
    objects += [pod(name, 1, priority_class=name, gates=[ADMISSION_GATE]) for name in ("low", "mid", "high")]
    with Harness(objects=objects, scheduler_delay=scheduler_delay, extender_delay=extender_delay) as h:
        assert h.wait_until(lambda: all(h.pod(n).bound_at is not None for n in ("high", "mid")), timeout=8), \
            f"the two highest-priority pods are bound: {[h.pod(n) for n in ('high', 'mid')]}"
        time.sleep(1.5)  # more than an admission interval: another pass had its chance
        low = h.pod("low")
        assert low.ungated_at is None, (
            f"low was admitted at {low.ungated_at:.2f}s (high at {h.pod('high').ungated_at:.2f}s, mid at "
            f"{h.pod('mid').ungated_at:.2f}s) with only 2 GPUs free; bound: {low.bound_at}")
        h.delete_pod("high")
        assert h.wait_until(lambda: h.pod("low").bound_at is not None, timeout=8), "admitted once capacity frees"
        assert not h.violations
