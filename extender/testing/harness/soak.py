"""A fault-injection soak: thousands of mixed pods through kube-scheduler and kube-extender over a
faulty API server, with the extender killed, restarted and failed over, then checked from the API
server's objects alone.

The cluster, its configuration and the workload are :mod:`.soak_workload`'s.

**Faults** (a Poisson stream of :data:`FAULTS`, each a rule of the fake API server that waits for
the next matching request - a Binding or pod patch rule for :data:`FAULT_WINDOW` seconds at most
-, or an action): Bindings answered 500 or 409, Bindings whose reply is
lost after they were stored (a disconnect, or 504), Bindings disconnected before they reach the
store, pod patches (gates, nudges, status) answered 500 or 409, evictions and lease renewals
answered 500, watches dropped or aborted, event history compacted (watchers get 410 and relist),
request latency spikes, and lease partitions (the leader's renewals fail for 3 s: it is deposed
while alive, fenced by its own renew deadline, and the other replica takes over). Every
``kill_every`` seconds the leading replica is SIGKILLed mid-bind (a latency rule holds the next
extender Binding at the API server, the replica dies while it is in flight, and the Binding is
stored after its death) and restarted ``restart_after`` seconds later; every ``handover_every``
seconds the leader is stopped cleanly (its lease released) and started again. Watch deliveries
lag per side (the extender's and kube-scheduler's informers see changes at different times, each
with jitter).

**Checks** (from the API server's objects and its commit stream only, never the extender's
view; :class:`SoakResult.violations`):

* ``capacity``: no node over its allocatable and no device over its memory or compute, or held
  whole and shared, or given to a pod that asks more - at any instant (every write);
* ``leak``: no pod that is not bound carries the allocation or device annotation, at any
  instant; and at the end, no Pending pod that would fit in what is free (capacity held by
  nobody visible);
* ``unexplained``: every pod still Pending at the end has a ``PodScheduled=False`` condition
  with a reason other than ``SchedulingGated`` or an Event from kube-scheduler or the extender;
* ``gang``: all-or-nothing. At an instant, Bindings of a group are separate writes, so a group
  is partly bound while its members' Bindings land; what must hold at every Binding is that the
  group could complete: at least ``minMember`` members exist (Permit never lets fewer go). At
  the end, every group that was not torn down has 0 or at least ``minMember`` members bound,
  and every group was either never started or reached ``minMember`` bound members. How long a
  group stayed partly bound (first to ``minMember``-th Binding) is a figure, not a check;
* ``preemption``: every Preempted Event (kube-scheduler's names the preemptor's UID, the
  extender's refers to it) has a victim of lower priority than its preemptor - or, when the
  extender reclaimed lent quota, a victim of another namespace;
* ``quota``: no namespace ever has more whole GPUs bound than its ``max`` (at every Binding), and
  a namespace under its ``min`` with pending demand that fits in its ``min`` while other
  namespaces borrow at least that much gets it within :data:`RECLAIM_WITHIN` seconds: such a
  stretch (from the API server's objects, at every write) never lasts longer. Figures, not
  checks: how long the stretches lasted (``reclaim_seconds``), the pods evicted to reclaim
  quota (``quota_evictions``, from the extender's Preempted Events), how long the tides'
  ``reclaim`` pods waited from creation to their Binding (``reclaim_bind_seconds``) and each
  namespace's peak use beyond its ``min`` (``borrowed_peak``);
* ``stuck``: every feasible pod was resolved (bound and run, preempted, or deleted): a pod left
  Pending while the cluster is empty means capacity leaked where the API cannot show it. When
  the run stalls while faults hit or replicas go down, the pods left get :data:`SETTLE_SECONDS`
  once those stop (``SoakResult.reason`` says so); a stall without any is stuck at once.
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from extender.cli import POD_MAX_BACKOFF_SECONDS
from extender.testing.fakeapi import builders
from extender.testing.harness.harness import Harness
from extender.testing.harness.observe import PodLife
from extender.testing.harness.objects import GPU
from extender.testing.harness.soak_workload import (EXTENDER_CONFIG, NAMESPACES, PRIORITIES, Job, SoakSpec,
                                                     build_workload, elastic_quotas, nodes, pod_key, quotas)

BINDING = r"/pods/[^/]+/binding$"
POD = r"/api/v1/namespaces/[^/]+/pods/[^/]+(/status)?$"

FAULTS: dict[str, float] = {
    "binding-500": 3, "binding-409": 2, "binding-reply-lost": 2, "binding-504-after-commit": 1,
    "binding-disconnect": 1, "pod-patch-500": 2, "pod-patch-409": 2, "eviction-500": 1, "lease-500": 1,
    "list-500": 1, "watch-drop": 2, "watch-abort": 1, "compaction-410": 1, "latency": 1, "lease-partition": 0.3,
}
"""Fault kinds and their relative weights."""


# ---- the result --------------------------------------------------------------------------------

VIOLATION_KINDS = ("capacity", "leak", "unexplained", "gang", "preemption", "quota", "stuck")

FAULT_WINDOW = 0.5
"""Seconds a Binding or pod patch fault waits for its request before it lapses. Such a fault is
a moment of trouble on the scheduling path, not a debt: rules that never lapsed piled up once
few pods were left (the stream keeps its rate, the Bindings do not), and every Binding of the
last pod met one, attempt after attempt, until the run stalled. Faults of rarer requests (lists,
evictions, lease renewals) still wait for theirs."""

LAPSING = frozenset({"binding-500", "binding-409", "binding-reply-lost", "binding-504-after-commit",
                     "binding-disconnect", "pod-patch-500", "pod-patch-409"})
"""The fault kinds that lapse after :data:`FAULT_WINDOW`."""

SETTLE_SECONDS = 30.0
"""A run that stalled while faults hit or replicas were killed or handed over: once those stop,
the feasible pods left have this long to resolve - well over the retries of pods backing off
(``POD_MAX_BACKOFF_SECONDS``) - before they count as ``stuck``."""

RECLAIM_WITHIN = 30.0
"""Seconds a namespace under its ``min`` may wait for what it lent (see ``quota`` above)."""


@dataclass
class SoakResult:
    spec: SoakSpec
    reason: str
    """Why the run ended: ``all resolved``, ``stalled`` or ``timeout``; ``stalled, resolved once
    the faults stopped`` when it stalled under faults or kills and the feasible pods left were
    resolved within :data:`SETTLE_SECONDS` once those stopped (starved by them, not stuck)."""
    duration: float
    outcomes: Counter[tuple[str, str]]
    """(kind, outcome) -> pods."""
    faults: Counter[str]
    """Fault kind -> times it hit a request (or was done)."""
    kills: int
    kills_mid_bind: int
    handovers: int
    restarts: int
    failovers: int
    """Changes of the replica serving kube-scheduler's calls."""
    violations: dict[str, list[str]]
    groups: Counter[str]
    """Gang outcomes: ``complete``, ``never started``, ``torn down before complete`` (a member
    preempted or cancelled first), ``infeasible``."""
    partial_seconds: list[float]
    """Per completed group: seconds from its first to its ``minMember``-th Binding."""
    reclaim_seconds: list[float]
    """Per stretch of a namespace waiting under its ``min`` while others borrowed: its length."""
    longest_reclaim: tuple[float, str, float]
    """The longest of those stretches: (seconds, namespace, start in seconds of the run)."""
    quota_evictions: int
    """Pods the extender evicted to reclaim lent quota."""
    reclaim_bind_seconds: list[float]
    """Per bound ``reclaim`` pod (a tide's returning demand): seconds from creation to Binding."""
    borrowed_peak: dict[str, int]
    """Namespace -> most whole GPUs it had bound beyond its ``min`` at once."""
    cycles: int
    bind_failures: int
    requests: dict[str, int]
    """API requests by client (``kube-scheduler``, ``kube-extender``, ``harness``)."""
    action_errors: list[str]

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


