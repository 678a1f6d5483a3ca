"""Gang's GroupManager: what it keeps per group and its Permit and Unreserve decisions, driven
directly with a fake clock and a fake waiting room (no engine; threads only where the point is
concurrent Permits). Every test runs twice: with the room's departure count (``room_left``: Permit
skips looking up members while nobody left the room) and without it (every member looked up):
the decisions must be the same."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import pytest

from extender.framework.clock import FakeClock
from extender.framework.status import Status
from policies.gang.logic import Group
from policies.gang.manager import GroupManager, Members, PermitDecision, UnreserveDecision, Verdict

G: Group = ("default", "g")
H: Group = ("default", "h")
BACKOFF = 30.0
SWEEP = 10.0


class Pods(dict[str, Group]):
    """uid -> group, counting the pods that leave (``WaitingPodsView.left``)."""

    left = 0

    def __delitem__(self, uid: str) -> None:
        super().__delitem__(uid)
        self.left += 1

    def pop(self, uid: str, *default: object) -> object:  # type: ignore[override]
        if uid in self:
            self.left += 1
        return super().pop(uid, *default)


TRACKED = [True]
"""Whether the managers made now are given the room's departure count (see ``tracking``)."""


@pytest.fixture(autouse=True, params=[True, False], ids=["room-left", "look-up-all"])
def tracking(request: pytest.FixtureRequest) -> None:
    TRACKED[0] = request.param


@dataclass
class Room:
    """The waiting room as the manager sees it: uid -> group of each pod waiting in Permit. The
    manager's lookup returns the uid itself as the room's entry."""

    pods: Pods = field(default_factory=Pods)
    looked: int = 0
    """Lookups so far."""

    def lookup(self, group: Group, uid: str) -> str | None:
        self.looked += 1
        return uid if self.pods.get(uid) == group else None


@dataclass
class Gang:
    """A manager over a fake clock and room; ``arrive`` is a member's Permit as the framework
    runs it (the pod enters the room first; members let go leave it)."""

    clock: FakeClock = field(default_factory=FakeClock)
    room: Room = field(default_factory=Room)
    manager: GroupManager[str] = field(init=False)

    def __post_init__(self) -> None:
        self.manager = GroupManager(self.clock.monotonic, BACKOFF, self.room.lookup, sweep_every=SWEEP,
                                    room_left=(lambda: self.room.pods.left) if TRACKED[0] else None)

    def arrive(self, uid: str, needed: int | None = 3, members: Members | None = None,
               group: Group = G) -> PermitDecision[str]:
        self.room.pods[uid] = group
        decision = self.manager.permit(group, uid, needed, members or {})
        if decision.verdict is not Verdict.WAIT:
            for gone in (uid, *decision.others):
                del self.room.pods[gone]
        return decision

    def fail(self, uid: str, group: Group = G) -> UnreserveDecision[str]:
        """Unreserve of ``uid`` (it leaves the room, as the framework removes a failed pod)."""
        decision = self.manager.unreserve(group, uid)
        self.room.pods.pop(uid, None)
        return decision

    def let_go(self, *uids: str, group: Group = G) -> None:
        """The group of ``uids`` (its size) goes: they are let go and leave the room."""
        *first, last = uids
        for uid in first:
            assert self.arrive(uid, len(uids), group=group).verdict is Verdict.WAIT
        assert self.arrive(last, len(uids), group=group).verdict is Verdict.ALLOW


def wait(counted: int) -> PermitDecision[str]:
    return PermitDecision(Verdict.WAIT, counted=counted)


def allow(*others: str) -> PermitDecision[str]:
    return PermitDecision(Verdict.ALLOW, others=others)


# ---- Permit --------------------------------------------------------------------------------------

@pytest.mark.parametrize("needed, members, arrivals, decisions", [
    (3, {}, ["m0", "m1", "m2"], [wait(1), wait(2), allow("m0", "m1")]),
    (1, {}, ["m0"], [allow()]),
    (3, {"b0": True, "b1": True}, ["m2"], [allow()]),
    (3, {"b0": True, "a1": False}, ["m2"], [wait(2)]),
    (2, {"m0": True}, ["m0"], [wait(1)]),
    (2, {"m0": True}, ["m1"], [allow()]),
], ids=["the last arrival lets the waiting ones go", "a group of one goes at once",
        "bound members count", "members not bound yet do not count",
        "a member already shown bound counts once", "a bound member and one arriving complete a pair"])
def test_permit_counts_waiting_and_bound_members(needed: int, members: Members, arrivals: list[str],
                                                 decisions: list[PermitDecision[str]]) -> None:
    gang = Gang()
    got = [gang.arrive(uid, needed, members) for uid in arrivals]
    assert [(d.verdict, sorted(d.others), d.counted) for d in got] == \
        [(d.verdict, sorted(d.others), d.counted) for d in decisions]


def test_letting_a_group_go_moves_its_members_from_waiting_to_let_go() -> None:
    gang = Gang()
    gang.arrive("m0")
    gang.arrive("m1")
    assert gang.manager.kept().waiting == {G: frozenset({"m0", "m1"})}
    gang.arrive("m2")
    kept = gang.manager.kept()
    assert kept.waiting == {} and kept.allowed == {G: frozenset({"m0", "m1", "m2"})}


