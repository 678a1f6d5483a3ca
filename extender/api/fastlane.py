"""The fast lane: the gevent worker, every connection served by ``extender.api.http1``.

gunicorn's own gevent worker spent ~0.15 ms of pure Python on each request outside the app (its
request parser, the WSGI environ, response-header checks) and wrote the status line and the body
in two sends; for filter and prioritize, which kube-scheduler calls one after the other for every
pod, that was a third of the latency the extender added. ``FastLaneWorker`` is a gunicorn worker
class of its own instead: gunicorn manages the process (forking, the master's timeout, signals,
the server hooks), the worker serves the listeners with public gevent (``StreamServer``, one
greenlet per connection), and each connection reads its requests with httptools and answers a
POST to a verb with ``Verbs.answer`` directly, anything else with the Flask app (see
``extender.api.http1``).

It relies on what gunicorn documents of a custom worker - a subclass of
``gunicorn.workers.base.Worker`` that overrides ``init_process()`` (calling the base last) and
``run()``, and calls ``notify()`` at least every ``timeout`` seconds - on the constructor's
arguments (``sockets``, ``cfg``, ``log``, ``ppid``, ``timeout``), on the documented settings and
server hooks (``worker_int``, ``ssl_context``), and on the app ``load_wsgi()`` leaves in ``wsgi``.
Its own signal handlers:

* TERM: graceful - stop accepting, close idle keep-alive connections, let requests in flight
  finish (each then closes its connection) for up to ``graceful_timeout`` seconds (the worker's:
  ``extender.server.DRAIN_TIMEOUT``; the master waits longer, for the app's close after it);
* INT, QUIT: quick - the ``worker_int`` hook, then the worker exits; a second one is ignored
  (Ctrl-C reaches the worker twice: from the terminal, and from the master passing it on);
* USR1: reopen the log files (in the run loop: no locks taken in a signal handler).

They replace the base class's in ``init_signals()``, which the base ``init_process()`` calls
before it builds the app, so a SIGTERM while the app loads is not lost. That override is the one
step off the documented list (``run()`` comes too late for it; gunicorn's own ASGI worker, uvicorn's
and aiohttp's override it too); the unit tests call the handlers, the integration tests send
the signals, on every gunicorn version setup.cfg allows.

``max_requests`` (with its jitter) restarts the worker gracefully as gunicorn's do. gunicorn's
``pre_request``/``post_request`` hooks and its access log take gunicorn's own request objects,
which this worker does not make: they are not called (kube-extender logs each verb request).
The worker speaks HTTP/1.1 (and 1.0), with TLS when ``certfile`` is set; it refuses to boot on
settings asking for anything else (HTTP/2, the PROXY protocol, uWSGI).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import time
from typing import Any

import gevent
from gevent.pool import Pool
from gevent.server import StreamServer
from gunicorn.workers.base import Worker

from extender.api.http1 import Connection, Limits, base_environ
from extender.api.routes import VerbShortcut


class FastLaneWorker(Worker):  # type: ignore[misc]
    """gunicorn worker serving each connection in a greenlet (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stopping = False
        """TERM, or max_requests reached: finish what is in flight, then exit."""
        self._quitting = False
        """INT or QUIT: exit now."""
        self._reopen = False
        self._connections: set[Connection] = set()
        cfg = self.cfg
        self._left = (cfg.max_requests + random.randint(0, max(0, cfg.max_requests_jitter))
                      if cfg.max_requests > 0 else 0)
        """Requests to answer before a graceful restart (0: no limit)."""

    def init_signals(self) -> None:
        super().init_signals()
        for signum, handler in ((signal.SIGTERM, self._on_term), (signal.SIGINT, self._on_quit),
                                (signal.SIGQUIT, self._on_quit), (signal.SIGUSR1, self._on_usr1)):
            signal.signal(signum, handler)

    def init_process(self) -> None:
        from gevent import monkey

        # Before the app is built (in super().init_process()): the engine's threads, locks and
        # events become cooperative, as under gunicorn's own gevent worker.
        monkey.patch_all()
        gevent.reinit()  # the hub after fork
        refused = unspoken(self.cfg)
        if refused:
            raise RuntimeError(f"FastLaneWorker does not speak {refused}: use another worker class")
        super().init_process()

    def run(self) -> None:
        cfg = self.cfg
        shortcut = getattr(self.wsgi, "wsgi_app", None)
        self._verbs = shortcut.verbs if isinstance(shortcut, VerbShortcut) else None
        self._limits = Limits(cfg.limit_request_line, cfg.limit_request_fields, cfg.limit_request_field_size,
                              shortcut.limit if isinstance(shortcut, VerbShortcut) else 0)
        self._tls = tls_context(cfg) if cfg.certfile else None
        servers = []
        for listener in self.sockets:
            sock = socket.socket(fileno=os.dup(listener.fileno()))  # gevent's socket (patched)
            name = sock.getsockname()
            host, port = (name[0], name[1]) if isinstance(name, tuple) else (str(name), 0)
            environ = base_environ(host, port, "https" if self._tls else "http")
            server = StreamServer(sock, handle=lambda client, addr, env=environ: self._serve(client, addr, env),
                                  spawn=Pool(cfg.worker_connections))
            server.start()
            servers.append(server)
        if self._verbs is not None:
            self.log.info("Fast lane for %s", ", ".join(sorted(self._verbs.kinds)))
        while not (self._stopping or self._quitting):
            self._tick()
            self._sweep()
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                break
            gevent.sleep(1.0)
        for server in servers:
            server.close()  # stop accepting
        if self._quitting:
            return
        self._stopping = True
        deadline = time.monotonic() + cfg.graceful_timeout
        while time.monotonic() < deadline and any(len(s.pool) for s in servers):
            for connection in list(self._connections):
                connection.close_if_idle()
            self._tick()
            gevent.sleep(0.1)
        if any(len(s.pool) for s in servers):
            self.log.warning("Worker graceful timeout (pid:%s)", os.getpid())
            for server in servers:
                server.stop(timeout=1)

    def _sweep(self) -> None:
        """End the connections that waited on their client longer than the keep-alive timeout
        (gunicorn's ``timeout`` without keep-alive), about once a second: a connection waits
        without a timer of its own (``Connection.expire``)."""
        now = time.monotonic()
        limit = self.cfg.keepalive or self.cfg.timeout
        for connection in list(self._connections):
            connection.expire(now, limit, limit)

    def _tick(self) -> None:
        self.notify()
        if self._reopen:
            self._reopen = False
            self.log.reopen_files()

    def _on_term(self, signum: int, frame: Any) -> None:
        self._stopping = True

    def _on_quit(self, signum: int, frame: Any) -> None:
        if not self._quitting:
            self._quitting = True
            self.cfg.worker_int(self)

    def _on_usr1(self, signum: int, frame: Any) -> None:
        self._reopen = True

    def _answered(self) -> bool:
        """One more request answered: False once the worker stops or restarts (max_requests)."""
        if self._left:
            self._left -= 1
            if not self._left:
                self.log.info("Autorestarting worker after current request.")
                self._stopping = True
        return not (self._stopping or self._quitting)

    def _serve(self, client: Any, addr: Any, environ: dict[str, Any]) -> None:
        """One connection, in its own greenlet, until it closes."""
        connection = None
        try:
            if self._tls is not None:
                client.settimeout(self.cfg.keepalive or self.cfg.timeout)  # for the handshake
                client = self._tls.wrap_socket(client, server_side=True, do_handshake_on_connect=False,
                                               suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
                client.do_handshake()
            client.settimeout(None)  # the sweep ends connections that wait too long (_sweep)
            connection = Connection(client, addr, self.wsgi, self._verbs, self._limits, environ, self._answered,
                                    keepalive=self.cfg.keepalive > 0, turn=gevent.sleep)
            self._connections.add(connection)
            connection.serve()
        except (OSError, gevent.GreenletExit) as exc:  # the client left, TLS failed, or the worker stops
            self.log.debug("connection ended: %s", exc)
        except Exception:  # noqa: BLE001 - a bug here closes this connection, never the worker
            self.log.exception("Error handling request")
        finally:
            self._connections.discard(connection)  # type: ignore[arg-type]
            client.close()


def unspoken(cfg: Any) -> str:
    """What gunicorn settings ``cfg`` ask for that the worker does not speak ("" when nothing)."""
    if "h2" in (getattr(cfg, "http_protocols", None) or ()):
        return "HTTP/2"
    if getattr(cfg, "protocol", "http") != "http":
        return f"the {cfg.protocol} protocol"
    if getattr(cfg, "proxy_protocol", "off") not in ("off", False, None):
        return "the PROXY protocol"
    return ""


def tls_context(cfg: Any) -> ssl.SSLContext:
    """The TLS context of gunicorn settings ``cfg`` (certfile, keyfile, ca_certs, cert_reqs,
    ciphers), through the documented ``ssl_context`` hook as gunicorn's workers build it."""

    def default() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cfg.ca_certs)
        context.load_cert_chain(certfile=cfg.certfile, keyfile=cfg.keyfile)
        context.verify_mode = cfg.cert_reqs
        if cfg.ciphers:
            context.set_ciphers(cfg.ciphers)
        return context

    return cfg.ssl_context(cfg, default)  # type: ignore[no-any-return]
