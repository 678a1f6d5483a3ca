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
expired): capacity came free, a cluster event for queueing hints and nudges.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Container, Iterable, Mapping, TypeVar

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

    def as_dict(self, now: float) -> dict[str, Any]:
        nodes: dict[str, int] = {}
        for s in self.slots.values():
            nodes[s.node] = nodes.get(s.node, 0) + 1
        return {"owner": self.owner, "priority": self.priority, "slots": len(self.slots),
                "claimed": sum(1 for s in self.slots.values() if s.claimed_by),
                "nodes": dict(sorted(nodes.items())), "heldSeconds": round(now - self.created, 3),
                "expiresInSeconds": round(max(0.0, self.expires - now), 3)}


class Reservations:
    """Thread-safe store of reservations, indexed by node for the Filter hot path."""

    def __init__(self, clock: Clock, on_release: Callable[[set[str]], None] | None = None) -> None:
        self.clock = clock
        self.on_release = on_release
        self._lock = threading.RLock()
        """Held by writers, and across ``atomically``'s work (plan-then-place)."""
        self.version = 0
        """Grows whenever slots are placed or go away: "could a plan come out differently?"."""
        self._owners: dict[str, Reservation] = {}
        self._by_node: dict[str, tuple[tuple[Reservation, Slot], ...]] = {}
        self._ids = itertools.count(1)

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
        ``extend``, added to what it holds, which then lives ``ttl`` from now). The pod is the
        member the slot is planned for (its UID is remembered) and sized like; its placeholder
        copy gets a slot UID. ``member`` tells the pods the slots are for."""
        with self._lock:
            now = self.clock.monotonic()
            res = self._live(owner) if extend else None
            if res is None:
                self._drop(owner)
                res = Reservation(owner, priority, ttl, now, now + ttl, member)
            else:
                res.expires = now + ttl
            for node, pod in placements:
                uid = f"reservation/{owner}/{next(self._ids)}"
                placeholder = PodInfo(uid, pod.namespace, f"{pod.name} (reserved for {owner})", priority,
                                      creation_timestamp=pod.creation_timestamp, node_name=node,
                                      scheduler_name=pod.scheduler_name, requests=pod.requests, raw=pod.raw)
                slot = Slot(uid, node, placeholder, pod.uid)
                res.slots[uid] = slot
                self._by_node[node] = (*self._by_node.get(node, ()), (res, slot))
            if res.slots:
                self._owners[owner] = res
            self.version += 1

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
            mine = None
            free: list[Slot] = []
            for slot in res.slots.values():
                if slot.claimed_by == uid:
                    mine = slot
                elif slot.claimed_by is None and (prefer is None or slot.node in prefer) and (
                        slot.planned_for == uid or requests is None or slot.placeholder.requests == requests):
                    free.append(slot)
            pick = next((s for s in free if s.planned_for == uid), free[0] if free else None)
            if mine is not None and (pick is None or prefer is None or mine.node in prefer):
                return mine.node
            if pick is None:
                return None
            if mine is not None:
                mine.claimed_by = None
            pick.claimed_by = uid
            res.expires = self.clock.monotonic() + res.ttl
            return pick.node

    def unclaim_except(self, owner: str, keep: Collection[str]) -> int:
        """Free the slots claimed by pods not in ``keep`` (members deleted meanwhile); returns
        how many were freed."""
        with self._lock:
            res = self._live(owner)
            freed = 0
            for slot in res.slots.values() if res is not None else ():
                if slot.claimed_by is not None and slot.claimed_by not in keep:
                    slot.claimed_by = None
                    freed += 1
            return freed

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
            del res.slots[pick.uid]
            self._unindex(pick)
            self.version += 1
            if not res.slots:
                del self._owners[owner]
            else:
                res.expires = self.clock.monotonic() + res.ttl
        if pick.node != node and self.on_release is not None:
            self.on_release({pick.node})  # the pod went elsewhere: its planned node has room again
        return True

    def keep(self, owner: str, seconds: float) -> None:
        """Hold the reservation at least ``seconds`` from now (while its members wait in Permit,
        say), whatever its own timeout."""
        with self._lock:
            res = self._live(owner)
            if res is not None:
                res.expires = max(res.expires, self.clock.monotonic() + seconds)

    def release(self, owner: str) -> bool:
        with self._lock:
            return self._drop(owner)

    # ---- reading ----------------------------------------------------------------------------

    def get(self, owner: str) -> Reservation | None:
        with self._lock:
            return self._live(owner)

    def nodes(self) -> set[str]:
        """Nodes where some slot is held (expired reservations are dropped first)."""
        if not self._owners:
            return set()
        with self._lock:
            self._expire()
            return set(self._by_node)

    def held_on(self, node: str, pod: PodInfo, strict: bool = False,
                accounted: Container[str] = ()) -> list[PodInfo]:
        """Placeholders on ``node`` that count against ``pod``: slots of live reservations of
        equal or higher priority, except the one ``pod`` claimed or that was planned for it and,
        if it is a member of the reservation, the unclaimed ones (``strict``: those count too);
        never a slot claimed by a pod in ``accounted`` (the UIDs the node already counts: a
        member assumed there whose Reserve, which consumes its slot, has not run yet would
        count twice). Lock-free (see the module docstring)."""
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
            if claimed_by is None and (slot.planned_for == pod.uid or (not strict and res.member(pod))):
                continue
            out.append(slot.placeholder)
        return out

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

    def _expire(self) -> None:
        now = self.clock.monotonic()
        for owner in [o for o, r in self._owners.items() if r.expires <= now]:
            self._drop(owner)

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