def test_a_permit_counts_only_its_own_groups_waiting_members() -> None:
    gang = Gang()
    gang.arrive("h0", group=H)
    gang.arrive("h1", group=H)
    assert gang.arrive("g0", needed=3) == wait(1)
    assert gang.arrive("h2", group=H) == allow("h0", "h1")
    assert gang.manager.kept().waiting == {G: frozenset({"g0"})}


def test_a_member_that_left_the_room_is_not_counted_and_is_forgotten() -> None:
    gang = Gang()
    gang.arrive("m0")
    del gang.room.pods["m0"]  # e.g. rejected by another plugin
    assert gang.arrive("m1") == wait(1)
    assert gang.manager.kept().waiting == {G: frozenset({"m1"})}


def test_while_nobody_left_the_room_a_permit_that_cannot_complete_looks_nobody_up() -> None:
    """What keeps a member's Permit O(1) in a large group: the waiting members are looked up only
    after some pod left the room, or when the count may complete the group."""
    gang = Gang()
    for i in range(5):
        gang.arrive(f"m{i}", needed=7)
    before = gang.room.looked
    assert gang.arrive("m5", needed=7) == wait(6)
    assert gang.room.looked - before == (0 if TRACKED[0] else 6)
    del gang.room.pods["m0"]
    assert gang.arrive("m6", needed=7) == wait(6)  # m0 left: everyone is looked up again
    assert gang.arrive("m0", needed=7) == allow("m1", "m2", "m3", "m4", "m5", "m6")


def test_members_let_go_count_until_the_cluster_shows_them_bound() -> None:
    """m1's Binding failed after the pair was let go; its retry completes the pair with m0, whose
    Binding is on its way (not shown bound yet), and then with m0 bound."""
    gang = Gang()
    gang.let_go("m0", "m1")
    assert gang.fail("m1").keep_place
    assert gang.arrive("m1", needed=2, members={"m0": False, "m1": False}) == allow()
    gang.manager.unreserve(G, "m1")
    assert gang.arrive("m1", needed=2, members={"m0": True, "m1": False}) == allow()


def test_a_group_of_unknown_size_is_denied_and_nothing_is_registered() -> None:
    gang = Gang()
    assert gang.arrive("m0", needed=None).verdict is Verdict.UNDEFINED
    assert gang.manager.kept().waiting == {}


def test_a_backing_off_group_is_denied_until_the_back_off_ends() -> None:
    gang = Gang()
    gang.arrive("m0")
    gang.fail("m0")
    assert gang.manager.backing_off(G) == BACKOFF
    gang.clock.advance(BACKOFF - 1)
    assert gang.manager.backing_off(G) == 1.0
    assert gang.arrive("m1", needed=1).verdict is Verdict.BACKING_OFF
    gang.clock.advance(1)
    assert gang.manager.backing_off(G) == 0.0
    assert gang.arrive("m1", needed=1) == allow()


def test_of_members_arriving_together_the_last_one_lets_all_go() -> None:
    """Joining the waiting members and counting them is one step: of members whose Permits run
    at once, exactly one sees the group complete and lets every other go (none is left waiting
    for a group that has in fact arrived)."""
    size = 6
    for _ in range(30):
        gang = Gang()
        start = threading.Barrier(size)
        decisions: dict[str, PermitDecision[str]] = {}

        def member(uid: str) -> None:
            gang.room.pods[uid] = G  # the framework adds the pod to the room before Permit
            start.wait()
            decisions[uid] = gang.manager.permit(G, uid, size, {})

        threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        allowing = [(uid, d) for uid, d in decisions.items() if d.verdict is Verdict.ALLOW]
        assert len(allowing) == 1, decisions
        uid, d = allowing[0]
        assert sorted((uid, *d.others)) == sorted(decisions)


# ---- Unreserve -----------------------------------------------------------------------------------

def test_a_member_failing_before_its_group_went_backs_the_whole_group_off() -> None:
    gang = Gang()
    for uid in ("m0", "m1", "m2"):
        gang.arrive(uid, needed=4)
    gang.arrive("h0", group=H)
    gang.manager.plan_failed(G, "key", Status.unresolvable("does not fit"))
    decision = gang.fail("m1")
    assert not decision.keep_place and sorted(decision.reject) == ["m0", "m2"]
    kept = gang.manager.kept()
    assert kept.backoff_until == {G: gang.clock.monotonic() + BACKOFF}
    assert G not in kept.failed_plans and gang.manager.backing_off(H) == 0.0


def test_a_member_failing_after_its_group_was_let_go_keeps_its_place() -> None:
    """Its Binding failed while the others are being bound: they cannot be taken back, so the
    group does not back off and nobody is rejected; it is no longer counted as let go."""
    gang = Gang()
    gang.let_go("m0", "m1", "m2")
    decision = gang.fail("m1")
    assert decision == UnreserveDecision(keep_place=True)
    assert gang.manager.backing_off(G) == 0.0
    assert gang.manager.kept().allowed == {G: frozenset({"m0", "m2"})}
    assert not gang.fail("m1").keep_place, "failing again, before being let go again, backs off"


