"""Per-resource write semantics: defaulting, admission, validation, status handling.

These emulate the parts of kube-apiserver's registry strategies and admission plugins that a
scheduler, a cluster cache or leader election can observe. They run for writes that arrive
over HTTP; the in-process "direct" store API of the fake server bypasses them (so tests can
seed e.g. ``Running`` pods with any status).

Contract, per resource (everything not listed is stored as sent):

* **Generic metadata** (all types): ``metadata.name`` (or ``generateName``) is required and
  must be an RFC 1123 subdomain (namespaces: label); labels must be valid label keys/values;
  labels/annotations must be string maps and ``finalizers`` a string list (else 400, like a
  typed decode failure). Server-owned fields (``uid``, ``creationTimestamp``,
  ``deletionTimestamp``, ``generation``) are ignored on create and kept from the stored object
  on update; a changed ``uid`` on update is 422. ``generation`` starts at 1 and is incremented
  when anything outside ``metadata``/``status`` changes.
* **Status subresource types** (pods, nodes, namespaces, PDBs, podgroups): a write to the
  main resource keeps the stored ``.status``; ``/status`` writes change only ``.status`` (for
  pods and nodes also labels/annotations, as the real status strategies allow). Creates
  reset status for pods (``phase: Pending`` + computed ``qosClass``), PDBs (zeroed counters),
  namespaces (``phase: Active``) and CRDs (dropped); nodes keep the status they are created
  with (kubelets register that way).
* **Pods**: schema defaults (``schedulerName: default-scheduler``, ``restartPolicy: Always``,
  ``dnsPolicy: ClusterFirst``, ``terminationGracePeriodSeconds: 30``, ``enableServiceLinks``,
  ``securityContext: {}``, container ``imagePullPolicy``/``terminationMessage*`` and
  requests defaulted from limits); Priority admission (``priorityClassName`` resolved from
  stored PriorityClasses, the two ``system-*-critical`` built-ins, or the global default;
  a ``spec.priority`` that disagrees is 403 Forbidden; missing class is 403 Forbidden);
  DefaultTolerationSeconds admission (``not-ready``/``unreachable`` NoExecute 300 s).
  Validation: at least one container, each with a DNS-label ``name`` and an ``image``,
  requests <= limits. Update validation: ``spec`` is immutable except container/initContainer
  ``image``, ``activeDeadlineSeconds``, additions to ``tolerations``, removal of
  ``schedulingGates`` (adding one is 422 Forbidden) and, while the stored pod is still gated,
  ``nodeSelector``/``affinity``. ``spec.nodeName`` therefore can only be set via binding.
* **Leases / Events**: MicroTime and Time fields are parsed as RFC 3339 (a timestamp without a
  zone is 400, as in Go) and re-emitted in the server's canonical UTC form.
* **PodDisruptionBudgets**: ``minAvailable`` and ``maxUnavailable`` are mutually exclusive.

Not emulated: ServiceAccount admission (no token volume / ``serviceAccountName`` default),
LimitRanger/ResourceQuota, managedFields, strict unknown-field validation (unknown fields are
kept), most per-field validation.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable, Mapping

from . import errors
from .codec import clone
from .resources import EVENTS, EVENTS_V1, LEASES, NAMESPACES, NODES, PDBS, PODS, ResourceType

__all__ = [
    "FieldError",
    "Strategy",
    "strategy_for",
    "parse_quantity",
    "pod_qos_class",
    "format_time",
    "format_micro_time",
    "parse_time",
    "SYSTEM_PRIORITY_CLASSES",
    "status_only",
]

FieldError = tuple[str, str, str]  # (field path, cause type, message)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)

#: Priority values of the PriorityClasses every real cluster has.
SYSTEM_PRIORITY_CLASSES: dict[str, int] = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


# --------------------------------------------------------------------------- time


def format_time(dt: datetime) -> str:
    """``metav1.Time`` wire form (seconds, UTC, ``Z``)."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(dt: datetime) -> str:
    """``metav1.MicroTime`` wire form (microseconds, UTC, ``Z``)."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any, field: str) -> datetime:
    """Parse an RFC 3339 timestamp as Go does (zone required); 400 BadRequest otherwise."""
    if not isinstance(value, str):
        raise errors.bad_request(f"{field}: expected an RFC 3339 timestamp string, got {value!r}")
    m = _RFC3339.match(value)
    if not m:
        raise errors.bad_request(
            f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse ({field})'
        )
    frac = m.group(7) or ""
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    tz = m.group(8)
    if tz in ("Z", "z"):
        tzinfo = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = timezone(sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    try:
        return datetime(
            int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)),
            micro, tzinfo=tzinfo,
        )
    except ValueError as exc:
        raise errors.bad_request(f"{field}: {exc}") from None


def _normalize_times(obj: dict[str, Any], path: tuple[str, ...], micro: bool) -> None:
    cur: Any = obj
    for p in path[:-1]:
        if not isinstance(cur, dict):
            return
        cur = cur.get(p)
    if not isinstance(cur, dict) or cur.get(path[-1]) is None:
        return
    dt = parse_time(cur[path[-1]], ".".join(path))
    cur[path[-1]] = format_micro_time(dt) if micro else format_time(dt)


# --------------------------------------------------------------------------- quantities

_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: Any) -> Decimal:
    """Parse a ``resource.Quantity`` (``"100m"``, ``"1Gi"``, ``"1e3"``, ``2``); ``ValueError`` if bad."""
    if isinstance(value, bool):
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"quantities must be strings or numbers, got {value!r}")
    m = _QTY.match(value.strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    try:
        num = Decimal(m.group(1))
    except InvalidOperation:  # pragma: no cover - regex guarantees a number
        raise ValueError(value) from None
    suf = m.group(2) or ""
    if suf[:1] in ("e", "E"):
        return num * (Decimal(10) ** int(suf[1:]))
    return num * _SUFFIX[suf]


def _resources_of(container: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    res = container.get("resources") or {}
    return dict(res.get("requests") or {}), dict(res.get("limits") or {})


def pod_qos_class(spec: Mapping[str, Any]) -> str:
    """``Guaranteed`` / ``Burstable`` / ``BestEffort`` as computed by the real apiserver."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        req, lim = _resources_of(c)
        for name in ("cpu", "memory"):
            r, l = req.get(name), lim.get(name)
            if r is not None or l is not None:
                any_set = True
            if l is None:
                guaranteed = False
            elif r is not None:
                try:
                    if parse_quantity(r) != parse_quantity(l):
                        guaranteed = False
                except ValueError:
                    guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# --------------------------------------------------------------------------- generic checks


