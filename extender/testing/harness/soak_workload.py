"""The soak's cluster and workload (:mod:`extender.testing.harness.soak` runs them).

**Deployment.** One kube-scheduler profile and one extender profile with every plugin, as a GPU
cluster runs it: whole GPUs (``example.com/gpu``, advertised by the nodes and counted by
kube-scheduler too, ``ignoredByScheduler: false``) and shares of one GPU's memory and compute
(``example.com/gpu-memory``/``-compute``, counted by the extender alone) are the same physical
devices, so only one profile can account them: DeviceShare (per device, instead of
NodeResources), Gang and CapacityQuota together (:data:`EXTENDER_CONFIG`); CapacityQuota's
PostFilter preempts (by priority, and to reclaim lent quota) in place of ManagedPreemption, which
knows no quotas. Two profiles by
schedulerName would each count the devices their own way and could give one device twice.
Two replicas with leader election, as ``kube-extender serve --cluster kube`` processes unless
``processes=False``.

**Quotas** (:func:`quotas`): an ElasticQuota per namespace, asymmetric: ``ml-a`` is guaranteed
3/8 of the healthy whole GPUs and may use 7/8, ``ml-b`` is guaranteed the other 5/8 and may use
3/4 (the guarantees add up to the cluster, so whatever one borrows the other has lent). Shares of
a GPU's memory and compute are not under quota.

**Workload** (seeded, :func:`build_workload`): jobs arrive as a Poisson stream; each is

* ``plain``: one pod asking 1-2 whole GPUs, priority ``batch`` or ``normal``;
* ``share``: one pod asking 2-8 GiB of one GPU's memory (some also a compute share), ``batch``;
* ``gang``: 2-5 pods labelled with a pod group in namespace ``ml-a`` or ``ml-b`` (the same group
  names in both), asking 1 GPU each (some members a share), sized by a PodGroup object or by
  the min-member annotation, sometimes with one member more than ``minMember``, ``normal``;
* ``preemptor``: one pod asking 2-4 whole GPUs or a large share, priority ``urgent``: it
  preempts (kube-scheduler itself for whole GPUs and the extender's preempt verb, CapacityQuota's
  PostFilter for shares and over quota);
* tides (every ``tide_every`` seconds, the namespaces taking turns): ``borrow`` pods, 1-2 whole
  GPUs each and ``batch``, ``tide_borrow`` of the tide namespace's ``max`` in all, running
  ``tide_hold`` seconds, while the other namespace is quiet (every job of the first
  ``tide_delay`` seconds is the tide namespace's) - it borrows much of what the other leaves
  unused; ``tide_delay`` seconds later ``reclaim`` pods of the other namespace (1-2 GPUs,
  ``batch``, half its ``min`` in all, running like plain pods) want their guarantee back. Their
  priority is the borrowers': only reclaim by quota may evict for them (gated ones at admission,
  ungated ones when kube-scheduler passes the extender a node it then rejects - see
  CapacityQuota's README, "Limit"), and the borrowers outlive :data:`RECLAIM_WITHIN
  <extender.testing.harness.soak.RECLAIM_WITHIN>`, so waiting them out would fail the check;
* ``infeasible``: pods no node can ever hold (9 GPUs, a share larger than a device) and gangs
  with fewer members than their ``minMember`` (gated or not), which must stay Pending and say why.

A fifth of the plain, share and gang pods carry the extender's admission gate; a few single pods
are deleted by their "user" shortly after creation, whatever state they are in. A bound pod
runs for a seeded time and is deleted; a gang runs from its ``minMember``-th binding and is then
deleted whole (members, then its PodGroup). A member deleted by someone else (preempted) tears
its group down, as a job controller would.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from extender.framework.pod_group import GROUP_LABEL
from extender.testing.fakeapi import builders
from extender.testing.harness.objects import ADMISSION_GATE, GPU

GPU_MEMORY = "example.com/gpu-memory"
GPU_COMPUTE = "example.com/gpu-compute"
PREFIX = "kube-extender.io/"
MIN_MEMBER = PREFIX + "pod-group-min-member"
INVENTORY = PREFIX + "device-inventory"
NAMESPACES = ("ml-a", "ml-b")
PRIORITIES = {"batch": 0, "normal": 100, "urgent": 1000}

EXTENDER_CONFIG: dict[str, Any] = {
    "managedResources": [{"name": GPU, "ignoredByScheduler": False},
                         {"name": GPU_MEMORY, "ignoredByScheduler": True},
                         {"name": GPU_COMPUTE, "ignoredByScheduler": True}],
    "cache": {"assumedPodTTL": "30s"},
    "profiles": [{
        "schedulerName": "default-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "DeviceShare"}, {"name": "Gang"},
                                               {"name": "CapacityQuota"}],
                                   "disabled": ["NodeResources"]}},
        "pluginConfig": [
            {"name": "DeviceShare", "args": {"memoryResource": GPU_MEMORY, "computeResource": GPU_COMPUTE,
                                             "countResource": GPU}},
            {"name": "Gang", "args": {"permitTimeout": "3s", "backoff": "3s", "reservationTimeout": "10s"}},
        ],
    }],
}
"""The extender's configuration for the soak (see the module docstring)."""


