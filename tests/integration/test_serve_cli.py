"""`kube-extender serve` as a new user meets it, as real processes: a clean shutdown under the
default gevent worker, and a cluster file with malformed nodes served without them (counted)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable

import pytest
from test_server_http import Server, get_json, serve  # noqa: F401 - serve is a fixture

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("ctrl_c", [False, True], ids=["SIGTERM to the master", "Ctrl-C: SIGINT to the group"])
def test_shutdown_under_gevent_is_clean(serve: Callable[..., Server], ctrl_c: bool) -> None:  # noqa: F811
    """A Pod's termination (SIGTERM to the master) and Ctrl-C in `make run` (SIGINT to the master
    and its worker): exit 0 and no traceback. Logging's clean-up at exit used to fail on gevent's
    torn-down modules, and the worker's second quit signal exited it again during shutdown."""
    server = serve()
    assert get_json(server, "/readyz")["ready"] is True
    if ctrl_c:
        assert server.proc is not None
        os.killpg(server.proc.pid, signal.SIGINT)  # the server runs in its own session: pgid == pid
        server.proc.wait(timeout=15)
    assert server.stop() == 0
    log = server.log_path.read_text()
    assert "Worker exiting" in log, log[-2000:]
    assert "Traceback" not in log and "Exception ignored" not in log, log[-3000:]


MALFORMED = """\
apiVersion: v1
kind: Node
metadata: {name: good-1}
status: {allocatable: {cpu: "8", example.com/gpu: "4"}}
---
apiVersion: v1
kind: Node
metadata: {name: bad-quantity}
status: {allocatable: {cpu: "8", example.com/gpu: "four"}}
---
apiVersion: v1
kind: Node
metadata: {name: bad-status}
status: "Ready"
---
apiVersion: v1
kind: Node
metadata: {name: good-2}
status: {allocatable: {cpu: "8", example.com/gpu: "2"}}
---
apiVersion: v1
kind: Pod
metadata: {name: bad-pod, namespace: ml, uid: 0b000000-0000-4000-8000-000000000001}
spec:
  nodeName: good-1
  containers: [{name: main, resources: {requests: {example.com/gpu: "2 GPUs"}}}]
"""


def test_malformed_objects_in_the_cluster_file_are_skipped_and_counted(serve: Callable[..., Server],  # noqa: F811
                                                                       tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(MALFORMED)
    server = serve(cluster)
    assert get_json(server, "/readyz")["ready"] is True
    snapshot = get_json(server, "/debug/snapshot")
    assert [n["name"] for n in snapshot["nodes"]] == ["good-1", "good-2"]
    assert snapshot["nodes"][0]["allocated"] == {"example.com/gpu": "0"}, "the malformed pod is not accounted"
    metrics = _metrics(server)
    assert 'kube_extender_skipped_objects_total{kind="node"} 2.0' in metrics
    assert 'kube_extender_skipped_objects_total{kind="pod"} 1.0' in metrics
    log = server.log_path.read_text()
    assert log.count("skipping malformed object") == 3, log[-3000:]
    assert "object=bad-quantity" in log and "object=bad-status" in log and "object=ml/bad-pod" in log


def _metrics(server: Server) -> str:
    conn = server.connection()
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()
