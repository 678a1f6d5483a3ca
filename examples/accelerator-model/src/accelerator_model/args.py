"""Args of AcceleratorModel::

    resource: nvidia.com/gpu                                  # a managed resource: pods requesting it are concerned
    nodeLabel: nvidia.com/gpu.product                         # the model of a node (GPU Feature Discovery's label)
    podAnnotation: accelerator.example.com/models             # the models a pod accepts, comma-separated
    prices: {NVIDIA-A100-SXM4-80GB: 3.2, Tesla-T4: 0.35}      # per model, any unit (per GPU-hour, say)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from marshmallow import RAISE, Schema, fields, post_load, validate


@dataclass(frozen=True)
class AcceleratorModelArgs:
    resource: str = "nvidia.com/gpu"
    node_label: str = "nvidia.com/gpu.product"
    pod_annotation: str = "accelerator.example.com/models"
    prices: Mapping[str, float] = field(default_factory=dict)


class AcceleratorModelArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    resource = fields.String(load_default="nvidia.com/gpu", validate=validate.Length(min=1))
    nodeLabel = fields.String(load_default="nvidia.com/gpu.product", validate=validate.Length(min=1))
    podAnnotation = fields.String(load_default="accelerator.example.com/models", validate=validate.Length(min=1))
    prices = fields.Dict(keys=fields.String(), values=fields.Float(validate=validate.Range(min=0)), load_default=dict)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> AcceleratorModelArgs:
        return AcceleratorModelArgs(data["resource"], data["nodeLabel"], data["podAnnotation"], dict(data["prices"]))
