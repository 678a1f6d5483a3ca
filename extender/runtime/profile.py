"""Profiles: which plugins run at which extension point for one schedulerName.

Resolution follows KubeSchedulerConfiguration: ``multiPoint`` plugins are enabled at every
extension point they implement; then per point, defaults named in ``disabled`` (or all, with
``"*"``) are removed and ``enabled`` entries appended (a default re-enabled explicitly takes the
position and weight the user gives it). A per-point entry naming a plugin that does not implement
that point is an error, as is anything but exactly one QueueSort plugin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from extender.framework.handle import Handle
from extender.framework.interfaces import EXTENSION_POINTS, Plugin
from extender.framework.problems import did_you_mean, flatten
from extender.metrics import Metrics
from extender.runtime.framework import Framework
from extender.framework.registration import ArgsError
from extender.runtime.registry import Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginRef:
    name: str
    weight: int = 1


@dataclass(frozen=True)
class PluginSet:
    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileSpec:
    scheduler_name: str
    plugins: Mapping[str, PluginSet] = field(default_factory=dict)
    """Keys: ``multiPoint`` and the keys of EXTENSION_POINTS."""
    plugin_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class ProfileError(ValueError):
    """A profile that cannot be built: ``problems`` pairs every configuration key path at fault
    with its message; ``path`` and ``message`` are the first of them."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("\n".join(f"{path}: {message}" for path, message in problems))
        self.problems = problems
        self.path, self.message = problems[0]


def unknown_plugin(name: str, registry: Registry) -> str:
    """The message for a plugin name the registry does not know: with the closest known name, or
    the list of known names when none is close."""
    return f"unknown plugin {name!r}" + (did_you_mean(name, registry.names())
                                         or f" (known: {', '.join(registry.names())})")


