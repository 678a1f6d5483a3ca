"""Cluster events and queueing hints: when is it worth looking at a waiting pod again?

The cache records a ``ClusterEvent`` for every change it applies. A plugin that rejects pods
(PreEnqueue for gated pods, Filter for pods kube-scheduler asked about) may declare which events
can change its mind::

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return (ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE, ClusterEvent.ALLOCATION_RELEASED)

and optionally narrow them per pod::

    def queueing_hint(self, pod: PodInfo, event: Change) -> bool:  # True: look at ``pod`` again

A pod rejected by a plugin is looked at again only after one of that plugin's events (and, if it
has a hint, only when the hint says so). A plugin that declares nothing is interested in every
event. Changes to the pod itself always count.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ClusterEvent(enum.Enum):
    NODE_ADD = "Node/Add"
    NODE_UPDATE = "Node/Update"
    NODE_DELETE = "Node/Delete"
    POD_ADD = "Pod/Add"
    POD_UPDATE = "Pod/Update"
    POD_DELETE = "Pod/Delete"
    ALLOCATION_RELEASED = "Allocation/Release"
    """Managed resources accounted to a pod were freed: it was deleted, finished, or an assumed
    or reserved allocation was forgotten or expired."""
    POD_GROUP_CHANGE = "PodGroup/Change"
    QUOTA_CHANGE = "ElasticQuota/Change"
    DISRUPTION_BUDGET_CHANGE = "PodDisruptionBudget/Change"


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded event: what happened, to which object (``namespace/name`` for namespaced
    objects, the name for nodes), and on which node, when it matters (allocations)."""

    seq: int
    event: ClusterEvent
    key: str
    node: str = ""


NUDGE_ANNOTATION = "nudged-at"
"""The annotation (under the extender's annotation prefix) a nudge touches a pod with: an update
kube-scheduler retries the pod on, and no cluster change for anyone else."""

CAPACITY_EVENTS = (ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE, ClusterEvent.ALLOCATION_RELEASED)
"""The events after which a pod that did not fit may fit."""
