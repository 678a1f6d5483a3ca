"""The real server, ``kube-extender serve --cluster FILE``, as a subprocess in its own session,
with ``server.worker`` and ``server.maxRequestBytes`` chosen by the fuzz."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from http_calls import free_port
from wire_fuzz import TESTS
from wire_fuzz.bodies import LIMIT
from wire_fuzz.client import Conn, Reply

CLUSTER = TESTS / "integration" / "data" / "fuzz-cluster.yaml"


def _executable() -> list[str]:
    beside = Path(sys.executable).parent / "kube-extender"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("kube-extender")
    return [found] if found else [sys.executable, "-m", "extender.cli"]


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


class Server:
    """``kube-extender serve --cluster FILE`` with ``server.worker: WORKER`` as a subprocess of
    its own session (so it and its worker can always be stopped)."""

    def __init__(self, worker: str, workdir: Path, cluster: Path = CLUSTER, limit: int = LIMIT) -> None:
        self.worker = worker
        self.workdir = workdir
        self.cluster = cluster
        self.limit = limit
        self.log_path = workdir / f"server-{worker}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 30.0) -> Server:
        config = self.workdir / f"config-{self.worker}.yaml"
        config.write_text("apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
                          f"server: {{worker: {self.worker}, maxRequestBytes: {self.limit}}}\n")
        runtime = self.workdir / "run"
        runtime.mkdir(mode=0o700, exist_ok=True)
        for _ in range(3):  # the free port may be taken between probing and binding it
            self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [*_executable(), "serve", "--cluster", str(self.cluster), "--config", str(config),
                     "--host", "127.0.0.1", "--port", str(self.port)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    cwd=self.workdir, env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if self.get("/readyz").status == 200:
                        return self
                except OSError:
                    pass
                time.sleep(0.1)
            self.stop()
        raise RuntimeError(f"the {self.worker} server did not start; log:\n{self.log_tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the master and its worker
                proc.wait(timeout=5)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a worker must not outlive its master
        except ProcessLookupError:
            pass

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def get(self, path: str) -> Reply:
        conn = Conn(self.port, timeout=10)
        try:
            conn.send(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            return conn.reply()
        finally:
            conn.close()

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        return sorted(children(self.proc.pid))

    def digest(self) -> str:
        """The cache as ``/debug/snapshot`` shows it (every node and pod accounted, the sizes),
        hashed. Not its ``generation``, a count of changes: a bind that fails after the pod was
        assumed (a PreBind write refused, say) forgets it again - the count moves, the cache
        must be as it was."""
        reply = self.get("/debug/snapshot")
        assert reply.status == 200, reply
        snapshot = reply.json()
        del snapshot["generation"]
        return hashlib.sha256(json.dumps(snapshot, sort_keys=True).encode()).hexdigest()[:16]

    def metric(self, name: str) -> float:
        """The sum of a metric's samples in ``/metrics``."""
        text = self.get("/metrics").body.decode()
        return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
