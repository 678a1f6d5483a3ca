"""Reservations: capacity held for pods that are not bound yet, and who it counts against."""

from __future__ import annotations

import pytest
from builders import make_pod

from extender.framework.clock import FakeClock
from extender.framework.views import PodInfo
from extender.queue.reservations import Reservations

GPU = "example.com/gpu"


def pod(name: str, priority: int = 0, gpus: int = 1) -> PodInfo:
    return PodInfo.from_pod(make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).obj(), [GPU])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def held(clock: FakeClock) -> Reservations:
    r = Reservations(clock)
    r.place("g", 10, [("n1", pod("m0", 10)), ("n1", pod("m0", 10)), ("n2", pod("m0", 10))], ttl=5.0)
    return r


@pytest.mark.parametrize("who, n1_held", [
    (pod("other", priority=10), 2),   # equal priority: held against it
    (pod("low", priority=0), 2),      # lower priority: held against it
    (pod("high", priority=11), 0),    # higher priority: may take it
])
def test_slots_count_against_pods_of_equal_or_lower_priority(held: Reservations, who: PodInfo, n1_held: int) -> None:
    assert len(held.held_on("n1", who)) == n1_held
    assert all(p.requests == {GPU: 1000} and p.node_name == "n1" for p in held.held_on("n1", who))
    assert held.nodes() == {"n1", "n2"}


def test_a_claimed_slot_no_longer_counts_against_its_claimer(held: Reservations) -> None:
    m1 = pod("m1", 10)
    assert held.claim("g", m1.uid, prefer={"n2"}) == "n2"
    assert held.held_on("n2", m1) == [] and len(held.held_on("n2", pod("m2", 10))) == 1
    assert held.claim("g", m1.uid) == "n2", "a claim is stable"


def test_a_claim_moves_to_an_offered_node_when_its_own_is_not_offered(held: Reservations) -> None:
    assert held.claim("g", "u-m1", prefer={"n2"}) == "n2"
    assert held.claim("g", "u-m1", prefer={"n1"}) == "n1"
    assert held.claim("g", "u-m2", prefer={"n2"}) == "n2", "the slot it left is free again"
    assert held.claim("g", "u-m3", prefer={"n2"}) is None, "n2's only slot is taken"
    assert held.claim("g", "u-m3", prefer={"n3"}) is None


@pytest.mark.parametrize("claims, consumer, node, left", [
    ({"u-a": "n2"}, "u-a", "n1", {"n1": 2}),           # its claimed slot goes, wherever it landed
    ({}, "u-a", "n2", {"n1": 2}),                     # no claim: an unclaimed slot on its node
    ({}, "u-a", "n9", {"n1": 1, "n2": 1}),            # none on its node: any unclaimed slot
])
def test_consume_drops_the_slot_the_pod_stood_for(held: Reservations, claims: dict[str, str], consumer: str,
                                                 node: str, left: dict[str, int]) -> None:
    for uid, where in claims.items():
        held.claim("g", uid, prefer={where})
    assert held.consume("g", consumer, node)
    assert held.describe()[0]["nodes"] == left


def test_the_last_consume_ends_the_reservation(held: Reservations) -> None:
    for i in range(3):
        assert held.consume("g", f"u-{i}", "n1")
    assert held.get("g") is None and held.nodes() == set() and not held.consume("g", "u-9", "n1")


def test_a_reservation_without_progress_expires_and_progress_extends_it(held: Reservations, clock: FakeClock) -> None:
    clock.advance(4.0)
    held.claim("g", "u-m1")
    clock.advance(4.0)
    assert held.get("g") is not None, "the claim extended the deadline"
    clock.advance(1.5)
    assert held.nodes() == set() and held.get("g") is None and held.describe() == []


def test_release_and_replace(held: Reservations) -> None:
    held.place("g", 10, [("n3", pod("m0", 10))], ttl=5.0)
    assert held.nodes() == {"n3"}
    assert held.release("g") and not held.release("g") and held.nodes() == set()


