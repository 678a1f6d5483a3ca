"""Pure rules for sharing devices: inventories, usage, best-fit placement and victim choice.

Units are exact integers: device memory in MiB, compute in percent of one device (100 = all of
it). A container asks either for a *share* of one device (memory and/or compute, which must fit
on a single device) or for *N whole devices* (exclusive). Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

FULL_COMPUTE = 100

GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_PRODUCT = "nvidia.com/gpu.product"
"""Node labels of NVIDIA GPU Feature Discovery: devices on the node, memory of each in MiB, model."""

_DECIMAL = re.compile(r"[0-9]+")


class InventoryError(ValueError):
    """A node's inventory annotation that cannot be used (the node is then treated as offering
    no devices, and the problem is logged)."""


@dataclass(frozen=True, slots=True)
class Device:
    id: int
    memory: int
    compute: int = FULL_COMPUTE
    healthy: bool = True


MAX_DEVICES = 1024
"""Devices a node may list: more is a broken inventory, not hardware (and would cost memory)."""

MAX_AMOUNT = 2**53 - 1
"""The largest memory (MiB) or compute a device may have: beyond any hardware, and the largest
integer every JSON reader (the debug views' included) takes exactly."""


def _plausible(devices: int, *amounts: int) -> str | None:
    if devices > MAX_DEVICES:
        return f"more than {MAX_DEVICES} devices on one node"
    if any(a > MAX_AMOUNT for a in amounts):
        return f"an amount beyond {MAX_AMOUNT}"
    return None


def parse_inventory(text: str | None) -> tuple[Device, ...]:
    """Parse ``{"devices": 4, "memoryMiB": 16384, "compute": 100, "unhealthy": [3]}`` (uniform)
    or ``{"devices": [{"id": 0, "memoryMiB": 16384, "compute": 100}, ...], "unhealthy": [..]}``,
    in id order. Absent text: no devices. Raises InventoryError naming the problem (JSON nested
    deeper than the parser recurses included)."""
    if not text:
        return ()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InventoryError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InventoryError("must be a JSON object")
    unhealthy = doc.get("unhealthy") or []
    if not isinstance(unhealthy, list) or not all(type(i) is int for i in unhealthy):
        raise InventoryError("unhealthy must be a list of device ids")
    spec = doc.get("devices")
    devices: list[Device] = []
    if type(spec) is int:
        memory, compute = doc.get("memoryMiB"), doc.get("compute", FULL_COMPUTE)
        if type(memory) is not int or memory <= 0 or type(compute) is not int or compute <= 0 or spec < 0:
            raise InventoryError("uniform form needs devices >= 0, memoryMiB > 0 and compute > 0 (integers)")
        implausible = _plausible(spec, memory, compute)
        if implausible:
            raise InventoryError(implausible)
        devices = [Device(i, memory, compute, i not in unhealthy) for i in range(spec)]
    elif isinstance(spec, list):
        seen: set[int] = set()
        if len(spec) > MAX_DEVICES:
            raise InventoryError(f"more than {MAX_DEVICES} devices on one node")
        for i, d in enumerate(spec):
            if not isinstance(d, dict):
                raise InventoryError(f"devices[{i}] must be an object")
            dev_id, memory, compute = d.get("id", i), d.get("memoryMiB"), d.get("compute", FULL_COMPUTE)
            if type(dev_id) is not int or dev_id in seen:
                raise InventoryError(f"devices[{i}].id must be a unique integer")
            if type(memory) is not int or memory <= 0 or type(compute) is not int or compute <= 0:
                raise InventoryError(f"devices[{i}] needs memoryMiB > 0 and compute > 0 (integers)")
            implausible = _plausible(0, memory, compute, abs(dev_id))
            if implausible:
                raise InventoryError(f"devices[{i}]: {implausible}")
            seen.add(dev_id)
            devices.append(Device(dev_id, memory, compute, dev_id not in unhealthy and d.get("healthy", True) is True))
    else:
        raise InventoryError("devices must be a count or a list")
    return tuple(sorted(devices, key=lambda d: d.id))  # "the lowest idle ids" are the first idle ones


def inventory_from_labels(labels: Mapping[str, Any]) -> tuple[Device, ...]:
    """Uniform devices from NVIDIA GPU Feature Discovery labels: ``nvidia.com/gpu.count``
    devices of ``nvidia.com/gpu.memory`` MiB each, full compute, all healthy. Without the count
    label the node has no GFD inventory: no devices. Raises InventoryError when the labels are
    there but unusable (not decimal integers, no memory label, memory 0)."""
    count, memory = labels.get(GFD_COUNT), labels.get(GFD_MEMORY)
    if count is None:
        return ()
    if not isinstance(count, str) or not _DECIMAL.fullmatch(count):
        raise InventoryError(f"label {GFD_COUNT}={count!r} is not a device count")
    if memory is None:
        raise InventoryError(f"label {GFD_COUNT} without {GFD_MEMORY} (MiB per device)")
    if not isinstance(memory, str) or not _DECIMAL.fullmatch(memory) or int(memory) == 0:
        raise InventoryError(f"label {GFD_MEMORY}={memory!r} is not a positive number of MiB")
    implausible = _plausible(int(count), int(memory))
    if implausible:
        raise InventoryError(f"labels {GFD_COUNT}/{GFD_MEMORY}: {implausible}")
    return tuple(Device(i, int(memory)) for i in range(int(count)))


@dataclass(frozen=True, slots=True)
class Ask:
    """One container's device request."""

    container: str
    memory: int = 0
    compute: int = 0
    count: int = 0
    """Whole devices; when set, memory and compute are ignored (the devices are exclusive)."""

    @property
    def whole(self) -> bool:
        return self.count > 0


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container got: device ids and the share of each."""

    container: str
    devices: tuple[int, ...]
    memory: int
    compute: int
    exclusive: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "memoryMiB": self.memory, "compute": self.compute,
                "exclusive": self.exclusive}


def grants_of(doc: Any) -> tuple[Grant, ...] | None:
    """Read ``{"<container>": {"devices": [0], "memoryMiB": 8192, "compute": 50, ...}}``; None when
    malformed (an amount that is not a finite number >= 0 included)."""
    if not isinstance(doc, dict):
        return None
    out = []
    try:
        for name, g in doc.items():
            devices = tuple(int(d) for d in g["devices"])
            memory, compute = int(g.get("memoryMiB", 0)), int(g.get("compute", 0))
            if memory < 0 or compute < 0:
                return None
            out.append(Grant(str(name), devices, memory, compute, bool(g.get("exclusive", False))))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return tuple(out)


@dataclass
class Usage:
    """Per-device use on one node: memory, compute, and whether a whole-device grant holds it."""

    memory: dict[int, int] = field(default_factory=dict)
    compute: dict[int, int] = field(default_factory=dict)
    exclusive: set[int] = field(default_factory=set)
    holders: dict[int, list[str]] = field(default_factory=dict)
    """device id -> pod UIDs using it."""

    def add(self, uid: str, grants: Iterable[Grant]) -> None:
        for g in grants:
            for d in g.devices:
                self.memory[d] = self.memory.get(d, 0) + g.memory
                self.compute[d] = self.compute.get(d, 0) + g.compute
                if g.exclusive:
                    self.exclusive.add(d)
                holders = self.holders.setdefault(d, [])
                if uid not in holders:
                    holders.append(uid)

    def free_memory(self, dev: Device) -> int:
        return 0 if dev.id in self.exclusive or not dev.healthy else dev.memory - self.memory.get(dev.id, 0)

    def free_compute(self, dev: Device) -> int:
        return 0 if dev.id in self.exclusive or not dev.healthy else dev.compute - self.compute.get(dev.id, 0)

    def idle(self, dev: Device) -> bool:
        return dev.healthy and dev.id not in self.exclusive and not self.holders.get(dev.id)


def _share_fits(ask: Ask, dev: Device, usage: Usage) -> bool:
    return (dev.healthy and usage.free_memory(dev) >= ask.memory and usage.free_compute(dev) >= ask.compute)


def place(asks: Sequence[Ask], devices: Sequence[Device], usage: Usage, binpack: bool = True) -> tuple[Grant, ...] | None:
    """Deterministic placement of every ask, or None if one does not fit. Shares go to the best
    fit (binpack: the device with the least free memory that still fits; spread: the most), ties
    to the lower id; whole-device asks take the lowest-numbered idle devices. Larger asks are
    placed first so a small one does not break up a device a large one needed. Where that greedy
    pass finds no room for several asks, a search (``_search``) looks for another assignment, so
    a pod is judged not to fit only when none exists (within ``SEARCH_BUDGET``). One ask alone is
    never searched for: the greedy pass finds room for it whenever there is some."""
    grants = _greedy(asks, devices, usage, binpack)
    if grants is not None or len(asks) < 2:
        return grants
    return _search(asks, devices, usage, binpack)


def _order(asks: Sequence[Ask]) -> list[Ask]:
    """The order asks are placed in: whole devices first, then larger shares."""
    return sorted(asks, key=lambda a: (-a.count, -a.memory, -a.compute, a.container))


def _greedy(asks: Sequence[Ask], devices: Sequence[Device], usage: Usage, binpack: bool) -> tuple[Grant, ...] | None:
    """``place``'s greedy pass: each ask in ``_order`` where it goes best, never taken back."""
    work = Usage({**usage.memory}, {**usage.compute}, set(usage.exclusive), {k: list(v) for k, v in usage.holders.items()})
    grants: list[Grant] = []
    for ask in _order(asks):
        if ask.whole:
            idle = [d for d in devices if work.idle(d)]
            if len(idle) < ask.count:
                return None
            chosen = idle[:ask.count]
            g = Grant(ask.container, tuple(d.id for d in chosen), 0, 0, exclusive=True)
        else:
            fitting = [d for d in devices if _share_fits(ask, d, work)]
            if not fitting:
                return None
            sign = 1 if binpack else -1
            best = min(fitting, key=lambda d: (sign * work.free_memory(d), sign * work.free_compute(d), d.id))
            g = Grant(ask.container, (best.id,), ask.memory, ask.compute)
        work.add("__placing__", [g])
        grants.append(g)
    by_name = {g.container: g for g in grants}
    return tuple(by_name[a.container] for a in asks)


SEARCH_BUDGET = 10_000
"""Device looks ``_search`` may spend on one placement (each step it opens looks at every
healthy device of the node once): a few milliseconds at worst. Beyond it the asks are judged
not to fit - only pods of many containers on nodes of many devices, with many different amounts
free, that fit only in few of the ways to place them, get there."""


def _search(asks: Sequence[Ask], devices: Sequence[Device], usage: Usage, binpack: bool) -> tuple[Grant, ...] | None:
    """An assignment of every ask where ``_greedy`` found none, or None when there is none (or
    ``SEARCH_BUDGET`` ran out). Depth first over the asks in ``_order``, a whole ask one device
    at a time (in device order within it, so each set of devices is tried once); each step tries
    the devices ``_greedy`` would rank first first, and of devices alike for what is left to place
    (idle or not, the same memory and compute free) only the first. A step's situation that
    failed once (which step, what the devices have free) is not tried again."""
    order = _order(asks)
    healthy = [d for d in devices if d.healthy]
    n = len(healthy)
    idle = [usage.idle(d) for d in healthy]
    free_m = [usage.free_memory(d) for d in healthy]
    free_c = [usage.free_compute(d) for d in healthy]
    shares = [a for a in order if not a.whole]
    if sum(a.count for a in order) > sum(idle) \
            or sum(a.memory for a in shares) > sum(max(0, m) for m in free_m) \
            or sum(a.compute for a in shares) > sum(max(0, c) for c in free_c) \
            or any(not any(free_m[k] >= a.memory and free_c[k] >= a.compute for k in range(n)) for a in shares):
        return None  # short of idle devices, of memory or compute in all, or a share fits no device even alone
    steps = [(i, j) for i, a in enumerate(order) for j in range(a.count if a.whole else 1)]
    sign = 1 if binpack else -1
    failed: set[Any] = set()
    budget = SEARCH_BUDGET

    def open_step(s: int, picks: list[int]) -> list[Any] | None:
        """The frame of step ``s`` (its candidates, the next to try, what it changed), None when
        this situation failed before."""
        i, j = steps[s]
        ask = order[i]
        after = picks[-1] if j > 0 else -1  # within a whole ask: devices after the last one taken
        state = tuple(zip(idle, free_m, free_c))
        key = (s, after, state) if j > 0 else (s, tuple(sorted(state)))
        if key in failed:
            return None
        if ask.whole:
            ranked = [k for k in range(after + 1, n) if idle[k]]
        else:
            ranked = sorted((k for k in range(n) if free_m[k] >= ask.memory and free_c[k] >= ask.compute),
                            key=lambda k: (sign * free_m[k], sign * free_c[k], healthy[k].id))
        seen: set[tuple[bool, int, int]] = set()
        candidates = []
        for k in ranked:
            if state[k] not in seen:
                seen.add(state[k])
                candidates.append(k)
        return [s, candidates, 0, key, None]

    picks: list[int] = []
    frame = open_step(0, picks)
    if frame is None:
        return None
    stack = [frame]
    while stack:
        frame = stack[-1]
        s, candidates, pos, key, saved = frame
        if saved is not None:  # take the last try back
            k = picks.pop()
            idle[k], free_m[k], free_c[k] = saved
            frame[4] = None
        if pos == len(candidates):
            failed.add(key)
            stack.pop()
            continue
        k = candidates[pos]
        frame[2] = pos + 1
        frame[4] = (idle[k], free_m[k], free_c[k])
        ask = order[steps[s][0]]
        if ask.whole:
            idle[k], free_m[k], free_c[k] = False, 0, 0
        else:
            idle[k], free_m[k], free_c[k] = False, free_m[k] - ask.memory, free_c[k] - ask.compute
        picks.append(k)
        if s + 1 == len(steps):
            return _grants_from(asks, order, steps, picks, healthy)
        budget -= n
        if budget < 0:
            return None
        following = open_step(s + 1, picks)
        if following is not None:
            stack.append(following)
    return None


def _grants_from(asks: Sequence[Ask], order: Sequence[Ask], steps: Sequence[tuple[int, int]], picks: Sequence[int],
                 healthy: Sequence[Device]) -> tuple[Grant, ...]:
    """The grants of ``_search``'s ``picks`` (a healthy device's index per step), in ``asks`` order."""
    taken: dict[int, list[int]] = {}
    for (i, _), k in zip(steps, picks):
        taken.setdefault(i, []).append(k)
    grants = []
    for i, ask in enumerate(order):
        ids = tuple(healthy[k].id for k in sorted(taken[i]))
        grants.append(Grant(ask.container, ids, 0, 0, exclusive=True) if ask.whole
                      else Grant(ask.container, ids, ask.memory, ask.compute))
    by_name = {g.container: g for g in grants}
    return tuple(by_name[a.container] for a in asks)


def charge(asks: Sequence[Ask], devices: Sequence[Device], usage: Usage) -> tuple[Grant, ...]:
    """Where a pod that holds devices without naming them (bound with no assignment) is counted
    when ``place`` finds no room for it - the pods placed before it took the room it has: each
    share on the healthy device with the most free memory, each whole ask on the idle devices
    first, then the least used - beyond their capacity if need be. Its devices are then seen as
    taken, never the pod as holding nothing. () when the node has no healthy device."""
    usable = [d for d in devices if d.healthy]
    if not usable:
        return ()
    work = Usage({**usage.memory}, {**usage.compute}, set(usage.exclusive), {k: list(v) for k, v in usage.holders.items()})
    grants: list[Grant] = []
    for ask in sorted(asks, key=lambda a: (-a.count, -a.memory, -a.compute, a.container)):
        if ask.whole:
            ranked = sorted(usable, key=lambda d: (not work.idle(d), work.memory.get(d.id, 0), d.id))
            g = Grant(ask.container, tuple(d.id for d in ranked[:ask.count]), 0, 0, exclusive=True)
        else:
            best = min(usable, key=lambda d: (-work.free_memory(d), -work.free_compute(d), d.id))
            g = Grant(ask.container, (best.id,), ask.memory, ask.compute)
        work.add("__charging__", [g])
        grants.append(g)
    by_name = {g.container: g for g in grants}
    return tuple(by_name[a.container] for a in asks)


class Misfit(NamedTuple):
    """Why ``place`` failed on a node."""

    could_help: bool
    """Could evictions help? Not when the ask does not fit even on the idle node."""
    detail: str
    short_of: str
    """What is short, as the kind of ask: ``count`` (whole devices), ``memory`` or ``compute``."""


def _kind(ask: Ask) -> str:
    return "count" if ask.whole else ("memory" if ask.memory or not ask.compute else "compute")


def explain_misfit(asks: Sequence[Ask], devices: Sequence[Device], usage: Usage) -> Misfit:
    """Why ``place`` failed (see :class:`Misfit`), with the per-node numbers."""
    healthy = [d for d in devices if d.healthy]
    first = _kind(asks[0]) if asks else "memory"
    if not healthy:
        return Misfit(False, "no healthy devices", first)
    empty = Usage()
    if place(asks, healthy, empty) is None:
        biggest = max(d.memory for d in healthy)
        for ask in asks:
            if ask.whole and ask.count > len(healthy):
                return Misfit(False, f"container {ask.container} asks for {ask.count} whole devices; node has "
                                     f"{len(healthy)} healthy", "count")
            if not ask.whole and ask.memory > biggest:
                return Misfit(False, f"container {ask.container} asks for {ask.memory} MiB; largest device has "
                                     f"{biggest} MiB", "memory")
        return Misfit(False, "the containers' asks do not fit together even on the idle node", first)
    for ask in asks:
        if ask.whole:
            idle = sum(1 for d in healthy if usage.idle(d))
            if idle < ask.count:
                return Misfit(True, f"container {ask.container} needs {ask.count} idle devices; {idle} idle", "count")
        else:
            largest = max(usage.free_memory(d) for d in healthy)
            if largest < ask.memory:
                total = sum(max(0, usage.free_memory(d)) for d in healthy)
                frag = (f"; {total} MiB free in total across devices (fragmented)" if total >= ask.memory else "")
                return Misfit(True, f"no single device with {ask.memory} MiB free; largest free is {largest} MiB{frag}",
                              "memory")
            most = max(usage.free_compute(d) for d in healthy)
            if most < ask.compute:
                return Misfit(True, f"no single device with {ask.compute}% compute free; most free is {most}%",
                              "compute")
    return Misfit(True, "the containers' asks do not fit together on the free devices", first)


def device_score(grants: Sequence[Grant], devices: Sequence[Device], usage: Usage, binpack: bool) -> int:
    """0..100: how full the node's devices would be with the grants (binpack) or how empty (spread),
    over the devices in use afterwards, by memory."""
    by_id = {d.id: d for d in devices if d.healthy}
    if not by_id:
        return 0
    after = Usage({**usage.memory}, {**usage.compute}, set(usage.exclusive), {})
    after.add("__new__", grants)
    total = sum(d.memory for d in by_id.values())
    used = sum(d.memory if d.id in after.exclusive else min(d.memory, after.memory.get(d.id, 0))
               for d in by_id.values())
    share = used * 100 // total
    return share if binpack else 100 - share


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod holding devices on the node, as a possible victim."""

    uid: str
    priority: int
    start_time: str
    grants: tuple[Grant, ...]


def choose_victims(asks: Sequence[Ask], devices: Sequence[Device], holders: Sequence[Holder],
                   preemptor_priority: int, required: Sequence[str] = (),
                   protected: frozenset[str] = frozenset()) -> list[str] | None:
    """The smallest set of lowest-priority holders whose eviction (on top of ``required``, the
    victims kube-scheduler already chose) lets every ask fit; None if impossible. Never a holder
    of equal or higher priority. Candidates are tried unprotected first (``protected``: pods whose
    eviction would violate a PodDisruptionBudget), then lowest priority, then most recently
    started (the least work lost); victims that turn out unnecessary are dropped again, protected
    and most important first. ``holders`` must be every pod holding devices on the node."""
    by_uid = {h.uid: h for h in holders}

    def fits_without(gone: set[str]) -> bool:
        u = Usage()
        for h in holders:
            if h.uid not in gone:
                u.add(h.uid, h.grants)
        return place(asks, devices, u) is not None

    base = {uid for uid in required if uid in by_uid}
    if fits_without(base):
        return []
    order = sorted((h for h in holders if h.priority < preemptor_priority and h.uid not in base),
                   key=lambda h: (h.uid in protected, h.priority, _reverse_time(h.start_time), h.uid))
    chosen: list[str] = []
    gone = set(base)
    for h in order:
        chosen.append(h.uid)
        gone.add(h.uid)
        if fits_without(gone):
            for uid in sorted(chosen, key=lambda u: (u not in protected, -by_uid[u].priority, u)):
                if fits_without(gone - {uid}):
                    gone.discard(uid)
                    chosen.remove(uid)
            return chosen
    return None


def _reverse_time(ts: str) -> str:
    """Sort key putting later start times first (ISO-8601 strings compare in time order)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in ts) if ts else ""


