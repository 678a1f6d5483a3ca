"""What the cache keeps of a PodGroup (``scheduling.x-k8s.io``): identity and a private copy of
the spec, with the spec parsed once (None when malformed)."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Any, Mapping

from extender.framework.pod_group import PodGroupSpec

_POD_GROUP_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def trim_pod_group(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a PodGroup: identity and a private copy of the spec (whatever it
    is: malformed specs are kept as they are, ``PodGroupSpec.from_raw`` judges them)."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    out_meta = {k: meta[k] for k in _POD_GROUP_META if k in meta}
    out_meta["namespace"] = str(meta.get("namespace") or "default")
    return {"metadata": out_meta, "spec": deepcopy(raw.get("spec"))}


@dataclass(frozen=True, slots=True)
class PodGroupEntry:
    raw: dict[str, Any]
    spec: PodGroupSpec | None
    """None when the object is malformed."""


def without_rv(raw: Mapping[str, Any]) -> tuple[Any, Any]:
    """The stored object without its resourceVersion: a status update alone changes nothing."""
    meta = {k: v for k, v in raw["metadata"].items() if k != "resourceVersion"}
    return meta, raw.get("spec")
