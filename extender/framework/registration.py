"""How a plugin is registered: its name, its factory, its args parser (the plugin API).

A policy package exposes one ``PluginSpec``; the app hands the specs to the runtime's registry,
so a policy never imports the runtime. A factory receives the parsed args and the Handle and
returns the plugin; ``parse_args`` turns the raw ``pluginConfig`` args into whatever the factory
expects and raises ArgsError naming the bad key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

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
