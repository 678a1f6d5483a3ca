"""The registry of plugin factories (``extender.framework.registration.PluginSpec``): one name,
one factory, one args parser. Registering a name twice fails loudly (two plugins answering to
one name is always a mistake)."""

from __future__ import annotations

from typing import Iterator

from extender.framework.registration import PluginSpec


class DuplicatePluginError(ValueError):
    pass


class Registry:
    def __init__(self, specs: list[PluginSpec] | None = None) -> None:
        self._specs: dict[str, PluginSpec] = {}
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: PluginSpec) -> None:
        if spec.name in self._specs:
            raise DuplicatePluginError(f"plugin {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def merged(self, other: Registry) -> Registry:
        """A registry with both sets of plugins (in-tree + out-of-tree); duplicates fail."""
        out = Registry(list(self))
        for spec in other:
            out.register(spec)
        return out

    def get(self, name: str) -> PluginSpec | None:
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[PluginSpec]:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return sorted(self._specs)
