"""KubeSource: list then watch Nodes and the Pods that matter, into the cache.

* Pods that matter: those whose containers mention a managed resource (kube-scheduler's
  ``IsInterested`` test), or that carry one of the extender's annotations, or its scheduling
  gate. Others are dropped at the door (150,000 pods, 20,000 managed: we keep 20,000).
* Objects stay raw dicts, trimmed to what scheduling reads (``trim_pod``, ``trim_node``).
* Other followers (a test harness's emulated kube-scheduler uses this class as its informer)
  pass ``pod_filter=None`` to follow every pod and ``trim=False`` to receive whole objects.
* Each kind runs in its own thread: a paginated list, then a watch from the list's
  resourceVersion; a stream that ends is resumed from the last resourceVersion seen (bookmarks
  included); a 410 Gone (as an answer or an ERROR event) triggers a relist, which also delivers
  the deletions missed meanwhile. Errors back off exponentially (0.5 s doubling to 30 s, with
  jitter), and every reconnect, relist and skipped object is logged and counted. A watch that
  was open counts as a success: one that breaks after it worked reconnects after the first
  step of the back-off, however many watches broke before.
* ``connected()`` tells whether every kind is being watched right now (an open stream), which a
  replica that has just become leader waits for: while a watch is away, writes of the previous
  leader may be missing from the cache.
* PodGroups and ElasticQuotas (``scheduling.x-k8s.io/v1alpha1``, CRDs) are followed the same way
  when the cluster serves them. A 404 on their list (or watch) means the CRD is not installed (a 403: the extender
  may not read them, see the chart's ``features.gang`` and ``features.quota``): this is logged once at INFO, the objects
  known so far are removed, and the list is retried every ``crd_retry_interval`` seconds (default
  3 minutes) with no error logged or counted, so installing the CRD later needs no restart.
* The sink is marked synced once the initial lists of nodes, pods and PDBs are in and the
  CRDs' objects are either listed or known to be unavailable (``/readyz`` then turns ready).
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from extender.cluster.interfaces import ClusterEvents
from extender.cluster.kube.client import ApiError, KubeClient
from extender.framework.resources import names_requested
from extender.metrics import Metrics

log = logging.getLogger(__name__)
_MALFORMED = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)
"""What an object the cache cannot take raises: skipped and counted, never a list that fails for
ever (every relist meets the object again) or a watch that reconnects on it."""

FREEZE_EVERY = 5000

PATHS = {"node": "/api/v1/nodes", "pod": "/api/v1/pods", "pdb": "/apis/policy/v1/poddisruptionbudgets",
         "podgroup": "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
         "elasticquota": "/apis/scheduling.x-k8s.io/v1alpha1/elasticquotas"}

OPTIONAL = frozenset({"podgroup", "elasticquota"})
"""Kinds served by a CRD that may not be installed (or readable): 404 / 403 is "unavailable"."""

CRD_RETRY_INTERVAL = 180.0

SHORT_WATCH = 1.0
"""Seconds: a watch that ends sooner with no event failed (client-go's "very short watch")."""


_POD_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
             "labels", "annotations", "ownerReferences")
_POD_SPEC = ("nodeName", "priority", "priorityClassName", "preemptionPolicy", "schedulerName", "schedulingGates",
             "terminationGracePeriodSeconds", "overhead", "nodeSelector", "affinity", "tolerations")
_CONTAINER = ("name", "resources", "restartPolicy")
_POD_STATUS = ("phase", "nominatedNodeName", "startTime")
_NODE_META = ("name", "uid", "resourceVersion", "creationTimestamp", "labels", "annotations")


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: obj[k] for k in keys if k in obj} if isinstance(obj, dict) else {}


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What scheduling reads of a pod (identity, labels and annotations, requests, priority,
    gates, nomination, phase); the rest (volumes, env, images, probes, conditions...) is dropped
    so 20,000 followed pods cost ~6 KB each instead of ~20 KB."""
    raw_spec = pod.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    out_spec = _pick(spec, _POD_SPEC)
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            out_spec[key] = [_pick(c, _CONTAINER) for c in spec[key]]
    return {"metadata": _pick(pod.get("metadata"), _POD_META), "spec": out_spec,
            "status": _pick(pod.get("status"), _POD_STATUS)}


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What scheduling reads of a node: identity, labels, annotations (device inventories),
    taints and unschedulable, allocatable and capacity (not images, conditions, addresses)."""
    raw_status = node.get("status")
    status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    return {"metadata": _pick(node.get("metadata"), _NODE_META),
            "spec": _pick(node.get("spec"), ("unschedulable", "taints")),
            "status": _pick(status, ("allocatable", "capacity"))}


