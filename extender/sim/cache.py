"""The emulated scheduler's cache: nodes with the pods accounted on them, assumed pods included.

Like kube-scheduler's cache and its snapshots: pods bound in the
cluster are added by the watch; a pod chosen by a scheduling cycle is **assumed** on its node at
once, so the next cycle sees the capacity as taken while the binding cycle runs; the watch then
confirms it (the assumed entry becomes a normal one), or a failed binding cycle **forgets** it.
Assumed pods never expire (``durationToExpireAssumedPod = 0`` in 1.29-1.34, §5.2).

Accounting covers every resource (cpu, memory, pods count, extended resources) in milli-units
from ``extender.framework.resources``. A :class:`NodeState` is immutable: every change stores a
new one, so :meth:`SchedulerCache.snapshot` is a cheap shallow copy taken once per cycle.
The node order of a snapshot interleaves zones like kube-scheduler's ``nodeTree``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from extender.framework.resources import pod_requests, resource_list

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
DEFAULT_MILLI_CPU_REQUEST = 100  # 0.1 core, kube-scheduler's non-zero default for scoring
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024 * 1000  # 200 MB, in milli-units
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
_EMPTY: Mapping[str, int] = MappingProxyType({})


def pod_uid(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")


def pod_key_of(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def parse_time(value: Any) -> float | None:
    """RFC 3339 timestamp -> epoch seconds (None when absent or unparsable)."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _nonzero(raw: Mapping[str, Any]) -> tuple[int, int]:
    """``GetNonzeroRequests`` per container: cpu 100m and memory 200MB when not requested."""
    cpu = mem = 0
    spec = raw.get("spec") or {}
    for c in spec.get("containers") or ():
        res = c.get("resources") or {}
        req = {**resource_list(res.get("limits"), ("cpu", "memory")), **resource_list(res.get("requests"), ("cpu", "memory"))}
        cpu += req.get("cpu") or DEFAULT_MILLI_CPU_REQUEST
        mem += req.get("memory") or DEFAULT_MEMORY_REQUEST
    return cpu, mem


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A pod as the emulated scheduler accounts it (requests of every resource, in milli-units)."""

    uid: str
    namespace: str
    name: str
    priority: int
    preemption_policy: str
    requests: Mapping[str, int]
    nonzero_cpu: int
    nonzero_memory: int
    start_time: float | None
    node_name: str
    nominated_node_name: str
    deleting: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.raw.get("metadata") or {}).get("labels") or {}

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> PodRecord:
        """Raises ValueError/QuantityError for a malformed pod."""
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        priority = spec.get("priority") or 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError("spec.priority must be an integer")
        cpu, mem = _nonzero(raw)
        return cls(uid=pod_uid(raw), namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name")),
                   priority=priority, preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
                   requests=MappingProxyType(pod_requests(raw)), nonzero_cpu=cpu, nonzero_memory=mem,
                   start_time=parse_time(status.get("startTime")), node_name=str(spec.get("nodeName") or ""),
                   nominated_node_name=str(status.get("nominatedNodeName") or ""),
                   deleting=bool(meta.get("deletionTimestamp")), raw=raw)

    def on(self, node: str) -> PodRecord:
        return replace(self, node_name=node)


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node and what is accounted on it. ``requested`` sums the pods' requests;
    ``nonzero`` sums their non-zero cpu/memory (for LeastAllocated scoring)."""

    name: str
    raw: Mapping[str, Any] = field(repr=False)
    allocatable: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    requested: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    pods: Mapping[str, PodRecord] = field(default_factory=lambda: MappingProxyType({}))
    assumed: frozenset[str] = frozenset()

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> NodeState:
        status = raw.get("status") or {}
        alloc = resource_list(status.get("allocatable") or status.get("capacity") or {})
        return cls(str((raw.get("metadata") or {}).get("name")), raw, MappingProxyType(alloc))

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.raw.get("metadata") or {}).get("labels") or {}

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.raw.get("spec") or {}

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def with_node(self, raw: Mapping[str, Any]) -> NodeState:
        fresh = NodeState.of(raw)
        return replace(self, raw=raw, allocatable=fresh.allocatable)

    def with_pod(self, pod: PodRecord, assumed: bool = False) -> NodeState:
        base = self.without_pod(pod.uid) if pod.uid in self.pods else self
        requested = dict(base.requested)
        for k, v in pod.requests.items():
            requested[k] = requested.get(k, 0) + v
        pods = dict(base.pods)
        pods[pod.uid] = pod.on(self.name)
        marks = base.assumed | {pod.uid} if assumed else base.assumed - {pod.uid}
        return replace(base, requested=MappingProxyType(requested), pods=MappingProxyType(pods), assumed=marks,
                       nonzero_cpu=base.nonzero_cpu + pod.nonzero_cpu, nonzero_memory=base.nonzero_memory + pod.nonzero_memory)

    def without_pod(self, uid: str) -> NodeState:
        pod = self.pods.get(uid)
        if pod is None:
            return self
        requested = dict(self.requested)
        for k, v in pod.requests.items():
            requested[k] = requested.get(k, 0) - v
        pods = dict(self.pods)
        del pods[uid]
        return replace(self, requested=MappingProxyType(requested), pods=MappingProxyType(pods),
                       assumed=self.assumed - {uid}, nonzero_cpu=self.nonzero_cpu - pod.nonzero_cpu,
                       nonzero_memory=self.nonzero_memory - pod.nonzero_memory)