def resolve(spec: ProfileSpec, defaults: PluginSet, registry: Registry, handle: Handle,
            path: str = "profile") -> dict[str, list[tuple[Plugin, int]]]:
    """Instantiate the profile's plugins and order them per extension point. Every problem is
    collected (each unknown name once, at its first mention) before ProfileError is raised."""
    instances: dict[str, Plugin | None] = {}
    problems: list[tuple[str, str]] = []

    def args_of(name: str) -> tuple[Any, str, bool] | None:
        """The args of registered plugin ``name`` parsed (with how to name the plugin, and whether
        it is installed as a package); None when they do not parse (the problems noted)."""
        plugin_spec = registry.get(name)
        assert plugin_spec is not None
        # a plugin installed as a package is named with its package: the fix is there, or in its args
        origin = registry.origin(name)
        installed = origin.entry_point != ""
        who = f"plugin {name}" + (f" of {origin}" if installed else "")
        try:
            return plugin_spec.parse_args(dict(spec.plugin_args.get(name) or {})), who, installed
        except ArgsError as exc:
            problems.extend((f"{path}.pluginConfig[{name}].args" + (f".{key}" if key else ""),
                             text + (f" ({who})" if installed else ""))
                            for key, text in flatten(exc.messages, schema=exc.schema))
        except Exception as exc:  # noqa: BLE001 - a parser's bug is a start-up problem, not a traceback
            problems.append((f"{path}.pluginConfig[{name}].args",
                             f"the args parser of {who} failed: {type(exc).__name__}: {exc}"))
        return None

    def instance(name: str, where: str) -> Plugin | None:
        if name in instances:
            return instances[name]
        instances[name] = None
        plugin_spec = registry.get(name)
        if plugin_spec is None:
            problems.append((where, unknown_plugin(name, registry)))
            return None
        parsed = args_of(name)
        if parsed is None:
            return None
        args, who, installed = parsed
        try:
            instances[name] = plugin_spec.factory(args, handle)
        except ArgsError as exc:  # args that parse but do not fit the configuration (the factory knows it)
            problems.extend((f"{path}.pluginConfig[{name}].args" + (f".{key}" if key else ""),
                             text + (f" ({who})" if installed else ""))
                            for key, text in flatten(exc.messages, schema=exc.schema))
            return None
        except Exception as exc:  # noqa: BLE001 - likewise a factory's
            problems.append((where, f"{who} could not be built: {type(exc).__name__}: {exc}"))
            return None
        if instances[name] is None:  # a factory that forgot its return: the plugin would run nowhere
            problems.append((where, f"{who} could not be built: its factory returned None, not a plugin"))
        return instances[name]

    multi = spec.plugins.get("multiPoint", PluginSet())
    for point in ("multiPoint", *EXTENSION_POINTS):
        for i, name in enumerate(spec.plugins.get(point, PluginSet()).disabled):
            if name != "*" and name not in registry and name not in instances:
                instances[name] = None
                problems.append((f"{path}.plugins.{point}.disabled[{i}]", unknown_plugin(name, registry)))
    disabled_multi = set(multi.disabled)
    points: dict[str, list[tuple[Plugin, int]]] = {}
    for point, proto in EXTENSION_POINTS.items():
        user = spec.plugins.get(point, PluginSet())
        disabled = set(user.disabled) | disabled_multi
        explicit = {ref.name for ref in user.enabled}
        reweighted = {ref.name: ref.weight for ref in multi.enabled}  # a default named in multiPoint: its weight
        chosen: list[tuple[Plugin, int]] = []
        for i, ref in enumerate(defaults.enabled):
            if "*" in disabled or ref.name in disabled or ref.name in explicit:
                continue
            plugin = instance(ref.name, f"defaults[{i}]")
            if plugin is not None and isinstance(plugin, proto):
                chosen.append((plugin, reweighted.get(ref.name, ref.weight)))
        for i, ref in enumerate(multi.enabled):
            plugin = instance(ref.name, f"{path}.plugins.multiPoint.enabled[{i}].name")
            if ref.name in user.disabled or "*" in user.disabled:  # disabled at this point (as kube-scheduler)
                continue
            if (plugin is not None and isinstance(plugin, proto) and ref.name not in explicit
                    and all(p.name != ref.name for p, _ in chosen)):
                chosen.append((plugin, ref.weight))
        for i, ref in enumerate(user.enabled):
            where = f"{path}.plugins.{point}.enabled[{i}]"
            plugin = instance(ref.name, f"{where}.name")
            if plugin is None:
                continue
            if not isinstance(plugin, proto):
                problems.append((where, f"plugin {ref.name!r} does not implement {point}"))
                continue
            chosen = [(p, w) for p, w in chosen if p.name != ref.name]
            chosen.append((plugin, ref.weight))
        points[point] = chosen
    # args for a known plugin no extension point runs would be ignored until it is enabled: they
    # are judged now, not found wrong the day it is (an unknown name is the app's problem to say);
    # args that parse are said, in the message itself (``config check`` has no log format), unless
    # the profile disables the plugin by name - then they are there on purpose
    named_off = {name for ps in spec.plugins.values() for name in ps.disabled}
    for name in spec.plugin_args:
        if name in instances or name not in registry:
            continue
        if args_of(name) is not None and name not in named_off:
            log.warning("%s.pluginConfig[%s]: args for plugin %s, which no extension point enables",
                        path, name, name, extra={"profile": spec.scheduler_name, "plugin": name})
    if problems:  # what follows judges the plugin sets, which are incomplete now
        raise ProfileError(problems)
    if len(points["queueSort"]) != 1:
        sorts = [p.name for p, _ in points["queueSort"]]
        problems.append((f"{path}.plugins.queueSort", f"exactly one QueueSort plugin must be enabled, got {sorts}"))
    problems.extend((f"{path}.plugins.score", f"weight of {plugin.name} must be 1..100, got {weight}")
                    for plugin, weight in points["score"] if not 1 <= weight <= 100)
    if problems:
        raise ProfileError(problems)
    return points


def build_framework(spec: ProfileSpec, defaults: PluginSet, registry: Registry, handle: Handle,
                    metrics: Metrics | None = None, path: str = "profile") -> Framework:
    points = resolve(spec, defaults, registry, handle, path)
    only = lambda point: [p for p, _ in points[point]]  # noqa: E731
    return Framework(
        spec.scheduler_name, handle, metrics=metrics,
        pre_enqueue=only("preEnqueue"), queue_sort=only("queueSort")[0],  # type: ignore[arg-type]
        pre_filter=only("preFilter"), filter=only("filter"),  # type: ignore[arg-type]
        post_filter=only("postFilter"), pre_score=only("preScore"),  # type: ignore[arg-type]
        score=points["score"], reserve=only("reserve"), permit=only("permit"),  # type: ignore[arg-type]
        pre_bind=only("preBind"), bind=only("bind"), post_bind=only("postBind"),  # type: ignore[arg-type]
        preemption=only("preemption"),  # type: ignore[arg-type]
    )
