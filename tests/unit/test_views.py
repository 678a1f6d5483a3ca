"""NodeInfo.with_pods: many pods accounted with one copy, as with_pod one at a time would."""

from __future__ import annotations

from functools import reduce
from types import MappingProxyType

import pytest

from extender.framework.views import NodeInfo, PodInfo


def pod(uid: str, **requests: int) -> PodInfo:
    return PodInfo(uid, "default", f"pod-{uid}", node_name="n1", requests=MappingProxyType(dict(requests)))


BASE = NodeInfo("n1", {"metadata": {"name": "n1"}}, MappingProxyType({"gpu": 8000, "mem": 64}),
                MappingProxyType({"gpu": 3000, "mem": 8}),
                MappingProxyType({"a": pod("a", gpu=1000, mem=8), "b": pod("b", gpu=2000)}), generation=7)


@pytest.mark.parametrize("adding", [
    pytest.param([pod("c", gpu=1000)], id="one new pod"),
    pytest.param([pod("c", gpu=1000), pod("d", mem=4), pod("e")], id="several, one without requests"),
    pytest.param([pod("b", gpu=500, mem=2)], id="a uid already there: replaced, its requests leave"),
    pytest.param([pod("a"), pod("c", gpu=1000)], id="an accounted pod replaced by one without requests"),
    pytest.param([pod("c", gpu=1000), pod("c", gpu=4000)], id="the same uid twice: the last one counts"),
    pytest.param([pod("x", other=5), pod("b", gpu=2000)], id="a resource the node does not offer"),
])
def test_with_pods_is_with_pod_one_at_a_time(adding: list[PodInfo]) -> None:
    pods = dict(BASE.pods)  # an independent model: the last pod per uid counts, requests are their sum
    for p in adding:
        pods[p.uid] = p
    requested: dict[str, int] = {}
    for p in pods.values():
        for k, v in p.requests.items():
            requested[k] = requested.get(k, 0) + v
    got = BASE.with_pods(adding, -1)
    assert (got.name, got.node, got.allocatable, got.generation) == (BASE.name, BASE.node, BASE.allocatable, -1)
    assert {k: v for k, v in got.requested.items() if v} == {k: v for k, v in requested.items() if v}
    assert list(got.pods.items()) == list(pods.items())
    assert got == reduce(lambda info, p: info.with_pod(p, -1), adding, BASE)
    assert dict(BASE.requested) == {"gpu": 3000, "mem": 8} and sorted(BASE.pods) == ["a", "b"], "BASE unchanged"


def test_with_pods_of_nothing_is_the_node_itself() -> None:
    assert BASE.with_pods([], -1) is BASE
    assert BASE.with_pods(iter(()), -1) is BASE
