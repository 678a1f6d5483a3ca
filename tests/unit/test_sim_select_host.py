"""``selectHost`` in the emulator (``extender.sim.placement.select_index``): the same host and
the same draws from the seeded random source as kube-scheduler's node-by-node reservoir
sampling, so a seeded run places pods as it always did."""

from __future__ import annotations

import random

import pytest

from extender.sim.placement import select_index


def reservoir(totals: list[int], rng: random.Random) -> int:
    """``selectHost`` as upstream writes it."""
    best, best_score, count = 0, totals[0], 1
    for i, score in enumerate(totals[1:], 1):
        if score > best_score:
            best, best_score, count = i, score, 1
        elif score == best_score:
            count += 1
            if rng.randrange(count) == 0:
                best = i
    return best


@pytest.mark.parametrize("spread", [1, 3, 100, 2**70], ids=["mostly-ties", "some-ties", "few-ties", "beyond-int64"])
def test_the_choice_and_the_draws_are_the_loops(spread: int) -> None:
    cases = random.Random(spread)
    for _ in range(500):
        totals = [cases.randint(0, spread) for _ in range(cases.randint(1, 40))]
        seed = cases.random()
        ours, theirs = random.Random(seed), random.Random(seed)
        assert select_index(totals, ours) == reservoir(totals, theirs), totals
        assert ours.random() == theirs.random(), totals  # as many draws, of the same sizes


def test_no_tie_draws_nothing() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    assert select_index([3, 9, 1, 8], rng) == 1 and rng.getstate() == state
