"""Elastic quotas through the fake API server (issue 17): the extender follows ElasticQuota
objects through its watch, the emulated kube-scheduler calls it, and the quota holds - borrowing
up to max, reclaim from a borrower when the lender's pods arrive, admission at the gate by quota,
a gang admitted whole.
Bounds are generous: outcomes, never speed."""

from __future__ import annotations

import time

import pytest

from extender.framework.pod_group import GROUP_LABEL
from extender.testing.fakeapi import builders
from extender.testing.harness import ADMISSION_GATE, GPU, Harness, node, pod, priority_class

QUOTA = {"profiles": [{"schedulerName": "default-scheduler",
                       "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}]}}}]}


def namespace(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_borrowing_max_cap_and_reclaim_through_the_api_server() -> None:
    """team-a (min 2, max 3) fills 3 of 4 GPUs with high-priority pods, its fourth stays pending
    (max); team-b (min 2) then gets its 2 GPUs back: one of team-a's borrowed pods is evicted
    although its priority is higher, and team-a keeps its min."""
    objects = [namespace("team-a"), namespace("team-b"), priority_class("high", 1000), node("n1", gpus=4),
               builders.elastic_quota("team-a", min={GPU: "2"}, max={GPU: "3"}),
               builders.elastic_quota("team-b", min={GPU: "2"}, max={GPU: "4"})]
    with Harness(objects=objects, extender=QUOTA) as h:
        for i in range(4):
            h.create_pod(pod(f"a{i}", 1, namespace="team-a", priority_class="high"))
        assert h.wait_until(lambda: sum(h.pod(f"a{i}", "team-a").bound_at is not None for i in range(4)) == 3,
                            timeout=8), "team-a borrows up to its max"
        time.sleep(1.0)
        assert sum(h.pod(f"a{i}", "team-a").bound_at is not None for i in range(4)) == 3, "never beyond max"
        for i in range(2):
            h.create_pod(pod(f"b{i}", 1, namespace="team-b"))
        assert h.wait_until(lambda: all(h.pod(f"b{i}", "team-b").bound_at is not None for i in range(2)),
                            timeout=10), "team-b reclaims its guaranteed GPUs"
        running = [i for i in range(4) if h.pod(f"a{i}", "team-a").bound_at is not None
                   and h.pod(f"a{i}", "team-a").finished_at is None]
        assert len(running) == 2, running
        assert not h.violations


def test_admission_holds_pods_over_quota_at_the_gate() -> None:
    """Three gated pods of team-a (max 1 from its ElasticQuota): one is admitted and bound, the
    others never reach kube-scheduler until it ends."""
    objects = [namespace("team-a"), node("n1", gpus=4), builders.elastic_quota("team-a", min={GPU: "1"}, max={GPU: "1"})]
    with Harness(objects=objects, extender=QUOTA) as h:
        for i in range(3):
            h.create_pod(pod(f"p{i}", 1, namespace="team-a", gates=[ADMISSION_GATE]))
        assert h.wait_until(lambda: sum(h.pod(f"p{i}", "team-a").bound_at is not None for i in range(3)) == 1,
                            timeout=8)
        time.sleep(1.5)  # more than an admission interval
        lives = [h.pod(f"p{i}", "team-a") for i in range(3)]
        assert sum(life.ungated_at is not None for life in lives) == 1, lives
        first = next(life for life in lives if life.bound_at is not None)
        h.delete_pod(first.key.split("/")[1], "team-a")
        assert h.wait_until(lambda: sum(h.pod(f"p{i}", "team-a").bound_at is not None
                                        and h.pod(f"p{i}", "team-a").finished_at is None for i in range(3)) == 1,
                            timeout=8), "the next one is admitted once the first ends"
        assert not h.violations


def test_a_gang_is_admitted_whole_within_its_quota() -> None:
    """team-a may use 3 GPUs: of two gated groups, the one of 3 is admitted and bound whole, the
    one of 4 never leaves the gate."""
    objects = [namespace("team-a"), node("n1", gpus=8),
               builders.elastic_quota("team-a", min={GPU: "3"}, max={GPU: "3"}),
               builders.podgroup("small", "team-a", min_member=3), builders.podgroup("big", "team-a", min_member=4)]
    config = {"profiles": [{"schedulerName": "default-scheduler",
                            "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}, {"name": "Gang"}]}}}]}
    with Harness(objects=objects, extender=config) as h:
        for group, size in (("big", 4), ("small", 3)):
            for i in range(size):
                h.create_pod(pod(f"{group}{i}", 1, namespace="team-a", gates=[ADMISSION_GATE],
                                 labels={GROUP_LABEL: group}))
        assert h.wait_until(lambda: all(h.pod(f"small{i}", "team-a").bound_at is not None for i in range(3)),
                            timeout=10), "the group within the quota is bound whole"
        time.sleep(1.5)  # more than an admission interval
        assert all(h.pod(f"big{i}", "team-a").ungated_at is None for i in range(4)), "the other stays gated whole"
        assert not h.violations



@pytest.mark.parametrize("gated", [
    True,
    pytest.param(False, marks=pytest.mark.xfail(strict=True, reason=(
        "kube-scheduler, which counts the GPUs itself and sees no node with room, calls neither the "
        "extender's filter (whose PostFilter reclaims) nor its preempt verb with victims of equal "
        "priority; the extender does not yet reclaim for such a pod on its own"))),
], ids=["gated", "ungated"])
def test_reclaim_of_a_resource_kube_scheduler_counts_from_borrowers_of_equal_priority(gated: bool) -> None:
    """The soak's tides, reduced: whole GPUs counted by kube-scheduler too
    (``ignoredByScheduler: false``), team-a (min 1) borrows all 4 GPUs, then team-b's pod within
    its min arrives at the borrowers' priority. Gated, it reclaims at admission (the admitter
    runs the PostFilter); ungated it waits for a borrower to end (see the xfail reason)."""
    config = {**QUOTA, "managedResources": [{"name": GPU, "ignoredByScheduler": False}],
              "admission": {"enabled": True}}
    objects = [namespace("team-a"), namespace("team-b"), node("n1", gpus=4),
               builders.elastic_quota("team-a", min={GPU: "1"}, max={GPU: "4"}),
               builders.elastic_quota("team-b", min={GPU: "3"}, max={GPU: "4"})]
    with Harness(objects=objects, extender=config) as h:
        for i in range(4):
            h.create_pod(pod(f"a{i}", 1, namespace="team-a"))
        assert h.wait_until(lambda: all(h.pod(f"a{i}", "team-a").bound_at is not None for i in range(4)),
                            timeout=8), "team-a borrows all of team-b's unused min"
        h.create_pod(pod("b0", 1, namespace="team-b", gates=(ADMISSION_GATE,) if gated else ()))
        assert h.wait_until(lambda: h.pod("b0", "team-b").bound_at is not None, timeout=10), \
            "team-b's pod within its min gets a borrowed GPU back"
        assert not h.violations
