"""The metrics every verb request updates are lean families of our own (``extender.metrics``):
they must expose exactly what prometheus_client's Counter and Histogram expose for the same
updates, creation times aside."""

from __future__ import annotations

import re
import threading
from typing import Any

import prometheus_client
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from extender.metrics import _PLUGIN_BUCKETS, Metrics, _LeanFamily

_CREATED = re.compile(r"^(\S+_created\{[^}]*\}) \S+$", re.M)


def exposition(registry: CollectorRegistry) -> str:
    return _CREATED.sub(r"\1 <t>", generate_latest(registry).decode())


def both(kind: str) -> tuple[Any, Any, CollectorRegistry, CollectorRegistry]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    if kind == "counter":
        lean = _LeanFamily("x", "Doc.", ["verb", "outcome"], "counter", registry=ours)
        ref = prometheus_client.Counter("x", "Doc.", ["verb", "outcome"], registry=theirs)
    else:
        lean = _LeanFamily("x_seconds", "Doc.", ["verb", "outcome"], "histogram", buckets=_PLUGIN_BUCKETS,
                           registry=ours)
        ref = prometheus_client.Histogram("x_seconds", "Doc.", ["verb", "outcome"], buckets=_PLUGIN_BUCKETS,
                                          registry=theirs)
    return lean, ref, ours, theirs


amounts = st.one_of(st.sampled_from([0.0, *_PLUGIN_BUCKETS]), st.floats(0, 10), st.integers(0, 3))
updates = st.lists(st.tuples(st.sampled_from(["filter", "bind"]), st.sampled_from(["ok", "error"]), amounts),
                   max_size=30)


@pytest.mark.parametrize("kind, update", [("counter", "inc"), ("histogram", "observe")])
@given(updates=updates)
def test_a_lean_family_exposes_what_prometheus_client_s_does(kind: str, update: str,
                                                             updates: list[tuple[str, str, float]]) -> None:
    lean, ref, ours, theirs = both(kind)
    for verb, outcome, amount in updates:
        getattr(lean.labels(verb, outcome), update)(amount)
        getattr(ref.labels(verb, outcome), update)(amount)
    assert exposition(ours) == exposition(theirs)


def test_label_values_are_text_and_counted_once() -> None:
    """A value given as another type is one label set with its text (as prometheus_client's)."""
    lean, ref, ours, theirs = both("counter")
    for values in (("filter", 200), ("filter", "200")):
        lean.labels(*values).inc()
        ref.labels(*values).inc()
    assert exposition(ours) == exposition(theirs)
    assert 'x_total{outcome="200",verb="filter"} 2.0' in exposition(ours)


def test_wrong_use_is_refused() -> None:
    lean, _, _, _ = both("counter")
    with pytest.raises(ValueError):
        lean.labels("filter")
    with pytest.raises(ValueError):
        lean.labels("filter", "ok").inc(-1)


def test_concurrent_updates_are_all_counted() -> None:
    metrics = Metrics()

    def work() -> None:
        for _ in range(5000):
            metrics.requests.labels("filter", "ok").inc()
            metrics.request_duration.labels("filter").observe(0.0001)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = exposition(metrics.registry)
    assert 'kube_extender_requests_total{outcome="ok",verb="filter"} 20000.0' in text
    assert 'kube_extender_request_duration_seconds_count{verb="filter"} 20000.0' in text
