"""A fake Kubernetes API server for tests, speaking real HTTP to the official ``kubernetes`` client.

Standard library only (``http.server`` + threads), plus ``pyyaml`` for kubeconfig/YAML seeding
and ``orjson`` when importable. Start it in-process, point a client at it::

    from extender.testing.fakeapi import FakeApiServer
    from kubernetes import client, watch

    with FakeApiServer() as api:                       # 127.0.0.1, random port
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        v1 = client.CoreV1Api(api.api_client())        # or load_kube_config(api.kubeconfig(path))
        pods = v1.list_namespaced_pod("default")
        for ev in watch.Watch().stream(v1.list_namespaced_pod, "default",
                                       resource_version=pods.metadata.resource_version):
            ...

Pytest fixtures (``api``, ``core``, ``collectors``, ...) and a threaded watch collector live in
:mod:`extender.testing.fakeapi.fixtures` (import them into a test module; not imported here so the
package does not depend on pytest). :mod:`extender.testing.fakeapi.builders` makes seed objects.

Emulated (faithfully, because clients depend on it)
----------------------------------------------------
* Resources: core/v1 ``pods`` (+ ``status``, ``binding``, ``eviction``), ``nodes`` (+status),
  ``namespaces``, ``configmaps``, ``events``; ``events.k8s.io/v1`` events;
  ``coordination.k8s.io/v1`` leases; ``policy/v1`` poddisruptionbudgets (+status);
  ``scheduling.k8s.io/v1`` priorityclasses; CRDs ``scheduling.x-k8s.io/v1alpha1`` podgroups and
  elasticquotas (+status), served only when enabled (``crds=("podgroups",)``, the default; ``crds=()`` -> 404 + absent from
  discovery, like a cluster without the CRD). Discovery (``/api``, ``/apis``, ...), ``/version``,
  ``/healthz``.
* One global, monotonically increasing resourceVersion for every write; ``uid``,
  ``creationTimestamp``, ``generation`` (bumped on non-metadata/status changes); no-op writes do
  not bump the rv nor emit events. Responses carry ``kind``/``apiVersion`` (list items of built-in
  types don't, exactly like the real server).
* list with ``labelSelector`` (=, ==, !=, in, notin, exists, !key, gt/lt), ``fieldSelector``
  (metadata.name, metadata.namespace, spec.nodeName — ``spec.nodeName=`` = unscheduled —,
  status.phase, spec.schedulerName, ... ; unsupported fields are 400 like the real server),
  ``limit``/``continue`` (items in (namespace, name) order; all pages report the first page's
  resourceVersion; a token older than the compaction horizon is 410).
* watch (``?watch=true``, ``/watch/`` paths): chunked JSON lines; resume from a resourceVersion
  replays every later event from a bounded history (``history=`` events); too old -> an
  ``ERROR`` event with a 410 ``Expired`` Status, then the stream ends (what the real watch cache
  does); no/"0" resourceVersion -> synthetic ADDED for current objects first;
  ``sendInitialEvents=true`` -> ADDED + a BOOKMARK annotated ``k8s.io/initial-events-end``;
  ``allowWatchBookmarks`` -> periodic BOOKMARKs; ``timeoutSeconds``. Selectors apply to watches
  with watch-cache semantics: an object that stops matching yields DELETED to that watcher, one
  that starts matching yields ADDED (so a ``spec.nodeName=`` watch sees DELETED on bind).
* create (201, 409 AlreadyExists, ``generateName``, "resourceVersion should not be set" 500),
  replace (409 Conflict on stale ``metadata.resourceVersion``; CRDs require it), patch (JSON merge,
  strategic merge with the merge keys of the built-in types, JSON patch; a patch that sets
  ``metadata.resourceVersion`` is a precondition -> 409; strategic merge on a CRD -> 415),
  ``/status`` subresources (main-resource writes keep the stored status), delete (DeleteOptions
  ``preconditions.uid``/``resourceVersion`` -> 409; finalizers -> deletionTimestamp first;
  returns the object), deletecollection, dryRun=All.
* Pod admission/validation: defaults (schedulerName, restartPolicy, priority via PriorityClass,
  default not-ready/unreachable tolerations, qosClass, ``status.phase=Pending``), spec
  immutability on update except the fields the real server allows (schedulingGates may only be
  removed; nodeName only via binding).
* ``pods/binding`` and ``bindings``: sets nodeName + PodScheduled condition, copies binding
  annotations; 409 when already bound / being deleted / still gated / UID or resourceVersion
  precondition fails; 404 when the pod is missing; answers ``201`` + ``Status`` Success.
  (The python client's ``create_namespaced_binding`` cannot deserialize that Status into a
  ``V1Binding``; call it with ``_preload_content=False``.)
* ``pods/eviction`` (policy/v1 Eviction): PDBs in the pod's namespace whose selector matches;
  ``minAvailable``/``maxUnavailable`` (ints or percentages, rounded up) over non-terminal
  matching pods; healthy = Running, not being deleted, Ready (no Ready condition counts as
  ready). Violations -> 429 ``TooManyRequests`` "Cannot evict pod as it would violate the pod's
  disruption budget."; more than one PDB -> 500; Pending/terminal pods are evicted regardless;
  ``unhealthyPodEvictionPolicy`` honoured. Success deletes with the eviction's DeleteOptions and
  answers 201 Status Success; like the real eviction REST it records the pod in the PDB's
  ``status.disruptedPods`` (and decrements ``disruptionsAllowed``). Recorded pods count as
  expected-but-unhealthy until :meth:`FakeApiServer.sync_pdb_status` (an instant disruption
  controller, the only other writer of PDB status) sees they are gone — so a bare-pod budget
  behaves like one over a workload whose controller is recreating the evicted replica.
* Leases: create/get/replace with optimistic concurrency (409 on stale resourceVersion);
  MicroTime fields parsed strictly (RFC 3339 with zone) and canonicalized.
* Errors are ``Status`` objects with the real reasons/codes; malformed bodies are 400.

Test instruments (not part of a real server)
--------------------------------------------
* Faults (:mod:`.faults`): failing or disconnecting requests, latency, and watch delivery delays
  per client (``delay_watches("kube-scheduler", 0.3)``: that client's watches run 300 ms behind).
* The request log (:meth:`FakeApiServer.requests`, :meth:`FakeApiServer.request_counts`): every
  request with its ``User-Agent``, Kubernetes verb and resource, and the client's address (the
  connection it came over).
* Commit hooks (:meth:`FakeApiServer.on_commit`): every committed write, synchronously, before
  any watcher sees it (for invariant checkers).

Not emulated (documented divergences)
-------------------------------------
* Authentication/authorization, TLS, protobuf/CBOR, server-side apply (415), managedFields,
  aggregated discovery, OpenAPI, strict field validation (unknown fields are kept), most
  per-field validation, ServiceAccount/LimitRanger/ResourceQuota/NamespaceLifecycle admission
  (objects may be created in namespaces that do not exist), garbage collection / ownerReference
  cascades, the disruption controller's continuous status updates, kubelet behaviour.
* ``resourceVersion``/``resourceVersionMatch`` on list are accepted but lists always serve the
  latest state; continue pages serve the current state after the last key (not an MVCC snapshot).
* Core and ``events.k8s.io`` Events are stored separately (not two views of one object).
* Pods are deleted immediately regardless of grace period, unless the server is built with
  ``graceful_pod_deletion=True``: then a bound, non-terminal pod gets ``deletionTimestamp`` +
  ``deletionGracePeriodSeconds`` and an emulated kubelet removes it after the grace period
  (times ``grace_period_scale``).
* Watch of a resourceVersion in the future starts from it without the real server's
  "too large resource version" wait.
"""