def _check_string_map(value: Any, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise errors.bad_request(f"json: cannot unmarshal into Go struct field ObjectMeta.{field} of type map[string]string")


def check_types(rt: ResourceType, obj: Mapping[str, Any]) -> None:
    """Reject bodies whose well-known fields have the wrong JSON type (400, like a typed decode)."""
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise errors.bad_request("json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta")
    meta = meta or {}
    for f in ("name", "generateName", "namespace", "resourceVersion", "uid"):
        if meta.get(f) is not None and not isinstance(meta[f], str):
            raise errors.bad_request(f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{f} of type string")
    _check_string_map(meta.get("labels"), "metadata.labels")
    _check_string_map(meta.get("annotations"), "metadata.annotations")
    fin = meta.get("finalizers")
    if fin is not None and (not isinstance(fin, list) or not all(isinstance(x, str) for x in fin)):
        raise errors.bad_request("json: cannot unmarshal into Go struct field ObjectMeta.metadata.finalizers of type []string")
    for f in ("spec", "status"):
        if obj.get(f) is not None and not isinstance(obj[f], dict):
            raise errors.bad_request(f"json: cannot unmarshal into Go struct field {rt.kind}.{f} of type object")
    if rt is PODS:
        spec = obj.get("spec") or {}
        for lf in ("containers", "initContainers", "tolerations", "schedulingGates", "volumes"):
            v = spec.get(lf)
            if v is not None and (not isinstance(v, list) or not all(isinstance(x, dict) for x in v)):
                raise errors.bad_request(f"json: cannot unmarshal into Go struct field PodSpec.spec.{lf} of type array of objects")
        for sf in ("nodeName", "schedulerName", "priorityClassName"):
            if spec.get(sf) is not None and not isinstance(spec[sf], str):
                raise errors.bad_request(f"json: cannot unmarshal into Go struct field PodSpec.spec.{sf} of type string")
        for inf in ("priority", "terminationGracePeriodSeconds", "activeDeadlineSeconds"):
            if spec.get(inf) is not None and (isinstance(spec[inf], bool) or not isinstance(spec[inf], int)):
                raise errors.bad_request(f"json: cannot unmarshal into Go struct field PodSpec.spec.{inf} of type int")
        ns = spec.get("nodeSelector")
        _check_string_map(ns, "spec.nodeSelector")
    if rt is LEASES:
        spec = obj.get("spec") or {}
        if spec.get("holderIdentity") is not None and not isinstance(spec["holderIdentity"], str):
            raise errors.bad_request("json: cannot unmarshal into Go struct field LeaseSpec.spec.holderIdentity of type string")
        for inf in ("leaseDurationSeconds", "leaseTransitions"):
            if spec.get(inf) is not None and (isinstance(spec[inf], bool) or not isinstance(spec[inf], int)):
                raise errors.bad_request(f"json: cannot unmarshal into Go struct field LeaseSpec.spec.{inf} of type int32")


def validate_metadata(rt: ResourceType, obj: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        errs.append(("metadata.name", "FieldValueRequired", "Required value: name or generateName is required"))
    elif rt is NAMESPACES:
        if len(name) > 63 or not _DNS_LABEL.match(name):
            errs.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_LABEL_MSG}'))
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errs.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}'))
    ns = meta.get("namespace") or ""
    if rt.namespaced and ns and (len(ns) > 63 or not _DNS_LABEL.match(ns)):
        errs.append(("metadata.namespace", "FieldValueInvalid", f'Invalid value: "{ns}": {_LABEL_MSG}'))
    for k, v in (meta.get("labels") or {}).items():
        prefix, _, lname = k.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or len(lname) > 63 or not _LABEL_NAME.match(lname):
            errs.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{k}": name part must be a valid label key'))
        if len(v) > 63 or not _LABEL_VALUE.match(v):
            errs.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\''))
    return errs


