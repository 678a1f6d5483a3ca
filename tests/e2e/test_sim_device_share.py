"""DeviceShare + ManagedPreemption end to end: the emulated kube-scheduler drives kube-extender
in-process over one shared MemoryCluster.

The profile enables DeviceShare (replacing NodeResources) and ManagedPreemption at postFilter;
the three device resources are managed with ``ignoredByScheduler: true``, so kube-scheduler's own
preemption never helps (its dry run says "expected at least one victim") and the extender evicts
and nominates by itself. Everything is checked on the cluster the scheduler and the extender
share: which pods are gone, which events were recorded, which node and device every pod got
(``kube-extender.io/devices``), and what the extender's /debug/pods endpoint explains.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest
from builders import make_node, make_pod
from simkit import OurServer, scheduler_for

from extender.sim.scheduler import Scheduler
from extender.sim.workload import parse_workload

MEM, COMPUTE, COUNT = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
INVENTORY = "kube-extender.io/device-inventory"
DEVICES = "kube-extender.io/devices"
ALLOCATION = "kube-extender.io/allocation"
GiB = 1024  # MiB
DEVICE = 16 * GiB


def device_config(strategy: str | None = None) -> dict[str, Any]:
    """ExtenderConfiguration overrides: DeviceShare instead of NodeResources, ManagedPreemption at
    postFilter, the three device resources managed and ignored by kube-scheduler."""
    profile: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]},
                    "postFilter": {"enabled": [{"name": "ManagedPreemption"}]}},
    }
    if strategy is not None:
        profile["pluginConfig"] = [{"name": "DeviceShare", "args": {
            "memoryResource": MEM, "computeResource": COMPUTE, "countResource": COUNT,
            "inventoryAnnotation": "device-inventory", "scoringStrategy": {"type": strategy}}}]
    return {"managedResources": [{"name": r, "ignoredByScheduler": True} for r in (MEM, COMPUTE, COUNT)],
            "profiles": [profile]}


def gpu_node(name: str, devices: int = 2, memory: int = DEVICE) -> dict[str, Any]:
    node = make_node(name).obj()
    node["metadata"]["annotations"] = {INVENTORY: json.dumps({"devices": devices, "memoryMiB": memory})}
    return node


def holder(name: str, node: str, device: int, memory: int, priority: int,
           start: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """A running pod holding ``memory`` MiB of device ``device`` on ``node`` (its assignment
    annotation says which device, as the extender would have written it)."""
    pod = make_pod(name).uid(f"u-{name}").req(**{MEM: memory}).priority(priority).node(node).obj()
    pod["status"]["startTime"] = start
    pod["metadata"]["annotations"] = {DEVICES: json.dumps(
        {"node": node, "containers": {"main": {"devices": [device], "memoryMiB": memory, "compute": 0,
                                               "exclusive": False}}})}
    return pod


def share_pod(name: str, memory: int, priority: int = 0, never: bool = False, compute: int = 0) -> dict[str, Any]:
    b = make_pod(name).uid(f"u-{name}").req(**{MEM: memory, **({COMPUTE: compute} if compute else {})})
    b = b.priority(priority)
    if never:
        b = b.never_preempt()
    return b.obj()


def world(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], strategy: str | None = None,
          **sched: Any) -> tuple[OurServer, Scheduler]:
    ours = OurServer(nodes, pods, **device_config(strategy))
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], seed=11, **sched)
    return ours, scheduler


def assignment(pod: dict[str, Any]) -> dict[str, Any]:
    return json.loads(pod["metadata"]["annotations"][DEVICES])


def pod_of(ours: OurServer, name: str, namespace: str = "default") -> dict[str, Any]:
    pod = ours.cluster.get_pod(namespace, name)
    assert pod is not None, f"{namespace}/{name} is gone"
    return pod


def names(ours: OurServer) -> set[str]:
    return {p["metadata"]["name"] for p in ours.cluster.pods()}


def events(ours: OurServer, reason: str) -> list[str]:
    return [e["object"] for e in ours.cluster.events if e["reason"] == reason]


def scheduled_condition(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled")


def device_use(ours: OurServer) -> dict[tuple[str, int], tuple[int, int, list[str]]]:
    """(node, device) -> (memory MiB, compute %, pods), from the bound pods' assignment annotations."""
    mem: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[tuple[str, int], int] = defaultdict(int)
    who: dict[tuple[str, int], list[str]] = defaultdict(list)
    for p in ours.cluster.pods():
        node = p["spec"].get("nodeName")
        if not node:
            continue
        doc = assignment(p)
        assert doc["node"] == node, p["metadata"]["name"]
        for grant in doc["containers"].values():
            for d in grant["devices"]:
                mem[(node, d)] += grant["memoryMiB"]
                cpu[(node, d)] += grant.get("compute", 0)
                who[(node, d)].append(p["metadata"]["name"])
    return {k: (mem[k], cpu[k], who[k]) for k in mem}


