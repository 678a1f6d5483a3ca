"""Args of NodeResources::

    scoringStrategy:
      type: MostAllocated        # binpack (default) | LeastAllocated (spread)
      resources:                 # weights; default: every managed resource with weight 1
        - {name: example.com/gpu, weight: 1}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from marshmallow import RAISE, Schema, fields, post_load, pre_load, validate

STRATEGIES = ("MostAllocated", "LeastAllocated")


@dataclass(frozen=True)
class NodeResourcesArgs:
    strategy: str = "MostAllocated"
    weights: dict[str, int] = field(default_factory=dict)
    """Empty: every managed resource with weight 1."""


class _ResourceWeight(Schema):
    class Meta:
        unknown = RAISE

    name = fields.String(required=True, validate=validate.Length(min=1))
    weight = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1, max=100))


class _Strategy(Schema):
    class Meta:
        unknown = RAISE

    type = fields.String(load_default="MostAllocated", validate=validate.OneOf(STRATEGIES))
    resources = fields.List(fields.Nested(_ResourceWeight), load_default=list)


class NodeResourcesArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    scoringStrategy = fields.Nested(_Strategy, load_default=lambda: {"type": "MostAllocated", "resources": []})

    @pre_load
    def fill(self, data: Any, **_: Any) -> Any:
        if isinstance(data, dict) and data.get("scoringStrategy") is None:
            data = {**data, "scoringStrategy": {}}
        return data

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> NodeResourcesArgs:
        strategy = data["scoringStrategy"]
        return NodeResourcesArgs(strategy["type"], {r["name"]: r["weight"] for r in strategy["resources"]})
