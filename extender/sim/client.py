"""kube-scheduler's ``HTTPExtender`` (``pkg/scheduler/extender.go``), verb by verb.

* ``URL = strings.TrimRight(urlPrefix, "/") + "/" + verb``; POST; body ``json.Marshal(args)``
  (compact, capitalised keys, ``null`` for the unused fields); headers ``User-Agent:
  Go-http-client/1.1``, ``Content-Length``, ``Content-Type: application/json``,
  ``Accept-Encoding: gzip`` (§3.1, §13.1).
* One client per extender with a keep-alive pool (``MaxIdleConnsPerHost`` 2 like Go; concurrent
  calls open extra connections), timeout = ``httpTimeout`` (5 s when 0) covering connect,
  headers and body; redirects followed (≤10; 307/308 replay the POST, 301/302/303 become GET);
  gzip replies decoded transparently. Proxies, HTTP/2 and TLS ``serverName`` are not emulated.
* Non-200 is an error ``failed <verb> with extender at URL <url>, code <n>`` (§3.3); the body is
  decoded strictly like Go (``extender.sim.gojson``).
* ``Error`` in filter/bind replies is an error (passed through ``fmt.Errorf`` like ≤1.31, so
  ``%`` sequences are mangled); cache mode: a returned name that was not sent is an error;
  non-cache mode: the returned Node objects are trusted (§3.4, §3.6), and are what later
  extenders' filter and prioritize are sent (``extender.sim.placement``).
* Preempt replies are converted like ``convertToVictims`` (§6.2): unknown node or a UID that is
  not on that node is an error; a ``null`` MetaVictims, or a ``null`` MetaPod on a node with
  pods, is a nil pointer Go dereferences: kube-scheduler panics (:class:`SchedulerPanic`).

Transports decide how a request travels: :class:`HTTPTransport` (sockets), :class:`AppTransport`
(a Flask app's test client, in-process) and :class:`CallableTransport` (a Python function, for
fake extenders in tests like upstream's). Every transport is thread-safe: binding cycles call
bind concurrently. In-process transports cannot be interrupted; a reply that took longer than
the timeout is discarded as a timeout, as Go's client would have given up.
"""

from __future__ import annotations

import gzip
import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence
from urllib.parse import urljoin, urlsplit

from extender.sim import gojson
from extender.sim.config import ExtenderSpec

GO_HEADERS: tuple[tuple[str, str], ...] = (("User-Agent", "Go-http-client/1.1"), ("Content-Type", "application/json"),
                                           ("Accept-Encoding", "gzip"))
MAX_IDLE_CONNS_PER_HOST = 2
MAX_REDIRECTS = 10


class TransportError(Exception):
    """The request did not get an HTTP answer (refused, reset, timeout); Go-like wording."""


class ExtenderError(Exception):
    """Any failure of one verb call, as HTTPExtender returns it: transport, non-200, decode,
    ``Error`` field, names outside the input, bad victims."""


NIL_DEREFERENCE = "runtime error: invalid memory address or nil pointer dereference"


class SchedulerPanic(Exception):
    """Where kube-scheduler's Go code panics on what an extender replied (a nil pointer it
    dereferences): no error any caller handles - nor ``ignorable`` - but the end of the
    scheduler process, which its Deployment then restarts. The message starts with Go's
    runtime error and says which reply caused it."""


