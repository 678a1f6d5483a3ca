"""The scheduler side of a simulation: kube-scheduler's ``extenders[]`` and the few queue knobs.

An :class:`ExtenderSpec` is one ``KubeSchedulerConfiguration.extenders[]`` entry
(``kubescheduler.config.k8s.io/v1``) with the same fields and the same (non-)defaults
(§2.1): ``weight`` has no default, ``httpTimeout`` 0 means 5 s,
``nodeCacheCapable`` and ``ignorable`` default to false. :func:`SchedulerConfig.validate` applies
kube-scheduler's ``validateExtenders`` (§2.2) and nothing more; :attr:`SchedulerConfig.ordered`
is the call order after start-up (§2.3: ignorable extenders moved to the tail, stable
otherwise), and :attr:`SchedulerConfig.ignored_resources` is what start-up writes into
NodeResourcesFit's ``ignoredResources`` (every ``ignoredByScheduler: true`` managed resource).

``version`` selects the behaviours that differ between releases (§10):

=====================================  =============================  ==========================
behaviour                              "1.29"                         "1.30" (1.30 and later)
=====================================  =============================  ==========================
requeue of extender-rejected pods      backoffQ if no in-tree plugin  ``Extender`` pseudo-plugin:
(§7)                                   rejected, else in-tree events  moved by every event the
                                                                      handlers pass on; by node
                                                                      events only if it passes
                                                                      ``preCheckForNode``
                                                                      (``extender.sim.queue``)
``ignorable`` honoured on bind (§5.1)  no                             yes
1-node search when nothing filters     no                             yes
or scores (§4.2)
nodes an extender dropped silently     candidates (1.29.0-1.29.5)     not candidates (§6.4)
are preemption candidates (§6.4)
=====================================  =============================  ==========================

Both settings keep the 1.29-1.31 behaviours where later releases changed things: QueueingHints
off, extender failure reasons appended to a node's existing status (§3.7), ``Error`` texts
passed through ``fmt.Errorf`` (§3.4), synchronous preemption.

Nothing here imports the rest of kube-extender: the simulator sits beside ``extender.api``,
``extender.config`` and ``extender.cluster`` in the layer contract (``.importlinter``) and gets
what it needs from them by injection (see ``extender.sim.cli.Wiring``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from extender.framework.durations import parse_duration
from extender.framework.resources import names_requested

DEFAULT_EXTENDER_TIMEOUT = 5.0
"""``DefaultExtenderTimeout`` applied by ``NewHTTPExtender`` when httpTimeout is 0 (§2.1)."""

VERSIONS = ("1.29", "1.30")

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SimConfigError(ValueError):
    """An invalid scheduler-side configuration; ``problems`` pairs key paths with messages,
    worded as kube-scheduler's validation words them."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("invalid scheduler configuration:\n" +
                         "\n".join(f"  {path}: {msg}" for path, msg in problems))


def parse_go_duration(value: Any) -> float:
    """``metav1.Duration`` text ("5s", "1m30s", "250ms", "-1s") or a number of seconds, read as
    ``parse_duration`` reads it, a negative one too (kube-scheduler's validation judges it)."""
    if isinstance(value, str) and value.strip() in ("", "0"):
        return 0.0
    if isinstance(value, str) and value.strip().startswith("-") and value.strip()[1:2] != "+":
        return -parse_duration(value.strip()[1:])
    return parse_duration(value)


def extended_resource_name_problem(name: str) -> str | None:
    """kube-scheduler's ``IsExtendedResourceName`` check used by ``validateExtenders`` (§2.2.3):
    a qualified name with a '/', outside ``kubernetes.io``, not ``requests.*``."""
    if "/" not in name:
        return f"{name!r} is an invalid extended resource name"
    prefix, _, short = name.partition("/")
    if not prefix or not _DNS_SUBDOMAIN.match(prefix) or len(prefix) > 253:
        return f"{name!r} is an invalid extended resource name: prefix must be a DNS subdomain"
    if not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return f"{name!r} is an invalid extended resource name: name part must be a qualified name"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"{name!r} is an invalid extended resource name: kubernetes.io namespace is reserved"
    if name.startswith("requests."):
        return f"{name!r} is an invalid extended resource name: must not start with 'requests.'"
    return None


