"""ExtenderConfiguration: one file feeds the server, the profiles and the scheduler's stanza.

Example (every key optional; these are the defaults)::

    apiVersion: kube-extender.io/v1alpha1
    kind: ExtenderConfiguration
    managedResources:                  # resources this extender accounts and kube-scheduler delegates
      - {name: example.com/gpu, ignoredByScheduler: true}
    annotationPrefix: kube-extender.io/
    extender:                          # how kube-scheduler reaches us (-> `config scheduler`)
      urlPrefix: ""                    # default http://<server.host>:<server.port><server.pathPrefix>
      filterVerb: filter
      prioritizeVerb: prioritize
      preemptVerb: preempt
      bindVerb: bind                   # "" = let kube-scheduler bind (no Reserve/Permit then)
      weight: 1
      httpTimeout: 5s                  # Permit waits are budgeted below this
      nodeCacheCapable: true
      ignorable: false
      tlsConfig: {}                    # kube-scheduler's side: caFile, certFile, keyFile, serverName
    server:
      host: 127.0.0.1
      port: 8888
      pathPrefix: /scheduler
      worker: gevent                   # gevent (greenlets; fastest here) or gthread
      connections: 2000                # gevent: concurrent requests (every gang member waits in bind)
      threads: 64                      # gthread: concurrent requests
      maxRequestBytes: 64Mi
      logLevel: info                   # debug | info | warning | error
      logFormat: logfmt                # logfmt | json
      tls: {certFile: "", keyFile: "", clientCAFile: ""}   # HTTPS; clientCAFile: require client certs
    cache:
      assumedPodTTL: 30s               # 0 = assumed pods never expire
      orphanCollectionInterval: 10s    # how often expired reservations are released and cleaned
    leaderElection:                    # for several replicas against a cluster
      enabled: false
      leaseName: kube-extender
      leaseNamespace: kube-system
      leaseDuration: 15s
      renewDeadline: 10s               # at least 1s below leaseDuration (each write's time)
      retryPeriod: 2s
    admission:                         # pods created with this scheduling gate wait until PreEnqueue admits them
      enabled: true
      gate: kube-extender.io/admission
      strategy: BestEffortFIFO         # or StrictFIFO: the head blocks those behind it wanting the same resources
      interval: 1s                     # a pass runs after cluster changes, at most this often
      resync: 60s                      # every gated pod is re-evaluated at least this often, events or not
      holdTimeout: 30s                 # an admitted pod holds its capacity until bound, deleted, or this long
    requeue:                           # pods the extender rejected in Filter from a view older than a change
      nudge: true                      # touch them when that change frees room for them (docs/operations.md)
      qps: 20                          # nudges per second across all pods (burst: 2 x qps)
      minInterval: 1s                  # at most one nudge per pod this often
    kubernetes:                        # used with `serve --cluster kube`
      watchTimeout: 5m
      events: true                     # record Events on pods (rejections, preemption)
    profiles:
      - schedulerName: default-scheduler
        plugins:                       # per extension point: {enabled: [{name, weight}], disabled: [name|"*"]}
          multiPoint: {enabled: []}
        pluginConfig:
          - name: NodeResources
            args: {scoringStrategy: {type: MostAllocated}}

Errors name the key path (``profiles[0].plugins.score.enabled[1].weight: ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml
from marshmallow import RAISE, Schema, ValidationError, fields, post_load, pre_load, validate, validates_schema

from extender.framework.interfaces import EXTENSION_POINTS
from extender.framework.problems import flatten
from extender.framework.durations import format_duration, parse_duration
from extender.framework.resources import QuantityError, milli
from extender.runtime.profile import PluginRef, PluginSet, ProfileSpec

API_VERSION = "kube-extender.io/v1alpha1"
KIND = "ExtenderConfiguration"

_PROFILE_PATH = re.compile(r"^profiles\[(\d+)\]")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
                        r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")


class ConfigError(ValueError):
    """An invalid configuration; ``problems`` pairs key paths with messages, ``source`` names the
    file. ``partial``: the configuration without the sections at fault and without the profiles
    at fault, when it still parses, so the callers that build profiles can report plugin problems
    in the same breath. ``profile_indices``: the file's index of each of ``partial``'s profiles
    (the file's numbering, as :meth:`file_path` restores it, differs once a profile is left out)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "",
                 partial: ExtenderConfig | None = None, profile_indices: tuple[int, ...] = ()) -> None:
        self.problems = problems
        self.source = source
        self.partial = partial
        self.profile_indices = profile_indices
        super().__init__("\n".join(self.lines()))

    def file_path(self, path: str) -> str:
        """A key path of a problem found in ``partial``, numbered as in the file: ``profiles[j]``
        of ``partial`` is ``profiles[profile_indices[j]]`` of the file. Other paths as they are."""
        m = _PROFILE_PATH.match(path)
        if m is None or int(m.group(1)) >= len(self.profile_indices):
            return path
        return f"profiles[{self.profile_indices[int(m.group(1))]}]{path[m.end():]}"

    def lines(self) -> list[str]:
        """One line per problem: ``FILE: key.path: message`` (the file and path when known)."""
        where = f"{self.source}: " if self.source else ""
        return [f"{where}{path or '<root>'}: {msg}" for path, msg in self.problems]


