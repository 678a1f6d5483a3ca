"""Serving with gunicorn: exactly one worker process (it owns the cache, reservations and waiting
room; more workers would each hold a different truth), concurrent inside so binds held in Permit
never block filter and prioritize.

The default worker is gevent: every connection is a greenlet, so a 1,000-member gang can wait in
its bind calls at once, and on the measuring machine it answered filter and prioritize ~40%
faster than the threaded worker (see benchmarks/README.md). The worker patches the
standard library before the app is built, so the engine's threads, locks and events become
cooperative. It runs as ``FastLaneWorker`` (``extender.api.fastlane``), a worker class of its
own: every request is read off the socket with httptools, the verbs answered straight from
there, everything else by the Flask app. ``gthread`` (a pool of ``threads``, gunicorn's HTTP)
remains available. Both answer in JSON what their HTTP layer refuses, and never read a body
over the limit (``extender.api.http1``, ``extender.api.workers``).

On SIGTERM gunicorn stops accepting, the worker lets the requests in flight finish (for up to
``DRAIN_TIMEOUT``) and then calls ``on_exit(app, CLOSE_TIMEOUT)`` before it exits (gunicorn's
``worker_exit`` hook, in the worker process that built the app): that is where the app gives up its
lease. The master waits for the worker for the sum of both and ``EXIT_MARGIN`` before it kills it,
then exits with status 0. gunicorn has one ``graceful_timeout`` for both: the master's is that
sum, and each worker sets its own copy to ``DRAIN_TIMEOUT`` right after the fork (``post_fork``),
so the drain ends in time for ``on_exit``.

With ``certFile`` set the worker loads the certificate and key only once it serves: ``tls_problems``
loads them the same way before anything forks, so that ``serve`` can refuse unusable files in
one line instead of a worker failing on them (and being restarted) for ever."""

from __future__ import annotations

import logging
import ssl
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

from extender.config.model import TlsConfig

DRAIN_TIMEOUT = 10
"""Seconds a stopping worker lets the requests in flight finish; then it ends them."""
CLOSE_TIMEOUT = 10
"""Seconds ``on_exit`` is given to close the app, once the worker no longer answers."""
EXIT_MARGIN = 3
"""Seconds for the rest of a worker's way out: ending the requests the drain left (up to 1 s in
the fast lane), flushing the logs, the interpreter's exit."""
STOP_TIMEOUT = DRAIN_TIMEOUT + CLOSE_TIMEOUT + EXIT_MARGIN
"""Seconds the master waits for its worker after SIGTERM before it kills it (gunicorn's
``graceful_timeout`` in the master): a stop takes no longer."""

WORKERS = {"gevent": "extender.api.fastlane.FastLaneWorker", "gthread": "extender.api.workers.ThreadWorker"}
"""gunicorn worker class by configured ``server.worker`` (others: gunicorn's own name)."""


class ExtenderServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, app_factory: Callable[[], Flask], *, host: str, port: int, threads: int,
                 log_level: str = "info", cert_file: str = "", key_file: str = "", client_ca_file: str = "",
                 worker: str = "gevent", connections: int = 2000,
                 on_exit: Callable[[Flask, float], None] | None = None, drain_timeout: int = DRAIN_TIMEOUT,
                 close_timeout: int = CLOSE_TIMEOUT, extra: dict[str, Any] | None = None) -> None:
        """``on_exit(app, seconds)``: called in the worker once it no longer answers; it should
        return within ``seconds`` (``close_timeout``). ``drain_timeout``: how long a stopping
        worker lets requests in flight finish; the master kills a worker still running
        ``drain_timeout + close_timeout + EXIT_MARGIN`` seconds after SIGTERM (whole seconds:
        gunicorn's ``graceful_timeout`` is an integer)."""
        self.app_factory = app_factory
        self.on_exit = on_exit
        self.drain_timeout = drain_timeout
        self.close_timeout = close_timeout
        self.app: Flask | None = None  # built in the worker process (preload_app is off)
        tls: dict[str, Any] = {}
        if cert_file:
            tls = {"certfile": cert_file, "keyfile": key_file}
            if client_ca_file:
                tls.update(ca_certs=client_ca_file, cert_reqs=ssl.CERT_REQUIRED)
        self.options = {
            "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "workers": 1,
            "worker_class": WORKERS.get(worker, worker),
            "threads": threads,
            "worker_connections": connections,
            "timeout": 60,
            "graceful_timeout": drain_timeout + close_timeout + EXIT_MARGIN,  # the master's; the worker's: post_fork
            "keepalive": 90,
            "loglevel": log_level,
            "accesslog": None,
            "preload_app": False,
            "control_socket_disable": True,  # gunicorn's control socket is one shared path per user
            "post_fork": self._post_fork,
            "worker_exit": self._worker_exit,
            **tls,
            **(extra or {}),
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        self.app = self.app_factory()
        return self.app

    def _post_fork(self, arbiter: Any, worker: Any) -> None:
        """In the new worker process, before it boots: its drain is ``drain_timeout``. The
        settings are this process's copy; the master keeps waiting the whole stop."""
        worker.cfg.set("graceful_timeout", self.drain_timeout)

    def _worker_exit(self, arbiter: Any, worker: Any) -> None:
        if self.app is None:  # the master, told that a worker is gone
            return
        if self.on_exit is not None:
            self.on_exit(self.app, self.close_timeout)
        # A handler garbage-collected while the interpreter tears down makes logging take its
        # module lock, which gevent's patching can no longer serve by then: a traceback on every
        # clean exit (gevent issue 2148). Handlers that live as long as their module do - Flask's
        # default_handler, any library's - are collected only then, whatever the app removes or
        # closes. logging has no public way to forget a handler that is still alive (close()
        # and shutdown() leave its entry in the private _handlerList, whose weak reference
        # callback takes the lock), so: flush and close every handler now, then drop logging's
        # weak references to them; the handlers themselves still work.
        logging.shutdown()
        logging._handlerList.clear()  # type: ignore[attr-defined]


class _Encrypted(Exception):
    """The private key asks for a passphrase."""


def _no_passphrase() -> bytes:
    raise _Encrypted


def tls_problems(tls: TlsConfig) -> list[tuple[str, str]]:
    """Why the server could not serve HTTPS with ``tls``, as (key path, message) pairs for a
    ``ConfigError``: a file that cannot be read; no PEM certificate in ``certFile`` or
    ``clientCAFile``; no PEM private key in ``keyFile``, or one that does not match the
    certificate, or one encrypted (the server has no passphrase to give). Empty when TLS is off
    or the files load into an ``ssl.SSLContext`` as the workers load them."""
    if not tls.enabled:
        return []
    problems: list[tuple[str, str]] = []
    files = [("server.tls.certFile", tls.cert_file), ("server.tls.keyFile", tls.key_file)]
    if tls.client_ca_file:
        files.append(("server.tls.clientCAFile", tls.client_ca_file))
    unusable: set[str] = set()
    for key, path in files:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            problems.append((key, f"cannot read {path}: {exc.strerror or exc}"))
            unusable.add(key)
    for key, path in files:
        if key == "server.tls.keyFile" or key in unusable:
            continue
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=path)
        except ssl.SSLError as exc:
            problems.append((key, f"no PEM certificate in {path}" if exc.reason == "NO_CERTIFICATE_OR_CRL_FOUND"
                             else f"cannot load the certificates in {path}: {exc.reason or exc}"))
            unusable.add(key)
    if not unusable & {"server.tls.certFile", "server.tls.keyFile"}:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls.cert_file, tls.key_file,
                                                                     password=_no_passphrase)
        except _Encrypted:
            problems.append(("server.tls.keyFile", f"the private key in {tls.key_file} is encrypted: the server "
                                                   "has no passphrase for it"))
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                reason = f"the private key in {tls.key_file} does not match the certificate in {tls.cert_file}"
            elif exc.reason is None:  # OpenSSL's "PEM lib": the certificate was read, the key was not
                reason = f"no PEM private key in {tls.key_file}"
            else:
                reason = f"cannot use the private key in {tls.key_file} with the certificate in {tls.cert_file}: " \
                         f"{exc.reason}"
            problems.append(("server.tls.keyFile", reason))
    order = [key for key, _ in files]
    return sorted(problems, key=lambda problem: order.index(problem[0]))
