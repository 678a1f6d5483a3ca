"""ApiClusterView: the emulated kube-scheduler's cluster, over an API server (``ClusterLike``).

What kube-scheduler itself does, through the same client code the extender uses:

* **Informer**: a :class:`~extender.cluster.kube.source.KubeSource` following every pod (no
  filter) and every node, untrimmed, delivering into the scheduler (``Scheduler`` is a
  ``ClusterEvents`` sink) from the source's threads. The view keeps the objects it delivered,
  so ``get_pod``/``pods``/``nodes`` answer from the informer's state, as kube-scheduler's
  listers do - a watch delay at the API server delays what the scheduler sees, and nothing else.
* **Writes** through a :class:`~extender.cluster.kube.client.KubeClient` whose User-Agent is
  ``kube-scheduler/v<version>.0 (harness)``: pod create and delete (preemption victims), the
  Binding (``pods/<name>/binding`` with the pod's UID as a precondition), the status of pending
  pods (``pods/<name>/status``, a strategic merge patch: ``nominatedNodeName`` and the
  ``PodScheduled`` condition, merged by type) and, with ``events=True``, events.k8s.io Events
  (aggregated and written in the background by the extender's own ``EventRecorder``).

Refused writes raise :class:`~extender.framework.handle.WriteError` (``conflict`` for 404, 409
and 422 - a UID that is not the pod's),
which the scheduler handles as kube-scheduler handles a failed API call.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Mapping
from urllib.parse import quote

from extender.cluster.kube.client import ApiError, KubeClient
from extender.cluster.kube.events import EventRecorder
from extender.cluster.kube.source import KubeSource
from extender.cluster.kube.writer import pod_path
from extender.framework.handle import WriteError

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def scheduler_user_agent(version: str) -> str:
    """kube-scheduler's User-Agent for an emulated ``version`` ("1.30" -> ``kube-scheduler/v1.30.0 (harness)``)."""
    return f"kube-scheduler/v{version}.0 (harness)"


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _write_error(what: str, exc: ApiError) -> WriteError:
    return WriteError(f"{what}: {exc}", conflict=exc.status in (404, 409, 422))


class _Informer:
    """Relays the source's deliveries to the scheduler, keeping the objects for the listers."""

    def __init__(self, view: ApiClusterView, sink: Any) -> None:
        self.view, self.sink = view, sink

    def upsert_node(self, raw: Mapping[str, Any]) -> None:
        with self.view._lock:
            self.view._nodes[str((raw.get("metadata") or {}).get("name"))] = dict(raw)
        self.sink.upsert_node(raw)

    def remove_node(self, name: str) -> None:
        with self.view._lock:
            self.view._nodes.pop(name, None)
        self.sink.remove_node(name)

    def upsert_pod(self, raw: Mapping[str, Any]) -> None:
        with self.view._lock:
            self.view._pods[_key(raw)] = dict(raw)
        self.sink.upsert_pod(raw)

    def remove_pod(self, raw: Mapping[str, Any]) -> None:
        with self.view._lock:
            self.view._pods.pop(_key(raw), None)
        self.sink.remove_pod(raw)

    def upsert_pdb(self, raw: Mapping[str, Any]) -> None:
        self.sink.upsert_pdb(raw)

    def remove_pdb(self, raw: Mapping[str, Any]) -> None:
        self.sink.remove_pdb(raw)

    def upsert_pod_group(self, raw: Mapping[str, Any]) -> None:
        self.sink.upsert_pod_group(raw)

    def remove_pod_group(self, raw: Mapping[str, Any]) -> None:
        self.sink.remove_pod_group(raw)

    def upsert_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        self.sink.upsert_elastic_quota(raw)

    def remove_elastic_quota(self, raw: Mapping[str, Any]) -> None:
        self.sink.remove_elastic_quota(raw)

    def mark_synced(self) -> None:
        self.sink.mark_synced()


class ApiClusterView:
    """See the module docstring. ``client`` should carry kube-scheduler's User-Agent
    (:func:`scheduler_user_agent`): watch delays and request counts are keyed by it."""

    def __init__(self, client: KubeClient, *, events: bool = True, watch_timeout: int = 300) -> None:
        self.client = client
        self.source = KubeSource(client, None, trim=False, watch_timeout=watch_timeout)
        self.recorder = EventRecorder(client, component="kube-scheduler") if events else None
        self._lock = threading.Lock()
        self._pods: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}

    # ---- life cycle ---------------------------------------------------------------------------

    def start(self, sink: Any) -> None:
        self.source.start(_Informer(self, sink))

    def wait_synced(self, timeout: float) -> bool:
        return self.source.wait_synced(timeout)

    def stop(self) -> None:
        self.source.stop()

    # ---- listers (the informer's state) ------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            pod = self._pods.get(f"{namespace}/{name}")
        return copy.deepcopy(pod) if pod is not None else None

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            pods = list(self._pods.values())
        return copy.deepcopy(pods)

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            nodes = list(self._nodes.values())
        return copy.deepcopy(nodes)

    # ---- writes (the API) ----------------------------------------------------------------------

    def add_pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        try:
            created = self.client.post(f"/api/v1/namespaces/{quote(namespace, safe='')}/pods", dict(pod))
        except ApiError as exc:
            raise _write_error(f"creating pod {_key(pod)} failed", exc) from exc
        return dict(created)

    def delete_pod(self, namespace: str, name: str) -> bool:
        try:
            self.client.request("DELETE", pod_path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise _write_error(f"deleting pod {namespace}/{name} failed", exc) from exc
        return True

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.client.post(pod_path(namespace, name, "binding"), body)
        except ApiError as exc:
            raise _write_error(f"binding {namespace}/{name} to {node} failed", exc) from exc

    def update_pod_status(self, namespace: str, name: str, uid: str, status: Mapping[str, Any]) -> None:
        body = {"metadata": {"uid": uid}, "status": dict(status)}
        try:
            self.client.request("PATCH", pod_path(namespace, name, "status"), body=body,
                                content_type=STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            raise _write_error(f"updating the status of {namespace}/{name} failed", exc) from exc

    def record_event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.record(obj, type_=type_, reason=reason, message=message)
