"""Reservations: capacity a plugin holds on nodes for pods that do not exist or are not bound yet.

A reservation belongs to an *owner* (the gang plugin uses one per pod group) and is a list of
slots, each a placeholder pod (the managed requests one member needs) on one node. While a slot
exists, the engine counts its placeholder on the node for every other pod of equal or lower
priority - in Filter and in the re-validation at bind - exactly as it counts the capacity held for
nominated pods. So what a group planned cannot be taken by another group half-way through.

Slot life cycle::

    place() --> unclaimed --claim(uid)--> claimed by uid --consume(uid)--> gone (the member is
                    |                          |                            now accounted itself)
                    +--------- release(owner) or the reservation expires ---> gone

A slot claimed by pod ``uid`` no longer counts against that pod (it is its own), and unclaimed
slots do not count against the pods the reservation is for (``member``): a member that reaches
bind without having claimed a slot may use one on its node. A reservation that makes no progress
(no claim, no consume, no ``keep``) for ``ttl`` seconds expires, so a group that stops arriving
cannot hold capacity for ever. Reservations live in memory: after a restart they are gone, as are
the binds that were waiting on them (kube-scheduler retries those pods).

Locking: writers hold the lock, and so does a plugin's plan-then-place (``atomically``);
``held_on`` (called from the engine's Filter, also inside the cache's atomic assume) never takes
it - each node's slots are an immutable tuple replaced on write. So the only order is
reservations lock, then cache lock (planning runs the Filter plugins, which read the cache;
``on_release`` records in the cache): no cycle, no deadlock.
``on_release(nodes)`` is called whenever slots go away without being consumed (released or
expired): capacity came free, a cluster event for queueing hints and nudges. ``on_planned(owner,
uids)`` is called (lock held) when ``owner`` placed slots planned for those pods, so capacity
held for them elsewhere can end (the queue ends their admission holds).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Container, Iterable, Mapping, TypeVar

import numpy as np

from extender.framework.batch import EXACT_LIMIT, Ints
from extender.framework.clock import Clock
from extender.framework.views import PodInfo

T = TypeVar("T")


@dataclass
class Slot:
    uid: str
    node: str
    placeholder: PodInfo
    planned_for: str = ""
    """The UID of the member the slot was planned for ("" for a copy sized like the planner)."""
    claimed_by: str | None = None


@dataclass
class Reservation:
    owner: str
    priority: int
    ttl: float
    created: float
    expires: float
    member: Callable[[PodInfo], bool] = field(default=lambda pod: False, repr=False)
    slots: dict[str, Slot] = field(default_factory=dict)
    placed: list[tuple[int, Slot]] = field(default_factory=list, repr=False)
    """Every slot placed (+1) and gone (-1), in order: ``HeldRows`` apply what is new to them."""
    planned: dict[str, dict[str, Slot]] = field(default_factory=dict, repr=False)
    """Live slots per UID they were planned for (slot uid -> slot, in the order placed): a
    member's claim finds its own without scanning every slot."""
    claims: dict[str, Slot] = field(default_factory=dict, repr=False)
    """The slot each claimer holds."""
    claim_changes: int = field(default=0, repr=False)
    """Grows whenever ``claims`` changes (``Reservations.held_amounts`` lists them again then)."""

    def _placed(self, slot: Slot) -> None:
        self.slots[slot.uid] = slot
        self.placed.append((1, slot))
        if slot.planned_for:
            self.planned.setdefault(slot.planned_for, {})[slot.uid] = slot

    def _gone(self, slot: Slot) -> None:
        del self.slots[slot.uid]
        self.placed.append((-1, slot))
        self._claim(slot, None)
        mine = self.planned.get(slot.planned_for)
        if mine is not None:
            mine.pop(slot.uid, None)
            if not mine:
                del self.planned[slot.planned_for]

    def _claim(self, slot: Slot, uid: str | None) -> None:
        if slot.claimed_by is not None:
            self.claims.pop(slot.claimed_by, None)
        slot.claimed_by = uid
        if uid is not None:
            self.claims[uid] = slot
        self.claim_changes += 1

    def as_dict(self, now: float) -> dict[str, Any]:
        nodes: dict[str, int] = {}
        for s in self.slots.values():
            nodes[s.node] = nodes.get(s.node, 0) + 1
        return {"owner": self.owner, "priority": self.priority, "slots": len(self.slots),
                "claimed": sum(1 for s in self.slots.values() if s.claimed_by),
                "nodes": dict(sorted(nodes.items())), "heldSeconds": round(now - self.created, 3),
                "expiresInSeconds": round(max(0.0, self.expires - now), 3)}