# ---- 1, 2, 5: who is preempted, and when nobody is ------------------------------------------------------

def layout() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """gpu-1 (2 x 16 GiB), both devices full:
         device 0: a-lowest (priority 1, 4 GiB)  + b-vip   (1000, 12 GiB)
         device 1: c-victim (priority 20, 8 GiB) + d-guard (300, 8 GiB)
    gpu-2 (2 x 16 GiB), full with priority-1000 pods: never a candidate below 1000.
    The lowest-priority pod (a-lowest) sits on the wrong device: evicting it frees only 4 GiB.
    For an 8 GiB ask the one useful victim is c-victim, on device 1."""
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    pods = [holder("a-lowest", "gpu-1", 0, 4 * GiB, 1), holder("b-vip", "gpu-1", 0, 12 * GiB, 1000),
            holder("c-victim", "gpu-1", 1, 8 * GiB, 20, "2026-01-01T01:00:00Z"),
            holder("d-guard", "gpu-1", 1, 8 * GiB, 300),
            holder("e-sys", "gpu-2", 0, 16 * GiB, 1000), holder("f-sys", "gpu-2", 1, 16 * GiB, 1000)]
    return nodes, pods


def room_on_gpu_3() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """gpu-3: device 0 has 10 GiB free, device 1 4 GiB free; both held by priority-0 pods (the
    cheapest victims in the cluster - and not needed, the ask fits on device 0)."""
    return [gpu_node("gpu-3")], [holder("g-cheap", "gpu-3", 0, 6 * GiB, 0), holder("h-cheap", "gpu-3", 1, 12 * GiB, 0)]


PREEMPTION_CASES = [
    # id, preemptor (name, MiB, priority, never), extra nodes, evicted, expected (node, device) or None
    pytest.param(("hi", 8 * GiB, 100, False), False, {"c-victim"}, ("gpu-1", 1),
                 id="the-right-pod-on-the-right-device"),
    pytest.param(("hi", 8 * GiB, 21, False), False, {"c-victim"}, ("gpu-1", 1),
                 id="one-priority-above-the-victim-is-enough"),
    pytest.param(("hi", 8 * GiB, 20, False), False, set(), None,
                 id="equal-priority-is-never-a-victim"),
    pytest.param(("hi", 8 * GiB, 100, True), False, set(), None,
                 id="preemptionPolicy-Never-evicts-nothing"),
    pytest.param(("hi", 8 * GiB, 100, False), True, set(), ("gpu-3", 0),
                 id="room-on-a-device-elsewhere-no-preemption"),
    pytest.param(("hi", 20 * GiB, 2000, False), False, set(), None,
                 id="larger-than-any-device-is-unresolvable"),
]


