"""Go ``encoding/json`` as kube-scheduler's HTTPExtender uses it (§1, §3.3).

Encoding (:func:`marshal`): ``json.Marshal`` output - compact, no trailing newline, ``<``, ``>``,
``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc., maps (``map[string]...``) with sorted keys.
The request structs have no json tags, so their keys are the capitalised Go field names and every
field is present (``null`` when unset). Kubernetes objects embedded in requests keep the key
order they have in the cluster (Go would use struct-field order; extenders must not care).

Decoding (:func:`decode_filter_result`, :func:`decode_host_priorities`,
:func:`decode_preemption_result`, :func:`decode_binding_result`): ``json.NewDecoder(body)
.Decode(&result)`` into the four reply types, strictly typed like Go, not like the tolerant
server schemas of ``extender.api``:

* only the first JSON value is read; trailing bytes are ignored; an empty body is ``EOF``;
* object keys match struct fields case-insensitively (an exact match is preferred; with
  duplicates the later key wins); unknown keys are ignored; map keys are data (exact);
* ``null`` leaves a field at its zero value (a top-level ``null`` is a zero result, no error);
* a type mismatch is an error: ``5.0``/``5e0``/``"5"`` for an int64, an object where a list is
  expected, a number where a string is expected, an int64 overflow.

Go keeps decoding after a type mismatch and reports the first one at the end; the result is
unusable either way, so these functions raise :class:`DecodeError` at the first mismatch.
Embedded ``v1.NodeList`` values (filter replies in non-cache mode) are checked only as far as the
scheduler uses them: an object whose ``items`` is a list of objects with a string
``metadata.name`` (deeper typing of Node objects is not emulated).
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class DecodeError(ValueError):
    """What Go's decoder would return: the message imitates Go's wording."""


# ---- encoding ---------------------------------------------------------------------------------

_HTML_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
_HTML_ESCAPES_BYTES = tuple((raw.encode(), escaped.encode()) for raw, escaped in _HTML_ESCAPES)


def marshal(value: Any) -> bytes:
    """``json.Marshal(value)`` for plain JSON data (dicts keep their order: build request structs
    in Go field order and sort map-typed dicts with :func:`go_map`)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for raw, escaped in _HTML_ESCAPES:
        if raw in text:  # these characters can only occur inside strings
            text = text.replace(raw, escaped)
    return text.encode("utf-8")


def marshal_strings(values: list[str]) -> bytes:
    """``json.Marshal`` of a ``[]string``: :func:`marshal`'s bytes, by orjson (which escapes
    strings as ``json.dumps(ensure_ascii=False)`` does) when every value is valid Unicode."""
    try:
        data = orjson.dumps(values)
    except TypeError:  # a lone surrogate (or not a list of str): the general path says what it is
        return marshal(values)
    for raw, escaped in _HTML_ESCAPES_BYTES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data


def go_map(mapping: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Go map as encoding/json writes it: keys sorted; ``None`` stays ``null``."""
    if mapping is None:
        return None
    return {k: mapping[k] for k in sorted(mapping)}


# ---- lexical layer -----------------------------------------------------------------------------


class _Obj:
    """A JSON object as ordered key/value pairs (duplicates kept, as Go sees them)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


class _Float:
    """A JSON number with a fraction or exponent (never assignable to an int64)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


_DECODER = json.JSONDecoder(object_pairs_hook=_Obj, parse_float=_Float, parse_constant=_no_constants)


def first_value(body: bytes) -> Any:
    """The first JSON value of ``body`` (Decoder.Decode reads one value and stops)."""
    text = body.decode("utf-8", errors="replace")
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if start == len(text):
        raise DecodeError("EOF")
    try:
        value, _end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip(" \t\r\n")):
            raise DecodeError("unexpected EOF") from exc
        raise DecodeError(f"invalid character {text[exc.pos]!r} at offset {exc.pos}: {exc.msg}") from exc
    except ValueError as exc:  # NaN / Infinity
        raise DecodeError(str(exc)) from exc
    return value


def _kind(value: Any) -> str:
    """Go's name for a JSON value in UnmarshalTypeError messages."""
    if isinstance(value, _Obj):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int):
        return f"number {value}"
    if isinstance(value, _Float):
        return f"number {value.text}"
    return "null"


def _mismatch(value: Any, where: str, go_type: str) -> DecodeError:
    return DecodeError(f"json: cannot unmarshal {_kind(value)} into {where} of type {go_type}")


# ---- typed field readers ---------------------------------------------------------------------


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise _mismatch(value, where, "string")


