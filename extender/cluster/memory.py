"""MemoryCluster: an in-memory cluster that is both a ClusterSource and a ClusterWriter.

Used for the embedded demo cluster, ``--cluster FILE``, tests and simulation. Writes behave like
the API server where the extender depends on it: a Binding with a UID precondition (409-style
conflict when the UID differs or the pod is bound elsewhere, success when already bound to the
same node), evictions that honour PodDisruptionBudgets, resourceVersions that increase on every
write. PodGroups and ElasticQuotas (``scheduling.x-k8s.io``) are delivered like
PodDisruptionBudgets, and can be added, replaced and deleted directly (``add_pod_group``,
``delete_pod_group``, ``add_elastic_quota``, ``delete_elastic_quota``). Every change is
delivered synchronously to the subscribed sinks, so a bind is visible in the cache before
``bind`` returns. Stored objects are never mutated: each write stores a copy.

Deleting or evicting a pod removes it at once unless a kubelet is emulated (``graceful``): a
bound pod then terminates as it does in a cluster - marked deleting, still on its node, gone
after its grace period.

An object a sink refuses as malformed (a bad quantity, a status that is not an object) is
skipped - logged and counted in ``skipped`` and, given ``metrics``, in
``kube_extender_skipped_objects_total{kind}`` as the Kubernetes source counts it - and the rest
is served.
"""

from __future__ import annotations

import logging
from copy import deepcopy as _deepcopy
from dataclasses import replace
import threading
from collections import deque
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, Callable, Mapping

from extender.cluster.interfaces import ClusterEvents
from extender.cluster.objects import load_file, load_objects
from extender.framework.disruption import Budget, budget_checked
from extender.framework.handle import WriteError
from extender.framework.views import TERMINAL_PHASES, PodInfo, pod_key
from extender.metrics import Metrics

log = logging.getLogger(__name__)


DEFAULT_GRACE_SECONDS = 30
"""A pod's ``spec.terminationGracePeriodSeconds`` when it sets none (the API server's default)."""

Kubelet = Callable[[float, Callable[[], None]], str]
"""``(seconds, finish)``: run ``finish`` that many seconds from now - the kubelet ending a pod's
graceful termination - and return that moment as the pod's ``deletionTimestamp`` (RFC 3339)."""


def _budget_view(pod: Mapping[str, Any]) -> PodInfo | None:
    """What a disruption budget reads of ``pod`` (its requests left out), None when malformed."""
    try:
        return PodInfo.from_pod(pod, ())
    except (ValueError, TypeError, ArithmeticError):
        return None


