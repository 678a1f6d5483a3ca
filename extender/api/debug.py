"""The probes, the metrics and the debug views: what an operator reads, never kube-scheduler.

* ``/healthz`` (the process answers), ``/readyz`` (synced, and leading when leader election is on);
* ``/metrics`` (Prometheus text);
* ``/debug/snapshot[?node=NAME]``, ``/debug/pods/<namespace>/<name>[?max=N]``, ``/debug/queue``,
  ``/debug/config``: the cache, one pod's verdicts, the queue and the effective configuration,
  as JSON. An unknown node or pod is a 404 naming it.
* ``/debug/quota``: per namespace with a quota, per resource, min, max, used, borrowed, lent and
  pending demand (from the profiles' quota plugins, e.g. CapacityQuota; the same numbers are the
  ``kube_extender_quota_*`` gauges). A pending pod's ``/debug/pods`` view says why it does not fit
  its quota (``quota``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from flask import Flask, Response, request

from extender.api.replies import error_payload, json_response
from extender.framework.interfaces import CapacityReporter, QuotaReporter
from extender.framework.resources import format_milli
from extender.metrics import Metrics
from extender.runtime.engine import Engine
from extender.runtime.framework import _crash


class ReporterFailed(Exception):
    """A plugin's reporter hook (``quota_report``) raised; the message names the plugin."""


def failed(plugin: Any, hook: str, exc: Exception) -> str:
    """Log a reporter hook's exception and say which plugin failed where - the runtime's message
    for a plugin failing at an extension point."""
    return _crash(getattr(plugin, "name", type(plugin).__name__), hook, exc).message


