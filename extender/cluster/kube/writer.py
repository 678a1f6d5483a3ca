"""KubeWriter: the extender's writes to the API server, fenced by leadership.

* ``bind``: POST ``pods/<name>/binding`` with ``metadata.uid`` (the API server turns it into a UID
  precondition) and the annotations to set (merged into the pod in the same storage update that
  sets ``spec.nodeName``: one write records the allocation and binds). A 409 is looked into:
  already bound to the same node is success (a retried bind whose first reply was lost: the
  annotations came with it); bound elsewhere or a different UID is a conflict. So is a Binding
  that got no answer or a 5xx: the API server may have stored it and lost the reply, and then
  the pod holds the capacity; only when the pod is not bound there is it a failure. When the pod
  cannot be read back either - or, after no answer or a 504, is read unbound: the API server may
  still be storing the Binding -, nobody can tell: the error says so (``WriteError.uncertain``).
* ``patch_pod_metadata``: one JSON merge patch; a resourceVersion given is sent in the patch body,
  which the API server treats as a precondition (409 when stale); so is the UID (immutable: a
  re-created pod with the same name rejects the patch).
* ``evict``: POST ``pods/<name>/eviction`` (policy/v1) with a UID precondition and the grace
  period; 429 means a PodDisruptionBudget forbids it now.
* ``record_event``: handed to the EventRecorder (aggregated, rate-limited, never blocks).

Fencing: every write first asks ``may_write()``; a process that is not (or no longer surely) the
leader raises WriteError and writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping
from urllib.parse import quote

from extender.cluster.kube.client import ApiError, KubeClient
from extender.cluster.kube.events import EventRecorder
from extender.framework.handle import WriteError

log = logging.getLogger(__name__)

_UNREADABLE: dict[str, Any] = {}
"""``_read_back``'s answer when no read succeeded (compared by identity)."""


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    return f"{path}/{sub}" if sub else path


