"""Resource types served by the fake API server, and discovery documents.

Contract:
    * A :class:`ResourceType` names one REST resource (group, version, plural, kind, scope,
      subresources). Its :attr:`ResourceType.key` (``"pods"``, ``"leases.coordination.k8s.io"``)
      identifies it everywhere in the store; ``group == ""`` is the legacy core group.
    * :data:`BUILTIN_TYPES` are always served; :data:`KNOWN_CRDS` are served only when enabled
      on the server (``crds=(...)`` or ``enable_crd``). A disabled CRD answers 404 on every
      path and is absent from discovery, exactly like a cluster without the CRD installed.
    * :func:`field_value` reads a field-selector field (``spec.nodeName``) from an object
      as the string the real server compares against (missing -> ``""``, bool -> ``"true"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = [
    "ResourceType",
    "PODS",
    "NODES",
    "NAMESPACES",
    "CONFIGMAPS",
    "EVENTS",
    "EVENTS_V1",
    "LEASES",
    "PDBS",
    "PRIORITY_CLASSES",
    "PODGROUPS",
    "ELASTICQUOTAS",
    "BUILTIN_TYPES",
    "KNOWN_CRDS",
    "field_value",
]

_DEFAULT_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One REST resource.

    ``field_labels`` lists the field-selector fields supported besides ``metadata.name`` and
    (for namespaced types) ``metadata.namespace``. ``status_subresource`` means ``/status`` is
    served and that writes to the main resource keep the stored ``.status`` (and creates reset
    it where the real strategy does, see :mod:`.strategies`).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    extra_subresources: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = ()
    crd: bool = False
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = True
    verbs: tuple[str, ...] = _DEFAULT_VERBS
    categories: tuple[str, ...] = field(default=())

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def key(self) -> str:
        """``plural`` for the core group, else ``plural.group`` (the group-resource string)."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def group_resource(self) -> str:
        return self.key

    @property
    def subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status_subresource else ()) + self.extra_subresources

    def supports_field(self, name: str) -> bool:
        if name == "metadata.name":
            return True
        if name == "metadata.namespace":
            return self.namespaced
        return name in self.field_labels

    def api_resources(self) -> list[dict[str, Any]]:
        """``APIResource`` entries (main resource + subresources) for discovery."""
        out: list[dict[str, Any]] = [
            {
                "name": self.plural,
                "singularName": self.singular or self.kind.lower(),
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": list(self.verbs),
            }
        ]
        if self.short_names:
            out[0]["shortNames"] = list(self.short_names)
        if self.categories:
            out[0]["categories"] = list(self.categories)
        for sub in self.subresources:
            kind = {"binding": "Binding", "eviction": "Eviction"}.get(sub, self.kind)
            group = "policy" if sub == "eviction" else None
            verbs = ["create"] if sub in ("binding", "eviction") else ["get", "patch", "update"]
            entry: dict[str, Any] = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
            if group:
                entry["group"] = group
                entry["version"] = "v1"
            out.append(entry)
        return out


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

PODS = ResourceType(
    "", "v1", "pods", "Pod", True, "pod", ("po",), status_subresource=True,
    extra_subresources=("binding", "eviction"), field_labels=_POD_FIELDS, categories=("all",),
)
NODES = ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), status_subresource=True,
                     field_labels=("spec.unschedulable",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), status_subresource=True,
                          field_labels=("status.phase",))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",))
EVENTS = ResourceType("", "v1", "events", "Event", True, "event", ("ev",), field_labels=_EVENT_FIELDS,
                      allow_create_on_update=True)
EVENTS_V1 = ResourceType("events.k8s.io", "v1", "events", "Event", True, "event", ("ev",),
                         field_labels=("regarding.kind", "regarding.name", "regarding.namespace", "reason", "type",
                                       "reportingController"),
                         allow_create_on_update=True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease")
PDBS = ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "poddisruptionbudget",
                    ("pdb",), status_subresource=True)
PRIORITY_CLASSES = ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
                                "priorityclass", ("pc",))
PODGROUPS = ResourceType(
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, "podgroup", ("pg", "pgs"),
    status_subresource=True, crd=True, allow_unconditional_update=False,
)

ELASTICQUOTAS = ResourceType(
    "scheduling.x-k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True, "elasticquota", ("eq", "eqs"),
    status_subresource=True, crd=True, allow_unconditional_update=False,
)

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    PODS, NODES, NAMESPACES, CONFIGMAPS, EVENTS, EVENTS_V1, LEASES, PDBS, PRIORITY_CLASSES,
)

#: CRDs the server knows how to serve when enabled by name (``crds=("podgroups",)``).
KNOWN_CRDS: dict[str, ResourceType] = {"podgroups": PODGROUPS, PODGROUPS.key: PODGROUPS,
                                       "elasticquotas": ELASTICQUOTAS, ELASTICQUOTAS.key: ELASTICQUOTAS}


#: Go zero values printed by the real field-set functions for absent boolean fields.
_FIELD_DEFAULTS: dict[str, str] = {"spec.unschedulable": "false", "spec.hostNetwork": "false"}


def field_value(obj: Mapping[str, Any], name: str) -> str:
    """The string value of a dotted field as compared by field selectors."""
    cur: Any = obj
    for part in name.split("."):
        if type(cur) is not dict and not isinstance(cur, Mapping):
            return _FIELD_DEFAULTS.get(name, "")
        cur = cur.get(part)
        if cur is None:
            return _FIELD_DEFAULTS.get(name, "")
    if type(cur) is str:
        return cur
    if name == "source" and isinstance(cur, Mapping):  # core Event: source -> source.component
        return str(cur.get("component", ""))
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (dict, list)):
        return ""
    return str(cur)


def group_versions(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    """Map group -> ordered unique versions for the given types (core group under ``""``)."""
    out: dict[str, list[str]] = {}
    for t in types:
        versions = out.setdefault(t.group, [])
        if t.version not in versions:
            versions.append(t.version)
    return out
