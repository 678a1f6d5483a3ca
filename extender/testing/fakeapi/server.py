"""The HTTP front end (``ThreadingHTTPServer``) and the :class:`FakeApiServer` test API.

Contract:
    * HTTP/1.1 with keep-alive; every non-watch response has ``Content-Length``. Watches are
      ``200`` + ``Transfer-Encoding: chunked`` with one JSON watch event per line; each line
      (or batch of lines) is flushed as it is produced.
    * A watch ends cleanly (terminating chunk; the connection stays usable) when
      ``timeoutSeconds`` (or the server-wide ``max_watch_timeout``) elapses, when
      :meth:`FakeApiServer.drop_watches` is called, when the server stops, after an ``ERROR``
      event, or when a watcher's queue overflows ``watch_queue_limit``. ``drop_watches(abort=True)``
      instead resets the connection mid-stream (the client sees a protocol error).
      A client that closes its end is noticed within ~0.25 s and its watcher removed.
    * BOOKMARK events are sent every ``bookmark_interval`` seconds to watches that asked for
      them (``allowWatchBookmarks=true``); their ``metadata.resourceVersion`` is the global
      rv up to which the watcher has been sent every matching event.
    * Watch delivery delays (:meth:`FakeApiServer.delay_watches`) hold each event of a watch
      opened by a matching ``User-Agent`` until the delay has passed since the event was
      committed, in order; bookmarks queue behind the held events. A watch that ends (drop,
      stop, timeout) loses the events it still held, as a real dropped connection does.
    * Request processing order: read body -> log :class:`~.faults.RequestRecord` -> injected
      latency -> injected failure/disconnect -> REST handling (-> the answer replaced, for a
      rule of :meth:`FakeApiServer.lose_reply_next`). No exception escapes a request
      thread: unexpected errors become 500 ``InternalError`` Status responses.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Mapping
from urllib.parse import parse_qs, unquote

from . import errors
from .codec import clone, loads
from .errors import ApiError
from .faults import FailureRule, FaultInjector, LatencyRule, RequestRecord, WatchDelayRule
from .resources import BUILTIN_TYPES, KNOWN_CRDS, ResourceType
from .rest import Response, RestApi, WatchStream, error_response
from .selector import parse_field_selector, parse_label_selector
from .objects import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, CommitHook
from .store import Store
from .watch import ERROR, encode_event

if TYPE_CHECKING:  # pragma: no cover
    import kubernetes.client

__all__ = ["FakeApiServer"]

log = logging.getLogger(__name__)

_PATCH_ALIASES = {
    "merge": MERGE_PATCH,
    "strategic": STRATEGIC_MERGE_PATCH,
    "json": JSON_PATCH,
    MERGE_PATCH: MERGE_PATCH,
    STRATEGIC_MERGE_PATCH: STRATEGIC_MERGE_PATCH,
    JSON_PATCH: JSON_PATCH,
}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], fake: "FakeApiServer") -> None:
        self.fake = fake
        self.conns: set[socket.socket] = set()
        self.conns_lock = threading.Lock()
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:  # pragma: no cover - noise only
        log.debug("fake apiserver: connection error from %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver/1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.conns_lock:
            self.server.conns.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            with self.server.conns_lock:
                self.server.conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("fake apiserver: " + format, *args)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = lambda self: self._dispatch()  # noqa: E731

    # ------------------------------------------------------------------ request handling

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        fake = self.server.fake
        raw_path, _, qs = self.path.partition("?")
        path = unquote(raw_path)
        query = parse_qs(qs, keep_blank_values=True)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self._send(error_response(errors.bad_request("malformed request body framing")))
            return
        parsed: Any = None
        if body:
            try:
                parsed = loads(body)
            except (ValueError, UnicodeDecodeError):
                parsed = body
        rec = RequestRecord(self.command, path, query, parsed, headers, peer=self.client_address[:2])
        fake.faults.record(rec)
        delay = fake.faults.delay_for(rec)
        if delay > 0:
            time.sleep(delay)
        rule = fake.faults.take_failure(rec)
        if rule is not None and not rule.after_commit:
            self._fail(rule, rec)
            return
        try:
            result = fake.rest.handle(self.command, path, query, headers, body)
        except Exception as exc:  # noqa: BLE001 - the server must never crash on a request
            log.exception("fake apiserver: unhandled error for %s %s", self.command, self.path)
            result = error_response(errors.internal_error(f"{type(exc).__name__}: {exc}"))
        if rule is not None:  # handled (committed, for a write); only the answer is lost
            if isinstance(result, WatchStream):
                fake.store.unwatch(result.watcher)
            self._fail(rule, rec, committed=True)
            return
        if isinstance(result, WatchStream):
            self._stream(result, rec)
        else:
            rec.status = result.code
            self._send(result)

    def _fail(self, rule: FailureRule, rec: RequestRecord, committed: bool = False) -> None:
        """Answer ``rec`` as ``rule`` says: a disconnect, or its Status error."""
        suffix = "+committed" if committed else ""
        if rule.disconnect:
            rec.status, rec.fault = 0, "disconnect" + suffix
            self._abort()
            return
        rec.fault = "fail" + suffix
        err = ApiError(rule.status, rule.reason, rule.message or f"injected fault ({rule.status})", headers=rule.headers)
        rec.status = err.code
        self._send(error_response(err))

    def _send(self, resp: Response) -> None:
        try:
            self.send_response(resp.code)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(len(resp.body)))
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(resp.body)
        except OSError:
            self.close_connection = True

    def _abort(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------------------ watch streaming

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _stream(self, ws: WatchStream, rec: RequestRecord) -> None:
        fake = self.server.fake
        store = fake.store
        w = ws.watcher
        w.delay = lambda: fake.faults.watch_delay(rec)
        timeout = ws.timeout if ws.timeout is not None else fake.max_watch_timeout
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        interval = fake.bookmark_interval
        next_bookmark = start + interval if ws.bookmarks and interval > 0 else None
        clean = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            self.wfile.flush()
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                reason = w.closed
                if reason is not None and reason not in ("error", "removed"):
                    clean = reason != "abort"
                    break
                wait = 0.25
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if next_bookmark is not None:
                    wait = min(wait, max(0.0, next_bookmark - now))
                items = w.take(wait)
                if items:
                    if w.closed in ("drop", "abort", "stop", "overflow"):
                        continue  # connection is going away: in-flight events are lost, as on a real drop
                    out = []
                    saw_error = False
                    for etype, ev, obj in items:
                        if ev is not None and obj is None:
                            out.append(ev.line(etype))
                        else:
                            assert obj is not None
                            out.append(encode_event(etype, obj))
                        saw_error = saw_error or etype == ERROR
                    self._write_chunk(b"".join(out))
                    if saw_error:
                        break
                elif w.closed in ("error", "removed") and not w.pending():
                    break
                elif self._client_gone():
                    clean = False
                    break
                if next_bookmark is not None and time.monotonic() >= next_bookmark:
                    store.bookmark(w)
                    next_bookmark = time.monotonic() + interval
            if clean:
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._abort()
        except OSError:
            self.close_connection = True
        finally:
            store.unwatch(w)
            rec.status = 200


class FakeApiServer:
    """A fake kube-apiserver on a background thread. See the package docstring for what it emulates.

    Construct, then :meth:`start` (or use as a context manager). Point clients at :attr:`url`,
    a kubeconfig from :meth:`kubeconfig`, or :meth:`api_client`. Test code can read/write the
    store directly (:meth:`create`, :meth:`get`, :meth:`list`, :meth:`update`, :meth:`patch`,
    :meth:`mutate`, :meth:`delete`, :meth:`bind`, :meth:`load_yaml`) — those writes bypass
    admission/validation but produce resourceVersions and watch events like any other write.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history: int = 10_000,
        crds: Iterable[str | ResourceType] = ("podgroups",),
        extra_types: Iterable[ResourceType] = (),
        bookmark_interval: float = 5.0,
        max_watch_timeout: float | None = None,
        watch_queue_limit: int | None = None,
        graceful_pod_deletion: bool = False,
        grace_period_scale: float = 1.0,
        request_log_size: int = 10_000,
        version: tuple[str, str] = ("1", "33"),
    ) -> None:
        self.host = host
        self._port = port
        self.bookmark_interval = bookmark_interval
        self.max_watch_timeout = max_watch_timeout
        self.store = Store(
            tuple(BUILTIN_TYPES) + tuple(extra_types),
            crds=[self._crd_type(c) for c in crds],
            history=history,
            watch_queue_limit=watch_queue_limit,
            graceful_pod_deletion=graceful_pod_deletion,
            grace_period_scale=grace_period_scale,
        )
        self.faults = FaultInjector(request_log_size)
        self.rest = RestApi(self.store, server_address=f"{host}:{port}", version=version)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    @staticmethod
    def _crd_type(c: str | ResourceType) -> ResourceType:
        if isinstance(c, ResourceType):
            return c
        try:
            return KNOWN_CRDS[c]
        except KeyError:
            raise ValueError(f"unknown CRD {c!r}; known: {sorted(set(t.plural for t in KNOWN_CRDS.values()))}") from None

    def start(self) -> "FakeApiServer":
        """Bind and serve on a daemon thread (restartable after :meth:`stop`, same port)."""
        with self._lifecycle:
            if self._httpd is not None:
                return self
            self.store.reopen()
            httpd = _HTTPServer((self.host, self._port), self)
            self._port = httpd.server_address[1]
            self.rest.server_address = f"{self.host}:{self._port}"
            self._httpd = httpd
            self._thread = threading.Thread(
                target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-apiserver:{self._port}", daemon=True
            )
            self._thread.start()
            return self

    def stop(self) -> None:
        """End all watches, close every connection and stop serving. The store is kept."""
        with self._lifecycle:
            httpd, thread = self._httpd, self._thread
            if httpd is None:
                return
            httpd.shutdown()  # stop accepting first, so ended watches cannot reconnect to us
            self.store.close()
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # let watch threads write their final chunk
                if not self.store.registered_watchers():
                    break
                time.sleep(0.01)
            with httpd.conns_lock:
                conns = list(httpd.conns)
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            httpd.server_close()
            if thread is not None:
                thread.join(timeout=5)
            self._httpd = None
            self._thread = None

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (valid after :meth:`start`)."""
        return f"http://{self.host}:{self._port}"

    # ------------------------------------------------------------------ client configuration

    def kubeconfig(self, path: str | os.PathLike[str], *, namespace: str = "default", context: str = "fake") -> str:
        """Write a kubeconfig (no auth, plain http) for ``kubernetes.config.load_kube_config``."""
        import yaml

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
            "current-context": context,
            "preferences": {},
        }
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return str(p)

    def configuration(self) -> "kubernetes.client.Configuration":
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return cfg

    def api_client(self) -> "kubernetes.client.ApiClient":
        """A ``kubernetes.client.ApiClient`` talking to this server (caller closes it)."""
        from kubernetes import client

        return client.ApiClient(self.configuration())

    # ------------------------------------------------------------------ direct store API

    def resource_type(self, kind: str, api_version: str | None = None) -> ResourceType:
        """Resolve ``"Pod"``, ``"pods"``, ``"po"``, ``"leases.coordination.k8s.io"``, ..."""
        return self.store.resolve(kind, api_version)

    def _rt_of(self, obj: Mapping[str, Any]) -> ResourceType:
        kind = obj.get("kind")
        if not kind:
            raise ValueError("object has no 'kind'")
        return self.store.resolve(str(kind), obj.get("apiVersion"))

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self.store.resource_version

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Store a new object (kind/apiVersion taken from ``obj``); returns a copy as stored."""
        rt = self._rt_of(obj)
        stored = self.store.create(rt, namespace or (obj.get("metadata") or {}).get("namespace"), clone(dict(obj)), admit=False)
        return clone(stored)

    def create_many(self, objs: Iterable[Mapping[str, Any]], *, copy: bool = True) -> int:
        """Bulk :meth:`create` (one lock acquisition, nothing returned) for large seeds.

        ``copy=False`` hands the dicts over to the store (faster; the caller must not touch
        them afterwards).
        """
        src = (clone(dict(o)) for o in objs) if copy else (o if isinstance(o, dict) else dict(o) for o in objs)
        return self.store.create_many(self._rt_of, src)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of the stored object, or ``None``."""
        obj = self.store.find(self.resource_type(kind), namespace, name)
        return None if obj is None else clone(obj)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Copies of the stored objects in (namespace, name) order."""
        rt = self.resource_type(kind)
        res = self.store.list(rt, namespace, parse_label_selector(label_selector), parse_field_selector(field_selector))
        return clone(res.items)

    def update(self, obj: Mapping[str, Any], *, check_resource_version: bool = False) -> dict[str, Any]:
        """Replace an object wholesale (status included). ``check_resource_version`` -> 409 if stale."""
        rt = self._rt_of(obj)
        meta = obj.get("metadata") or {}
        body = clone(dict(obj))
        if not check_resource_version:
            body.setdefault("metadata", {}).pop("resourceVersion", None)
        stored, _ = self.store.replace(rt, meta.get("namespace"), meta["name"], body, admit=False,
                                       check_resource_version=check_resource_version)
        return clone(stored)

    def patch(
        self, kind: str, namespace: str | None, name: str, patch: Any, patch_type: str = "strategic"
    ) -> dict[str, Any]:
        """Patch directly (``patch_type``: ``merge``, ``strategic``, ``json`` or a media type)."""
        rt = self.resource_type(kind)
        stored = self.store.patch(rt, namespace, name, _PATCH_ALIASES[patch_type], patch, admit=False)
        return clone(stored)

    def mutate(self, kind: str, namespace: str | None, name: str, fn: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        """Read-modify-write under the store lock: ``fn`` edits a copy in place."""
        rt = self.resource_type(kind)
        with self.store._lock:
            cur = clone(self.store.get(rt, namespace, name))
            fn(cur)
            stored, _ = self.store.replace(rt, namespace, name, cur, admit=False, check_resource_version=False)
        return clone(stored)

    def delete(self, kind: str, namespace: str | None, name: str, *, missing_ok: bool = True) -> dict[str, Any] | None:
        """Remove an object immediately (finalizers are honoured: they only set deletionTimestamp)."""
        rt = self.resource_type(kind)
        try:
            return clone(self.store.delete(rt, namespace, name, admit=False))
        except ApiError as err:
            if err.code == 404 and missing_ok:
                return None
            raise

    def bind(self, namespace: str, name: str, node: str) -> dict[str, Any]:
        """Bind a pod as the binding subresource would (same conflicts); returns the pod."""
        return clone(self.store.bind(namespace, name, {"target": {"kind": "Node", "name": node}}))

    def load_yaml(self, source: str | os.PathLike[str]) -> List[dict[str, Any]]:
        """Seed objects from a file path or YAML text (multi-document and/or ``*List`` kinds)."""
        import yaml

        text: str
        if isinstance(source, os.PathLike) or ("\n" not in str(source) and os.path.exists(str(source))):
            text = Path(source).read_text()
        else:
            text = str(source)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        out: list[dict[str, Any]] = []
        for doc in yaml.load_all(text, Loader=loader):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise ValueError(f"YAML document is not an object: {doc!r}")
            kind = str(doc.get("kind", ""))
            if kind.endswith("List") and isinstance(doc.get("items"), list):
                item_kind = kind[: -len("List")]
                for item in doc["items"]:
                    item = dict(item)
                    if kind != "List":
                        item.setdefault("kind", item_kind)
                        item.setdefault("apiVersion", doc.get("apiVersion"))
                    out.append(self.create(item))
            else:
                out.append(self.create(doc))
        return out

    def enable_crd(self, crd: str | ResourceType) -> ResourceType:
        """Install a CRD at runtime (its group appears in discovery, its paths stop 404-ing)."""
        rt = self._crd_type(crd)
        self.store.enable_type(rt)
        return rt

    def disable_crd(self, crd: str | ResourceType) -> None:
        """Uninstall a CRD: its objects are deleted, its watches end, its paths 404."""
        self.store.disable_type(self._crd_type(crd))

    def sync_pdb_status(self) -> int:
        """Write live disruption status into every PDB (an instant disruption controller)."""
        return self.store.sync_pdb_status()

    # ------------------------------------------------------------------ faults

    def fail_next(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        *,
        count: int | None = 1,
        reason: str | None = None,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> FailureRule:
        """Answer the next ``count`` requests matching (method, path regex) with a ``status`` Status.

        ``count=None`` fails every matching request until ``rule.remove()``/:meth:`clear_faults`.
        """
        import re

        return self.faults.add_failure(FailureRule(
            method, re.compile(path), count, predicate, status=status, reason=reason, message=message,
            headers=dict(headers or {}),
        ))

    def disconnect_next(
        self,
        method: str | None,
        path: str,
        *,
        count: int | None = 1,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> FailureRule:
        """Close the connection without answering the next ``count`` matching requests."""
        import re

        return self.faults.add_failure(FailureRule(method, re.compile(path), count, predicate, status=0, disconnect=True))

    def lose_reply_next(
        self,
        method: str | None,
        path: str,
        status: int = 0,
        *,
        count: int | None = 1,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> FailureRule:
        """Handle the next ``count`` matching requests (a write is committed, its watch events
        sent) and then lose the answer: close the connection (``status=0``) or answer with a
        ``status`` Status instead (504: kube-apiserver's "the request may have succeeded")."""
        import re

        return self.faults.add_failure(FailureRule(method, re.compile(path), count, predicate, status=status,
                                                   disconnect=status == 0, after_commit=True))

    def add_latency(
        self,
        method: str | None,
        path: str,
        seconds: float,
        *,
        count: int | None = None,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> LatencyRule:
        """Delay matching requests by ``seconds`` (all of them, or the next ``count``)."""
        import re

        return self.faults.add_latency(LatencyRule(method, re.compile(path), count, predicate, seconds=seconds))

    def delay_watches(self, user_agent: str, delay: float | Callable[[], float], *,
                      path: str | None = None) -> WatchDelayRule:
        """Hold every watch event sent to clients whose ``User-Agent`` starts with ``user_agent``
        (on paths matching the regex ``path``, if given) until ``delay`` seconds after the event
        was committed: a number, or a callable asked once per event (jitter). Order is kept:
        an event waits for the one ahead of it. Applies to watches already open too; all
        matching rules add up. ``rule.remove()`` (or :meth:`clear_faults`) ends it::

            api.delay_watches("kube-scheduler", 0.3)                      # informer 300 ms behind
            api.delay_watches("kube-extender", lambda: rng.uniform(0.1, 0.2))
        """
        import re

        return self.faults.add_watch_delay(WatchDelayRule(user_agent, delay, re.compile(path) if path else None))

    def on_commit(self, hook: CommitHook) -> Callable[[], None]:
        """Call ``hook(kind, type, obj, prev)`` synchronously on every committed write (see
        :mod:`.store`); returns a function that removes the hook."""
        return self.store.add_commit_hook(hook)

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self, kind: str | None = None, *, abort: bool = False) -> int:
        """End every open watch (of ``kind``) now; returns how many. See the module docstring."""
        return self.store.drop_watches(self.resource_type(kind) if kind else None, abort=abort)

    def compact(self, resource_version: int | None = None) -> int:
        """Drop event history up to ``resource_version`` (default: all); older watches get 410."""
        return self.store.compact(resource_version)

    def requests(
        self,
        method: str | None = None,
        path: str | None = None,
        predicate: Callable[[RequestRecord], bool] | None = None,
    ) -> List[RequestRecord]:
        """Logged requests filtered by method and path regex (oldest first)."""
        return self.faults.requests(method, path, predicate)

    def request_counts(self) -> dict[tuple[str, str, str], int]:
        """Logged requests counted by (User-Agent, verb, resource), e.g.
        ``("kube-scheduler/v1.30.0", "create", "pods/binding")``."""
        counts: dict[tuple[str, str, str], int] = {}
        for r in self.faults.requests():
            key = (r.user_agent, r.verb, r.resource)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def clear_requests(self) -> None:
        self.faults.clear_log()

    def watch_count(self, kind: str | None = None) -> int:
        """Number of open watches (of ``kind``)."""
        return len(self.store.watchers(self.resource_type(kind) if kind else None))

    def wait_for_watchers(self, n: int = 1, kind: str | None = None, timeout: float = 5.0) -> bool:
        """Block until at least ``n`` watches (of ``kind``) are open; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.watch_count(kind) >= n:
                return True
            time.sleep(0.01)
        return self.watch_count(kind) >= n