# ---- the run -------------------------------------------------------------------------------------

@dataclass
class _Group:
    min_member: int
    members: list[str]
    runtime: float
    feasible: bool
    pod_group: dict[str, Any] | None
    existing: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    first_bound: float | None = None
    complete_at: float | None = None
    torn_down: bool = False


def _gpus(pod: Mapping[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
               for c in (pod.get("spec") or {}).get("containers") or ())


class _QuotaWatch:
    """The ``quota`` check, fed every Pod write (see the module docstring)."""

    def __init__(self, spec: SoakSpec, feasible: set[str], group_of: Mapping[str, tuple[str, str]],
                 now: Callable[[], float]) -> None:
        self.quotas = quotas(spec)
        self.feasible, self.group_of, self.now = feasible, group_of, now
        self.bound: dict[str, tuple[str, int]] = {}
        self.pending: dict[str, tuple[str, int]] = {}
        self.waiting_since: dict[str, float] = {}
        self.stretches: list[float] = []
        self.longest: tuple[float, str, float] = (0.0, "", 0.0)
        """The longest stretch: (seconds, namespace, start)."""
        self.borrowed_peak = {ns: 0 for ns in self.quotas}
        self.violations: list[str] = []

    def write(self, etype: str, obj: Mapping[str, Any]) -> None:
        key = pod_key(obj)
        ns = str((obj.get("metadata") or {}).get("namespace") or "default")
        if ns not in self.quotas:
            return
        done = etype == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if done:
            self.bound.pop(key, None)
            self.pending.pop(key, None)
        elif (obj.get("spec") or {}).get("nodeName"):
            self.pending.pop(key, None)
            if key not in self.bound:
                self.bound[key] = (ns, _gpus(obj))
                used = self.used(ns)
                self.borrowed_peak[ns] = max(self.borrowed_peak[ns], used - self.quotas[ns][0])
                if used > self.quotas[ns][1]:
                    self.violations.append(f"{self.now():.2f}s {ns}: {used} GPUs bound, above its max "
                                           f"{self.quotas[ns][1]} ({key} bound)")
        elif key in self.feasible:
            self.pending[key] = (ns, _gpus(obj))
        self.look()

    def used(self, ns: str) -> int:
        return sum(g for n, g in self.bound.values() if n == ns)

    def look(self) -> None:
        now = self.now()
        used = {ns: self.used(ns) for ns in self.quotas}
        for ns, (lo, _) in self.quotas.items():
            borrowed = sum(max(0, used[other] - self.quotas[other][0]) for other in self.quotas if other != ns)
            demand: dict[str, int] = {}  # a gang's pending members ask together
            for key, (n, gpus) in self.pending.items():
                if n == ns and gpus:
                    unit = str(self.group_of.get(key, key))
                    demand[unit] = demand.get(unit, 0) + gpus
            waiting = any(used[ns] + d <= lo and d <= borrowed for d in demand.values())
            since = self.waiting_since.get(ns)
            if waiting and since is None:
                self.waiting_since[ns] = now
            elif not waiting and since is not None:
                self.end(ns, since, now)

    def end(self, ns: str, since: float, now: float) -> None:
        del self.waiting_since[ns]
        self.stretches.append(now - since)
        self.longest = max(self.longest, (now - since, ns, since))
        if now - since > RECLAIM_WITHIN:
            self.violations.append(f"{since:.2f}s {ns}: under its min with pending demand while others borrowed, "
                                   f"for {now - since:.1f}s")

    def finish(self) -> None:
        for ns, since in list(self.waiting_since.items()):
            self.end(ns, since, self.now())


class _Soak:
    def __init__(self, spec: SoakSpec, h: Harness, jobs: list[Job]) -> None:
        self.spec, self.h = spec, h
        self.rng = random.Random(spec.seed + 2)
        self.kind: dict[str, str] = {}
        self.runtime: dict[str, float] = {}
        self.feasible: set[str] = set()
        self.group_of: dict[str, tuple[str, str]] = {}
        self.groups: dict[tuple[str, str], _Group] = {}
        self.ours: set[str] = set()
        """Pods the soak itself deleted (runtime over, cancelled, group torn down)."""
        self.cancelled: set[str] = set()
        self.preempted: set[str] = set()
        self.gang_violations: list[str] = []
        self.faults: Counter[str] = Counter()
        self.rules: list[tuple[str, Any]] = []
        self.kills = self.kills_mid_bind = self.handovers = self.restarts = self.failovers = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.quota = _QuotaWatch(spec, self.feasible, self.group_of, h.now)
        for job in jobs:
            for pod in job.pods:
                key = pod_key(pod)
                self.kind[key] = job.kind
                self.runtime[key] = job.runtime
                if job.feasible:
                    self.feasible.add(key)
                if job.group is not None:
                    self.group_of[key] = job.group
            if job.group is not None:
                self.groups[job.group] = _Group(job.min_member, [pod_key(p) for p in job.pods], job.runtime,
                                                job.feasible, job.pod_group)

    # ---- hooks (under the API server's store lock: no writes, only scheduling) -----------------

    def on_bound(self, life: PodLife) -> None:
        key = life.key
        if key not in self.kind or life.bound_at is None:
            return
        group_key = self.group_of.get(key)
        if group_key is None:
            self.h.at(life.bound_at + self.runtime[key], functools.partial(self.delete, key), f"end {key}")
            return
        group = self.groups[group_key]
        with self._lock:
            group.bound.add(key)
            if len(group.existing) < group.min_member:
                self.gang_violations.append(
                    f"{group_key[0]}/{group_key[1]}: {key} bound at {life.bound_at:.2f}s while only "
                    f"{len(group.existing)} of minMember {group.min_member} members existed")
            if group.first_bound is None:
                group.first_bound = life.bound_at
            if group.complete_at is None and len(group.bound) >= group.min_member:
                group.complete_at = life.bound_at
                self.h.at(life.bound_at + group.runtime, functools.partial(self.tear_down, group_key),
                          f"end {group_key}")

    def on_commit(self, kind: str, etype: str, obj: Mapping[str, Any], prev: Mapping[str, Any] | None) -> None:
        if kind == "Pod":
            with self._lock:
                self.quota.write(etype, obj)
        if kind != "Pod" or etype == "MODIFIED":
            return
        key = pod_key(obj)
        group_key = self.group_of.get(key)
        if etype == "ADDED":
            if group_key is not None:
                with self._lock:
                    self.groups[group_key].existing.add(key)
            return
        with self._lock:
            if group_key is not None:
                self.groups[group_key].existing.discard(key)
            if key in self.ours or key not in self.kind:
                return
            self.preempted.add(key)
            if group_key is not None and not self.groups[group_key].torn_down:
                self.h.after(0.0, functools.partial(self.tear_down, group_key), f"tear down {group_key}")

    # ---- actions ----------------------------------------------------------------------------------

    def create(self, job: Job) -> None:
        if job.pod_group is not None:
            self.h.api.create(job.pod_group)
        for pod in job.pods:
            self.h.create_pod(pod)
        if job.cancel_after is not None:
            key = pod_key(job.pods[0])
            self.h.after(job.cancel_after, functools.partial(self.delete, key, cancel=True), f"cancel {key}")

    def delete(self, key: str, cancel: bool = False) -> None:
        namespace, name = key.split("/", 1)
        with self._lock:
            if key in self.preempted or key in self.ours:
                return
            self.ours.add(key)
            if cancel:
                self.cancelled.add(key)
        self.h.delete_pod(name, namespace)

    def tear_down(self, group_key: tuple[str, str]) -> None:
        group = self.groups[group_key]
        with self._lock:
            if group.torn_down:
                return
            group.torn_down = True
        for key in group.members:
            self.delete(key)
        if group.pod_group is not None:
            self.h.api.delete("PodGroup", group_key[0], group_key[1])

    # ---- faults -----------------------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        api = self.h.api
        extender = lambda r: r.user_agent.startswith("kube-extender")  # noqa: E731
        rule: Any = None
        if kind == "binding-500":
            rule = api.fail_next("POST", BINDING, 500)
        elif kind == "binding-409":
            rule = api.fail_next("POST", BINDING, 409, reason="Conflict")
        elif kind == "binding-reply-lost":
            rule = api.lose_reply_next("POST", BINDING)
        elif kind == "binding-504-after-commit":
            rule = api.lose_reply_next("POST", BINDING, 504)
        elif kind == "binding-disconnect":
            rule = api.disconnect_next("POST", BINDING)
        elif kind == "pod-patch-500":
            rule = api.fail_next("PATCH", POD, 500)
        elif kind == "pod-patch-409":
            rule = api.fail_next("PATCH", POD, 409, reason="Conflict")
        elif kind == "eviction-500":
            rule = api.fail_next("POST", r"/pods/[^/]+/eviction$", 500)
        elif kind == "lease-500":
            rule = api.fail_next("PUT", r"/leases/", 500)
        elif kind == "list-500":
            rule = api.fail_next("GET", r"/pods$", 500, predicate=lambda r: not r.watch and extender(r))
        elif kind == "watch-drop":
            api.drop_watches()
        elif kind == "watch-abort":
            api.drop_watches(abort=True)
        elif kind == "compaction-410":
            api.compact()
            api.drop_watches()  # they come back from their last resourceVersion: 410, relist
        elif kind == "latency":
            rule = api.add_latency(None, r"^/api", self.rng.uniform(0.1, 0.5), count=30)
        elif kind == "lease-partition":  # the leader cannot renew for a while: it is deposed, not dead
            holder = ((api.get("Lease", "kube-system", "kube-extender") or {}).get("spec") or {}).get("holderIdentity")
            if holder:
                cut = api.fail_next("PUT", r"/leases/", 500, count=None, predicate=functools.partial(_renewal_by, holder))
                self.h.after(3.0, cut.remove, "heal the lease partition")
                self.faults[kind] += 1
            return
        if rule is None:
            self.faults[kind] += 1
        else:
            self.rules.append((kind, rule))
            if kind in LAPSING:
                self.h.after(FAULT_WINDOW, rule.remove, f"{kind} lapses")

    def faults_hit(self) -> Counter[str]:
        out = Counter(self.faults)
        for kind, rule in self.rules:
            if rule.hits:
                out[kind] += 1
        return out

    def chaos(self) -> None:
        """The fault stream and the replica kills and hand-overs, on their own thread."""
        spec = self.spec
        kinds, weights = list(FAULTS), list(FAULTS.values())
        now = time.monotonic()
        next_fault = now + self.rng.expovariate(spec.fault_rate) if spec.fault_rate > 0 else math.inf
        next_kill = now + spec.kill_every if spec.kill_every > 0 else math.inf
        next_handover = now + spec.handover_every if spec.handover_every > 0 else math.inf
        while True:
            due = min(next_fault, next_kill, next_handover)
            if self._stop.wait(None if math.isinf(due) else max(0.0, due - time.monotonic())):
                break
            now = time.monotonic()
            try:
                if now >= next_fault:
                    self.inject(self.rng.choices(kinds, weights)[0])
                    next_fault = now + self.rng.expovariate(spec.fault_rate)
                if now >= next_kill:
                    self.kill_mid_bind()
                    next_kill = time.monotonic() + spec.kill_every
                if now >= next_handover:
                    self.handover()
                    next_handover = time.monotonic() + spec.handover_every
            except Exception as exc:  # noqa: BLE001 - reported with the actions' errors
                self.errors.append(f"chaos: {type(exc).__name__}: {exc}")

    def _serving(self) -> int | None:
        leader = self.h.leader()
        return self.h.replicas.index(leader) if leader is not None else None

    def kill_mid_bind(self) -> None:
        """SIGKILL the serving replica while one of its Bindings is held at the API server (it
        is stored after the death), then restart it."""
        index = self._serving()
        if index is None:
            return
        held = self.h.api.add_latency("POST", BINDING, 0.4, count=1,
                                      predicate=lambda r: r.user_agent.startswith("kube-extender"))
        deadline = time.monotonic() + 5.0
        while held.hits == 0 and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.005)
        self.h.kill_extender(index)
        self.kills += 1
        self.kills_mid_bind += held.hits > 0
        held.remove()
        if not self._stop.wait(self.spec.restart_after):
            self.h.restart_extender(index)
            self.restarts += 1

    def handover(self) -> None:
        """Stop the serving replica cleanly (it releases its lease: the other takes over at once)
        and start it again."""
        index = self._serving()
        if index is None or len(self.h.replicas) < 2:
            return
        self.h.replicas[index].stop()
        self.handovers += 1
        if not self._stop.wait(1.0):
            self.h.restart_extender(index)
            self.restarts += 1

    def watch_leader(self) -> None:
        """Count changes of the replica serving kube-scheduler's calls."""
        last = None
        while not self._stop.wait(0.1):
            assert self.h.service is not None
            endpoints = self.h.service.endpoints()
            if endpoints and endpoints[0] != last:
                if last is not None:
                    self.failovers += 1
                last = endpoints[0]

    def stop(self) -> None:
        self._stop.set()

    def disturbances(self) -> int:
        """Faults that hit so far, and kills and hand-overs: what may starve a pod for a while."""
        return sum(self.faults_hit().values()) + self.kills + self.handovers

    def resolved(self) -> int:
        """Feasible pods resolved so far (bound and run, preempted or deleted)."""
        return sum(1 for life in self.h.lives if life.key in self.feasible and life.finished_at is not None)