@pytest.mark.parametrize("preemptor, with_room, evicted, placed", PREEMPTION_CASES)
def test_device_level_preemption(preemptor: tuple[str, int, int, bool], with_room: bool, evicted: set[str],
                                 placed: tuple[str, int] | None) -> None:
    nodes, pods = layout()
    if with_room:
        more_nodes, more_pods = room_on_gpu_3()
        nodes, pods = nodes + more_nodes, pods + more_pods
    ours, scheduler = world(nodes, pods, max_virtual_seconds=120)
    name, memory, priority, never = preemptor
    ours.cluster.add_pod(share_pod(name, memory, priority, never))
    scheduler.run()

    before = {p["metadata"]["name"] for p in pods}
    assert before - names(ours) == evicted, "exactly the expected victims are gone"
    assert sorted(events(ours, "Preempted")) == sorted(f"default/{v}" for v in evicted)
    assert ours.calls("preempt") == [], "kube-scheduler never reaches the preempt verb (ignoredByScheduler)"
    pod = pod_of(ours, name)

    if placed is None:
        assert "nodeName" not in pod["spec"]
        assert "nominatedNodeName" not in pod["status"]
        assert events(ours, "Preempting") == []
        cond = scheduled_condition(pod)
        assert cond["reason"] == "Unschedulable", cond
        if memory > DEVICE:
            assert cond["message"].startswith("0/2 nodes are available: 2 node(s) had no device large enough."), cond
        else:
            assert cond["message"].startswith("0/2 nodes are available: 2 Insufficient example.com/gpu-memory on "
                                              "any single device."), cond
        verdict = json.loads(ours.app.test_client().get(f"/debug/pods/default/{name}").data)
        assert verdict["state"] == "pending" and verdict["verdicts"]["filter"]["outcome"] == "unschedulable"
        if memory > DEVICE:
            rejected = verdict["verdicts"]["filter"]["rejected"]
            assert {r["code"] for r in rejected.values()} == {"UNSCHEDULABLE_AND_UNRESOLVABLE"}
            assert "largest device has 16384 MiB" in rejected["gpu-1"]["detail"]
        return

    node, device = placed
    assert pod["spec"]["nodeName"] == node
    doc = assignment(pod)
    assert doc["node"] == node and doc["containers"]["main"]["devices"] == [device]
    assert doc["containers"]["main"]["memoryMiB"] == memory
    assert json.loads(pod["metadata"]["annotations"][ALLOCATION])["extra"]["devices"] == doc["containers"]
    use = device_use(ours)
    assert all(m <= DEVICE for m, _, _ in use.values()), use
    if evicted:
        # first attempt: no node fits, the extender evicts and nominates; kube-scheduler's own
        # preemption finds nothing (the shortage is invisible to it) and leaves the nomination
        first = scheduler.cycles[0]
        assert first.outcome == "unschedulable" and first.preemption is not None
        assert first.preemption["result"] == "error" and first.preemption["candidates"] == {}
        assert "expected at least one victim" in first.message
        assert events(ours, "Preempting") == [f"default/{name}"]
        # the retry carries the nomination, tries the nominated node alone, and binds there
        retry = next(c for c in scheduler.cycles[1:] if c.pod == f"default/{name}")
        assert retry.outcome == "scheduled" and retry.node == node and retry.evaluated == 1
        filters = [c.json() for c in ours.calls("filter")]
        assert filters[-1]["Pod"]["status"].get("nominatedNodeName") == node
        assert filters[-1]["NodeNames"] == [node]
        # the freed device now holds the survivors plus the preemptor, exactly full
        assert sorted(use[(node, device)][2]) == sorted(["d-guard", name])
        assert use[(node, device)][0] == DEVICE
    else:
        assert [c.outcome for c in scheduler.cycles] == ["scheduled"]
        assert events(ours, "Preempting") == []


# ---- 3: the nominated capacity is held -------------------------------------------------------------------------

