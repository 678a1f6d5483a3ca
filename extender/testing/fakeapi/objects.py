"""Thread-safe object store with a global resourceVersion, bounded event history and watchers.

Contract:
    * Objects are JSON dicts keyed by resource type, namespace (``""`` for cluster-scoped)
      and name. A stored dict is **never mutated** after it is stored: every write stores a
      new dict. Readers may therefore hold references without locking; the direct (test)
      API hands out deep copies anyway.
    * Every committed write takes the next value of ONE global integer counter; it becomes the
      object's ``metadata.resourceVersion`` (a decimal string) and the rv of the watch event.
      A DELETED event carries the deleted object with the deletion's rv (as etcd does).
      Writes that change nothing are not committed: same object, same rv, no event.
    * History is a bounded FIFO of events across all types (``history`` entries). A watch
      from resourceVersion ``R`` replays every event with rv > R of its type that matches its
      filters, then follows live events, with no gap and no duplicate. If an event with
      rv > R was already evicted (or :meth:`Store.compact` passed R), the watcher gets a single
      ``ERROR`` event holding a 410 ``Expired`` Status and ends.
    * Watch filtering follows the apiserver watch cache: for a MODIFIED event where the old
      state matched the watcher's selectors and the new one does not, the watcher receives
      DELETED (with the old state, stamped with the new rv); in the reverse case, ADDED.
    * Watchers are fed synchronously under the store lock (so ordering is global and exact),
      but serialization and socket IO happen on the watch's own thread. A watcher with a
      ``delay`` (set by the server from its watch-delay rules) hands out each event only once
      ``delay()`` seconds have passed since the event was committed, in order (see
      :meth:`Watcher.take`).
    * Commit hooks (:meth:`Store.add_commit_hook`) see every committed write synchronously,
      under the store lock, before any watcher does: ``hook(kind, type, obj, prev)``. A hook
      must be quick and must not write to the store; an exception in a hook is logged and
      ignored.
    * All HTTP-level semantics (admission/validation via :mod:`.strategies`, preconditions,
      finalizers, graceful deletion; binding and eviction in :mod:`.store`) live in the store so
      the HTTP layer only parses and formats. Methods raise :class:`~.errors.ApiError`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from datetime import timedelta
from typing import Any, Callable, Iterable, List, Mapping

from . import errors
from .buckets import Bucket, ListResult, decode_continue, encode_continue
from .codec import clone
from .errors import ApiError
from .patch import PatchApplyError, PatchFormatError, json_patch, merge_patch, strategic_merge_patch
from .resources import KNOWN_CRDS, PODS, PRIORITY_CLASSES, ResourceType, field_value
from .selector import FieldSelector, LabelSelector
from .strategies import (
    AdmissionView,
    Clock,
    Strategy,
    check_types,
    format_time,
    now_utc,
    status_only,
    strategy_for,
    validate_metadata,
)
from .watch import ADDED, BOOKMARK, DELETED, ERROR, MODIFIED, Event, Watcher, with_rv

__all__ = ["ObjectStore", "CommitHook", "meta_of", "MERGE_PATCH", "STRATEGIC_MERGE_PATCH", "JSON_PATCH"]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

log = logging.getLogger(__name__)

CommitHook = Callable[[str, str, Mapping[str, Any], "Mapping[str, Any] | None"], None]
"""``hook(kind, event type, object as stored, previous state or None)``."""

_GEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def _uid() -> str:
    """A random (version 4) UUID string; cheaper than ``str(uuid.uuid4())`` for bulk seeding."""
    h = "%032x" % ((random.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48))
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def meta_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


class ObjectStore(AdmissionView):
    """The object store. See the module docstring for the contract."""

    def __init__(
        self,
        types: Iterable[ResourceType],
        *,
        crds: Iterable[ResourceType] = (),
        history: int = 10_000,
        watch_queue_limit: int | None = None,
        graceful_pod_deletion: bool = False,
        grace_period_scale: float = 1.0,
        clock: Clock = now_utc,
    ) -> None:
        self._lock = threading.RLock()
        self._resolve_cache: dict[tuple[str, str | None], ResourceType] = {}
        self._now_cache: tuple[int, str] = (-1, "")
        self._types: dict[str, ResourceType] = {}
        self._enabled: set[str] = set()
        self._strategies: dict[str, Strategy] = {}
        self._buckets: dict[str, Bucket] = {}
        for rt in types:
            self._add_type(rt, enabled=True)
        for rt in crds:
            self._add_type(rt, enabled=True)
        self._rv = 1
        self._history: deque[Event] = deque()
        self._history_size = max(0, int(history))
        self._horizon = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self.watch_queue_limit = watch_queue_limit
        self.graceful_pod_deletion = graceful_pod_deletion
        self.grace_period_scale = grace_period_scale
        self._clock = clock
        self._timers: set[threading.Timer] = set()
        self._closed = False
        self._hooks: list[CommitHook] = []

    # ------------------------------------------------------------------ types

    def _add_type(self, rt: ResourceType, *, enabled: bool) -> None:
        self._types[rt.key] = rt
        self._strategies[rt.key] = strategy_for(rt)
        self._buckets.setdefault(rt.key, Bucket())
        if enabled:
            self._enabled.add(rt.key)

    def enable_type(self, rt: ResourceType) -> None:
        """Start serving ``rt`` (e.g. installing a CRD)."""
        with self._lock:
            self._add_type(rt, enabled=True)

    def disable_type(self, rt: ResourceType) -> None:
        """Stop serving ``rt``: its objects are deleted (with DELETED events) and its watches end."""
        with self._lock:
            if rt.key not in self._enabled:
                return
            bucket = self._buckets[rt.key]
            for obj in list(bucket.iter_all()):
                self._commit_delete(rt, obj)
            self._enabled.discard(rt.key)
            for w in list(self._watchers.get(rt.key, ())):
                w.close("removed")

    def enabled_types(self) -> list[ResourceType]:
        with self._lock:
            return [self._types[k] for k in self._types if k in self._enabled]

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The enabled type served at ``group/version/plural`` (None when not served)."""
        key = plural if not group else f"{plural}.{group}"
        rt = self._types.get(key)
        if rt is None or rt.version != version or key not in self._enabled:
            return None
        return rt

    def resolve(self, name: str, api_version: str | None = None) -> ResourceType:
        """Find an enabled type by kind, plural, singular, short name or ``plural.group``."""
        cached = self._resolve_cache.get((name, api_version))
        if cached is not None and cached.key in self._enabled:
            return cached
        with self._lock:
            cands: list[ResourceType] = []
            for key in self._enabled:
                rt = self._types[key]
                names = {rt.plural, rt.kind, rt.kind.lower(), rt.singular, rt.key, *rt.short_names}
                if name in names and (api_version is None or api_version == rt.api_version):
                    cands.append(rt)
            if not cands:
                if name in KNOWN_CRDS and KNOWN_CRDS[name].key not in self._enabled:
                    raise KeyError(f"resource type {name!r} is not enabled on this server")
                raise KeyError(f"unknown resource type {name!r} (apiVersion={api_version!r})")
            cands.sort(key=lambda r: (r.group != "", r.key))
            self._resolve_cache[(name, api_version)] = cands[0]
            return cands[0]

    def strategy(self, rt: ResourceType) -> Strategy:
        return self._strategies[rt.key]

    def _check_served(self, rt: ResourceType) -> Bucket:
        if rt.key not in self._enabled:
            raise errors.resource_not_found()
        return self._buckets[rt.key]

    # ------------------------------------------------------------------ clock / ids

    @property
    def resource_version(self) -> int:
        """The current (latest committed) global resourceVersion."""
        return self._rv

    def now(self) -> str:
        """The current time in ``metav1.Time`` form (cached per second for the default clock)."""
        if self._clock is not now_utc:
            return format_time(self._clock())
        sec = int(time.time())
        if self._now_cache[0] != sec:
            self._now_cache = (sec, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec)))
        return self._now_cache[1]

    def priority_classes(self) -> Iterable[Mapping[str, Any]]:
        return list(self._buckets[PRIORITY_CLASSES.key].iter_all()) if PRIORITY_CLASSES.key in self._buckets else []

    # ------------------------------------------------------------------ commit primitives (lock held)

    def add_commit_hook(self, hook: CommitHook) -> Callable[[], None]:
        """Call ``hook`` on every committed write from now on (see the module docstring);
        returns a function that removes it."""
        with self._lock:
            self._hooks = self._hooks + [hook]

        def remove() -> None:
            with self._lock:
                self._hooks = [h for h in self._hooks if h is not hook]

        return remove

    def _emit(self, rt: ResourceType, etype: str, obj: dict[str, Any], prev: dict[str, Any] | None, rv: int) -> None:
        for hook in self._hooks:
            try:
                hook(rt.kind, etype, obj, prev)
            except Exception:  # noqa: BLE001 - an observer must never break a write
                log.exception("fake apiserver: commit hook failed")
        ev = Event(rv, etype, rt.key, obj, prev)
        if self._history_size:
            if len(self._history) >= self._history_size:
                self._horizon = max(self._horizon, self._history.popleft().rv)
            self._history.append(ev)
        else:
            self._horizon = rv
        watchers = self._watchers.get(rt.key)
        if watchers:
            for w in tuple(watchers):
                w.offer(ev)

    def _commit_put(self, rt: ResourceType, obj: dict[str, Any], prev: dict[str, Any] | None) -> dict[str, Any]:
        self._rv += 1
        rv = self._rv
        meta = obj["metadata"]
        meta["resourceVersion"] = str(rv)
        self._buckets[rt.key].put(meta.get("namespace", "") if rt.namespaced else "", meta["name"], obj)
        self._emit(rt, ADDED if prev is None else MODIFIED, obj, prev, rv)
        return obj

    def _commit_delete(self, rt: ResourceType, prev: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        rv = self._rv
        meta = meta_of(prev)
        self._buckets[rt.key].remove(meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        self._emit(rt, DELETED, with_rv(prev, rv), prev, rv)
        return prev

    # ------------------------------------------------------------------ read

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object (shared, never mutate it); 404 ApiError if absent."""
        with self._lock:
            bucket = self._check_served(rt)
            obj = bucket.get((namespace or "") if rt.namespaced else "", name)
            if obj is None:
                raise errors.not_found(rt.key, name, group=rt.group, kind=rt.plural)
            return obj

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            bucket = self._buckets.get(rt.key)
            if bucket is None or rt.key not in self._enabled:
                return None
            return bucket.get((namespace or "") if rt.namespaced else "", name)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label: LabelSelector | None = None,
        field: FieldSelector | None = None,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        """Objects in (namespace, name) order. Items are shared references (do not mutate)."""
        lab = None if label is None or label.empty else label
        fld = None if field is None or field.empty else field
        with self._lock:
            bucket = self._check_served(rt)
            ns = (namespace or None) if rt.namespaced else None
            list_rv = self._rv
            after: tuple[str, str] | None = None
            if continue_token:
                list_rv, cns, cname = decode_continue(continue_token)
                if list_rv < self._horizon:
                    raise errors.expired(
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter."
                    )
                after = (cns, cname)
            items: list[dict[str, Any]] = []
            token: str | None = None
            want = limit if limit and limit > 0 else None
            it = bucket.iter_sorted(ns, after)
            for obj in it:
                if lab is not None and not lab.matches_object(obj):
                    continue
                if fld is not None and not fld.matches(obj, field_value):
                    continue
                if want is not None and len(items) >= want:
                    last = meta_of(items[-1])
                    token = encode_continue(list_rv, last.get("namespace", "") if rt.namespaced else "", last["name"])
                    break
                items.append(obj)
            remaining = None
            return ListResult(items, list_rv, token, remaining)

    # ------------------------------------------------------------------ create

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        obj: dict[str, Any],
        *,
        dry_run: bool = False,
        admit: bool = True,
    ) -> dict[str, Any]:
        """Create ``obj`` (a private dict the store may keep). ``admit=False`` = direct test write."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if admit:
            check_types(rt, obj)
        elif not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("metadata must be an object")
        with self._lock:
            bucket = self._check_served(rt)
            meta = obj.get("metadata")
            if meta is None:
                meta = obj["metadata"] = {}
            self._check_kind(rt, obj)
            obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
            if rt.namespaced:
                body_ns = meta.get("namespace") or ""
                if namespace and body_ns and body_ns != namespace:
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                meta["namespace"] = namespace or body_ns or "default"
            else:
                meta.pop("namespace", None)
            if admit and meta.get("resourceVersion"):
                raise errors.internal_error("resourceVersion should not be set on objects to be created")
            kept = {} if admit else {f: meta[f] for f in _SERVER_META if meta.get(f) is not None}
            for f in _SERVER_META:
                meta.pop(f, None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rt, bucket, meta)
            self.strategy(rt).default(obj)
            if admit:
                self.strategy(rt).prepare_for_create(obj, self)
                errs = validate_metadata(rt, obj) + self.strategy(rt).validate_create(obj)
                if errs:
                    raise errors.invalid(rt.kind, meta.get("name") or "", errs, group=rt.group)
            elif not meta.get("name"):
                raise errors.invalid(rt.kind, "", [("metadata.name", "FieldValueRequired",
                                                    "Required value: name or generateName is required")])
            ns_key = meta.get("namespace", "") if rt.namespaced else ""
            if bucket.get(ns_key, meta["name"]) is not None:
                raise errors.already_exists(rt.key, meta["name"], group=rt.group)
            meta["uid"] = _uid()
            meta["creationTimestamp"] = self.now()
            meta["generation"] = 1
            meta.update(kept)  # direct writes may seed server-owned fields (uid, timestamps, ...)
            if dry_run:
                meta.pop("resourceVersion", None)
                return obj
            return self._commit_put(rt, obj, None)

    @staticmethod
    def _check_kind(rt: ResourceType, obj: Mapping[str, Any]) -> None:
        kind, av = obj.get("kind"), obj.get("apiVersion")
        if kind is not None and kind != rt.kind:
            raise errors.bad_request(f"the kind in the body ({kind}) does not match the expected kind ({rt.kind})")
        if av is not None and av != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({av}) does not match the expected API version ({rt.api_version})"
            )

    def _generate_name(self, rt: ResourceType, bucket: Bucket, meta: Mapping[str, Any]) -> str:
        base = str(meta["generateName"])[:58]
        ns_key = meta.get("namespace", "") if rt.namespaced else ""
        for _ in range(100):
            name = base + "".join(random.choice(_GEN_ALPHABET) for _ in range(5))
            if bucket.get(ns_key, name) is None:
                return name
        raise errors.ApiError(409, "AlreadyExists", f"could not generate a unique name from {base!r}")

    # ------------------------------------------------------------------ update / patch

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        admit: bool = True,
        check_resource_version: bool = True,
    ) -> tuple[dict[str, Any], bool]:
        """PUT semantics. Returns ``(object, created)``."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the request body must be a JSON object")
        check_types(rt, obj)
        with self._lock:
            bucket = self._check_served(rt)
            ns_key = (namespace or "") if rt.namespaced else ""
            old = bucket.get(ns_key, name)
            meta = obj.setdefault("metadata", {})
            if meta.get("name") and meta["name"] != name:
                raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
            if old is None:
                if rt.allow_create_on_update and subresource is None:
                    meta["name"] = name
                    meta.pop("resourceVersion", None)
                    return self.create(rt, namespace, obj, dry_run=dry_run, admit=admit), True
                raise errors.not_found(rt.key, name, group=rt.group, kind=rt.plural)
            rv = meta.get("resourceVersion") or ""
            if check_resource_version:
                if rv:
                    if rv != meta_of(old).get("resourceVersion"):
                        raise errors.conflict_modified(rt.key, name, group=rt.group)
                elif admit and not rt.allow_unconditional_update:
                    raise errors.invalid(rt.kind + ("." + rt.group if rt.group else ""), name, [
                        ("metadata.resourceVersion", "FieldValueInvalid", "Invalid value: 0x0: must be specified for an update")
                    ])
            return self._update_locked(rt, old, obj, subresource=subresource, dry_run=dry_run, admit=admit), False

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        admit: bool = True,
    ) -> dict[str, Any]:
        """PATCH with one of :data:`MERGE_PATCH`, :data:`STRATEGIC_MERGE_PATCH`, :data:`JSON_PATCH`."""
        with self._lock:
            bucket = self._check_served(rt)
            old = bucket.get((namespace or "") if rt.namespaced else "", name)
            if old is None:
                raise errors.not_found(rt.key, name, group=rt.group, kind=rt.plural)
            try:
                if patch_type == MERGE_PATCH:
                    if not isinstance(patch, dict):
                        raise PatchFormatError("merge patch must be a JSON object")
                    new = merge_patch(old, patch)
                elif patch_type == STRATEGIC_MERGE_PATCH:
                    if rt.crd:
                        raise errors.unsupported_media_type(patch_type, [JSON_PATCH, MERGE_PATCH, "application/apply-patch+yaml"])
                    new = strategic_merge_patch(old, patch)
                elif patch_type == JSON_PATCH:
                    new = json_patch(old, patch)
                else:
                    raise errors.unsupported_media_type(
                        patch_type, [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH] if not rt.crd else [JSON_PATCH, MERGE_PATCH]
                    )
            except PatchFormatError as exc:
                raise errors.bad_request(str(exc)) from None
            except PatchApplyError as exc:
                raise ApiError(422, "Invalid", str(exc)) from None
            if not isinstance(new, dict):
                raise errors.bad_request("the patch must produce a JSON object")
            check_types(rt, new)
            nmeta = new.get("metadata")
            if not isinstance(nmeta, dict):
                nmeta = new["metadata"] = {}
            if nmeta.get("name") != name:
                raise errors.bad_request(f"the name of the object ({nmeta.get('name')}) does not match the name on the URL ({name})")
            rv = nmeta.get("resourceVersion") or ""
            if rv and rv != meta_of(old).get("resourceVersion"):
                raise errors.conflict_modified(rt.key, name, group=rt.group)
            return self._update_locked(rt, old, new, subresource=subresource, dry_run=dry_run, admit=admit)

    def _update_locked(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str | None,
        dry_run: bool,
        admit: bool,
    ) -> dict[str, Any]:
        strategy = self.strategy(rt)
        ometa = meta_of(old)
        name = ometa["name"]
        nmeta = new.setdefault("metadata", {})
        if not isinstance(nmeta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced and nmeta.get("namespace") and nmeta["namespace"] != ometa.get("namespace"):
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        self._check_kind(rt, new)
        if admit and nmeta.get("uid") and nmeta["uid"] != ometa.get("uid"):
            raise errors.invalid(rt.kind, name, [("metadata.uid", "FieldValueInvalid",
                                                  f'Invalid value: "{nmeta["uid"]}": field is immutable')])
        if subresource == "status":
            if not rt.status_subresource:
                raise errors.resource_not_found()
            new = strategy.status_update(new, old) if admit else status_only(new, old)
            nmeta = new["metadata"]
        else:
            strategy.default(new)
            if admit:
                strategy.prepare_for_update(new, old)
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        nmeta["name"] = name
        if rt.namespaced:
            nmeta["namespace"] = ometa.get("namespace", "")
        else:
            nmeta.pop("namespace", None)
        for f in _SERVER_META:
            if not admit and f in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                continue  # direct writes may set/clear these
            if f in ometa:
                nmeta[f] = ometa[f]
            else:
                nmeta.pop(f, None)
        if subresource is None and _spec_part(new) != _spec_part(old):
            nmeta["generation"] = int(ometa.get("generation") or 0) + 1
        if admit:
            errs = validate_metadata(rt, new) + (strategy.validate_update(new, old) if subresource is None else [])
            if errs:
                raise errors.invalid(rt.kind, name, errs, group=rt.group)
        nmeta["resourceVersion"] = ometa.get("resourceVersion")
        if new == old:
            return old  # no-op: no write, no event
        if dry_run:
            return new
        if nmeta.get("deletionTimestamp") and not nmeta.get("finalizers") and not nmeta.get("deletionGracePeriodSeconds"):
            # the last finalizer was removed from an object being deleted
            self._commit_put(rt, new, old)
            return self._commit_delete(rt, self._buckets[rt.key].get(self._ns_key(rt, nmeta), name) or new)
        return self._commit_put(rt, new, old)

    @staticmethod
    def _ns_key(rt: ResourceType, meta: Mapping[str, Any]) -> str:
        return str(meta.get("namespace", "")) if rt.namespaced else ""

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
        admit: bool = True,
    ) -> dict[str, Any]:
        """Delete (or start deleting) an object; returns its last state as the real server does."""
        opts = options or {}
        with self._lock:
            bucket = self._check_served(rt)
            old = bucket.get((namespace or "") if rt.namespaced else "", name)
            if old is None:
                raise errors.not_found(rt.key, name, group=rt.group, kind=rt.plural)
            self._check_preconditions(rt, name, old, opts.get("preconditions"))
            ometa = meta_of(old)
            if dry_run:
                return old
            if ometa.get("finalizers"):
                if ometa.get("deletionTimestamp"):
                    return old
                new = clone(old)
                new["metadata"]["deletionTimestamp"] = self.now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._commit_put(rt, new, old)
            if rt is PODS and admit and self.graceful_pod_deletion:
                grace = opts.get("gracePeriodSeconds")
                if grace is None:
                    grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                grace = max(0, int(grace))
                spec, status = old.get("spec") or {}, old.get("status") or {}
                if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
                    grace = 0
                if grace > 0:
                    cur = ometa.get("deletionGracePeriodSeconds")
                    if ometa.get("deletionTimestamp") and cur is not None and cur <= grace:
                        return old
                    new = clone(old)
                    new["metadata"]["deletionTimestamp"] = format_time(self._clock() + timedelta(seconds=grace))
                    new["metadata"]["deletionGracePeriodSeconds"] = grace
                    stored = self._commit_put(rt, new, old)
                    self._schedule_kubelet_delete(rt, stored, grace * self.grace_period_scale)
                    return stored
            return self._commit_delete(rt, old)

    def _check_preconditions(self, rt: ResourceType, name: str, obj: Mapping[str, Any], pre: Any) -> None:
        if not pre:
            return
        if not isinstance(pre, dict):
            raise errors.bad_request("preconditions must be an object")
        meta = meta_of(obj)
        uid = pre.get("uid")
        if uid and uid != meta.get("uid"):
            raise errors.conflict(rt.key, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}", group=rt.group)
        rv = pre.get("resourceVersion")
        if rv and rv != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.key, name,
                f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {meta.get('resourceVersion')}",
                group=rt.group,
            )

    def _schedule_kubelet_delete(self, rt: ResourceType, obj: Mapping[str, Any], delay: float) -> None:
        meta = meta_of(obj)
        ns, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid")

        def fire() -> None:
            with self._lock:
                self._timers.discard(timer)
                if self._closed:
                    return
                cur = self._buckets[rt.key].get(ns, name)
                if cur is None or meta_of(cur).get("uid") != uid or not meta_of(cur).get("deletionTimestamp"):
                    return
                if meta_of(cur).get("finalizers"):
                    new = clone(cur)
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    self._commit_put(rt, new, cur)
                    return
                self._commit_delete(rt, cur)

        timer = threading.Timer(max(0.0, delay), fire)
        timer.daemon = True
        self._timers.add(timer)
        timer.start()

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        label: LabelSelector | None,
        field: FieldSelector | None,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> List[dict[str, Any]]:
        with self._lock:
            items = self.list(rt, namespace, label, field).items
            out = []
            for obj in items:
                m = meta_of(obj)
                out.append(self.delete(rt, m.get("namespace"), m["name"], options, dry_run=dry_run))
            return out

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        label: LabelSelector | None,
        field: FieldSelector | None,
        resource_version: str | None,
        *,
        send_initial_events: bool | None = None,
        queue_limit: int | None = None,
    ) -> Watcher:
        """Register a watcher (replay + live). Raises 400 for a malformed resourceVersion."""
        rv_s = (resource_version or "").strip()
        rv: int | None = None
        if rv_s and rv_s != "0":
            try:
                rv = int(rv_s)
                if rv < 0:
                    raise ValueError
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version!r}") from None
        with self._lock:
            self._check_served(rt)
            if self._closed:
                raise ApiError(503, "ServiceUnavailable", "apiserver is shutting down")
            w = Watcher(rt, namespace if rt.namespaced else None, label, field,
                        queue_limit if queue_limit is not None else self.watch_queue_limit)
            initial = send_initial_events if send_initial_events is not None else rv is None
            if initial:
                bucket = self._buckets[rt.key]
                src = bucket.objs.get(w.namespace, {}).values() if w.namespace else bucket.iter_all()
                for obj in src:
                    if w.matches(obj):
                        w.push((ADDED, None, obj))
                if send_initial_events:
                    w.push((BOOKMARK, None, self._bookmark_obj(rt, initial_end=True)))
            if rv is not None and not initial:
                if rv < self._horizon:
                    w.push((ERROR, None, errors.expired(f"too old resource version: {rv} ({self._rv})").status()))
                    w.close("error")
                    return w
                for ev in self._history:
                    if ev.rv > rv and ev.key == rt.key:
                        w.offer(ev)
            w.initial_backlog = w.pending()
            w.registering = False
            self._watchers.setdefault(rt.key, set()).add(w)
            return w

    def _bookmark_obj(self, rt: ResourceType, *, initial_end: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    def bookmark(self, w: Watcher) -> None:
        """Queue a BOOKMARK carrying the current rv (ordered after every event already queued)."""
        with self._lock:
            w.push((BOOKMARK, None, self._bookmark_obj(w.rt)))

    def unwatch(self, w: Watcher) -> None:
        with self._lock:
            ws = self._watchers.get(w.rt.key)
            if ws is not None:
                ws.discard(w)
        w.close("removed")

    def watchers(self, rt: ResourceType | None = None) -> List[Watcher]:
        with self._lock:
            if rt is not None:
                return [w for w in self._watchers.get(rt.key, ()) if w.closed is None]
            return [w for ws in self._watchers.values() for w in ws if w.closed is None]

    def registered_watchers(self) -> int:
        """Watchers still registered (open, or closed but not yet released by their stream)."""
        with self._lock:
            return sum(len(ws) for ws in self._watchers.values())

    def drop_watches(self, rt: ResourceType | None = None, *, abort: bool = False) -> int:
        """End open watches now (cleanly, or ``abort=True``: reset the connection)."""
        n = 0
        for w in self.watchers(rt):
            w.close("abort" if abort else "drop")
            n += 1
        return n

    def compact(self, resource_version: int | None = None) -> int:
        """Forget history up to ``resource_version`` (default: now). Returns the new horizon."""
        with self._lock:
            target = self._rv if resource_version is None else min(int(resource_version), self._rv)
            while self._history and self._history[0].rv <= target:
                self._history.popleft()
            self._horizon = max(self._horizon, target)
            return self._horizon

    @property
    def horizon(self) -> int:
        """Watches/continues from a resourceVersion below this get 410 Expired."""
        return self._horizon

    def reopen(self) -> None:
        """Accept watches again after :meth:`close` (server restart)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """End every watch and cancel pending graceful deletions; new watches get 503 until reopened."""
        with self._lock:
            self._closed = True
            for t in list(self._timers):
                t.cancel()
            self._timers.clear()
            for ws in self._watchers.values():
                for w in ws:
                    w.close("stop")

    # ------------------------------------------------------------------ bulk seeding

    def create_many(self, rt_of: Callable[[Mapping[str, Any]], ResourceType], objs: Iterable[dict[str, Any]]) -> int:
        """Direct-create many private dicts under one lock acquisition."""
        n = 0
        with self._lock:
            for obj in objs:
                rt = rt_of(obj)
                self.create(rt, meta_of(obj).get("namespace"), obj, admit=False)
                n += 1
        return n

