"""kube-scheduler's node-level predicates that need no capacity, over the raw Pod and Node
objects: NodeUnschedulable, NodeName, TaintToleration (NoSchedule and NoExecute taints) and
NodeAffinity (``nodeSelector``, required node affinity terms).

kube-scheduler runs them before it calls the extender, so the filter verb never needs them: its
candidates passed already. Where the extender chooses among all nodes itself - admission at the
scheduling gate (where an admitted pod goes, preemption there), nudges of pods that fit now, a
PreEnqueue plugin's "some node has room" - a node the pod can never use must not count:
``node_excluded`` says why it does not. Each reason is kube-scheduler's text; all are
UnschedulableAndUnresolvable there (no preemption helps).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerated(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(tolerates(t, taint) for t in tolerations if isinstance(t, Mapping))


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against ``labels``."""
    key, op, values = str(expr.get("key") or ""), expr.get("operator"), list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except (TypeError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm: all matchExpressions and matchFields (metadata.name); an empty term
    matches nothing."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = _labels(node)
    if not all(expression_matches(e, labels) for e in exprs):
        return False
    name = {"metadata.name": str((node.get("metadata") or {}).get("name"))}
    return all(f.get("key") == "metadata.name" and expression_matches(f, name) for f in fields)


def required_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` and the required node affinity terms (any term) match ``node``."""
    spec = _spec(pod)
    labels = _labels(node)
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def unschedulable(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """NodeUnschedulable: a cordoned node takes only pods tolerating its unschedulable taint."""
    if not _spec(node).get("unschedulable"):
        return None
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    return None if tolerated(_spec(pod).get("tolerations") or [], taint) else ERR_UNSCHEDULABLE


def other_node_name(pod: Mapping[str, Any], node_name: str) -> str | None:
    """NodeName: a pod naming a node (``spec.nodeName``) fits that one only."""
    wanted = _spec(pod).get("nodeName")
    return None if not wanted or wanted == node_name else ERR_NODE_NAME


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """TaintToleration: the first NoSchedule or NoExecute taint the pod does not tolerate."""
    tolerations = _spec(pod).get("tolerations") or []
    for taint in _spec(node).get("taints") or []:
        if not isinstance(taint, Mapping) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not tolerated(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    return None


def affinity_mismatch(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """NodeAffinity: ``nodeSelector`` or the required node affinity does not match."""
    return None if required_affinity_matches(pod, node) else ERR_AFFINITY


def node_excluded(pod: Mapping[str, Any], node: Mapping[str, Any] | None, node_name: str) -> str | None:
    """Why kube-scheduler would never place ``pod`` on ``node`` (``node_name``; None: its Node
    object is not known, nothing is said), in its plugins' order; None when nothing excludes it."""
    if node is None:
        return None
    return (unschedulable(pod, node) or other_node_name(pod, node_name) or untolerated_taint(pod, node)
            or affinity_mismatch(pod, node))
