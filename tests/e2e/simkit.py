"""Helpers for the simulator's end-to-end tests.

* :class:`OurServer`: kube-extender in-process (``create_app`` over a MemoryCluster) with a
  recording in-process transport and the scheduler-side entry ``kube-extender config scheduler``
  would print for it.
* :class:`FakeExtender`: upstream's test extender (``test/integration/scheduler/extender``):
  predicates and weighted prioritizers over node names, an optional binder, Go-shaped replies.
* :class:`HttpExtenderServer`: a real HTTP/1.1 keep-alive server around a handler, recording
  every request as it arrived on the wire (request line, headers in order, body).
* :func:`scheduler_for`: a Scheduler over a cluster with (entry, transport) pairs.
* :func:`virtual_world`: OurServer and a Scheduler on one cluster and one virtual clock, the
  extender's background passes run as emulator actions (:meth:`OurServer.drive`).
"""

from __future__ import annotations

import gzip
import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from builders import cluster_objects

from extender.app import create_app
from extender.cli import scheduler_entry
from extender.cluster.memory import MemoryCluster
from extender.config.model import parse_config
from extender.framework.clock import Clock
from extender.sim.client import AppTransport, RawResponse, RecordingTransport
from extender.sim.config import SchedulerConfig
from extender.sim.clocks import VirtualClock
from extender.sim.scheduler import Scheduler

API = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration"}


def extender_config(**overrides: Any) -> Any:
    return parse_config({**API, **overrides})


def profile(strategy: str) -> list[dict[str, Any]]:
    """ExtenderConfiguration ``profiles`` with the NodeResources scoring strategy set."""
    return [{"schedulerName": "default-scheduler",
             "pluginConfig": [{"name": "NodeResources", "args": {"scoringStrategy": {"type": strategy}}}]}]


class OurServer:
    """kube-extender in-process over its own MemoryCluster (or a given one).

    ``clock``: the extender's clock; pass the emulator's :class:`VirtualClock` (and the same to
    :func:`scheduler_for`) so the extender's timeouts, TTLs and back-offs run in the emulator's
    virtual time. ``background=False``: no background threads (admission, nudges, orphan
    collection); drive them with :meth:`drive` on the emulator's clock instead."""

    def __init__(self, nodes: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (), *,
                 cluster: MemoryCluster | None = None, pod_groups: Sequence[dict[str, Any]] = (),
                 clock: Clock | None = None, background: bool = True, **config_overrides: Any) -> None:
        self.cluster = cluster if cluster is not None else MemoryCluster(
            cluster_objects(list(nodes), list(pods), list(pod_groups)))
        self.config = extender_config(**config_overrides)
        self.app = create_app(self.config, source=self.cluster, clock=clock, background=background)
        self.transport = RecordingTransport(AppTransport(self.app))
        self.passes: list[tuple[float, str, list[str]]] = []

    @property
    def state(self) -> Any:
        """The app's ``ExtenderState`` (engine, cache, admitter, nudger, ...)."""
        return self.app.extensions["kube_extender"]

    def drive(self, scheduler: Scheduler, *, every: float = 1.0, until: float = 60.0) -> None:
        """Run the extender's background passes (admission, nudges: those configured) as
        emulator actions every ``every`` virtual seconds from now until ``until`` seconds from
        now, in place of their real-time threads (create the server with ``background=False``).
        Passes that did something are logged in :attr:`passes` as (virtual seconds since the
        scheduler's start, pass name, pod keys admitted or nudged, in the order it acted)."""
        state = self.state
        passes: list[tuple[str, Callable[[], list[str]]]] = []
        if state.admitter is not None:
            passes.append(("admission", lambda: list(state.admitter.run_once().admitted)))
        if state.nudger is not None:
            passes.append(("nudge", lambda: list(state.nudger.run_once())))

        def run(name: str, fn: Callable[[], list[str]]) -> Callable[[], None]:
            def action() -> None:
                done = fn()
                if done:
                    self.passes.append((round(scheduler.clock.now() - scheduler.clock.start, 6), name, done))
            return action

        start = scheduler.clock.now()
        for k in range(int(until / every) + 1):
            for name, fn in passes:
                scheduler.at(start + k * every, f"{name} pass", run(name, fn))

    def entry(self, **changes: Any) -> dict[str, Any]:
        """The scheduler-side ``extenders[]`` entry; ``key=None`` removes a key."""
        e = scheduler_entry(self.config)
        for k, v in changes.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def snapshot(self) -> dict[str, Any]:
        return json.loads(self.app.test_client().get("/debug/snapshot").data)

    def calls(self, verb: str) -> list[Any]:
        return self.transport.calls(verb)


def scheduler_for(cluster: Any, extenders: Iterable[tuple[Mapping[str, Any], Any]], **config: Any) -> Scheduler:
    pairs = list(extenders)
    pdbs = config.pop("pdbs", ())
    mirror = config.pop("mirror_extender_binds", False)
    clock = config.pop("clock", None)
    graceful = config.pop("graceful_termination", False)
    cfg = SchedulerConfig.from_dict({"extenders": [dict(e) for e, _ in pairs]}, transports=[t for _, t in pairs],
                                    **config)
    return Scheduler(cfg, cluster, clock=clock, pdbs=pdbs, mirror_extender_binds=mirror, graceful_termination=graceful)


