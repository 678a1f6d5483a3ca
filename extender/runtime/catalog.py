"""What each registered plugin is, without building it: its package and version, the extension
points it implements and the JSON schema of its args (``kube-extender plugins``, ``/debug/config``).

Extension points are read from the plugin's class: the factory when it is a class, else the
factory's return annotation. Args are described by ``PluginSpec.args_schema`` when the spec gives
one, else derived from the marshmallow schema behind ``schema_parser`` (fields, types, defaults,
choices, required keys; read through the attributes every marshmallow field has, as
``extender.framework.problems`` does), else ``no_args`` means an empty object. Anything else is
described as ``None`` (not derivable), never guessed.
"""

from __future__ import annotations

import decimal
import json
import typing
from typing import Any, Mapping

from extender.framework.interfaces import EXTENSION_POINTS
from extender.framework.registration import PluginSpec, no_args
from extender.runtime.registry import Registry

_JSON_TYPES = {"String": "string", "Email": "string", "URL": "string", "Url": "string", "UUID": "string",
               "Integer": "integer", "Float": "number", "Decimal": "number", "Number": "number",
               "Boolean": "boolean", "Bool": "boolean", "Dict": "object", "Mapping": "object", "List": "array",
               "Tuple": "array", "Nested": "object", "DateTime": "string", "TimeDelta": "number"}


def plugin_class(spec: PluginSpec) -> type | None:
    """The class of the plugins ``spec.factory`` builds, when it can be told without calling it."""
    factory = spec.factory
    if isinstance(factory, type):
        return factory
    try:
        returned = typing.get_type_hints(factory).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve tells nothing
        return None
    return returned if isinstance(returned, type) else None


def extension_points(cls: type) -> list[str]:
    """The configuration keys of the extension points whose methods ``cls`` has."""
    def methods(proto: type) -> list[str]:
        return [n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")]
    return [point for point, proto in EXTENSION_POINTS.items() if all(hasattr(cls, m) for m in methods(proto))]


def _field_schema(field: Any) -> dict[str, Any]:
    kind = type(field).__name__
    out: dict[str, Any] = {}
    json_type = next((_JSON_TYPES[c.__name__] for c in type(field).__mro__ if c.__name__ in _JSON_TYPES), None)
    if json_type is not None:
        out["type"] = json_type
    else:
        out["description"] = kind.lstrip("_").lower()
    nested = getattr(field, "schema", None) if kind == "Nested" else None
    if nested is not None and hasattr(nested, "fields"):
        out.update(_object_schema(nested))
    inner = getattr(field, "inner", None)
    if kind == "List" and inner is not None:
        out["items"] = _field_schema(inner)
    values = getattr(field, "value_field", None)
    if values is not None:
        out["additionalProperties"] = _field_schema(values)
    default = getattr(field, "load_default", None)
    if default is not None and not callable(default) and type(default).__name__ != "_Missing":
        written = _as_written(field, default)
        if written is not _UNWRITABLE:
            out["default"] = written
    for validator in getattr(field, "validators", ()):
        choices = getattr(validator, "choices", None)
        if choices is not None:
            out["enum"] = list(choices)
        for attr, key in (("min", "minimum"), ("max", "maximum")):
            bound = getattr(validator, attr, None)
            if isinstance(bound, (int, float)) and type(validator).__name__ == "Range":
                out[key] = bound
            elif isinstance(bound, int) and type(validator).__name__ == "Length":
                out["minLength" if attr == "min" else "maxLength"] = bound
    if getattr(field, "allow_none", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


_UNWRITABLE = object()


def _as_written(field: Any, default: Any) -> Any:
    """``default`` (a loaded value: a timedelta, a datetime, a Decimal, a tuple) as a config file
    would write it - serialized by its own field, then made plain JSON (a Decimal as a number) -,
    or ``_UNWRITABLE`` when it cannot be (left out of the description, never guessed)."""
    try:
        written = field.serialize("default", None, accessor=lambda *_: default)  # whatever its attribute
        return json.loads(json.dumps(written, default=_json_number))
    except Exception:  # noqa: BLE001 - a third-party field that cannot serialize its own default
        return _UNWRITABLE


def _json_number(value: Any) -> Any:
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _object_schema(schema: Any) -> dict[str, Any]:
    properties = {f.data_key or name: _field_schema(f) for name, f in schema.fields.items()}
    required = sorted(f.data_key or name for name, f in schema.fields.items() if getattr(f, "required", False))
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if getattr(schema, "unknown", None) == "raise":
        out["additionalProperties"] = False
    return out


def args_schema(spec: PluginSpec) -> Mapping[str, Any] | None:
    """The JSON schema of ``spec``'s args, or None when it cannot be told."""
    if spec.args_schema is not None:
        return spec.args_schema
    if spec.parse_args is no_args:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    schema = getattr(spec.parse_args, "schema", None)
    if schema is None:
        return None
    try:
        return _object_schema(schema())
    except Exception:  # noqa: BLE001 - a schema we cannot read is described as unknown, never guessed
        return None


def describe(registry: Registry) -> list[dict[str, Any]]:
    """Every plugin of ``registry``, by name: package, version, entry point, description,
    extension points (None when they cannot be told without building it) and args schema."""
    out = []
    for name in registry.names():
        spec = registry.get(name)
        assert spec is not None
        origin = registry.origin(name)
        cls = plugin_class(spec)
        out.append({"name": name, "package": origin.package, "version": origin.version,
                    "entryPoint": origin.entry_point, "description": spec.description,
                    "extensionPoints": extension_points(cls) if cls is not None else None,
                    "args": args_schema(spec)})
    return out


def _type_text(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type", schema.get("description", "any"))
    text = "|".join(kind) if isinstance(kind, list) else str(kind)
    if "enum" in schema:
        text += " (" + " | ".join(map(str, schema["enum"])) + ")"
    if "default" in schema:
        text += f", default {schema['default']!r}"
    return text


def args_lines(schema: Mapping[str, Any] | None, indent: str = "    ") -> list[str]:
    """A JSON schema of args as a readable field list, one line per key (nested keys dotted)."""
    if schema is None:
        return [f"{indent}(not described: the plugin's args parser gives no schema)"]
    if not schema.get("properties"):
        return [f"{indent}(no args)"]
    lines: list[str] = []

    def walk(obj: Mapping[str, Any], prefix: str) -> None:
        required = set(obj.get("required") or ())
        for key, sub in obj.get("properties", {}).items():
            lines.append(f"{indent}{prefix}{key}: {_type_text(sub)}" + (", required" if key in required else ""))
            if sub.get("properties"):
                walk(sub, f"{prefix}{key}.")
    walk(schema, "")
    return lines