def test_unclaimed_slots_do_not_count_against_the_pods_they_are_for(clock: FakeClock) -> None:
    r = Reservations(clock)
    r.place("g", 0, [("n1", pod("m0")), ("n1", pod("m0"))], ttl=5.0, member=lambda p: p.name.startswith("m"))
    r.claim("g", "u-m1")
    assert len(r.held_on("n1", pod("m2"))) == 1, "m1's claimed slot still counts against m2"
    assert len(r.held_on("n1", pod("x"))) == 2, "both count against a pod of another group"


def test_held_on_never_waits_for_the_lock(held: Reservations) -> None:
    """The engine reads slots inside the cache's atomic assume while a planner may be in
    ``atomically`` and wait for the cache: reading must not take the lock (no deadlock)."""
    import threading
    holding, done = threading.Event(), threading.Event()

    def planner() -> None:
        held.atomically(lambda: (holding.set(), done.wait(10)))

    t = threading.Thread(target=planner)
    t.start()
    holding.wait(5)
    try:
        result: list[int] = []
        reader = threading.Thread(target=lambda: result.append(len(held.held_on("n1", pod("x")))))
        reader.start()
        reader.join(5)
        assert result == [2], "held_on blocked on the reservations lock"
    finally:
        done.set()
        t.join()


def test_releases_are_reported_with_their_nodes(clock: FakeClock) -> None:
    freed: list[set[str]] = []
    r = Reservations(clock, on_release=freed.append)
    r.place("g", 0, [("n1", pod("m0")), ("n2", pod("m0"))], ttl=5.0)
    r.consume("g", "u-m0", "n1")
    assert freed == [], "a consumed slot is not freed capacity: its pod holds it now"
    r.release("g")
    r.place("h", 0, [("n3", pod("m0"))], ttl=5.0)
    clock.advance(6)
    r.nodes()
    assert freed == [{"n2"}, {"n3"}]


def test_claims_prefer_the_slot_planned_for_the_pod_then_one_of_its_size(clock: FakeClock) -> None:
    r = Reservations(clock)
    big, small = pod("big", gpus=2), pod("small", gpus=1)
    r.place("g", 0, [("n1", big), ("n2", small)], ttl=5.0)
    assert r.claim("g", "u-small") == "n2", "its own planned slot"
    assert r.claim("g", "u-other", requests=pod("other", gpus=1).requests) is None, "no free slot of its size"
    assert r.claim("g", "u-other2", requests=pod("other2", gpus=2).requests) == "n1"


def test_extending_adds_slots_to_what_the_owner_holds_and_renews_it(held: Reservations, clock: FakeClock) -> None:
    clock.advance(4.0)
    held.place("g", 10, [("n3", pod("m1", 10))], ttl=5.0, extend=True)
    held.place("g", 10, [("n3", pod("m2", 10))], ttl=5.0, extend=True)
    clock.advance(4.0)  # past the first placement's expiry, within the extension's
    assert held.nodes() == {"n1", "n2", "n3"} and len(held.held_on("n3", pod("other", 10))) == 2
    held.place("g", 10, [("n4", pod("m3", 10))], ttl=5.0)  # without extend: replaces
    assert held.nodes() == {"n4"}


def test_held_lists_every_live_slot_with_the_pod_it_stands_for(held: Reservations, clock: FakeClock) -> None:
    held.place("admitted/u-x", 0, [("n3", pod("x"))], ttl=1.0)
    assert held.claim("g", "u-m1", prefer={"n2"}) == "n2"
    slots = sorted((uid, p.node_name) for uid, p in held.held())
    assert slots == [("u-m0", "n1"), ("u-m0", "n1"), ("u-m1", "n2"), ("u-x", "n3")]
    clock.advance(2.0)  # the admission hold expired: no longer listed, even before anyone drops it
    assert sorted(p.node_name for _, p in held.held()) == ["n1", "n1", "n2"]


