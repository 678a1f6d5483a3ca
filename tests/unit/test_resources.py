"""Quantity parsing and effective pod requests, as kube-scheduler computes them."""

from __future__ import annotations

import pytest
from builders import GPU, make_pod

from extender.framework.resources import QuantityError, format_milli, milli, names_requested, pod_requests


@pytest.mark.parametrize("text, expected", [
    ("1", 1000), ("0", 0), ("250m", 250), ("1.5", 1500), ("0.5m", 1), ("1Ki", 1024000), ("2Mi", 2 * 2**20 * 1000),
    ("1k", 1_000_000), ("1e3", 1_000_000), ("1E-3", 1), ("+2", 2000), (".5", 500), ("1G", 10**12),
    ("100n", 1), ("3u", 1), (7, 7000), (0.25, 250),
], ids=lambda v: repr(v))
def test_milli_parses_kubernetes_quantities(text: object, expected: int) -> None:
    assert milli(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1Kb", "1.2.3", "--1", "1 Gi", "Gi", "1e999", None, True, [1]],
                         ids=repr)
def test_milli_rejects_garbage(text: object) -> None:
    with pytest.raises(QuantityError):
        milli(text)


@pytest.mark.parametrize("amount, text", [(2000, "2"), (1500, "1500m"), (0, "0")])
def test_format_milli(amount: int, text: str) -> None:
    assert format_milli(amount) == text


@pytest.mark.parametrize("builder, expected", [
    pytest.param(make_pod("p").req(gpu=2), {GPU: 2000}, id="one container"),
    pytest.param(make_pod("p").req(gpu=1).container("b", **{GPU: "2"}), {GPU: 3000}, id="containers add up"),
    pytest.param(make_pod("p").limits_only(gpu=3), {GPU: 3000}, id="limit defaults the request"),
    pytest.param(make_pod("p").req(gpu=1).init_container("init", **{GPU: "4"}), {GPU: 4000},
                 id="init container peak wins"),
    pytest.param(make_pod("p").req(gpu=2).init_container("init", **{GPU: "1"}), {GPU: 2000},
                 id="app containers win over smaller init"),
    pytest.param(make_pod("p").req(gpu=1).init_container("side", sidecar=True, **{GPU: "1"})
                 .init_container("init", **{GPU: "2"}), {GPU: 3000}, id="sidecar runs beside later init"),
    pytest.param(make_pod("p").req(gpu=1).init_container("side", sidecar=True, **{GPU: "1"}), {GPU: 2000},
                 id="sidecar adds to app containers"),
    pytest.param(make_pod("p").req(cpu="2"), {}, id="untracked resources ignored"),
], )
def test_pod_requests(builder: object, expected: dict[str, int]) -> None:
    assert pod_requests(builder.obj(), [GPU]) == expected  # type: ignore[attr-defined]


def test_pod_overhead_counts() -> None:
    pod = make_pod("p").req(gpu=1).obj()
    pod["spec"]["overhead"] = {GPU: "1"}
    assert pod_requests(pod, [GPU]) == {GPU: 2000}


def test_names_requested_is_kube_schedulers_is_interested() -> None:
    pod = make_pod("p").obj()
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {GPU: "0"}}}]
    assert GPU in names_requested(pod)
    assert names_requested(make_pod("q").req(cpu=1).obj()) == {"cpu"}