class Lack(NamedTuple):
    """Why one ask does not fit a node, as ``explain_misfit`` and the plugin's Filter word it:
    ``could_help`` (evictions could make room) and what is short (``count``, ``memory`` or
    ``compute``); ``absent``: the node lists no devices at all."""

    absent: bool
    could_help: bool
    short_of: str


def lacks(ask: Ask, listed: Any, healthy: Any, idle: Any, free_memory: Any, free_compute: Any,
          memory: Any, compute: Any) -> list[tuple[Lack, Any]]:
    """``place([ask], ...)`` and, where it fails, ``explain_misfit``'s answer, over many nodes at
    once: numpy arrays with a row per node - whether it lists devices, its healthy and idle
    device counts, and per device slot the free and total memory and compute of its healthy
    devices (anything below every amount where there is none). Returns each kind of misfit
    with the mask of the nodes it holds for; a node in no mask fits."""
    fits = fitting(ask, idle, free_memory, free_compute)
    if ask.whole:
        too_few = healthy < ask.count  # not even on the idle node
        kinds = [(Lack(False, False, "count"), too_few), (Lack(False, True, "count"), ~too_few)]
    else:
        large = ((memory >= ask.memory) & (compute >= ask.compute)).any(axis=1)  # on the idle node
        short_memory = free_memory.max(axis=1) < ask.memory  # the largest free amount of a healthy device
        short_compute = ~short_memory & (free_compute.max(axis=1) < ask.compute)
        rest = ~short_memory & ~short_compute
        first = _kind(ask)
        kinds = [(Lack(False, False, first), ~large), (Lack(False, True, "memory"), large & short_memory),
                 (Lack(False, True, "compute"), large & short_compute), (Lack(False, True, first), large & rest)]
    out = [(Lack(True, False, ""), ~listed)]
    misfit = ~fits & listed
    for lack, mask in kinds:
        out.append((lack, misfit & mask))
    return out


def fitting(ask: Ask, idle: Any, free_memory: Any, free_compute: Any) -> Any:
    """Where ``place([ask], ...)`` succeeds, over rows of nodes as ``lacks`` takes them."""
    if ask.whole:
        return idle >= ask.count
    return ((free_memory >= ask.memory) & (free_compute >= ask.compute)).any(axis=1)


def scores(ask: Ask, fits: Any, used: Any, total: Any, idle_memory: Any, binpack: bool) -> Any:
    """``device_score`` of ``place([ask], ...)``'s grants, over rows of nodes (0 where it does not
    fit): ``used`` and ``total`` memory of each node's healthy devices (a device held whole counts
    whole, none beyond its size), ``idle_memory`` its idle devices' memory in device order. The
    share lands on a device with room for it, so it adds its memory whichever device it is;
    whole devices are the first idle ones and add all of theirs."""
    added = idle_memory[:, :ask.count].sum(axis=1) if ask.whole else ask.memory
    share = (used + added) * 100 // (total + (total == 0))
    return (share if binpack else 100 - share) * (fits & (total > 0))