def zone_key(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    region = next((labels[k] for k in REGION_LABELS if k in labels), "")
    zone = next((labels[k] for k in ZONE_LABELS if k in labels), "")
    return f"{region}:\x00:{zone}" if region or zone else ""


def interleave_zones(nodes: Iterable[tuple[str, str]]) -> list[str]:
    """``nodeTree.list()`` over (node name, :func:`zone_key`) pairs: one node of each zone in
    turn, zones in order of first appearance."""
    zones: dict[str, list[str]] = {}
    for name, zone in nodes:
        zones.setdefault(zone, []).append(name)
    out: list[str] = []
    lists = list(zones.values())
    total = sum(map(len, lists))
    i = 0
    while len(out) < total:
        for z in lists:
            if i < len(z):
                out.append(z[i])
        i += 1
    return out


@dataclass(frozen=True)
class Snapshot:
    """The state one scheduling cycle sees (``nodeInfoSnapshot``). ``in_order``: the nodes in
    ``order`` (the cache keeps that list up to date, so a snapshot copies it instead of looking
    up every name); ``changes``: (the serial of the cache's previous snapshot, the rows of
    ``in_order`` whose NodeState changed since it, this snapshot's serial), or None when the
    rows cannot be told (the order changed) - what lets a follower of every snapshot
    (``extender.sim.search``) look at the changed rows only."""

    nodes: Mapping[str, NodeState]
    order: tuple[str, ...]
    generation: int
    in_order: Sequence[NodeState] | None = None
    changes: tuple[int, frozenset[int], int] | None = None

    def get(self, name: str) -> NodeState | None:
        return self.nodes.get(name)

    def ordered(self) -> list[NodeState]:
        """The nodes in ``order`` (a list of the caller's own)."""
        if self.in_order is not None:
            return list(self.in_order)
        return list(map(self.nodes.__getitem__, self.order))

    def pods_on(self, name: str) -> dict[str, Mapping[str, Any]] | None:
        node = self.nodes.get(name)
        return None if node is None else {uid: p.raw for uid, p in node.pods.items()}


class SchedulerCache:
    """Nodes and assigned pods; thread-safe. ``generation`` counts changes."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeState] = {}
        self._pods: dict[str, PodRecord] = {}  # assigned (bound or assumed), by uid
        self._assumed: set[str] = set()
        self._zones: dict[str, str] = {}  # node name -> zone_key, in self._nodes' order
        self._order: tuple[str, ...] | None = ()
        self._in_order: list[NodeState] = []  # the nodes in _order (while it is not None)
        self._rows: dict[str, int] = {}  # node name -> its index in _order
        self._changed: set[int] | None = set()  # rows changed since the last snapshot (None: unknown)
        self._serial = 0  # snapshots taken
        self.generation = 0

    # ---- nodes ------------------------------------------------------------------------------------

    def upsert_node(self, raw: Mapping[str, Any]) -> bool:
        """Returns True when the node is new."""
        name = str((raw.get("metadata") or {}).get("name"))
        zone = zone_key(raw)
        with self._lock:
            self.generation += 1
            existing = self._nodes.get(name)
            if existing is not None:
                self._put(name, existing.with_node(raw))
                if self._zones[name] != zone:
                    self._zones[name] = zone
                    self._order = None
                return False
            state = NodeState.of(raw)
            for pod in self._pods.values():
                if pod.node_name == name:
                    state = state.with_pod(pod, pod.uid in self._assumed)
            self._nodes[name] = state
            self._zones[name] = zone
            self._order = None
            return True

    def remove_node(self, name: str) -> None:
        with self._lock:
            if self._nodes.pop(name, None) is not None:
                del self._zones[name]
                self.generation += 1
                self._order = None

    def _ordered_names(self) -> tuple[str, ...]:
        """The node order (lock held), interleaved again only after the nodes or their zones
        changed: a cluster's nodes arrive one by one, and interleaving after each was quadratic."""
        if self._order is None:
            self._order = tuple(interleave_zones((name, self._zones[name]) for name in self._nodes))
            self._in_order = list(map(self._nodes.__getitem__, self._order))
            self._rows = {name: row for row, name in enumerate(self._order)}
            self._changed = None
        return self._order

    def _put(self, name: str, state: NodeState) -> None:
        """Store a known node's new state (lock held), in the ordered list too while the order
        stands (a new order is built from ``_nodes``)."""
        self._nodes[name] = state
        if self._order is not None:
            row = self._rows[name]
            self._in_order[row] = state
            if self._changed is not None:
                self._changed.add(row)

    # ---- pods -------------------------------------------------------------------------------------

    def _place(self, pod: PodRecord, assumed: bool) -> None:
        old = self._pods.get(pod.uid)
        if old is not None and old.node_name in self._nodes:
            self._put(old.node_name, self._nodes[old.node_name].without_pod(pod.uid))
        self._pods[pod.uid] = pod
        if pod.node_name in self._nodes:
            self._put(pod.node_name, self._nodes[pod.node_name].with_pod(pod, assumed))
        self.generation += 1

    def add_assigned(self, pod: PodRecord) -> None:
        """A pod the cluster reports bound (confirms an assumed pod)."""
        with self._lock:
            self._assumed.discard(pod.uid)
            self._place(pod, False)

    def remove(self, uid: str) -> PodRecord | None:
        with self._lock:
            pod = self._pods.pop(uid, None)
            self._assumed.discard(uid)
            if pod is not None:
                if pod.node_name in self._nodes:
                    self._put(pod.node_name, self._nodes[pod.node_name].without_pod(uid))
                self.generation += 1
            return pod

    def assume(self, pod: PodRecord, node: str) -> None:
        with self._lock:
            self._assumed.add(pod.uid)
            self._place(pod.on(node), True)

    def forget(self, uid: str) -> bool:
        """Drop an assumed pod that the cluster never confirmed (failed binding cycle); whether
        it did. Like ``ForgetPod``, a pod the watch already confirmed is not assumed and stays:
        nothing is forgotten (False), and so is a pod no longer in the cache."""
        with self._lock:
            if uid not in self._assumed:
                return False
            self.remove(uid)
            return True

    def node(self, name: str) -> NodeState | None:
        """The node's current state (with the pods accounted on it), or None."""
        with self._lock:
            return self._nodes.get(name)

    def is_assumed(self, uid: str) -> bool:
        with self._lock:
            return uid in self._assumed

    def assigned(self, uid: str) -> PodRecord | None:
        with self._lock:
            return self._pods.get(uid)

    def snapshot(self) -> Snapshot:
        with self._lock:
            order = self._ordered_names()
            self._serial += 1
            changes = None if self._changed is None else (self._serial - 1, frozenset(self._changed), self._serial)
            self._changed = set()
            return Snapshot(dict(self._nodes), order, self.generation, list(self._in_order), changes)

    def nodes(self) -> list[NodeState]:
        with self._lock:
            return [self._nodes[n] for n in self._ordered_names()]
