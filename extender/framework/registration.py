"""How a plugin is registered: its name, its factory, its args parser (the plugin API).

A policy package exposes one ``PluginSpec``: the built-in ones are listed in ``policies``, a
third-party package names its spec under the entry-point group ``kube_extender.plugins``. The app
hands the specs to the runtime's registry, so a policy never imports the runtime. A factory
receives the parsed args and the Handle and returns the plugin; ``parse_args`` turns the raw
``pluginConfig`` args into whatever the factory expects and raises ArgsError naming the bad key.
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


def no_args(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``parse_args`` of a plugin that takes no args: any key is refused."""
    if raw:
        raise ArgsError({"_schema": ["this plugin takes no args"]})
    return {}


def schema_parser(schema: type) -> Callable[[Mapping[str, Any]], Any]:
    """A ``parse_args`` from a marshmallow schema class (any class whose instances ``load(raw)``
    the args or raise an error carrying ``messages``, as marshmallow's ValidationError does):
    the error becomes an ArgsError naming the keys, with "did you mean" hints drawn from the
    schema. The schema stays reachable as ``parse_args.schema``, from which ``kube-extender
    plugins`` and ``/debug/config`` derive the args' JSON schema."""

    def parse(raw: Mapping[str, Any]) -> Any:
        loader = schema()
        try:
            return loader.load(raw)
        except Exception as exc:
            messages = getattr(exc, "messages", None)
            if messages is None:
                raise
            raise ArgsError(messages, loader) from exc

    parse.schema = schema  # type: ignore[attr-defined]
    return parse


@dataclass(frozen=True)
class PluginSpec:
    """One plugin's registration.

    ``factory(args, handle)``: builds the plugin; a class is best (its methods tell which
    extension points it implements without building it; a function's return annotation does
    too). ``parse_args``: raw ``pluginConfig`` args -> what the factory takes (``schema_parser``
    for a marshmallow schema). ``args_schema``: the args' JSON schema, for parsers it cannot be
    derived from."""

    name: str
    factory: Callable[[Any, Handle], Plugin]
    parse_args: Callable[[Mapping[str, Any]], Any] = no_args
    description: str = ""
    args_schema: Mapping[str, Any] | None = None
