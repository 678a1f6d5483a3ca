"""The allocation ledger: what the extender allocated to a pod, written on the pod itself.

The cluster is the database. The Binding carries one annotation ``<prefix>allocation``, set on the
pod in the same write that binds it::

    {"node": "gpu-node-1", "resources": {"example.com/gpu": "2"}, "term": 7,
     "reservedAt": "2026-11-21T22:30:00.123Z", "extra": {...}}

``term`` is the leader term of the writer; ``extra`` carries plugin details (devices picked,
...). A restarted or newly elected extender rebuilds from these: a bound pod counts where it is
bound. An *unbound* pod with an allocation can only come from kube-extender 0.2, which wrote it
ahead of the Binding: it counts as reserved on that node until ``reservedAt + assumedPodTTL``,
after which it is an orphan and the leader removes the annotation. Amounts are written as
Kubernetes quantities and read back exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from extender.framework.resources import QuantityError, format_milli, milli

ALLOCATION = "allocation"


@dataclass(frozen=True)
class Allocation:
    node: str
    resources: Mapping[str, int]
    term: int = 0
    reserved_at: float = 0.0
    """Wall-clock seconds since the epoch."""
    extra: Mapping[str, Any] = field(default_factory=dict)


def key(prefix: str) -> str:
    return f"{prefix}{ALLOCATION}"


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def encode(a: Allocation) -> str:
    doc: dict[str, Any] = {"node": a.node, "resources": {k: format_milli(v) for k, v in sorted(a.resources.items())},
                           "term": a.term, "reservedAt": _rfc3339(a.reserved_at)}
    if a.extra:
        doc["extra"] = dict(a.extra)
    return json.dumps(doc, separators=(",", ":"), sort_keys=False)


def decode(text: str | None) -> Allocation | None:
    """Parse an allocation annotation; None for absent or malformed text (never raises: a bad
    annotation must not stop the extender from following the cluster)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
        node = doc["node"]
        resources = {str(k): milli(v) for k, v in (doc.get("resources") or {}).items()}
        at = datetime.fromisoformat(str(doc.get("reservedAt", "")).replace("Z", "+00:00")).timestamp()
        term = int(doc.get("term", 0))
        extra = doc.get("extra") or {}
        if not isinstance(node, str) or not node or not isinstance(extra, dict):
            return None
        return Allocation(node, resources, term, at, extra)
    except (ValueError, KeyError, TypeError, QuantityError, AttributeError, OverflowError, RecursionError):
        return None  # a term of 1e400, a document nested thousands deep


def of_pod(annotations: Mapping[str, str], prefix: str) -> Allocation | None:
    return decode(annotations.get(key(prefix)))
