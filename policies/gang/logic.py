"""Pure rules of gang scheduling: who belongs to a group, and when a group may go.

A pod belongs to group ``G`` of its namespace when it carries the label
``scheduling.x-k8s.io/pod-group: G`` (the scheduler-plugins convention); the group's size comes
from the pod annotation ``<prefix>pod-group-min-member`` (the first member that states it).
"""

from __future__ import annotations

from typing import Iterable, Mapping

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
