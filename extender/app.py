"""create_app: wires configuration, cluster source and writer, cache, plugins, engine and routes.

    app = create_app(config, source=MemoryCluster.from_file("cluster.yaml"))

Time and I/O are injected: ``source`` (a ClusterSource; default: the embedded demo cluster),
``writer`` (a ClusterWriter; default: the source itself when it can write), ``clock``. State
lives on ``app.extensions["kube_extender"]``, never in module globals. The source is started
before the app is returned, so a memory cluster is synced (ready) at once.
"""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from flask import Flask

from extender import __version__
from extender.api.routes import ApiSettings, register
from extender.cache.cache import ClusterCache
from extender.cluster.interfaces import ClusterSource
from extender.cluster.memory import MemoryCluster
from extender.config.model import ConfigError, ExtenderConfig, default_config
from extender.framework.clock import Clock, SystemClock
from extender.framework.handle import ClusterWriter
from extender.lifecycle import Lifecycle
from extender.metrics import Metrics
from extender.queue.admission import Admitter
from extender.queue.nudger import Nudger
from extender.queue.queue import SchedulingQueue
from extender.runtime.engine import Engine
from extender.runtime.explain import ExplainLog
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime import catalog, discovery
from extender.runtime.profile import PluginRef, PluginSet, ProfileError, build_framework, unknown_plugin
from extender.runtime.registry import Origin, Registry
from extender.runtime.waiting_pods import WaitingPods
from policies import DEFAULT_PLUGINS, builtin_specs

log = logging.getLogger(__name__)

DEFAULTS = PluginSet(enabled=tuple(PluginRef(name) for name in DEFAULT_PLUGINS))
"""What a profile runs when the configuration says nothing."""


def builtin_registry() -> Registry:
    """A registry of the built-in policies."""
    return Registry(builtin_specs(), Origin("kube-extender", __version__))


def plugin_registry(extra: Registry | None = None) -> Registry:
    """The plugins an app can enable: the built-in ones plus ``extra`` when given (tests, the
    test kit), else plus every installed plugin package (``extender.runtime.discovery``).
    Raises PluginLoadError naming the package that clashes or does not load."""
    return builtin_registry().merged(extra) if extra is not None else discovery.installed(builtin_registry())


class Leadership(Protocol):
    def is_leader(self) -> bool: ...

    def term(self) -> int: ...

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop competing within ``timeout`` seconds; give the lease up if held and ``release``."""


@dataclass
class ExtenderState:
    config: ExtenderConfig
    engine: Engine
    cache: ClusterCache
    queue: SchedulingQueue
    metrics: Metrics
    source: ClusterSource
    writer: ClusterWriter
    leader: Leadership | None = None
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    admitter: Admitter | None = None
    nudger: Nudger | None = None
    release_lease: bool = True
    """Whether ``close`` gives the Lease up (a simulated crash does not)."""

    def close(self, timeout: float = 10.0, *, release: bool = True) -> None:
        """Stop every background thread the app runs - admission, nudges, orphan collection, the
        leader elector (giving the Lease up unless ``release`` is False), the cluster source's
        watches, the event recorder - within about ``timeout`` seconds. Idempotent: a second call
        does nothing (``Lifecycle.close``)."""
        if not self.lifecycle.closed:
            self.release_lease = release
        self.lifecycle.close(timeout)


def _step_down(leader: Leadership, state: ExtenderState, seconds: float) -> None:
    """Stop leading; give the Lease up (so a standby leads at once) only when the app's loops have
    all ended: a loop's write that passed the fence before could still land after a standby took
    over. Otherwise the Lease is left to expire, as after a crash."""
    release = state.release_lease and state.lifecycle.loops_ended()
    if state.release_lease and not release:
        log.warning("a background loop is still running: the Lease is left to expire, not released")
    leader.stop(release=release, timeout=seconds)


def _freeze_heap() -> None:
    """After the initial sync the cluster's objects live as long as the process: move them out of
    the cyclic garbage collector's reach, so full collections (which otherwise walk every cached
    pod and node, ~100 ms at 5,000 nodes) do not land on a verb's latency."""
    gc.collect()
    gc.freeze()


