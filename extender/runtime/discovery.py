"""Plugins installed as Python packages: the entry-point group ``kube_extender.plugins``.

A package registers a plugin in its ``pyproject.toml``::

    [project.entry-points."kube_extender.plugins"]
    AcceleratorModel = "accelerator_model.plugin:SPEC"

The entry point's name is the plugin's name (the one configuration enables); its value is the
plugin's ``PluginSpec``. Discovery runs once per process (the set of installed packages does not
change under a running server; ``discovered.cache_clear()`` in a test that installs one). Whatever
cannot be loaded stops start-up with a PluginLoadError naming the package and the entry point:
a server that silently lacks a plugin its configuration names would only fail later, and less
clearly.
"""

from __future__ import annotations

import functools
from importlib import metadata

from extender.framework.registration import PluginSpec
from extender.runtime.registry import Origin, PluginLoadError, Registry

GROUP = "kube_extender.plugins"


def _origin(ep: metadata.EntryPoint) -> Origin:
    dist = ep.dist
    return Origin(dist.name if dist is not None else "(unknown package)", dist.version if dist is not None else "",
                  f"{ep.name} = {ep.value}")


def _load(ep: metadata.EntryPoint) -> tuple[PluginSpec, Origin]:
    origin = _origin(ep)
    try:
        spec = ep.load()
    except Exception as exc:  # noqa: BLE001 - any import failure is the package's, and is reported as such
        raise PluginLoadError(f"plugin {ep.name!r} of {origin} (entry point {origin.entry_point}) does not load: "
                              f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, PluginSpec):
        raise PluginLoadError(f"plugin {ep.name!r} of {origin} (entry point {origin.entry_point}) is a "
                              f"{type(spec).__name__}, not an extender.framework.PluginSpec")
    if spec.name != ep.name:
        raise PluginLoadError(f"plugin {ep.name!r} of {origin} (entry point {origin.entry_point}) is named "
                              f"{spec.name!r} in its PluginSpec: the entry point's name must be the plugin's name")
    return spec, origin


@functools.cache
def discovered() -> tuple[tuple[PluginSpec, Origin], ...]:
    """Every plugin of the group, loaded, in a stable order (package, then name)."""
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda ep: (ep.dist.name if ep.dist else "", ep.name))
    return tuple(_load(ep) for ep in eps)


def installed(builtins: Registry) -> Registry:
    """``builtins`` plus every installed plugin; a name clash raises DuplicatePluginError naming
    both packages."""
    out = builtins.merged(Registry())
    for spec, origin in discovered():
        out.register(spec, origin)
    return out