ARRIVALS = [
    # id, newcomer (name, priority), newcomer bound to (node, device) or None, nomination of "hi" kept
    pytest.param(("sneaky", 15), None, True, id="lower-priority-waits"),
    pytest.param(("peer", 100), None, True, id="equal-priority-waits"),
    pytest.param(("boss", 1000), ("gpu-1", 1), False, id="higher-priority-takes-it-and-clears-the-nomination"),
]


@pytest.mark.parametrize("newcomer, newcomer_placed, kept", ARRIVALS)
def test_nominated_capacity_is_held_against_lower_priority_pods(newcomer: tuple[str, int],
                                                                newcomer_placed: tuple[str, int] | None,
                                                                kept: bool) -> None:
    """"hi" (priority 100) preempts c-victim on gpu-1 at t=0; c-victim terminates for 2 s
    (graceful termination emulated). hi's nomination, written by the extender during hi's
    cycle, reaches kube-scheduler after it: a status change, it leaves hi waiting in the pool
    for its victim. At t=0.5, while c-victim still terminates, a newcomer asks
    for the same 8 GiB. After the preemption the only lower-priority pod left on gpu-1 is
    a-lowest (priority 1, 4 GiB, device 0): evicting it never helps, so no newcomer below
    priority 300 can make room. A newcomer above hi takes what c-victim frees - waiting for it,
    not evicting d-guard (300) as well -, and hi's nomination is cleared."""
    nodes, pods = layout()
    for pod in pods:
        if pod["metadata"]["name"] == "c-victim":
            pod["spec"]["terminationGracePeriodSeconds"] = 2
    ours, scheduler = world(nodes, pods, max_virtual_seconds=120, graceful_termination=True)
    ours.cluster.add_pod(share_pod("hi", 8 * GiB, 100))
    who, priority = newcomer
    seen_at_arrival: dict[str, Any] = {}

    def arrive() -> None:
        seen_at_arrival["hi"] = pod_of(ours, "hi")
        seen_at_arrival["c-victim"] = pod_of(ours, "c-victim")
        ours.cluster.add_pod(share_pod(who, 8 * GiB, priority))

    scheduler.after(0.5, f"{who} arrives", arrive)
    scheduler.run()

    # at the newcomer's arrival, hi was nominated to gpu-1 and not bound, its victim terminating
    hi_then = seen_at_arrival["hi"]
    assert hi_then["status"].get("nominatedNodeName") == "gpu-1" and "nodeName" not in hi_then["spec"]
    assert seen_at_arrival["c-victim"]["metadata"]["deletionGracePeriodSeconds"] == 2
    timeline = [(round(c.time - scheduler.clock.start, 3), c.pod.split("/")[1], c.outcome) for c in scheduler.cycles]
    first, second = (who, "hi") if newcomer_placed else ("hi", who)
    assert timeline == [(0, "hi", "unschedulable"), (0.5, who, "unschedulable"),
                        (2, first, "scheduled"), (2, second, "unschedulable")]
    # kube-scheduler waits only for victims of its own preemption (DisruptionTarget reason
    # PreemptionByScheduler): the extender's eviction does not stop its dry run, which finds
    # nothing to evict for a resource it ignores
    assert scheduler.cycles[0].message.endswith('preemption: expected at least one victim pod on node "gpu-1".')
    assert events(ours, "Preempted") == ["default/c-victim"], "one preemption, nothing evicted for the newcomer"
    first_of_newcomer = next(c for c in scheduler.cycles if c.pod == f"default/{who}")

    hi = pod_of(ours, "hi")
    late = pod_of(ours, who)
    if newcomer_placed is None:
        # the newcomer was refused the held capacity, and hi took it once c-victim was gone
        assert "Insufficient example.com/gpu-memory on any single device" in first_of_newcomer.statuses["gpu-1"]
        assert "nodeName" not in late["spec"]
        assert hi["spec"]["nodeName"] == "gpu-1" and assignment(hi)["containers"]["main"]["devices"] == [1]
        assert events(ours, "NominationCleared") == [] and events(ours, "Preempting") == ["default/hi"]
    else:
        node, device = newcomer_placed
        assert late["spec"]["nodeName"] == node and assignment(late)["containers"]["main"]["devices"] == [device]
        # boss waited for c-victim instead of evicting more; hi lost its place: nomination cleared
        # with an Event, and nothing else can be freed for it
        assert events(ours, "Preempting") == ["default/hi", f"default/{who}"]
        assert "d-guard" in names(ours)
        assert events(ours, "NominationCleared") == ["default/hi"]
        assert "nodeName" not in hi["spec"] and "nominatedNodeName" not in hi["status"]
        assert scheduled_condition(hi)["reason"] == "Unschedulable"
    assert kept == (hi["spec"].get("nodeName") == "gpu-1")
    use = device_use(ours)
    assert all(m <= DEVICE for m, _, _ in use.values()), use
    assert use[("gpu-1", 1)][0] == DEVICE