@dataclass(frozen=True)
class SoakSpec:
    pods: int = 10_000
    nodes: int = 16
    devices: int = 8
    """Per node."""
    device_memory: int = 16_384
    """MiB per device."""
    arrival_rate: float = 25.0
    """Pods per second (jobs arrive so that pods average this)."""
    runtime: tuple[float, float] = (1.0, 5.0)
    mix: Mapping[str, float] = field(default_factory=lambda: {"plain": 0.42, "share": 0.3, "gang": 0.2,
                                                              "preemptor": 0.08})
    """Shares of the pods by kind (the infeasible ones come on top: ``infeasible``)."""
    infeasible: int = 0
    """Pods that can never be bound (0: one per 500 pods, at least 6)."""
    gated: float = 0.2
    cancelled: float = 0.02
    fault_rate: float = 1.0
    """Faults injected per second."""
    kill_every: float = 60.0
    restart_after: float = 4.0
    handover_every: float = 90.0
    replicas: int = 2
    processes: bool = True
    scheduler_delay: float = 0.02
    extender_delay: float = 0.05
    jitter: float = 0.05
    tide_every: float = 60.0
    """Seconds between tides (0: none), the first after ``tide_delay``."""
    tide_delay: float = 5.0
    """Seconds from a tide's borrowers to the other namespace's demand."""
    tide_hold: tuple[float, float] = (35.0, 45.0)
    """Runtime of a tide's borrowers."""
    tide_borrow: float = 0.5
    """What a tide's borrowers ask in all, as a share of their namespace's ``max`` (more, with
    the background jobs, fills the cluster for the whole hold and the backlog never drains)."""
    stall_timeout: float = 60.0
    timeout: float = 3600.0
    seed: int = 0

    @property
    def infeasible_pods(self) -> int:
        return self.infeasible or max(6, self.pods // 500)


# ---- the workload ------------------------------------------------------------------------------

@dataclass
class Job:
    """One arrival: a single pod, or a gang's members (and its PodGroup)."""

    kind: str
    at: float
    pods: list[dict[str, Any]]
    runtime: float
    feasible: bool = True
    group: tuple[str, str] | None = None
    min_member: int = 0
    pod_group: dict[str, Any] | None = None
    cancel_after: float | None = None


def _pod(name: str, namespace: str, priority: str, *, gpus: int = 0, memory: int = 0, compute: int = 0,
         gated: bool = False, labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    obj = builders.pod(name, namespace, cpu="100m", priority_class=priority, labels=labels, annotations=annotations,
                       gates=[ADMISSION_GATE] if gated else ())
    asks = {GPU: gpus, GPU_MEMORY: memory, GPU_COMPUTE: compute}
    limits = {name: str(amount) for name, amount in asks.items() if amount}
    resources = obj["spec"]["containers"][0]["resources"]
    resources["requests"].update(limits)
    resources["limits"] = dict(limits)
    return obj


def nodes(spec: SoakSpec) -> list[dict[str, Any]]:
    """``spec.nodes`` nodes of ``spec.devices`` GPUs; every eighth has its last device unhealthy
    (it advertises one GPU less)."""
    out = []
    for i in range(spec.nodes):
        unhealthy = [spec.devices - 1] if i % 8 == 7 and spec.devices > 1 else []
        obj = builders.node(f"gpu-{i:03d}", cpu="256", memory="1Ti")
        inventory = {"devices": spec.devices, "memoryMiB": spec.device_memory, "unhealthy": unhealthy}
        obj["metadata"]["annotations"] = {INVENTORY: json.dumps(inventory, separators=(",", ":"))}
        for key in ("capacity", "allocatable"):
            obj["status"][key][GPU] = str(spec.devices - len(unhealthy))
        out.append(obj)
    return out


def quotas(spec: SoakSpec) -> dict[str, tuple[int, int]]:
    """Namespace -> (min, max) whole GPUs (see the module docstring)."""
    healthy = sum(int(n["status"]["allocatable"][GPU]) for n in nodes(spec))
    a_min = healthy * 3 // 8
    return {"ml-a": (a_min, healthy * 7 // 8), "ml-b": (healthy - a_min, healthy * 3 // 4)}


def elastic_quotas(spec: SoakSpec) -> list[dict[str, Any]]:
    return [builders.elastic_quota(ns, min={GPU: str(lo)}, max={GPU: str(hi)}) for ns, (lo, hi) in quotas(spec).items()]


def build_workload(spec: SoakSpec) -> list[Job]:
    """The seeded jobs, in arrival order (see the module docstring)."""
    rng = random.Random(spec.seed)
    kinds = list(spec.mix)
    weights = [spec.mix[k] / (3.5 if k == "gang" else 1.0) for k in kinds]  # a gang is ~3.5 pods
    jobs: list[Job] = []
    t, count, serial = 1.0, 0, 0
    groups: Counter[str] = Counter()
    limits = quotas(spec)
    next_tide, tides = (spec.tide_delay if spec.tide_every > 0 else math.inf), 0
    quiet_until, borrower = -math.inf, NAMESPACES[0]

    def name(kind: str) -> str:
        nonlocal serial
        serial += 1
        return f"{kind}-{serial:05d}"

    def gpu_pods(kind: str, ns: str, gpus: int) -> list[dict[str, Any]]:
        pods = []
        while gpus > 0:
            ask = min(gpus, rng.choice((1, 2)))
            pods.append(_pod(name(kind), ns, "batch", gpus=ask, gated=rng.random() < spec.gated))
            gpus -= ask
        return pods

    while count < spec.pods:
        if t >= next_tide:
            borrower, lender = NAMESPACES[tides % 2], NAMESPACES[1 - tides % 2]
            tide = [Job("borrow", t, [pod], rng.uniform(*spec.tide_hold))
                    for pod in gpu_pods("borrow", borrower, int(limits[borrower][1] * spec.tide_borrow))]
            tide += [Job("reclaim", t + spec.tide_delay, [pod], rng.uniform(*spec.runtime))
                     for pod in gpu_pods("reclaim", lender, limits[lender][0] // 2)]
            jobs += tide
            count += len(tide)
            next_tide, tides, quiet_until = t + spec.tide_every, tides + 1, t + spec.tide_delay
            continue
        kind = rng.choices(kinds, weights)[0]
        gated = rng.random() < spec.gated
        runtime = rng.uniform(*spec.runtime)
        ns = borrower if t < quiet_until else rng.choice(NAMESPACES)
        if kind == "plain":
            pods = [_pod(name(kind), ns, rng.choice(("batch", "batch", "normal")), gpus=rng.choice((1, 1, 2)),
                         gated=gated)]
        elif kind == "share":
            pods = [_pod(name(kind), ns, "batch", memory=rng.choice((2048, 4096, 4096, 8192)),
                         compute=rng.choice((0, 0, 25, 50)), gated=gated)]
        elif kind == "preemptor":
            if rng.random() < 0.5:
                pods = [_pod(name(kind), ns, "urgent", gpus=rng.choice((2, 3, 4)))]
            else:
                pods = [_pod(name(kind), ns, "urgent", memory=rng.choice((8192, 12288)))]
        else:
            size = rng.choice((2, 3, 4, 4, 5))
            jobs.append(_gang(rng, groups, ns, size, size + (rng.random() < 0.15), gated, runtime))
            count += len(jobs[-1].pods)
            jobs[-1].at = t
            t += len(jobs[-1].pods) / spec.arrival_rate * rng.expovariate(1.0)
            continue
        cancel = rng.uniform(0.1, 2.0) if rng.random() < spec.cancelled else None
        jobs.append(Job(kind, t, pods, runtime, cancel_after=cancel))
        count += 1
        t += rng.expovariate(spec.arrival_rate)
    jobs.extend(_infeasible(rng, spec, groups, t))
    jobs.sort(key=lambda job: job.at)
    return jobs


def _gang(rng: random.Random, groups: Counter[str], ns: str, min_member: int, members: int, gated: bool,
          runtime: float) -> Job:
    groups[ns] += 1
    group = f"group-{groups[ns]:04d}"  # the same names in both namespaces: a group is per namespace
    with_object = rng.random() < 0.5
    annotations = {} if with_object else {MIN_MEMBER: str(min_member)}
    pods = []
    for m in range(members):
        share = rng.random() < 0.2
        pods.append(_pod(f"{group}-{m}", ns, "normal", gpus=0 if share else 1, memory=4096 if share else 0,
                         gated=gated, labels={GROUP_LABEL: group}, annotations=annotations))
    pod_group = None
    if with_object:
        pod_group = builders.podgroup(group, ns, min_member=min_member)
        pod_group["spec"]["scheduleTimeoutSeconds"] = 3
    return Job("gang", 0.0, pods, runtime, group=(ns, group), min_member=min_member, pod_group=pod_group)


def _infeasible(rng: random.Random, spec: SoakSpec, groups: Counter[str], t: float) -> list[Job]:
    """Pods that can never be bound, spread over the run: too large for any node or device, and
    gangs short of a member (gated ones never leave the gate; the others time out in Permit)."""
    jobs: list[Job] = []
    count = 0
    for i in range(spec.infeasible_pods):
        at = rng.uniform(1.0, max(1.0, t))
        ns = rng.choice(NAMESPACES)
        if i % 3 == 2:
            job = _gang(rng, groups, ns, 3, 2, gated=i % 2 == 0, runtime=0.0)
            job.kind, job.at, job.feasible = "infeasible", at, False
            jobs.append(job)
            count += 2
        else:
            gpus, memory = (spec.devices + 1, 0) if i % 3 == 0 else (0, spec.device_memory + 1024)
            jobs.append(Job("infeasible", at, [_pod(f"infeasible-{i:04d}", ns, "batch", gpus=gpus, memory=memory)], 0.0,
                            feasible=False))
            count += 1
        if count >= spec.infeasible_pods:
            break
    return jobs


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"

