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

On SIGTERM gunicorn stops accepting, lets the requests in flight finish (``graceful_timeout``),
and the worker calls ``on_exit(app)`` before it exits (gunicorn's ``worker_exit`` hook, in the
worker process that built the app): that is where the app gives up its lease. The master then
exits with status 0."""

from __future__ import annotations

import logging
import ssl
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication


WORKERS = {"gevent": "extender.api.fastlane.FastLaneWorker", "gthread": "extender.api.workers.ThreadWorker"}
"""gunicorn worker class by configured ``server.worker`` (others: gunicorn's own name)."""


class ExtenderServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, app_factory: Callable[[], Flask], *, host: str, port: int, threads: int,
                 log_level: str = "info", cert_file: str = "", key_file: str = "", client_ca_file: str = "",
                 worker: str = "gevent", connections: int = 2000, on_exit: Callable[[Flask], None] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.app_factory = app_factory
        self.on_exit = on_exit
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
            "graceful_timeout": 10,
            "keepalive": 90,
            "loglevel": log_level,
            "accesslog": None,
            "preload_app": False,
            "control_socket_disable": True,  # gunicorn's control socket is one shared path per user
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

    def _worker_exit(self, arbiter: Any, worker: Any) -> None:
        if self.app is None:  # the master, told that a worker is gone
            return
        if self.on_exit is not None:
            self.on_exit(self.app)
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
