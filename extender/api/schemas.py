"""marshmallow schemas for every type of ``k8s.io/kube-scheduler/extender/v1``.

Requests are parsed the way Go's ``encoding/json`` decodes them into those structs: keys match
field names case-insensitively (an exact match wins), unknown keys are ignored, ``null`` is an
absent field. The envelope is validated here; large lists (5,000 node names, full Node objects)
are checked with one cheap pass each, never walked through marshmallow field by field. Embedded
Kubernetes objects (Pod, Node) stay raw dicts.

The reply schemas (``dump_only`` shape, exact PascalCase keys, no omitted fields) document and
test the replies; the hot path builds replies directly in ``extender.api.wire``.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson
from marshmallow import EXCLUDE, Schema, ValidationError, fields, pre_load, validates_schema


def go_keys(data: Any, names: tuple[str, ...]) -> Any:
    """Rename keys to the canonical Go field names, as Go's decoder matches them: an exact match
    first, otherwise the first key that matches case-insensitively. Other keys pass through (and
    are then ignored)."""
    if not isinstance(data, Mapping):
        return data
    out: dict[str, Any] = {}
    lower = {n.lower(): n for n in names}
    for key, value in data.items():
        if key in names:
            out[key] = value
    for key, value in data.items():
        if isinstance(key, str) and key not in names:
            canon = lower.get(key.lower())
            if canon is not None and canon not in out:
                out[canon] = value
    return out


class _GoStruct(Schema):
    """Base: Go field-name matching, unknown keys ignored."""

    class Meta:
        unknown = EXCLUDE

    @pre_load
    def canonical(self, data: Any, **_: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ValidationError(f"expected a JSON object, got {_json_type(data)}")
        return go_keys(data, tuple(self.fields))


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


class KubeObject(fields.Field):
    """An embedded Kubernetes object (v1.Pod, v1.Node) kept as a raw dict. Requires ``metadata``
    to be an object with a non-empty string ``name``."""

    def __init__(self, kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValidationError(f"{self.kind} must be a JSON object, got {_json_type(value)}")
        meta = value.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ValidationError(f"{self.kind} needs metadata.name")
        return value


class StringList(fields.Field):
    """A JSON array of strings, checked in one pass."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str]:
        if type(value) is not list:
            raise ValidationError(f"must be an array of strings, got {_json_type(value)}")
        if not all(type(v) is str for v in value):
            raise ValidationError("must be an array of strings")
        return value


class NodeList(fields.Field):
    """A v1.NodeList: an object whose ``items`` are Node objects with names (one pass). filter
    echoes it back, so it must also be one the reply encoder can write: orjson stops at 255
    levels of nesting, and a NodeList nested deeper (orjson reads up to 1,024) is refused here
    rather than failing the reply (checked by encoding it once, in C)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValidationError(f"must be a NodeList object, got {_json_type(value)}")
        items = value.get("items")
        if items is None:
            items = []
        if type(items) is not list:
            raise ValidationError({"items": [f"must be an array of Node objects, got {_json_type(items)}"]})
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise ValidationError({"items": {i: ["must be a Node object with metadata.name"]}})
        try:
            orjson.dumps({"Nodes": value})  # as deep as in the reply
        except orjson.JSONEncodeError:
            raise ValidationError(_too_deep(value)) from None
        return value


def _too_deep(node_list: dict[str, Any]) -> Any:
    """The problem of a NodeList too deep to echo, at the item that is (else the list)."""
    too_deep = "nested too deeply to be echoed back in the reply (more than 250 levels)"
    for i, item in enumerate(node_list.get("items") or []):
        try:
            orjson.dumps({"Nodes": {"items": [item]}})
        except orjson.JSONEncodeError:
            return {"items": {i: [too_deep]}}
    return too_deep


class Int64(fields.Field):
    """A JSON integer as Go's int64 decodes it: 5.0, "5" and booleans are errors."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if type(value) is not int or not -(2**63) <= value < 2**63:
            raise ValidationError(f"must be an integer, got {_json_type(value)}")
        return value


class MetaPodSchema(_GoStruct):
    UID = fields.String(required=True)


class VictimsSchema(_GoStruct):
    Pods = fields.List(KubeObject("Pod"), allow_none=True, load_default=list)
    NumPDBViolations = Int64(load_default=0, allow_none=True)


class MetaVictimsSchema(_GoStruct):
    Pods = fields.List(fields.Nested(MetaPodSchema), allow_none=True, load_default=list)
    NumPDBViolations = Int64(load_default=0, allow_none=True)


class ExtenderArgsSchema(_GoStruct):
    """Request of filter and prioritize."""

    Pod = KubeObject("Pod", required=True, allow_none=False)
    Nodes = NodeList(allow_none=True, load_default=None)
    NodeNames = StringList(allow_none=True, load_default=None)

    @validates_schema
    def some_nodes(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("Nodes") is None and data.get("NodeNames") is None:
            raise ValidationError("one of Nodes (nodeCacheCapable: false) or NodeNames (nodeCacheCapable: true) "
                                  "is required")


class ExtenderPreemptionArgsSchema(_GoStruct):
    """Request of preempt."""

    Pod = KubeObject("Pod", required=True, allow_none=False)
    NodeNameToVictims = fields.Dict(keys=fields.String(), values=fields.Nested(VictimsSchema, allow_none=True),
                                    allow_none=True, load_default=None)
    NodeNameToMetaVictims = fields.Dict(keys=fields.String(),
                                        values=fields.Nested(MetaVictimsSchema, allow_none=True),
                                        allow_none=True, load_default=None)


class ExtenderBindingArgsSchema(_GoStruct):
    """Request of bind."""

    PodName = fields.String(required=True)
    PodNamespace = fields.String(load_default="default", allow_none=True)
    PodUID = fields.String(required=True)
    Node = fields.String(required=True)

    @validates_schema
    def not_empty(self, data: dict[str, Any], **_: Any) -> None:
        for key in ("PodName", "PodUID", "Node"):
            if not data.get(key):
                raise ValidationError("must not be empty", key)


# ---- replies (exact keys, every field present; used to document and test the replies) ----------

class ExtenderFilterResultSchema(Schema):
    Nodes = fields.Raw(allow_none=True, required=True)
    NodeNames = fields.List(fields.String(), allow_none=True, required=True)
    FailedNodes = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True, required=True)
    FailedAndUnresolvableNodes = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True,
                                             required=True)
    Error = fields.String(required=True)


class HostPrioritySchema(Schema):
    Host = fields.String(required=True)
    Score = Int64(required=True)


class MetaPodResultSchema(Schema):
    UID = fields.String(required=True)


class MetaVictimsResultSchema(Schema):
    Pods = fields.List(fields.Nested(MetaPodResultSchema), required=True)
    NumPDBViolations = Int64(required=True)


class ExtenderPreemptionResultSchema(Schema):
    NodeNameToMetaVictims = fields.Dict(keys=fields.String(), values=fields.Nested(MetaVictimsResultSchema),
                                        required=True, allow_none=True)


class ExtenderBindingResultSchema(Schema):
    Error = fields.String(required=True)
