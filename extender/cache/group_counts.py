"""GroupCounts: per pod group, how many members the cache holds and how many are on a node.

A pod is a member of group ``(namespace, name)`` when the PodInfo the cache stores for it (its
accounted one - bound or assumed -, else its pending one) carries the label
``scheduling.x-k8s.io/pod-group: name``: exactly the pods ``ClusterCache.pods_labelled`` finds
for that label. Per group it counts the members, those assigned a node (bound or assumed: the
PodInfo has a node name) and those the cluster shows bound (``spec.nodeName``), and a mark of
the last time a member left (deleted, terminal, relabelled, its assumption dropped with nothing
else stored for it), so a reader can tell "nobody left since I looked" in O(1).

The cache calls ``update`` under its lock after every change to what it stores for a pod
(upsert, deletion, assume, forget, expiry, the ledger): each call is O(1), and so are the reads,
so a member of a thousand-pod group is not charged for reading its group. Not thread-safe on its
own.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.framework.pod_group import GroupCount, MemberState, group_of
from extender.framework.views import PodInfo

Group = tuple[str, str]


@dataclass(slots=True)
class _Tally:
    members: int = 0
    assigned: int = 0
    bound: int = 0
    left: int = 0


def state_of(info: PodInfo) -> MemberState:
    """What the counts record of a stored PodInfo."""
    return MemberState(assigned=bool(info.node_name), bound=bool((info.raw.get("spec") or {}).get("nodeName")))


class GroupCounts:
    def __init__(self) -> None:
        self._groups: dict[Group, _Tally] = {}
        self._members: dict[str, tuple[Group, MemberState]] = {}
        """uid -> (its group, its state) for every member counted."""
        self._departures = 0
        """Members that left any group so far: a group's ``left`` mark is this count when its
        last member left (or when it was counted anew), so the mark never repeats for a group,
        even one forgotten when empty and counted again."""

    def update(self, uid: str, current: PodInfo | None) -> None:
        """Pod ``uid`` is now stored as ``current`` (None: nothing is stored for it)."""
        name = group_of(current.labels) if current is not None else None
        new = ((current.namespace, name), state_of(current)) if current is not None and name else None
        old = self._members.get(uid)
        if old == new:
            return
        if old is not None:
            tally = self._groups[old[0]]
            tally.members -= 1
            tally.assigned -= old[1].assigned
            tally.bound -= old[1].bound
            if new is None or new[0] != old[0]:
                self._departures += 1
                tally.left = self._departures
                if not tally.members:
                    del self._groups[old[0]]
            del self._members[uid]
        if new is not None:
            joined = self._groups.get(new[0])
            if joined is None:
                joined = self._groups[new[0]] = _Tally(left=self._departures)
            joined.members += 1
            joined.assigned += new[1].assigned
            joined.bound += new[1].bound
            self._members[uid] = new

    def count(self, namespace: str, name: str) -> GroupCount:
        tally = self._groups.get((namespace, name))
        if tally is None:
            return GroupCount(0, 0, 0, self._departures)
        return GroupCount(tally.members, tally.assigned, tally.bound, tally.left)

    def member(self, namespace: str, name: str, uid: str) -> MemberState | None:
        """The state of ``uid`` when it is a member of the group, else None."""
        entry = self._members.get(uid)
        return entry[1] if entry is not None and entry[0] == (namespace, name) else None