# --------------------------------------------------------------------------- strategies


class AdmissionView:
    """What admission needs from the store (implemented by the store)."""

    def priority_classes(self) -> Iterable[Mapping[str, Any]]:  # pragma: no cover - interface
        raise NotImplementedError


def status_only(new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with ``new``'s status: what a write to ``/status`` keeps (every other field stays)."""
    out = clone(dict(old))
    if new.get("status") is None:
        out.pop("status", None)
    else:
        out["status"] = clone(new["status"])
    return out


class Strategy:
    """Default strategy: store as sent, keep status on main writes when a status subresource exists."""

    def __init__(self, rt: ResourceType) -> None:
        self.rt = rt

    # -- schema defaulting: applied to every write, direct test writes included
    def default(self, obj: dict[str, Any]) -> None:
        """Apply the defaults a real decoder applies to every incoming object."""

    # -- create
    def prepare_for_create(self, obj: dict[str, Any], view: AdmissionView) -> None:
        if self.rt.crd and self.rt.status_subresource:
            obj.pop("status", None)
        self.normalize(obj)

    def validate_create(self, obj: Mapping[str, Any]) -> list[FieldError]:
        return []

    # -- update via the main resource
    def prepare_for_update(self, new: dict[str, Any], old: Mapping[str, Any]) -> None:
        if self.rt.status_subresource:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        self.normalize(new)

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
        return []

    # -- update via /status
    def status_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
        return status_only(new, old)

    def normalize(self, obj: dict[str, Any]) -> None:
        """Canonicalize timestamps; raise 400 for unparseable ones."""


class _LeaseStrategy(Strategy):
    def normalize(self, obj: dict[str, Any]) -> None:
        _normalize_times(obj, ("spec", "acquireTime"), True)
        _normalize_times(obj, ("spec", "renewTime"), True)


class _EventStrategy(Strategy):
    def normalize(self, obj: dict[str, Any]) -> None:
        _normalize_times(obj, ("eventTime",), True)
        if self.rt is EVENTS:
            _normalize_times(obj, ("firstTimestamp",), False)
            _normalize_times(obj, ("lastTimestamp",), False)
        else:
            _normalize_times(obj, ("deprecatedFirstTimestamp",), False)
            _normalize_times(obj, ("deprecatedLastTimestamp",), False)


class _NamespaceStrategy(Strategy):
    def prepare_for_create(self, obj: dict[str, Any], view: AdmissionView) -> None:
        obj["status"] = {"phase": "Active"}
        spec = obj.setdefault("spec", {})
        spec.setdefault("finalizers", ["kubernetes"])


class _NodeStrategy(Strategy):
    def status_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
        out = super().status_update(new, old)
        _copy_labels_annotations(out, new)
        return out


class _PdbStrategy(Strategy):
    def prepare_for_create(self, obj: dict[str, Any], view: AdmissionView) -> None:
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def _validate(self, obj: Mapping[str, Any]) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            return [("spec", "FieldValueInvalid", "Invalid value: minAvailable and maxUnavailable cannot be both set")]
        return []

    def validate_create(self, obj: Mapping[str, Any]) -> list[FieldError]:
        return self._validate(obj)

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
        return self._validate(new)


def _copy_labels_annotations(out: dict[str, Any], new: Mapping[str, Any]) -> None:
    nmeta = new.get("metadata") or {}
    ometa = out.setdefault("metadata", {})
    for f in ("labels", "annotations"):
        if nmeta.get(f) is None:
            ometa.pop(f, None)
        else:
            ometa[f] = clone(nmeta[f])


_POD_MUTABLE_MSG = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def default_pod_spec(spec: dict[str, Any]) -> None:
    """Apply the schema defaults the real decoder applies to every PodSpec."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for list_name in ("initContainers", "containers"):
        for c in spec.get(list_name) or []:
            image = c.get("image") or ""
            if "imagePullPolicy" not in c:
                tagless = ":" not in image.rsplit("/", 1)[-1] and "@" not in image
                c["imagePullPolicy"] = "Always" if tagless or image.endswith(":latest") else "IfNotPresent"
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            res = c.setdefault("resources", {})
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                req = res.setdefault("requests", {})
                if isinstance(req, dict):
                    for k, v in res["limits"].items():
                        req.setdefault(k, v)


class _PodStrategy(Strategy):
    def default(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_pod_spec(spec)

    def prepare_for_create(self, obj: dict[str, Any], view: AdmissionView) -> None:
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        self._admit_priority(obj, view)
        self._admit_default_tolerations(spec)
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos_class(spec)}

    def _admit_priority(self, obj: dict[str, Any], view: AdmissionView) -> None:
        spec = obj["spec"]
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName") or ""
        cls_name = spec.get("priorityClassName") or ""
        policy = "PreemptLowerPriority"
        if cls_name:
            found = next((pc for pc in view.priority_classes() if (pc.get("metadata") or {}).get("name") == cls_name), None)
            if found is not None:
                value = int(found.get("value", 0))
                policy = found.get("preemptionPolicy") or policy
            elif cls_name in SYSTEM_PRIORITY_CLASSES:
                value = SYSTEM_PRIORITY_CLASSES[cls_name]
            else:
                raise errors.forbidden("pods", name, f"no PriorityClass with name {cls_name} was found")
        else:
            default = next((pc for pc in view.priority_classes() if pc.get("globalDefault")), None)
            if default is not None:
                value = int(default.get("value", 0))
                spec["priorityClassName"] = (default.get("metadata") or {}).get("name", "")
                policy = default.get("preemptionPolicy") or policy
            else:
                value = 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise errors.forbidden(
                "pods",
                name,
                f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; "
                f"priority admission controller computed {value} from the given PriorityClass name",
            )
        spec["priority"] = value
        spec.setdefault("preemptionPolicy", policy)

    @staticmethod
    def _admit_default_tolerations(spec: dict[str, Any]) -> None:
        tols = spec.get("tolerations")
        tols = list(tols) if isinstance(tols, list) else []
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            covered = any(
                t.get("key") in (key, None, "") and t.get("effect") in (None, "", "NoExecute") for t in tols
            )
            if not covered:
                tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        spec["tolerations"] = tols

    def validate_create(self, obj: Mapping[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        spec = obj.get("spec") or {}
        containers = spec.get("containers") or []
        if not containers:
            errs.append(("spec.containers", "FieldValueRequired", "Required value"))
        for list_name in ("initContainers", "containers"):
            seen: set[str] = set()
            for i, c in enumerate(spec.get(list_name) or []):
                path = f"spec.{list_name}[{i}]"
                cname = c.get("name")
                if not cname:
                    errs.append((f"{path}.name", "FieldValueRequired", "Required value"))
                elif not isinstance(cname, str) or len(cname) > 63 or not _DNS_LABEL.match(cname):
                    errs.append((f"{path}.name", "FieldValueInvalid", f'Invalid value: "{cname}": {_LABEL_MSG}'))
                elif cname in seen:
                    errs.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
                else:
                    seen.add(cname)
                if not c.get("image"):
                    errs.append((f"{path}.image", "FieldValueRequired", "Required value"))
                req, lim = _resources_of(c)
                for rname, rv in {**req, **lim}.items():
                    try:
                        parse_quantity(rv)
                    except ValueError as exc:
                        errs.append((f"{path}.resources", "FieldValueInvalid", f"Invalid value: {rv!r}: {exc}"))
                for rname in set(req) & set(lim):
                    try:
                        if parse_quantity(req[rname]) > parse_quantity(lim[rname]):
                            errs.append((
                                f"{path}.resources.requests",
                                "FieldValueInvalid",
                                f'Invalid value: "{req[rname]}": must be less than or equal to {rname} limit of {lim[rname]}',
                            ))
                    except ValueError:
                        pass
        for i, g in enumerate(spec.get("schedulingGates") or []):
            if not g.get("name"):
                errs.append((f"spec.schedulingGates[{i}].name", "FieldValueRequired", "Required value"))
        return errs

    def validate_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        nspec: dict[str, Any] = clone(new.get("spec") or {})
        ospec: dict[str, Any] = clone(old.get("spec") or {})
        default_pod_spec(nspec)
        default_pod_spec(ospec)  # objects seeded by direct writes may predate defaulting
        old_gates = [g.get("name") for g in ospec.get("schedulingGates") or []]
        new_gates = [g.get("name") for g in nspec.get("schedulingGates") or []]
        for g in new_gates:
            if g not in old_gates:
                errs.append((
                    "spec.schedulingGates",
                    "FieldValueForbidden",
                    f"Forbidden: only deletion is allowed, but found new scheduling gate '{g}'",
                ))
        gated = bool(old_gates)
        for s in (nspec, ospec):
            s.pop("schedulingGates", None)
            s.pop("activeDeadlineSeconds", None)
            for list_name in ("containers", "initContainers"):
                for c in s.get(list_name) or []:
                    c.pop("image", None)
        old_tols = ospec.pop("tolerations", None) or []
        new_tols = nspec.pop("tolerations", None) or []
        if any(t not in new_tols for t in old_tols):
            errs.append(("spec.tolerations", "FieldValueForbidden", "Forbidden: existing toleration can not be modified except its tolerationSeconds"))
        if gated:
            old_sel = ospec.pop("nodeSelector", None) or {}
            new_sel = nspec.pop("nodeSelector", None) or {}
            if any(new_sel.get(k) != v for k, v in old_sel.items()):
                errs.append(("spec.nodeSelector", "FieldValueInvalid", "Invalid value: only additions to spec.nodeSelector are allowed (no mutations or deletions)"))
            ospec.pop("affinity", None)
            nspec.pop("affinity", None)
        if nspec != ospec:
            errs.append(("spec", "FieldValueForbidden", _POD_MUTABLE_MSG))
        return errs

    def status_update(self, new: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
        out = super().status_update(new, old)
        _copy_labels_annotations(out, new)
        qos = (old.get("status") or {}).get("qosClass")
        if qos is not None:
            out.setdefault("status", {})["qosClass"] = qos
        return out


def strategy_for(rt: ResourceType) -> Strategy:
    """The strategy object for a resource type."""
    if rt is PODS:
        return _PodStrategy(rt)
    if rt is NODES:
        return _NodeStrategy(rt)
    if rt is LEASES:
        return _LeaseStrategy(rt)
    if rt is EVENTS or rt is EVENTS_V1:
        return _EventStrategy(rt)
    if rt is PDBS:
        return _PdbStrategy(rt)
    if rt is NAMESPACES:
        return _NamespaceStrategy(rt)
    return Strategy(rt)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


Clock = Callable[[], datetime]