class Duration(fields.Field):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        if seconds < 0:
            raise ValidationError("must not be negative")
        return seconds


class ByteSize(fields.Field):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        try:
            amount = milli(value) // 1000
        except (QuantityError, ValueError, ArithmeticError) as exc:  # .inf, .nan: not a quantity
            raise ValidationError(str(exc) or f"{value!r} is not a size") from exc
        if amount <= 0:
            raise ValidationError("must be positive")
        return amount


def valid_extended_resource_name(name: str) -> str | None:
    """kube-scheduler's rule for managedResources names; returns the problem or None."""
    if "/" not in name:
        return "must be a qualified extended resource name with a domain, like example.com/gpu"
    if not _QUALIFIED.match(name):
        return "must be a qualified name (domain/name)"
    domain, part = name.split("/", 1)
    if len(part) > 63 or len(domain) > 244:  # 244: kube-scheduler also checks "requests." + name
        return "must be a qualified name: a domain of at most 244 characters, a name of at most 63"
    if "kubernetes.io/" in name:  # kube-scheduler takes such a name for a native resource
        return "must not be in the kubernetes.io namespace"
    if name.startswith("requests."):
        return "must not start with 'requests.'"
    return None


class _Strict(Schema):
    """Unknown keys are errors; an absent or null nested section is loaded as ``{}`` so its own
    defaults apply (marshmallow does not deserialize ``load_default`` values)."""

    class Meta:
        unknown = RAISE

    @pre_load
    def fill_sections(self, data: Any, **_: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for name, f in self.fields.items():
            if isinstance(f, fields.Nested) and data.get(name) is None:
                data[name] = {}
        return data


class _ManagedResource(_Strict):
    name = fields.String(required=True)
    ignoredByScheduler = fields.Boolean(load_default=True)

    @validates_schema
    def check_name(self, data: dict[str, Any], **_: Any) -> None:
        problem = valid_extended_resource_name(data.get("name", ""))
        if problem:
            raise ValidationError(problem, "name")


class _SchedulerTls(_Strict):
    """kube-scheduler's ``tlsConfig`` for calling this extender (paths on the scheduler's side)."""

    caFile = fields.String(load_default="")
    certFile = fields.String(load_default="")
    keyFile = fields.String(load_default="")
    serverName = fields.String(load_default="")
    insecure = fields.Boolean(load_default=False)

    @validates_schema
    def check(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("insecure") and data.get("caFile"):
            raise ValidationError("kube-scheduler refuses a CA together with insecure", "insecure")
        if bool(data.get("certFile")) != bool(data.get("keyFile")):
            raise ValidationError("certFile and keyFile go together", "keyFile")


class _Extender(_Strict):
    urlPrefix = fields.String(load_default="")
    filterVerb = fields.String(load_default="filter")
    prioritizeVerb = fields.String(load_default="prioritize")
    preemptVerb = fields.String(load_default="preempt")
    bindVerb = fields.String(load_default="bind")
    weight = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1, max=100))
    httpTimeout = Duration(load_default=5.0)
    nodeCacheCapable = fields.Boolean(load_default=True)
    ignorable = fields.Boolean(load_default=False)
    tlsConfig = fields.Nested(_SchedulerTls, load_default=dict)

    @validates_schema
    def check(self, data: dict[str, Any], **_: Any) -> None:
        seen: dict[str, str] = {}
        for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
            verb = data.get(key, "")
            if verb and not re.fullmatch(r"[A-Za-z0-9._~-]+", verb):
                raise ValidationError("must be a single URL path segment", key)
            if verb in seen:
                raise ValidationError(f"the same path segment as {seen[verb]} ({verb!r}): one verb would answer "
                                      "the other's requests", key)
            if verb:
                seen[verb] = key
        if data.get("httpTimeout", 5.0) == 0:
            raise ValidationError("must be positive (kube-scheduler treats 0 as 5s; say 5s)", "httpTimeout")
        if 0 < data.get("httpTimeout", 5.0) < 0.001:
            raise ValidationError("must be at least 1ms", "httpTimeout")