def _collect_orphans_forever(engine: Engine, leading: Any, interval: float, stop: threading.Event) -> None:
    """Background upkeep on the leader: release expired reservations, clean their annotations."""
    while not stop.wait(interval):
        if leading():
            try:
                engine.collect_orphans()
            except Exception:  # noqa: BLE001 - upkeep must never die
                log.exception("orphan collection failed")


def _frameworks(config: ExtenderConfig, handle: EngineHandle, registry: Registry,
                metrics: Metrics | None = None) -> tuple[dict[str, Framework], list[tuple[str, str]]]:
    """One Framework per profile that builds, and every problem of those that do not (key path,
    message): unknown plugins, bad args, points a plugin does not implement, combinations the
    extender refuses."""
    frameworks: dict[str, Framework] = {}
    problems: list[tuple[str, str]] = []
    for i, profile in enumerate(config.profiles):
        path = f"profiles[{i}]"
        for name in profile.plugin_args:
            if name not in registry:
                problems.append((f"{path}.pluginConfig[{name}].name", unknown_plugin(name, registry)))
        try:
            frameworks[profile.scheduler_name] = build_framework(profile, DEFAULTS, registry, handle,
                                                                 metrics, path)
        except ProfileError as exc:
            problems.extend(exc.problems)
    gang = any(p.name == "Gang" for fw in frameworks.values() for p in fw.permit_plugins)
    if config.extender.ignorable and gang:
        problems.append(("extender.ignorable", "must be false with the Gang plugin: kube-scheduler binds a pod itself "
                         "when an ignorable extender's bind fails, so a group denied in Permit would be bound in part"))
    if not config.extender.bind_verb and gang:
        problems.append(("extender.bindVerb", "must be set with the Gang plugin: without it kube-scheduler binds every "
                         "pod itself, and no member ever waits for its group in Permit (all or nothing is lost)"))
    return frameworks, problems


def build_frameworks(config: ExtenderConfig, handle: EngineHandle, registry: Registry,
                     metrics: Metrics | None = None) -> dict[str, Framework]:
    """One Framework per profile; every plugin problem at once, as a ConfigError naming the file
    and key paths."""
    frameworks, problems = _frameworks(config, handle, registry, metrics)
    if problems:
        raise ConfigError(problems, config.source)
    return frameworks


def _handle(config: ExtenderConfig, cache: ClusterCache, writer: ClusterWriter, clock: Clock,
            leader: Leadership | None) -> EngineHandle:
    """The handle plugins are built with: the queue over ``cache`` and empty profiles, which
    ``create_app`` fills once the plugins are built."""
    return EngineHandle(cache, writer, clock, WaitingPods(), config.managed_names, config.annotation_prefix,
                        config.extender.http_timeout, term=leader.term if leader is not None else (lambda: 0),
                        queue=SchedulingQueue(cache, clock))


def profile_problems(config: ExtenderConfig, registry: Registry | None = None) -> list[tuple[str, str]]:
    """What building ``config``'s profiles would refuse, found without serving anything (no
    cluster, no threads): ``kube-extender config check`` and ``serve`` before it starts."""
    registry = plugin_registry(registry)
    clock = SystemClock()
    cache = ClusterCache(config.managed_names, clock, config.assumed_pod_ttl, config.annotation_prefix)
    return _frameworks(config, _handle(config, cache, MemoryCluster(), clock, None), registry)[1]


def checked(config: ExtenderConfig, registry: Registry | None = None) -> ExtenderConfig:
    """``config`` if every profile builds, else ConfigError with every problem. ``registry``: as
    for ``create_app``."""
    problems = profile_problems(config, registry)
    if problems:
        raise ConfigError(problems, config.source)
    return config


def describe(config: ExtenderConfig, frameworks: dict[str, Framework], registry: Registry) -> dict[str, Any]:
    """``/debug/config``: the effective configuration (every section, after defaults and command
    line overrides), per profile the plugins that run at each extension point, and every plugin
    the app could enable (``plugins``: package, version, extension points, args schema)."""
    doc = config.effective()
    for profile, fw in zip(doc["profiles"], frameworks.values()):
        points = fw.describe()
        points.pop("schedulerName")
        profile["extensionPoints"] = points
    doc["plugins"] = catalog.describe(registry)
    return doc


def create_app(config: ExtenderConfig | None = None, *, source: ClusterSource | None = None,
               writer: ClusterWriter | None = None, clock: Clock | None = None,
               registry: Registry | None = None, leader: Leadership | None = None,
               metrics: Metrics | None = None, background: bool = True,
               lifecycle: Lifecycle | None = None) -> Flask:
    """Build the Flask app. Raises ConfigError for invalid profiles or plugin args, and
    PluginLoadError for an installed plugin package that clashes or does not load.

    ``registry``: plugins besides the built-in ones (default: every installed plugin package).

    ``leader``: with leader election, only the leader answers the verbs (followers: 503, not
    ready) and allocations carry its term. ``background``: run the loops (admission, nudges,
    orphan collection) in threads; without, a caller runs their passes itself. ``lifecycle``:
    what the caller already registered to stop (create_kube_app: the event recorder), stopped
    after what the app starts. The app state's ``close()`` stops it all (``shutdown``)."""
    config = config or default_config()
    clock = clock or SystemClock()
    if source is None:
        source = MemoryCluster.demo()
    if writer is None:
        if not hasattr(source, "bind"):
            raise ValueError("a writer is required when the source cannot write")
        writer = source  # type: ignore[assignment]
    assert writer is not None
    registry = plugin_registry(registry)
    metrics = metrics or Metrics()
    cache = ClusterCache(config.managed_names, clock, config.assumed_pod_ttl, config.annotation_prefix)
    handle = _handle(config, cache, writer, clock, leader)
    frameworks = build_frameworks(config, handle, registry, metrics)
    handle.profiles.install(frameworks, config.profiles[0].scheduler_name)
    engine = Engine(handle, handle.profiles, metrics=metrics, explain=ExplainLog())
    queue = handle.queue
    metrics.watch_cache(cache.sizes)

    app = Flask("kube-extender", static_folder=None)  # no /static route: it would serve the working directory's static/
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    summary = describe(config, frameworks, registry)

    leading = leader.is_leader if leader is not None else (lambda: True)

    def deciding() -> bool:
        """The loops act (lift gates, patch pods) only on a synced cache, as the leader."""
        return cache.synced and leading()

    def ready() -> tuple[bool, str]:
        if not cache.synced:
            return False, "waiting for the initial cluster lists"
        if not leading():
            return False, "following: another replica is the leader"
        return True, "cache synced" + (", leading" if leader is not None else "")

    register(app, engine, metrics, ApiSettings(config.server.path_prefix, config.verbs(), ready, lambda: summary,
                                               serving=leading, synced=lambda: cache.synced))
    lifecycle = lifecycle or Lifecycle()
    state = ExtenderState(config, engine, cache, queue, metrics, source, writer, leader, lifecycle)
    app.extensions["kube_extender"] = state
    cache.on_synced(_freeze_heap)
    # the loops stop and are joined first, then the leader gives the Lease up, the source stops last
    lifecycle.on_close("source", lambda seconds: source.stop(timeout=seconds), after_loops=True)
    if leader is not None:
        lifecycle.on_close("leader", lambda seconds: _step_down(leader, state, seconds), after_loops=True)
    source.start(cache)
    if config.admission.enabled:
        admitter = state.admitter = Admitter(queue, handle.profiles, engine.placement, writer,
                                             config.admission.gate, config.admission.strategy,
                                             config.admission.hold_timeout, metrics=metrics,
                                             make_room=engine.make_room)
        if background:
            lifecycle.on_close("admission", lambda _: admitter.stop())
            lifecycle.start("admission", admitter.run_forever, config.admission.interval, deciding,
                            config.admission.resync)
    nudger = state.nudger = Nudger(queue, handle.profiles, engine.placement, writer, config.annotation_prefix,
                                   config.requeue.qps, config.requeue.min_interval, on_events=config.requeue.nudge,
                                   metrics=metrics)
    if background:
        lifecycle.on_close("nudger", lambda _: nudger.stop())
        lifecycle.start("nudger", nudger.run_forever, deciding)
    if background and config.orphan_interval > 0:
        lifecycle.start("orphan-collector", _collect_orphans_forever, engine, deciding, config.orphan_interval,
                        lifecycle.stopping)
    log.info("extender configured", extra={"source": config.source or "defaults",
                                           "managed_resources": sorted(config.managed_names),
                                           "profiles": [p.scheduler_name for p in config.profiles],
                                           "verbs": ",".join(config.verbs().values())})
    return app


def shutdown(app: Flask, timeout: float = 10.0) -> None:
    """Stop what ``create_app`` started, once the server no longer answers (gunicorn's worker
    exit): the state's ``close()``. The loops end first, then leadership is given up - the Lease
    is released, so a standby takes over at once instead of after ``leaseDuration``, and this
    process's writes are fenced from then on - then the watches close; all within about
    ``timeout`` seconds (the server's ``CLOSE_TIMEOUT``, which its master waits for)."""
    state: ExtenderState = app.extensions["kube_extender"]
    state.close(timeout)


API_MUTATING_INFLIGHT = 200
"""kube-apiserver's default ``--max-mutating-requests-inflight``: it works on no more writes at once."""

BACKGROUND_REQUESTS = 16
"""API requests the extender may have open besides those made while answering a verb: its
watches (pods, nodes, PodDisruptionBudgets, PodGroups, ...) and its loops (leader election,
admission, nudges, orphan collection, Events)."""


def api_connections(config: ExtenderConfig) -> int:
    """Idle connections to keep open to the API server: one per verb request the server answers
    at once (``server.connections`` with the gevent worker, ``server.threads`` with gthread; a
    bind is one write, and kube-scheduler keeps many binds in flight) plus the background ones,
    at most what kube-apiserver works on at once by default. Fewer, and every bind beyond them
    opens a connection (a TLS handshake on a real API server) that is closed right after."""
    concurrency = config.server.connections if config.server.worker == "gevent" else config.server.threads
    return min(concurrency + BACKGROUND_REQUESTS, API_MUTATING_INFLIGHT)


def create_kube_app(config: ExtenderConfig, *, kubeconfig: str | None = None, clock: Clock | None = None) -> Flask:
    """The app against a real cluster: list+watch source, fenced writer, optional leader election.
    In-cluster credentials unless ``kubeconfig`` is given."""
    from extender.cluster.kube.client import KubeClient
    from extender.cluster.kube.events import EventRecorder
    from extender.cluster.kube.leader import LeaderElector
    from extender.cluster.kube.source import KubeSource, PodFilter
    from extender.cluster.kube.writer import KubeWriter

    connections = api_connections(config)
    client = KubeClient.from_kubeconfig(kubeconfig, connections=connections) if kubeconfig \
        else KubeClient.in_cluster(connections=connections)
    log.info("kubernetes client", extra={"host": client.host, "connections": client.connections})
    metrics = Metrics()
    gate = config.admission.gate if config.admission.enabled else None
    source = KubeSource(client, PodFilter(config.managed_names, config.annotation_prefix, gate), metrics=metrics,
                        watch_timeout=int(config.kubernetes.watch_timeout))
    le = config.leader_election
    leader = None
    if le.enabled:
        leader = LeaderElector(client, name=le.lease_name, namespace=le.lease_namespace,
                               lease_duration=le.lease_duration, renew_deadline=le.renew_deadline,
                               retry_period=le.retry_period, clock=clock, caught_up=source.connected)
    lifecycle = Lifecycle()
    events = EventRecorder(client) if config.kubernetes.events else None
    if events is not None:
        lifecycle.on_close("events", events.close, after_loops=True)  # last: the loops may still record
    # a deposed leader stops writing renewDeadline after its last renewal and a standby may lead
    # leaseDuration after it: writes give up within that gap, so none lands after a takeover (the
    # configuration refuses a gap under MIN_LEASE_GAP; a shorter one built in code is kept, not raised)
    writes = KubeClient(client.api_client, timeout=min(client.timeout, le.lease_duration - le.renew_deadline)) \
        if leader is not None else client
    writer = KubeWriter(writes, may_write=leader.is_leader if leader is not None else (lambda: True), events=events)
    app = create_app(config, source=source, writer=writer, clock=clock, leader=leader, metrics=metrics,
                     lifecycle=lifecycle)
    if leader is not None:
        leader.start()
    return app
