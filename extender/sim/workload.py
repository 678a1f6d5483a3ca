"""Workload files: which pods arrive when, and when they go away.

A YAML document, either a list of entries or ``{pods: [...]}`` (``apiVersion``/``kind`` optional:
``kube-extender.io/v1alpha1``, ``Workload``). Each entry is one of:

* **compact**::

      - name: infer                 # required; with count > 1: infer-0, infer-1, ...
        namespace: ml               # default "default"
        count: 4                    # default 1
        interval: 0.5               # seconds between the copies' arrivals (default 0)
        arrival: 2                  # seconds after the start (default 0)
        priority: 1000              # or priorityClassName: <a PriorityClass of the cluster file>
        requests: {cpu: "1", memory: 2Gi, example.com/gpu: 1}
        limits: {example.com/gpu: 1}
        schedulerName: default-scheduler
        preemptionPolicy: Never     # default PreemptLowerPriority
        labels: {app: infer}
        nodeSelector: {topology.kubernetes.io/zone: zone-a}
        tolerations: [{key: dedicated, operator: Exists}]
        gates: [example.com/quota]  # spec.schedulingGates
        ungateAfter: 5              # seconds after arrival the gates are removed
        deleteAfter: 30             # seconds after the pod is bound it completes and is deleted

* **full**: ``pod: <a Pod object>`` with the same ``count``/``interval``/``arrival``/
  ``ungateAfter``/``deleteAfter`` keys (``metadata.name`` gets the ``-<i>`` suffix with count).

Pods are created as the API server would store them: ``uid`` (deterministic from the seed),
``creationTimestamp`` (virtual arrival time), ``schedulerName``, ``priority`` from the class,
``preemptionPolicy``, the default not-ready/unreachable tolerations, and a missing request
defaulted from its limit. Every problem is reported with the entry that has it.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from extender.framework.resources import QuantityError, milli

WORKLOAD_KIND = "Workload"
_COMPACT_KEYS = {"name", "namespace", "count", "interval", "arrival", "priority", "priorityClassName", "requests",
                 "limits", "schedulerName", "preemptionPolicy", "labels", "nodeSelector", "tolerations", "gates",
                 "ungateAfter", "deleteAfter", "annotations"}
_FULL_KEYS = {"pod", "count", "interval", "arrival", "ungateAfter", "deleteAfter"}
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)
_UID_NAMESPACE = uuid.UUID("6b756265-2d65-7874-656e-6465722d7369")


class WorkloadError(ValueError):
    """An invalid workload; the message names the file and entry."""


@dataclass
class WorkloadPod:
    at: float
    pod: dict[str, Any]
    delete_after: float | None = None
    ungate_after: float | None = None

    @property
    def key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta['namespace']}/{meta['name']}"


@dataclass
class Workload:
    pods: list[WorkloadPod] = field(default_factory=list)
    origin: str = "<workload>"

    @property
    def last_arrival(self) -> float:
        return max((p.at for p in self.pods), default=0.0)

    def install(self, scheduler: Any, cluster: Any) -> None:
        """Schedule the arrivals, ungatings and deletions on ``scheduler`` (an
        ``extender.sim.scheduler.Scheduler``), writing to ``cluster``."""
        start = scheduler.clock.now()
        delete_after: dict[str, float] = {}
        for wp in self.pods:
            pod = wp.pod
            scheduler.at(start + wp.at, f"create {wp.key}", _creator(cluster, pod))
            if wp.ungate_after is not None:
                meta = pod["metadata"]
                scheduler.at(start + wp.at + wp.ungate_after, f"ungate {wp.key}",
                             _ungater(cluster, meta["namespace"], meta["name"]))
            if wp.delete_after is not None:
                delete_after[pod["metadata"]["uid"]] = wp.delete_after

        def on_bound(trace: Any) -> None:
            seconds = delete_after.get(trace.uid)
            if seconds is not None:
                ns, name = trace.key.split("/", 1)
                scheduler.after(seconds, f"delete {trace.key}", lambda: cluster.delete_pod(ns, name))

        scheduler.on_bound.append(on_bound)


def _creator(cluster: Any, pod: Mapping[str, Any]) -> Callable[[], None]:
    """Creates ``pod``: the cluster keeps a copy of its own (``ClusterLike.add_pod`` reads a
    Mapping), so the workload's pod stays as it is without a copy here."""
    return lambda: cluster.add_pod(pod)


def _ungater(cluster: Any, namespace: str, name: str) -> Callable[[], None]:
    def ungate() -> None:
        current = cluster.get_pod(namespace, name)
        if current is not None and (current.get("spec") or {}).get("schedulingGates"):
            current["spec"]["schedulingGates"] = []
            cluster.add_pod(current)
    return ungate