@dataclass
class RawResponse:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Exchange:
    """One recorded request/response (see :class:`RecordingTransport`)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    status: int | None = None
    reply: bytes = b""
    error: str = ""

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def verb(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def json(self) -> Any:
        return json.loads(self.body)


class Transport(Protocol):
    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        """Send a POST; raise TransportError when no HTTP answer arrives within ``timeout`` (≤0:
        no timeout)."""

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        """A plain GET (debug endpoints such as /debug/snapshot)."""

    def close(self) -> None: ...


def _timeout_error(method: str, url: str) -> TransportError:
    verb = "Post" if method == "POST" else "Get"
    return TransportError(f'{verb} "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')


# ---- sockets ---------------------------------------------------------------------------------------


def tls_context(spec: ExtenderSpec) -> ssl.SSLContext | None:
    """``makeTransport`` (§3.2): enableHTTPS without a CA disables verification; ``insecure``
    likewise; a CA file or data verifies against it; client cert/key when given."""
    tls = dict(spec.tls_config or {})
    if not spec.enable_https and not tls:
        return None
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    has_ca = bool(tls.get("caFile") or tls.get("caData"))
    if tls.get("insecure") and has_ca:
        raise ValueError("specifying a root certificates file with the insecure flag is not allowed")
    if tls.get("insecure") or (spec.enable_https and not has_ca):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif tls.get("caFile"):
        ctx.load_verify_locations(cafile=tls["caFile"])
    elif tls.get("caData"):
        ctx.load_verify_locations(cadata=tls["caData"] if isinstance(tls["caData"], str) else tls["caData"].decode())
    if tls.get("certFile"):
        ctx.load_cert_chain(tls["certFile"], tls.get("keyFile"))
    return ctx


class HTTPTransport:
    """A keep-alive connection pool like Go's http.Transport, for one extender."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, max_idle_per_host: int = MAX_IDLE_CONNS_PER_HOST) -> None:
        self._ssl = ssl_context
        self._max_idle = max_idle_per_host
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self.connections_opened = 0

    def _acquire(self, key: tuple[str, str, int], timeout: float | None) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop(), True
            self.connections_opened += 1
        scheme, host, port = key
        if scheme == "https":
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx), False
        return http.client.HTTPConnection(host, port, timeout=timeout), False

    def _release(self, key: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in conns:
            c.close()

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        deadline = time.monotonic() + timeout if timeout and timeout > 0 else None
        method: str = "POST"
        payload: bytes | None = body
        for _ in range(MAX_REDIRECTS + 1):
            resp = self._roundtrip(method, url, payload, headers, deadline)
            location = resp.headers.get("location") or resp.headers.get("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                url = urljoin(url, location)
                if resp.status in (301, 302, 303):
                    method, payload = "GET", None
                continue
            return resp
        raise TransportError(f'Post "{url}": stopped after {MAX_REDIRECTS} redirects')

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        return self._roundtrip("GET", url, None, (("User-Agent", "Go-http-client/1.1"),),
                               time.monotonic() + timeout if timeout > 0 else None)

    def _roundtrip(self, method: str, url: str, body: bytes | None, headers: Sequence[tuple[str, str]],
                   deadline: float | None) -> RawResponse:
        parts = urlsplit(url)
        scheme = parts.scheme or "http"
        if scheme not in ("http", "https"):
            raise TransportError(f'{method.title()} "{url}": unsupported protocol scheme "{scheme}"')
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        verb = "Post" if method == "POST" else "Get"
        for attempt in (0, 1):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise _timeout_error(method, url)
            conn, reused = self._acquire(key, remaining)
            sent = False
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(remaining)
                conn.timeout = remaining
                conn.putrequest(method, path, skip_accept_encoding=True)
                ordered = list(headers)
                if body is not None:
                    # Go writes User-Agent, Content-Length, Content-Type, Accept-Encoding (§13.1).
                    ordered.insert(1 if ordered and ordered[0][0].lower() == "user-agent" else 0,
                                   ("Content-Length", str(len(body))))
                for k, v in ordered:
                    conn.putheader(k, v)
                conn.endheaders(body)
                sent = True
                response = conn.getresponse()
                data = self._read(conn, response, deadline, method, url)
            except (socket.timeout, TimeoutError) as exc:
                conn.close()
                raise _timeout_error(method, url) from exc
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                    http.client.BadStatusLine) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # a stale keep-alive connection: Go retries on a fresh one
                what = "EOF" if isinstance(exc, http.client.RemoteDisconnected) else str(exc)
                raise TransportError(f'{verb} "{url}": {what}') from exc
            except ssl.SSLError as exc:
                conn.close()
                raise TransportError(f'{verb} "{url}": tls: {exc.reason or exc}') from exc
            except OSError as exc:
                conn.close()
                if not sent:
                    reason = (exc.strerror or str(exc)).lower()
                    raise TransportError(f'{verb} "{url}": dial tcp {host}:{port}: connect: {reason}') from exc
                raise TransportError(f'{verb} "{url}": {exc}') from exc
            reply_headers = {k: v for k, v in response.getheaders()}
            if response.will_close:
                conn.close()
            else:
                self._release(key, conn)
            lowered = {k.lower(): v for k, v in reply_headers.items()}
            if lowered.get("content-encoding", "").lower() == "gzip":
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError) as exc:
                    raise TransportError(f'{verb} "{url}": gzip: invalid header') from exc
            return RawResponse(response.status, data, lowered)
        raise TransportError(f'{verb} "{url}": connection closed')  # pragma: no cover - loop always returns

    @staticmethod
    def _read(conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float | None,
              method: str, url: str) -> bytes:
        chunks: list[bytes] = []
        while True:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _timeout_error(method, url)
                if conn.sock is not None:
                    conn.sock.settimeout(remaining)
            chunk = response.read(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


# ---- in-process ------------------------------------------------------------------------------------


class AppTransport:
    """Calls a Flask app through its test client (one per thread), using the URL's path: the
    extender runs in-process, on the calling thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._local = threading.local()

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.app.test_client(use_cookies=False)
        return client

    def _call(self, method: str, url: str, body: bytes | None, headers: Sequence[tuple[str, str]],
              timeout: float) -> RawResponse:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        t0 = time.monotonic()
        try:
            resp = self._client().open(path, method=method, data=body, headers=list(headers))
            data = resp.get_data()
            status = resp.status_code
            reply_headers = {k.lower(): v for k, v in resp.headers.items()}
            resp.close()
        except Exception as exc:  # noqa: BLE001 - an exception escaping the app is a dropped connection
            raise TransportError(f'{method.title()} "{url}": EOF ({type(exc).__name__}: {exc})') from exc
        if timeout and timeout > 0 and time.monotonic() - t0 > timeout:
            raise _timeout_error(method, url)
        return RawResponse(status, data, reply_headers)

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        return self._call("POST", url, body, headers, timeout)

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        return self._call("GET", url, None, (("User-Agent", "Go-http-client/1.1"),), timeout)

    def close(self) -> None:
        pass


Handler = Callable[[str, Any], Any]


class CallableTransport:
    """Calls ``handler(verb, args)`` where ``verb`` is the last URL path segment and ``args`` the
    request body decoded by ``json.loads``. The handler returns the reply: a :class:`RawResponse`
    (any status, raw body), ``bytes`` (status 200, sent as is) or JSON-able data (status 200,
    ``gojson.marshal``). An exception from the handler is a transport failure."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        verb = urlsplit(url).path.rsplit("/", 1)[-1]
        t0 = time.monotonic()
        try:
            reply = self.handler(verb, json.loads(body))
        except Exception as exc:  # noqa: BLE001 - an unreachable fake extender
            raise TransportError(f'Post "{url}": {exc}') from exc
        if timeout and timeout > 0 and time.monotonic() - t0 > timeout:
            raise _timeout_error("POST", url)
        if isinstance(reply, RawResponse):
            return reply
        if isinstance(reply, (bytes, bytearray)):
            return RawResponse(200, bytes(reply))
        return RawResponse(200, gojson.marshal(reply))

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        return RawResponse(404, b'{"error":"not found"}')

    def close(self) -> None:
        pass


class RecordingTransport:
    """Wraps a transport and keeps every exchange (thread-safe), for assertions and reports."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        ex = Exchange("POST", url, list(headers), body)
        with self._lock:
            self.exchanges.append(ex)
        try:
            resp = self.inner.post(url, body, headers, timeout)
        except TransportError as exc:
            ex.error = str(exc)
            raise
        ex.status, ex.reply = resp.status, resp.body
        return resp

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        return self.inner.get(url, timeout)

    def close(self) -> None:
        self.inner.close()

    def calls(self, verb: str | None = None) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if verb is None or e.verb == verb]


# ---- statistics ------------------------------------------------------------------------------------


@dataclass
class CallSample:
    extender: str
    verb: str
    seconds: float
    ok: bool
    error: str = ""


class CallStats:
    """Latency and outcome of every verb call (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples: list[CallSample] = []

    def record(self, sample: CallSample) -> None:
        with self._lock:
            self.samples.append(sample)

    def snapshot(self) -> list[CallSample]:
        with self._lock:
            return list(self.samples)


# ---- the extender client ------------------------------------------------------------------------------

_GO_VERB = re.compile(r"%([-+# 0]*[0-9]*(?:\.[0-9]*)?)([a-zA-Z%])?")


def go_errorf(message: str) -> str:
    """``fmt.Errorf(message)`` with no arguments (≤1.31, §3.4): ``%%`` -> ``%``, a verb becomes
    ``%!v(MISSING)``, a trailing ``%`` becomes ``%!(NOVERB)``."""
    if "%" not in message:
        return message

    def sub(m: re.Match[str]) -> str:
        verb = m.group(2)
        if verb is None:
            return "%!(NOVERB)"
        if verb == "%" and not m.group(1):
            return "%"
        return f"%!{verb}(MISSING)"

    return _GO_VERB.sub(sub, message)


def strip_type_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Objects from informers carry no kind/apiVersion (§13.2)."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def encode_pod(pod: Mapping[str, Any]) -> bytes:
    """The ``Pod`` field of a filter or prioritize request: the same for every extender, so a
    cycle encodes its pod once."""
    return gojson.marshal(strip_type_meta(pod))


@dataclass
class FilterReply:
    """What ``Filter`` returns: the surviving names (in reply order), the returned Node objects in
    non-cache mode (trusted as is), and the two failure maps."""

    names: list[str]
    node_objects: dict[str, dict[str, Any]] | None
    failed: dict[str, str]
    unresolvable: dict[str, str]


@dataclass
class Victims:
    """``extenderv1.Victims``: victim pods (raw, most important first) and PDB violations."""

    pods: list[Mapping[str, Any]]
    num_pdb_violations: int = 0


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


class HTTPExtender:
    """One configured extender. Methods raise ExtenderError exactly where Go returns an error."""

    def __init__(self, spec: ExtenderSpec, transport: Transport | None = None, stats: CallStats | None = None) -> None:
        self.spec = spec
        if transport is None:
            transport = spec.transport
        if transport is None:
            transport = HTTPTransport(tls_context(spec))
        self.transport: Transport = transport
        self.stats = stats

    @property
    def name(self) -> str:
        return self.spec.name

    def url(self, verb: str) -> str:
        return self.spec.url_prefix.rstrip("/") + "/" + verb

    def _send(self, kind: str, verb: str, args: Mapping[str, Any] | bytes) -> tuple[bytes, CallSample]:
        """POST ``args`` (or a body already encoded) and check the status; the returned sample is
        already recorded and is marked failed by the caller if the reply turns out to be an error."""
        url = self.url(verb)
        body = args if isinstance(args, bytes) else gojson.marshal(args)
        t0 = time.perf_counter()
        error = ""
        try:
            resp = self.transport.post(url, body, GO_HEADERS, self.spec.timeout)
            if resp.status != 200:
                error = f"failed {verb} with extender at URL {url}, code {resp.status}"
        except TransportError as exc:
            error = str(exc)
        sample = CallSample(self.name, kind, time.perf_counter() - t0, not error, error)
        if self.stats is not None:
            self.stats.record(sample)
        if error:
            raise ExtenderError(error)
        return resp.body, sample

    @staticmethod
    def _fail(sample: CallSample, error: str) -> ExtenderError:
        sample.ok, sample.error = False, error
        return ExtenderError(error)

    def _args(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], names: list[str],
              pod_body: bytes | None) -> bytes:
        """``ExtenderArgs`` encoded (its fields in Go's order)."""
        if pod_body is None:
            pod_body = encode_pod(pod)
        if self.spec.node_cache_capable:  # the names, most of the body, are encoded on their own: faster
            return b'{"Pod":' + pod_body + b',"Nodes":null,"NodeNames":' + gojson.marshal_strings(names) + b"}"
        return (b'{"Pod":' + pod_body + b',"Nodes":'
                + gojson.marshal({"metadata": {}, "items": [strip_type_meta(n) for n in nodes]}) + b',"NodeNames":null}')

    def filter(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
               names: Sequence[str] | None = None, pod_body: bytes | None = None) -> FilterReply:
        """``HTTPExtender.Filter``; ``nodes`` are raw Node objects, at least one (``names``: their
        names, and ``pod_body``: :func:`encode_pod`'s bytes of ``pod``, when the caller has them;
        with ``names``, a nodeCacheCapable extender needs no ``nodes``: it is sent names only).
        The reply's maps are the decoder's own (fresh) objects."""
        names = [_node_name(n) for n in nodes] if names is None else list(names)
        if not self.spec.filter_verb:
            return FilterReply(names, None, {}, {})
        body, sample = self._send("filter", self.spec.filter_verb, self._args(pod, nodes, names, pod_body))
        try:
            result = gojson.decode_filter_result(body)
        except gojson.DecodeError as exc:
            raise self._fail(sample, str(exc)) from exc
        if result.error:
            raise self._fail(sample, go_errorf(result.error))
        failed = result.failed_nodes or {}
        unresolvable = result.failed_and_unresolvable_nodes or {}
        if self.spec.node_cache_capable and result.node_names is not None:
            sent = set(names)
            if not sent.issuperset(result.node_names):
                name = next(n for n in result.node_names if n not in sent)
                raise self._fail(sample, f'extender "{self.name}" claims a filtered node "{name}" which is not '
                                         "found in the input node list")
            return FilterReply(result.node_names, None, failed, unresolvable)
        if result.nodes is not None:
            objects = {_node_name(n): n for n in result.nodes}
            return FilterReply([_node_name(n) for n in result.nodes], objects, failed, unresolvable)
        return FilterReply([], None, failed, unresolvable)

    def prioritize(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
                   names: Sequence[str] | None = None) -> tuple[list[gojson.HostPriority], int]:
        """``HTTPExtender.Prioritize``: (scores, weight); no verb -> zeros with weight 0
        (``names``: the nodes' names, when the caller has them)."""
        hosts, scores, weight = self.prioritize_columns(pod, nodes, names)
        return list(map(gojson.HostPriority, hosts, scores)), weight

    def prioritize_columns(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
                           names: Sequence[str] | None = None,
                           pod_body: bytes | None = None) -> tuple[list[str], list[int], int]:
        """:meth:`prioritize` as (hosts, their scores in reply order, weight): what a cycle sums
        without an object per host (``nodes``, ``names`` and ``pod_body`` as for :meth:`filter`)."""
        names = [_node_name(n) for n in nodes] if names is None else list(names)
        if not self.spec.prioritize_verb:
            return names, [0] * len(names), 0
        body, sample = self._send("prioritize", self.spec.prioritize_verb, self._args(pod, nodes, names, pod_body))
        try:
            result = gojson.decode_host_priorities(body)
        except gojson.DecodeError as exc:
            raise self._fail(sample, str(exc)) from exc
        hosts, scores = result or ([], [])
        return hosts, scores, self.spec.weight

    def bind(self, pod: Mapping[str, Any], node: str) -> None:
        """``HTTPExtender.Bind``: raises ExtenderError on any failure, ``Error`` included."""
        if not self.spec.bind_verb:
            raise ExtenderError("unexpected empty bindVerb in extender")
        meta = pod.get("metadata") or {}
        args = {"PodName": str(meta.get("name") or ""), "PodNamespace": str(meta.get("namespace") or ""),
                "PodUID": str(meta.get("uid") or ""), "Node": node}
        body, sample = self._send("bind", self.spec.bind_verb, args)
        try:
            error = gojson.decode_binding_result(body)
        except gojson.DecodeError as exc:
            raise self._fail(sample, str(exc)) from exc
        if error:
            raise self._fail(sample, go_errorf(error))

    def process_preemption(self, pod: Mapping[str, Any], victims: Mapping[str, Victims],
                           pods_on_node: Callable[[str], Mapping[str, Mapping[str, Any]] | None]) -> dict[str, Victims]:
        """``HTTPExtender.ProcessPreemption`` + ``convertToVictims``. ``pods_on_node(name)`` gives
        the snapshot's pods of a node by UID, or None for an unknown node."""
        if not self.spec.preempt_verb:
            raise ExtenderError(f"preempt verb is not defined for extender {self.name} but run into ProcessPreemption")
        if self.spec.node_cache_capable:
            meta = {n: {"Pods": [{"UID": _uid(p)} for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
                    for n, v in victims.items()}
            args = {"Pod": strip_type_meta(pod), "NodeNameToVictims": None, "NodeNameToMetaVictims": gojson.go_map(meta)}
        else:
            full = {n: {"Pods": [strip_type_meta(p) for p in v.pods], "NumPDBViolations": v.num_pdb_violations}
                    for n, v in victims.items()}
            args = {"Pod": strip_type_meta(pod), "NodeNameToVictims": gojson.go_map(full), "NodeNameToMetaVictims": None}
        body, sample = self._send("preempt", self.spec.preempt_verb, args)
        try:
            result = gojson.decode_preemption_result(body)
        except gojson.DecodeError as exc:
            raise self._fail(sample, str(exc)) from exc
        out: dict[str, Victims] = {}
        for node_name, mv in (result.node_name_to_meta_victims or {}).items():
            pods = pods_on_node(node_name)
            if pods is None:
                raise self._fail(sample, f'nodeinfo not found for node name "{node_name}"')
            if mv is None:  # convertToVictims reads metaVictims.NumPDBViolations
                raise self._panic(sample, f'extender {self.name} replied a null MetaVictims for node "{node_name}"')
            found: list[Mapping[str, Any]] = []
            for uid in mv.pods or []:
                pod_obj = None if uid is None else pods.get(uid)
                if pod_obj is not None:
                    found.append(pod_obj)
                    continue
                if uid is None and pods:  # convertPodUIDToPod compares metaPod.UID with each pod's
                    raise self._panic(sample, f'extender {self.name} replied a null MetaPod for node "{node_name}"')
                meta_pod = "<nil>" if uid is None else "&{" + uid + "}"  # %v of a *MetaPod
                raise self._fail(sample, f"extender: {self.name} claims to preempt pod (UID: {meta_pod}) on node: "
                                         f"{node_name}, but the pod is not found on that node")
            out[node_name] = Victims(found, mv.num_pdb_violations)
        return out

    @staticmethod
    def _panic(sample: CallSample, what: str) -> SchedulerPanic:
        error = f"{NIL_DEREFERENCE} ({what})"
        sample.ok, sample.error = False, error
        return SchedulerPanic(error)


def build_extenders(specs: Iterable[ExtenderSpec], stats: CallStats | None = None) -> list[HTTPExtender]:
    return [HTTPExtender(s, stats=stats) for s in specs]
