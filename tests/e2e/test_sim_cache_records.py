"""The emulator's cache node order as nodes come, change zone and go, and a cycle's scores as
columns (``ScoreTable``) read as node -> plugin -> score."""

from __future__ import annotations

import pytest
from builders import make_node

from extender.sim.cache import SchedulerCache
from extender.sim.records import ScoreTable

ZONE = "topology.kubernetes.io/zone"


def _node(name: str, zone: str) -> dict:
    return make_node(name).labels(**{ZONE: zone}).obj()


@pytest.mark.parametrize("steps, order", [
    ([("add", "a0", "a"), ("add", "a1", "a"), ("add", "b0", "b")], ("a0", "b0", "a1")),
    # a node moving to another zone is interleaved there (zones in order of their first node)
    ([("add", "a0", "a"), ("add", "a1", "a"), ("add", "a2", "a"), ("add", "b0", "b"), ("add", "a0", "b")],
     ("a0", "a1", "b0", "a2")),
    ([("add", "a0", "a"), ("add", "b0", "b"), ("add", "a1", "a"), ("remove", "b0", "")], ("a0", "a1")),
])
def test_snapshot_order_follows_nodes_and_zones(steps: list[tuple[str, str, str]], order: tuple[str, ...]) -> None:
    cache = SchedulerCache()
    for i, (op, name, zone) in enumerate(steps):
        if op == "add":
            cache.upsert_node(_node(name, zone))
        else:
            cache.remove_node(name)
        if i == 0:
            assert cache.snapshot().order == (name,)
    snap = cache.snapshot()
    assert snap.order == order and [n.name for n in snap.ordered()] == list(order)
    assert [n.name for n in cache.nodes()] == list(order)


@pytest.mark.parametrize("columns, rows", [
    ([("Fit", [1, 2]), ("extender:e", [10, None])], {"n1": {"Fit": 1, "extender:e": 10}, "n2": {"Fit": 2}}),
    ([("extender:e", [1, 2]), ("extender:e", [None, 5])], {"n1": {"extender:e": 1}, "n2": {"extender:e": 5}}),
    ([], {"n1": {}, "n2": {}}),
])
def test_score_table_reads_as_rows(columns: list, rows: dict) -> None:
    table = ScoreTable(["n1", "n2"], columns)
    assert dict(table) == rows and table == rows and len(table) == 2 and table["n2"] == rows["n2"]
