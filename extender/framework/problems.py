"""Nested validation messages (marshmallow's ``{"a": {0: ["problem"]}}``) as (key path, text)
pairs: ``[("a[0]", "problem")]``. One reading for the wire, the configuration and plugin args, so
every error names its key the same way.

Given the schema the messages came from, an unknown key also says which known key it probably
meant (``server.prot: unknown key (did you mean port?)``). The schema is only read through the
attributes every marshmallow schema and field has (``fields``, ``data_key``, a nested field's
``schema``, a list's ``inner``), so this module imports no validation library.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

_UNKNOWN = "Unknown field."
_TEXT = {_UNKNOWN: "unknown key", "Missing data for required field.": "is required",
         "Field may not be null.": "null is not allowed"}


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the known word closest to ``word`` (case-insensitively), or ``""``
    when none is close enough to be a plausible misspelling."""
    by_lower: dict[str, str] = {}
    for k in known:
        by_lower.setdefault(k.lower(), k)
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[match[0]]}?)" if match else ""


def _unwrap(node: Any) -> Any:
    """A nested field's schema, a list field's item schema; a schema stays itself."""
    while node is not None and not hasattr(node, "fields"):
        inner = getattr(node, "inner", None)
        node = inner if inner is not None else getattr(node, "schema", None)
    return node


def _keys(schema: Any) -> list[str]:
    return [f.data_key or name for name, f in schema.fields.items()]


def _child(schema: Any, key: Any) -> Any:
    """The schema that validated the value under ``key`` (None when unknown)."""
    if schema is None or isinstance(key, int):
        return schema
    for name, f in schema.fields.items():
        if (f.data_key or name) == key:
            return _unwrap(f)
    return None


def flatten(messages: Any, prefix: str = "", schema: Any = None) -> list[tuple[str, str]]:
    """(key path, text) per problem. ``schema``: the schema (or field) that produced
    ``messages``, for "did you mean" hints on unknown keys."""
    return _flatten(messages, prefix, _unwrap(schema))


def _flatten(messages: Any, prefix: str, schema: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            child = schema
            if key in ("_schema", "value"):  # marshmallow's whole-object and Dict-value levels
                path = prefix
            elif isinstance(key, int):
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
                child = _child(schema, key)
                if child is None and schema is not None and value == [_UNKNOWN]:
                    out.append((path, "unknown key" + did_you_mean(str(key), _keys(schema))))
                    continue
            out.extend(_flatten(value, path, child))
    elif isinstance(messages, (list, tuple)):
        for item in messages:
            out.extend(_flatten(item, prefix, schema))
    else:
        out.append((prefix, _TEXT.get(str(messages), str(messages))))
    return out


def as_text(messages: Any, prefix: str = "") -> list[str]:
    """``"path: text"`` lines (just the text where there is no path)."""
    return [f"{path}: {text}" if path else text for path, text in flatten(messages, prefix)]
