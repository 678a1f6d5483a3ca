"""The three patch formats of the Kubernetes API: JSON merge, strategic merge and JSON patch.

Contract (all functions are pure: inputs are never mutated, results share no mutable state
with the inputs):

* :func:`merge_patch` — RFC 7386 (``application/merge-patch+json``): objects merge
  recursively, ``null`` deletes a key, anything else (lists included) replaces.
* :func:`strategic_merge_patch` — ``application/strategic-merge-patch+json`` for the built-in
  types this fake serves. Lists are merged by the ``x-kubernetes-patch-merge-key`` of the
  field, looked up by field name in :data:`MERGE_KEYS` (``containers``/``initContainers``/
  ``ephemeralContainers``/``volumes``/``env``/``schedulingGates``/``imagePullSecrets`` by
  ``name``, ``conditions``/``addresses`` by ``type``, ``ports`` by ``containerPort``,
  ``volumeMounts`` by ``mountPath``, ``ownerReferences`` by ``uid``, ...). Primitive lists in
  :data:`MERGE_PRIMITIVE_LISTS` (``finalizers``) are merged as ordered sets. Any other list is
  replaced. ``null`` deletes a key (``{"spec": {"schedulingGates": null}}`` removes all gates).
  Directives supported: ``$patch: delete`` on a merge-keyed list element, ``$patch: replace``
  on a map or as a list element, ``$patch: delete`` on a map, ``$retainKeys``,
  ``$deleteFromPrimitiveList/<field>``; ``$setElementOrder/<field>`` is accepted and ignored.
  Unlike the real server the merge key is found by field name, not by the object's schema —
  correct for every type this fake serves.
* :func:`json_patch` — RFC 6902 (``application/json-patch+json``): ``add``, ``remove``,
  ``replace``, ``move``, ``copy``, ``test`` with RFC 6901 pointers (``~0``/``~1``, ``-``).

Errors: a patch document of the wrong shape raises :class:`PatchFormatError` (the server
answers 400 BadRequest); a well-formed patch that cannot be applied (failed ``test``, missing
path) raises :class:`PatchApplyError` (answered 422, as the real server does).
"""

from __future__ import annotations

from typing import Any

from .codec import clone

__all__ = [
    "PatchFormatError",
    "PatchApplyError",
    "MERGE_KEYS",
    "MERGE_PRIMITIVE_LISTS",
    "merge_patch",
    "strategic_merge_patch",
    "json_patch",
]


class PatchFormatError(ValueError):
    """The patch document is malformed (HTTP 400)."""


class PatchApplyError(ValueError):
    """The patch is well formed but cannot be applied to the object (HTTP 422)."""


#: Field name -> patch merge key, from the ``patchMergeKey`` tags of k8s.io/api types served here.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "conditions": "type",
    "addresses": "type",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
}

#: Primitive lists with ``patchStrategy: merge`` (merged as ordered sets).
MERGE_PRIMITIVE_LISTS: frozenset[str] = frozenset({"finalizers"})


# --------------------------------------------------------------------------- merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch and return the new document."""
    if not isinstance(patch, dict):
        return clone(patch)
    result: dict[str, Any] = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = clone(value)
    return result


# --------------------------------------------------------------------------- strategic merge