def test_a_lower_priority_preemptor_does_not_evict_for_capacity_a_nominee_holds() -> None:
    """gpu-1: device 0 holds v-first (priority 5, 8 GiB) and x-useless (10, 8 GiB); device 1 is
    k-vip's (1000, 16 GiB); gpu-2 is full at priority 1000. "hi" (100, 8 GiB) evicts v-first and
    is nominated: the 8 GiB freed on device 0 are held for it. "big" (50, 16 GiB) arrives before
    hi binds. Evicting x-useless frees 8 GiB, but with hi's 8 GiB held device 0 never has 16 GiB
    for big: kube-scheduler's SelectVictimsOnNode counts nominated pods (RunFilterPluginsWith-
    NominatedPods) and finds no candidate; the README promises the held capacity does not fit
    pods of lower priority. Expected: x-useless stays, big waits without a nomination."""
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    pods = [holder("v-first", "gpu-1", 0, 8 * GiB, 5), holder("x-useless", "gpu-1", 0, 8 * GiB, 10),
            holder("k-vip", "gpu-1", 1, 16 * GiB, 1000),
            holder("s0", "gpu-2", 0, 16 * GiB, 1000), holder("s1", "gpu-2", 1, 16 * GiB, 1000)]
    ours, scheduler = world(nodes, pods, max_virtual_seconds=120)
    ours.cluster.add_pod(share_pod("hi", 8 * GiB, 100))
    def arrive() -> None:
        ours.cluster.add_pod(share_pod("big", 16 * GiB, 50))

    scheduler.after(0.5, "big arrives", arrive)
    scheduler.run()

    hi = pod_of(ours, "hi")
    assert hi["spec"]["nodeName"] == "gpu-1" and assignment(hi)["containers"]["main"]["devices"] == [0]
    assert "nodeName" not in pod_of(ours, "big")["spec"], "big can never fit: 8 GiB left on device 0"
    assert events(ours, "Preempted") == ["default/v-first"], "x-useless was evicted for nothing"
    assert events(ours, "Preempting") == ["default/hi"]


# ---- 4: fragmentation is reported, not mis-scheduled -------------------------------------------------------------

