"""Turn a marshmallow schema into a plugin ``parse_args`` function raising ArgsError."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from marshmallow import Schema, ValidationError

from extender.framework.registration import ArgsError


def parser(schema: type[Schema]) -> Callable[[Mapping[str, Any]], Any]:
    def parse(raw: Mapping[str, Any]) -> Any:
        loader = schema()
        try:
            return loader.load(raw)
        except ValidationError as exc:
            raise ArgsError(exc.messages, loader) from exc
    return parse