_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to ``target`` (a dict) and return the new document."""
    if not isinstance(patch, dict):
        raise PatchFormatError("strategic merge patch must be a JSON object")
    doc = clone(target) if isinstance(target, dict) else {}
    result = _smp_map(doc, patch)
    return {} if result is None else result


def _strip_directives(value: Any) -> Any:
    """Copy a patch value that is inserted as-is, dropping ``$``-directives and nulls."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def _smp_map(result: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    """Merge ``patch`` into ``result`` (a private copy, mutated in place); ``None`` = delete."""
    directive = patch.get("$patch")
    if directive is not None:
        if directive == "replace":
            return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
        if directive == "delete":
            return None
        if directive != "merge":
            raise PatchFormatError(f"unknown patch type: {directive!r}")
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise PatchFormatError("$retainKeys must be a list of strings")
        for k in list(result):
            if k not in retain:
                del result[k]
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(_SET_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if not isinstance(value, list):
                raise PatchFormatError(f"{key} must be a list")
            cur = result.get(field)
            if isinstance(cur, list):
                result[field] = [x for x in cur if x not in value]
            continue
        if key.startswith("$"):
            raise PatchFormatError(f"unknown patch directive {key!r}")
        if value is None:
            result.pop(key, None)
            continue
        cur = result.get(key)
        if isinstance(value, dict):
            merged = _smp_map(cur if isinstance(cur, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(key, cur if isinstance(cur, list) else [], value)
        else:
            result[key] = value
    return result


def _smp_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    """Merge a patch list into ``original`` (a private copy)."""
    if any(isinstance(p, dict) and p.get("$patch") == "replace" and len(p) == 1 for p in patch):
        return [_strip_directives(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    key = MERGE_KEYS.get(field)
    if key is not None and all(isinstance(p, dict) for p in patch) and all(isinstance(o, dict) for o in original):
        result = original
        for p in patch:
            if key not in p:
                raise PatchFormatError(f"map: {p} does not contain declared merge key: {key}")
            idx = next((i for i, o in enumerate(result) if o.get(key) == p[key]), None)
            if p.get("$patch") == "delete":
                if idx is not None:
                    del result[idx]
                continue
            if idx is None:
                result.append(_strip_directives(p))
            else:
                merged = _smp_map(result[idx], p)
                if merged is None:
                    del result[idx]
                else:
                    result[idx] = merged
        return result
    if field in MERGE_PRIMITIVE_LISTS and not any(isinstance(p, (dict, list)) for p in patch):
        for p in patch:
            if p not in original:
                original.append(p)
        return original
    return _strip_directives(patch)


# --------------------------------------------------------------------------- JSON patch

_MISSING = object()


def _parse_pointer(ptr: Any) -> list[str]:
    if not isinstance(ptr, str):
        raise PatchFormatError(f"JSON pointer must be a string, got {ptr!r}")
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchFormatError(f"JSON pointer must start with '/': {ptr!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]


def _index(token: str, length: int, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchApplyError(f"invalid array index {token!r}")
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchApplyError(f"array index {i} out of bounds")
    return i


def _walk(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchApplyError(f"missing path element {t!r}")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(t, len(cur), allow_end=False)]
        else:
            raise PatchApplyError(f"cannot traverse into a scalar at {t!r}")
    return cur


def _get(doc: Any, tokens: list[str]) -> Any:
    return _walk(doc, tokens)


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), allow_end=True), value)
    else:
        raise PatchApplyError("cannot add to a scalar")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise PatchApplyError("cannot remove the document root")
    parent = _walk(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchApplyError(f"unable to remove nonexistent key: {last}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), allow_end=False))
    raise PatchApplyError("cannot remove from a scalar")


def json_patch(target: Any, ops: Any) -> Any:
    """Apply an RFC 6902 JSON patch and return the new document."""
    if not isinstance(ops, list):
        raise PatchFormatError("json patch must be a JSON array of operations")
    doc = clone(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise PatchFormatError(f"invalid json patch operation: {op!r}")
        kind = op["op"]
        if "path" not in op:
            raise PatchFormatError(f"json patch operation {kind!r} is missing 'path'")
        path = _parse_pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchFormatError(f"json patch operation {kind!r} is missing 'value'")
        if kind == "add":
            doc = _add(doc, path, clone(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if not path:
                doc = clone(op["value"])
            else:
                _remove(doc, path)
                doc = _add(doc, path, clone(op["value"]))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchApplyError(f"testing value {op['path']} failed: test operation failed")
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchFormatError(f"json patch operation {kind!r} is missing 'from'")
            src = _parse_pointer(op["from"])
            if kind == "move":
                if path[: len(src)] == src and len(path) > len(src):
                    raise PatchApplyError("cannot move a value into one of its children")
                value = _remove(doc, src)
            else:
                value = clone(_get(doc, src))
            doc = _add(doc, path, value)
        else:
            raise PatchFormatError(f"unknown json patch operation {kind!r}")
    return doc
