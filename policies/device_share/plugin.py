"""DeviceShare plugin: adapts ``logic`` to Filter, Score, Reserve/Unreserve, PreBind and the
preempt verb.

Device usage on a node is derived from the pods accounted there, in this order of trust: the
pod's ``<prefix>devices`` annotation (seeing it retires this process's reservation), a
reservation made by this process (Reserve, released by Unreserve; one set per engine, shared by
the DeviceShare of every profile that enables it), the ``devices`` entry of its
allocation ledger annotation, and finally a deterministic placement of its asks (pods bound by
someone else; one that no longer fits is charged where there is most room, never to nothing).
It is memoized per (node, NodeInfo generation, reservation version), so a filter over 500 nodes
does not recompute unchanged nodes.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from typing import Any, Mapping, Sequence

import numpy as np

from extender.framework import ledger
from extender.framework.batch import Batch, Ints, Rejection
from extender.framework.cycle_state import CycleState
from extender.framework.events import CAPACITY_EVENTS, ClusterEvent
from extender.framework.handle import Handle
from extender.framework.interfaces import NodeCapacity, Victim
from extender.framework.node_constraints import node_excluded
from extender.framework.resources import QuantityError, milli
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.framework.registration import PluginSpec
from extender.framework.registration import schema_parser as parser
from policies.device_share import logic
from policies.device_share.args import DeviceShareArgs, DeviceShareArgsSchema
from policies.device_share.rows import EXACT, DeviceRows

Reserved = Mapping[str, tuple[str, tuple[logic.Grant, ...]]]
"""This process's reservations: pod UID -> (node, grants)."""


NAME = "DeviceShare"
log = logging.getLogger(__name__)

NodeDevices = tuple[tuple[logic.Device, ...], logic.Usage, list[logic.Holder]]