def test_fragmented_free_memory_is_explained_and_the_pod_stays_pending() -> None:
    """gpu-1 has 12 GiB free but 6 GiB per device; the 8 GiB pod has the holders' priority, so
    nothing may be preempted either."""
    nodes = [gpu_node("gpu-1"), make_node("cpu-only").obj()]
    pods = [holder("left", "gpu-1", 0, 10 * GiB, 0), holder("right", "gpu-1", 1, 10 * GiB, 0)]
    ours, scheduler = world(nodes, pods, max_virtual_seconds=60)
    ours.cluster.add_pod(share_pod("frag", 8 * GiB, 0))
    scheduler.run()

    pod = pod_of(ours, "frag")
    assert "nodeName" not in pod["spec"] and "nominatedNodeName" not in pod["status"]
    assert names(ours) == {"left", "right", "frag"} and events(ours, "Preempted") == []
    cond = scheduled_condition(pod)
    assert cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/2 nodes are available: ")
    assert "1 Insufficient example.com/gpu-memory on any single device" in cond["message"]
    assert "1 node(s) had no shareable devices" in cond["message"]
    assert all(c.outcome == "unschedulable" for c in scheduler.cycles if c.pod == "default/frag")

    client = ours.app.test_client()
    resp = client.get("/debug/pods/default/frag")
    assert resp.status_code == 200
    body = json.loads(resp.data)
    assert body["state"] == "pending"
    verdict = body["verdicts"]["filter"]
    assert verdict["outcome"] == "unschedulable" and verdict["feasible"] == []
    gpu = verdict["rejected"]["gpu-1"]
    assert gpu["code"] == "UNSCHEDULABLE"
    assert gpu["reasons"] == ["Insufficient example.com/gpu-memory on any single device"]
    assert gpu["detail"] == ("no single device with 8192 MiB free; largest free is 6144 MiB; "
                             "12288 MiB free in total across devices (fragmented)")
    assert verdict["rejected"]["cpu-only"]["code"] == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    # the Event the extender left on the pod points at that endpoint
    rejected = [e["message"] for e in ours.cluster.events if e["reason"] == "ExtenderFilterRejected"]
    assert rejected and rejected[-1].endswith("Details: /debug/pods/default/frag")
    # and nothing was placed behind its back: both devices still hold exactly their pod
    assert device_use(ours) == {("gpu-1", 0): (10 * GiB, 0, ["left"]), ("gpu-1", 1): (10 * GiB, 0, ["right"])}


# ---- 6: binpack vs spread at device level --------------------------------------------------------------------------

STREAM_NODES, STREAM_DEVICES = 4, 4


def stream(seed: int = 5, count: int = 40) -> list[dict[str, Any]]:
    """``count`` share pods, one per virtual second, 1-6 GiB each, some with a compute share."""
    rng = random.Random(seed)
    entries = []
    for i in range(count):
        requests = {MEM: str(rng.choice([1, 2, 2, 4, 4, 6]) * GiB)}
        if rng.random() < 0.3:
            requests[COMPUTE] = str(rng.choice([25, 50]))
        entries.append({"name": f"share-{i:02d}", "namespace": "ml", "requests": requests, "arrival": float(i)})
    return entries


@pytest.fixture(scope="module")
def stream_results() -> dict[str, tuple[OurServer, Scheduler, list[dict[str, Any]]]]:
    out = {}
    for strategy in ("MostAllocated", "LeastAllocated"):
        entries = stream()
        nodes = [gpu_node(f"gpu-{i}", STREAM_DEVICES) for i in range(STREAM_NODES)]
        ours, scheduler = world(nodes, [], strategy)
        parse_workload({"pods": entries}, seed=1).install(scheduler, ours.cluster)
        scheduler.run()
        out[strategy] = (ours, scheduler, entries)
    return out


@pytest.mark.parametrize("strategy", ["MostAllocated", "LeastAllocated"])
def test_stream_never_overcommits_a_device(stream_results: dict[str, Any], strategy: str) -> None:
    ours, scheduler, entries = stream_results[strategy]
    pods = [p for p in ours.cluster.pods() if p["metadata"]["namespace"] == "ml"]
    assert len(pods) == len(entries) and all(p["spec"].get("nodeName") for p in pods), "capacity is ample"
    assert scheduler.bind_failures == 0
    use = device_use(ours)
    over = {k: v for k, v in use.items() if v[0] > DEVICE or v[1] > 100}
    assert over == {}
    asked = {e["name"]: int(e["requests"][MEM]) for e in entries}
    assert sum(m for m, _, _ in use.values()) == sum(asked.values())
    for p in pods:
        doc = assignment(p)
        grant = doc["containers"]["main"]
        assert grant["memoryMiB"] == asked[p["metadata"]["name"]] and len(grant["devices"]) == 1
        assert 0 <= grant["devices"][0] < STREAM_DEVICES
    # the extender's own accounting agrees with the annotations, node by node
    snap = ours.snapshot()
    per_node: dict[str, int] = defaultdict(int)
    for (node, _), (m, _, _) in use.items():
        per_node[node] += m
    allocated = {n["name"]: int(n["allocated"].get(MEM, "0")) for n in snap["nodes"]}
    assert {name: m for name, m in allocated.items() if m} == dict(per_node)