def _renewal_by(holder: str, request: Any) -> bool:
    body = request.body
    return isinstance(body, dict) and (body.get("spec") or {}).get("holderIdentity") == holder



def run_soak(spec: SoakSpec, progress: Callable[[str], None] | None = None) -> SoakResult:
    """Run ``spec`` (see the module docstring); ``progress(line)`` about every 10 seconds."""
    jobs = build_workload(spec)
    delay_rng = random.Random(spec.seed + 1)

    def drawn(base: float) -> Callable[[], float]:
        return lambda: base + delay_rng.uniform(0.0, spec.jitter)

    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                     for ns in NAMESPACES]
    objects += [builders.priority_class(name, value) for name, value in PRIORITIES.items()]
    objects += nodes(spec)
    objects += elastic_quotas(spec)
    with Harness(objects=objects, extender=EXTENDER_CONFIG, replicas=spec.replicas, processes=spec.processes,
                 seed=spec.seed, scheduler_delay=drawn(spec.scheduler_delay),
                 extender_delay=drawn(spec.extender_delay),
                 scheduler={"pod_max_backoff_seconds": POD_MAX_BACKOFF_SECONDS}) as h:
        assert h.recorder is not None and h.scheduler is not None
        soak = _Soak(spec, h, jobs)
        h.recorder.on_bound.append(soak.on_bound)
        h.api.on_commit(soak.on_commit)
        start = h.now()
        for job in jobs:
            h.at(start + job.at, functools.partial(soak.create, job), f"create {job.kind}")
        last_arrival = start + max(job.at for job in jobs)
        threads = [threading.Thread(target=soak.chaos, name="soak-chaos", daemon=True),
                   threading.Thread(target=soak.watch_leader, name="soak-leader", daemon=True)]
        for thread in threads:
            thread.start()
        reason = "timeout"
        last_change, last_resolved, next_report = h.now(), -1, h.now() + 10.0
        disturbed = 0  # disturbances() at the last progress
        try:
            while h.now() - start < spec.timeout:
                resolved = soak.resolved()
                now = h.now()
                if resolved != last_resolved:
                    last_change, last_resolved, disturbed = now, resolved, soak.disturbances()
                if resolved == len(soak.feasible):
                    reason = "all resolved"
                    break
                if now > last_arrival and now - last_change > spec.stall_timeout:
                    reason = "stalled" if soak.disturbances() > disturbed else "stalled without a fault"
                    break
                if progress is not None and now >= next_report:
                    next_report = now + 10.0
                    lives = h.lives
                    bound = sum(1 for life in lives if life.bound_at is not None)
                    progress(f"{now - start:6.0f}s: {len(lives)} created, {bound} bound, {resolved}/"
                             f"{len(soak.feasible)} feasible resolved, faults {sum(soak.faults_hit().values())}, "
                             f"kills {soak.kills}, failovers {soak.failovers}, "
                             f"violations {len(h.violations) + len(h.leaks) + len(soak.gang_violations)}")
                time.sleep(0.2)
        finally:
            soak.stop()
            for thread in threads:
                thread.join(timeout=30)
        duration = h.now() - start
        h.api.clear_faults()
        h.set_delays(scheduler=spec.scheduler_delay, extender=spec.extender_delay)  # clear_faults dropped them
        for index, replica in enumerate(h.replicas):
            if not replica.ready():
                h.restart_extender(index)
        h.wait_until(lambda: h.leader() is not None, 30.0)
        if reason == "stalled" and h.wait_until(lambda: soak.resolved() == len(soak.feasible), SETTLE_SECONDS):
            reason += ", resolved once the faults stopped"
        time.sleep(2.0)  # events recorded by either side reach the API server
        with soak._lock:
            soak.quota.finish()
        return _result(spec, h, soak, reason, duration)