class _Reservations:
    """This process's reservations, one set per engine: the DeviceShare of every profile that
    enables it (each its own instance, built with the engine's one handle) records and reads the
    same ones, under the same lock - a device reserved for a pod of one profile is taken for the
    pods of every other. ``reserved`` is replaced, never changed in place (the lock held);
    ``version`` grows with every change; ``tables``: the batch rows of every instance, which a
    change makes again on the nodes it touched."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.reserved: Reserved = {}
        self.version = 0
        self.tables: weakref.WeakSet[DeviceRows] = weakref.WeakSet()


_BY_HANDLE: dict[int, tuple[weakref.ref[Any], _Reservations]] = {}
_BY_HANDLE_LOCK = threading.RLock()  # reentrant: a handle collected inside it drops its entry


def _reservations_of(handle: Handle) -> _Reservations:
    """The reservations of ``handle``'s engine (the same handle object is given to every plugin
    of every profile of one engine): made at its first DeviceShare, dropped with the handle."""
    key = id(handle)
    with _BY_HANDLE_LOCK:
        entry = _BY_HANDLE.get(key)
        if entry is not None and entry[0]() is handle:
            return entry[1]
        shared = _Reservations()

        def forget(ref: weakref.ref[Any]) -> None:
            with _BY_HANDLE_LOCK:
                if key in _BY_HANDLE and _BY_HANDLE[key][0] is ref:
                    del _BY_HANDLE[key]

        _BY_HANDLE[key] = (weakref.ref(handle, forget), shared)
        return shared


class DeviceShare:
    name = NAME

    def __init__(self, args: DeviceShareArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.inventory_key = handle.annotation_prefix + args.inventory_annotation
        self.devices_key = handle.annotation_prefix + "devices"
        self._shared = _reservations_of(handle)
        """This process's reservations by pod UID (``_Reservations``, shared with the other
        profiles' DeviceShare); replaced, never changed in place, so a rejection's Status made
        later reads the reservations its filter read."""
        self._lock = self._shared.lock
        self._memo: dict[str, tuple[tuple[int, int], NodeDevices]] = {}
        self._rows: DeviceRows | None = None
        self._bad_inventory: set[tuple[str, str, str]] = set()

    # ---- reading pods and nodes -------------------------------------------------------------

    def asks_of(self, pod: PodInfo) -> tuple[logic.Ask, ...]:
        """Per-container asks from requests (a limit stands in for a missing request): of the
        containers and of the sidecars (init containers with ``restartPolicy: Always``, which run
        beside them for the pod's life). A plain init container's ask is not placed: it ends
        before the others start."""
        a = self.args
        out = []
        spec = pod.raw.get("spec") or {}
        sidecars = [c for c in spec.get("initContainers") or ()
                    if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
        for c in [*sidecars, *(spec.get("containers") or ())]:
            res = c.get("resources") or {}
            merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            values = [merged.get(r) for r in (a.memory_resource, a.compute_resource, a.count_resource)]
            if all(v is None for v in values):
                continue
            memory, compute, count = (milli(v) // 1000 if v is not None else 0 for v in values)
            if memory or compute or count:
                out.append(logic.Ask(str(c.get("name", "")), memory, compute, count))
        return tuple(out)

    def _asks(self, state: CycleState, pod: PodInfo) -> tuple[logic.Ask, ...]:
        key = f"{NAME}/asks"
        asks = state.get(key)
        if asks is None:
            asks = self.asks_of(pod)
            state.write(key, asks)
        return asks  # type: ignore[no-any-return]

    def inventory(self, node: NodeInfo) -> tuple[logic.Device, ...]:
        """The node's devices: its inventory annotation, else NVIDIA GPU Feature Discovery's
        labels. A malformed source is logged (once per node and text) and ignored."""
        return self._inventory(node)[0]

    def _inventory(self, node: NodeInfo) -> tuple[tuple[logic.Device, ...], str]:
        """(devices, where they came from: ``annotation``, ``gpu-feature-discovery`` or ``""``)."""
        text = node.annotations.get(self.inventory_key)
        if text:
            try:
                return logic.parse_inventory(text), "annotation"
            except logic.InventoryError as exc:
                self._warn_once(node.name, f"annotation {self.inventory_key}", text, exc)
        try:
            devices = logic.inventory_from_labels(node.labels)
        except logic.InventoryError as exc:
            self._warn_once(node.name, "GPU Feature Discovery labels", "", exc)
            return (), ""
        return devices, ("gpu-feature-discovery" if devices else "")

    def _warn_once(self, node: str, source: str, text: str, exc: Exception) -> None:
        key = (node, source, text or str(exc))
        if key not in self._bad_inventory:
            self._bad_inventory.add(key)
            log.warning("ignoring a malformed device inventory", extra={"node": node, "source": source,
                                                                       "error": str(exc)})

    def _grants_of(self, pod: PodInfo, node_name: str, reservations: Reserved,
                   current: bool) -> tuple[logic.Grant, ...] | None:
        """The grants ``pod`` holds on ``node_name``; ``current``: ``reservations`` were the
        current ones when the read began (a reservation the cluster carries now is dropped). A
        malformed ``devices`` annotation is passed over, as if the pod had none."""
        reserved = reservations.get(pod.uid)
        text = pod.annotations.get(self.devices_key)
        if text:
            try:
                doc = json.loads(text)
                if doc.get("node") == node_name:
                    grants = logic.grants_of(doc.get("containers"))
                    if grants is not None:
                        shared = self._shared
                        if reserved is not None and current and pod.uid in shared.reserved:
                            # the cluster now carries what Reserve chose
                            shared.reserved = {u: e for u, e in shared.reserved.items() if u != pod.uid}
                        return grants
            except (ValueError, AttributeError, RecursionError):  # malformed (nested too deep included)
                pass
        if reserved is not None and reserved[0] == node_name:
            return reserved[1]
        alloc = ledger.of_pod(pod.annotations, self.handle.annotation_prefix)
        if alloc is not None and alloc.node == node_name:
            return logic.grants_of(alloc.extra.get("devices"))
        return None

    def node_devices(self, node: NodeInfo, exclude: str = "", reservations: Reserved | None = None) -> NodeDevices:
        """Inventory, usage and holders of ``node``, leaving out pod ``exclude``, with this
        process's ``reservations`` as they were (the current ones when None)."""
        with self._lock:
            current = reservations is None or reservations is self._shared.reserved
            reserved = self._shared.reserved if reservations is None else reservations
            memo_key = (node.generation, self._shared.version)
            cacheable = current and node.generation >= 0 and (not exclude or exclude not in node.pods)
            if cacheable:
                cached = self._memo.get(node.name)
                if cached is not None and cached[0] == memo_key:
                    return cached[1]
            devices = self.inventory(node)
            usage = logic.Usage()
            holders: list[logic.Holder] = []
            unplaced: list[PodInfo] = []
            for uid in sorted(node.pods):
                if uid == exclude:
                    continue
                pod = node.pods[uid]
                grants = self._grants_of(pod, node.name, reserved, current)
                if grants is None:
                    unplaced.append(pod)
                    continue
                usage.add(uid, grants)
                holders.append(logic.Holder(uid, pod.priority, pod.start_time, grants))
            for pod in sorted(unplaced, key=lambda p: (p.creation_timestamp, p.uid)):
                try:
                    asks = self.asks_of(pod)
                except QuantityError:
                    continue
                if not asks:
                    continue
                grants = logic.place(asks, devices, usage, self.args.binpack) or logic.charge(asks, devices, usage)
                usage.add(pod.uid, grants)
                holders.append(logic.Holder(pod.uid, pod.priority, pod.start_time, grants))
            result = (devices, usage, holders)
            if cacheable:
                self._memo[node.name] = (memo_key, result)
            return result

    def node_capacity(self, node: NodeInfo) -> NodeCapacity | None:
        """Per device: memory and compute used of total (a device held whole counts as fully
        used), the pods holding it, the model when GPU Feature Discovery names it; per node, the
        sums over healthy devices, with the count resource as busy devices of healthy ones. None
        for a node without devices."""
        devices, usage, _ = self.node_devices(node)
        if not devices:
            return None
        source = self._inventory(node)[1]
        product = str(node.labels.get(logic.GFD_PRODUCT) or "") if source == "gpu-feature-discovery" else ""
        rows = []
        totals = {"memory": [0, 0], "compute": [0, 0], "count": [0, 0]}
        for d in devices:
            whole = d.id in usage.exclusive
            memory = d.memory if whole else usage.memory.get(d.id, 0)
            compute = d.compute if whole else usage.compute.get(d.id, 0)
            holders = usage.holders.get(d.id, [])
            rows.append({"id": d.id, **({"product": product} if product else {}), "healthy": d.healthy,
                         "exclusive": whole, "memoryMiB": {"used": memory, "total": d.memory},
                         "compute": {"used": compute, "total": d.compute},
                         "pods": sorted(node.pods[u].key if u in node.pods else u for u in holders)})
            if d.healthy:
                for kind, used, total in (("memory", memory, d.memory), ("compute", compute, d.compute),
                                          ("count", int(bool(holders) or whole), 1)):
                    totals[kind][0] += total
                    totals[kind][1] += used
        a = self.args
        names = {"memory": a.memory_resource, "compute": a.compute_resource, "count": a.count_resource}
        return NodeCapacity({names[k]: (t * 1000, u * 1000) for k, (t, u) in totals.items()}, rows, source)

    # ---- extension points -------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return self._filter(state, pod, node, None)

    def _filter(self, state: CycleState, pod: PodInfo, node: NodeInfo, reservations: Reserved | None) -> Status:
        """``filter`` with this process's ``reservations`` as they were (None: as they are)."""
        asks = self._asks(state, pod)
        if not asks:
            return Status()
        devices, usage, _ = self.node_devices(node, exclude=pod.uid, reservations=reservations)
        if not devices:
            code, reason = self._wording(logic.Lack(True, False, ""))
            return Status(code, (reason,), detail=f"no device inventory: neither the {self.inventory_key} "
                                                 f"annotation nor the {logic.GFD_COUNT} label")
        grants = logic.place(asks, devices, usage, self.args.binpack)
        if grants is not None:
            state.write(f"{NAME}/grants/{node.name}", grants)
            return Status()
        return self._misfit(logic.explain_misfit(asks, devices, usage))

    def _misfit(self, misfit: logic.Misfit) -> Status:
        code, reason = self._wording(logic.Lack(False, misfit.could_help, misfit.short_of))
        return Status(code, (reason,), detail=misfit.detail)

    def _wording(self, lack: logic.Lack) -> tuple[Code, str]:
        """The code and reason of a node that does not fit: Unschedulable when evictions could
        make room, naming the resource that is short as pods ask for it - whole devices
        (``countResource``) or a share of one device (``memoryResource``, ``computeResource``);
        UnschedulableAndUnresolvable otherwise. Both the per-node and the batch Filter word
        rejections with it."""
        a = self.args
        if lack.absent:
            return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) had no shareable devices"
        if not lack.could_help:
            return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had too few devices" if lack.short_of == "count"
                                                         else "node(s) had no device large enough")
        if lack.short_of == "count":
            return Code.UNSCHEDULABLE, f"Insufficient {a.count_resource}"
        resource = a.compute_resource if lack.short_of == "compute" else a.memory_resource
        return Code.UNSCHEDULABLE, f"Insufficient {resource} on any single device"

    def filter_batch(self, state: CycleState, pod: PodInfo, batch: Batch) -> list[Rejection] | None:
        """``filter`` over a batch (``extender.framework.batch``) for a pod whose devices are one
        container's ask - whole devices or one share: each candidate's devices summed up in a row
        (``DeviceRows``, made again only for nodes changed since), the fit and the kind of misfit
        decided in array operations, each kind one group worded as ``filter`` words it, and per
        node ``filter``'s own Status, made only when asked for. None (per node) for several
        asks, a candidate holding capacity against the pod (not in a NodeInfo's pods), or no
        NodeInfos offered."""
        asks = self._asks(state, pod)
        if not asks:
            return []
        if len(asks) != 1 or not _exact(asks[0]) or \
                (batch.held and np.isin(batch.rows, batch.columns.rows_of(list(batch.held))).any()):
            return None
        columns, rows, node = batch.columns, batch.rows, batch.nodes
        with self._lock:
            table = self._table(pod, batch)
            if table is None:
                return None
            found = logic.lacks(asks[0], table.listed[rows], table.healthy[rows], table.idle[rows],
                                table.free_memory[rows], table.free_compute[rows], table.memory[rows],
                                table.compute[rows])
            reservations = self._shared.reserved  # what the rows were made with (replaced on change)
        assert node is not None  # _table checked

        def status_at(k: int) -> Status:
            info = node(columns.names_at(rows[k:k + 1])[0])
            assert info is not None  # its row was made from it
            st = self._filter(CycleState(), pod, info, reservations)
            return st if st.plugin == NAME else st.with_plugin(NAME)

        out = []
        for lack, mask in found:
            positions = np.flatnonzero(mask)
            if len(positions):
                code, reason = self._wording(lack)
                out.append(Rejection(positions, code, reason, status_at))
        return out

    def score_batch_normalized(self, state: CycleState, pod: PodInfo, batch: Batch) -> Ints | None:
        """``score`` then ``normalize_score`` over a batch, for the pods ``filter_batch`` takes:
        the device score of where ``place`` would put the ask, from the same rows, scaled so the
        best candidate scores 100. None (per node) otherwise."""
        asks = self._asks(state, pod)
        if not asks:
            return np.zeros(len(batch), np.int64)
        if len(asks) != 1 or not _exact(asks[0]):
            return None
        rows = batch.rows
        with self._lock:
            table = self._table(pod, batch)
            if table is None:
                return None
            fits = logic.fitting(asks[0], table.idle[rows], table.free_memory[rows], table.free_compute[rows])
            scores: Ints = logic.scores(asks[0], fits, table.used[rows], table.total[rows], table.idle_memory[rows],
                                        self.args.binpack)
        best = int(scores.max(initial=0))
        return scores * 100 // best if best > 0 else scores

    def _table(self, pod: PodInfo, batch: Batch) -> DeviceRows | None:
        """The batch's rows made current (lock held); None when they cannot stand for what the
        per-node path reads: no NodeInfos offered, a row whose node is not in the snapshot, or
        the pod itself holding devices on a candidate (per node, its own use is left out)."""
        columns, rows = batch.columns, batch.rows
        if batch.nodes is None:
            return None
        table = self._rows
        if table is None or table.rowspace is not columns.rowspace:
            table = self._rows = DeviceRows(columns.rowspace)
            self._shared.tables.add(table)
        if not table.refresh(rows, columns.generations(rows), columns.names_at, batch.nodes,
                             lambda info: self.node_devices(info)[:2]):
            return None
        row = table.holder_row(pod.uid)
        if row is not None and bool((rows == row).any()):
            return None
        return table

    def events_to_register(self) -> tuple[ClusterEvent, ...]:
        """What can make room for a pod this plugin rejected: capacity freed, or a node added or
        changed (allocatable, labels or annotations)."""
        return CAPACITY_EVENTS

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Admission: only once some node has devices where every container's ask fits now -
        counting what is held against the pod there, as Filter does (nominations, pod group
        reservations, pods admitted and not bound yet)."""
        asks = self.asks_of(pod)
        if not asks:
            return Status()
        held = self.handle.held_nodes()
        for node in self.handle.snapshot():
            if node_excluded(pod.raw, node.node, node.name):
                continue  # a node kube-scheduler would never send it to (taints, affinity, cordon)
            if node.name in held:
                node = self.handle.with_held(node, pod)
            devices, usage, _ = self.node_devices(node, exclude=pod.uid)
            if devices and logic.place(asks, devices, usage, self.args.binpack) is not None:
                return Status()
        return Status.unschedulable("no node has a device with room for this pod")

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        asks = self._asks(state, pod)
        if not asks:
            return 0
        devices, usage, _ = self.node_devices(node, exclude=pod.uid)
        grants = state.get(f"{NAME}/grants/{node.name}") or logic.place(asks, devices, usage, self.args.binpack)
        if not grants:
            return 0
        return logic.device_score(grants, devices, usage, self.args.binpack)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Scale so the best node scores 100: small shares of big nodes would otherwise all round
        to the same wire score, and binpacking across nodes would be lost to in-tree tie-breaks."""
        best = max(scores.values(), default=0)
        if best > 0:
            for name, value in scores.items():
                scores[name] = value * 100 // best

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        asks = self._asks(state, pod)
        if not asks:
            return Status()
        while True:
            seen = self._shared.version
            node = self.handle.snapshot().get(node_name)
            if node is None:
                return Status.unschedulable(f"node {node_name} disappeared while binding")
            if node_name in self.handle.held_nodes():  # capacity held for others, as Filter counts it
                node = self.handle.with_held(node, pod)
            with self._lock:  # place and record atomically: concurrent binds never pick the same room
                if self._shared.version != seen:
                    continue  # a grant was recorded since the snapshot, maybe for a pod it lacks: look again
                devices, usage, _ = self.node_devices(node, exclude=pod.uid)
                grants = logic.place(asks, devices, usage, self.args.binpack)
                if grants is None:
                    misfit = logic.explain_misfit(asks, devices, usage)  # taken since Filter: evictions may help
                    return Status.unschedulable(self._wording(logic.Lack(False, True, misfit.short_of))[1],
                                                detail=misfit.detail)
                self._set_reserved(pod.uid, (node_name, grants))
            state.write(f"{NAME}/reserved", grants)
            return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        with self._lock:
            self._set_reserved(pod.uid, None)

    def _set_reserved(self, uid: str, entry: tuple[str, tuple[logic.Grant, ...]] | None) -> None:
        """Record (None: drop) this process's reservation for pod ``uid`` (lock held). Usage read
        from reservations changes on the nodes of the old and the new one: the memo of every node
        (of every profile's instance: the version they are keyed by moves) and the batch rows of
        those nodes (of every instance) are made again."""
        shared = self._shared
        reserved = dict(shared.reserved)
        old = reserved.pop(uid, None)
        if entry is not None:
            reserved[uid] = entry
        elif old is None:
            return
        shared.reserved = reserved
        shared.version += 1
        for table in list(shared.tables):
            for node in {e[0] for e in (old, entry) if e is not None}:
                table.invalidate(node)

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        grants = state.get(f"{NAME}/reserved")
        if not grants:
            return Status()
        containers = {g.container: g.as_dict() for g in grants}
        state.pod_annotations[self.devices_key] = json.dumps({"node": node_name, "containers": containers},
                                                             separators=(",", ":"))
        state.allocation_extra["devices"] = containers
        return Status()

    def process_preemption(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                           victims: Sequence[Victim]) -> tuple[list[Victim], Status]:
        asks = self._asks(state, pod)
        if not asks:
            return list(victims), Status()
        devices, _, holders = self.node_devices(node, exclude=pod.uid)
        if not devices:
            return [], Status.unresolvable("node(s) had no shareable devices")
        # as kube-scheduler's selectVictimsOnNode: the node's lower-priority pods, most important
        # first, charged to their budgets together - those beyond an allowance violate it
        lower = sorted((p for p in node.pods.values() if p.priority < pod.priority), key=_more_important)
        protected = frozenset(self.handle.pdb_violations(lower, evicting=False))
        extra = logic.choose_victims(asks, devices, holders, pod.priority, [v.uid for v in victims], protected)
        if extra is None:
            return [], Status.unresolvable("evicting lower-priority pods would not free a device",
                                           detail=logic.explain_misfit(asks, devices, logic.Usage()).detail)
        chosen = list(victims) + [Victim(uid, node.pods.get(uid)) for uid in extra]
        return sorted(chosen, key=_importance), Status()


def _more_important(p: PodInfo) -> tuple[int, str, str]:
    """Most important first: higher priority, then earlier start - none yet is latest - (as
    kube-scheduler's MoreImportantPod orders them), then UID."""
    return (-p.priority, p.start_time or "~", p.uid)


def _importance(v: Victim) -> tuple[int, str, str]:
    """``_more_important`` of a victim (one unknown to the cache sorts by its UID alone)."""
    if v.pod is None:
        return (0, "", v.uid)
    return _more_important(v.pod)


def _exact(ask: logic.Ask) -> bool:
    """The ask's amounts are within the batch rows' exact range (``rows.EXACT``)."""
    return all(-EXACT < a < EXACT for a in (ask.memory, ask.compute, ask.count))


SPEC = PluginSpec(NAME, DeviceShare, parser(DeviceShareArgsSchema),
                  "Fractional device sharing: per-device memory/compute, whole devices, device-level preemption.")
