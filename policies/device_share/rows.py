"""DeviceRows: each node's devices summed up as one row of arrays, for DeviceShare's batch Filter.

The rows are the snapshot columns' rows (``NodeColumns.rowspace``: a node keeps its row while it
exists). A row is made again only when it is asked for and its node changed since it was made -
its ``NodeInfo.generation`` moved (a pod came or went, the node's labels or annotations changed)
or a reservation of this process on it did (``invalidate``) - so a filter over 500 candidates
reads the devices of just the nodes that changed since the last one. Another rowspace (the
columns were built afresh) starts an empty table.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from extender.framework.batch import Ints, Mask, Rows
from extender.framework.views import NodeInfo
from policies.device_share import logic

PAD = -(1 << 62)
"""What a device slot holds where a node has no such device, or an unhealthy one: below every
amount, so it never fits an ask and never is the largest free amount of a node."""

EXACT = 1 << 55
"""Amounts held in the rows are below this in absolute value - each device's memory, compute and
free amounts, a node's memory sums, an ask's -, so every operation on them (a score's
``(used + added) * 100`` the largest) stays within int64, as the per-node path's Python ints do.
A node with a larger amount is not made a row: the plugin judges the batch per node."""

_UNMADE = -2
"""``generation`` of a row not made (NodeInfo generations are >= -1)."""

Devices = Callable[[NodeInfo], tuple[Sequence[logic.Device], logic.Usage]]


class DeviceRows:
    """Per row: whether the node lists devices (``listed``), its healthy and idle device counts;
    per device slot (in the node's device order) the free and total memory and compute of its
    healthy devices (``PAD`` elsewhere); for scores, the memory its healthy devices have
    (``total``) and use (``used``, a device held whole counting whole, none beyond its size), and
    the memory of its idle devices in device order (``idle_memory``, 0 after the last). Which
    pods hold devices on which row (``holder_row``). Not thread-safe: the plugin holds its lock
    around use."""

    def __init__(self, rowspace: object) -> None:
        self.rowspace = rowspace
        self.generation: Ints = np.full(0, _UNMADE, np.int64)
        self.listed: Mask = np.zeros(0, np.bool_)
        self.healthy: Ints = np.zeros(0, np.int64)
        self.idle: Ints = np.zeros(0, np.int64)
        self.free_memory: Ints = np.full((0, 1), PAD, np.int64)
        self.free_compute: Ints = np.full((0, 1), PAD, np.int64)
        self.memory: Ints = np.full((0, 1), PAD, np.int64)
        self.compute: Ints = np.full((0, 1), PAD, np.int64)
        self.total: Ints = np.zeros(0, np.int64)
        self.used: Ints = np.zeros(0, np.int64)
        self.idle_memory: Ints = np.zeros((0, 1), np.int64)
        self._row_of: dict[str, int] = {}
        self._holders: dict[int, frozenset[str]] = {}
        self._holder_rows: dict[str, int] = {}

    def holder_row(self, uid: str) -> int | None:
        """The row where pod ``uid`` holds devices, among the rows made (None: none)."""
        return self._holder_rows.get(uid)

    def invalidate(self, node: str) -> None:
        """The node's device use changed without its NodeInfo changing (a reservation of this
        process was made or dropped there): its row is made again when next asked for."""
        row = self._row_of.get(node)
        if row is not None:
            self.generation[row] = _UNMADE

    def refresh(self, rows: Rows, generations: Ints, names_at: Callable[[Rows], list[str]],
                node: Callable[[str], NodeInfo | None], devices: Devices) -> bool:
        """Make again the ``rows`` (with their nodes' current ``generations``) that changed;
        False when a row's node is not in the snapshot (the caller then decides per node)."""
        if len(rows):
            self._grow(int(rows.max()) + 1)
        changed = self.generation[rows] != generations
        if not changed.any():
            return True
        stale, first = np.unique(rows[changed], return_index=True)
        for row, name, generation in zip(stale.tolist(), names_at(stale), generations[changed][first].tolist()):
            info = node(name)
            if info is None or info.generation != generation:
                return False
            if not self._make(row, name, *devices(info)):
                return False
            self.generation[row] = generation
        return True

    def _grow(self, size: int) -> None:
        have = len(self.generation)
        if size <= have:
            return
        size = max(size, 2 * have)
        more = size - have
        self.generation = np.concatenate((self.generation, np.full(more, _UNMADE, np.int64)))
        self.listed = np.concatenate((self.listed, np.zeros(more, np.bool_)))
        self.healthy = np.concatenate((self.healthy, np.zeros(more, np.int64)))
        self.idle = np.concatenate((self.idle, np.zeros(more, np.int64)))
        self.total = np.concatenate((self.total, np.zeros(more, np.int64)))
        self.used = np.concatenate((self.used, np.zeros(more, np.int64)))
        width = self.free_memory.shape[1]
        for attr in ("free_memory", "free_compute", "memory", "compute"):
            setattr(self, attr, np.concatenate((getattr(self, attr), np.full((more, width), PAD, np.int64))))
        self.idle_memory = np.concatenate((self.idle_memory, np.zeros((more, width), np.int64)))

    def _widen(self, width: int) -> None:
        have = self.free_memory.shape[1]
        if width <= have:
            return
        for attr in ("free_memory", "free_compute", "memory", "compute", "idle_memory"):
            table = getattr(self, attr)
            fill = 0 if attr == "idle_memory" else PAD
            setattr(self, attr, np.concatenate((table, np.full((len(table), width - have), fill, np.int64)), axis=1))

    def _make(self, row: int, name: str, devices: Sequence[logic.Device], usage: logic.Usage) -> bool:
        """Make the row of node ``name``; False (the row left unmade) when an amount is not
        within ``EXACT``."""
        healthy = [d for d in devices if d.healthy]
        amounts = [a for d in healthy for a in (usage.free_memory(d), usage.free_compute(d))]
        amounts += [sum(d.memory for d in devices), *(d.compute for d in devices)]  # memory >= 0: the sum bounds each
        if not all(-EXACT < a < EXACT for a in amounts):
            self.generation[row] = _UNMADE
            return False
        self._row_of[name] = row
        self._widen(len(devices))
        self.listed[row] = bool(devices)
        self.healthy[row] = sum(1 for d in devices if d.healthy)
        self.idle[row] = sum(1 for d in devices if usage.idle(d))
        for table in (self.free_memory, self.free_compute, self.memory, self.compute):
            table[row] = PAD
        self.idle_memory[row] = 0
        for k, d in enumerate(devices):
            if d.healthy:
                self.free_memory[row, k] = usage.free_memory(d)
                self.free_compute[row, k] = usage.free_compute(d)
                self.memory[row, k] = d.memory
                self.compute[row, k] = d.compute
        for j, d in enumerate(d for d in devices if usage.idle(d)):
            self.idle_memory[row, j] = d.memory
        self.total[row] = sum(d.memory for d in healthy)
        self.used[row] = sum(d.memory if d.id in usage.exclusive else min(d.memory, usage.memory.get(d.id, 0))
                             for d in healthy)
        for uid in self._holders.pop(row, ()):
            if self._holder_rows.get(uid) == row:
                del self._holder_rows[uid]
        holders = frozenset(uid for uids in usage.holders.values() for uid in uids)
        if holders:
            self._holders[row] = holders
            self._holder_rows.update(dict.fromkeys(holders, row))
        return True
