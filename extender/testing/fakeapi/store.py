"""The store the fake API server serves: the object store (:mod:`.objects`) plus what the API
server does for pods beyond plain writes, ``pods/binding`` and ``pods/eviction``, and the
disruption budgets eviction consults (an instant disruption controller keeps their status).
Methods raise :class:`~.errors.ApiError`.
"""

from __future__ import annotations

import math
from typing import Any, List, Mapping

from . import errors
from .codec import clone
from .objects import ObjectStore, meta_of
from .resources import PDBS, PODS
from .selector import SelectorError, label_selector_from_object

__all__ = ["Store"]


class Store(ObjectStore):
    """The object store with the pod subresources and disruption budgets."""

    def bind(self, namespace: str, pod_name: str, binding: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """``pods/binding``: set ``spec.nodeName`` of an unbound pod. Returns the updated pod."""
        if not isinstance(binding, Mapping):
            raise errors.bad_request("the request body must be a JSON object")
        meta = binding.get("metadata") or {}
        target = binding.get("target") or {}
        if not isinstance(meta, Mapping) or not isinstance(target, Mapping):
            raise errors.bad_request("json: cannot unmarshal Binding: metadata and target must be objects")
        bname = meta.get("name") or pod_name
        if bname != pod_name:
            raise errors.bad_request(f"name in URL does not match name in Binding object ({bname} != {pod_name})")
        if binding.get("kind") not in (None, "Binding"):
            raise errors.bad_request(f"the kind in the body ({binding.get('kind')}) does not match the expected kind (Binding)")
        errs = []
        if not target.get("name"):
            errs.append(("target.name", "FieldValueRequired", "Required value"))
        if target.get("kind") not in (None, "", "Node"):
            errs.append(("target.kind", "FieldValueNotSupported", f'Unsupported value: "{target.get("kind")}": supported values: "Node"'))
        if errs:
            raise errors.invalid("Binding", pod_name, errs)
        annotations = meta.get("annotations") or {}
        with self._lock:
            bucket = self._check_served(PODS)
            pod = bucket.get(namespace, pod_name)
            if pod is None:
                raise errors.not_found("pods", pod_name)
            pmeta = meta_of(pod)
            uid = meta.get("uid")
            if uid and uid != pmeta.get("uid"):
                raise errors.conflict("pods", pod_name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pmeta.get('uid')}")
            rv = meta.get("resourceVersion")
            if rv and rv != pmeta.get("resourceVersion"):
                raise errors.conflict(
                    "pods", pod_name,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {pmeta.get('resourceVersion')}",
                )
            spec = pod.get("spec") or {}
            if pmeta.get("deletionTimestamp"):
                raise errors.conflict("pods/binding", pod_name, f"pod {pod_name} is being deleted, cannot be assigned to a host")
            if spec.get("nodeName"):
                raise errors.conflict("pods/binding", pod_name, f'pod {pod_name} is already assigned to node "{spec["nodeName"]}"')
            if spec.get("schedulingGates"):
                raise errors.conflict("pods/binding", pod_name, f"pod {pod_name} has non-empty .spec.schedulingGates")
            new = clone(pod)
            new.setdefault("spec", {})["nodeName"] = str(target["name"])
            if annotations:
                new["metadata"].setdefault("annotations", {}).update({str(k): str(v) for k, v in annotations.items()})
            status = new.setdefault("status", {})
            conds = status.setdefault("conditions", [])
            for c in conds:
                if c.get("type") == "PodScheduled":
                    if c.get("status") != "True":
                        c["status"] = "True"
                        c["lastTransitionTime"] = self.now()
                    c.pop("reason", None)
                    c.pop("message", None)
                    break
            else:
                conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": self.now()})
            if dry_run:
                return new
            return self._commit_put(PODS, new, pod)

    @staticmethod
    def pod_healthy(pod: Mapping[str, Any]) -> bool:
        """Running, not being deleted, and Ready (a Running pod without a Ready condition counts as ready)."""
        if meta_of(pod).get("deletionTimestamp"):
            return False
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        for c in status.get("conditions") or []:
            if c.get("type") == "Ready":
                return c.get("status") == "True"
        return True

    def _pdb_pods(self, pdb: Mapping[str, Any]) -> List[dict[str, Any]]:
        ns = meta_of(pdb).get("namespace", "")
        try:
            sel = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
        except SelectorError:
            return []
        return [
            p for p in self._buckets[PODS.key].objs.get(ns, {}).values()
            if sel.matches_object(p) and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def pdb_state(self, pdb: Mapping[str, Any]) -> dict[str, int]:
        """Live disruption-controller view of a PDB: expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed.

        Pods recorded in ``status.disruptedPods`` (evicted through this budget and not yet
        confirmed by :meth:`sync_pdb_status`) count as expected but not healthy, standing in for
        the replicas a workload controller would be recreating.
        """
        with self._lock:
            pods = self._pdb_pods(pdb)
            disrupted = set(((pdb.get("status") or {}).get("disruptedPods") or {}))
            present = {meta_of(p).get("name") for p in pods}
            expected = len(pods) + len(disrupted - present)
            healthy = sum(1 for p in pods if meta_of(p).get("name") not in disrupted and self.pod_healthy(p))
            spec = pdb.get("spec") or {}
            desired = 0
            if spec.get("minAvailable") is not None:
                desired = _scaled(spec["minAvailable"], expected)
            elif spec.get("maxUnavailable") is not None:
                desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
            allowed = max(0, healthy - desired)
            return {"expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
                    "disruptionsAllowed": allowed}

    def evict(self, namespace: str, pod_name: str, eviction: Mapping[str, Any], *, dry_run: bool = False) -> None:
        """``pods/eviction``: delete the pod unless a matching PDB forbids it (429)."""
        if not isinstance(eviction, Mapping):
            raise errors.bad_request("the request body must be a JSON object")
        meta = eviction.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise errors.bad_request("metadata must be an object")
        if meta.get("name") and meta["name"] != pod_name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        if eviction.get("kind") not in (None, "Eviction"):
            raise errors.bad_request(f"the kind in the body ({eviction.get('kind')}) does not match the expected kind (Eviction)")
        options = eviction.get("deleteOptions") or {}
        if not isinstance(options, Mapping):
            raise errors.bad_request("deleteOptions must be an object")
        with self._lock:
            bucket = self._check_served(PODS)
            pod = bucket.get(namespace, pod_name)
            if pod is None:
                raise errors.not_found("pods", pod_name)
            self._check_preconditions(PODS, pod_name, pod, options.get("preconditions"))
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed", "Pending") or meta_of(pod).get("deletionTimestamp"):
                self.delete(PODS, namespace, pod_name, options, dry_run=dry_run)
                return
            pdbs = []
            if PDBS.key in self._enabled:
                for pdb in self._buckets[PDBS.key].objs.get(namespace, {}).values():
                    sel_obj = (pdb.get("spec") or {}).get("selector")
                    try:
                        sel = label_selector_from_object(sel_obj)
                    except SelectorError:
                        continue
                    if sel.matches_object(pod):
                        pdbs.append(pdb)
            if len(pdbs) > 1:
                raise errors.internal_error("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
            if pdbs:
                pdb = pdbs[0]
                st = self.pdb_state(pdb)
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
                healthy = self.pod_healthy(pod)
                ok = decrement = False
                if not healthy and (policy == "AlwaysAllow" or (st["currentHealthy"] >= st["desiredHealthy"] and st["desiredHealthy"] > 0)):
                    ok = True
                elif st["disruptionsAllowed"] > 0:
                    ok = decrement = True
                if not ok:
                    raise errors.too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        [{"reason": "DisruptionBudget",
                          "message": f"The disruption budget {meta_of(pdb)['name']} needs {st['desiredHealthy']} healthy pods "
                                     f"and has {st['currentHealthy']} currently"}],
                    )
                if decrement and not dry_run:
                    # as the real eviction REST does: record the disruption in the PDB status
                    new = clone(pdb)
                    status = new.setdefault("status", {})
                    status.update(st)
                    status["disruptionsAllowed"] = st["disruptionsAllowed"] - 1
                    status.setdefault("disruptedPods", {})[pod_name] = self.now()
                    status["observedGeneration"] = meta_of(pdb).get("generation", 1)
                    self._commit_put(PDBS, new, pdb)
            self.delete(PODS, namespace, pod_name, options, dry_run=dry_run)

    def sync_pdb_status(self) -> int:
        """Write the live :meth:`pdb_state` into every PDB's status (an instant disruption controller).

        Entries of ``status.disruptedPods`` whose pod is gone are dropped first (the controller
        has observed the deletion).
        """
        n = 0
        with self._lock:
            if PDBS.key not in self._enabled:
                return 0
            pods = self._buckets[PODS.key]
            for pdb in list(self._buckets[PDBS.key].iter_all()):
                new = clone(pdb)
                status = new.setdefault("status", {})
                ns = meta_of(pdb).get("namespace", "")
                disrupted = {k: v for k, v in (status.get("disruptedPods") or {}).items() if pods.get(ns, k) is not None}
                if disrupted:
                    status["disruptedPods"] = disrupted
                else:
                    status.pop("disruptedPods", None)
                st = self.pdb_state(new)
                status.update(st)
                status["observedGeneration"] = meta_of(pdb).get("generation", 1)
                if new != pdb:
                    self._commit_put(PDBS, new, pdb)
                    n += 1
        return n


def _scaled(value: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``."""
    if isinstance(value, bool):
        raise errors.bad_request("invalid int-or-string value")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        s = value.strip()
        if s.endswith("%"):
            try:
                pct = int(s[:-1])
            except ValueError:
                raise errors.bad_request(f"invalid value for IntOrString: invalid value {value!r}") from None
            return int(math.ceil(pct * total / 100.0))
        try:
            return int(s)
        except ValueError:
            raise errors.bad_request(f"invalid value for IntOrString: invalid value {value!r}") from None
    raise errors.bad_request(f"invalid value for IntOrString: {value!r}")
