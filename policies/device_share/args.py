"""Args of DeviceShare::

    memoryResource: example.com/gpu-memory     # MiB of one device, per container
    computeResource: example.com/gpu-compute   # percent of one device (100 = all), per container
    countResource: example.com/gpu             # whole devices, per container (exclusive)
    inventoryAnnotation: device-inventory      # on nodes, after the annotation prefix
    scoringStrategy: {type: MostAllocated}     # binpack (default) | LeastAllocated (spread)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marshmallow import RAISE, Schema, fields, post_load, pre_load, validate


@dataclass(frozen=True)
class DeviceShareArgs:
    memory_resource: str = "example.com/gpu-memory"
    compute_resource: str = "example.com/gpu-compute"
    count_resource: str = "example.com/gpu"
    inventory_annotation: str = "device-inventory"
    binpack: bool = True


class _Strategy(Schema):
    class Meta:
        unknown = RAISE

    type = fields.String(load_default="MostAllocated", validate=validate.OneOf(["MostAllocated", "LeastAllocated"]))


class DeviceShareArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    memoryResource = fields.String(load_default="example.com/gpu-memory", validate=validate.Length(min=1))
    computeResource = fields.String(load_default="example.com/gpu-compute", validate=validate.Length(min=1))
    countResource = fields.String(load_default="example.com/gpu", validate=validate.Length(min=1))
    inventoryAnnotation = fields.String(load_default="device-inventory",
                                        validate=validate.Regexp(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"))
    scoringStrategy = fields.Nested(_Strategy)

    @pre_load
    def fill(self, data: Any, **_: Any) -> Any:
        if isinstance(data, dict) and data.get("scoringStrategy") is None:
            data = {**data, "scoringStrategy": {}}
        return data

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> DeviceShareArgs:
        return DeviceShareArgs(data["memoryResource"], data["computeResource"], data["countResource"],
                               data["inventoryAnnotation"], data["scoringStrategy"]["type"] == "MostAllocated")
