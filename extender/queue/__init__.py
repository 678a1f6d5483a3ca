"""The extender's own queue: nominations, capacity held for pods not bound yet (reservations,
admission holds), the record of unschedulable pods with their queueing hints, timed wake-ups,
admission through scheduling gates (PreEnqueue, QueueSort) and the nudges that get rejected pods
retried. It imports neither the runtime nor the cache: what it needs of them is handed in
(``extender.queue.interfaces``)."""

from extender.queue.queue import SchedulingQueue, admission_owner

__all__ = ["SchedulingQueue", "admission_owner"]