def virtual_world(nodes: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (), *,
                  pod_groups: Sequence[dict[str, Any]] = (), scheduler: Mapping[str, Any] | None = None,
                  **config_overrides: Any) -> tuple[OurServer, Scheduler]:
    """kube-extender in-process and the emulated kube-scheduler calling it, on one cluster and one
    :class:`VirtualClock`: the extender's timeouts, TTLs and back-offs run in the emulator's
    virtual time; its background passes are off (drive them with :meth:`OurServer.drive`).
    ``scheduler``: keyword arguments for :func:`scheduler_for` (``version``, ``seed``, ...)."""
    clock = VirtualClock()
    ours = OurServer(nodes, pods, pod_groups=pod_groups, clock=clock, background=False, **config_overrides)
    return ours, scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], clock=clock, **dict(scheduler or {}))


def node_names(args: Mapping[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    return [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []]


Predicate = Callable[[Mapping[str, Any], str], bool]
Prioritizer = Callable[[Mapping[str, Any], list[str]], list[tuple[str, int]]]


def only(*names: str) -> Predicate:
    return lambda pod, node: node in names


def true_predicate(pod: Mapping[str, Any], node: str) -> bool:
    return True


def false_predicate(pod: Mapping[str, Any], node: str) -> bool:
    return False


def error_predicate(pod: Mapping[str, Any], node: str) -> bool:
    raise RuntimeError("some error")


def favour(name: str, high: int = 10, low: int = 1) -> Prioritizer:
    return lambda pod, nodes: [(n, high if n == name else low) for n in nodes]


def error_prioritizer(pod: Mapping[str, Any], nodes: list[str]) -> list[tuple[str, int]]:
    raise RuntimeError("some error")


@dataclass
class FakeExtender:
    """Upstream's test extender. ``node_cache_capable`` must match the scheduler-side entry.
    Filter errors go into ``Error`` (HTTP 200); prioritizer errors give HTTP 500; ``binder``
    is called as ``binder(namespace, name, uid, node)`` and may raise (-> ``Error``)."""

    name: str
    predicates: Sequence[Predicate] = ()
    prioritizers: Sequence[tuple[Prioritizer, int]] = ()
    node_cache_capable: bool = False
    binder: Callable[[str, str, str, str], None] | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, verb: str, args: Any) -> Any:
        with self.lock:
            self.calls.append((verb, args))
        if "filter" in verb:
            return self.filter(args)
        if "prioritize" in verb:
            return self.prioritize(args)
        if "bind" in verb:
            return self.bind(args)
        return RawResponse(404, b"unknown verb")

    def verbs(self) -> list[str]:
        return [v for v, _ in self.calls]

    def filter(self, args: Mapping[str, Any]) -> Any:
        pod = args["Pod"]
        kept, failed = [], {}
        for name in node_names(args):
            try:
                fits = all(p(pod, name) for p in self.predicates)
            except Exception as exc:  # noqa: BLE001 - the upstream extender reports it in Error
                return {"Nodes": {"metadata": {}, "items": []}, "NodeNames": None, "FailedNodes": {}, "Error": str(exc)}
            if fits:
                kept.append(name)
            else:
                failed[name] = f"extender failed: {self.name}"
        if self.node_cache_capable:
            return {"Nodes": None, "NodeNames": kept, "FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                    "Error": ""}
        items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] in kept]
        return {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "FailedNodes": failed,
                "FailedAndUnresolvableNodes": {}, "Error": ""}

    def prioritize(self, args: Mapping[str, Any]) -> Any:
        names = node_names(args)
        combined: dict[str, int] = {}
        for fn, weight in self.prioritizers:
            if weight == 0:
                continue
            try:
                scores = fn(args["Pod"], names)
            except Exception as exc:  # noqa: BLE001
                return RawResponse(500, json.dumps({"error": str(exc)}).encode())
            for host, score in scores:
                combined[host] = combined.get(host, 0) + score * weight
        return [{"Host": h, "Score": s} for h, s in combined.items()]

    def bind(self, args: Mapping[str, Any]) -> Any:
        if self.binder is None:
            return RawResponse(404, b"not a binder")
        try:
            self.binder(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        except Exception as exc:  # noqa: BLE001
            return {"Error": str(exc)}
        return {"Error": ""}


@dataclass
class WireRequest:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


WireHandler = Callable[[WireRequest], tuple[int, bytes, Mapping[str, str]]]


class HttpExtenderServer:
    """A real HTTP/1.1 server (keep-alive) on 127.0.0.1; ``handler(request)`` answers
    ``(status, body, headers)``; ``handler`` may also be a FakeExtender (JSON in, JSON out)."""

    def __init__(self, handler: WireHandler | FakeExtender, prefix: str = "/ext") -> None:
        self.requests: list[WireRequest] = []
        self.connections = 0
        outer = self
        if isinstance(handler, FakeExtender):
            fake = handler

            def handler(req: WireRequest) -> tuple[int, bytes, Mapping[str, str]]:
                reply = fake(req.path.rsplit("/", 1)[-1], req.json())
                if isinstance(reply, RawResponse):
                    return reply.status, reply.body, {}
                return 200, json.dumps(reply, separators=(",", ":")).encode(), {}

        self.handler = handler

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = WireRequest(self.command, self.path, list(self.headers.items()), body)
                outer.requests.append(req)
                status, data, headers = outer.handler(req)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = _serve
            do_GET = _serve

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients that time out and hang up are part of the tests

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HttpExtenderServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def gzip_reply(payload: Any) -> tuple[int, bytes, Mapping[str, str]]:
    return 200, gzip.compress(json.dumps(payload).encode()), {"Content-Encoding": "gzip"}


def slow(seconds: float, payload: Any) -> WireHandler:
    def handler(req: WireRequest) -> tuple[int, bytes, Mapping[str, str]]:
        time.sleep(seconds)
        return 200, json.dumps(payload).encode(), {}
    return handler
