"""Serving with gunicorn: exactly one worker process (it owns the cache, reservations and waiting
room; more workers would each hold a different truth), concurrent inside so binds held in Permit
never block filter and prioritize.

The default worker is gevent: every request is a greenlet, so a 1,000-member gang can wait in
its bind calls at once, and on the measuring machine it answered filter and prioritize ~40%
faster than the threaded worker (see README "Performance"). gunicorn's gevent worker patches the
standard library before the app is built, so the engine's threads, locks and events become
cooperative. It runs as ``FastLaneWorker`` (``extender.api.fastlane``): filter and prioritize
are read and answered straight off the socket, every other request by gunicorn as before.
``gthread`` (a pool of ``threads``, no fast lane) remains available. Both answer in JSON what
gunicorn answers itself, and never read a body over the limit (``extender.api.workers``).

On SIGTERM gunicorn stops accepting, lets the requests in flight finish (``graceful_timeout``),
and the worker calls ``on_exit(app)`` before it exits (gunicorn's ``worker_exit`` hook, in the
worker process that built the app): that is where the app gives up its lease. The master then
exits with status 0."""

from __future__ import annotations

import logging
import signal
import ssl
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication


WORKERS = {"gevent": "extender.api.fastlane.FastLaneWorker", "gthread": "extender.api.workers.ThreadWorker"}
"""gunicorn worker class by configured ``server.worker`` (others: gunicorn's own name)."""


def quit_once(worker: Any) -> None:
    """gunicorn's ``post_worker_init`` hook: the worker quits on the first SIGINT or SIGQUIT and
    ignores the next. Ctrl-C reaches the worker twice - from the terminal, and from the master
    passing the shutdown on - and under gevent each quit signal starts a greenlet that exits the
    process: the second one ran while the interpreter was shutting down and printed a
    ``SystemExit`` traceback."""
    quit_first = worker.handle_quit
    quitting: list[int] = []

    def handle_quit(sig: int, frame: Any) -> None:
        if not quitting:
            quitting.append(sig)
            quit_first(sig, frame)

    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, handle_quit)


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
            "post_worker_init": quit_once,
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
        # A handler garbage-collected while the interpreter tears down makes logging take a lock
        # that gevent's patching can no longer serve: a traceback on every clean exit (gevent
        # issue 2148). Flush the handlers now and drop logging's weak references to them, so
        # nothing of logging runs at teardown; the handlers themselves still work.
        logging.shutdown()
        logging._handlerList.clear()  # type: ignore[attr-defined]
