"""The emulator raises the garbage collector's first threshold while runs last, and gives the
process its thresholds back when the last overlapping run ends."""

from __future__ import annotations

import gc
from typing import Iterator

import pytest

from extender.sim.scheduler import _fewer_collections


@pytest.fixture
def thresholds() -> Iterator[tuple[int, ...]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_overlapping_runs_restore_the_thresholds_when_the_last_ends(thresholds: tuple[int, ...]) -> None:
    _fewer_collections.__enter__()
    assert gc.get_threshold() == (20_000, 10, 10)
    _fewer_collections.__enter__()
    _fewer_collections.__exit__(None, None, None)  # the first run ends: the second still runs
    assert gc.get_threshold() == (20_000, 10, 10)
    _fewer_collections.__exit__(None, None, None)
    assert gc.get_threshold() == thresholds


def test_a_higher_threshold_is_kept(thresholds: tuple[int, ...]) -> None:
    gc.set_threshold(50_000, 10, 10)
    with _fewer_collections:
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (50_000, 10, 10)
