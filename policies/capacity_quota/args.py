"""Args of CapacityQuota: quotas for clusters without the ElasticQuota CRD::

    quotas:                        # namespace -> min and max per resource (Kubernetes quantities)
      team-a:
        min: {example.com/gpu: 4}
        max: {example.com/gpu: 8}
      team-b:
        min: {example.com/gpu: 4}  # no max: may borrow up to what others leave unused

An ElasticQuota object of a namespace takes precedence over its entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validates

from extender.framework.elastic_quota import QuotaSpec

SOURCE = "configuration"


@dataclass(frozen=True)
class QuotaArgs:
    quotas: Mapping[str, QuotaSpec] = field(default_factory=dict)


class _Quota(Schema):
    class Meta:
        unknown = RAISE

    min = fields.Dict(keys=fields.String(), load_default=dict)
    max = fields.Dict(keys=fields.String(), load_default=dict)


class QuotaArgsSchema(Schema):
    class Meta:
        unknown = RAISE

    quotas = fields.Dict(keys=fields.String(), values=fields.Nested(_Quota), load_default=dict)

    @validates("quotas")
    def _amounts(self, value: Mapping[str, Any], **_: Any) -> None:
        problems: dict[str, Any] = {}
        for namespace, quota in value.items():
            if not namespace:
                problems[namespace] = ["a namespace name must not be empty"]
                continue
            if "min" not in quota or "max" not in quota:
                continue  # its own field's problem (null, say) is what is reported
            problem, _spec = QuotaSpec.from_amounts(namespace, quota["min"], quota["max"], SOURCE)
            if problem:
                problems[namespace] = [problem]
        if problems:
            raise ValidationError(problems)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> QuotaArgs:
        out = {}
        for namespace, quota in data["quotas"].items():
            _problem, spec = QuotaSpec.from_amounts(namespace, quota["min"], quota["max"], SOURCE)
            assert spec is not None  # validated above
            out[namespace] = spec
        return QuotaArgs(out)