@dataclass(frozen=True)
class HeldRows:
    """One reservation's slots as amounts per row of a snapshot's columns
    (``Reservations.held_amounts``)."""

    res: Reservation
    index: Mapping[str, int]
    size: int
    applied: int
    """How many entries of ``res.placed`` the amounts include."""
    amounts: dict[str, Ints] | None
    """Per resource, the placeholders' requests summed per row; None: an amount is out of the
    columns' exact range."""

    def current(self, res: Reservation, index: Mapping[str, int], size: int) -> bool:
        return self.res is res and self.applied == len(res.placed) and self.index is index and self.size == size

    def updated(self, res: Reservation, index: Mapping[str, int], size: int) -> HeldRows:
        """These rows with the slots placed and gone since applied: O(those slots) plus a copy
        of the arrays; made from the whole record when the rows moved (a node came or went).
        Lock-free: the record is append-only, read up to its length at the start."""
        same = self.res is res and self.index is index and self.size == size
        return HeldRows.of(res, index, size, self if same else None)

    @staticmethod
    def of(res: Reservation, index: Mapping[str, int], size: int, base: HeldRows | None = None) -> HeldRows:
        end = len(res.placed)
        start = base.applied if base is not None else 0
        amounts: dict[str, Ints] | None = None
        if base is None or base.amounts is not None:
            amounts = {r: a.copy() for r, a in base.amounts.items()} if base is not None and base.amounts else {}
            for sign, slot in res.placed[start:end]:
                row = index.get(slot.node)
                if row is None:
                    continue  # a node the snapshot does not hold is never a batch candidate
                for r, v in slot.placeholder.requests.items():
                    if not -EXACT_LIMIT < v < EXACT_LIMIT:
                        amounts = None
                        break
                    column = amounts.get(r)
                    if column is None:
                        column = amounts[r] = np.zeros(size, np.int64)
                    column[row] += sign * v
                if amounts is None:
                    break
        return HeldRows(res, index, size, end, amounts)