def _result(spec: SoakSpec, h: Harness, soak: _Soak, reason: str, duration: float) -> SoakResult:
    assert h.scheduler is not None and h.recorder is not None
    lives = {life.key: life for life in h.lives}
    outcomes: Counter[tuple[str, str]] = Counter()
    for key, kind in soak.kind.items():
        life = lives.get(key)
        if life is None:
            outcome = "not created"
        elif key in soak.preempted:
            outcome = "preempted" if life.bound_at is not None else "preempted while binding"
        elif key in soak.cancelled:
            outcome = "cancelled"
        elif life.bound_at is not None:
            outcome = "bound"
        elif life.finished_at is not None:
            outcome = "deleted with its group"
        else:
            outcome = "pending"
        outcomes[(kind, outcome)] += 1
    violations: dict[str, list[str]] = {kind: [] for kind in VIOLATION_KINDS}
    violations["capacity"] = [f"{v.time:.2f}s {v.node}: {v.resource} {v.used} > {v.allocatable} ({', '.join(v.pods)})"
                              for v in h.violations]
    violations["leak"] = [f"{leak.time:.2f}s {leak.pod}: {', '.join(leak.annotations)} while not bound"
                          for leak in h.leaks]
    pods = h.api.list("Pod")
    pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    events = h.api.list("events.events.k8s.io")
    violations["unexplained"] = _unexplained(events, pending)
    violations["preemption"] = _preemptions(events, h.lives)
    quota_evictions = len({str((e.get("regarding") or {}).get("uid")) for e in events
                           if e.get("reason") == "Preempted" and _RECLAIMED in str(e.get("note") or "")})
    reclaim_bind = sorted(life.bound_at - life.created for life in h.lives
                          if soak.kind.get(life.key) == "reclaim" and life.bound_at is not None)
    violations["quota"] = list(soak.quota.violations)
    violations["leak"] += _fits_in_free(h, pending, soak)
    violations["stuck"] = [f"{key}: {soak.kind[key]}, Pending since {lives[key].created:.1f}s"
                           for key in sorted(soak.feasible) if key in lives and lives[key].finished_at is None]
    if reason == "timeout":
        violations["stuck"].insert(0, f"the run timed out after {duration:.0f}s")
    groups: Counter[str] = Counter()
    partial: list[float] = []
    violations["gang"] = list(soak.gang_violations)
    bound_now = {pod_key(p) for p in pods if (p.get("spec") or {}).get("nodeName")}
    for (ns, name), group in soak.groups.items():
        live_bound = [k for k in group.members if k in bound_now]
        if not group.torn_down and 0 < len(live_bound) < group.min_member:
            violations["gang"].append(f"{ns}/{name}: {len(live_bound)} of minMember {group.min_member} bound at the end")
        if group.first_bound is not None and group.complete_at is None and not any(
                k in soak.preempted or k in soak.cancelled for k in group.members):
            violations["gang"].append(f"{ns}/{name}: started ({len(group.bound)} bound) but never reached "
                                      f"minMember {group.min_member}")
        if not group.feasible:
            groups["infeasible"] += 1
        elif group.complete_at is not None:
            groups["complete"] += 1
            assert group.first_bound is not None
            partial.append(group.complete_at - group.first_bound)
        elif group.first_bound is None:
            groups["never started"] += 1
        else:
            groups["torn down before complete"] += 1
    requests: Counter[str] = Counter()
    for (agent, _, _), n in h.api.request_counts().items():
        requests[agent.split("/", 1)[0] or "harness"] += n
    errors = [f"{label}: {type(exc).__name__}: {exc}" for label, exc in h.action_errors] + soak.errors
    return SoakResult(spec, reason, duration, outcomes, soak.faults_hit(), soak.kills, soak.kills_mid_bind,
                      soak.handovers, soak.restarts, soak.failovers, violations, groups, sorted(partial),
                      sorted(soak.quota.stretches), soak.quota.longest, quota_evictions, reclaim_bind,
                      dict(soak.quota.borrowed_peak),
                      len(h.scheduler.cycles), h.scheduler.bind_failures, dict(requests), errors)


