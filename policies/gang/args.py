"""Args of Gang::

    permitTimeout: 3s     # how long members wait in bind for the group (capped below httpTimeout)
    backoff: 10s          # after a group timed out, its members are rejected in Filter this long
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load


def _seconds(value: Any) -> float:
    text = str(value).strip()
    for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * factor
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValidationError(f"{value!r} is not a duration (e.g. 3s, 500ms)")


class _Duration(fields.Field):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        seconds = _seconds(value)
        if seconds <= 0:
            raise ValidationError("must be positive")
        return seconds


@dataclass(frozen=True)
class GangArgs:
    permit_timeout: float = 3.0
    backoff: float = 10.0


class GangArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    permitTimeout = _Duration(load_default=3.0)
    backoff = _Duration(load_default=10.0)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> GangArgs:
        return GangArgs(data["permitTimeout"], data["backoff"])