def test_held_amounts_follow_every_change_as_held_on_counts_it(clock: FakeClock) -> None:
    """The batch Filter's per-row amounts, updated with what changed since it last asked, equal
    the per-node placeholders ``held_on`` counts - after placing, extending, claiming, consuming,
    releasing and expiring - and say "judge per node" for a pod a reservation concerns."""
    r = Reservations(clock)
    index = {"n1": 0, "n2": 1, "n3": 2}
    outsider = pod("outsider", priority=0)

    def agree() -> None:
        found = r.held_amounts(outsider, index, 3)
        assert found is not None
        amounts, claims = found
        column = amounts.get(GPU)
        got = column.tolist() if column is not None else [0, 0, 0]
        want = [sum(p.requests.get(GPU, 0) for p in r.held_on(n, outsider)) for n in index]
        assert got == want
        assert sorted(claims) == sorted((s.node, s.claimed_by) for res in map(r.get, ("g", "h")) if res is not None
                                        for s in res.slots.values() if s.claimed_by is not None)

    agree()
    r.place("g", 10, [("n1", pod("m0", 10)), ("n1", pod("m1", 10, gpus=2)), ("n2", pod("m2", 10))], ttl=5.0)
    agree()
    r.place("h", 5, [("n3", pod("k0", 5, gpus=3))], ttl=50.0, member=lambda p: p.name.startswith("k"))
    agree()
    assert r.claim("g", "u-m1") == "n1"
    agree()
    assert r.held_amounts(pod("m1", 0), index, 3) is None  # its claimed slot does not count against it
    assert r.held_amounts(pod("m0", 0), index, 3) is None  # nor the slot planned for it
    assert r.held_amounts(pod("k9", 0), index, 3) is None  # a member of h
    assert r.held_amounts(pod("k9", 6), index, 3) is not None  # ... whom h (priority 5) does not concern
    assert r.consume("g", "u-m1", "n1")
    agree()
    r.place("g", 10, [("n3", pod("m3", 10))], ttl=5.0, extend=True)
    agree()
    assert r.claim("g", "u-m2") == "n2"
    agree()
    assert r.unclaim_except("g", set()) == 1
    agree()
    clock.advance(10.0)  # g expires, h lives
    agree()
    r.release("h")
    agree()


def test_answers_kept_from_the_last_look_never_outlive_an_expiry(clock: FakeClock) -> None:
    """The held nodes and the batch amounts answer from their last look while nothing changed
    and nothing can have expired - also when a reservation kept long is placed again, with a
    timeout that ends first."""
    r = Reservations(clock)
    index = {"n1": 0}
    outsider = pod("outsider")

    def held_gpus() -> list[int]:  # thousandths of a GPU
        found = r.held_amounts(outsider, index, 1)
        assert found is not None
        column = found[0].get(GPU)
        return column.tolist() if column is not None else [0]

    r.place("g", 10, [("n1", pod("m0", 10))], ttl=5.0)
    r.keep("g", 100.0)
    clock.advance(6.0)  # past its timeout, kept
    assert r.node_set() == {"n1"} and held_gpus() == [1000]
    r.place("g", 10, [("n1", pod("m0", 10))], ttl=5.0)  # placed again: ends at 11, before the keep's 106
    assert r.node_set() == {"n1"} and held_gpus() == [1000]
    clock.advance(4.0)
    assert r.node_set() == {"n1"} and held_gpus() == [1000]
    clock.advance(2.0)
    assert r.node_set() == frozenset() and held_gpus() == [0]


@pytest.mark.parametrize("progress", ["claim", "consume", "extend", "keep"])
def test_progress_never_ends_a_reservation_sooner_than_a_keep(clock: FakeClock, progress: str) -> None:
    """A member waiting in Permit keeps its group's slots (``keep``) as long as it may wait; a
    later claim, consume or extension restarts the reservation's own, shorter timeout - which
    must not cut that keep short."""
    r = Reservations(clock)
    r.place("g", 10, [("n1", pod("m0", 10)), ("n2", pod("m1", 10))], ttl=1.0)
    r.keep("g", 3.0)
    {"claim": lambda: r.claim("g", "u-m0"), "consume": lambda: r.consume("g", "u-m0", "n1"),
     "extend": lambda: r.place("g", 10, [("n3", pod("m2", 10))], ttl=1.0, extend=True),
     "keep": lambda: r.keep("g", 0.5)}[progress]()
    clock.advance(2.0)
    assert r.get("g") is not None and "n2" in r.node_set() and len(r.held_on("n2", pod("other", 10))) == 1
    clock.advance(1.5)
    assert r.get("g") is None and r.node_set() == frozenset()
