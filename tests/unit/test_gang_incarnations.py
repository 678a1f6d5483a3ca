"""Gang across a group's incarnations and the watch's timing: members let go that are gone since,
and members the watch shows bound while a Permit counts (through the plugin kit's harness, which
binds as the bind verb does, on a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_node, make_pod
from test_gang import FailFirstPreBind

from extender.framework.registration import PluginSpec
from extender.testing.kit.harness import PluginHarness
from policies.gang.plugin import SPEC

GROUP = "scheduling.x-k8s.io/pod-group"


def member(name: str, size: int = 3) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=1).labels(**{GROUP: "g"}).obj()
    pod["metadata"]["annotations"] = {"kube-extender.io/pod-group-min-member": str(size)}
    return pod


@pytest.mark.parametrize("end", ["deleted", "succeeded"])
def test_members_let_go_that_are_gone_do_not_complete_the_groups_next_incarnation(end: str) -> None:
    """m0..m2 are let go together and bound; the job restarts its pods: they end (no Permit of
    the group in between, so none saw them bound) and r0..r2 of the same group come. r0 alone
    must wait for its group, not count m0..m2 as let go with their Bindings on their way."""
    h = PluginHarness(SPEC, nodes=[make_node("n1").alloc(gpu=8).obj()], args={"Gang": {"permitTimeout": "3s"}})
    old = [member(f"m{i}") for i in range(3)]
    for p in old:
        h.add(p)
    binds = [h.bind(p, "n1") for p in old]  # each waits in Permit until the last comes
    assert [b.result() for b in binds] == ["bound"] * 3
    for p in old:
        if end == "deleted":
            h.cluster.delete_pod("default", p["metadata"]["name"])
        else:
            h.cluster.update_pod_status("default", p["metadata"]["name"], p["metadata"]["uid"], {"phase": "Succeeded"})
    new = [member(f"r{i}") for i in range(3)]
    for p in new:
        h.add(p)
    assert h.filter(new[0]).feasible == ["n1"]
    first = h.bind(new[0], "n1")
    assert first.outcome == "waiting", f"r0 went alone: {first}"
    rest = [h.bind(p, "n1") for p in new[1:]]
    assert [b.result() for b in [first, *rest]] == ["bound"] * 3


def test_a_retry_counts_the_members_the_watch_shows_bound_while_it_counts() -> None:
    """m0..m2 are let go; m2's Binding fails (its place is kept for its retry), m0's and m1's are
    stored but the watch has not shown them yet. m2's retry reaches Permit, and the watch shows
    m0 and m1 bound just after Gang read the bound count: they must count - as bound or as let
    go - or m2 waits for a group that is complete, times out, and the group backs off."""
    fail = FailFirstPreBind("m2")
    h = PluginHarness(SPEC, PluginSpec(fail.name, lambda args, handle: fail, parse_args=lambda raw: raw),
                      nodes=[make_node("n1").alloc(gpu=8).obj()], args={"Gang": {"permitTimeout": "3s"}},
                      plugins={"multiPoint": {"enabled": [{"name": "Gang"}]},
                               "preBind": {"enabled": [{"name": fail.name}]}})
    pods = [member(f"m{i}") for i in range(3)]
    for p in pods:
        h.add(p)
    publish, lagging = h.cluster._publish_pod, list[Any]()
    h.cluster._publish_pod = lagging.append  # type: ignore[method-assign,assignment]  # the watch lags
    binds = [h.bind(p, "n1") for p in pods]
    assert [b.result() for b in binds] == ["bound", "bound", "failed"]
    h.cluster._publish_pod = publish  # type: ignore[method-assign]
    assert h.filter(pods[2]).feasible == ["n1"], "m2's place is kept"
    handle = h.engine.handle
    group_count = handle.group_count
    shown: list[bool] = []

    def count_then_the_watch_shows_them(namespace: str, name: str) -> Any:
        counts = group_count(namespace, name)
        if not shown:  # the watch thread delivers the two Bindings right after the first read
            shown.append(True)
            for pod in lagging:
                publish(pod)
        return counts

    handle.group_count = count_then_the_watch_shows_them
    retry = h.bind(pods[2], "n1")
    assert retry.outcome == "bound", f"m2 waited for a complete group: {retry}"
