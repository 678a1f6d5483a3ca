"""The real server (``kube-extender serve``: gunicorn, one worker) over real HTTP/1.1.

Each test starts its own server on a free port from a cluster file in ``data/`` and stops it with
SIGTERM in the fixture's finalizer; a server that does not exit in time is killed with its
process group, so nothing is left behind. ``tests/tools/wire_check.py`` is a black-box checker of
the extender contract run against such a server.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "data"
SMOKE = DATA / "smoke-cluster.yaml"
CAPACITY = DATA / "capacity-cluster.yaml"
WIRE_CHECK = Path(__file__).resolve().parents[1] / "tools" / "wire_check.py"
GPU = "example.com/gpu"
SMOKE_NODES = ["node-a", "node-b", "node-c", "node-d"]
TRAINER_0 = "5b0c0d00-0000-4000-8000-000000000002"
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def _executable() -> list[str]:
    beside = Path(sys.executable).parent / "kube-extender"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("kube-extender")
    if found:
        return [found]
    pytest.skip("the kube-extender console script is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(name: str, gpus: int, uid: str | None = None, priority: int = 1000) -> dict[str, Any]:
    """A pod shaped as kube-scheduler sends it (no kind/apiVersion, defaulted fields)."""
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:05:00Z", "resourceVersion": "77"},
            "spec": {"schedulerName": "default-scheduler", "priority": priority, "restartPolicy": "Always",
                     "preemptionPolicy": "PreemptLowerPriority",
                     "containers": [{"name": "main", "image": "example.com/app:1",
                                     "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                                   "limits": {GPU: str(gpus)}}}]},
            "status": {"phase": "Pending", "qosClass": "Burstable"}}


class Server:
    def __init__(self, cluster: Path, workdir: Path, config: Path | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.port = 0
        self.log_path = workdir / "server.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/scheduler"

    def start(self) -> Server:
        for _ in range(3):  # the free port may be taken between probing and binding it
            self.port = _free_port()
            cmd = [*_executable(), "serve", "--cluster", str(self.cluster), "--host", "127.0.0.1",
                   "--port", str(self.port)]
            if self.config is not None:
                cmd += ["--config", str(self.config)]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True, cwd=self.workdir)
            if self._wait_healthy(15.0):
                return self
            self.stop()
        pytest.fail(f"server did not become healthy; log:\n{self.log_path.read_text()[-3000:]}")

    def _wait_healthy(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/healthz")
                ok = conn.getresponse().status == 200
                conn.close()
                if ok:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> int | None:
        proc = self.proc
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # our own session: the master and its worker
                proc.wait(timeout=5)
        self.returncode = proc.returncode
        try:  # a worker must not outlive its master
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            pass
        else:
            time.sleep(0.5)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None
        return self.returncode

    def connection(self, timeout: float = 10) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(cluster: Path = SMOKE, config: str | None = None) -> Server:
        workdir = tmp_path / f"server-{len(started)}"
        workdir.mkdir()
        config_path = None
        if config is not None:
            config_path = workdir / "config.yaml"
            config_path.write_text(config)
        server = Server(cluster, workdir, config_path)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def call(conn: http.client.HTTPConnection, verb: str, body: Any, headers: dict[str, str] | None = None,
         path: str | None = None) -> tuple[int, Any, http.client.HTTPResponse]:
    """One POST as Go's client sends it: compact JSON, Content-Type and Accept-Encoding: gzip."""
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    hdrs = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip",
            **(headers or {})}
    conn.request("POST", path or f"/scheduler/{verb}", body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    if resp.getheader("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    if resp.getheader("Content-Length") is not None and resp.getheader("Content-Encoding") is None:
        assert int(resp.getheader("Content-Length") or -1) == len(raw)
    payload = json.loads(raw) if raw and "json" in (resp.getheader("Content-Type") or "") else raw
    return resp.status, payload, resp


def get_json(server: Server, path: str) -> Any:
    conn = server.connection()
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.status == 200, path
        return json.loads(resp.read())
    finally:
        conn.close()


# ---- the black-box checker ------------------------------------------------------------------------

def test_wire_check_passes(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)  # fresh, default configuration, as the checker requires
    done = subprocess.run([sys.executable, str(WIRE_CHECK), server.base], capture_output=True, text=True, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    match = re.fullmatch(r"(\d+) passed, (\d+) failed", lines[-1])
    assert match, lines[-1]
    failures = [line for line in lines if line.startswith("FAIL")]
    assert match.group(2) == "0" and not failures, "\n".join(failures)
    assert int(match.group(1)) >= 20
    assert done.returncode == 0


# ---- HTTP/1.1 keep-alive, as kube-scheduler talks -------------------------------------------------

def test_filter_prioritize_bind_on_one_keep_alive_connection(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    conn = server.connection()
    try:
        status, reply, resp = call(conn, "filter", {"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None,
                                                    "NodeNames": SMOKE_NODES})
        assert status == 200 and resp.version == 11
        assert resp.getheader("Content-Type") == "application/json"
        assert (resp.getheader("Connection") or "keep-alive").lower() != "close"
        sock = conn.sock
        assert sock is not None
        assert set(reply) == FILTER_KEYS
        assert reply["NodeNames"] == ["node-a"] and reply["Nodes"] is None and reply["Error"] == ""
        assert set(reply["FailedNodes"]) == {"node-b"}
        assert set(reply["FailedAndUnresolvableNodes"]) == {"node-c", "node-d"}

        status, reply, _ = call(conn, "prioritize", {"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None,
                                                     "NodeNames": ["node-a", "node-b"]})
        assert status == 200 and conn.sock is sock
        assert [h["Host"] for h in reply] == ["node-a", "node-b"]
        assert all(set(h) == {"Host", "Score"} and type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in reply)

        bind = {"PodName": "trainer-0", "PodNamespace": "default", "PodUID": TRAINER_0, "Node": "node-a"}
        for _ in range(2):  # the second one is a retry: idempotent
            status, reply, _ = call(conn, "bind", bind)
            assert status == 200 and reply == {"Error": ""} and conn.sock is sock

        # the reservation is visible to the next pod: node-a has 3 of 4 GPUs left
        status, reply, _ = call(conn, "filter", {"Pod": pod("trainer-1", 4, "5b0c0d00-0000-4000-8000-000000000003"),
                                                 "Nodes": None, "NodeNames": SMOKE_NODES})
        assert status == 200 and conn.sock is sock, "the connection must stay open across requests"
        assert reply["NodeNames"] == [] and "node-a" in reply["FailedNodes"]
    finally:
        conn.close()
    node_a = next(n for n in get_json(server, "/debug/snapshot")["nodes"] if n["name"] == "node-a")
    assert node_a["allocated"] == {GPU: "1"}


def test_gzip_accept_encoding(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    conn = server.connection()
    try:
        names = SMOKE_NODES + [f"unknown-{i}" for i in range(3000)]  # a large reply
        for verb in ("filter", "prioritize"):
            status, reply, resp = call(conn, verb, {"Pod": pod("gz", 1), "Nodes": None, "NodeNames": names},
                                       headers={"Accept-Encoding": "gzip"})
            assert status == 200, reply
            assert resp.getheader("Content-Encoding") in (None, "gzip")
            if verb == "filter":
                assert reply["NodeNames"] == ["node-a"] and len(reply["FailedNodes"]) == 3001
            else:
                assert len(reply) == len(names)
    finally:
        conn.close()


# ---- robustness ---------------------------------------------------------------------------------------

def test_keeps_serving_after_bad_input(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE, config="apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
                                 "server: {maxRequestBytes: 8Ki}\n")
    good = {"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None, "NodeNames": SMOKE_NODES}
    conn = server.connection()
    try:
        for bad in (b"not json", b"", b"[]", b'{"Pod": 5}', b"{" * 3000,
                    json.dumps({"Pod": pod("x", 1), "NodeNames": "node-a"}).encode()):
            status, reply, resp = call(conn, "filter", bad)
            assert status == 400, (bad[:40], reply)
            assert resp.getheader("Content-Type") == "application/json" and reply["error"] == "bad request"
            status, reply, _ = call(conn, "filter", good)
            assert status == 200 and reply["NodeNames"] == ["node-a"], "the same connection keeps working"

        status, reply, resp = call(conn, "filter", {**good, "Padding": "x" * 20000})
        assert status == 413, reply
        assert resp.getheader("Content-Type") == "application/json" and "8192" in reply["message"]
        status, reply, _ = call(conn, "filter", good)  # the unread body must not poison the connection
        assert status == 200 and reply["NodeNames"] == ["node-a"]

        status, reply, _ = call(conn, "nope", good)
        assert status == 404 and reply["error"] == "not found"
        conn.request("GET", "/scheduler/filter")
        resp = conn.getresponse()
        assert resp.status == 405 and json.loads(resp.read())["error"] == "method not allowed"
    finally:
        conn.close()

    # not HTTP at all; a body shorter than its Content-Length; a client that vanishes mid-request
    for raw in (b"NOT HTTP AT ALL\r\n\r\n",
                b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{\"Pod\":",
                b"POST /scheduler/bind HTTP/1.1\r\nHost: x\r\n"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            try:
                s.recv(4096)
            except OSError:
                pass

    conn = server.connection()
    try:
        status, reply, _ = call(conn, "filter", good)
        assert status == 200 and reply["NodeNames"] == ["node-a"]
    finally:
        conn.close()
    assert get_json(server, "/healthz") == {"status": "ok"}


def _chunked_post(server: Server, path: str, body: bytes) -> tuple[int, Any]:
    conn = server.connection()
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for i in range(0, len(body), 4096):
            chunk = body[i:i + 4096]
            conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_chunked_request_within_the_limit(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE, config="apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
                                 "server: {maxRequestBytes: 8Ki}\n")
    body = json.dumps({"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None, "NodeNames": SMOKE_NODES}).encode()
    status, reply = _chunked_post(server, "/scheduler/filter", body)
    assert status == 200 and reply["NodeNames"] == ["node-a"]


def test_chunked_request_over_the_limit_is_413(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE, config="apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
                                 "server: {maxRequestBytes: 8Ki}\n")
    body = json.dumps({"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None, "NodeNames": SMOKE_NODES,
                       "Padding": "x" * 20000}).encode()
    status, reply = _chunked_post(server, "/scheduler/filter", body)
    assert status == 413, reply



@pytest.mark.parametrize("worker", ["gevent", "gthread"])
@pytest.mark.parametrize("extra", [0, 1], ids=["exactly the limit", "one byte over"])
def test_a_chunked_body_is_413_only_over_the_limit(serve: Callable[..., Server], worker: str, extra: int) -> None:
    server = serve(SMOKE, config="apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
                                 f"server: {{maxRequestBytes: 8Ki, worker: {worker}}}\n")
    doc = {"Pod": pod("trainer-0", 1, TRAINER_0), "Nodes": None, "NodeNames": SMOKE_NODES, "Padding": ""}
    doc["Padding"] = "x" * (8192 + extra - len(json.dumps(doc).encode()))
    body = json.dumps(doc).encode()
    assert len(body) == 8192 + extra
    status, reply = _chunked_post(server, "/scheduler/filter", body)
    assert status == (413 if extra else 200), reply

# ---- concurrency: binds race, capacity holds -------------------------------------------------------

@pytest.mark.parametrize("retries", [False, True], ids=["one-bind-per-pod", "every-bind-retried"])
def test_concurrent_binds_and_filters_never_over_allocate(serve: Callable[..., Server], retries: bool) -> None:
    """20 pending pods want 1 GPU each on a node with 4. 50 requests arrive at once on 50
    connections: either one bind per pod + 30 filters, or every bind twice (as a retry after a
    lost reply would) + 10 filters. All are answered 200, exactly 4 pods win (both binds of a pod
    agree), and the node is never over-allocated."""
    server = serve(CAPACITY)
    workers = [(f"worker-{i:02d}", f"7c0f0000-0000-4000-8000-1000000000{i:02d}") for i in range(20)]
    jobs: list[tuple[str, Any]] = []
    for name, uid in workers * (2 if retries else 1):
        jobs.append(("bind", {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": "gpu-4"}))
    while len(jobs) < 50:
        name, uid = workers[len(jobs) % 20]
        jobs.append(("filter", {"Pod": pod(name, 1, uid), "Nodes": None, "NodeNames": ["gpu-4", "cpu-only"]}))
    assert len(jobs) == 50

    barrier = threading.Barrier(len(jobs))
    results: list[tuple[str, Any, int, Any] | None] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int, verb: str, body: Any) -> None:
        conn = server.connection(timeout=30)
        try:
            conn.connect()
            barrier.wait(timeout=30)
            status, reply, _ = call(conn, verb, body)
            results[i] = (verb, body, status, reply)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(i, verb, body)) for i, (verb, body) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert all(r is not None for r in results)

    by_pod: dict[str, list[str]] = {}
    for verb, body, status, reply in results:  # type: ignore[misc]
        assert status == 200, (verb, reply)
        if verb == "bind":
            assert set(reply) == {"Error"}
            by_pod.setdefault(body["PodName"], []).append(reply["Error"])
        else:
            assert set(reply) == FILTER_KEYS and reply["Error"] == ""
            assert set(reply["NodeNames"]) <= {"gpu-4"}
            assert reply["FailedAndUnresolvableNodes"].get("cpu-only")
    assert len(by_pod) == 20 and all(len(errs) == (2 if retries else 1) for errs in by_pod.values())
    for name, errs in by_pod.items():
        assert len({e == "" for e in errs}) == 1, f"the binds of {name} disagree: {errs}"
    successes = sum(e == "" for errs in by_pod.values() for e in errs)
    assert successes == 4 * (2 if retries else 1), by_pod
    winners = sorted(name for name, errs in by_pod.items() if errs[0] == "")
    assert len(winners) == 4, f"exactly 4 of 20 one-GPU pods fit a 4-GPU node, got {winners}"

    snapshot = get_json(server, "/debug/snapshot?node=gpu-4")
    assert snapshot["sizes"]["pods"] == 4 and snapshot["sizes"]["assumed_pods"] == 0
    node = snapshot["nodes"][0]
    assert node["allocated"] == {GPU: "4"} and node["free"] == {GPU: "0"}
    assert sorted(p["pod"] for p in node["pods"]) == [f"default/{n}" for n in winners]
    for name in winners:
        assert get_json(server, f"/debug/pods/default/{name}")["state"] in ("bound", "assumed")

    conn = server.connection()
    try:  # losers stay losers, and the node is full for everyone
        for name, uid in workers:
            if name in winners:
                continue
            _, reply, _ = call(conn, "bind", {"PodName": name, "PodNamespace": "default", "PodUID": uid,
                                              "Node": "gpu-4"})
            assert reply["Error"], name
        _, reply, _ = call(conn, "filter", {"Pod": pod("late", 1), "Nodes": None, "NodeNames": ["gpu-4"]})
        assert reply["NodeNames"] == [] and "gpu-4" in reply["FailedNodes"]
    finally:
        conn.close()
    assert get_json(server, "/debug/snapshot?node=gpu-4")["nodes"][0]["allocated"] == {GPU: "4"}


# ---- shutdown ---------------------------------------------------------------------------------------

def test_sigterm_stops_the_server_cleanly(serve: Callable[..., Server]) -> None:
    server = serve(SMOKE)
    conn = server.connection()
    status, _, _ = call(conn, "filter", {"Pod": pod("trainer-0", 1, TRAINER_0), "NodeNames": SMOKE_NODES})
    conn.close()
    assert status == 200
    port = server.port
    started = time.monotonic()
    assert server.stop() == 0, server.log_path.read_text()[-2000:]
    assert time.monotonic() - started < 12
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
