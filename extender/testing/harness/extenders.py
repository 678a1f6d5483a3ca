"""kube-extender replicas for a harness run, and the "Service" kube-scheduler reaches them through.

* :class:`InProcessExtender`: the production wiring (``extender.app.create_kube_app``: list+watch
  source, fenced writer, events, leader election when configured) in this process, against the
  fake API server through a kubeconfig; its verbs are called in-process (``AppTransport``).
  Cheap to start (well under a second); ``kill()`` stops it without releasing its lease.
* :class:`ProcessExtender`: ``kube-extender serve --cluster kube --kubeconfig F --config F
  --port P`` as a real process (gunicorn master + worker, its own session), reached over HTTP.
  ``kill()`` sends SIGKILL to its whole process group (a crash); ``start()`` again restarts it on
  the same port. Takes a few seconds to start.
* :class:`ServiceTransport`: what kube-scheduler's ``urlPrefix`` points at with several
  replicas - a Service whose endpoints are the *ready* replicas (``/readyz`` 200: synced and,
  with leader election, leading). A prober refreshes readiness every ``probe_period``
  seconds, like a readiness probe feeding the endpoints; a call goes to the first ready replica,
  or fails like a connection to a Service without endpoints.

Every replica's client identifies itself as ``kube-extender/<version>`` (the extender's default
User-Agent), so watch delays and request counts for "kube-extender" cover all replicas.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

import yaml

from extender.app import create_kube_app
from extender.config.model import parse_config
from extender.sim.client import AppTransport, HTTPTransport, RawResponse, Transport, TransportError
from extender.testing.fakeapi import FakeApiServer

CONFIG_HEADER = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica(Protocol):
    """One extender replica as the harness drives it."""

    name: str

    @property
    def base_url(self) -> str:
        """``scheme://host:port`` the replica serves on."""

    @property
    def transport(self) -> Transport: ...

    def start(self) -> None: ...

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM for a process; an in-process leader releases its lease)."""

    def kill(self) -> None:
        """Die at once, as a crash does (the lease is left to expire)."""

    def ready(self) -> bool:
        """``/readyz`` answers 200 now."""


def _probe(transport: Transport, base_url: str) -> bool:
    try:
        return transport.get(base_url + "/readyz", timeout=1.0).status == 200
    except (TransportError, OSError):
        return False


class InProcessExtender:
    """See the module docstring. ``config``: an ExtenderConfiguration mapping (apiVersion and kind
    may be left out)."""

    def __init__(self, api: FakeApiServer, config: Mapping[str, Any], *, name: str, workdir: Path) -> None:
        self.name = name
        self.config = parse_config({**CONFIG_HEADER, **config})
        self.kubeconfig = api.kubeconfig(Path(workdir) / f"{name}.kubeconfig")
        self.app: Any = None
        self._transport: AppTransport | None = None
        self.starts = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.name}.in-process"

    @property
    def state(self) -> Any:
        """The running app's ``ExtenderState`` (engine, cache, admitter, nudger, leader, ...)."""
        return self.app.extensions["kube_extender"] if self.app is not None else None

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError(f"extender {self.name} is not running")
        return self._transport

    def start(self) -> None:
        if self.app is not None:
            return
        self.app = create_kube_app(self.config, kubeconfig=self.kubeconfig)
        self._transport = AppTransport(self.app)
        self.starts += 1

    def _shutdown(self, release: bool) -> None:
        state = self.state
        if state is None:
            return
        self.app, self._transport = None, None
        state.close(release=release)

    def stop(self) -> None:
        self._shutdown(release=True)

    def kill(self) -> None:
        """As a crash: no more writes from this replica (verbs still running in other threads
        fail theirs, as a dead process's would never be sent), and the lease left to expire."""
        state = self.state
        if state is not None:
            state.writer.may_write = lambda: False
        self._shutdown(release=False)

    def ready(self) -> bool:
        transport = self._transport
        return transport is not None and _probe(transport, self.base_url)


class ProcessExtender:
    """See the module docstring. The log (stdout and stderr of every start) is ``<workdir>/<name>.log``."""

    def __init__(self, api: FakeApiServer, config: Mapping[str, Any], *, name: str, workdir: Path,
                 port: int | None = None, executable: str | Path | None = None) -> None:
        """``executable``: the ``kube-extender`` to run (default: the one installed next to this
        Python), e.g. another installation's, to measure another version with the same harness."""
        self.name = name
        self.executable = Path(executable) if executable else Path(sys.executable).parent / "kube-extender"
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.kubeconfig = api.kubeconfig(self.workdir / f"{name}.kubeconfig")
        self.config_file = self.workdir / f"{name}.yaml"
        self.config_file.write_text(yaml.safe_dump({**CONFIG_HEADER, **config}, sort_keys=False))
        parse_config({**CONFIG_HEADER, **config})  # a bad configuration fails here, not in the child
        self.log_file = self.workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._transport = HTTPTransport()
        self.starts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def transport(self) -> Transport:
        return self._transport

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        runtime_dir = self.workdir / f"{self.name}.run"
        runtime_dir.mkdir(exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.executable), "serve", "--cluster", "kube", "--kubeconfig", self.kubeconfig, "--config",
                 str(self.config_file), "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)})
        self.starts += 1

    def _signal(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)  # the gunicorn master and its worker: the group we started
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is None:
            return
        self._transport.close()  # idle keep-alive connections would hold gunicorn's graceful shutdown
        self._signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the process group; returns once the port refuses connections (the worker's
        death, a child of the master, is noticed a moment after the master's)."""
        proc = self.proc
        if proc is None:
            return
        self._signal(signal.SIGKILL)
        proc.wait()
        self._transport.close()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                return
            time.sleep(0.02)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def ready(self) -> bool:
        return self.pid is not None and _probe(self._transport, self.base_url)


class ServiceTransport:
    """See the module docstring. Thread-safe; ``close()`` stops the prober."""

    def __init__(self, replicas: Sequence[Replica], probe_period: float = 0.05) -> None:
        self.replicas = list(replicas)
        self.probe_period = probe_period
        self._ready: list[Replica] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.probe()
        self._thread = threading.Thread(target=self._loop, name="service-prober", daemon=True)
        self._thread.start()

    def probe(self) -> list[str]:
        """Probe every replica now; returns the names of the ready ones (the endpoints)."""
        ready = [r for r in self.replicas if r.ready()]
        with self._lock:
            self._ready = ready
        return [r.name for r in ready]

    def endpoints(self) -> list[str]:
        with self._lock:
            return [r.name for r in self._ready]

    def _loop(self) -> None:
        while not self._stop.wait(self.probe_period):
            self.probe()

    def _route(self, url: str) -> tuple[Transport, str]:
        with self._lock:
            ready = list(self._ready)
        for replica in ready:
            try:
                transport = replica.transport
            except RuntimeError:  # stopped since the last probe
                continue
            parts = urlsplit(url)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            return transport, replica.base_url + path
        raise TransportError(f'Post "{url}": dial tcp: connect: connection refused (no ready extender replica)')

    def post(self, url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float) -> RawResponse:
        transport, target = self._route(url)
        return transport.post(target, body, headers, timeout)

    def get(self, url: str, timeout: float = 5.0) -> RawResponse:
        transport, target = self._route(url)
        return transport.get(target, timeout)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
