"""Pure rules of gang scheduling: who belongs to a group, how big it is, when it may go, and in
which order nodes are tried when its placement is planned.

A pod belongs to group ``G`` of its namespace when it carries the label
``scheduling.x-k8s.io/pod-group: G`` (the scheduler-plugins convention). The group's size
(``minMember``) comes from the PodGroup object ``G`` when there is one, else from the pod
annotation ``<prefix>pod-group-min-member`` (the first member that states it).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from extender.framework.views import NodeInfo

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def group_of(labels: Mapping[str, str]) -> str | None:
    name = labels.get(GROUP_LABEL)
    return name or None


def min_member(annotations: Iterable[Mapping[str, str]], key: str) -> int | None:
    """The first valid positive integer among the members' ``key`` annotations."""
    for ann in annotations:
        text = ann.get(key)
        if text is not None and text.strip().isdigit() and int(text) > 0:
            return int(text)
    return None


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