def test_back_offs_that_ended_are_dropped_when_another_group_backs_off() -> None:
    gang = Gang()
    gang.arrive("m0")
    gang.fail("m0")
    gang.clock.advance(BACKOFF)
    gang.arrive("h0", group=H)
    gang.fail("h0", group=H)
    assert gang.manager.kept().backoff_until == {H: gang.clock.monotonic() + BACKOFF}


# ---- failed plans --------------------------------------------------------------------------------

def test_a_failed_plan_is_remembered_for_what_it_was_made_against() -> None:
    gang = Gang()
    st = Status.unresolvable("pod group g does not fit")
    gang.manager.plan_failed(G, ("gen", 1), st)
    assert gang.manager.failed_plan(G, ("gen", 1)) is st
    assert gang.manager.failed_plan(G, ("gen", 2)) is None, "something changed: plan again"
    assert gang.manager.failed_plan(H, ("gen", 1)) is None
    gang.manager.plan_made(G)
    assert gang.manager.failed_plan(G, ("gen", 1)) is None


# ---- the sweep -----------------------------------------------------------------------------------

@dataclass
class Cluster:
    """What ``observe`` answers: group -> members (uid -> bound); the groups it was asked about."""

    members: dict[Group, Members] = field(default_factory=dict)
    asked: list[Group] = field(default_factory=list)
    during: Callable[[Group], object] = lambda group: None

    def observe(self, group: Group) -> Members:
        self.asked.append(group)
        self.during(group)
        return self.members.get(group, {})


def test_the_sweep_forgets_members_let_go_once_bound_or_gone() -> None:
    gang = Gang()
    gang.let_go("m0", "m1", "m2")
    gang.manager.sweep(Cluster({G: {"m0": True, "m1": False}}).observe)
    assert gang.manager.kept().allowed == {G: frozenset({"m1"})}, "m0 is bound, m2 is gone"
    gang.clock.advance(SWEEP)
    gang.manager.sweep(Cluster({G: {"m1": True}}).observe)
    assert gang.manager.kept().allowed == {}


def test_the_sweep_keeps_members_let_go_while_it_runs() -> None:
    """The sweep asks about a group outside its lock; a member let go meanwhile, which the cache
    does not show yet, is not forgotten."""
    gang = Gang()
    gang.let_go("m0", "m1")
    cluster = Cluster(during=lambda group: gang.arrive("m2", needed=3))  # m0 and m1 count for it
    gang.manager.sweep(cluster.observe)
    assert gang.manager.kept().allowed == {G: frozenset({"m2"})}


def test_the_sweep_forgets_the_failed_plan_of_a_group_with_no_member_left() -> None:
    gang = Gang()
    gang.manager.plan_failed(G, "key", Status.unresolvable("g does not fit"))
    gang.manager.plan_failed(H, "key", Status.unresolvable("h does not fit"))
    gang.manager.sweep(Cluster({H: {"h0": False}}).observe)
    assert gang.manager.kept().failed_plans == {H}


def test_the_sweep_forgets_ended_back_offs_and_members_that_left_the_room() -> None:
    gang = Gang()
    gang.arrive("m0", needed=2)
    gang.fail("m0")
    gang.arrive("h0", group=H)
    del gang.room.pods["h0"]
    gang.clock.advance(BACKOFF)
    gang.manager.sweep(Cluster().observe)
    kept = gang.manager.kept()
    assert kept.backoff_until == {} and kept.waiting == {}


def test_the_sweep_runs_at_most_every_sweep_interval() -> None:
    gang = Gang()
    gang.let_go("m0", "m1")
    cluster = Cluster({G: {"m0": False, "m1": False}})
    gang.manager.sweep(cluster.observe)
    gang.clock.advance(SWEEP - 1)
    gang.manager.sweep(cluster.observe)
    assert cluster.asked == [G]
    gang.clock.advance(1)
    gang.manager.sweep(cluster.observe)
    assert cluster.asked == [G, G]


def test_a_member_failing_between_the_back_off_look_and_the_count_stops_the_group() -> None:
    """a2 passed the back-off check; before it counts, a1 fails (its Unreserve starts the back-off
    and rejects a0, still in the room): a2 must not let the group go with a0."""
    group, clock, room, meanwhile = ("default", "g"), FakeClock(), {"a0": "a0"}, []

    def now() -> float:
        if meanwhile:
            meanwhile.pop()()
        return clock.monotonic()

    manager: GroupManager[str] = GroupManager(now, 30.0, lambda g, uid: room.get(uid))
    assert manager.permit(group, "a0", 2, {}).verdict is Verdict.WAIT
    failed: list[UnreserveDecision[str]] = []
    meanwhile.append(lambda: failed.append(manager.unreserve(group, "a1")))
    room["a2"] = "a2"
    decision = manager.permit(group, "a2", 2, {})
    assert failed[0].reject == ("a0",)
    assert decision.verdict is Verdict.BACKING_OFF, decision
