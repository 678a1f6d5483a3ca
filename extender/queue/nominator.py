"""Nominator: pending pods nominated to nodes (``status.nominatedNodeName``).

A pod that preemption made room for is nominated to that node; until it is bound the capacity
there stays its own against pods of lower priority (``HeldCapacity``), as kube-scheduler holds it
for its own resources. The Nominator follows the pods through the cache's change fan-out
(``ClusterView.on_pod_change``): a pending pod that names a node is nominated there; a pod that is
bound, being deleted, terminal or gone is not nominated any more. A nomination this process
makes (``nominate``) counts at once, as kube-scheduler's nominator records its own before the
API server has it: until the watch shows the pod naming a node, updates that name none (a
condition written meanwhile) keep it; a pod the watch has shown deleted, bound, deleting or
terminal is not nominated that way (it was, say, deleted while its filter call preempted for it).
A nomination that ends or moves
released capacity on its old node: ``on_release(pod key, node)`` is called then (outside the
Nominator's lock), so queueing hints and nudges see it like a pod's release.
"""

from __future__ import annotations

import threading
from typing import Callable

from extender.framework.views import PodInfo


ENDED_KEPT = 4096
"""How many pods that ended the Nominator remembers (one filter call's worth of pods is plenty)."""


class Nominator:
    def __init__(self, on_release: Callable[[str, str], None] | None = None) -> None:
        self.on_release = on_release
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        """node -> pending pods nominated to it, by UID."""
        self._node_of: dict[str, str] = {}
        self._unseen: set[str] = set()
        """UIDs nominated by ``nominate`` that no update has shown naming a node yet."""
        self._ended: dict[str, None] = {}
        """UIDs of pods an update showed deleted, bound, deleting or terminal, in the order they
        first did (the latest ``ENDED_KEPT``; a pod never comes back pending): ``nominate`` leaves
        them alone."""
        self.version = 0
        """Grows whenever a nomination starts, moves, ends or its pod changes (with the
        reservations' version: "is the same capacity held?")."""

    def nominate(self, pod: PodInfo, node: str) -> None:
        """``pod`` was just nominated to ``node`` by this process (its ``nominatedNodeName``
        written, or being written): count it there now, not once the watch shows it."""
        self._changed(pod.uid, pod, node)

    def pod_changed(self, uid: str, pod: PodInfo | None) -> None:
        """The cluster says this of pod ``uid`` now (None: deleted)."""
        self._changed(uid, pod, None)

    def _changed(self, uid: str, pod: PodInfo | None, nominated: str | None) -> None:
        with self._lock:
            if nominated:
                known = self._by_node.get(nominated, {}).get(uid)
                if uid in self._ended or (known is not None and known.nominated_node_name == nominated):
                    return  # gone, or shown nominated already: the cluster speaks for it
            elif pod is None or pod.node_name or pod.deleting or pod.terminal:
                if uid not in self._ended:  # a bound pod's later updates change nothing here
                    self._ended[uid] = None
                    if len(self._ended) > ENDED_KEPT:
                        del self._ended[next(iter(self._ended))]
            else:
                self._ended.pop(uid, None)
            keep = ""
            if pod is not None and not (pod.node_name or pod.deleting or pod.terminal):
                if nominated:
                    keep = nominated
                    self._unseen.add(uid)
                elif pod.nominated_node_name:
                    keep = pod.nominated_node_name
                    self._unseen.discard(uid)  # the cluster speaks for it from now on
                elif uid in self._unseen:
                    keep = self._node_of.get(uid, "")  # the cluster has said nothing of it yet
            if not keep:
                self._unseen.discard(uid)
            node = self._node_of.pop(uid, None)
            gone = None
            if node is not None:
                pods = self._by_node.get(node, {})
                gone = pods.pop(uid, None)
                if not pods:
                    self._by_node.pop(node, None)
            if keep and pod is not None:
                self._by_node.setdefault(keep, {})[uid] = pod
                self._node_of[uid] = keep
            if node is not None or keep:
                self.version += 1
        if node is not None and node != keep and gone is not None and gone.requests and self.on_release is not None:
            self.on_release(gone.key, node)

    def nominated(self, node: str) -> list[PodInfo]:
        """Pending pods nominated to ``node`` (capacity kube-scheduler and the extender hold for
        them against pods of lower priority)."""
        if not self._by_node:  # the common case, read without the lock (a dict's size is one read)
            return []
        with self._lock:
            return list(self._by_node.get(node, {}).values())

    def nominations(self) -> list[tuple[str, PodInfo]]:
        """(node, pod) of every pod nominated now (those ``nominate`` made included)."""
        if not self._by_node:
            return []
        with self._lock:
            return [(node, pod) for node, pods in self._by_node.items() for pod in pods.values()]

    def nominated_nodes(self) -> set[str]:
        if not self._by_node:
            return set()
        with self._lock:
            return set(self._by_node)