def test_binpack_fills_fewer_devices_than_spread(stream_results: dict[str, Any]) -> None:
    used = {s: device_use(r[0]) for s, r in stream_results.items()}
    binpack_devices = len(used["MostAllocated"])
    spread_devices = len(used["LeastAllocated"])
    assert spread_devices == STREAM_NODES * STREAM_DEVICES, "spread touches every device"
    assert binpack_devices < spread_devices, (binpack_devices, spread_devices)
    assert {n for n, _ in used["LeastAllocated"]} == {f"gpu-{i}" for i in range(STREAM_NODES)}
    # spread keeps the devices even: no device holds more than twice the mean
    total = sum(m for m, _, _ in used["LeastAllocated"].values())
    assert max(m for m, _, _ in used["LeastAllocated"].values()) <= 2 * total / spread_devices


@pytest.mark.parametrize("strategy", ["MostAllocated", "LeastAllocated"])
def test_every_device_choice_follows_the_strategy(stream_results: dict[str, Any], strategy: str) -> None:
    """Replays the stream in scheduling order: on the node it got, every pod went to the device
    the strategy names - binpack the fitting device with the least free memory (then compute),
    spread the one with the most; ties to the lower id."""
    ours, scheduler, entries = stream_results[strategy]
    asked = {f"ml/{e['name']}": (int(e["requests"][MEM]), int(e["requests"].get(COMPUTE, 0))) for e in entries}
    pods = {f"ml/{p['metadata']['name']}": p for p in ours.cluster.pods()}
    order = [c.pod for c in scheduler.cycles if c.outcome == "scheduled"]
    assert sorted(order) == sorted(asked), "each pod scheduled exactly once"
    mem: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[tuple[str, int], int] = defaultdict(int)
    sign = 1 if strategy == "MostAllocated" else -1
    for key in order:
        pod = pods[key]
        node = pod["spec"]["nodeName"]
        (device,) = assignment(pod)["containers"]["main"]["devices"]
        want_mem, want_cpu = asked[key]
        free = {d: (DEVICE - mem[(node, d)], 100 - cpu[(node, d)]) for d in range(STREAM_DEVICES)}
        fitting = [d for d, (m, c) in free.items() if m >= want_mem and c >= want_cpu]
        expected = min(fitting, key=lambda d: (sign * free[d][0], sign * free[d][1], d))
        assert device == expected, (key, node, free, device)
        mem[(node, device)] += want_mem
        cpu[(node, device)] += want_cpu


def test_binpack_puts_the_second_small_share_on_the_node_already_in_use() -> None:
    """README: ``scoringStrategy: {type: MostAllocated}   # binpack devices and nodes``. Two 4 GiB
    pods, one second apart, on two idle nodes of 4 x 16 GiB: the second must join the first."""
    nodes = [gpu_node("gpu-0", 4), gpu_node("gpu-1", 4)]
    ours, scheduler = world(nodes, [], "MostAllocated")
    parse_workload({"pods": [{"name": "first", "requests": {MEM: str(4 * GiB)}, "arrival": 0.0},
                             {"name": "second", "requests": {MEM: str(4 * GiB)}, "arrival": 1.0}]},
                   seed=1).install(scheduler, ours.cluster)
    scheduler.run()
    first = pod_of(ours, "first")["spec"]["nodeName"]
    second = pod_of(ours, "second")["spec"]["nodeName"]
    assert second == first, (first, second, [c.reply for c in ours.calls("prioritize")])
