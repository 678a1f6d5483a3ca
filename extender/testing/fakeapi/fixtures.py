"""Pytest fixtures and a watch collector for tests that drive the fake API server.

Import the fixtures you need into a test module (pytest picks fixtures up from module
attributes)::

    from extender.testing.fakeapi.fixtures import api, core, collectors  # noqa: F401

This is deliberately not a ``conftest.py``: the repository's own test suite imports its
top-level ``conftest`` by module name, which a nested ``conftest.py`` would shadow.

Contract:
    * ``api`` — a started :class:`FakeApiServer` (bookmarks every 0.2 s), stopped at teardown.
    * ``api_client`` — a ``kubernetes.client.ApiClient`` for it; ``core``/``coord``/``policy``/
      ``custom`` — the matching typed API objects.
    * ``collectors`` — factory of :class:`WatchCollector`, each stopped at teardown.
    * :class:`WatchCollector` runs ``kubernetes.watch.Watch().stream(...)`` on a daemon thread and
      records every event; it never raises into the test (errors land in ``.error``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client, watch

from .server import FakeApiServer

__all__ = ["WatchCollector", "api", "api_client", "core", "coord", "policy", "custom", "collectors"]


class WatchCollector:
    """Runs ``kubernetes.watch.Watch().stream(func, ...)`` on a thread and records its events."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            for ev in self.watch.stream(func, *args, **kwargs):
                with self._cond:
                    self.events.append(ev)
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
        finally:
            with self._cond:
                self.done = True
                self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait until at least ``n`` events arrived (or the stream ended); returns them all."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.events) < n and not self.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self.events)

    def wait_done(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def summary(self, *, skip_bookmarks: bool = True) -> list[tuple[str, str, int]]:
        """``(type, name, resourceVersion)`` per event."""
        out = []
        for ev in list(self.events):
            if skip_bookmarks and ev["type"] == "BOOKMARK":
                continue
            raw = ev["raw_object"]
            out.append((ev["type"], raw["metadata"].get("name", ""), int(raw["metadata"]["resourceVersion"])))
        return out

    def stop(self) -> None:
        self.watch.stop()
        self._thread.join(timeout=5)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def api_client(api: FakeApiServer) -> Iterator[client.ApiClient]:
    c = api.api_client()
    yield c
    c.close()


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def coord(api_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api_client)


@pytest.fixture
def policy(api_client: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api_client)


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def collectors() -> Iterator[Callable[..., WatchCollector]]:
    """Factory for :class:`WatchCollector`; all are stopped at teardown."""
    made: list[WatchCollector] = []

    def make(func: Callable[..., Any], *args: Any, **kwargs: Any) -> WatchCollector:
        c = WatchCollector(func, *args, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
