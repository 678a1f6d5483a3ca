"""Loading Kubernetes objects from YAML: multi-document files or a ``v1`` ``List``.

Nodes, Pods, PriorityClasses, PodDisruptionBudgets, PodGroups and ElasticQuotas
(``scheduling.x-k8s.io``, the scheduler-plugins CRDs; a PodGroup of another API group, e.g.
Volcano's, is not one) are kept; other kinds are ignored with a warning. The specs of the CRDs are
not validated here: the cache keeps them as they are and plugins see a malformed one as absent. Pods without ``spec.priority`` get it from their
``priorityClassName`` or the global default class, as the admission controller would have done in
a real cluster.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable

import yaml

log = logging.getLogger(__name__)

KINDS = ("Node", "Pod", "PriorityClass", "PodDisruptionBudget", "PodGroup", "ElasticQuota")

_GROUPS = {"PodGroup": "scheduling.x-k8s.io", "ElasticQuota": "scheduling.x-k8s.io"}
"""Kinds whose name other API groups use too: only this group's are kept (no apiVersion: kept)."""


class ClusterFileError(ValueError):
    """A cluster file that cannot be used; the message names the file and document."""


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: ~4x faster


def _documents(text: str, origin: str) -> Iterable[tuple[str, Any]]:
    try:
        docs = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"{origin}: not valid YAML: {exc}") from exc
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{origin} document {i + 1}"
        if not isinstance(doc, dict):
            raise ClusterFileError(f"{where}: expected a Kubernetes object, got {type(doc).__name__}")
        if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ClusterFileError(f"{where}: items must be a list")
            for j, item in enumerate(items):
                yield f"{where} item {j + 1}", item
        else:
            yield where, doc


def load_objects(text: str, origin: str = "<cluster>") -> dict[str, list[dict[str, Any]]]:
    """Parse YAML text into objects grouped by kind (keys: KINDS). Raises ClusterFileError."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for where, obj in _documents(text, origin):
        if not isinstance(obj, dict):
            raise ClusterFileError(f"{where}: expected an object")
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        group = _GROUPS.get(kind) if isinstance(kind, str) else None
        if kind not in KINDS or (group and api_version and str(api_version).split("/")[0] != group):
            log.warning("ignoring object of unsupported kind",
                        extra={"where": where, "kind": kind, "api_version": api_version})
            continue
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ClusterFileError(f"{where}: {kind} needs metadata.name")
        if kind == "Pod" and not isinstance(obj.get("spec"), dict):
            raise ClusterFileError(f"{where}: Pod {meta['name']} needs a spec")
        if kind == "PriorityClass" and (not isinstance(obj.get("value", 0), int) or isinstance(obj.get("value"), bool)):
            raise ClusterFileError(f"{where}: PriorityClass {meta['name']} needs an integer value, "
                                   f"got {obj.get('value')!r}")
        out[kind].append(obj)
    _apply_priority_classes(out)
    return out


def load_file(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterFileError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ClusterFileError(f"{p}: not UTF-8 text (byte {exc.start}): a cluster file is YAML") from exc
    return load_objects(text, str(p))


def _apply_priority_classes(objs: dict[str, list[dict[str, Any]]]) -> None:
    classes = {pc["metadata"]["name"]: pc for pc in objs["PriorityClass"]}
    default = next((pc for pc in classes.values() if pc.get("globalDefault")), None)
    for pod in objs["Pod"]:
        spec = pod["spec"]
        if spec.get("priority") is not None:
            continue
        pc = classes.get(spec.get("priorityClassName") or "") or default
        if pc is not None:
            spec["priority"] = int(pc.get("value", 0))
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy") or "PreemptLowerPriority")
