"""A seeded churn run: managed pods arrive faster than capacity, running pods are deleted, and
how long freed capacity waits for the pods that were turned away is measured.

Pods ask for one unit of the managed resource each and arrive at ``arrival_rate`` per second,
all at priority 0. Each pod, once bound, runs for a seeded duration drawn from ``runtime`` and
is then deleted; deletions are spaced so that capacity frees at most ``max_release_rate`` pods
per second. Each watch event's delay is its side's delay plus a seeded draw in [0, ``jitter``]. The run ends when every pod was bound, or when
nothing was bound for ``stall_timeout`` seconds after the last arrival (a pod stuck until
kube-scheduler's 5-minute flush must not hold the run that long), or after ``timeout``.

**The figure**: for every pod rejected at least once and finally bound, the time from the
deletion that freed the capacity it was bound into - the latest release of managed capacity on
the node it was bound to, before its binding - to its binding. Pods still pending at the end are
reported with how long they had been pending, and whether their request fit in the free
capacity at the end (a stuck pod, not a full cluster).

Part of that time is kube-scheduler's own: a pod whose attempt overlapped a cluster event goes
to the backoff queue (hints off, 1.29-1.31), and a pod in backoff is not moved by events - it
waits for its backoff (1 s doubling per attempt, up to 10 s) to expire.
:attr:`ChurnResult.backoff_held` names the measured pods bound right at their backoff expiry,
later than the release: their wait was the scheduler's backoff, not a missed event.
"""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from extender.cli import POD_MAX_BACKOFF_SECONDS
from extender.testing.harness.harness import Harness
from extender.testing.harness.objects import GPU, node, pod
from extender.testing.harness.observe import PodLife, Release, Violation


@dataclass(frozen=True)
class ChurnSpec:
    pods: int = 500
    nodes: int = 10
    gpus_per_node: int = 4
    arrival_rate: float = 40.0
    """Pods created per second."""
    max_release_rate: float = 20.0
    """At most this many deletions of bound pods per second."""
    runtime: tuple[float, float] = (1.0, 4.0)
    """A bound pod runs for a duration drawn uniformly from this range, then is deleted."""
    scheduler_delay: float = 0.0
    extender_delay: float = 0.15
    jitter: float = 0.03
    """Each watch event's delay is its side's delay plus a uniform draw in [0, jitter]."""
    seed: int = 0
    version: str = "1.30"
    processes: bool = False
    """Run the extender as a ``kube-extender serve`` process (else in this process)."""
    stall_timeout: float = 15.0
    timeout: float = 300.0
    max_backoff: float = POD_MAX_BACKOFF_SECONDS
    """kube-scheduler's ``podMaxBackoffSeconds`` (default: what ``kube-extender config scheduler``
    ships; kube-scheduler's own default is 10)."""

    @property
    def label(self) -> str:
        return f"scheduler {self.scheduler_delay * 1000:g} ms / extender {self.extender_delay * 1000:g} ms"


@dataclass
class Stuck:
    pod: str
    pending_for: float
    """Seconds from its creation to the end of the run."""
    fits: bool
    """Its request fitted in the free capacity at the end."""


@dataclass
class ChurnResult:
    spec: ChurnSpec
    reason: str
    """``all bound``, ``stalled`` or ``timeout``."""
    duration: float
    lives: list[PodLife]
    releases: list[Release]
    violations: list[Violation]
    latencies: list[tuple[str, float]] = field(default_factory=list)
    """(pod, seconds from the release that freed its capacity to its binding), rejected pods only."""
    stuck: list[Stuck] = field(default_factory=list)
    request_counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    backoff_held: set[str] = field(default_factory=set)
    """Measured pods whose wait ended at their backoff expiry (see the module docstring)."""
    cycles: int = 0
    """Scheduling cycles the emulated kube-scheduler ran."""
    bind_failures: int = 0
    """Binding cycles that failed (the pod went back to the queue)."""

    @property
    def rejected(self) -> int:
        return sum(1 for life in self.lives if life.rejections)

    def stats(self, exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, float]:
        """count, p50, p99 and max of :attr:`latencies`, without the pods in ``exclude``
        (nearest rank; zeros when empty)."""
        values = sorted(v for pod, v in self.latencies if pod not in exclude)
        if not values:
            return {"count": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}

        def rank(q: float) -> float:
            return values[max(0, math.ceil(q * len(values)) - 1)]

        return {"count": len(values), "p50": rank(0.50), "p99": rank(0.99), "max": values[-1]}