class KubeWriter:
    def __init__(self, client: KubeClient, *, may_write: Callable[[], bool] = lambda: True,
                 events: EventRecorder | None = None) -> None:
        self.client = client
        self.may_write = may_write
        self.events = events

    def _fence(self, what: str) -> None:
        if not self.may_write():
            raise WriteError(f"not the leader: refusing to {what}")

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        self._fence("bind")
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.client.post(pod_path(namespace, name, "binding"), body)
        except ApiError as exc:
            if exc.status == 404:
                raise WriteError(f"pod {namespace}/{name} not found", conflict=True) from exc
            # 409: maybe our own earlier Binding; no answer or 5xx: the API server may have stored
            # this one and lost the reply (a timeout says "the request may have succeeded") -
            # taking that for a failure would give the capacity away while the pod holds it
            if exc.status == 409 or exc.status == 0 or exc.status >= 500:
                current = self._read_back(namespace, name)
                if current is _UNREADABLE:
                    raise WriteError(f"binding {'conflict' if exc.status == 409 else 'failed'}: {exc}, and the pod "
                                     "could not be read back: it may be bound", uncertain=True) from exc
                if current is not None and (current.get("spec") or {}).get("nodeName") == node \
                        and (current.get("metadata") or {}).get("uid") == uid:
                    return
                if exc.status in (0, 504) and current is not None and not (current.get("spec") or {}).get("nodeName") \
                        and (current.get("metadata") or {}).get("uid") == uid:
                    # no answer, or "it may have succeeded": the API server may still be storing it
                    raise WriteError(f"binding failed: {exc}, and the pod is not bound yet: the Binding may "
                                     "still be stored", uncertain=True) from exc
            if exc.status == 409:
                raise WriteError(f"binding conflict: {exc.message}", conflict=True) from exc
            raise WriteError(f"binding failed: {exc}") from exc

    def _read_back(self, namespace: str, name: str, attempts: int = 3) -> dict[str, Any] | None:
        """The pod as the API server has it now, read again when a read fails (an API server
        that lost a Binding's reply is often failing reads too: taking one failed read for "not
        bound" would give the capacity away while the pod holds it); None when it is gone,
        ``_UNREADABLE`` when every read failed."""
        for attempt in range(attempts):
            try:
                return self._get_pod(namespace, name)
            except ApiError as exc:
                log.info("reading a pod back failed", extra={"pod": f"{namespace}/{name}", "error": str(exc),
                                                             "attempt": attempt + 1})
        return _UNREADABLE

    def bound_node(self, namespace: str, name: str, uid: str) -> str | None:
        try:
            pod = self._get_pod(namespace, name)
        except ApiError as exc:
            raise WriteError(f"reading pod {namespace}/{name} failed: {exc}") from exc
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            return None
        return (pod.get("spec") or {}).get("nodeName") or None

    def _get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod; None when it does not exist (404). Other failures raise ApiError."""
        try:
            pod = self.client.get(pod_path(namespace, name))
            return pod if isinstance(pod, dict) else None
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def patch_pod_metadata(self, namespace: str, name: str, *, annotations: Mapping[str, str | None] | None = None,
                           labels: Mapping[str, str | None] | None = None,
                           resource_version: str | None = None, uid: str | None = None) -> None:
        self._fence("patch pod metadata")
        meta: dict[str, Any] = {"uid": uid} if uid else {}  # uid is immutable: a mismatch is rejected
        if annotations:
            meta["annotations"] = dict(annotations)
        if labels:
            meta["labels"] = dict(labels)
        if resource_version:
            meta["resourceVersion"] = resource_version
        try:
            self.client.merge_patch(pod_path(namespace, name), {"metadata": meta})
        except ApiError as exc:
            raise WriteError(f"patching pod {namespace}/{name} failed: {exc}",
                             conflict=exc.status in (404, 409, 422)) from exc

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any], *, status: bool = False) -> None:
        """A merge patch of anything else (scheduling gates, status.nominatedNodeName)."""
        self._fence("patch pod")
        try:
            self.client.merge_patch(pod_path(namespace, name, "status" if status else ""), dict(patch))
        except ApiError as exc:
            raise WriteError(f"patching pod {namespace}/{name} failed: {exc}",
                             conflict=exc.status in (404, 409)) from exc

    def evict(self, namespace: str, name: str, uid: str, grace_period_seconds: int | None = None) -> None:
        self._fence("evict")
        options: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options}
        try:
            self.client.post(pod_path(namespace, name, "eviction"), body)
        except ApiError as exc:
            if exc.status == 404:
                return  # already gone: what eviction wanted
            raise WriteError(f"evicting {namespace}/{name} failed: {exc}", conflict=exc.status in (409, 429)) from exc

    def remove_scheduling_gate(self, namespace: str, name: str, gate: str, uid: str | None = None) -> None:
        """Read the pod, then a merge patch of ``spec.schedulingGates`` without ``gate`` (a merge
        patch replaces the list, so it carries the resourceVersion read: a concurrent change of
        the gates by someone else is a conflict, not a lost update)."""
        self._fence("remove a scheduling gate")
        try:
            pod = self._get_pod(namespace, name)
        except ApiError as exc:  # not a conflict: the pod may well be there, try again later
            raise WriteError(f"reading pod {namespace}/{name} failed: {exc}") from exc
        if pod is None:
            raise WriteError(f"pod {namespace}/{name} not found", conflict=True)
        meta = pod.get("metadata") or {}
        if uid and meta.get("uid") != uid:
            raise WriteError(f"pod {namespace}/{name} has a different UID", conflict=True)
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        remaining = [g for g in gates if not (isinstance(g, dict) and g.get("name") == gate)]
        if len(remaining) == len(gates):
            return
        try:
            self.client.merge_patch(pod_path(namespace, name), {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"schedulingGates": remaining or None}})
        except ApiError as exc:
            raise WriteError(f"removing gate {gate} from {namespace}/{name} failed: {exc}",
                             conflict=exc.status in (404, 409)) from exc

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        self.patch_pod(namespace, name, {"status": {"nominatedNodeName": node}}, status=True)

    def record_event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
                     related: Mapping[str, Any] | None = None) -> None:
        if self.events is not None and self.may_write():
            self.events.record(obj, type_=type_, reason=reason, message=message, related=related)