def _int64(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        if INT64_MIN <= value <= INT64_MAX:
            return value
    raise _mismatch(value, where, "int64")


def _string_map(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _mismatch(value, where, "v1.FailedNodesMap")
    out: dict[str, str] = {}
    for k, v in value.pairs:
        out[k] = _string(v, where)
    return out


def _string_list(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _mismatch(value, where, "[]string")
    return [_string(v, where) for v in value]


def _struct(value: Any, go_type: str, fields_: Mapping[str, Callable[[Any, str], Any]],
            where: str = "") -> dict[str, Any] | None:
    """Decode a JSON object into the named fields (case-insensitive; later duplicates win).
    Returns None for ``null`` (a nil pointer / untouched struct)."""
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise DecodeError(f"json: cannot unmarshal {_kind(value)} into Go value of type {go_type}"
                          if not where else f"json: cannot unmarshal {_kind(value)} into {where} of type {go_type}")
    exact = {name: name for name in fields_}
    folded = {name.lower(): name for name in fields_}
    out: dict[str, Any] = {}
    for key, v in value.pairs:
        name = exact.get(key) or folded.get(key.lower())
        if name is None:
            continue  # unknown keys are ignored
        out[name] = fields_[name](v, f"Go struct field {go_type.split('.')[-1]}.{name}")
    return out


def _lookup(obj: _Obj, key: str) -> Any:
    """A k8s struct field by json tag, case-insensitively (last one wins)."""
    found = None
    for k, v in obj.pairs:
        if k == key or k.lower() == key.lower():
            found = v
    return found


def to_python(value: Any) -> Any:
    """Plain Python data from the lexical layer (objects -> dicts, floats -> float)."""
    if isinstance(value, _Obj):
        return {k: to_python(v) for k, v in value.pairs}
    if isinstance(value, list):
        return [to_python(v) for v in value]
    if isinstance(value, _Float):
        return float(value.text)
    return value


def _node_list(value: Any, where: str) -> list[dict[str, Any]] | None:
    """A ``*v1.NodeList``: None for null; else the items as plain dicts (names checked)."""
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _mismatch(value, where, "v1.NodeList")
    items = _lookup(value, "items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise _mismatch(items, "Go struct field NodeList.items", "[]v1.Node")
    out = []
    for item in items:
        if item is None:
            out.append({"metadata": {"name": ""}})
            continue
        if not isinstance(item, _Obj):
            raise _mismatch(item, "Go struct field NodeList.items", "v1.Node")
        meta = _lookup(item, "metadata")
        if meta is not None and not isinstance(meta, _Obj):
            raise _mismatch(meta, "Go struct field Node.items.metadata", "v1.ObjectMeta")
        name = _string(_lookup(meta, "name") if meta is not None else None, "Go struct field Node.items.metadata.name")
        node = to_python(item)
        node.setdefault("metadata", {})
        if isinstance(node["metadata"], dict):
            node["metadata"]["name"] = name
        out.append(node)
    return out


# ---- the four reply types -----------------------------------------------------------------------


@dataclass
class FilterResult:
    """``ExtenderFilterResult``. ``nodes`` are the items of ``Nodes`` (None when null)."""

    nodes: list[dict[str, Any]] | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] | None = None
    failed_and_unresolvable_nodes: dict[str, str] | None = None
    error: str = ""


@dataclass
class HostPriority:
    host: str = ""
    score: int = 0


@dataclass
class MetaVictims:
    """``*MetaVictims``; ``pods`` holds the UIDs (None when ``Pods`` was null; an element is
    None where the list held a null ``*MetaPod``)."""

    pods: list[str | None] | None = None
    num_pdb_violations: int = 0


@dataclass
class PreemptionResult:
    """``ExtenderPreemptionResult``: node -> MetaVictims (a null entry is kept as None)."""

    node_name_to_meta_victims: dict[str, MetaVictims | None] | None = field(default=None)


_UNREAD = object()
_FILTER_KEYS = frozenset({"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"})
_HOST, _SCORE = operator.itemgetter("Host"), operator.itemgetter("Score")


def _plain(body: bytes) -> Any:
    """``body`` read by orjson when it is exactly one strict JSON document (else ``_UNREAD``). The
    fast paths below take it only in shapes where Go's decoder reads the same values - the exact
    field names (so no case folding), strings, int64 integers, no floats - and leave every other
    reply to the faithful, slower decoding, which also words the errors as Go does."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return _UNREAD


def _str_map(value: Any) -> bool:
    return value is None or (type(value) is dict and set(map(type, value.values())) <= {str})


def decode_filter_result(body: bytes) -> FilterResult:
    data = _plain(body)
    if type(data) is dict and data.keys() <= _FILTER_KEYS and data.get("Nodes") is None:
        names, error = data.get("NodeNames"), data.get("Error")
        failed, unresolvable = data.get("FailedNodes"), data.get("FailedAndUnresolvableNodes")
        if ((names is None or (type(names) is list and set(map(type, names)) <= {str}))
                and _str_map(failed) and _str_map(unresolvable) and (error is None or type(error) is str)):
            return FilterResult(None, names, failed, unresolvable, error or "")
    value = first_value(body)
    data = _struct(value, "v1.ExtenderFilterResult", {
        "Nodes": _node_list, "NodeNames": _string_list, "FailedNodes": _string_map,
        "FailedAndUnresolvableNodes": _string_map, "Error": _string})
    if data is None:
        return FilterResult()
    return FilterResult(data.get("Nodes"), data.get("NodeNames"), data.get("FailedNodes"),
                        data.get("FailedAndUnresolvableNodes"), data.get("Error", ""))


_HOST_PRIORITY_FIELDS: Mapping[str, Callable[[Any, str], Any]] = {"Host": _string, "Score": _int64}


def _host_priority(value: Any, where: str) -> HostPriority:
    if isinstance(value, _Obj) and len(value.pairs) == 2:  # the shape every extender writes: decided at once
        (host_key, host), (score_key, score) = value.pairs
        if (host_key == "Host" and score_key == "Score" and type(host) is str and type(score) is int
                and INT64_MIN <= score <= INT64_MAX):
            return HostPriority(host, score)
    data = _struct(value, "v1.HostPriority", _HOST_PRIORITY_FIELDS, where)
    if data is None:
        return HostPriority()
    return HostPriority(data.get("Host", ""), data.get("Score", 0))


def decode_host_priorities(body: bytes) -> tuple[list[str], list[int]] | None:
    """``HostPriorityList`` (a bare JSON array) as two columns, the hosts and their scores in
    reply order (a host named twice appears twice); None for a ``null`` body. The reply every
    extender writes - objects of exactly ``Host`` (a string) and ``Score`` (an int64) - is
    checked with a few passes in C over the whole list; anything else goes to the faithful
    decoding, element by element."""
    data = _plain(body)
    if type(data) is list and set(map(type, data)) <= {dict} and set(map(len, data)) <= {2}:
        try:  # two keys, both present: exactly Host and Score
            hosts, scores = list(map(_HOST, data)), list(map(_SCORE, data))
        except KeyError:
            pass
        else:
            if (set(map(type, hosts)) <= {str} and set(map(type, scores)) <= {int}
                    and (not scores or (INT64_MIN <= min(scores) and max(scores) <= INT64_MAX))):
                return hosts, scores
    value = first_value(body)
    if value is None:
        return None
    if not isinstance(value, list):
        raise DecodeError(f"json: cannot unmarshal {_kind(value)} into Go value of type v1.HostPriorityList")
    decoded = [_host_priority(v, "Go value") for v in value]
    return [hp.host for hp in decoded], [hp.score for hp in decoded]


def _meta_pod(value: Any, where: str) -> str | None:
    """A ``*MetaPod``'s UID; None for a null one (a nil pointer, not a MetaPod with no UID)."""
    if value is None:
        return None
    data = _struct(value, "v1.MetaPod", {"UID": _string}, where)
    return "" if data is None else data.get("UID", "")


def _meta_pods(value: Any, where: str) -> list[str | None] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _mismatch(value, where, "[]*v1.MetaPod")
    return [_meta_pod(v, "Go struct field MetaVictims.Pods") for v in value]


def _meta_victims(value: Any, where: str) -> MetaVictims | None:
    data = _struct(value, "v1.MetaVictims", {"Pods": _meta_pods, "NumPDBViolations": _int64}, where)
    if data is None:
        return None
    return MetaVictims(data.get("Pods"), data.get("NumPDBViolations", 0))


def _victims_map(value: Any, where: str) -> dict[str, MetaVictims | None] | None:
    if value is None:
        return None
    if not isinstance(value, _Obj):
        raise _mismatch(value, where, "map[string]*v1.MetaVictims")
    out: dict[str, MetaVictims | None] = {}
    for k, v in value.pairs:
        out[k] = _meta_victims(v, "Go struct field ExtenderPreemptionResult.NodeNameToMetaVictims")
    return out


def decode_preemption_result(body: bytes) -> PreemptionResult:
    """Only ``NodeNameToMetaVictims`` is read (in both modes, §1.3); ``{"Error": "x"}`` decodes
    to an empty result, i.e. "veto all candidates" (§3.4)."""
    value = first_value(body)
    data = _struct(value, "v1.ExtenderPreemptionResult", {"NodeNameToMetaVictims": _victims_map})
    return PreemptionResult(None if data is None else data.get("NodeNameToMetaVictims"))


def decode_binding_result(body: bytes) -> str:
    """``ExtenderBindingResult.Error`` ("" = success)."""
    value = first_value(body)
    data = _struct(value, "v1.ExtenderBindingResult", {"Error": _string})
    return "" if data is None else data.get("Error", "")