def _seconds(value: Any, where: str, key: str, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise WorkloadError(f"{where}: {key} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _resources(value: Any, where: str, key: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: {key} must be a map of resource name to quantity")
    out = {}
    for name, qty in value.items():
        try:
            milli(qty)
        except QuantityError as exc:
            raise WorkloadError(f"{where}: {key}.{name}: {exc}") from exc
        out[str(name)] = str(qty)
    return out


def _string_map(value: Any, where: str, key: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise WorkloadError(f"{where}: {key} must be a map of strings")
    return {str(k): v for k, v in value.items()}


def default_requests(pod: dict[str, Any]) -> None:
    """The API server's defaulting: a limit without a request gives the request (§13.2)."""
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.setdefault("resources", {})
            limits = res.get("limits") or {}
            if limits:
                requests = res.setdefault("requests", {})
                for name, qty in limits.items():
                    requests.setdefault(name, qty)


def _priority(spec: dict[str, Any], classes: Mapping[str, Mapping[str, Any]], where: str) -> None:
    name = spec.get("priorityClassName")
    if spec.get("priority") is not None:
        if isinstance(spec["priority"], bool) or not isinstance(spec["priority"], int):
            raise WorkloadError(f"{where}: priority must be an integer")
        return
    if name:
        pc = classes.get(name)
        if pc is None:
            known = ", ".join(sorted(classes)) or "none"
            raise WorkloadError(f"{where}: unknown priorityClassName {name!r} (classes in the cluster: {known})")
    else:
        pc = next((c for c in classes.values() if c.get("globalDefault")), None)
    spec["priority"] = int(pc.get("value", 0)) if pc is not None else 0
    if pc is not None and pc.get("preemptionPolicy"):
        spec.setdefault("preemptionPolicy", pc["preemptionPolicy"])


def _finish(pod: dict[str, Any], name: str, namespace: str, at: float, seed: int, epoch: float,
            classes: Mapping[str, Mapping[str, Any]], where: str) -> dict[str, Any]:
    meta = pod.setdefault("metadata", {})
    meta["name"], meta["namespace"] = name, namespace
    meta.setdefault("uid", str(uuid.uuid5(_UID_NAMESPACE, f"{seed}/{namespace}/{name}")))
    meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch + at)))
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    _priority(spec, classes, where)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if spec["preemptionPolicy"] not in ("PreemptLowerPriority", "Never"):
        raise WorkloadError(f"{where}: preemptionPolicy must be PreemptLowerPriority or Never")
    tolerations = spec.setdefault("tolerations", [])
    for t in DEFAULT_TOLERATIONS:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tolerations):
            tolerations.append(dict(t))
    pod.setdefault("status", {"phase": "Pending"})
    pod["status"].pop("nominatedNodeName", None)
    spec.pop("nodeName", None)
    default_requests(pod)
    return pod