class _Tls(_Strict):
    certFile = fields.String(load_default="")
    keyFile = fields.String(load_default="")
    clientCAFile = fields.String(load_default="")
    """When set, clients (kube-scheduler) must present a certificate signed by this CA."""

    @validates_schema
    def pair(self, data: dict[str, Any], **_: Any) -> None:
        if bool(data.get("certFile")) != bool(data.get("keyFile")):
            raise ValidationError("certFile and keyFile go together", "keyFile")
        if data.get("clientCAFile") and not data.get("certFile"):
            raise ValidationError("client verification needs certFile and keyFile", "clientCAFile")


class _Server(_Strict):
    host = fields.String(load_default="127.0.0.1")
    port = fields.Integer(load_default=8888, strict=True, validate=validate.Range(min=1, max=65535))
    pathPrefix = fields.String(load_default="/scheduler", validate=validate.Regexp(r"^(/[A-Za-z0-9._~-]+)*$",
                               error="must be empty or a path like /scheduler (no trailing slash)"))
    worker = fields.String(load_default="gevent", validate=validate.OneOf(["gevent", "gthread"]))
    threads = fields.Integer(load_default=64, strict=True, validate=validate.Range(min=1, max=10000))
    connections = fields.Integer(load_default=2000, strict=True, validate=validate.Range(min=10, max=100000))
    maxRequestBytes = ByteSize(load_default=64 * 2**20)
    logLevel = fields.String(load_default="info", validate=validate.OneOf(["debug", "info", "warning", "error"]))
    logFormat = fields.String(load_default="logfmt", validate=validate.OneOf(["logfmt", "json"]))
    tls = fields.Nested(_Tls, load_default=dict)


class _Cache(_Strict):
    assumedPodTTL = Duration(load_default=30.0)
    orphanCollectionInterval = Duration(load_default=10.0)


MIN_LEASE_GAP = 1.0
"""The least ``leaseDuration - renewDeadline``, in seconds: the time every API write of the leader
gets. kube-apiserver's latency SLO for a mutating call on one object is 1 s (99th percentile)."""


def _nanoseconds(seconds: float) -> int:
    """A duration as Go holds it: whole nanoseconds (2.9s - 1.9s is 1s, not 0.9999999999999998)."""
    return round(seconds * 1e9)


class _LeaderElection(_Strict):
    enabled = fields.Boolean(load_default=False)
    leaseName = fields.String(load_default="kube-extender", validate=validate.Length(min=1))
    leaseNamespace = fields.String(load_default="kube-system", validate=validate.Length(min=1))
    leaseDuration = Duration(load_default=15.0)
    renewDeadline = Duration(load_default=10.0)
    retryPeriod = Duration(load_default=2.0)

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        """kube-scheduler's order of the timings, and room for a write between them: the leader's
        writes give up within ``leaseDuration - renewDeadline`` (the fence, ``create_kube_app``), and
        kube-apiserver may take up to :data:`MIN_LEASE_GAP` for one (its latency SLO)."""
        if not 0 < data["retryPeriod"] < data["renewDeadline"] < data["leaseDuration"]:
            raise ValidationError("need 0 < retryPeriod < renewDeadline < leaseDuration", "renewDeadline")
        if _nanoseconds(data["leaseDuration"]) - _nanoseconds(data["renewDeadline"]) < _nanoseconds(MIN_LEASE_GAP):
            raise ValidationError(
                f"must be at least {format_duration(MIN_LEASE_GAP)} below leaseDuration "
                f"({format_duration(data['leaseDuration'])}), not {format_duration(data['renewDeadline'])}: "
                "a leader's API writes give up within that gap, so that none lands after another replica may take "
                "the lease, and kube-apiserver may take a second for one", "renewDeadline")


