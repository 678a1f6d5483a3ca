"""HTTP routes: the four verbs under the configured prefix, health, metrics and debug endpoints.

Failure handling per verb, as kube-scheduler reads it:

* malformed input -> HTTP 400 with ``{"error": ..., "problems": [...]}`` (never a 500);
* filter / bind internal failure -> HTTP 200 with the failure in ``Error``;
* prioritize / preempt internal failure -> HTTP 500 (they have no error field), logged at ERROR
  and counted in ``kube_extender_internal_errors_total`` because kube-scheduler drops it silently.

Every JSON answer is pretty-printed when the query string has ``?pretty``.
"""

from __future__ import annotations

import io
import logging
import time
from http import HTTPStatus
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import orjson
from flask import Flask, Response, request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender.api import schemas, wire
from extender.framework.interfaces import CapacityReporter
from extender.framework.resources import format_milli
from extender.metrics import Metrics
from extender.runtime.engine import Engine, InvalidRequest

log = logging.getLogger("extender.api")

_FILTER_ARGS = schemas.ExtenderArgsSchema()
_PREEMPT_ARGS = schemas.ExtenderPreemptionArgsSchema()
_BIND_ARGS = schemas.ExtenderBindingArgsSchema()


def json_response(payload: Any, status: int = 200) -> Response:
    option = orjson.OPT_INDENT_2 if "pretty" in request.args else 0
    return Response(orjson.dumps(payload, option=option), status=status, mimetype="application/json")


@dataclass
class ApiSettings:
    path_prefix: str
    verbs: Mapping[str, str]
    """verb kind (filter, prioritize, preempt, bind) -> URL path segment."""
    ready: Callable[[], tuple[bool, str]]
    describe: Callable[[], Mapping[str, Any]] = field(default=lambda: {})
    serving: Callable[[], bool] = field(default=lambda: True)
    """False on a follower: the verbs answer 503 (only the leader decides)."""


def _pod_label(body: Any) -> str:
    pod = body.get("Pod") if isinstance(body, dict) else None
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict):
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    if isinstance(body, dict) and "PodName" in body:
        return f"{body.get('PodNamespace') or 'default'}/{body.get('PodName')}"
    return "-"


_REASONS = {s.value: s.phrase for s in HTTPStatus}

Record = Callable[[], None]
"""Logs and counts one answered request (its duration already measured); called once."""

Answer = tuple[int, Any, Record]
"""A verb handler's result: HTTP status, reply payload, and the request's Record."""


