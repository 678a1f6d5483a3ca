"""HTTP-agnostic REST layer: (method, path, query, headers, body) -> response or watch stream.

Contract:
    * Paths follow kube-apiserver: ``/api/v1/...`` for the core group, ``/apis/{g}/{v}/...``
      for others; ``namespaces/{ns}/{plural}[/{name}[/{sub}]]`` for namespaced types,
      ``{plural}[/{name}[/{sub}]]`` for cluster-scoped ones and cross-namespace lists; the
      deprecated ``.../watch/...`` prefix is accepted. ``POST /api/v1/namespaces/{ns}/bindings``
      and ``POST .../pods/{name}/binding`` bind; ``POST .../pods/{name}/eviction`` evicts.
    * Discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}`` (legacy,
      unaggregated documents), ``/version``, ``/healthz``, ``/livez``, ``/readyz``.
    * Status codes: create 201, binding/eviction 201 with a ``Status`` (``status: Success``),
      get/list/replace/patch/delete 200 (replace that creates: 201). Errors are ``Status``
      bodies from :class:`~.errors.ApiError`. Unknown paths/types: 404 ``NotFound``.
    * Lists: ``{"kind": "<Kind>List", "apiVersion", "metadata": {"resourceVersion",
      "continue"?}, "items"}``; as on a real server, items of built-in types carry no
      ``kind``/``apiVersion`` (custom resources' items do).
    * Request bodies: JSON (or YAML for POST/PUT with a YAML content type). Undecodable bodies,
      non-object bodies, wrong field types: 400. Unsupported patch types (including
      server-side apply): 415.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import errors
from .codec import dumps, loads
from .errors import ApiError
from .objects import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from .resources import PODS, ResourceType, group_versions
from .selector import SelectorError, parse_field_selector, parse_label_selector
from .store import Store
from .watch import Watcher

__all__ = ["Response", "WatchStream", "RestApi"]

_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)
_TRUE = ("1", "t", "true", "True", "TRUE")
_FALSE = ("0", "f", "false", "False", "FALSE")


@dataclass
class Response:
    code: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class WatchStream:
    watcher: Watcher
    timeout: float | None
    bookmarks: bool


def _json(code: int, obj: Any) -> Response:
    return Response(code, dumps(obj))


def error_response(err: ApiError) -> Response:
    return Response(err.code, dumps(err.status()), headers=dict(err.headers))


def _q(query: Mapping[str, list[str]], name: str) -> str | None:
    vals = query.get(name)
    return vals[0] if vals else None


def _bool(query: Mapping[str, list[str]], name: str) -> bool | None:
    v = _q(query, name)
    if v is None or v == "":
        return None
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise errors.bad_request(f"invalid boolean value for {name}: {v!r}")


def _int(query: Mapping[str, list[str]], name: str) -> int | None:
    v = _q(query, name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise errors.bad_request(f'invalid value for {name}: strconv.ParseInt: parsing "{v}": invalid syntax') from None


def _dry_run(query: Mapping[str, list[str]]) -> bool:
    vals = query.get("dryRun") or []
    for v in vals:
        if v != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
    return bool(vals)


def _media_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None
    watch_path: bool


class RestApi:
    """Maps requests onto a :class:`~.store.Store`."""

    def __init__(self, store: Store, *, server_address: str = "127.0.0.1:0", version: tuple[str, str] = ("1", "33")) -> None:
        self.store = store
        self.server_address = server_address
        self.version = version

    # ------------------------------------------------------------------ entry point

    def handle(
        self, method: str, path: str, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
    ) -> Response | WatchStream:
        try:
            return self._handle(method.upper(), path, query, headers, body)
        except ApiError as err:
            return error_response(err)

    def _handle(
        self, method: str, path: str, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
    ) -> Response | WatchStream:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return _json(200, {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]})
        if parts[0] in ("healthz", "livez", "readyz") and len(parts) <= 2:
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if parts == ["version"]:
            return _json(200, self._version())
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}]})
            if parts[1] != "v1":
                raise errors.resource_not_found()
            group, version, rest = "", "v1", parts[2:]
            if not rest:
                return _json(200, self._resource_list("", "v1"))
        elif parts[0] == "apis":
            gv = group_versions(t for t in self.store.enabled_types() if t.group)
            if len(parts) == 1:
                return _json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                   "groups": [self._group_doc(g, vs) for g, vs in gv.items()]})
            group = parts[1]
            if group not in gv:
                raise errors.resource_not_found()
            if len(parts) == 2:
                return _json(200, {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(group, gv[group])})
            version = parts[2]
            if version not in gv[group]:
                raise errors.resource_not_found()
            rest = parts[3:]
            if not rest:
                return _json(200, self._resource_list(group, version))
        else:
            return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")

        watch_path = False
        if rest and rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        # the bindings collection (core/v1, namespaced, create-only)
        if group == "" and len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "bindings" and not watch_path:
            if method != "POST":
                raise errors.method_not_allowed()
            return self._bind(rest[1], None, query, headers, body)
        route = self._route(group, version, rest, watch_path)
        return self._dispatch(method, route, query, headers, body)

    def _route(self, group: str, version: str, rest: list[str], watch_path: bool) -> _Route:
        if not rest:
            raise errors.resource_not_found()
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            rt = self.store.lookup(group, version, rest[2])
            if rt is not None:
                if not rt.namespaced:
                    raise errors.resource_not_found()
                namespace, rest = rest[1], rest[2:]
        rt = self.store.lookup(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise errors.resource_not_found()
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if name is not None and rt.namespaced and namespace is None:
            raise errors.resource_not_found()
        if sub is not None and sub not in rt.subresources:
            raise errors.resource_not_found()
        return _Route(rt, namespace, name, sub, watch_path)

    # ------------------------------------------------------------------ dispatch

    def _dispatch(
        self, method: str, r: _Route, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
    ) -> Response | WatchStream:
        rt = r.rt
        watch = r.watch_path or bool(_bool(query, "watch"))
        if r.name is None:
            if method == "GET":
                return self._watch(r, query) if watch else self._list(r, query)
            if method == "POST":
                if rt.namespaced and r.namespace is None:
                    raise errors.method_not_allowed()
                obj = self._decode_object(headers, body)
                new = self.store.create(rt, r.namespace, obj, dry_run=_dry_run(query))
                return _json(201, new)
            if method == "DELETE":
                label, fieldsel = self._selectors(rt, query)
                opts = self._delete_options(query, headers, body)
                deleted = self.store.delete_collection(rt, r.namespace, label, fieldsel, opts, dry_run=_dry_run(query))
                return _json(200, self._list_body(rt, deleted, self.store.resource_version, None))
            raise errors.method_not_allowed()
        if r.sub in (None, "status"):
            if method == "GET":
                if watch:
                    q = dict(query)
                    fs = _q(query, "fieldSelector")
                    name_sel = f"metadata.name={r.name}"
                    q["fieldSelector"] = [f"{fs},{name_sel}" if fs else name_sel]
                    return self._watch(r, q)
                return _json(200, self.store.get(rt, r.namespace, r.name))
            if method == "PUT":
                new_obj = self._decode_object(headers, body)
                stored, created = self.store.replace(rt, r.namespace, r.name, new_obj, subresource=r.sub,
                                                     dry_run=_dry_run(query))
                return _json(201 if created else 200, stored)
            if method == "PATCH":
                mt = _media_type(headers)
                if mt not in _PATCH_TYPES:
                    accepted = list(_PATCH_TYPES) if not rt.crd else [JSON_PATCH, MERGE_PATCH]
                    raise errors.unsupported_media_type(mt, accepted + ["application/apply-patch+yaml"])
                patch = self._decode_json(body)
                stored = self.store.patch(rt, r.namespace, r.name, mt, patch, subresource=r.sub, dry_run=_dry_run(query))
                return _json(200, stored)
            if method == "DELETE" and r.sub is None:
                opts = self._delete_options(query, headers, body)
                return _json(200, self.store.delete(rt, r.namespace, r.name, opts, dry_run=_dry_run(query)))
            raise errors.method_not_allowed()
        if rt is PODS and r.sub == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            assert r.namespace is not None
            return self._bind(r.namespace, r.name, query, headers, body)
        if rt is PODS and r.sub == "eviction":
            if method != "POST":
                raise errors.method_not_allowed()
            assert r.namespace is not None
            eviction = self._decode_object(headers, body)
            self.store.evict(r.namespace, r.name, eviction, dry_run=_dry_run(query))
            return _json(201, errors.status_success(201))
        raise errors.resource_not_found()

    def _bind(
        self, namespace: str, name: str | None, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
    ) -> Response:
        binding = self._decode_object(headers, body)
        if name is None:
            meta = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
            name = str((meta or {}).get("name") or "")
            if not name:
                raise errors.invalid("Binding", "", [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
        bns = (binding.get("metadata") or {}).get("namespace") if isinstance(binding.get("metadata"), dict) else None
        if bns and bns != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        self.store.bind(namespace, name, binding, dry_run=_dry_run(query))
        return _json(201, errors.status_success(201))

    # ------------------------------------------------------------------ list / watch

    def _selectors(self, rt: ResourceType, query: Mapping[str, list[str]]) -> tuple[Any, Any]:
        try:
            label = parse_label_selector(_q(query, "labelSelector"))
            fieldsel = parse_field_selector(_q(query, "fieldSelector"))
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        for f in fieldsel.fields():
            if not rt.supports_field(f):
                raise errors.bad_request(f'field label not supported: {f}')
        return label, fieldsel

    def _list_body(self, rt: ResourceType, items: list[dict[str, Any]], rv: int, token: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        if not rt.crd:
            items = [{k: v for k, v in o.items() if k != "kind" and k != "apiVersion"} for o in items]
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}

    def _list(self, r: _Route, query: Mapping[str, list[str]]) -> Response:
        label, fieldsel = self._selectors(r.rt, query)
        limit = _int(query, "limit")
        if limit is not None and limit < 0:
            raise errors.bad_request("limit must be non-negative")
        rv = _q(query, "resourceVersion")
        if rv not in (None, "", "0"):
            try:
                int(rv)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv!r}") from None
        res = self.store.list(r.rt, r.namespace, label, fieldsel, limit=limit, continue_token=_q(query, "continue") or None)
        return _json(200, self._list_body(r.rt, res.items, res.resource_version, res.continue_token))

    def _watch(self, r: _Route, query: Mapping[str, list[str]]) -> WatchStream:
        label, fieldsel = self._selectors(r.rt, query)
        timeout_s = _q(query, "timeoutSeconds")
        timeout: float | None = None
        if timeout_s not in (None, ""):
            try:
                timeout = float(timeout_s)
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds: {timeout_s!r}") from None
            if timeout <= 0:
                timeout = None
        bookmarks = bool(_bool(query, "allowWatchBookmarks"))
        send_initial = _bool(query, "sendInitialEvents")
        if send_initial and not bookmarks:
            raise errors.invalid("ListOptions", "", [("allowWatchBookmarks", "FieldValueForbidden",
                                                      "Forbidden: allowWatchBookmarks required when sendInitialEvents is true")])
        w = self.store.watch(r.rt, r.namespace, label, fieldsel, _q(query, "resourceVersion"),
                             send_initial_events=send_initial)
        return WatchStream(w, timeout, bookmarks)

    # ------------------------------------------------------------------ bodies

    @staticmethod
    def _decode_json(body: bytes) -> Any:
        if not body or not body.strip():
            raise errors.bad_request("Object 'Kind' is missing in ''")
        try:
            return loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def _decode_object(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        mt = _media_type(headers)
        if mt in ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"):
            import yaml

            try:
                obj = yaml.safe_load(body.decode("utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError) as exc:
                raise errors.bad_request(f"error converting YAML to JSON: {exc}") from None
        elif mt in ("", "application/json", "*/*") or mt.endswith("+json"):
            obj = self._decode_json(body)
        else:
            raise errors.unsupported_media_type(mt, ["application/json", "application/yaml"])
        if not isinstance(obj, dict):
            raise errors.bad_request(
                f"json: cannot unmarshal {type(obj).__name__} into Go value of type struct (the request body must be an object)"
            )
        return obj

    def _delete_options(self, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if body and body.strip():
            decoded = self._decode_json(body)
            if not isinstance(decoded, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            if decoded.get("kind") not in (None, "DeleteOptions"):
                raise errors.bad_request(f"the kind in the body ({decoded.get('kind')}) is not DeleteOptions")
            opts = decoded
        grace = _int(query, "gracePeriodSeconds")
        if grace is not None:
            opts["gracePeriodSeconds"] = grace
        g = opts.get("gracePeriodSeconds")
        if g is not None and (isinstance(g, bool) or not isinstance(g, int)):
            raise errors.bad_request("gracePeriodSeconds must be an integer")
        pp = _q(query, "propagationPolicy")
        if pp:
            opts["propagationPolicy"] = pp
        if opts.get("propagationPolicy") not in (None, "Orphan", "Background", "Foreground"):
            raise errors.bad_request(f'propagationPolicy: Unsupported value: "{opts["propagationPolicy"]}"')
        return opts

    # ------------------------------------------------------------------ discovery

    def _version(self) -> dict[str, str]:
        major, minor = self.version
        return {
            "major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0-fake",
            "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64",
        }

    @staticmethod
    def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources: list[dict[str, Any]] = []
        for t in self.store.enabled_types():
            if t.group == group and t.version == version:
                resources.extend(t.api_resources())
        if group == "":
            resources.append({"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding",
                              "verbs": ["create"]})
        gv = version if not group else f"{group}/{version}"
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