def register_debug(app: Flask, engine: Engine, metrics: Metrics, ready: Callable[[], tuple[bool, str]],
                   describe: Callable[[], Mapping[str, Any]]) -> None:
    """The probes, ``/metrics`` and the debug views of ``app``."""

    @app.get("/healthz")
    def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        is_ready, why = ready()
        return json_response({"ready": is_ready, "reason": why}, 200 if is_ready else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), mimetype="text/plain; version=0.0.4")

    reporters: list[CapacityReporter] = []
    quota_plugins: list[QuotaReporter] = []
    for fw in sorted(engine.frameworks.values(), key=lambda f: f.profile_name != engine.default_profile):
        reporters += [p for p in fw.filter_plugins if isinstance(p, CapacityReporter) and p not in reporters]
        quota_plugins += [p for p in fw.filter_plugins if isinstance(p, QuotaReporter) and p not in quota_plugins]

    def quota_report() -> dict[str, Any]:
        """The first quota plugin's report (profiles share the cluster, so one is enough). Raises
        ``ReporterFailed`` naming the plugin when its ``quota_report`` raises."""
        if not quota_plugins:
            return {}
        plugin = quota_plugins[0]
        try:
            return dict(plugin.quota_report())
        except Exception as exc:  # noqa: BLE001 - a plugin's bug: named, never a bare 500 or a dead /metrics
            raise ReporterFailed(failed(plugin, "quota_report", exc)) from exc

    if quota_plugins:
        metrics.watch_quotas(quota_report)

    def node_view(info: Any) -> dict[str, Any]:
        """One node of /debug/snapshot: the managed resources its status advertises, overridden by
        what plugins account themselves (devices), per device too."""
        totals = {r: (v, info.requested.get(r, 0)) for r, v in info.allocatable.items()}
        totals.update({r: (0, v) for r, v in info.requested.items() if r not in totals})
        devices: list[dict[str, Any]] = []
        for plugin in reporters:
            try:
                capacity = plugin.node_capacity(info)
            except Exception as exc:  # noqa: BLE001 - a plugin's bug: the view says so, the others stand
                devices.append({"plugin": plugin.name, "error": failed(plugin, "node_capacity", exc)})
                continue
            if capacity is not None:
                totals.update(capacity.resources)
                devices.append({"plugin": plugin.name, "source": capacity.source,
                                "resources": sorted(capacity.resources), "devices": list(capacity.devices)})
        view: dict[str, Any] = {
            "name": info.name,
            "allocatable": {r: format_milli(t) for r, (t, _) in totals.items()},
            "allocated": {r: format_milli(u) for r, (_, u) in totals.items()},
            "free": {r: format_milli(t - u) for r, (t, u) in totals.items()},
            "pods": [{"pod": p.key, "uid": p.uid, "priority": p.priority, "assumed": engine.cache.is_assumed(p.uid),
                      "requests": {r: format_milli(v) for r, v in p.requests.items()}}
                     for p in sorted(info.pods.values(), key=lambda p: p.key)],
        }
        if devices:
            view["devices"] = devices
        return view

    @app.get("/debug/snapshot")
    def debug_snapshot() -> Response:
        snap = engine.cache.snapshot()
        only = request.args.get("node")
        if only is not None and snap.get(only) is None:
            return json_response({"error": "not found", "node": only,
                                  "message": f"the extender has no node named {only!r}"}, 404)
        if only is not None:
            nodes = [node_view(snap.get(only))]
        else:  # nodes with nothing managed are left out of the full listing
            nodes = [v for v in (node_view(n) for n in sorted(snap, key=lambda n: n.name)) if v["allocatable"]]
        return json_response({"generation": snap.generation, "nodeCount": len(snap),
                              "managedResources": sorted(engine.handle.managed_resources),
                              "sizes": engine.cache.sizes(), "nodes": nodes})

    @app.get("/debug/pods/<namespace>/<name>")
    def debug_pod(namespace: str, name: str) -> Response:
        key = f"{namespace}/{name}"
        verdicts = engine.explain.get(key)
        pending = engine.cache.pending_pod(namespace, name)
        if verdicts is None and pending is None:
            return json_response(error_payload("not found", f"the extender has no record of pod {key}"), 404)
        body: dict[str, Any] = {"pod": key, "state": "pending" if pending is not None else "unknown"}
        uids = {v.uid for v in (verdicts or {}).values()} | ({pending.uid} if pending else set())
        # a pod created again under this name: the latest one's verdicts only (the pending pod's;
        # else the one last answered for - the extender may count an old one still)
        current = pending.uid if pending is not None else (
            max(verdicts.values(), key=lambda v: v.at).uid if verdicts else None)
        if current is not None and verdicts:
            verdicts = {verb: v for verb, v in verdicts.items() if v.uid == current}
            uids = {current}
        for uid in uids:
            placed = engine.cache.pod(uid)
            if placed is not None:
                body["state"] = "assumed" if engine.cache.is_assumed(uid) else "bound"
                body["node"] = placed.node_name
        text = request.args.get("max", "")
        max_nodes = int(text) if text.isascii() and text.isdigit() and len(text) < 10 else 200
        body["verdicts"] = {verb: v.as_dict(max_nodes) for verb, v in (verdicts or {}).items()}
        if pending is not None and quota_plugins:
            try:
                body["quota"] = quota_plugins[0].quota_verdict(pending) or "within its namespace's quota"
            except Exception as exc:  # noqa: BLE001 - a plugin's bug: named in the answer
                body["quota"] = failed(quota_plugins[0], "quota_verdict", exc)
        return json_response(body)

    @app.get("/debug/quota")
    def debug_quota() -> Response:
        def amount(v: int | None) -> str | None:
            return None if v is None else format_milli(v)
        try:
            report = quota_report()
        except ReporterFailed as exc:
            return json_response(error_payload("internal error", str(exc)), 500)
        return json_response({"enabled": bool(quota_plugins), "namespaces": {
            ns: {r: {k: amount(v) for k, v in values.items()} for r, values in per.items()}
            for ns, per in report.items()}})

    @app.get("/debug/queue")
    def debug_queue() -> Response:
        return json_response(engine.queue_state())

    @app.get("/debug/config")
    def debug_config() -> Response:
        return json_response(describe())