class HotVerbs:
    """WSGI middleware answering filter and prioritize - kube-scheduler's serial, latency-critical
    calls - and bind (one per pod) with the very handlers the Flask views use, minus Flask's
    per-request machinery (~0.3 ms). Only the plain case is taken: POST, no query string, a
    Content-Length within the limit and a body as long as it says, this replica serving. Anything
    else, and any request the handler refuses as bad, goes to the Flask app unchanged (with the
    body it already read), which answers exactly as before. A handler raises only before it acts
    (bind reports the engine's failures in its reply), so no request is acted on twice.

    ``respond`` is the same decision for a server that reads requests itself (the gevent
    worker's fast lane, ``extender.api.fastlane``)."""

    def __init__(self, app: Callable[..., Any], routes: Mapping[str, Callable[[bytes], Answer]],
                 serving: Callable[[], bool], limit: int) -> None:
        self.app = app
        self.routes = dict(routes)
        self.serving = serving
        self.limit = limit

    def respond(self, path: str, body: bytes) -> tuple[int, bytes, Record] | None:
        """The answer to a plain POST of ``body`` to ``path``: status, JSON reply bytes and the
        request's Record (call it once the reply is on its way); None when the Flask app must
        answer instead (not a hot path, not serving, bad input, any failure)."""
        handler = self.routes.get(path)
        if handler is None or not self.serving():
            return None
        try:
            status, payload, record = handler(body)
            return status, orjson.dumps(payload), record
        except Exception:  # noqa: BLE001 - bad input and surprises: the Flask app answers them
            return None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if path not in self.routes or environ.get("REQUEST_METHOD") != "POST" or environ.get("QUERY_STRING") \
                or length <= 0 or (self.limit and length > self.limit):
            return self._app(environ, start_response, length)
        body = environ["wsgi.input"].read(length)
        answer = self.respond(path, body) if len(body) == length else None  # short: the client stopped
        if answer is None:
            environ["wsgi.input"] = io.BytesIO(body)
            return self.app(environ, start_response)
        status, data, record = answer
        record()
        start_response(f"{status} {_REASONS[status]}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any], length: int) -> Any:
        """The Flask app's answer; then what it left unread of a body of ``length`` bytes
        within the limit (a 404 or 405 reads none of it) is read and dropped before the answer
        goes out: gunicorn's gthread worker reads at most 64 KiB of it before the next request
        and otherwise closes the connection it had just answered with keep-alive. A chunked
        body, or one announced over the limit, is not read: the worker closes those
        connections, and says so (``extender.api.workers``)."""
        if not (self.limit and 0 < length <= self.limit):
            return self.app(environ, start_response)
        body = environ["wsgi.input"] = _Body(environ["wsgi.input"], length)
        answer = self.app(environ, start_response)
        try:
            while body.read(1 << 16):
                pass
        except Exception:  # noqa: BLE001 - a body that cannot be read (the client left) ends here
            pass
        return answer


class _Body:
    """A request body stream read no further than its Content-Length (a WSGI server need not
    bound it: werkzeug's development server hands over the connection itself)."""

    def __init__(self, stream: Any, length: int) -> None:
        self._stream = stream
        self._left = length

    def _take(self, data: bytes) -> bytes:
        self._left -= len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        return self._take(self._stream.read(size)) if size else b""

    def readline(self, size: int | None = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        return self._take(self._stream.readline(size)) if size else b""

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


def register(app: Flask, engine: Engine, metrics: Metrics, settings: ApiSettings) -> None:
    prefix = settings.path_prefix.rstrip("/")
    # A path with a doubled slash is a 404 naming it, not an HTML redirect to the path without
    # (kube-scheduler only sends one when a verb is configured with a leading slash).
    app.url_map.merge_slashes = False

    def read_body() -> bytes:
        """The request body. Werkzeug stops silently at MAX_CONTENT_LENGTH when there is no
        Content-Length (a chunked upload): a body that reaches the limit is too large, not
        truncated JSON. A body that did not arrive as framed - its chunked framing broke, or the
        client stopped sending before its Content-Length (gunicorn hands over what came) - is a
        bad request, not an internal error nor a shorter request."""
        try:
            data = request.get_data()
        except ParseException as exc:
            raise wire.BadRequest(f"request body could not be read: {type(exc).__name__}: {exc}") from exc
        limit = app.config.get("MAX_CONTENT_LENGTH")
        if request.content_length is None and limit and len(data) >= limit:
            raise RequestEntityTooLarge()
        if request.content_length is not None and len(data) < request.content_length:
            raise wire.BadRequest(f"request body ended after {len(data)} of the {request.content_length} bytes "
                                  "its Content-Length announced")
        return data

    def finish(verb: str, started: float, pod: str, nodes: int, outcome: str, **fields: Any) -> Record:
        """The Record of one request, its duration measured now: when called, one log line and the
        metrics. ``outcome`` is a small fixed set (it is a metric label): ok, feasible,
        unschedulable, candidates, none, bound, error."""
        seconds = time.perf_counter() - started

        def record() -> None:
            metrics.requests.labels(verb, outcome).inc()
            metrics.request_duration.labels(verb).observe(seconds)
            log.info("request", extra={"verb": verb, "pod": pod, "nodes": nodes, "outcome": outcome, **fields,
                                       "duration_ms": round(seconds * 1000, 3)})
        return record

    def internal(verb: str, exc: BaseException, pod: str) -> None:
        metrics.internal_errors.labels(verb).inc()
        log.error("internal error", exc_info=exc, extra={"verb": verb, "pod": pod})

    Reply = tuple[int, Any]

    def attempt(verb: str, t0: float, pod: str, size: int, call: Callable[[], Any],
                on_failure: Callable[[Exception], Reply]) -> tuple[Any, Answer | None]:
        """Run the engine; a bad request becomes 400, an internal failure is logged, counted and
        answered by ``on_failure`` (filter: ``Error``; prioritize and preempt: HTTP 500)."""
        try:
            return call(), None
        except InvalidRequest as exc:
            raise wire.BadRequest(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - never a crash; see on_failure
            internal(verb, exc, pod)
            return None, (*on_failure(exc), finish(verb, t0, pod, size, "error"))

    def http_500(verb: str) -> Callable[[Exception], Reply]:
        return lambda exc: (500, {"error": f"{verb} failed: {type(exc).__name__}: {exc}"})

    def do_filter(body: bytes) -> Answer:
        t0 = time.perf_counter()
        args = wire.load_extender_args(_FILTER_ARGS, wire.decode(body))
        names = wire.node_names_of(args)
        pod = _pod_label(args)
        outcome, failed = attempt("filter", t0, pod, len(names), lambda: engine.filter(args["Pod"], names),
                                  lambda exc: (200, wire.filter_error(f"internal error: {type(exc).__name__}: {exc}")))
        if failed is not None:
            return failed
        record = finish("filter", t0, pod, len(names), "error" if outcome.error else
                        ("feasible" if outcome.feasible else "unschedulable"), feasible=len(outcome.feasible))
        return 200, wire.filter_reply(args, outcome), record

    def do_prioritize(body: bytes) -> Answer:
        t0 = time.perf_counter()
        args = wire.load_extender_args(_FILTER_ARGS, wire.decode(body))
        names = wire.node_names_of(args)
        pod = _pod_label(args)
        scores, failed = attempt("prioritize", t0, pod, len(names), lambda: engine.prioritize(args["Pod"], names),
                                 http_500("prioritize"))
        if failed is not None:
            return failed
        return 200, wire.prioritize_reply(scores), finish("prioritize", t0, pod, len(names), "ok")

    def do_preempt(body: bytes) -> Answer:
        t0 = time.perf_counter()
        args = wire.load(_PREEMPT_ARGS, wire.decode(body))
        candidates = wire.preempt_candidates(args)
        pod = _pod_label(args)
        decisions, failed = attempt("preempt", t0, pod, len(candidates),
                                    lambda: engine.preempt(args["Pod"], candidates), http_500("preempt"))
        if failed is not None:
            return failed
        return 200, wire.preempt_reply(decisions), finish("preempt", t0, pod, len(candidates),
                                                          "candidates" if decisions else "none", kept=len(decisions))

    def view(handler: Callable[[bytes], Answer]) -> Callable[[], Response]:
        def run() -> Response:
            status, payload, record = handler(read_body())
            record()
            return json_response(payload, status)
        return run

    verb_filter, verb_prioritize, verb_preempt = view(do_filter), view(do_prioritize), view(do_preempt)

    def do_bind(body: bytes) -> Answer:
        """Never raises once the engine has acted: its failures are the reply's ``Error``."""
        t0 = time.perf_counter()
        args = wire.load(_BIND_ARGS, wire.decode(body))
        pod = f"{args['PodNamespace'] or 'default'}/{args['PodName']}"
        try:
            error = engine.bind(args["PodNamespace"] or "default", args["PodName"], args["PodUID"], args["Node"])
        except Exception as exc:  # noqa: BLE001 - reported in Error: kube-scheduler backs off
            internal("bind", exc, pod)
            error = f"internal error: {type(exc).__name__}: {exc}"
        done = finish("bind", t0, pod, 1, "bound" if not error else "error")

        def record() -> None:
            done()
            if error:
                log.warning("bind refused", extra={"pod": pod, "node": args["Node"], "error": error})
        return 200, wire.bind_reply(error), record

    verb_bind = view(do_bind)

    handlers = {"filter": verb_filter, "prioritize": verb_prioritize, "preempt": verb_preempt, "bind": verb_bind}

    def leader_only(kind: str, handler: Callable[[], Response]) -> Callable[[], Response]:
        def guarded() -> Response:
            if not settings.serving():
                metrics.requests.labels(kind, "not_leader").inc()
                return json_response({"error": "not the leader",
                                      "message": "this replica follows the cluster but does not decide; "
                                                 "its readiness probe fails so the Service routes to the leader"},
                                     503)
            return handler()
        return guarded

    for kind, segment in settings.verbs.items():
        app.add_url_rule(f"{prefix}/{segment}", f"verb_{kind}", leader_only(kind, handlers[kind]), methods=["POST"])
    hot = {f"{prefix}/{settings.verbs[k]}": h
           for k, h in (("filter", do_filter), ("prioritize", do_prioritize), ("bind", do_bind)) if k in settings.verbs}
    app.wsgi_app = HotVerbs(app.wsgi_app, hot, settings.serving,  # type: ignore[method-assign]
                            int(app.config.get("MAX_CONTENT_LENGTH") or 0))

    @app.get("/healthz")
    def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, why = settings.ready()
        return json_response({"ready": ready, "reason": why}, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), mimetype="text/plain; version=0.0.4")

    reporters: list[CapacityReporter] = []
    for fw in sorted(engine.frameworks.values(), key=lambda f: f.profile_name != engine.default_profile):
        reporters += [p for p in fw.filter_plugins if isinstance(p, CapacityReporter) and p not in reporters]

    def node_view(info: Any) -> dict[str, Any]:
        """One node of /debug/snapshot: the managed resources its status advertises, overridden by
        what plugins account themselves (devices), per device too."""
        totals = {r: (v, info.requested.get(r, 0)) for r, v in info.allocatable.items()}
        totals.update({r: (0, v) for r, v in info.requested.items() if r not in totals})
        devices: list[dict[str, Any]] = []
        for plugin in reporters:
            capacity = plugin.node_capacity(info)
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
            return json_response({"error": "not found", "message": f"the extender has no record of pod {key}"}, 404)
        body: dict[str, Any] = {"pod": key, "state": "pending" if pending is not None else "unknown"}
        uids = {v.uid for v in (verdicts or {}).values()} | ({pending.uid} if pending else set())
        for uid in uids:
            placed = engine.cache.pod(uid)
            if placed is not None:
                body["state"] = "assumed" if engine.cache.is_assumed(uid) else "bound"
                body["node"] = placed.node_name
        max_nodes = int(request.args.get("max", 200)) if request.args.get("max", "").isdigit() else 200
        body["verdicts"] = {verb: v.as_dict(max_nodes) for verb, v in (verdicts or {}).items()}
        return json_response(body)

    @app.get("/debug/queue")
    def debug_queue() -> Response:
        return json_response(engine.queue_state())

    @app.get("/debug/config")
    def debug_config() -> Response:
        return json_response(settings.describe())

    def verb_kind() -> str:
        endpoint = request.endpoint or ""
        return endpoint.removeprefix("verb_") if endpoint.startswith("verb_") else "other"

    @app.errorhandler(wire.BadRequest)
    def bad_request(exc: wire.BadRequest) -> Response:
        metrics.requests.labels(verb_kind(), "bad_request").inc()
        log.warning("bad request", extra={"path": request.path, "error": str(exc)})
        payload: dict[str, Any] = {"error": "bad request", "message": str(exc)}
        if exc.details:
            payload["problems"] = exc.details
        return json_response(payload, 400)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        message = exc.description or exc.name
        if exc.code == 413:
            message = f"request body larger than the configured limit of {app.config.get('MAX_CONTENT_LENGTH')} bytes"
        elif exc.code == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        return json_response({"error": exc.name.lower(), "message": message}, exc.code or 500)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        metrics.internal_errors.labels(verb_kind()).inc()
        log.error("unhandled error", exc_info=exc, extra={"path": request.path})
        return json_response({"error": "internal error", "message": f"{type(exc).__name__}: {exc}"}, 500)