BIND_SLACK = 0.25
"""Seconds a scheduling cycle plus a binding may take after the pod left the backoff queue."""


def _latencies(lives: list[PodLife], releases: list[Release],
               backoff: Callable[[int], float]) -> tuple[list[tuple[str, float]], set[str]]:
    """The measured pods' waits, and those of them that ended at the pod's backoff expiry."""
    freeing = [r for r in releases if any(v > 0 for v in r.freed.values())]
    out, held = [], set()
    for life in lives:
        if not life.rejections or life.bound_at is None:
            continue
        before = [r.time for r in freeing if r.node == life.node and r.time <= life.bound_at]
        if not before:
            continue
        released = max(before)
        out.append((life.key, life.bound_at - released))
        expiry = life.rejections[-1].time + backoff(len(life.rejections))
        if released < expiry <= life.bound_at <= expiry + BIND_SLACK:
            held.add(life.key)
    return out, held


def run_churn(spec: ChurnSpec, progress: Callable[[Harness, int], None] | None = None) -> ChurnResult:
    """Run ``spec`` (see the module docstring); ``progress(harness, bound)`` is called about once
    a second."""
    rng = random.Random(spec.seed)
    delay_rng = random.Random(spec.seed + 1)

    def drawn(base: float) -> Callable[[], float]:
        return lambda: base + delay_rng.uniform(0.0, spec.jitter)

    nodes = [node(f"node-{i:03d}", spec.gpus_per_node) for i in range(spec.nodes)]
    names = [f"churn-{i:04d}" for i in range(spec.pods)]
    runtimes = {name: rng.uniform(*spec.runtime) for name in names}
    with Harness(objects=nodes, version=spec.version, seed=spec.seed, scheduler_delay=drawn(spec.scheduler_delay),
                 extender_delay=drawn(spec.extender_delay), processes=spec.processes,
                 scheduler={"pod_max_backoff_seconds": spec.max_backoff}) as h:
        assert h.recorder is not None and h.scheduler is not None
        last_release = [0.0]
        gap = 1.0 / spec.max_release_rate

        def on_bound(life: PodLife) -> None:  # under the API server's store lock: only schedule
            name = life.key.split("/", 1)[1]
            if name not in runtimes or life.bound_at is None:
                return
            last_release[0] = max(life.bound_at + runtimes[name], last_release[0] + gap)
            h.at(last_release[0], functools.partial(h.delete_pod, name), f"delete {name}")

        h.recorder.on_bound.append(on_bound)
        start = h.now()
        for i, name in enumerate(names):
            h.at(start + i / spec.arrival_rate, functools.partial(h.create_pod, pod(name, 1, resource=GPU)),
                 f"create {name}")
        last_arrival = start + (spec.pods - 1) / spec.arrival_rate
        reason = "timeout"
        last_bound, last_count, next_report = start, 0, start + 1.0
        while h.now() - start < spec.timeout:
            lives = [life for life in h.lives if life.key.split("/", 1)[1] in runtimes]
            bound = sum(1 for life in lives if life.bound_at is not None)
            now = h.now()
            if bound != last_count:
                last_bound, last_count = now, bound
            if bound == spec.pods:
                reason = "all bound"
                break
            if now > last_arrival and now - max(last_bound, last_arrival) > spec.stall_timeout:
                reason = "stalled"
                break
            if progress is not None and now >= next_report:
                progress(h, bound)
                next_report = now + 1.0
            time.sleep(0.05)
        end = h.now()
        lives = [life for life in h.lives if life.key.split("/", 1)[1] in runtimes]
        releases = h.releases
        stuck = [Stuck(life.key, end - life.created, h.recorder.fits_somewhere(life.requests))
                 for life in lives if life.pending]
        latencies, held = _latencies(lives, releases, h.scheduler.queue.backoff_for)
        return ChurnResult(spec, reason, end - start, lives, releases, h.violations, latencies, stuck,
                           h.request_counts(), held, len(h.scheduler.cycles), h.scheduler.bind_failures)