class _Admission(_Strict):
    enabled = fields.Boolean(load_default=True)
    gate = fields.String(load_default="kube-extender.io/admission",
                         validate=validate.Regexp(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                                                  error="must be a qualified name like kube-extender.io/admission"))
    strategy = fields.String(load_default="BestEffortFIFO", validate=validate.OneOf(["StrictFIFO", "BestEffortFIFO"]))
    interval = Duration(load_default=1.0, validate=validate.Range(min=0.05, error="must be at least 50ms"))
    resync = Duration(load_default=60.0, validate=validate.Range(min=1.0, error="must be at least 1s"))
    holdTimeout = Duration(load_default=30.0, validate=validate.Range(min=1.0, error="must be at least 1s"))


class _Requeue(_Strict):
    nudge = fields.Boolean(load_default=True)
    qps = fields.Float(load_default=20.0, validate=validate.Range(min=0.1, max=1000))
    minInterval = Duration(load_default=1.0)


class _Kubernetes(_Strict):
    watchTimeout = Duration(load_default=300.0)
    events = fields.Boolean(load_default=True)


class _PluginRef(_Strict):
    name = fields.String(required=True, validate=validate.Length(min=1))
    weight = fields.Integer(load_default=1, strict=True)


class _PluginSet(_Strict):
    enabled = fields.List(fields.Nested(_PluginRef), load_default=list)
    disabled = fields.List(fields.Raw(), load_default=list)

    @post_load
    def names(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        # kube-scheduler writes disabled entries as {name: X}; accept that and plain strings
        out = []
        for i, d in enumerate(data["disabled"]):
            name = d.get("name") if isinstance(d, dict) else d
            if not isinstance(name, str) or not name:
                raise ValidationError({"disabled": {i: ["must be a plugin name or {name: ...}"]}})
            if isinstance(d, dict) and set(d) - {"name"}:
                raise ValidationError({"disabled": {i: [f"unknown key {k!r}: only name" for k in sorted(set(d) - {"name"})]}})
            out.append(name)
        data["disabled"] = out
        return data


_PLUGIN_POINTS: dict[str, fields.Field] = {point: fields.Nested(_PluginSet)
                                           for point in ["multiPoint", *EXTENSION_POINTS]}
_Plugins = _Strict.from_dict(_PLUGIN_POINTS, name="Plugins")


class _PluginConfig(_Strict):
    name = fields.String(required=True)
    args = fields.Dict(load_default=dict)


class _Profile(_Strict):
    schedulerName = fields.String(required=True, validate=validate.Length(min=1))
    plugins = fields.Nested(_Plugins, load_default=dict)
    pluginConfig = fields.List(fields.Nested(_PluginConfig), load_default=list)

    @validates_schema
    def one_config_per_plugin(self, data: dict[str, Any], **_: Any) -> None:
        """As kube-scheduler: a plugin's args are given once (a second entry would silently win)."""
        seen: set[str] = set()
        for i, entry in enumerate(data.get("pluginConfig") or ()):
            if entry["name"] in seen:
                raise ValidationError({"pluginConfig": {i: {"name": [f"repeated config for plugin {entry['name']}"]}}})
            seen.add(entry["name"])


class _Config(_Strict):
    apiVersion = fields.String(load_default=API_VERSION,
                               validate=validate.Equal(API_VERSION, error=f"must be {API_VERSION}"))
    kind = fields.String(load_default=KIND, validate=validate.Equal(KIND, error=f"must be {KIND}"))
    managedResources = fields.List(fields.Nested(_ManagedResource), required=True)
    annotationPrefix = fields.String(load_default="kube-extender.io/",
                                     validate=validate.Regexp(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/$",
                                                              error="must be a DNS subdomain followed by '/'"))
    extender = fields.Nested(_Extender, load_default=dict)
    server = fields.Nested(_Server, load_default=dict)
    cache = fields.Nested(_Cache, load_default=dict)
    leaderElection = fields.Nested(_LeaderElection, load_default=dict)
    admission = fields.Nested(_Admission, load_default=dict)
    requeue = fields.Nested(_Requeue, load_default=dict)
    kubernetes = fields.Nested(_Kubernetes, load_default=dict)
    profiles = fields.List(fields.Nested(_Profile), required=True)

    @pre_load
    def default_lists(self, data: Any, **_: Any) -> Any:
        if isinstance(data, Mapping):
            data = dict(data)
            if data.get("managedResources") is None:
                data["managedResources"] = [{"name": "example.com/gpu", "ignoredByScheduler": True}]
            if data.get("profiles") is None:
                data["profiles"] = [{"schedulerName": "default-scheduler"}]
        return data

    @validates_schema
    def check(self, data: dict[str, Any], **_: Any) -> None:
        names = [r["name"] for r in data.get("managedResources", [])]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValidationError(f"duplicate managed resource name(s): {', '.join(dupes)}", "managedResources")
        profiles = [p["schedulerName"] for p in data.get("profiles", [])]
        if not profiles:
            raise ValidationError("at least one profile is required", "profiles")
        if len(set(profiles)) != len(profiles):
            raise ValidationError("schedulerName must be unique across profiles", "profiles")


@dataclass(frozen=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = True


@dataclass(frozen=True)
class ExtenderLink:
    """How kube-scheduler calls this extender (its ``extenders:`` entry)."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    preempt_verb: str = "preempt"
    bind_verb: str = "bind"
    weight: int = 1
    http_timeout: float = 5.0
    node_cache_capable: bool = True
    ignorable: bool = False
    tls_config: Mapping[str, Any] = field(default_factory=dict)
    """kube-scheduler's tlsConfig (only the keys that are set)."""


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8888
    path_prefix: str = "/scheduler"
    threads: int = 64
    max_request_bytes: int = 64 * 2**20
    log_level: str = "info"
    log_format: str = "logfmt"
    tls: TlsConfig = field(default_factory=TlsConfig)
    worker: str = "gevent"
    connections: int = 2000


@dataclass(frozen=True)
class LeaderElectionConfig:
    enabled: bool = False
    lease_name: str = "kube-extender"
    lease_namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class AdmissionConfig:
    enabled: bool = True
    gate: str = "kube-extender.io/admission"
    strategy: str = "BestEffortFIFO"
    interval: float = 1.0
    resync: float = 60.0
    hold_timeout: float = 30.0


@dataclass(frozen=True)
class RequeueConfig:
    nudge: bool = True
    qps: float = 20.0
    min_interval: float = 1.0


@dataclass(frozen=True)
class KubernetesConfig:
    watch_timeout: float = 300.0
    events: bool = True


@dataclass(frozen=True)
class ExtenderConfig:
    managed_resources: tuple[ManagedResource, ...]
    annotation_prefix: str
    extender: ExtenderLink
    server: ServerConfig
    assumed_pod_ttl: float
    profiles: tuple[ProfileSpec, ...]
    orphan_interval: float = 10.0
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    requeue: RequeueConfig = field(default_factory=RequeueConfig)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    source: str = field(default="", compare=False)
    """The file it came from ("" for built-in defaults): problems found later name it."""

    @property
    def managed_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.managed_resources)

    def with_server(self, **changes: Any) -> ExtenderConfig:
        """A copy with server settings overridden (CLI flags, checked as the file's keys are: a
        ConfigError names the flag); the default urlPrefix follows."""
        from dataclasses import replace
        given = {k: v for k, v in changes.items() if v is not None}
        errors = _Server().validate({k: v for k, v in given.items() if k in ("port", "threads")})
        if errors:
            raise ConfigError([(f"--{path}", text) for path, text in flatten(errors)], "the command line")
        server = replace(self.server, **given)
        link = self.extender
        if not (self.raw.get("extender") or {}).get("urlPrefix"):
            link = replace(link, url_prefix=_default_url(server))
        return replace(self, server=server, extender=link)

    def effective(self) -> dict[str, Any]:
        """The whole configuration after defaults, in the file's own shape (durations as ``"30s"``,
        sizes in bytes): what ``/debug/config`` shows. Nothing in the model is secret: TLS
        settings are file paths, shown as configured, never the files' contents."""
        e, s, le, a, rq, k = (self.extender, self.server, self.leader_election, self.admission, self.requeue,
                              self.kubernetes)
        d = format_duration
        return {
            "apiVersion": API_VERSION, "kind": KIND,
            "managedResources": [{"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                                 for r in self.managed_resources],
            "annotationPrefix": self.annotation_prefix,
            "extender": {"urlPrefix": e.url_prefix, "filterVerb": e.filter_verb, "prioritizeVerb": e.prioritize_verb,
                         "preemptVerb": e.preempt_verb, "bindVerb": e.bind_verb, "weight": e.weight,
                         "httpTimeout": d(e.http_timeout), "nodeCacheCapable": e.node_cache_capable,
                         "ignorable": e.ignorable,
                         "tlsConfig": {"caFile": "", "certFile": "", "keyFile": "", "serverName": "", "insecure": False,
                                       **e.tls_config}},
            "server": {"host": s.host, "port": s.port, "pathPrefix": s.path_prefix, "worker": s.worker,
                       "connections": s.connections, "threads": s.threads, "maxRequestBytes": s.max_request_bytes,
                       "logLevel": s.log_level, "logFormat": s.log_format,
                       "tls": {"certFile": s.tls.cert_file, "keyFile": s.tls.key_file,
                               "clientCAFile": s.tls.client_ca_file}},
            "cache": {"assumedPodTTL": d(self.assumed_pod_ttl), "orphanCollectionInterval": d(self.orphan_interval)},
            "leaderElection": {"enabled": le.enabled, "leaseName": le.lease_name, "leaseNamespace": le.lease_namespace,
                               "leaseDuration": d(le.lease_duration), "renewDeadline": d(le.renew_deadline),
                               "retryPeriod": d(le.retry_period)},
            "admission": {"enabled": a.enabled, "gate": a.gate, "strategy": a.strategy, "interval": d(a.interval),
                          "resync": d(a.resync), "holdTimeout": d(a.hold_timeout)},
            "requeue": {"nudge": rq.nudge, "qps": rq.qps, "minInterval": d(rq.min_interval)},
            "kubernetes": {"watchTimeout": d(k.watch_timeout), "events": k.events},
            "profiles": [{"schedulerName": p.scheduler_name,
                          "plugins": {point: {"enabled": [{"name": r.name, "weight": r.weight} for r in ps.enabled],
                                              "disabled": list(ps.disabled)} for point, ps in p.plugins.items()},
                          "pluginConfig": [{"name": name, "args": dict(args)} for name, args in p.plugin_args.items()]}
                         for p in self.profiles],
        }

    def verbs(self) -> dict[str, str]:
        """verb kind -> URL path segment, for the verbs that are enabled."""
        e = self.extender
        pairs = {"filter": e.filter_verb, "prioritize": e.prioritize_verb, "preempt": e.preempt_verb, "bind": e.bind_verb}
        return {k: v for k, v in pairs.items() if v}


def _default_url(server: ServerConfig) -> str:
    scheme = "https" if server.tls.enabled else "http"
    host = f"[{server.host}]" if ":" in server.host else server.host  # an IPv6 address in a URL
    return f"{scheme}://{host}:{server.port}{server.path_prefix}"


def _profile(data: Mapping[str, Any]) -> ProfileSpec:
    plugins = {
        point: PluginSet(tuple(PluginRef(r["name"], r["weight"]) for r in ps["enabled"]), tuple(ps["disabled"]))
        for point, ps in data["plugins"].items()
    }
    args = {pc["name"]: pc["args"] for pc in data["pluginConfig"]}
    return ProfileSpec(data["schedulerName"], plugins, args)


def parse_config(raw: Any, source: str = "") -> ExtenderConfig:
    """Validate a decoded configuration document. Raises ConfigError naming every bad key (with a
    "did you mean" for a misspelled one). Plugin names and args are validated when profiles are
    built (``extender.app``), from the ``partial`` configuration too when other sections fail."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([("", f"expected a mapping, got {type(raw).__name__}")], source)
    schema = _Config()
    try:
        data = schema.load(raw)
    except ValidationError as exc:
        partial, indices = _without(raw, exc.messages, source) or (None, ())
        raise ConfigError(sorted(flatten(exc.messages, schema=schema)), source, partial, indices) from exc
    s = data["server"]
    server = ServerConfig(s["host"], s["port"], s["pathPrefix"], s["threads"], s["maxRequestBytes"],
                          s["logLevel"], s["logFormat"],
                          TlsConfig(s["tls"]["certFile"], s["tls"]["keyFile"], s["tls"]["clientCAFile"]),
                          s["worker"], s["connections"])
    e = data["extender"]
    link = ExtenderLink(e["urlPrefix"] or _default_url(server), e["filterVerb"], e["prioritizeVerb"],
                        e["preemptVerb"], e["bindVerb"], e["weight"], e["httpTimeout"], e["nodeCacheCapable"],
                        e["ignorable"], {k: v for k, v in e["tlsConfig"].items() if v})
    le = data["leaderElection"]
    return ExtenderConfig(
        managed_resources=tuple(ManagedResource(r["name"], r["ignoredByScheduler"]) for r in data["managedResources"]),
        annotation_prefix=data["annotationPrefix"],
        extender=link,
        server=server,
        assumed_pod_ttl=data["cache"]["assumedPodTTL"],
        profiles=tuple(_profile(p) for p in data["profiles"]),
        orphan_interval=data["cache"]["orphanCollectionInterval"],
        leader_election=LeaderElectionConfig(le["enabled"], le["leaseName"], le["leaseNamespace"],
                                             le["leaseDuration"], le["renewDeadline"], le["retryPeriod"]),
        kubernetes=KubernetesConfig(data["kubernetes"]["watchTimeout"], data["kubernetes"]["events"]),
        admission=AdmissionConfig(data["admission"]["enabled"], data["admission"]["gate"],
                                  data["admission"]["strategy"], data["admission"]["interval"],
                                  data["admission"]["resync"], data["admission"]["holdTimeout"]),
        requeue=RequeueConfig(data["requeue"]["nudge"], data["requeue"]["qps"], data["requeue"]["minInterval"]),
        raw=dict(raw),
        source=source,
    )


def _without(raw: Mapping[str, Any], messages: Any,
             source: str) -> tuple[ExtenderConfig, tuple[int, ...]] | None:
    """``raw`` minus what is at fault, parsed, with the file's index of each profile it kept: the
    top-level sections at fault are left out, and of ``profiles`` only the entries at fault
    (``profiles[i]``). None when the document, or ``profiles`` as a whole (not a list, no profile
    left), is at fault, or the rest does not parse either."""
    if not isinstance(messages, Mapping) or "_schema" in messages:
        return None
    rest = {k: v for k, v in raw.items() if k not in messages}
    kept: tuple[int, ...] | None = None
    if "profiles" in messages:
        bad, profiles = messages["profiles"], raw.get("profiles")
        if not (isinstance(bad, Mapping) and all(isinstance(i, int) for i in bad) and isinstance(profiles, list)):
            return None
        kept = tuple(i for i in range(len(profiles)) if i not in bad)
        if not kept:
            return None
        rest["profiles"] = [profiles[i] for i in kept]
    try:
        config = parse_config(rest, source)
    except ConfigError:
        return None
    return config, kept if kept is not None else tuple(range(len(config.profiles)))


def default_config() -> ExtenderConfig:
    return parse_config(None, "<defaults>")


def load_config(path: str | Path | None) -> ExtenderConfig:
    """Load and validate a configuration file; None gives the defaults."""
    if path is None:
        return default_config()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("", f"cannot read: {exc.strerror or exc}")], str(p)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([("", f"not UTF-8 text: {exc}")], str(p)) from exc
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader that refuses repeated keys
    except _RepeatedKey as exc:
        raise ConfigError([(exc.path, f"repeated key (line {exc.line}): the earlier value would be lost")],
                          str(p)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"not valid YAML: {exc}")], str(p)) from exc
    return parse_config(raw, str(p))


class _RepeatedKey(yaml.YAMLError):
    def __init__(self, path: str, line: int) -> None:
        super().__init__(path)
        self.path, self.line = path, line


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load``, but a key repeated in one mapping is an error (as Kubernetes' strict
    decoding says "duplicate field"), not the last value silently winning."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """The repeated-key check, on a mapping's own keys, before its merge keys (``<<``) bring
        in theirs: a merged key its mapping sets again is an override, not a repeat. A mapping
        flattened once (used again through an alias) is not checked again."""
        checked: set[int] = self.__dict__.setdefault("_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            self._no_repeats(node)
        super().flatten_mapping(node)  # type: ignore[no-untyped-call]

    def _no_repeats(self, node: yaml.MappingNode) -> None:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor``: merged, may be overridden
                continue
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar, not a mapping or list",
                                                        key_node.start_mark) from None
            if key in seen:
                raise _RepeatedKey(str(key), key_node.start_mark.line + 1)
            seen.add(key)
