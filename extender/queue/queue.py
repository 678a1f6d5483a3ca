"""SchedulingQueue: the extender's queue, and the small interface the engine talks to it through.

kube-scheduler's framework talks to its queue backend through a handful of calls (nominate,
add unschedulable, done, ...); so does the engine here:

* ``with_held`` / ``held_nodes``: capacity held against a pod (``HeldCapacity``: nominations and
  reservations), counted by Filter, at bind and by "would it fit?" questions;
* ``unschedulable`` / ``schedulable``: the record of pods the last Filter answer rejected
  everywhere (the nudger's work list), and their leaving it;
* ``assumed``: a pod now counts on a node, so the capacity held since its admission goes;
* ``nominated``: pods nominated to a node (the engine clears those a higher-priority pod
  displaced);
* ``requeue_after``: timed wake-ups (back-off), which plugins ask for through the handle;
* ``describe``: the data of ``/debug/queue``.

Admission (``extender.queue.admission``) and nudges (``extender.queue.nudger``) work on the
same queue, handed what they need of the profiles and the engine (``extender.queue.interfaces``).
"""

from __future__ import annotations

from typing import AbstractSet, Any, Callable, Container, Iterable, Mapping

from extender.framework.clock import Clock
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo
from extender.queue.backoff import Wakeups
from extender.queue.held import HeldCapacity
from extender.queue.interfaces import ClusterView
from extender.queue.nominator import Nominator
from extender.queue.reservations import Reservations
from extender.queue.unschedulable import UnschedulablePods
from extender.queue.view import WaitingInPermit, queue_view


def _nothing() -> None:
    pass


def admission_owner(uid: str) -> str:
    """The reservation owner holding the capacity of pod ``uid`` between its admission and its
    bind (``extender.queue.admission``)."""
    return f"admitted/{uid}"


class SchedulingQueue:
    """Built over the cache (``cluster``) before the engine and the plugins: it follows the pods
    through the cache's change fan-out (nominations) and notes released capacity back into it."""

    def __init__(self, cluster: ClusterView, clock: Clock, *, remember_pods: int = 4096) -> None:
        self.cluster = cluster
        self.clock = clock
        self.reservations = Reservations(clock, on_release=lambda nodes: cluster.note_released(nodes),
                                         on_planned=self._end_admission_holds)
        self.nominator = Nominator(on_release=lambda key, node: cluster.note_released((node,), key))
        cluster.on_pod_change(self.nominator.pod_changed)
        self.held = HeldCapacity(self.nominator, self.reservations)
        self.unschedulable_pods = UnschedulablePods(clock, remember_pods)
        self.wakeups = Wakeups(clock, remember_pods)
        self.on_hold_again: Callable[[PodInfo], None] | None = None
        """Told of an admission hold a failed bind gave back (the Admitter follows it again)."""

    def _end_admission_holds(self, owner: str, uids: set[str]) -> None:
        """Slots another owner planned for admitted pods (Gang's plan for a group admitted at
        the gate) hold their capacity from now on: their admission holds end, or that capacity
        would count twice against every other pod."""
        for uid in uids:
            if owner != admission_owner(uid):
                self.reservations.release(admission_owner(uid))

    def with_held(self, info: NodeInfo, pod: PodInfo, strict: bool = False,
                  placed: Container[str] = ()) -> NodeInfo:
        return self.held.with_held(info, pod, strict, placed)

    def held_nodes(self) -> AbstractSet[str]:
        return self.held.held_nodes()

    def nominated(self, node: str) -> list[PodInfo]:
        return self.nominator.nominated(node)

    def unschedulable(self, pod: PodInfo, rejected: Mapping[str, Status], seq: int) -> None:
        """Every node rejected ``pod`` in an answer made from the cache as of change ``seq``."""
        self.unschedulable_pods.add(pod, rejected, seq)

    def schedulable(self, uid: str) -> None:
        """The pod fits somewhere now, or is bound: it leaves the unschedulable record."""
        self.unschedulable_pods.remove(uid)

    def assumed(self, pod: PodInfo, node: str) -> Callable[[], None]:
        """``pod`` now counts on ``node`` (assumed at bind): capacity held since its admission is
        no longer needed. Returns what holds it again, where it was and as long as it had left,
        for a bind that then fails (the pod is pending again, its admission still stands: the
        room must not go to a pod of its priority, nor to another gated pod)."""
        owner = admission_owner(pod.uid)
        res = self.reservations.get(owner)
        slot = next(iter(res.slots.values()), None) if res is not None else None
        if res is None or slot is None or not self.reservations.consume(owner, pod.uid, node):
            return _nothing
        priority, member, expires, held_on = res.priority, res.member, res.expires, slot.node

        def hold_again() -> None:
            left = expires - self.clock.monotonic()
            pending = self.cluster.pending_pod(pod.namespace, pod.name)
            if (left > 0 and pending is not None and pending.uid == pod.uid and not pending.deleting
                    and self.reservations.get(owner) is None):
                self.reservations.place(owner, priority, [(held_on, pod)], left, member=member)
                if self.on_hold_again is not None:
                    self.on_hold_again(pending)
        return hold_again

    def requeue_after(self, pod: PodInfo, seconds: float) -> None:
        """Have ``pod`` touched after ``seconds`` so kube-scheduler retries it (``Wakeups``)."""
        self.wakeups.requeue_after(pod, seconds)

    def describe(self, waiting: Iterable[WaitingInPermit],
                 sort: Callable[[Iterable[PodInfo]], list[PodInfo]]) -> dict[str, Any]:
        """The data of ``/debug/queue`` (``extender.queue.view``); ``waiting``: the pods held in
        Permit; ``sort``: QueueSort."""
        return queue_view(clock=self.clock, cluster=self.cluster, nominator=self.nominator,
                          unschedulable=self.unschedulable_pods, reservations=self.reservations,
                          waiting=waiting, sort=sort)
