"""The four extender verbs: one way in, ``Verbs.answer``, whatever carried the request there (the
gevent worker's fast lane, the WSGI shortcut, a Flask view).

``answer`` takes the body bytes and returns the whole answer; it never raises, and nothing runs
a handler twice. Every outcome, as kube-scheduler reads it, is decided here:

* malformed input -> HTTP 400 with ``{"error": ..., "message": ..., "problems": [...]}``, counted
  with outcome ``bad_request`` (never a 500);
* a follower (``serving()`` false) -> HTTP 503: only the leader decides; so does a replica
  whose cache has not synced (``synced()`` false);
* filter / bind internal failure -> HTTP 200 with the failure in ``Error``;
* prioritize / preempt internal failure -> HTTP 500 (they have no error field), logged at ERROR
  and counted in ``kube_extender_internal_errors_total`` because kube-scheduler drops it silently.

The log line and the metrics of a request are its ``Record``, called by the transport once the
reply is on its way (the fast lane writes first, then records; under WSGI the response's
``close()`` records).

kube-scheduler asks prioritize about the pod it just filtered, on the nodes filter found
feasible. So the pod's parse is kept for the next request with the same pod text, and once a
prioritize has followed a filter that way, a filter's Record goes on to score its feasible nodes
ahead (``Engine.score_ahead``) and encode that reply: the prioritize that follows for the same
pod, names and cluster is answered with them.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any, Callable, Mapping

import orjson

from extender.api import schemas, wire
from extender.api.replies import error_payload
from extender.framework.views import PodInfo
from extender.logs import info_line
from extender.metrics import Metrics
from extender.runtime.batch import Priorities
from extender.runtime.engine import Engine, InvalidRequest

log = logging.getLogger("extender.api")

_FILTER_ARGS = schemas.ExtenderArgsSchema()
_PREEMPT_ARGS = schemas.ExtenderPreemptionArgsSchema()
_BIND_ARGS = schemas.ExtenderBindingArgsSchema()

Record = Callable[[], None]
"""Logs and counts one answered request (its duration already measured); called once."""

Answer = tuple[int, Any, Record]
"""The answer to a verb request: HTTP status, reply payload (a JSON value), and its Record."""

_NO_POD = PodInfo(uid="", namespace="", name="")

NOT_LEADER = {"error": "not the leader",
              "message": "this replica follows the cluster but does not decide; "
                         "its readiness probe fails so the Service routes to the leader"}
NOT_SYNCED = {"error": "not synced",
              "message": "the initial lists of the cluster are not all in yet: an answer now could give "
                         "capacity that is taken; kube-scheduler retries the pod"}


def pod_label(body: Any) -> str:
    """``namespace/name`` of the pod a verb request is about, for logs; ``-`` when it has none."""
    pod = body.get("Pod") if isinstance(body, dict) else None
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict):
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    if isinstance(body, dict) and "PodName" in body:
        return f"{body.get('PodNamespace') or 'default'}/{body.get('PodName')}"
    return "-"


def _nothing() -> None:
    pass


class _Failed(Exception):
    """An engine call failed inside; ``answer`` is what kube-scheduler gets (already recorded)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer


class Verbs:
    """The verb handlers over ``engine``, by kind (filter, prioritize, preempt, bind), and the
    URL path of each configured verb (``prefix/segment``)."""

    def __init__(self, engine: Engine, metrics: Metrics, prefix: str, segments: Mapping[str, str],
                 serving: Callable[[], bool], synced: Callable[[], bool] = lambda: True) -> None:
        self.engine = engine
        self.metrics = metrics
        self.serving = serving
        """False on a follower: every verb answers 503."""
        self.synced = synced
        """False until the cluster cache has synced: every verb answers 503."""
        self._handlers: dict[str, Callable[[bytes], Answer]] = {
            "filter": self._filter, "prioritize": self._prioritize, "preempt": self._preempt, "bind": self._bind}
        self.kinds = {f"{prefix.rstrip('/')}/{segment}": kind for kind, segment in segments.items()}
        """URL path -> verb kind."""
        self._last_pod: tuple[bytes, PodInfo] = (b"", _NO_POD)
        """The pod of the last filter or prioritize request: its JSON text and its parse."""
        self._expected: tuple[PodInfo, list[str]] = (_NO_POD, [])
        """The pod of the last filter that found nodes, and those nodes: what kube-scheduler
        sends to prioritize next."""
        self._follows = False
        """The last prioritize asked exactly that: filter then scores its feasible nodes ahead."""
        self._ahead_reply: tuple[Any, Any] = (None, None)
        """Scores made ahead (``Engine.score_ahead``) and their reply, already encoded."""

    def answer(self, kind: str, body: bytes, path: str = "") -> Answer:
        """The answer to a POST of ``body`` to the ``kind`` verb (at ``path``, for the log)."""
        if not self.serving():
            return 503, NOT_LEADER, self.metrics.requests.labels(kind, "not_leader").inc
        if not self.synced():
            return 503, NOT_SYNCED, self.metrics.requests.labels(kind, "not_synced").inc
        try:
            return self._handlers[kind](body)
        except wire.BadRequest as exc:
            return 400, bad_request_payload(exc), partial(self.bad_request, kind, path, exc)
        except _Failed as failed:
            return failed.answer
        except Exception as exc:  # noqa: BLE001 - a bug in a handler is a 500, never a crash
            self.internal(kind, exc, "-", "unhandled error")
            return 500, error_payload("internal error", f"{type(exc).__name__}: {exc}"), _nothing

    def bad_request(self, kind: str, path: str, exc: wire.BadRequest) -> None:
        """Count and log a bad request to verb ``kind`` (``other``: not a verb)."""
        self.metrics.requests.labels(kind, "bad_request").inc()
        log.warning("bad request", extra={"path": path, "error": str(exc)})

    def internal(self, kind: str, exc: BaseException, pod: str, message: str = "internal error") -> None:
        """Count and log an internal failure answering verb ``kind``."""
        self.metrics.internal_errors.labels(kind).inc()
        log.error(message, exc_info=exc, extra={"verb": kind, "pod": pod})

    def _pod(self, raw: Mapping[str, Any]) -> PodInfo:
        """The request's pod, parsed (InvalidRequest when malformed). kube-scheduler sends the
        same pod to filter and then to prioritize: when its JSON text is that of the previous
        request's pod, that parse is the answer (the text, not ``==``, decides - ``1 == 1.0 ==
        True`` in Python, and a pod the parse refuses must be refused again)."""
        try:
            text = orjson.dumps(raw)
        except TypeError:  # not a JSON value (it came from one): parse it, remember nothing
            return self.engine.pod_info(raw)
        last = self._last_pod
        if last[0] == text:
            return last[1]
        pod = self.engine.pod_info(raw)
        self._last_pod = (text, pod)
        return pod

    def _finish(self, verb: str, started: float, pod: str, nodes: int, outcome: str, **fields: Any) -> Record:
        """The Record of one request, its duration measured now: when called, one log line and the
        metrics. ``outcome`` is a small fixed set (it is a metric label): ok, feasible,
        unschedulable, candidates, none, bound, error."""
        seconds = time.perf_counter() - started
        metrics = self.metrics

        def record() -> None:
            metrics.requests.labels(verb, outcome).inc()
            metrics.request_duration.labels(verb).observe(seconds)
            info_line(log, "request", {"verb": verb, "pod": pod, "nodes": nodes, "outcome": outcome, **fields,
                                       "duration_ms": round(seconds * 1000, 3)})
        return record

    def _run(self, verb: str, started: float, pod: str, size: int, call: Callable[[], Any],
             on_failure: Callable[[Exception], tuple[int, Any]]) -> Any:
        """``call()`` (the engine); its InvalidRequest is a bad request, any other failure is
        logged, counted and answered by ``on_failure`` (raised as ``_Failed``)."""
        try:
            return call()
        except InvalidRequest as exc:
            raise wire.BadRequest(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - never a crash; see on_failure
            self.internal(verb, exc, pod)
            raise _Failed((*on_failure(exc), self._finish(verb, started, pod, size, "error"))) from exc

    @staticmethod
    def _http_500(verb: str) -> Callable[[Exception], tuple[int, Any]]:
        return lambda exc: (500, error_payload("internal error", f"{verb} failed: {type(exc).__name__}: {exc}"))

    def _filter(self, body: bytes) -> Answer:
        t0 = time.perf_counter()
        args, names, pod = _extender_args(body)
        failed = lambda exc: (200, wire.filter_error(f"internal error: {type(exc).__name__}: {exc}"))  # noqa: E731
        info = self._run("filter", t0, pod, len(names), lambda: self._pod(args["Pod"]), failed)
        outcome = self._run("filter", t0, pod, len(names), lambda: self.engine.filter(info, names), failed)
        record = self._finish("filter", t0, pod, len(names), "error" if outcome.error else
                              ("feasible" if outcome.feasible else "unschedulable"), feasible=len(outcome.feasible))
        if outcome.feasible and not outcome.error:
            self._expected = (info, outcome.feasible)
            if self._follows:
                record = self._then_score_ahead(record, info, outcome.feasible)
        return 200, wire.filter_reply(args, outcome), record

    def _then_score_ahead(self, record: Record, pod: PodInfo, names: list[str]) -> Record:
        """``record``, then the scores and the reply of the prioritize expected next, made while
        kube-scheduler reads the filter answer and runs its own plugins (``Engine.score_ahead``).
        Best effort: a failure here leaves prioritize to compute (and report) it."""
        def then() -> None:
            record()
            try:
                scores = self.engine.score_ahead(pod, names)
                if scores is not None:
                    self._ahead_reply = (scores, wire.prioritize_reply(Priorities(names, scores)))
            except Exception:  # noqa: BLE001 - the prioritize that follows meets the failure itself
                log.debug("scoring ahead failed", exc_info=True, extra={"pod": pod.key})
        return then

    def _prioritize(self, body: bytes) -> Answer:
        t0 = time.perf_counter()
        args, names, pod = _extender_args(body)
        failed = self._http_500("prioritize")
        info = self._run("prioritize", t0, pod, len(names), lambda: self._pod(args["Pod"]), failed)
        scores = self._run("prioritize", t0, pod, len(names), lambda: self.engine.prioritize(info, names), failed)
        ready_scores, ready_reply = self._ahead_reply
        if ready_scores is scores.scores:  # the scores made ahead: the engine found pod and names as expected
            self._follows, reply = True, ready_reply
        else:
            expected = self._expected
            self._follows = expected[0] is info and expected[1] == names
            reply = wire.prioritize_reply(scores)
        return 200, reply, self._finish("prioritize", t0, pod, len(names), "ok")

    def _preempt(self, body: bytes) -> Answer:
        t0 = time.perf_counter()
        args = wire.load(_PREEMPT_ARGS, wire.decode(body))
        candidates = wire.preempt_candidates(args)
        pod = pod_label(args)
        decisions = self._run("preempt", t0, pod, len(candidates),
                              lambda: self.engine.preempt(args["Pod"], candidates), self._http_500("preempt"))
        return 200, wire.preempt_reply(decisions), self._finish("preempt", t0, pod, len(candidates),
                                                                "candidates" if decisions else "none",
                                                                kept=len(decisions))

    def _bind(self, body: bytes) -> Answer:
        t0 = time.perf_counter()
        args = wire.load(_BIND_ARGS, wire.decode(body))
        pod = f"{args['PodNamespace'] or 'default'}/{args['PodName']}"
        try:
            error = self.engine.bind(args["PodNamespace"] or "default", args["PodName"], args["PodUID"],
                                     args["Node"])
        except Exception as exc:  # noqa: BLE001 - reported in Error: kube-scheduler backs off
            self.internal("bind", exc, pod)
            error = f"internal error: {type(exc).__name__}: {exc}"
        finish = self._finish("bind", t0, pod, 1, "bound" if not error else "error")

        def record() -> None:
            finish()
            if error:
                log.warning("bind refused", extra={"pod": pod, "node": args["Node"], "error": error})
        return 200, wire.bind_reply(error), record


def _extender_args(body: bytes) -> tuple[dict[str, Any], list[str], str]:
    """ExtenderArgs (filter, prioritize): the arguments, the candidate names, the pod's label."""
    args = wire.load_extender_args(_FILTER_ARGS, wire.decode(body))
    return args, wire.node_names_of(args), pod_label(args)


def bad_request_payload(exc: wire.BadRequest) -> dict[str, Any]:
    """The JSON body of a 400: the problem, and every problem with its key path when there are
    several."""
    payload = error_payload("bad request", str(exc))
    if exc.details:
        payload["problems"] = exc.details
    return payload