@dataclass(frozen=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderSpec:
    """One ``extenders[]`` entry. ``transport`` is not part of kube-scheduler's configuration: it
    selects how this emulator reaches the extender (None: real HTTP to ``url_prefix``; see
    ``extender.sim.client`` for the in-process and callable transports)."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    http_timeout: float = 0.0
    node_cache_capable: bool = False
    ignorable: bool = False
    enable_https: bool = False
    tls_config: Mapping[str, Any] | None = None
    managed_resources: tuple[ManagedResource, ...] = ()
    transport: Any = field(default=None, compare=False, repr=False)

    # ---- the HTTPExtender predicates (§3.5) ---------------------------------------------------

    @property
    def name(self) -> str:
        """``Name()`` is the urlPrefix (logs, score entry names)."""
        return self.url_prefix

    @property
    def timeout(self) -> float:
        """The effective client timeout: httpTimeout, or 5 s when 0 (§2.1). A negative value is
        accepted by validation and, like Go's http.Client, means no timeout (UNVERIFIED, §2.2)."""
        if self.http_timeout == 0:
            return DEFAULT_EXTENDER_TIMEOUT
        return self.http_timeout

    @property
    def is_binder(self) -> bool:
        return bool(self.bind_verb)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.preempt_verb)

    @property
    def is_filter(self) -> bool:
        return bool(self.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.prioritize_verb)

    @property
    def managed_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.managed_resources)

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        """``IsInterested`` (§3.5): true with no managedResources; else true iff a container or
        init container names a managed resource in requests or limits (value irrelevant)."""
        if not self.managed_resources:
            return True
        return bool(self.managed_names & names_requested(pod))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "extenders[?]", transport: Any = None) -> ExtenderSpec:
        """Build from the camelCase YAML/JSON form. Raises SimConfigError on wrong types only;
        semantic checks are :meth:`SchedulerConfig.validate`."""
        problems: list[tuple[str, str]] = []
        if not isinstance(raw, Mapping):
            raise SimConfigError([(path, "must be a mapping")])
        known = {"urlPrefix", "filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb", "weight", "httpTimeout",
                 "nodeCacheCapable", "ignorable", "managedResources", "enableHTTPS", "tlsConfig"}
        for key in raw:
            if key not in known:
                problems.append((f"{path}.{key}", "unknown field"))

        def text(key: str) -> str:
            v = raw.get(key, "")
            if v is None:
                return ""
            if not isinstance(v, str):
                problems.append((f"{path}.{key}", "must be a string"))
                return ""
            return v

        def flag(key: str) -> bool:
            v = raw.get(key, False)
            if not isinstance(v, bool):
                problems.append((f"{path}.{key}", "must be a boolean"))
                return False
            return v

        weight = raw.get("weight", 0) or 0
        if isinstance(weight, bool) or not isinstance(weight, int):
            problems.append((f"{path}.weight", "must be an integer"))
            weight = 0
        try:
            timeout = parse_go_duration(raw.get("httpTimeout", 0) or 0)
        except ValueError as exc:
            problems.append((f"{path}.httpTimeout", str(exc)))
            timeout = 0.0
        managed: list[ManagedResource] = []
        for j, mr in enumerate(raw.get("managedResources") or []):
            if not isinstance(mr, Mapping) or not isinstance(mr.get("name"), str):
                problems.append((f"{path}.managedResources[{j}]", "must be {name: string, ignoredByScheduler: bool}"))
                continue
            managed.append(ManagedResource(mr["name"], bool(mr.get("ignoredByScheduler", False))))
        tls = raw.get("tlsConfig")
        if tls is not None and not isinstance(tls, Mapping):
            problems.append((f"{path}.tlsConfig", "must be a mapping"))
            tls = None
        spec = cls(url_prefix=text("urlPrefix"), filter_verb=text("filterVerb"), prioritize_verb=text("prioritizeVerb"),
                   preempt_verb=text("preemptVerb"), bind_verb=text("bindVerb"), weight=weight, http_timeout=timeout,
                   node_cache_capable=flag("nodeCacheCapable"), ignorable=flag("ignorable"),
                   enable_https=flag("enableHTTPS"), tls_config=tls, managed_resources=tuple(managed),
                   transport=transport)
        if problems:
            raise SimConfigError(problems)
        return spec


