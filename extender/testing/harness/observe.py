"""What a harness run observes: pod lives, capacity released, capacity invariant violations.

A :class:`Recorder` is a commit hook of the fake API server (``FakeApiServer.on_commit``): it
sees every write synchronously, in commit order, before any watcher - so what it records is
what the cluster *was* at each instant, not what some client saw later. It also receives the
emulated kube-scheduler's cycle records (``Scheduler.on_cycle``) for the rejections.

Times are seconds since the recorder's ``t0`` (``time.time()`` at the harness's start); the
emulated scheduler's RealClock uses the same clock. Quantities of managed resources are in
milli-units (``extender.framework.resources``: 1 GPU = 1000).

**Capacity invariant.** Per node, the managed requests of the pods bound to it and not in a
terminal phase (pods being deleted still count: their containers still run) never exceed the
node's allocatable. Checked after every committed write that adds usage to a node or changes
its allocatable; each write that leaves a node over is one :class:`Violation`. With ``devices``
(DeviceShare's annotations, :mod:`.devices`) the same holds per device: a resource the devices
account for and the node does not advertise is checked per device only.

**Ledger invariant.** The annotations a bind writes (``ledger_keys``: the allocation record, the
device assignment) come with the Binding, in the same write: a pod without ``spec.nodeName``
that carries one at any instant is one :class:`Leak`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from extender.framework.resources import pod_requests, resource_list
from extender.sim.records import CycleRecord
from extender.testing.harness.devices import DeviceAccounting, DeviceLedger

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass
class Rejection:
    """One failed scheduling attempt of a pod by the emulated kube-scheduler."""

    time: float
    outcome: str
    """``unschedulable`` or ``error``."""
    by_extender: bool
    """The extender filter chain rejected at least one node in this attempt."""
    message: str


@dataclass
class PodLife:
    """One pod (one UID) from creation to deletion, as the API server saw it."""

    key: str
    uid: str
    created: float
    priority: int
    requests: dict[str, int]
    """Managed resources requested (milli-units)."""
    gated: bool = False
    """Created with scheduling gates."""
    ungated_at: float | None = None
    """When its last scheduling gate was removed."""
    bound_at: float | None = None
    node: str = ""
    finished_at: float | None = None
    """When it was deleted or reached a terminal phase."""
    rejections: list[Rejection] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return self.bound_at is None and self.finished_at is None


@dataclass
class Release:
    """Managed capacity freed on a node: a bound pod deleted, or terminal."""

    time: float
    pod: str
    node: str
    freed: dict[str, int]
    """Managed resources freed (milli-units); empty for a pod that held none."""
    how: str
    """``deleted``, ``Succeeded`` or ``Failed``."""


@dataclass
class Violation:
    time: float
    node: str
    resource: str
    """The resource over (``<resource> on device <id>`` for a device), or what is wrong with a
    device assignment."""
    used: int
    allocatable: int
    pods: list[str]
    """The pods accounted on the node at that instant (for a device: those holding it)."""


@dataclass
class Leak:
    """A write that left ledger annotations on a pod that is not bound."""

    time: float
    pod: str
    annotations: list[str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (_meta(obj).get("annotations") or {}) if obj is not None else {}


def _holds(pod: Mapping[str, Any] | None) -> str:
    """The node whose capacity ``pod`` holds ("" when none: unbound or terminal)."""
    if pod is None or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return ""
    return str((pod.get("spec") or {}).get("nodeName") or "")


class Recorder:
    """See the module docstring. ``managed``: the managed resource names (the extender's)."""

    def __init__(self, managed: Iterable[str], t0: float | None = None, *, devices: DeviceAccounting | None = None,
                 ledger_keys: Iterable[str] = ()) -> None:
        self.managed = frozenset(managed)
        self.t0 = time.time() if t0 is None else t0
        self.devices = DeviceLedger(devices) if devices is not None else None
        self._per_device = devices.resources if devices is not None else frozenset()
        self.ledger_keys = tuple(ledger_keys)
        self.leaks: list[Leak] = []
        self._lock = threading.Lock()
        self.lives: list[PodLife] = []
        """Every pod ever created, in creation order."""
        self._by_uid: dict[str, PodLife] = {}
        self._current: dict[str, PodLife] = {}
        self.releases: list[Release] = []
        self.violations: list[Violation] = []
        self._allocatable: dict[str, dict[str, int]] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._on_node: dict[str, dict[str, dict[str, int]]] = {}
        self.on_bound: list[Callable[[PodLife], None]] = []
        """Called (under the API server's store lock: keep it short, do not write) on each binding."""

    def now(self) -> float:
        return time.time() - self.t0

    # ---- the API server's commits ------------------------------------------------------------------

    def commit(self, kind: str, etype: str, obj: Mapping[str, Any], prev: Mapping[str, Any] | None) -> None:
        """``FakeApiServer.on_commit`` hook."""
        if kind == "Node":
            self._node(etype, obj)
        elif kind == "Pod":
            self._pod(etype, obj, None if etype == "ADDED" else prev)

    def _node(self, etype: str, obj: Mapping[str, Any]) -> None:
        name = str(_meta(obj).get("name"))
        with self._lock:
            if etype == "DELETED":
                self._allocatable.pop(name, None)
                return
            alloc = resource_list((obj.get("status") or {}).get("allocatable"), self.managed)
            devices_changed = self.devices is not None and self.devices.set_node(name, obj)
            if alloc != self._allocatable.get(name) or devices_changed:
                self._allocatable[name] = alloc
                self._check(name)

    def _pod(self, etype: str, obj: Mapping[str, Any], prev: Mapping[str, Any] | None) -> None:
        now = self.now()
        uid = str(_meta(obj).get("uid"))
        spec = obj.get("spec") or {}
        with self._lock:
            life = self._by_uid.get(uid)
            if life is None:
                life = PodLife(_key(obj), uid, now, int(spec.get("priority") or 0),
                               pod_requests(obj, self.managed), gated=bool(spec.get("schedulingGates")))
                self.lives.append(life)
                self._by_uid[uid] = life
                self._current[life.key] = life
            if life.gated and life.ungated_at is None and not spec.get("schedulingGates"):
                life.ungated_at = now
            before = _holds(prev)
            after = "" if etype == "DELETED" else _holds(obj)
            if after and not life.node:
                life.node, life.bound_at = after, now
                bound = True
            else:
                bound = False
            if etype == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
                if life.finished_at is None:
                    life.finished_at = now
            if before != after:
                if before:
                    freed = self._on_node.get(before, {}).pop(uid, {})
                    self._add(before, freed, -1)
                    if self.devices is not None:
                        self.devices.release(before, uid)
                    how = "deleted" if etype == "DELETED" else str((obj.get("status") or {}).get("phase"))
                    self.releases.append(Release(now, life.key, before, dict(freed), how))
                if after:
                    self._on_node.setdefault(after, {})[uid] = dict(life.requests)
                    self._add(after, life.requests, 1)
                    if self.devices is not None:
                        self.devices.hold(after, uid, life.key, obj)
                    self._check(after)
            elif after and self.devices is not None and _annotations(obj) != _annotations(prev):
                self.devices.hold(after, uid, life.key, obj)  # a bound pod's assignment changed
                self._check(after)
            if etype != "DELETED" and not spec.get("nodeName") and self.ledger_keys:
                annotations = _annotations(obj)
                leaked = [k for k in self.ledger_keys if k in annotations]
                if leaked:
                    self.leaks.append(Leak(now, life.key, leaked))
            hooks = list(self.on_bound) if bound else []
        for hook in hooks:
            hook(life)

    def _add(self, node: str, requests: Mapping[str, int], sign: int) -> None:
        used = self._used.setdefault(node, {})
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + sign * amount

    def _check(self, node: str) -> None:
        alloc = self._allocatable.get(node, {})
        for name, used in self._used.get(node, {}).items():
            if name in self._per_device and name not in alloc:
                continue  # the node does not advertise it: the devices are checked one by one below
            if used > alloc.get(name, 0):
                keys = sorted(self._key_of(uid) for uid in self._on_node.get(node, {}))
                self.violations.append(Violation(self.now(), node, name, used, alloc.get(name, 0), keys))
        if self.devices is not None:
            for problem in self.devices.problems(node):
                self.violations.append(Violation(self.now(), node, problem.what, problem.used, problem.limit,
                                                 list(problem.pods)))

    def _key_of(self, uid: str) -> str:
        life = self._by_uid.get(uid)
        return life.key if life is not None else uid

    # ---- the emulated scheduler's cycles -----------------------------------------------------------

    def cycle(self, record: CycleRecord) -> None:
        """``Scheduler.on_cycle`` hook: failed attempts become :class:`Rejection` records."""
        if record.outcome not in ("unschedulable", "error"):
            return
        with self._lock:
            life = self._current.get(record.pod)
            if life is not None:
                life.rejections.append(Rejection(record.time - self.t0, record.outcome,
                                                 record.extender_rejected > 0,
                                                 record.message))

    # ---- views -------------------------------------------------------------------------------------

    def pod(self, key: str) -> PodLife | None:
        """The latest pod created under ``key`` (``namespace/name``)."""
        with self._lock:
            return self._current.get(key)

    def free(self) -> dict[str, dict[str, int]]:
        """Per node, managed capacity not held by any bound, non-terminal pod (milli-units)."""
        with self._lock:
            return {node: {name: alloc.get(name, 0) - self._used.get(node, {}).get(name, 0) for name in alloc}
                    for node, alloc in self._allocatable.items()}

    def fits_somewhere(self, requests: Mapping[str, int]) -> bool:
        """Whether some node has ``requests`` free right now."""
        return any(all(free.get(name, 0) >= amount for name, amount in requests.items())
                   for free in self.free().values())
