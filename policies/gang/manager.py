"""What Gang remembers about each pod group between calls, and the decisions made from it.

The plugin (``policies.gang.plugin``) is the adapter: it turns the framework's calls into calls
here, reads the cluster for the plain values these take, and carries out what the decisions say
(reservations, allowing or rejecting pods waiting in Permit, requeues). This module does none of
that: it holds no handle, does no I/O and starts no threads. Time comes from the ``clock`` it is
given (seconds on a monotonic clock), so tests move time by hand; the waiting room is reached
through the ``lookup`` it is given and the cluster through plain values (a group's members and
whether each is bound). It is safe to call from many threads at once (concurrent binds).

Per group it keeps:

* the members waiting in Permit, each registered by its own Permit (a member's Permit then looks
  at its group's members, never at every pod in the room: with a thousand binds waiting, that
  scan was a tenth of a worker's time), and when they were last all seen in the room: while no
  pod has left the room since (``room_left``), a Permit that cannot complete the group counts
  them without looking each up again, so a member's Permit costs O(1), not O(group);
* the members Permit let go that the cluster does not show bound yet (they count towards the
  group while their Bindings are on their way);
* the last failed plan and what it was made against (so a group that does not fit is not planned
  again for every member until something changed);
* the end of its back-off, after a member failed before the group was let go.

``sweep`` forgets what a group no longer needs, so a long-running server does not keep every
group it ever scheduled.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Mapping, TypeVar

from extender.framework.status import Status
from policies.gang import logic
from policies.gang.logic import Group

__all__ = ["SWEEP_SECONDS", "GroupManager", "Verdict", "PermitDecision", "UnreserveDecision", "Kept",
           "BoundMembers"]

SWEEP_SECONDS = 10.0
"""How often ``sweep`` looks for groups that are done (at most)."""

W = TypeVar("W")
"""What the waiting room holds for a pod (the adapter's WaitingPodView; anything in tests)."""

Members = Mapping[str, bool]
"""The members of a group the cluster shows: uid -> bound (``spec.nodeName`` set)."""


@dataclass(frozen=True)
class BoundMembers:
    """The members of a group the cluster shows bound, as counts kept elsewhere (the cache's):
    how many there are now and whether one is (O(1) each), so Permit never lists the group;
    and whether a pod is a member still (a pod let go that is gone since - deleted, or done -
    counts no more)."""

    count: Callable[[], int]
    is_bound: Callable[[str], bool]
    is_member: Callable[[str], bool] = lambda uid: True

    @staticmethod
    def of(members: Members) -> BoundMembers:
        """Over a fixed listing: ``members`` names the members the cluster shows, each with
        whether it is bound; every pod counts as a member (one let go may not be listed yet)."""
        bound = sum(1 for b in members.values() if b)
        return BoundMembers(lambda: bound, lambda uid: members.get(uid, False))


_RECOUNTS = 3
"""How many times at most ``permit`` reads the bound count and the let-go members' states (again
while the count moved in between: a member shown bound, or one gone)."""


class Verdict(enum.Enum):
    ALLOW = "allow"
    """The group is complete: this member and ``PermitDecision.others`` may all go."""
    WAIT = "wait"
    """Not enough members yet: this member waits in Permit."""
    UNDEFINED = "undefined"
    """Denied: the group's size is unknown (no PodGroup, no member states it)."""
    BACKING_OFF = "backing off"
    """Denied: the group is backing off after a member failed."""


@dataclass(frozen=True)
class PermitDecision(Generic[W]):
    verdict: Verdict
    others: tuple[W, ...] = ()
    """With ALLOW: the other members waiting in Permit, to be allowed now."""
    counted: int = 0
    """With WAIT: the members counted towards the group (this one, the others waiting, and those
    let go or bound)."""


@dataclass(frozen=True)
class UnreserveDecision(Generic[W]):
    keep_place: bool
    """The member had been let go (its Binding failed while the rest of the group is being
    bound): the group goes on and the member's place should be held for its retry. Otherwise
    the group backs off: what it holds should be released and ``reject`` rejected."""
    reject: tuple[W, ...] = ()
    """Without ``keep_place``: the group's other members waiting in Permit."""


@dataclass(frozen=True)
class Kept:
    """A copy of what the manager keeps (for tests and debugging)."""

    waiting: dict[Group, frozenset[str]] = field(default_factory=dict)
    allowed: dict[Group, frozenset[str]] = field(default_factory=dict)
    failed_plans: frozenset[Group] = frozenset()
    backoff_until: dict[Group, float] = field(default_factory=dict)


class GroupManager(Generic[W]):
    """The bookkeeping and decisions of gang scheduling (see the module doc).

    ``clock``: seconds on a monotonic clock. ``backoff``: seconds a group backs off after a
    member failed. ``lookup(group, uid)``: what the waiting room holds for ``uid`` if it waits
    there as a member of ``group``, else None; called with the manager's lock held, so it must
    be cheap and must not call back into the manager. ``room_left()``: a number that grows
    whenever a pod leaves the waiting room (``WaitingPodsView.left``); without it every Permit
    looks up each waiting member of its group.
    """

    def __init__(self, clock: Callable[[], float], backoff: float, lookup: Callable[[Group, str], W | None],
                 sweep_every: float = SWEEP_SECONDS, room_left: Callable[[], int] | None = None) -> None:
        self._clock = clock
        self._backoff = backoff
        self._lookup = lookup
        self._room_left = room_left
        self._sweep_every = sweep_every
        self._lock = threading.Lock()
        self._waiting: dict[Group, dict[str, None]] = {}
        """Members waiting in Permit per group, in the order they arrived (a dict as an ordered
        set): a group is let go in that order, the same on every run."""
        self._seen: dict[Group, int] = {}
        """Per group, ``room_left()`` when its registered waiting members were last all looked up
        and found in the room: while it has not changed, they all still wait there."""
        self._allowed: dict[Group, set[str]] = {}
        self._failed: dict[Group, tuple[Hashable, Status]] = {}
        self._backoff_until: dict[Group, float] = {}
        self._next_sweep = 0.0

    # ---- back-off and failed plans ------------------------------------------------------------

    def backing_off(self, group: Group) -> float:
        """Seconds left of the group's back-off (0 when none)."""
        with self._lock:
            until = self._backoff_until.get(group, 0.0)
        return max(0.0, until - self._clock())

    def failed_plan(self, group: Group, key: Hashable) -> Status | None:
        """The rejection of the group's last failed plan if it was made against ``key`` (the
        same cluster, reservations, nodes and members: planning again would fail the same way);
        else None."""
        with self._lock:
            known = self._failed.get(group)
        return known[1] if known is not None and known[0] == key else None

    def plan_failed(self, group: Group, key: Hashable, status: Status) -> None:
        """Remember that planning the group against ``key`` failed with ``status``."""
        with self._lock:
            self._failed[group] = (key, status)

    def plan_made(self, group: Group) -> None:
        """The group was planned: forget its failed plan."""
        with self._lock:
            self._failed.pop(group, None)

    # ---- Permit and Unreserve -----------------------------------------------------------------

    def permit(self, group: Group, uid: str, needed: int | None,
               members: Members | BoundMembers) -> PermitDecision[W]:
        """Member ``uid``, now in the waiting room, asks to go. It joins the group's waiting
        members and is counted in the same step, so of two members arriving together the later
        always sees the earlier. ALLOW when those waiting, those let go before (members still,
        as a ``BoundMembers`` tells: one deleted since counts no more) and those ``members``
        shows bound reach ``needed`` (the members allowed leave the waiting ones and
        are remembered as let go); else WAIT. Denied, never allowed, when ``needed`` is None or
        the group is backing off: part of a group never goes.

        Cost: O(members let go and not bound yet), plus O(members waiting) when some pod left
        the room since they were last looked up or the count may reach ``needed``. A WAIT's
        ``counted`` then takes every other waiting member as not shown bound (it is a member
        the extender holds in Permit: only a foreign Binding could bind it meanwhile)."""
        if needed is None:
            return PermitDecision(Verdict.UNDEFINED)
        if self.backing_off(group):
            return PermitDecision(Verdict.BACKING_OFF)
        bound = members if isinstance(members, BoundMembers) else BoundMembers.of(members)
        with self._lock:
            if self._backoff_until.get(group, 0.0) > self._clock():
                return PermitDecision(Verdict.BACKING_OFF)  # a member failed since the look above
            # the count first, then which let-go members are bound: one bound in between is
            # counted neither way (one count too few: safe); read again until nothing moved
            for _ in range(_RECOUNTS):
                count = bound.count()
                allowed = {u for u in self._allowed.get(group, ()) if bound.is_member(u) and not bound.is_bound(u)}
                if bound.count() == count:
                    break
            mark = self._room_left() if self._room_left is not None else None
            uids = self._waiting.get(group)
            if mark is not None and uids is not None and self._seen.get(group) == mark:
                uids[uid] = None  # nobody left the room since they were all seen there: all wait
                # at most this many let go or bound and not waiting (exact unless a waiting one
                # is shown bound): below ``needed``, the exact count is too
                most = count - bound.is_bound(uid) + len(allowed - uids.keys())
                if not logic.ready(len(uids), most, needed):
                    self._keep_allowed(group, allowed)
                    return PermitDecision(Verdict.WAIT, counted=len(uids) + most)
            waiting = [(u, w) for u, w in self._in_permit(group, uid) if u != uid]
            if mark is not None:
                self._seen[group] = mark
            held = {u for u, _ in waiting} | {uid}
            placed = count - sum(1 for u in held if bound.is_bound(u)) + len(allowed - held)
            if logic.ready(len(waiting) + 1, placed, needed):
                self._allowed[group] = allowed | held
                # let go: they leave the waiting ones
                left = {u: None for u in self._waiting.pop(group, {}) if u not in held}
                if left:
                    self._waiting[group] = left
                else:
                    self._seen.pop(group, None)
                return PermitDecision(Verdict.ALLOW, others=tuple(w for _, w in waiting))
            self._keep_allowed(group, allowed)
        return PermitDecision(Verdict.WAIT, counted=len(waiting) + 1 + placed)

    def _keep_allowed(self, group: Group, allowed: set[str]) -> None:
        """The group's let-go members not shown bound yet are ``allowed`` (lock held)."""
        if allowed:
            self._allowed[group] = allowed
        else:
            self._allowed.pop(group, None)

    def unreserve(self, group: Group, uid: str) -> UnreserveDecision[W]:
        """Member ``uid`` failed (timed out or denied in Permit, or failed after it). Let go
        before: it keeps its place and the group goes on. Otherwise the whole group backs off
        from now: its let-go members and failed plan are forgotten and its other waiting members
        are to be rejected."""
        now = self._clock()
        with self._lock:
            allowed = self._allowed.get(group)
            if allowed is not None and uid in allowed:
                allowed.discard(uid)
                if not allowed:
                    del self._allowed[group]
                return UnreserveDecision(keep_place=True)
            self._backoff_until = {g: t for g, t in self._backoff_until.items() if t > now}
            self._backoff_until[group] = now + self._backoff
            self._allowed.pop(group, None)
            self._failed.pop(group, None)
            waiting = tuple(w for u, w in self._in_permit(group) if u != uid)
            self._waiting.pop(group, None)  # rejected: never counted again, even before they leave the room
            self._seen.pop(group, None)
        return UnreserveDecision(keep_place=False, reject=waiting)

    def _in_permit(self, group: Group, joining: str = "") -> list[tuple[str, W]]:
        """The members of ``group`` in the waiting room (lock held), after registering
        ``joining``; members that left the room are forgotten."""
        uids = self._waiting.setdefault(group, {})
        if joining:
            uids[joining] = None
        found = []
        for uid in list(uids):
            entry = self._lookup(group, uid)
            if entry is not None:
                found.append((uid, entry))
            else:
                del uids[uid]
        if not uids:
            del self._waiting[group]
            self._seen.pop(group, None)
        return found

    # ---- forgetting ---------------------------------------------------------------------------

    def sweep(self, observe: Callable[[Group], Members]) -> None:
        """At most every ``sweep_every`` seconds, forget what is kept for groups that no longer
        need it: let-go members once ``observe`` (the group's members the cluster shows, called
        without the lock held) shows them bound or gone - a group that completed is not asked
        about again, so its own Permit never drops them -, the failed plan of a group with no
        member left, ended back-offs, and waiting members that left the room. Members let go
        while the sweep runs are kept."""
        now = self._clock()
        with self._lock:
            if now < self._next_sweep:
                return
            self._next_sweep = now + self._sweep_every
            self._backoff_until = {g: t for g, t in self._backoff_until.items() if t > now}
            before = {g: set(uids) for g, uids in self._allowed.items()}
            groups = set(before) | set(self._failed)
            for group in list(self._waiting):
                self._in_permit(group)
        for group in groups:
            members = observe(group)
            unbound = {u for u, is_bound in members.items() if not is_bound}
            with self._lock:
                if group in self._allowed:
                    self._allowed[group] -= before.get(group, set()) - unbound
                    if not self._allowed[group]:
                        del self._allowed[group]
                if not members:
                    self._failed.pop(group, None)

    def kept(self) -> Kept:
        with self._lock:
            return Kept(waiting={g: frozenset(u) for g, u in self._waiting.items()},
                        allowed={g: frozenset(u) for g, u in self._allowed.items()},
                        failed_plans=frozenset(self._failed),
                        backoff_until=dict(self._backoff_until))
