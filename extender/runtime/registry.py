"""The registry of plugin factories: one name, one factory, one args parser.

Registering a name twice fails loudly (two plugins answering to one name is always a mistake).
A factory receives the parsed args and the Handle and returns the plugin; ``parse_args`` turns the
raw ``pluginConfig`` args into whatever the factory expects and raises ArgsError naming the bad key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from extender.framework.handle import Handle
from extender.framework.interfaces import Plugin


class ArgsError(ValueError):
    """Invalid plugin args. ``messages`` maps a key path to its problems (marshmallow-style);
    ``schema``, when given, is the schema that produced them (for "did you mean" hints)."""

    def __init__(self, messages: Mapping[str, Any] | list[Any] | str, schema: Any = None) -> None:
        super().__init__(str(messages))
        self.messages = messages
        self.schema = schema


def _no_args(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    if raw:
        raise ArgsError({"_schema": ["this plugin takes no args"]})
    return {}


@dataclass(frozen=True)
class PluginSpec:
    name: str
    factory: Callable[[Any, Handle], Plugin]
    parse_args: Callable[[Mapping[str, Any]], Any] = _no_args
    description: str = ""


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