def _controller(pod: Mapping[str, Any]) -> str | None:
    """The UID of the pod's controller (its ownerReference with ``controller: true``), if any."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            # the API server requires the uid; a hand-written file may leave it out
            return str(ref.get("uid") or f"{ref.get('apiVersion')}/{ref.get('kind')}/{ref.get('name')}")
    return None


def _key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return pod_key(str(meta.get("namespace") or "default"), str(meta.get("name")))


class MemoryCluster:
    def __init__(self, objects: Mapping[str, list[dict[str, Any]]] | None = None, *,
                 metrics: Metrics | None = None, event_log: int | None = 2000) -> None:
        """``event_log``: how many recorded Events ``events`` keeps (None: all, as a simulation
        whose report reads them needs; a long-running served cluster keeps the latest)."""
        objects = objects or {}
        self.metrics = metrics
        self._lock = threading.RLock()
        self._rv = 0
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._pdbs: list[dict[str, Any]] = list(objects.get("PodDisruptionBudget", []))
        self._disrupted: dict[str, dict[str, tuple[str, str | None]]] = {}
        """Per budget (``namespace/name``): the pods evicted through it and not replaced yet, name
        -> (UID, its controller's UID), oldest first - what ``status.disruptedPods`` and the controller's scale keep
        counting in a cluster: expected, not healthy (``_violates``)."""
        self._pod_groups: dict[str, dict[str, Any]] = {}
        self._quotas: dict[str, dict[str, Any]] = {}
        self._sinks: list[ClusterEvents] = []
        self._kubelet: Kubelet | None = None
        self.events: deque[dict[str, Any]] = deque(maxlen=event_log)
        self.skipped = 0
        # The cluster takes ownership of the given objects (no copy: a 5,000-node file is big);
        # from then on, every write stores a fresh copy.
        for node in objects.get("Node", []):
            self._nodes[node["metadata"]["name"]] = self._stamp(node, copy=False)
        for pod in objects.get("Pod", []):
            pod = self._stamp(pod, copy=False)
            pod["metadata"].setdefault("namespace", "default")
            self._pods[_key_of(pod)] = pod
        for kind, store in (("PodGroup", self._pod_groups), ("ElasticQuota", self._quotas)):
            for obj in objects.get(kind, []):
                obj = self._stamp(obj, copy=False)
                obj["metadata"].setdefault("namespace", "default")
                store[_key_of(obj)] = obj

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> MemoryCluster:
        return cls(load_file(path), **options)

    @classmethod
    def from_text(cls, text: str, origin: str = "<cluster>", **options: Any) -> MemoryCluster:
        return cls(load_objects(text, origin), **options)

    @classmethod
    def demo(cls, **options: Any) -> MemoryCluster:
        """The embedded demo cluster shipped in the package."""
        text = importlib_resources.files("extender.cluster").joinpath("data/demo-cluster.yaml").read_text()
        return cls.from_text(text, "demo-cluster.yaml", **options)

    def _stamp(self, obj: Mapping[str, Any], copy: bool = True) -> dict[str, Any]:
        """``obj`` (a private copy unless ``copy`` is False) with the next resourceVersion."""
        stored: dict[str, Any] = _deepcopy(dict(obj)) if copy else obj  # type: ignore[assignment]
        self._rv += 1
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        return stored

    # ---- source -----------------------------------------------------------------------------

    def start(self, sink: ClusterEvents) -> None:
        with self._lock:
            for node in self._nodes.values():
                self._deliver(sink.upsert_node, node, "node")
            for pod in self._pods.values():
                self._deliver(sink.upsert_pod, pod, "pod")
            for pdb in self._pdbs:
                self._deliver(sink.upsert_pdb, pdb, "pdb")
            for kind, store in (("podgroup", self._pod_groups), ("elasticquota", self._quotas)):
                for obj in store.values():
                    self._deliver(self._sink_calls(sink, kind)[0], obj, kind)
            self._sinks.append(sink)
        sink.mark_synced()

    def stop(self, timeout: float | None = None) -> None:
        """Stop delivering to the sinks (at once: a memory cluster has no threads)."""
        with self._lock:
            self._sinks.clear()

    def _deliver(self, fn: Any, obj: Any, kind: str) -> None:
        try:
            fn(obj)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.skipped += 1
            if self.metrics is not None:
                self.metrics.skipped.labels(kind=kind).inc()
            name = _key_of(obj) if kind != "node" else str((obj.get("metadata") or {}).get("name"))
            log.warning("skipping malformed object", extra={"kind": kind, "object": name, "error": str(exc)})

    def _publish_pod(self, pod: dict[str, Any]) -> None:
        for sink in list(self._sinks):
            self._deliver(sink.upsert_pod, pod, "pod")

    # ---- direct changes (tests, simulation) ------------------------------------------------

    def add_node(self, node: Mapping[str, Any]) -> None:
        with self._lock:
            node = self._stamp(node)
            self._nodes[node["metadata"]["name"]] = node
            for sink in list(self._sinks):
                self._deliver(sink.upsert_node, node, "node")

    def delete_node(self, name: str) -> None:
        with self._lock:
            if self._nodes.pop(name, None) is not None:
                for sink in list(self._sinks):
                    sink.remove_node(name)

    def add_pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a pod; returns the stored copy. A new pod (or a new UID) that a
        budget covers replaces a pod evicted through it: the one of its name, else the oldest."""
        with self._lock:
            stored = self._stamp(pod)
            stored["metadata"].setdefault("namespace", "default")
            key = _key_of(stored)
            previous = self._pods.get(key)
            if previous is None or previous["metadata"].get("uid") != stored["metadata"].get("uid"):
                self._replaces(stored)
            self._pods[key] = stored
            self._publish_pod(stored)
            return stored

    def _replaces(self, pod: Mapping[str, Any]) -> None:
        """A new ``pod`` a budget covers replaces the evicted one of its name (a StatefulSet's),
        else the oldest evicted by the same controller (either without one: the oldest): a pod
        of another workload the budget covers adds to the expected count, as its scale grew."""
        if not any(self._disrupted.values()):  # nothing evicted waits for a replacement
            return
        view = _budget_view(pod)
        if view is None or view.terminal:
            return
        for pdb in self._pdbs:
            disrupted = self._disrupted.get(_key_of(pdb))
            if disrupted and Budget.from_object(pdb).covers(view):
                mine = _controller(pod)
                gone = view.name if view.name in disrupted else next(
                    (n for n, (_, owner) in disrupted.items() if mine is None or owner is None or owner == mine), None)
                if gone is not None:
                    del disrupted[gone]

    def graceful(self, kubelet: Kubelet | None) -> None:
        """Emulate graceful termination from now on (None: delete at once again, as by default).
        Deleting or evicting a pod bound to a node, not terminal, then does what the API server
        does: the pod stays, still on its node, with ``metadata.deletionTimestamp`` and
        ``deletionGracePeriodSeconds`` - the grace asked for, else its
        ``spec.terminationGracePeriodSeconds``, else 30 - and ``kubelet`` removes it that many
        seconds later. A pod with no node, a terminal one, or a grace of 0 (a force delete) goes
        at once - a terminating one too; deleting a pod already terminating with any other grace
        changes nothing (its grace is not shortened)."""
        with self._lock:
            self._kubelet = kubelet

    def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> bool:
        """Delete the pod (gracefully when a kubelet is emulated: ``graceful``); False when
        there is no such pod."""
        with self._lock:
            pod = self._pods.get(pod_key(namespace, name))
            if pod is None:
                return False
            grace = self._grace(pod, grace_period_seconds)
            if grace is None:
                self._remove_pod(pod)
            elif not pod["metadata"].get("deletionTimestamp"):
                self._begin_termination(pod, grace)
            return True

    def _grace(self, pod: Mapping[str, Any], asked: int | None) -> int | None:
        """The seconds ``pod`` takes to terminate when deleted now; None: it goes at once."""
        spec = pod.get("spec") or {}
        if self._kubelet is None or not spec.get("nodeName") or \
                (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return None
        own = spec.get("terminationGracePeriodSeconds")
        grace = asked if asked is not None else own if isinstance(own, int) else DEFAULT_GRACE_SECONDS
        return grace if grace > 0 else None

    def _begin_termination(self, pod: Mapping[str, Any], grace: int) -> None:
        assert self._kubelet is not None
        namespace, name = str(pod["metadata"].get("namespace") or "default"), str(pod["metadata"].get("name"))
        uid = pod["metadata"].get("uid")

        def finish() -> None:  # the kubelet is done: the pod goes, unless it went or was replaced
            with self._lock:
                current = self._pods.get(pod_key(namespace, name))
                if current is not None and current["metadata"].get("uid") == uid:
                    self._remove_pod(current)

        stored = self._stamp(pod)
        stored["metadata"]["deletionTimestamp"] = self._kubelet(grace, finish)
        stored["metadata"]["deletionGracePeriodSeconds"] = grace
        self._pods[pod_key(namespace, name)] = stored
        self._publish_pod(stored)

    def _remove_pod(self, pod: Mapping[str, Any]) -> None:
        self._pods.pop(_key_of(pod), None)
        for sink in list(self._sinks):
            sink.remove_pod(pod)

    def add_pod_group(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a PodGroup; returns the stored copy."""
        return self._add_custom(self._pod_groups, group, "podgroup")

    def delete_pod_group(self, namespace: str, name: str) -> bool:
        return self._delete_custom(self._pod_groups, namespace, name, "podgroup")

    def pod_groups(self) -> list[dict[str, Any]]:
        with self._lock:
            return [_deepcopy(g) for g in self._pod_groups.values()]

    def add_elastic_quota(self, quota: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an ElasticQuota; returns the stored copy."""
        return self._add_custom(self._quotas, quota, "elasticquota")

    def delete_elastic_quota(self, namespace: str, name: str) -> bool:
        return self._delete_custom(self._quotas, namespace, name, "elasticquota")

    def _sink_calls(self, sink: ClusterEvents, kind: str) -> tuple[Any, Any]:
        """(upsert, remove) of ``sink`` for a custom ``kind``."""
        if kind == "podgroup":
            return sink.upsert_pod_group, sink.remove_pod_group
        return sink.upsert_elastic_quota, sink.remove_elastic_quota

    def _add_custom(self, store: dict[str, dict[str, Any]], obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
        with self._lock:
            stored = self._stamp(obj)
            stored["metadata"].setdefault("namespace", "default")
            store[_key_of(stored)] = stored
            for sink in list(self._sinks):
                self._deliver(self._sink_calls(sink, kind)[0], stored, kind)
            return stored

    def _delete_custom(self, store: dict[str, dict[str, Any]], namespace: str, name: str, kind: str) -> bool:
        with self._lock:
            obj = store.pop(pod_key(namespace, name), None)
            if obj is None:
                return False
            for sink in list(self._sinks):
                self._sink_calls(sink, kind)[1](obj)
            return True

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            pod = self._pods.get(pod_key(namespace, name))
            return _deepcopy(pod) if pod is not None else None

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return [_deepcopy(p) for p in self._pods.values()]

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            return [_deepcopy(n) for n in self._nodes.values()]

    # ---- writer -----------------------------------------------------------------------------

    def _pod_for_write(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self._pods.get(pod_key(namespace, name))
        if pod is None:
            raise WriteError(f'pods "{name}" not found in namespace {namespace}')
        return pod

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        with self._lock:
            pod = self._pod_for_write(namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise WriteError(f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                 f"{pod['metadata'].get('uid')}", conflict=True)
            current = (pod.get("spec") or {}).get("nodeName")
            if current == node:
                return
            if current:
                raise WriteError(f'pod {name} is already assigned to node "{current}"', conflict=True)
            if node not in self._nodes:
                raise WriteError(f'nodes "{node}" not found')
            stored = self._stamp(pod)
            stored["spec"]["nodeName"] = node
            if annotations:
                stored["metadata"]["annotations"] = {**(stored["metadata"].get("annotations") or {}), **annotations}
            status = stored.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True"})
            status["conditions"] = conditions
            self._pods[pod_key(namespace, name)] = stored
            self._publish_pod(stored)

    def bound_node(self, namespace: str, name: str, uid: str) -> str | None:
        with self._lock:
            pod = self._pods.get(pod_key(namespace, name))
            if pod is None or pod["metadata"].get("uid") != uid:
                return None
            return (pod.get("spec") or {}).get("nodeName") or None

    def patch_pod_metadata(self, namespace: str, name: str, *, annotations: Mapping[str, str | None] | None = None,
                           labels: Mapping[str, str | None] | None = None,
                           resource_version: str | None = None, uid: str | None = None) -> None:
        with self._lock:
            pod = self._pod_for_write(namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise WriteError(f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                 f"{pod['metadata'].get('uid')}", conflict=True)
            if resource_version is not None and pod["metadata"].get("resourceVersion") != resource_version:
                raise WriteError(f"the object has been modified (resourceVersion {resource_version} is stale)",
                                 conflict=True)
            stored = self._stamp(pod)
            for field_name, changes in (("annotations", annotations), ("labels", labels)):
                if not changes:
                    continue
                target = dict(stored["metadata"].get(field_name) or {})
                for k, v in changes.items():
                    if v is None:
                        target.pop(k, None)
                    else:
                        target[k] = v
                stored["metadata"][field_name] = target
            self._pods[pod_key(namespace, name)] = stored
            self._publish_pod(stored)

    def evict(self, namespace: str, name: str, uid: str, grace_period_seconds: int | None = None) -> None:
        with self._lock:
            pod = self._pod_for_write(namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise WriteError(f"pod {namespace}/{name} has a different UID", conflict=True)
            if pod["metadata"].get("deletionTimestamp"):
                return  # terminating already: the Eviction API accepts it without a budget check
            target = _budget_view(pod)
            covering = [pdb for pdb in self._pdbs
                        if target is not None and not target.terminal and Budget.from_object(pdb).covers(target)]
            # two budgets: the API server's 500, unless it checks no budget of the pod - Pending
            # included (a pod bound here stays Pending, no kubelet starts it: one budget is
            # still checked for it, as for the running pod it stands for)
            if len(covering) > 1 and target is not None and budget_checked(target):
                raise WriteError("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                 "does not support.")
            for pdb in covering:
                if self._violates(pdb):
                    raise WriteError("Cannot evict pod as it would violate the pod's disruption budget.",
                                     conflict=True)
            self.delete_pod(namespace, name, grace_period_seconds)
            for pdb in covering:  # recorded in its budget's status.disruptedPods
                self._disrupted.setdefault(_key_of(pdb), {})[name] = (pod["metadata"].get("uid", ""), _controller(pod))

    def _violates(self, pdb: Mapping[str, Any]) -> bool:
        """Would evicting one more pod ``pdb`` covers go beyond its allowance? Counted live, as the
        disruption controller counts (``Budget.allowed``, the arithmetic the extender's
        preemption uses), whatever status the object carries: this cluster writes none. The pods
        evicted through it that are gone and not replaced (``_disrupted``) stay expected and
        unhealthy, as their controller's scale and ``status.disruptedPods`` keep them in a
        cluster; one still terminating counts as any pod being deleted."""
        budget = replace(Budget.from_object(pdb), disruptions_allowed=None)
        followed = [v for v in map(_budget_view, self._pods.values()) if v is not None and budget.covers(v)]
        present = {v.name for v in followed}
        absent = sum(1 for name in self._disrupted.get(_key_of(pdb), {}) if name not in present)
        return budget.allowed(followed, absent=absent) < 1

    def remove_scheduling_gate(self, namespace: str, name: str, gate: str, uid: str | None = None) -> None:
        with self._lock:
            pod = self._pod_for_write(namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise WriteError(f"pod {namespace}/{name} has a different UID", conflict=True)
            gates = (pod.get("spec") or {}).get("schedulingGates") or []
            remaining = [g for g in gates if not (isinstance(g, dict) and g.get("name") == gate)]
            if len(remaining) == len(gates):
                return
            stored = self._stamp(pod)
            if remaining:
                stored["spec"]["schedulingGates"] = remaining
            else:
                stored["spec"].pop("schedulingGates", None)
            self._pods[pod_key(namespace, name)] = stored
            self._publish_pod(stored)

    def update_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, Any]) -> None:
        """Write status fields of the pod with this UID, as a strategic merge patch of
        ``pods/<name>/status`` does: each key replaces the pod's (None removes it), except
        ``conditions``, merged by ``type``."""
        with self._lock:
            pod = self._pod_for_write(namespace, name)
            if uid and pod["metadata"].get("uid") != uid:
                raise WriteError(f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                 f"{pod['metadata'].get('uid')}", conflict=True)
            stored = self._stamp(pod)
            current = stored.setdefault("status", {})
            for key, value in status.items():
                if key == "conditions":
                    given = {c.get("type") for c in value}
                    current["conditions"] = [c for c in current.get("conditions") or []
                                             if c.get("type") not in given] + [dict(c) for c in value]
                elif value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            self._pods[pod_key(namespace, name)] = stored
            self._publish_pod(stored)

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        with self._lock:
            stored = self._stamp(self._pod_for_write(namespace, name))
            status = stored.setdefault("status", {})
            if node:
                status["nominatedNodeName"] = node
            else:
                status.pop("nominatedNodeName", None)
            self._pods[pod_key(namespace, name)] = stored
            self._publish_pod(stored)

    def record_event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
                     related: Mapping[str, Any] | None = None) -> None:
        meta = obj.get("metadata") or {}
        event = {"object": f"{meta.get('namespace', '')}/{meta.get('name', '')}", "uid": meta.get("uid", ""),
                 "type": type_, "reason": reason, "message": message}
        if related is not None:
            other = related.get("metadata") or {}
            event["related"] = {"object": f"{other.get('namespace') or 'default'}/{other.get('name', '')}",
                                "uid": other.get("uid", "")}
        self.events.append(event)
