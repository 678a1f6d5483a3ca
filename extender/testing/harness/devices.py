"""Per-device capacity as the API server's objects state it (DeviceShare), for the Recorder.

A node states its devices in its inventory annotation (``<prefix>device-inventory``); a bound
pod states the devices each of its containers holds in its assignment annotation
(``<prefix>devices``: ``{"node": N, "containers": {C: {"devices": [..], "memoryMiB": M,
"compute": P, "exclusive": B}}}``), written with its Binding. Node totals cannot show a device
given twice or a share larger than the device it sits on; :class:`DeviceLedger` checks, per node
and at every write, what only the annotations show:

* every device held exists and is healthy;
* a device held whole (``exclusive``) has no other holder;
* per device, the shares' memory and compute do not exceed the device's;
* every bound pod that asks for device resources has an assignment for its own node, and each
  container's grant covers its ask (one device with at least the memory and compute asked, or
  exactly the count of whole devices asked).

The grants are read here independently of the plugin's own parser (only the inventory's input
format is shared): what is checked is what a device plugin reading the annotations would use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from extender.config.model import ExtenderConfig
from extender.framework.resources import QuantityError, milli
from policies.device_share.args import DeviceShareArgsSchema
from policies.device_share.logic import Device, InventoryError, parse_inventory

PLUGIN = "DeviceShare"


@dataclass(frozen=True)
class DeviceAccounting:
    """Where the devices are stated: annotation keys (prefix included) and resource names."""

    inventory: str
    assignment: str
    memory: str
    compute: str
    count: str

    @classmethod
    def from_config(cls, config: ExtenderConfig) -> DeviceAccounting | None:
        """The accounting of the first profile that enables DeviceShare (its args, defaults
        filled in); None when no profile does."""
        for profile in config.profiles:
            if any(PLUGIN in (ref.name for ref in plugin_set.enabled) for plugin_set in profile.plugins.values()):
                args = DeviceShareArgsSchema().load(dict(profile.plugin_args.get(PLUGIN) or {}))
                prefix = config.annotation_prefix
                return cls(prefix + args.inventory_annotation, prefix + "devices", args.memory_resource,
                           args.compute_resource, args.count_resource)
        return None

    @property
    def resources(self) -> frozenset[str]:
        return frozenset((self.memory, self.compute, self.count))

    def asks(self, pod: Mapping[str, Any]) -> dict[str, tuple[int, int, int]]:
        """Per container: (memory MiB, compute percent, whole devices) asked, requests over limits;
        containers that ask for none left out."""
        out = {}
        for c in (pod.get("spec") or {}).get("containers") or ():
            res = c.get("resources") or {}
            merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            try:
                ask = tuple(milli(merged[r]) // 1000 if r in merged else 0 for r in (self.memory, self.compute, self.count))
            except QuantityError:
                continue
            if any(ask):
                out[str(c.get("name", ""))] = (ask[0], ask[1], ask[2])
        return out


@dataclass(frozen=True)
class DeviceProblem:
    """One thing wrong on a node: ``what`` names the resource and device, ``used``/``limit`` the
    figures (0/0 for a problem that is not a quantity)."""

    what: str
    used: int
    limit: int
    pods: tuple[str, ...]


class DeviceLedger:
    """Bound pods' grants per node, checked against the nodes' inventories. Not thread-safe:
    the Recorder calls it under its lock."""

    def __init__(self, accounting: DeviceAccounting) -> None:
        self.accounting = accounting
        self._devices: dict[str, dict[int, Device]] = {}
        self._holders: dict[str, dict[str, tuple[str, Mapping[str, Any]]]] = {}
        """node -> pod uid -> (pod key, the pod as stored)."""

    def set_node(self, name: str, node: Mapping[str, Any] | None) -> bool:
        """The node's inventory (None: the node is gone); True when it changed."""
        devices: dict[int, Device] = {}
        if node is not None:
            text = ((node.get("metadata") or {}).get("annotations") or {}).get(self.accounting.inventory)
            try:
                devices = {d.id: d for d in parse_inventory(text)}
            except InventoryError:
                devices = {}
        if self._devices.get(name) == devices:
            return False
        self._devices[name] = devices
        return True

    def hold(self, node: str, uid: str, key: str, pod: Mapping[str, Any]) -> None:
        self._holders.setdefault(node, {})[uid] = (key, pod)

    def release(self, node: str, uid: str) -> None:
        self._holders.get(node, {}).pop(uid, None)

    def problems(self, node: str) -> list[DeviceProblem]:
        """What is wrong on ``node`` now (empty when nothing is)."""
        acc = self.accounting
        devices = self._devices.get(node, {})
        memory: dict[int, list[tuple[str, int]]] = {}
        compute: dict[int, list[tuple[str, int]]] = {}
        holders: dict[int, list[tuple[str, bool]]] = {}
        out: list[DeviceProblem] = []
        for key, pod in sorted(self._holders.get(node, {}).values(), key=lambda kv: kv[0]):
            asks = acc.asks(pod)
            if not asks:
                continue
            grants = _grants(pod, acc.assignment, node)
            if grants is None:
                out.append(DeviceProblem(f"{acc.memory}/{acc.count}: no device assignment for this node", 0, 0, (key,)))
                continue
            for container, (mem, comp, count) in asks.items():
                grant = grants.get(container)
                if grant is None or not _covers(grant, mem, comp, count):
                    out.append(DeviceProblem(f"container {container}: grant {grant} does not cover ask "
                                             f"(memory {mem}, compute {comp}, count {count})", 0, 0, (key,)))
                    continue
                devs, gmem, gcomp, exclusive = grant
                for d in devs:
                    holders.setdefault(d, []).append((key, exclusive))
                    if not exclusive:
                        memory.setdefault(d, []).append((key, gmem))
                        compute.setdefault(d, []).append((key, gcomp))
        for d, held in sorted(holders.items()):
            pods = tuple(sorted({k for k, _ in held}))
            device = devices.get(d)
            if device is None or not device.healthy:
                out.append(DeviceProblem(f"device {d} ({'unhealthy' if device else 'not in the inventory'})",
                                         len(held), 0, pods))
                continue
            if any(exclusive for _, exclusive in held) and len(held) > 1:
                out.append(DeviceProblem(f"{acc.count} device {d} held whole and shared", len(held), 1, pods))
            for name, shares, limit in ((acc.memory, memory.get(d, []), device.memory),
                                        (acc.compute, compute.get(d, []), device.compute)):
                used = sum(amount for _, amount in shares)
                if used > limit:
                    out.append(DeviceProblem(f"{name} on device {d}", used, limit, pods))
        return out

    def fits_somewhere(self, pod: Mapping[str, Any]) -> bool:
        """Whether the devices some node has free now hold every container's ask of ``pod`` (the
        containers placed one after the other on what the earlier ones left)."""
        asks = self.accounting.asks(pod)
        return bool(asks) and any(self._fits(node, asks) for node in self._devices)

    def _fits(self, node: str, asks: Mapping[str, tuple[int, int, int]]) -> bool:
        devices = {d.id: d for d in self._devices[node].values() if d.healthy}
        memory = {d: dev.memory for d, dev in devices.items()}
        compute = {d: dev.compute for d, dev in devices.items()}
        idle = set(devices)
        for _, pod in self._holders.get(node, {}).values():
            for devs, gmem, gcomp, exclusive in (_grants(pod, self.accounting.assignment, node) or {}).values():
                for d in devs:
                    idle.discard(d)
                    if exclusive:
                        memory[d] = compute[d] = 0
                    elif d in memory:
                        memory[d] -= gmem
                        compute[d] -= gcomp
        for mem, comp, count in asks.values():
            if count:
                if len(idle) < count:
                    return False
                taken = sorted(idle)[:count]
                idle.difference_update(taken)
                for d in taken:
                    memory[d] = compute[d] = 0
                continue
            spot = next((d for d in sorted(devices) if memory[d] >= mem and compute[d] >= comp), None)
            if spot is None:
                return False
            memory[spot] -= mem
            compute[spot] -= comp
            idle.discard(spot)
        return True


Grant = tuple[tuple[int, ...], int, int, bool]


def _grants(pod: Mapping[str, Any], key: str, node: str) -> dict[str, Grant] | None:
    """Per container: (devices, memory, compute, exclusive) from the assignment annotation; None
    when there is none, it is malformed, or it names another node."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        doc = json.loads(text) if text else None
        if not isinstance(doc, dict) or doc.get("node") != node:
            return None
        return {str(name): (tuple(int(d) for d in g["devices"]), int(g.get("memoryMiB", 0)), int(g.get("compute", 0)),
                            bool(g.get("exclusive", False)))
                for name, g in (doc.get("containers") or {}).items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _covers(grant: Grant, memory: int, compute: int, count: int) -> bool:
    devices, gmem, gcomp, exclusive = grant
    if count:
        return exclusive and len(set(devices)) == len(devices) == count
    return not exclusive and len(devices) == 1 and gmem >= memory and gcomp >= compute