def _compact(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(entry) - _COMPACT_KEYS)
    if unknown:
        raise WorkloadError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_COMPACT_KEYS))})")
    requests = _resources(entry.get("requests"), where, "requests")
    limits = _resources(entry.get("limits"), where, "limits")
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {}}
    if requests:
        container["resources"]["requests"] = requests
    if limits:
        container["resources"]["limits"] = limits
    spec: dict[str, Any] = {"containers": [container]}
    for key in ("schedulerName", "priorityClassName", "preemptionPolicy"):
        if entry.get(key) is not None:
            if not isinstance(entry[key], str):
                raise WorkloadError(f"{where}: {key} must be a string")
            spec[key] = entry[key]
    if entry.get("priority") is not None:
        spec["priority"] = entry["priority"]
    if entry.get("nodeSelector") is not None:
        spec["nodeSelector"] = _string_map(entry["nodeSelector"], where, "nodeSelector")
    if entry.get("tolerations") is not None:
        if not isinstance(entry["tolerations"], list) or not all(isinstance(t, Mapping) for t in entry["tolerations"]):
            raise WorkloadError(f"{where}: tolerations must be a list of tolerations")
        spec["tolerations"] = [dict(t) for t in entry["tolerations"]]
    gates = entry.get("gates")
    if gates is not None:
        if not isinstance(gates, list) or not all(isinstance(g, str) and g for g in gates):
            raise WorkloadError(f"{where}: gates must be a list of gate names")
        spec["schedulingGates"] = [{"name": g} for g in gates]
    meta: dict[str, Any] = {}
    if entry.get("labels") is not None:
        meta["labels"] = _string_map(entry["labels"], where, "labels")
    if entry.get("annotations") is not None:
        meta["annotations"] = _string_map(entry["annotations"], where, "annotations")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def parse_workload(data: Any, *, origin: str = "<workload>", seed: int = 0,
                   priority_classes: Mapping[str, Mapping[str, Any]] | None = None,
                   epoch: float = 1_767_225_600.0) -> Workload:
    """Validate and expand a decoded workload document. Raises WorkloadError."""
    classes = dict(priority_classes or {})
    if isinstance(data, Mapping):
        if data.get("kind") not in (None, WORKLOAD_KIND):
            raise WorkloadError(f"{origin}: kind must be {WORKLOAD_KIND}, got {data.get('kind')!r}")
        entries = data.get("pods")
        if entries is None:
            raise WorkloadError(f"{origin}: expected a list of pod entries or a mapping with 'pods'")
    else:
        entries = data
    if not isinstance(entries, list):
        raise WorkloadError(f"{origin}: pods must be a list of entries")
    out = Workload(origin=origin)
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        label = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(entry, Mapping) and isinstance(entry.get("pod"), Mapping):
            label = (entry["pod"].get("metadata") or {}).get("name")
        where = f"{origin} entry {i + 1}" + (f" ({label})" if label else "")
        if not isinstance(entry, Mapping):
            raise WorkloadError(f"{where}: expected a mapping, got {type(entry).__name__}")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise WorkloadError(f"{where}: count must be an integer >= 1")
        arrival = _seconds(entry.get("arrival", 0), where, "arrival", False) or 0.0
        interval = _seconds(entry.get("interval", 0), where, "interval", False) or 0.0
        delete_after = _seconds(entry.get("deleteAfter"), where, "deleteAfter")
        ungate_after = _seconds(entry.get("ungateAfter"), where, "ungateAfter")
        if "pod" in entry:
            unknown = sorted(set(entry) - _FULL_KEYS)
            if unknown:
                raise WorkloadError(f"{where}: with 'pod', only {', '.join(sorted(_FULL_KEYS))} are allowed; "
                                    f"got {', '.join(unknown)}")
            template = entry["pod"]
            if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
                raise WorkloadError(f"{where}: pod must be a Pod object with a spec")
            meta = template.get("metadata") or {}
            base, namespace = meta.get("name"), meta.get("namespace") or "default"
            template = copy.deepcopy(dict(template))
        else:
            base, namespace = entry.get("name"), entry.get("namespace") or "default"
            if not isinstance(base, str) or not base:
                raise WorkloadError(f"{where}: name is required")
            template = _compact(entry, where)
        if not isinstance(base, str) or not base:
            raise WorkloadError(f"{where}: metadata.name is required")
        if not isinstance(namespace, str):
            raise WorkloadError(f"{where}: namespace must be a string")
        if ungate_after is not None and not (template.get("spec") or {}).get("schedulingGates"):
            raise WorkloadError(f"{where}: ungateAfter needs gates")
        for k in range(count):
            name = base if count == 1 else f"{base}-{k}"
            key = f"{namespace}/{name}"
            if key in seen:
                raise WorkloadError(f"{where}: duplicate pod {key}")
            seen.add(key)
            at = arrival + k * interval
            pod = copy.deepcopy(template)
            if count > 1:
                pod.setdefault("metadata", {}).pop("uid", None)  # each copy gets its own
            try:
                _finish(pod, name, namespace, at, seed, epoch, classes, where)
            except (QuantityError, TypeError, ValueError) as exc:
                if isinstance(exc, WorkloadError):
                    raise
                raise WorkloadError(f"{where}: {exc}") from exc
            out.pods.append(WorkloadPod(at, pod, delete_after, ungate_after))
    out.pods.sort(key=lambda p: p.at)
    return out


def load_workload(path: str | Path, **kwargs: Any) -> Workload:
    """The workload in the UTF-8 YAML file ``path`` (``kwargs`` as for :func:`parse_workload`).

    Raises :class:`WorkloadError` naming the file when it cannot be read, is not UTF-8 text or
    not YAML, and naming the entry when an entry is invalid."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p}: not UTF-8 text (byte {exc.start}): a workload file is YAML") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{p}: not valid YAML: {exc}") from exc
    return parse_workload(data, origin=str(p), **kwargs)


def cluster_extras(text: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """PriorityClasses (by name) and PodDisruptionBudgets from a cluster YAML file (multi-document
    or a ``List``), for workload priorities and preemption."""
    classes: dict[str, dict[str, Any]] = {}
    pdbs: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(text):
        if not isinstance(doc, dict):
            continue
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
        for obj in items or []:
            if not isinstance(obj, dict):
                continue
            name = (obj.get("metadata") or {}).get("name")
            if obj.get("kind") == "PriorityClass" and name:
                classes[name] = obj
            elif obj.get("kind") == "PodDisruptionBudget":
                pdbs.append(obj)
    return classes, pdbs