from __future__ import annotations

from . import builders
from .errors import ApiError
from .faults import FailureRule, FaultInjector, LatencyRule, RequestRecord, WatchDelayRule
from .patch import json_patch, merge_patch, strategic_merge_patch
from .resources import (
    BUILTIN_TYPES,
    CONFIGMAPS,
    EVENTS,
    EVENTS_V1,
    KNOWN_CRDS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODGROUPS,
    ELASTICQUOTAS,
    PODS,
    PRIORITY_CLASSES,
    ResourceType,
)
from .selector import parse_field_selector, parse_label_selector
from .server import FakeApiServer
from .store import Store

__all__ = [
    "FakeApiServer",
    "builders",
    "Store",
    "ApiError",
    "RequestRecord",
    "FailureRule",
    "LatencyRule",
    "WatchDelayRule",
    "FaultInjector",
    "ResourceType",
    "BUILTIN_TYPES",
    "KNOWN_CRDS",
    "PODS",
    "NODES",
    "NAMESPACES",
    "CONFIGMAPS",
    "EVENTS",
    "EVENTS_V1",
    "LEASES",
    "PDBS",
    "PRIORITY_CLASSES",
    "PODGROUPS",
    "ELASTICQUOTAS",
    "merge_patch",
    "strategic_merge_patch",
    "json_patch",
    "parse_label_selector",
    "parse_field_selector",
]
