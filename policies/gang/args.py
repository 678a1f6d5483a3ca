"""Args of Gang::

    permitTimeout: 3s     # how long members wait in bind for the group (capped below httpTimeout)
    backoff: 10s          # after a group timed out, its members are rejected in Filter this long
    reservationTimeout: 15s  # a planned placement no member makes progress on is released after this
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load

from extender.framework.durations import parse_duration


class _Duration(fields.Field):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        if seconds <= 0:
            raise ValidationError("must be positive")
        return seconds


@dataclass(frozen=True)
class GangArgs:
    permit_timeout: float = 3.0
    backoff: float = 10.0
    reservation_timeout: float = 15.0


class GangArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    permitTimeout = _Duration(load_default=3.0)
    backoff = _Duration(load_default=10.0)
    reservationTimeout = _Duration(load_default=15.0)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> GangArgs:
        return GangArgs(data["permitTimeout"], data["backoff"], data["reservationTimeout"])