class PodFilter:
    """Which pods the extender follows."""

    def __init__(self, managed_resources: Iterable[str], annotation_prefix: str, gate: str | None = None) -> None:
        self.managed = frozenset(managed_resources)
        self.prefix = annotation_prefix
        self.gate = gate

    def __call__(self, pod: Mapping[str, Any]) -> bool:
        if self.managed & names_requested(pod):
            return True
        meta = pod.get("metadata") or {}
        if any(k.startswith(self.prefix) for k in (meta.get("annotations") or {})):
            return True
        if self.gate:
            return any(g.get("name") == self.gate for g in ((pod.get("spec") or {}).get("schedulingGates") or []))
        return False


class KubeSource:
    def __init__(self, client: KubeClient, pod_filter: Callable[[Mapping[str, Any]], bool] | None, *,
                 metrics: Metrics | None = None, watch_timeout: int = 300, page_size: int = 500,
                 max_backoff: float = 30.0, crd_retry_interval: float = CRD_RETRY_INTERVAL,
                 trim: bool = True) -> None:
        """``pod_filter``: which pods to follow (None: every pod). ``trim``: deliver pods and
        nodes trimmed to what scheduling reads (False: as the API server sent them)."""
        self.client = client
        self.pod_filter = pod_filter
        self.trim = trim
        self.metrics = metrics
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.max_backoff = max_backoff
        self.crd_retry_interval = crd_retry_interval
        """Seconds between two lists of an unavailable optional kind (a CRD not installed)."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resolved: set[str] = set()
        """Kinds listed at least once, or optional kinds found unavailable: synced when all are."""
        self.unavailable: set[str] = set()
        """Optional kinds the cluster does not serve (or lets us read) right now."""
        self._lock = threading.Lock()
        self._known: dict[str, dict[str, Any]] = {kind: {} for kind in PATHS}
        self._streams: dict[str, Any] = {}
        """The open watch stream per kind."""
        self._opened: dict[str, bool] = {}
        """Per kind: the current watch attempt got its stream open (a break after it is a first
        failure)."""
        self._delivered: dict[str, int] = {}
        """Per kind: events the current watch attempt delivered."""
        self._sink: ClusterEvents | None = None
        self.last_resource_version: dict[str, str] = {}
        self._applied = 0

    # ---- life cycle -------------------------------------------------------------------------

    def start(self, sink: ClusterEvents) -> None:
        self._sink = sink
        for kind in PATHS:
            t = threading.Thread(target=self._run, args=(kind,), name=f"kube-source-{kind}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self, timeout: float | None = None) -> None:
        """Close the watches and wait for their threads, ``timeout`` seconds in all (default 5).
        A thread still in a list call then is a daemon: it ends with the call, delivering nothing."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a stream another thread reads may race
                pass
        deadline = time.monotonic() + (5.0 if timeout is None else timeout)
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def connected(self) -> bool:
        """Every kind is listed and watched now (optional kinds the cluster does not serve
        excepted): the cache misses nothing older than what is in flight on the streams."""
        with self._lock:
            return all(kind in self._streams or kind in self.unavailable for kind in PATHS)

    def wait_synced(self, timeout: float) -> bool:
        """For tests and benchmarks: block until the initial lists were delivered (optional kinds:
        or found unavailable)."""
        deadline = threading.Event()
        for _ in range(int(timeout * 20)):
            with self._lock:
                if self._resolved >= set(PATHS):
                    return True
            deadline.wait(0.05)
        return False

    # ---- the loop ---------------------------------------------------------------------------

    def _count(self, metric: str, kind: str, n: int = 1, **labels: str) -> None:
        if self.metrics is not None:
            getattr(self.metrics, metric).labels(kind=kind, **labels).inc(n)

    def _run(self, kind: str) -> None:
        """List, then watch from the list's resourceVersion; a watch that breaks resumes from the
        last resourceVersion it delivered (client-go's reflector), a relist only when the API
        server no longer has that far back (410). Failures back off exponentially (to
        ``max_backoff``); a break of a watch that was open is a first failure again. A watch that
        ends cleanly at once with no event is a failure (client-go's "very short watch"), and a
        410 right after a list backs off as well (until a watch delivers): no tight loop of
        watches or full lists against an API server that answers so."""
        rv = self.last_resource_version.get(kind, "")  # a restarted source resumes where it stopped
        failures = 0
        gone = 0  # 410s since a watch last delivered an event
        while not self._stop.is_set():
            self._opened[kind] = False
            self._delivered[kind] = 0
            listed = False
            try:
                if not rv:
                    listed = True  # a 410 of the list itself (its continue token expired) backs off too
                    rv = self._relist(kind)
                    if self._stop.is_set():
                        return
                rv = self._watch(kind, rv)
                failures = 0
                if self._delivered[kind]:
                    gone = 0
            except ApiError as exc:
                if self._stop.is_set():
                    return
                if self._opened[kind]:
                    failures = 0  # the watch worked: this break is a first failure
                if self._delivered[kind]:
                    gone = 0
                if kind in OPTIONAL and exc.status in (403, 404):
                    self._unavailable(kind, exc)
                    rv = ""
                    failures = 0
                    self._stop.wait(self.crd_retry_interval)
                    continue
                if exc.status == 410:
                    log.info("watch expired, relisting", extra={"kind": kind})
                    self._count("relists", kind)
                    rv = ""
                    if listed:  # gone again right after a list: the API server's watch cache lags
                        gone += 1
                        self._backoff(kind, gone, exc)
                    continue
                rv = self._resume(kind, rv)
                failures += 1
                self._backoff(kind, failures, exc)
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything
                if self._stop.is_set():
                    return
                rv = self._resume(kind, rv)
                failures = 0 if self._opened[kind] else failures
                failures += 1
                self._backoff(kind, failures, exc)

    def _resume(self, kind: str, rv: str) -> str:
        """Where to watch from after a failure: the last resourceVersion delivered, when the list
        before it was whole (``rv`` set); else list again."""
        return self.last_resource_version.get(kind, rv) if rv else ""

    def _unavailable(self, kind: str, exc: ApiError) -> None:
        """An optional kind is not served (404: CRD not installed) or not readable (403): forget
        what was known of it, log once, count as resolved for the initial sync."""
        for key in list(self._known[kind]):
            self._apply(kind, "DELETED", self._known[kind][key])
        self.last_resource_version.pop(kind, None)
        with self._lock:
            first = kind not in self.unavailable
            self.unavailable.add(kind)
        if first:
            why = "not installed" if exc.status == 404 else "forbidden (RBAC)"
            log.info("not served by the cluster, checking again periodically",
                     extra={"kind": kind, "path": PATHS[kind], "reason": why, "status": exc.status,
                            "retry_every_s": self.crd_retry_interval})
        self._resolve(kind)

    def _resolve(self, kind: str) -> None:
        with self._lock:
            first = kind not in self._resolved
            self._resolved.add(kind)
            synced = self._resolved >= set(PATHS)
        if first and synced and self._sink is not None:
            self._sink.mark_synced()

    def _backoff(self, kind: str, failures: int, exc: BaseException) -> None:
        delay = min(self.max_backoff, 0.5 * 2 ** (failures - 1)) * (0.8 + 0.4 * random.random())
        log.warning("watch failed, reconnecting", extra={"kind": kind, "error": str(exc), "retry_in_s": round(delay, 2)})
        self._count("reconnects", kind)
        self._stop.wait(delay)

    def _relist(self, kind: str) -> str:
        """List page by page, applying each page before fetching the next (150,000 pods are never
        all in memory at once), with the cyclic garbage collector paused: decoded JSON has no
        cycles, and rescanning a growing heap took most of the sync's CPU."""
        seen: set[str] = set()
        rv = ""
        listed = 0
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for page, rv in self.client.list_pages(PATHS[kind], page_size=self.page_size):
                if self._stop.is_set():
                    return ""  # stopped while the page was on its way: deliver nothing
                listed += len(page)
                for obj in page:
                    key = self._apply(kind, "ADDED", obj)
                    if key:
                        seen.add(key)
        finally:
            if gc_was_enabled:
                gc.enable()
        for key in [k for k in self._known[kind] if k not in seen]:
            self._apply(kind, "DELETED", self._known[kind][key])
        with self._lock:
            came_back = kind in self.unavailable
            self.unavailable.discard(kind)
        if came_back:
            log.info("now served by the cluster, following it", extra={"kind": kind, "path": PATHS[kind]})
        self._resolve(kind)
        gc.collect()  # nothing cyclic gets frozen; the scan covers only what is not frozen yet
        gc.freeze()  # what was just listed lives as long as the process: keep collections off it
        log.info("listed", extra={"kind": kind, "items": listed, "kept": len(self._known[kind]),
                                  "resource_version": rv})
        self.last_resource_version[kind] = rv
        return rv

    def _watch(self, kind: str, rv: str) -> str:
        """Watch from ``rv`` until the stream ends; the last resourceVersion delivered. A stream
        that ends within ``SHORT_WATCH`` seconds with no event raises (client-go's "very short
        watch"): the loop backs off instead of opening the next one at once."""
        began = time.monotonic()  # before the call, as client-go times a watch
        stream = self.client.watch(PATHS[kind], resource_version=rv, timeout_seconds=self.watch_timeout)
        with self._lock:
            if self._stop.is_set():  # stop() closed the streams it knew before this one opened
                stream.close()
                return rv
            self._streams[kind] = stream
        self._opened[kind] = True
        events = 0
        try:
            for event in iter(stream):
                if self._stop.is_set():
                    break
                etype = event.get("type")
                obj = event.get("object") or {}
                if etype == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if not events and time.monotonic() - began < SHORT_WATCH:
                        self._opened[kind] = False  # refused at once, in the stream: no watch that worked
                    raise ApiError(int(code or 500), str(obj.get("message", "watch error")), str(obj.get("reason", "")))
                events += 1  # delivered (an ERROR - a 410 in a 200 stream - is no delivery)
                self._delivered[kind] = events
                new_rv = ((obj.get("metadata") or {}).get("resourceVersion")) if isinstance(obj, dict) else None
                if new_rv:
                    rv = str(new_rv)
                    self.last_resource_version[kind] = rv
                if etype == "BOOKMARK":
                    continue
                self._count("watch_events", kind, type=str(etype))
                self._apply(kind, str(etype), obj)
                self._applied += 1
                if self._applied % FREEZE_EVERY == 0:
                    # cached objects are acyclic dicts that refcounting frees; keep the cyclic
                    # collector from rescanning the growing cache (full collections stalled
                    # verbs for up to 1.6 s at 20,000 followed pods). Collect first, so no cyclic
                    # garbage is frozen; that scan covers only what came since the last freeze.
                    gc.collect()
                    gc.freeze()
        finally:
            with self._lock:
                self._streams.pop(kind, None)
            stream.close()
        if not events and not self._stop.is_set() and time.monotonic() - began < SHORT_WATCH:
            self._opened[kind] = False  # ended cleanly at once: no more a watch that worked than one refused
            raise ApiError(0, "very short watch: the stream ended at once with no event")
        return rv

    def _apply(self, kind: str, etype: str, obj: Any) -> str | None:
        """Deliver one object to the sink; returns its key if the extender follows it."""
        sink = self._sink
        if sink is None or not isinstance(obj, dict):
            return None
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            return None
        name = meta.get("name")
        if not isinstance(name, str):
            self._count("skipped", kind)
            return None
        key = name if kind == "node" else f"{meta.get('namespace') or 'default'}/{name}"
        if kind in OPTIONAL:
            return self._apply_custom(sink, kind, etype, key, obj, meta)
        if kind == "pdb":
            if etype == "DELETED":
                self._known[kind].pop(key, None)
                sink.remove_pdb(obj)
                return None
            sink.upsert_pdb({"metadata": _pick(meta, ("name", "namespace")), "spec": obj.get("spec") or {},
                             "status": obj.get("status") or {}})
            self._known[kind][key] = {"metadata": _pick(meta, ("name", "namespace"))}
            return key
        known = self._known[kind]
        try:
            if etype == "DELETED":
                if key in known:
                    del known[key]
                    if kind == "node":
                        sink.remove_node(name)
                    else:
                        sink.remove_pod(obj)
                return None
            previous = known.get(key)
            if kind == "pod" and previous is not None and previous["metadata"].get("uid") != meta.get("uid"):
                # deleted and re-created under the same name while the watch was away
                del known[key]
                sink.remove_pod(previous)
            if kind == "node":
                sink.upsert_node(trim_node(obj) if self.trim else obj)
            elif self.pod_filter is None or self.pod_filter(obj):
                sink.upsert_pod(trim_pod(obj) if self.trim else obj)
            else:
                if key in known:  # stopped mattering (rare: annotations removed)
                    del known[key]
                    sink.remove_pod(obj)
                return None
            stub: dict[str, Any] = {"metadata": {"name": name, "namespace": meta.get("namespace"), "uid": meta.get("uid")}}
            node_name = (obj.get("spec") or {}).get("nodeName") if kind == "pod" else None
            if node_name:  # a deletion a relist finds says where the pod was (DeletedFinalStateUnknown)
                stub["spec"] = {"nodeName": node_name}
            known[key] = stub
            return key
        except _MALFORMED as exc:
            self._count("skipped", kind)
            log.warning("skipping malformed object", extra={"kind": kind, "object": key, "error": str(exc)})
            return None

    def _apply_custom(self, sink: ClusterEvents, kind: str, etype: str, key: str, obj: dict[str, Any],
                      meta: dict[str, Any]) -> str | None:
        """A PodGroup or an ElasticQuota: the cache trims it and judges its spec."""
        known = self._known[kind]
        upsert, remove = ((sink.upsert_pod_group, sink.remove_pod_group) if kind == "podgroup"
                          else (sink.upsert_elastic_quota, sink.remove_elastic_quota))
        try:
            if etype == "DELETED":
                if known.pop(key, None) is not None:
                    remove(obj)
                return None
            upsert(obj)
        except _MALFORMED as exc:
            self._count("skipped", kind)
            log.warning("skipping malformed object", extra={"kind": kind, "object": key, "error": str(exc)})
            return None
        known[key] = {"metadata": _pick(meta, ("name", "namespace", "uid"))}
        return key
