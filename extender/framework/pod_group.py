"""PodGroup (``scheduling.x-k8s.io/v1alpha1``, the scheduler-plugins CRD), as plugins read it.

The cache stores PodGroups as trimmed raw dicts, malformed ones included (what the cluster holds
is never refused). ``PodGroupSpec.from_raw`` is the one place that reads them: it returns None for
a PodGroup that cannot be used (so a plugin falls back to its own defaults instead of crashing):

* ``spec`` not a map, ``spec.minMember`` missing or not an integer >= 1 (booleans and floats are
  not integers, as in the CRD's ``int32`` schema);
* ``spec.scheduleTimeoutSeconds`` present but not an integer (``null``, absent, 0 or negative
  mean "the plugin's default", as in scheduler-plugins' coscheduling);
* ``spec.minResources`` present but not a map of Kubernetes quantities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from extender.framework.resources import QuantityError, resource_list

GROUP = "scheduling.x-k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PodGroup"

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The scheduler-plugins label naming a pod's group (the PodGroup of that name in its namespace)."""


def group_of(labels: Mapping[str, str]) -> str | None:
    """The name of the pod group a pod with these labels belongs to, or None."""
    name = labels.get(GROUP_LABEL)
    return name or None



@dataclass(frozen=True, slots=True)
class GroupCount:
    """How many pods the extender follows in a pod group (``handle.group_count``): the pods
    ``find_pods(namespace, {GROUP_LABEL: name})`` would return, counted as the cache changes
    rather than read."""

    members: int
    assigned: int
    """Members on a node: bound, or assumed by the extender (``PodInfo.node_name`` set)."""
    bound: int
    """Members the cluster shows bound (``spec.nodeName`` set; assumed ones are not)."""
    left: int
    """A mark that changes (grows) whenever a member leaves the group - deleted, finished,
    relabelled, its assumption dropped with nothing else known of it - and only then: equal
    marks mean nobody left in between."""


@dataclass(frozen=True, slots=True)
class MemberState:
    """One member of a pod group as the extender follows it (``handle.group_member``)."""

    assigned: bool
    """Bound or assumed (``PodInfo.node_name`` set)."""
    bound: bool
    """The cluster shows it bound (``spec.nodeName`` set)."""


_EMPTY: Mapping[str, int] = MappingProxyType({})


def named_spec(raw: Mapping[str, Any] | None) -> tuple[str | None, Mapping[str, Any], Mapping[str, Any]]:
    """``(None, metadata, spec)`` of a scheduling.x-k8s.io object (PodGroup, ElasticQuota) with a
    name and a spec map; ``(what is wrong, {}, {})`` otherwise."""
    if not isinstance(raw, Mapping):
        return "not an object", {}, {}
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name must be a non-empty string", {}, {}
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        return f"spec must be a map, got {type(spec).__name__}", {}, {}
    return None, meta, spec


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """A valid PodGroup. ``min_resources`` is in milli-units (``extender.framework.resources``)."""

    namespace: str
    name: str
    min_member: int
    schedule_timeout_seconds: float | None = None
    min_resources: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    uid: str = ""
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any] | None) -> PodGroupSpec | None:
        """The typed spec of a raw PodGroup, or None if it is malformed (see the module doc)."""
        problem, spec = cls.parse(raw)
        return spec if problem is None else None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> tuple[str | None, PodGroupSpec | None]:
        """``(None, spec)`` for a valid PodGroup, ``(what is wrong, None)`` otherwise."""
        problem, meta, spec = named_spec(raw)
        if problem is not None:
            return problem, None
        min_member = spec.get("minMember")
        if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 1:
            return f"spec.minMember must be an integer >= 1, got {min_member!r}", None
        timeout = spec.get("scheduleTimeoutSeconds")
        if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)):
            return f"spec.scheduleTimeoutSeconds must be an integer, got {timeout!r}", None
        try:
            min_resources = resource_list(spec.get("minResources"))
        except (QuantityError, TypeError, AttributeError) as exc:
            return f"spec.minResources: {exc}", None
        return None, cls(
            namespace=str(meta.get("namespace") or "default"),
            name=meta["name"],
            min_member=min_member,
            schedule_timeout_seconds=float(timeout) if timeout is not None and timeout > 0 else None,
            min_resources=MappingProxyType(min_resources) if min_resources else _EMPTY,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )
