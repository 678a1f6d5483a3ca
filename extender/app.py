"""create_app: wires configuration, cluster source and writer, cache, plugins, engine and routes.

    app = create_app(config, source=MemoryCluster.from_file("cluster.yaml"))

Time and I/O are injected: ``source`` (a ClusterSource; default: the embedded demo cluster),
``writer`` (a ClusterWriter; default: the source itself when it can write), ``clock``. State
lives on ``app.extensions["kube_extender"]``, never in module globals. The source is started
before the app is returned, so a memory cluster is synced (ready) at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from flask import Flask

from extender.api.routes import ApiSettings, register
from extender.cache.cache import ClusterCache
from extender.cluster.interfaces import ClusterSource
from extender.cluster.memory import MemoryCluster
from extender.config.model import ConfigError, ExtenderConfig, default_config
from extender.framework.clock import Clock, SystemClock
from extender.framework.handle import ClusterWriter
from extender.metrics import Metrics
from extender.runtime.engine import Engine
from extender.runtime.explain import ExplainLog
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime.profile import ProfileError, build_framework
from extender.runtime.registry import Registry
from extender.runtime.waiting_pods import WaitingPods
from policies import DEFAULT_PLUGINS, builtin_registry

log = logging.getLogger(__name__)


@dataclass
class ExtenderState:
    config: ExtenderConfig
    engine: Engine
    cache: ClusterCache
    metrics: Metrics
    source: ClusterSource
    writer: ClusterWriter


def build_frameworks(config: ExtenderConfig, handle: EngineHandle, registry: Registry,
                     metrics: Metrics | None = None) -> dict[str, Framework]:
    """One Framework per profile; plugin problems become ConfigError naming the key path."""
    frameworks: dict[str, Framework] = {}
    problems: list[tuple[str, str]] = []
    for i, profile in enumerate(config.profiles):
        path = f"profiles[{i}]"
        unknown_args = [name for name in profile.plugin_args if name not in registry]
        for name in unknown_args:
            problems.append((f"{path}.pluginConfig[{name}]", f"unknown plugin {name!r}"))
        try:
            frameworks[profile.scheduler_name] = build_framework(profile, DEFAULT_PLUGINS, registry, handle,
                                                                 metrics, path)
        except ProfileError as exc:
            problems.append((exc.path, exc.message))
    if problems:
        raise ConfigError(problems)
    return frameworks


def describe(config: ExtenderConfig, frameworks: dict[str, Framework]) -> dict[str, Any]:
    e = config.extender
    return {
        "managedResources": [{"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                             for r in config.managed_resources],
        "extender": {"urlPrefix": e.url_prefix, "verbs": config.verbs(), "weight": e.weight,
                     "httpTimeoutSeconds": e.http_timeout, "nodeCacheCapable": e.node_cache_capable,
                     "ignorable": e.ignorable},
        "annotationPrefix": config.annotation_prefix,
        "assumedPodTTLSeconds": config.assumed_pod_ttl,
        "profiles": [fw.describe() for fw in frameworks.values()],
    }


def create_app(config: ExtenderConfig | None = None, *, source: ClusterSource | None = None,
               writer: ClusterWriter | None = None, clock: Clock | None = None,
               registry: Registry | None = None) -> Flask:
    """Build the Flask app. Raises ConfigError for invalid profiles or plugin args."""
    config = config or default_config()
    clock = clock or SystemClock()
    if source is None:
        source = MemoryCluster.demo()
    if writer is None:
        if not hasattr(source, "bind"):
            raise ValueError("a writer is required when the source cannot write")
        writer = source  # type: ignore[assignment]
    assert writer is not None
    registry = builtin_registry() if registry is None else builtin_registry().merged(registry)
    metrics = Metrics()
    cache = ClusterCache(config.managed_names, clock, config.assumed_pod_ttl, config.annotation_prefix)
    handle = EngineHandle(cache, writer, clock, WaitingPods(), config.managed_names,
                          config.annotation_prefix, config.extender.http_timeout)
    frameworks = build_frameworks(config, handle, registry, metrics)
    engine = Engine(handle, frameworks, default_profile=config.profiles[0].scheduler_name, metrics=metrics,
                    explain=ExplainLog())
    metrics.watch_cache(cache.sizes)

    app = Flask("kube-extender")
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    summary = describe(config, frameworks)

    def ready() -> tuple[bool, str]:
        return (True, "cache synced") if cache.synced else (False, "waiting for the initial cluster lists")

    register(app, engine, metrics, ApiSettings(config.server.path_prefix, config.verbs(), ready, lambda: summary))
    app.extensions["kube_extender"] = ExtenderState(config, engine, cache, metrics, source, writer)
    source.start(cache)
    log.info("extender configured", extra={"configuration": summary})
    return app
