"""How ``ExtenderServer`` sets gunicorn up for a stop: the master waits for the worker's drain
and the app's close, the worker drains for less (``extender.server``). The stop itself, as real
processes: tests/integration/test_kube_serve.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from flask import Flask

from extender.server import CLOSE_TIMEOUT, DRAIN_TIMEOUT, EXIT_MARGIN, STOP_TIMEOUT, ExtenderServer


@pytest.mark.parametrize("kwargs, drain, close", [
    ({}, DRAIN_TIMEOUT, CLOSE_TIMEOUT),
    ({"drain_timeout": 1, "close_timeout": 2}, 1, 2),
], ids=["defaults", "given"])
def test_the_master_waits_for_the_drain_and_the_apps_close(kwargs: dict[str, Any], drain: int, close: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker drains for ``graceful_timeout`` as it reads it, then closes the app; the master
    kills it ``graceful_timeout`` after SIGTERM as the master reads it. With one value for both,
    a request in flight to the end of the drain left the app unclosed (its Lease held)."""
    closed: list[tuple[Flask, float]] = []
    server = ExtenderServer(lambda: Flask("test"), host="127.0.0.1", port=1, threads=1,
                            on_exit=lambda app, seconds: closed.append((app, seconds)), **kwargs)
    master = server.cfg.graceful_timeout
    worker = SimpleNamespace(cfg=server.cfg)  # the worker's copy, after the fork
    server.cfg.post_fork(None, worker)
    assert worker.cfg.graceful_timeout == drain
    assert master == drain + close + EXIT_MARGIN
    app = server.load()
    monkeypatch.setattr("extender.server.logging", SimpleNamespace(shutdown=lambda: None, _handlerList=[]))
    server.cfg.worker_exit(None, worker)
    assert closed == [(app, close)]


def test_a_stop_fits_the_charts_termination_grace_period() -> None:
    """The kubelet kills the pod ``terminationGracePeriodSeconds`` after SIGTERM, whatever the
    master still waits for."""
    values = Path(__file__).resolve().parents[2] / "charts" / "kube-extender" / "values.yaml"
    assert STOP_TIMEOUT < yaml.safe_load(values.read_text())["terminationGracePeriodSeconds"]