class Reservations:
    """Thread-safe store of reservations, indexed by node for the Filter hot path."""

    def __init__(self, clock: Clock, on_release: Callable[[set[str]], None] | None = None,
                 on_planned: Callable[[str, set[str]], None] | None = None) -> None:
        self.clock = clock
        self.on_release = on_release
        self.on_planned = on_planned
        self._lock = threading.RLock()
        """Held by writers, and across ``atomically``'s work (plan-then-place)."""
        self.version = 0
        """Grows whenever slots are placed or go away: "could a plan come out differently?"."""
        self._owners: dict[str, Reservation] = {}
        self._by_node: dict[str, tuple[tuple[Reservation, Slot], ...]] = {}
        self._ids = itertools.count(1)
        self._rows: dict[str, HeldRows] = {}
        """``HeldRows`` per owner, made by ``held_amounts`` and replaced when stale."""
        self._sums: tuple[Mapping[str, int], int, list[HeldRows], dict[str, Ints]] | None = None
        """The last answer of ``held_amounts`` and what it was summed from (index, size, rows)."""
        self._claims: tuple[list[tuple[Reservation, int]], tuple[tuple[str, str], ...]] = ([], ())
        """The last claims ``held_amounts`` listed, and of which reservations (with their
        ``claim_changes``)."""
        self._nodes: tuple[int, frozenset[str]] = (0, frozenset())
        """The last answer of ``nodes`` and the ``version`` it was made at."""
        self.claims_version = 0
        """Grows whenever a slot is claimed or unclaimed (with ``version``: "are the holds the
        same?")."""
        self._expiry_floor = float("inf")
        """No live reservation expires before this (a lower bound: expiries only move later,
        but for a reservation placed again, which lowers it)."""
        self._held: tuple[Any, ...] | None = None
        """``held_amounts``' last answer for a pod no reservation concerns, and what it holds
        for: (index, size, version, claims_version, priority, the reservations counted, sums,
        claims)."""

    # ---- writing ----------------------------------------------------------------------------

    def atomically(self, work: Callable[[], T]) -> T:
        """Run ``work`` (which may read and write these reservations) with no other writer in
        between, and return what it returns: plan-then-place, so two plans never count the same
        capacity. ``work`` may call the Filter plugins (which read the cache): the lock order is
        reservations, then cache."""
        with self._lock:
            return work()

    def place(self, owner: str, priority: int, placements: Iterable[tuple[str, PodInfo]], ttl: float,
              member: Callable[[PodInfo], bool] = lambda pod: False, extend: bool = False) -> None:
        """Hold one slot per (node, pod) pair for ``owner`` (replacing what it held before; with
        ``extend``, added to what it holds, which then lives at least ``ttl`` from now). The pod is the
        member the slot is planned for (its UID is remembered) and sized like; its placeholder
        copy gets a slot UID. ``member`` tells the pods the slots are for."""
        with self._lock:
            now = self.clock.monotonic()
            res = self._live(owner) if extend else None
            if res is None:
                self._drop(owner)
                res = Reservation(owner, priority, ttl, now, now + ttl, member)
            else:
                self._expires(res, now + ttl)
            planned = set()
            for node, pod in placements:
                planned.add(pod.uid)
                uid = f"reservation/{owner}/{next(self._ids)}"
                placeholder = PodInfo(uid, pod.namespace, f"{pod.name} (reserved for {owner})", priority,
                                      creation_timestamp=pod.creation_timestamp, node_name=node,
                                      scheduler_name=pod.scheduler_name, requests=pod.requests, raw=pod.raw)
                slot = Slot(uid, node, placeholder, pod.uid)
                res._placed(slot)
                self._by_node[node] = (*self._by_node.get(node, ()), (res, slot))
            if res.slots:
                self._owners[owner] = res
                self._expires(res, res.expires)
            self.version += 1
            if self.on_planned is not None and planned:
                self.on_planned(owner, planned)

    def claim(self, owner: str, uid: str, prefer: Collection[str] | None = None,
              requests: Mapping[str, int] | None = None) -> str | None:
        """The node of the slot pod ``uid`` holds, claiming an unclaimed one if it holds none - or
        if the one it holds is not in ``prefer`` and an unclaimed one is. Among unclaimed slots:
        the one planned for ``uid``, else one sized like ``requests`` (when given), on a node in
        ``prefer`` when given. None when no slot is left for it."""
        with self._lock:
            res = self._live(owner)
            if res is None:
                return None
            mine = res.claims.get(uid)
            if mine is not None and (prefer is None or mine.node in prefer):
                return mine.node
            # the first unclaimed slot (in the order placed) planned for it, else sized like
            # ``requests``, in ``prefer``: its planned slots are looked up, the rest scanned
            pick = next((s for s in res.planned.get(uid, {}).values()
                         if s.claimed_by is None and (prefer is None or s.node in prefer)), None)
            if pick is None:
                pick = next((s for s in res.slots.values() if s.claimed_by is None
                             and (prefer is None or s.node in prefer)
                             and (requests is None or s.placeholder.requests == requests)), None)
            if mine is not None and pick is None:
                return mine.node
            if pick is None:
                return None
            if mine is not None:
                res._claim(mine, None)
            res._claim(pick, uid)
            self.claims_version += 1
            self._expires(res, self.clock.monotonic() + res.ttl)
            return pick.node

    def unclaim_except(self, owner: str, keep: Collection[str]) -> int:
        """Free the slots claimed by pods not in ``keep`` (members deleted meanwhile); returns
        how many were freed."""
        with self._lock:
            res = self._live(owner)
            if res is None:
                return 0
            gone = [slot for uid, slot in res.claims.items() if uid not in keep]
            for slot in gone:
                res._claim(slot, None)
            self.claims_version += bool(gone)
            return len(gone)

    def consume(self, owner: str, uid: str, node: str, requests: Mapping[str, int] | None = None) -> bool:
        """Pod ``uid`` of the owner is now accounted on ``node``: drop its slot so the capacity is
        not counted twice - the one it claimed, else an unclaimed one (sized like ``requests``
        when given, on ``node`` first). The reservation ends with its last slot. False if nothing
        was held for it."""
        with self._lock:
            res = self._live(owner)
            if res is None:
                return False
            slots = [s for s in res.slots.values() if s.claimed_by in (uid, None)]
            sized = [s for s in slots if s.claimed_by is None and
                     (requests is None or s.placeholder.requests == requests)]
            pick = (next((s for s in slots if s.claimed_by == uid), None)
                    or next((s for s in sized if s.node == node), None)
                    or next(iter(sized), None))
            if pick is None:
                return False
            res._gone(pick)
            self._unindex(pick)
            self.version += 1
            self.claims_version += 1
            if not res.slots:
                del self._owners[owner]
            else:
                self._expires(res, self.clock.monotonic() + res.ttl)
        if pick.node != node and self.on_release is not None:
            self.on_release({pick.node})  # the pod went elsewhere: its planned node has room again
        return True

    def keep(self, owner: str, seconds: float) -> None:
        """Hold the reservation at least ``seconds`` from now (while its members wait in Permit,
        say), whatever its own timeout."""
        with self._lock:
            res = self._live(owner)
            if res is not None:
                self._expires(res, self.clock.monotonic() + seconds)

    def release(self, owner: str) -> bool:
        with self._lock:
            return self._drop(owner)

    # ---- reading ----------------------------------------------------------------------------

    def planned_elsewhere(self, uid: str, owner: str) -> bool:
        """Whether a live reservation other than ``owner``'s holds an unclaimed slot planned for
        pod ``uid`` (a gang's plan for its member): that slot holds its room already."""
        now = self.clock.monotonic()
        with self._lock:
            return any(res.owner != owner and res.expires > now
                       and any(slot.claimed_by is None for slot in res.planned.get(uid, {}).values())
                       for res in self._owners.values())

    def get(self, owner: str) -> Reservation | None:
        with self._lock:
            return self._live(owner)

    def nodes(self) -> set[str]:
        """Nodes where some slot is held (expired reservations are dropped first): a set of the
        caller's own."""
        return set(self.node_set())

    def expire_due(self) -> None:
        """End the reservations whose time is up now - they expire only when read, and their
        release (``on_release``) is the change that lets the pods behind them in. Lock-free while
        none can have."""
        if self._owners and self.clock.monotonic() >= self._expiry_floor:
            with self._lock:
                self._expire()

    def node_set(self) -> frozenset[str]:
        """``nodes``, not copied: the same frozenset until slots are placed or go (every filter
        call asks)."""
        if not self._owners:
            return frozenset()
        nodes = self._nodes  # lock-free while nothing changed and nothing can have expired
        if nodes[0] == self.version and self.clock.monotonic() < self._expiry_floor:
            return nodes[1]
        with self._lock:
            self._expire()
            if self._nodes[0] != self.version:
                self._nodes = (self.version, frozenset(self._by_node))
            return self._nodes[1]

    def held_on(self, node: str, pod: PodInfo, strict: bool = False,
                accounted: Container[str] = (), placed: Container[str] = ()) -> list[PodInfo]:
        """Placeholders on ``node`` that count against ``pod``: slots of live reservations of
        equal or higher priority, except the one ``pod`` claimed or that was planned for it and,
        if it is a member of the reservation, the unclaimed ones (``strict``: those count too);
        never a slot claimed by a pod in ``accounted`` (the UIDs the node already counts: a
        member assumed there whose Reserve, which consumes its slot, has not run yet would
        count twice), nor an unclaimed one planned for a pod in ``placed`` (pods the caller
        counts where it placed them: admission's trial of a group's members). Lock-free (see
        the module docstring)."""
        entries = self._by_node.get(node)
        if not entries:
            return []
        now = self.clock.monotonic()
        out = []
        for res, slot in entries:
            claimed_by = slot.claimed_by
            if res.priority < pod.priority or res.expires <= now or claimed_by == pod.uid:
                continue
            if claimed_by is not None and claimed_by in accounted:
                continue
            if claimed_by is None and (slot.planned_for == pod.uid or slot.planned_for in placed
                                       or (not strict and res.member(pod))):
                continue
            out.append(slot.placeholder)
        return out

    def held_amounts(self, pod: PodInfo, index: Mapping[str, int],
                     size: int) -> tuple[dict[str, Ints], tuple[tuple[str, str], ...]] | None:
        """What ``held_on`` counts against ``pod``, over the rows of a snapshot's columns
        (``index``: node -> row, ``size`` rows), for the batch Filter: per resource, the requests
        of the placeholders that count, summed per row - claimed slots included -; and the
        (node, claimer) of the claimed slots among them: where the claimer is already accounted,
        ``held_on`` does not count its slot, so such a node must be judged per node. None when
        some live reservation that counts against ``pod`` concerns it (it is a member, or a slot
        was planned for or claimed by it: which slots count then depends on the slot) or an
        amount is out of the columns' exact range: judge every held node per node. Lock-free
        like ``held_on``; a reservation's rows are updated with the slots placed or gone since
        (``HeldRows.updated``), and the sums and the claims made again only when the reservations
        that count, their rows or their claims changed - both answers are the same objects until
        then - so this costs O(reservations) plus what changed; and while neither the slots, the
        claims nor the columns changed and nothing can have expired, the last answer for a pod of
        the same priority is checked against this pod's membership only."""
        now = self.clock.monotonic()
        last_held = self._held
        if (last_held is not None and last_held[0] is index and last_held[1] == size
                and last_held[2] == self.version and last_held[3] == self.claims_version
                and last_held[4] == pod.priority and now < self._expiry_floor):
            for res in last_held[5]:
                if pod.uid in res.planned or pod.uid in res.claims or res.member(pod):
                    return None
            return last_held[6], last_held[7]
        version, claims_version = self.version, self.claims_version  # first: a change while reading is seen next time
        counted: list[HeldRows] = []
        for owner, res in list(self._owners.items()):
            if res.priority < pod.priority or res.expires <= now:
                continue
            if pod.uid in res.planned or pod.uid in res.claims or res.member(pod):
                return None
            rows = self._rows.get(owner)
            if rows is None or not rows.current(res, index, size):
                rows = self._rows[owner] = rows.updated(res, index, size) if rows is not None else \
                    HeldRows.of(res, index, size)
            if rows.amounts is None:
                return None
            counted.append(rows)
        if len(self._rows) > len(self._owners):  # forget the rows of reservations that are gone
            for owner in [o for o in list(self._rows) if o not in self._owners]:
                self._rows.pop(owner, None)
        claims = self._claims_of([rows.res for rows in counted])
        last = self._sums
        if (last is not None and last[0] is index and last[1] == size and len(last[2]) == len(counted)
                and all(a is b for a, b in zip(last[2], counted))):
            sums = last[3]
        else:
            sums = {}
            for rows in counted:
                for r, column in (rows.amounts or {}).items():
                    sums[r] = sums[r] + column if r in sums else column
            if any(int(np.abs(column).max(initial=0)) >= EXACT_LIMIT for column in sums.values()):
                return None
            self._sums = (index, size, counted, sums)
        self._held = (index, size, version, claims_version, pod.priority, [rows.res for rows in counted], sums, claims)
        return sums, claims

    def _claims_of(self, counted: list[Reservation]) -> tuple[tuple[str, str], ...]:
        """(node, claimer) of every claimed slot of ``counted``; the last answer while they and
        their claims are the same."""
        seen, claims = self._claims
        if len(seen) == len(counted) and all(res is r and changes == res.claim_changes
                                             for res, (r, changes) in zip(counted, seen)):
            return claims
        marks = [(res, res.claim_changes) for res in counted]  # first: a claim while reading is seen next time
        claims = tuple((slot.node, uid) for res in counted for uid, slot in list(res.claims.items()))
        self._claims = (marks, claims)
        return claims

    def held(self) -> list[tuple[str, PodInfo]]:
        """Every live slot as (its claimer's UID, else the UID it was planned for; placeholder).
        Lock-free, as ``held_on`` (a Filter plugin may ask from inside the cache's assume)."""
        now = self.clock.monotonic()
        return [(slot.claimed_by or slot.planned_for, slot.placeholder)
                for entries in list(self._by_node.values()) for res, slot in entries if res.expires > now]

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            self._expire()
            now = self.clock.monotonic()
            return [res.as_dict(now) for _, res in sorted(self._owners.items())]

    # ---- internals (lock held) ----------------------------------------------------------------

    def _live(self, owner: str) -> Reservation | None:
        res = self._owners.get(owner)
        if res is not None and res.expires <= self.clock.monotonic():
            self._drop(owner)
            return None
        return res

    def _expires(self, res: Reservation, at: float) -> None:
        """Hold ``res`` until ``at`` at least: progress (a claim, a consume, ``keep``, more
        slots) only ever makes a reservation live longer - a member's claim restarting the
        timeout never ends the ``keep`` the members waiting in Permit count on. Keeps
        ``_expiry_floor`` a lower bound (a new reservation may expire before the others)."""
        if at > res.expires:
            res.expires = at
        self._expiry_floor = min(self._expiry_floor, res.expires)

    def _expire(self) -> None:
        now = self.clock.monotonic()
        for owner in [o for o, r in self._owners.items() if r.expires <= now]:
            self._drop(owner)
        self._expiry_floor = min((r.expires for r in self._owners.values()), default=float("inf"))

    def _unindex(self, slot: Slot) -> None:
        rest = tuple(e for e in self._by_node.get(slot.node, ()) if e[1] is not slot)
        if rest:
            self._by_node[slot.node] = rest
        else:
            self._by_node.pop(slot.node, None)

    def _drop(self, owner: str) -> bool:
        res = self._owners.pop(owner, None)
        if res is None:
            return False
        for slot in res.slots.values():
            self._unindex(slot)
        self.version += 1
        if self.on_release is not None and res.slots:
            self.on_release({slot.node for slot in res.slots.values()})
        return True
