"""Pure rules of gang scheduling: who belongs to a group, how big it is, when it may go, and where
its members are planned to go. (What Gang remembers per group between calls, and the decisions
made from it, are in ``policies.gang.manager``.)

A pod belongs to group ``G`` of its namespace when it carries the label
``scheduling.x-k8s.io/pod-group: G`` (the scheduler-plugins convention). The group's size
(``minMember``) comes from the PodGroup object ``G`` when there is one, else from the pod
annotation ``<prefix>pod-group-min-member`` (the first member that states it).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping, Sequence

from extender.framework.pod_group import GROUP_LABEL, PodGroupSpec, group_of
from extender.framework.views import NodeInfo, PodInfo

__all__ = ["GROUP_LABEL", "Group", "group_of", "group_key", "size_of", "min_member", "needed",
           "permit_timeout", "ready", "room", "planning_order", "wanted", "place"]

Group = tuple[str, str]
"""A pod group: (namespace, name)."""


def group_key(pod: PodInfo) -> Group | None:
    """The group ``pod`` belongs to, or None when it is in none."""
    name = group_of(pod.labels)
    return (pod.namespace, name) if name else None


def size_of(annotations: Mapping[str, str], key: str) -> int | None:
    """The group size a member's ``key`` annotation states: a positive integer, else None."""
    text = annotations.get(key)
    if text is not None and text.strip().isdigit() and int(text) > 0:
        return int(text)
    return None


def min_member(members: Iterable[tuple[tuple[str, str], Mapping[str, str]]], key: str) -> int | None:
    """The size stated by the oldest member that states one: ``members`` are (age key - e.g.
    (creationTimestamp, uid) - , annotations) pairs in any order; None when none states it."""
    best: tuple[tuple[str, str], int] | None = None
    for age, annotations in members:
        size = size_of(annotations, key)
        if size is not None and (best is None or age < best[0]):
            best = (age, size)
    return best[1] if best is not None else None


def needed(spec: PodGroupSpec | None, members: Iterable[PodInfo], key: str) -> int | None:
    """The group's size (minMember): its PodGroup's when there is one, else the ``key``
    annotation of the oldest of ``members`` that states one; None when neither says."""
    if spec is not None:
        return spec.min_member
    return min_member((((m.creation_timestamp, m.uid), m.annotations) for m in members), key)


def permit_timeout(spec: PodGroupSpec | None, default: float) -> float:
    """How long members wait in Permit for their group: the PodGroup's scheduleTimeoutSeconds
    when it sets one, else ``default`` (the plugin's permitTimeout)."""
    if spec is not None and spec.schedule_timeout_seconds:
        return spec.schedule_timeout_seconds
    return default


def ready(arrived: int, placed: int, needed: int) -> bool:
    """May the waiting members go? When those waiting in Permit plus those already bound reach
    ``needed``."""
    return arrived + placed >= needed


def room(node: NodeInfo, requests: Mapping[str, int]) -> int:
    """How many copies of a pod with these managed ``requests`` the node's free capacity holds
    by arithmetic alone (the plugins' Filter has the last word); a huge number when the pod asks
    for nothing."""
    copies = [node.free(r) // need for r, need in requests.items() if need > 0]
    return max(0, min(copies)) if copies else 1 << 30


def planning_order(nodes: Sequence[NodeInfo], requests: Mapping[str, int]) -> list[NodeInfo]:
    """Nodes to fill, roomiest first (ties by name): the group lands on as few nodes as
    possible, and nodes with no room at all are tried last."""
    return sorted(nodes, key=lambda n: (-room(n, requests), n.name))


def wanted(pod: PodInfo, members: Iterable[PodInfo], count: int) -> list[PodInfo]:
    """Whom a plan for the ``count`` members still to go places, largest requests first:
    ``pod`` and the group's other unplaced ``members`` that ask for managed resources (oldest
    first), then copies of ``pod`` for members that do not exist yet. Members asking for no
    managed resource need no slot but still count towards ``count``."""
    others = [m for m in members if not m.node_name and m.uid != pod.uid]
    asking = sorted((m for m in others if m.requests), key=lambda m: (m.creation_timestamp, m.uid))
    free_riders = len(others) - len(asking)
    chosen = [pod, *asking][:count]
    chosen += [pod] * max(0, count - len(chosen) - free_riders)
    chosen.sort(key=lambda m: -sum(m.requests.values()))
    return chosen


def place(members: Sequence[PodInfo], nodes: Sequence[NodeInfo], requests: Mapping[str, int],
          fits: Callable[[PodInfo, NodeInfo], bool]) -> tuple[list[tuple[str, PodInfo]], int]:
    """Plan ``members`` in order onto ``nodes``: roomiest first for ``requests`` (the asking
    member's), each node filled while the next member ``fits`` on it with the members planned
    there before it accounted. Returns the (node name, member) placements and how many members
    found no room (0: the plan is complete)."""
    placements: list[tuple[str, PodInfo]] = []
    queue = list(members)
    for info in planning_order(nodes, requests):
        sim = info
        while queue and fits(queue[0], sim):
            member = queue.pop(0)
            placements.append((info.name, member))
            sim = sim.with_pod(dataclasses.replace(member, uid=f"{member.uid}/planned/{len(placements)}",
                                                   node_name=info.name), -1)
        if not queue:
            break
    return placements, len(queue)
