"""Nested validation messages (marshmallow's ``{"a": {0: ["problem"]}}``) as (key path, text)
pairs: ``[("a[0]", "problem")]``. One reading for the wire, the configuration and plugin args, so
every error names its key the same way."""

from __future__ import annotations

from typing import Any, Mapping

_TEXT = {"Unknown field.": "unknown key", "Missing data for required field.": "is required",
         "Field may not be null.": "null is not allowed"}


def flatten(messages: Any, prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            if key in ("_schema", "value"):  # marshmallow's whole-object and Dict-value levels
                path = prefix
            elif isinstance(key, int):
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(flatten(value, path))
    elif isinstance(messages, (list, tuple)):
        for item in messages:
            out.extend(flatten(item, prefix))
    else:
        out.append((prefix, _TEXT.get(str(messages), str(messages))))
    return out


def as_text(messages: Any, prefix: str = "") -> list[str]:
    """``"path: text"`` lines (just the text where there is no path)."""
    return [f"{path}: {text}" if path else text for path, text in flatten(messages, prefix)]
