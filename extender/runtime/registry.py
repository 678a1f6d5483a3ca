"""The registry of plugin factories (``extender.framework.registration.PluginSpec``): one name,
one factory, one args parser, and where it came from (``Origin``: the package and version that
registered it). Registering a name twice fails loudly, naming both packages (two plugins
answering to one name is always a mistake)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from extender.framework.registration import PluginSpec


class PluginLoadError(ValueError):
    """A plugin cannot be registered (a name clash, an entry point that does not load). The
    message is one line naming the package at fault: start-up prints it and stops."""


class DuplicatePluginError(PluginLoadError):
    pass


@dataclass(frozen=True)
class Origin:
    """The distribution that registered a plugin. ``entry_point``: ``name = module:attr`` for a
    plugin discovered through the ``kube_extender.plugins`` group, empty for the built-in ones
    and those handed to the app directly."""

    package: str
    version: str = ""
    entry_point: str = ""

    def __str__(self) -> str:
        return f"package {self.package}" + (f" {self.version}" if self.version else "")


UNKNOWN = Origin("")
"""The origin of a spec registered without one (a test's fake plugin)."""


class Registry:
    def __init__(self, specs: list[PluginSpec] | None = None, origin: Origin = UNKNOWN) -> None:
        self._specs: dict[str, PluginSpec] = {}
        self._origins: dict[str, Origin] = {}
        for spec in specs or []:
            self.register(spec, origin)

    def register(self, spec: PluginSpec, origin: Origin = UNKNOWN) -> None:
        if spec.name in self._specs:
            first = self._origins[spec.name]
            if origin.package or first.package:
                def of(o: Origin) -> str:
                    return str(o) if o.package else "unknown origin"
                raise DuplicatePluginError(f"plugin {spec.name!r} of {of(origin)} clashes with plugin {spec.name!r} "
                                           f"of {of(first)}: plugin names must be unique, uninstall or rename one "
                                           "of them")
            raise DuplicatePluginError(f"plugin {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        self._origins[spec.name] = origin

    def merged(self, other: Registry) -> Registry:
        """A registry with both sets of plugins (in-tree + out-of-tree); duplicates fail."""
        out = Registry()
        for registry in (self, other):
            for spec in registry:
                out.register(spec, registry.origin(spec.name))
        return out

    def get(self, name: str) -> PluginSpec | None:
        return self._specs.get(name)

    def origin(self, name: str) -> Origin:
        """Where plugin ``name`` came from (``UNKNOWN`` for a name not registered)."""
        return self._origins.get(name, UNKNOWN)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[PluginSpec]:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return sorted(self._specs)
