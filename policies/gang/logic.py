"""Pure rules of gang scheduling: who belongs to a group, how big it is, when it may go, and in
which order nodes are tried when its placement is planned.

A pod belongs to group ``G`` of its namespace when it carries the label
``scheduling.x-k8s.io/pod-group: G`` (the scheduler-plugins convention). The group's size
(``minMember``) comes from the PodGroup object ``G`` when there is one, else from the pod
annotation ``<prefix>pod-group-min-member`` (the first member that states it).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from extender.framework.pod_group import GROUP_LABEL, group_of
from extender.framework.views import NodeInfo

__all__ = ["GROUP_LABEL", "group_of", "size_of", "min_member", "ready", "room", "planning_order"]


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
