"""The emulator's PodDisruptionBudget allowances when no status says them: as the disruption
controller counts - the covered pods are expected, those bound and not being deleted healthy."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_pod

from extender.sim.cache import PodRecord
from extender.sim.preemption import pdbs_from


def _bound(name: str, deleting: bool = False, node: str = "n1") -> PodRecord:
    builder = make_pod(name).uid(f"u-{name}").labels(app="w")
    raw = (builder.node(node) if node else builder).obj()
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return PodRecord.from_raw(raw)


@pytest.mark.parametrize("spec, deleting, allowed", [
    pytest.param({"maxUnavailable": 1}, 0, 1, id="maxun1-all-healthy"),
    pytest.param({"maxUnavailable": 1}, 1, 0, id="maxun1-one-deleting"),
    pytest.param({"maxUnavailable": 2}, 1, 1, id="maxun2-one-deleting"),
    pytest.param({"minAvailable": 2}, 1, 1, id="min2-one-deleting"),
    pytest.param({"minAvailable": "50%"}, 1, 1, id="min50%-of-four-expected"),
])
def test_allowances_count_pods_being_deleted_as_unavailable(spec: dict[str, Any], deleting: int, allowed: int) -> None:
    pods = [_bound(f"w{i}", deleting=i < deleting) for i in range(4)]
    (pdb,) = pdbs_from([{"metadata": {"name": "b", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "w"}}, **spec}}], pods)
    assert pdb.disruptions_allowed == allowed


def test_pending_covered_pods_are_expected_and_not_healthy() -> None:
    """minAvailable 50% over 2 bound and 2 pending covered pods: 4 expected, 2 healthy - no
    disruption allowed."""
    (pdb,) = pdbs_from([{"metadata": {"name": "b", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "w"}}, "minAvailable": "50%"}}],
                       [_bound("w0"), _bound("w1")], [_bound("w2", node=""), _bound("w3", node="")])
    assert pdb.disruptions_allowed == 0
