"""Shared fixtures: an app over an in-memory cluster, and its Flask test client."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from builders import cluster_objects  # noqa: E402

from extender.app import create_app  # noqa: E402
from extender.cluster.memory import MemoryCluster  # noqa: E402
from extender.config.model import parse_config  # noqa: E402
from extender.framework.clock import FakeClock  # noqa: E402
from extender.lifecycle import Lifecycle  # noqa: E402

def config_of(**overrides: Any) -> Any:
    raw = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration", **overrides}
    return parse_config(raw)


@pytest.fixture(autouse=True)
def close_apps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every app a test builds (``create_app`` / ``create_kube_app``, directly or through a helper)
    is closed after it, so its background threads do not outlive the test. Apps of module- or
    session-scoped fixtures are built before this runs: closing them is their fixtures' job."""
    built: list[Lifecycle] = []
    init = Lifecycle.__init__

    def recording(self: Lifecycle) -> None:
        init(self)
        built.append(self)

    monkeypatch.setattr(Lifecycle, "__init__", recording)
    yield
    for lifecycle in built:
        lifecycle.close(timeout=5.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_app(clock: FakeClock) -> Callable[..., Any]:
    """make_app(nodes, pods, **config_overrides) -> (app, cluster)."""

    def build(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None, **overrides: Any) -> Any:
        cluster = MemoryCluster(cluster_objects(nodes, pods))
        app = create_app(config_of(**overrides), source=cluster, clock=clock)
        return app, cluster

    return build
