"""Quantity parsing and effective pod requests, as kube-scheduler computes them."""

from __future__ import annotations

import pytest
from builders import GPU, make_pod

from extender.framework.resources import (QuantityError, format_milli, milli, names_requested, pod_requests,
                                          requested_milli)


@pytest.mark.parametrize("text, expected", [
    ("1", 1000), ("0", 0), ("250m", 250), ("1.5", 1500), ("0.5m", 1), ("1Ki", 1024000), ("2Mi", 2 * 2**20 * 1000),
    ("1k", 1_000_000), ("1e3", 1_000_000), ("1E-3", 1), ("+2", 2000), (".5", 500), ("1G", 10**12),
    ("100n", 1), ("3u", 1), (7, 7000), (0.25, 250),
], ids=lambda v: repr(v))
def test_milli_parses_kubernetes_quantities(text: object, expected: int) -> None:
    assert milli(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1Kb", "1.2.3", "--1", "1 Gi", "Gi", "1e999", None, True, [1],
                                  "\uff11", "\u0663", "1\u0663", "1e\uff13", "1\n2"], ids=repr)
def test_milli_rejects_garbage(text: object) -> None:
    with pytest.raises(QuantityError):
        milli(text)


@pytest.mark.parametrize("value, expected", [("0", 0), ("-0", 0), (" 1 ", 1000), ("0.1m", 1), (0, 0), (2.5, 2500)],
                         ids=repr)
def test_requested_milli_takes_zero_and_more(value: object, expected: int) -> None:
    assert requested_milli(value) == expected


@pytest.mark.parametrize("value", ["-1", "-500m", "-0.1m", "-1Gi", -1, -0.5, "-1e-9"], ids=repr)
def test_requested_milli_refuses_negative_amounts(value: object) -> None:
    with pytest.raises(QuantityError, match="negative"):
        requested_milli(value)


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


def _pod(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "spec": spec}


def _resources(**resources: object) -> dict[str, object]:
    return _pod({"containers": [{"name": "c", "resources": resources}]})


@pytest.mark.parametrize("pod, problem", [
    pytest.param(_resources(requests={GPU: "-1"}),
                 "spec.containers[0].resources.requests[example.com/gpu]: '-1' is negative", id="negative-request"),
    pytest.param(_resources(limits={GPU: "-500m"}),
                 "spec.containers[0].resources.limits[example.com/gpu]: '-500m' is negative", id="negative-limit"),
    pytest.param(_resources(requests={GPU: "-0.1m"}), "is negative", id="negative-rounding-to-zero"),
    pytest.param(_resources(requests={GPU: -2}), "-2 is negative", id="negative-json-number"),
    pytest.param(_resources(requests={"cpu": "-1"}), "requests[cpu]: '-1' is negative", id="untracked-negative"),
    pytest.param(_resources(requests={"cpu": "abc"}), "requests[cpu]: 'abc' is not a Kubernetes quantity",
                 id="untracked-malformed"),
    pytest.param(_resources(requests={GPU: "\uff11"}), "is not a Kubernetes quantity", id="fullwidth-digit"),
    pytest.param(_pod({"containers": [{"name": "c"}], "initContainers": [
        {"name": "i", "resources": {"requests": {GPU: "-3"}}}]}),
        "spec.initContainers[0].resources.requests[example.com/gpu]", id="init-container"),
    pytest.param(_pod({"containers": [], "overhead": {GPU: "-1"}}), "spec.overhead[example.com/gpu]",
                 id="negative-overhead"),
    pytest.param(_resources(requests=[GPU]), "spec.containers[0].resources.requests must be a map", id="requests-list"),
    pytest.param(_resources(requests=False), "must be a map", id="requests-false"),
    pytest.param(_pod({"containers": [{"name": "c", "resources": "lots"}]}),
                 "spec.containers[0].resources must be an object", id="resources-string"),
    pytest.param(_pod({"containers": ["c"]}), "spec.containers[0] must be an object", id="container-string"),
    pytest.param(_pod({"containers": {"name": "c"}}), "spec.containers must be an array", id="containers-object"),
    pytest.param(_pod({"containers": [], "initContainers": "i"}), "spec.initContainers must be an array",
                 id="init-containers-string"),
])
def test_pod_requests_refuses_what_the_api_server_refuses(pod: dict[str, object], problem: str) -> None:
    """Every quantity a pod requests or limits is checked, tracked or not: a pod Kubernetes would
    refuse is an error, never a pod that asks for less than nothing (and so fits anywhere)."""
    with pytest.raises(QuantityError) as caught:
        pod_requests(pod, [GPU])
    assert problem in str(caught.value)


def test_zero_requests_and_absent_sections_are_fine() -> None:
    assert pod_requests(_resources(requests={GPU: "0", "cpu": "-0"}, limits=None), [GPU]) == {GPU: 0}
    assert pod_requests(_pod({"containers": None, "initContainers": None, "overhead": None}), [GPU]) == {}


def test_names_requested_is_kube_schedulers_is_interested() -> None:
    pod = make_pod("p").obj()
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {GPU: "0"}}}]
    assert GPU in names_requested(pod)
    assert names_requested(make_pod("q").req(cpu=1).obj()) == {"cpu"}