@dataclass(frozen=True)
class SchedulerConfig:
    """The emulated kube-scheduler's configuration.

    ``percentage_of_nodes_to_score`` 0 is adaptive (§4.2). ``in_tree_scoring`` switches the
    emulated in-tree Score plugins (``extender.sim.filters``) off, which is what upstream unit
    tests do when they say "no score plugins" (§8.2 cases 10-11). ``scheduler_names`` are the
    profiles: pending pods of other schedulers are left alone. ``max_virtual_seconds`` bounds a
    run after the last workload event; ``stop_when_settled`` ends it earlier, once every waiting
    pod has been tried against the current cluster state - right for extenders whose answers
    depend only on the cluster; switch it off for extenders that change their mind on their own
    (see ``extender.sim.scheduler``)."""

    extenders: tuple[ExtenderSpec, ...] = ()
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_in_unschedulable_seconds: float = 300.0
    unschedulable_flush_interval: float = 30.0
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100
    version: str = "1.30"
    seed: int = 0
    in_tree_scoring: bool = True
    scheduler_names: tuple[str, ...] = ("default-scheduler",)
    max_virtual_seconds: float = 3600.0
    stop_when_settled: bool = True

    # ---- derived ----------------------------------------------------------------------------

    @property
    def ordered(self) -> tuple[ExtenderSpec, ...]:
        """Call order for Filter, Preempt and the Bind search: ignorable extenders moved to the
        tail, stable otherwise (``buildExtenders``, §2.3)."""
        return tuple([e for e in self.extenders if not e.ignorable] + [e for e in self.extenders if e.ignorable])

    @property
    def ignored_resources(self) -> frozenset[str]:
        """NodeResourcesFit ``ignoredResources``: every ignoredByScheduler managed resource (§2.3)."""
        return frozenset(r.name for e in self.extenders for r in e.managed_resources if r.ignored_by_scheduler)

    @property
    def v130(self) -> bool:
        return self.version != "1.29"

    @property
    def ignorable_bind(self) -> bool:
        """1.30+: an ignorable binder's error falls through to the default binder (§3.4, §5.1)."""
        return self.v130

    @property
    def extender_requeue(self) -> bool:
        """1.30+: the ``Extender`` pseudo-plugin in UnschedulablePlugins (§7, #122022)."""
        return self.v130

    @property
    def one_node_shortcut(self) -> bool:
        """1.30+: search only 1 feasible node when nothing scores and no extender filters (§4.2)."""
        return self.v130

    @property
    def absent_nodes_are_candidates(self) -> bool:
        """Nodes an extender dropped without a status: preemption candidates before #125197 (§6.4)."""
        return not self.v130

    def with_(self, **changes: Any) -> SchedulerConfig:
        return replace(self, **changes)

    # ---- validation (§2.2) ------------------------------------------------------------------

    def problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.version not in VERSIONS:
            out.append(("version", f"must be one of {', '.join(VERSIONS)}"))
        if not 0 <= self.percentage_of_nodes_to_score <= 100:
            out.append(("percentageOfNodesToScore", "not in valid range [0-100]"))
        if self.pod_initial_backoff_seconds <= 0:
            out.append(("podInitialBackoffSeconds", "must be greater than 0"))
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            out.append(("podMaxBackoffSeconds", "must be greater than or equal to PodInitialBackoffSeconds"))
        binders = 0
        seen: set[str] = set()
        for i, e in enumerate(self.extenders):
            path = f"extenders[{i}]"
            if e.prioritize_verb and e.weight <= 0:
                out.append((f"{path}.weight", "must have a positive weight applied to it"))
            if e.bind_verb:
                binders += 1
            for j, r in enumerate(e.managed_resources):
                problem = extended_resource_name_problem(r.name)
                if problem:
                    out.append((f"{path}.managedResources[{j}].name", problem))
                if r.name in seen:
                    out.append((f"{path}.managedResources[{j}].name", "duplicate extender managed resource name"))
                seen.add(r.name)
        if binders > 1:
            out.append(("extenders", f'Invalid value: "found {binders} extenders implementing bind": '
                                     "only one extender can implement bind"))
        return out

    def validate(self) -> SchedulerConfig:
        """Raise SimConfigError listing every problem; return self when valid."""
        problems = self.problems()
        if problems:
            raise SimConfigError(problems)
        return self

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, transports: Iterable[Any] | None = None,
                  **overrides: Any) -> SchedulerConfig:
        """From a KubeSchedulerConfiguration-like mapping: ``extenders``,
        ``percentageOfNodesToScore``, ``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``,
        plus the simulator's own ``version`` and ``seed``. ``transports`` pairs with
        ``extenders`` by position. Validated."""
        raw = raw or {}
        transports = list(transports or [])
        exts = []
        for i, e in enumerate(raw.get("extenders") or []):
            exts.append(ExtenderSpec.from_dict(e, f"extenders[{i}]", transports[i] if i < len(transports) else None))
        kwargs: dict[str, Any] = {"extenders": tuple(exts)}
        for key, attr in (("percentageOfNodesToScore", "percentage_of_nodes_to_score"),
                          ("podInitialBackoffSeconds", "pod_initial_backoff_seconds"),
                          ("podMaxBackoffSeconds", "pod_max_backoff_seconds"),
                          ("version", "version"), ("seed", "seed")):
            if raw.get(key) is not None:
                kwargs[attr] = raw[key]
        kwargs.update(overrides)
        return cls(**kwargs).validate()