def _unexplained(events: list[dict[str, Any]], pending: list[dict[str, Any]]) -> list[str]:
    """Pending pods with neither a PodScheduled=False condition (other than the API server's
    SchedulingGated) nor an Event from kube-scheduler or the extender."""
    explained: set[str] = set()
    for event in events:
        controller = str(event.get("reportingController") or "")
        if controller.startswith(("kube-scheduler", "kube-extender")) and event.get("note"):
            explained.add(str((event.get("regarding") or {}).get("uid") or ""))
    out = []
    for pod in pending:
        meta = pod["metadata"]
        conditions = (pod.get("status") or {}).get("conditions") or []
        said = any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason")
                   and c.get("reason") != "SchedulingGated" for c in conditions)
        if not said and meta.get("uid") not in explained:
            gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or ()]
            out.append(f"{meta['namespace']}/{meta['name']}: Pending without a reason (gates {gates})")
    return out


_RECLAIMED = "reclaims its guaranteed quota"
"""In the note of the extender's Preempted Event on a victim evicted to reclaim lent quota."""


def _preemptions(events: list[dict[str, Any]], lives: list[PodLife]) -> list[str]:
    """Preempted Events whose victim's priority is not below its preemptor's, unless the
    extender evicted it to reclaim lent quota for a pod of another namespace."""
    priority = {life.uid: (life.key, life.priority) for life in lives}
    out = []
    for event in events:
        if event.get("reason") != "Preempted":
            continue
        victim = priority.get(str((event.get("regarding") or {}).get("uid")))
        by = str((event.get("related") or {}).get("uid") or "")
        if not by:  # kube-scheduler's: "Preempted by pod <uid> on node <node>"
            words = str(event.get("note") or "").split()
            by = words[3] if len(words) > 3 and words[:3] == ["Preempted", "by", "pod"] else ""
        preemptor = priority.get(by)
        if victim is None or preemptor is None:
            out.append(f"a Preempted Event names pods the API server never had: {event.get('note')}")
        elif victim[1] >= preemptor[1] and not (
                _RECLAIMED in str(event.get("note") or "")
                and victim[0].split("/")[0] != preemptor[0].split("/")[0]):
            out.append(f"{victim[0]} (priority {victim[1]}) preempted by {preemptor[0]} (priority {preemptor[1]})")
    return out


def _fits_in_free(h: Harness, pending: list[dict[str, Any]], soak: _Soak) -> list[str]:
    """Feasible single pods Pending at the end that the free devices of some node (by the API
    server's objects) would hold: capacity that nobody visible holds."""
    assert h.recorder is not None and h.recorder.devices is not None
    out = []
    for pod in pending:
        key = pod_key(pod)
        if key in soak.feasible and key not in soak.group_of and h.recorder.devices.fits_somewhere(pod):
            out.append(f"{key}: Pending at the end while a node's devices have room for it")
    return out


__all__ = ["FAULTS", "VIOLATION_KINDS", "SoakResult", "SoakSpec", "run_soak"]
