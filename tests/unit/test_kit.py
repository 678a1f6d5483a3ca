"""The test kit's PluginHarness: the verbs' verdicts as a plugin author reads them, Permit waits
on the fake clock (allowed, timed out at the plugin's deadline or at the bind's budget), and the
simulate helper with a plugin that is not installed."""

from __future__ import annotations

from typing import Any

import pytest

from extender.framework import Code, PluginSpec, Status
from extender.testing.kit import GPU, PluginHarness, cluster_yaml, make_node, make_pod, make_pod_group, simulate


class Gate:
    """Permit: wait ``args["wait"]`` seconds for an allow; Filter: refuse nodes labelled closed."""

    name = "Gate"

    def __init__(self, args: Any, handle: Any) -> None:
        self.wait = float(args.get("wait", 10.0))

    def filter(self, state: Any, pod: Any, node: Any) -> Status:
        return Status.unresolvable("gate closed") if node.labels.get("gate") == "closed" else Status()

    def permit(self, state: Any, pod: Any, node_name: str) -> tuple[Status, float]:
        return Status.wait("held at the gate"), self.wait


GATE = PluginSpec("Gate", Gate, parse_args=dict)


def harness(**kwargs: Any) -> PluginHarness:
    nodes = [make_node("open").alloc(gpu=2).obj(), make_node("shut").alloc(gpu=2).labels(gate="closed").obj()]
    return PluginHarness(GATE, nodes=nodes, **kwargs)


def test_filter_verdicts_name_the_plugin_code_and_reasons() -> None:
    verdict = harness().filter(make_pod("p").req(gpu=1).obj())
    assert verdict.feasible == ["open"] and verdict.error == ""
    st = verdict.rejected["shut"]
    assert (st.plugin, st.code, verdict.reasons("shut")) == ("Gate", Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                             ("gate closed",))


def test_a_bind_waiting_in_permit_is_allowed_and_binds() -> None:
    h = harness()
    binding = h.bind(make_pod("p").uid("u1").req(gpu=2).obj(), "open")
    assert (binding.outcome, binding.waiting_for, h.waiting()) == ("waiting", ["Gate"], {"default/p": ["Gate"]})
    # its GPUs are held meanwhile
    assert h.filter(make_pod("q").req(gpu=1).obj(), ["open"]).reasons("open") == ("Insufficient example.com/gpu",)
    h.engine.handle.waiting_pods.get("u1").allow("Gate")
    assert binding.result() == "bound" and h.pod("default", "p")["spec"]["nodeName"] == "open"


@pytest.mark.parametrize("wait, advance, outcome", [
    (3.0, [2.9], "waiting"),
    (3.0, [2.9, 0.1], "failed"),
    (60.0, [3.9], "waiting"),
    (60.0, [4.0], "failed"),
], ids=["before the plugin's deadline", "at the plugin's deadline", "within the bind's budget",
        "at the bind's budget (httpTimeout 5s - 1s)"])
def test_a_permit_wait_ends_on_the_fake_clock(wait: float, advance: list[float], outcome: str) -> None:
    h = PluginHarness(GATE, args={"Gate": {"wait": wait}}, nodes=[make_node("n").alloc(gpu=1).obj()])
    binding = h.bind(make_pod("p").req(gpu=1).obj(), "n")
    for seconds in advance:
        h.advance(seconds)
    assert binding.outcome == outcome
    if outcome == "failed":
        assert "timed out waiting in Permit for Gate" in binding.error
        assert h.waiting() == {} and h.pod("default", "p")["spec"].get("nodeName") is None
        assert h.filter(make_pod("q").req(gpu=1).obj()).feasible == ["n"]  # unreserved


def test_preempt_proposes_the_lower_priority_pods_and_keeps_what_frees_enough() -> None:
    low = make_pod("low").req(gpu=2).node("open").priority(1).obj()
    high = make_pod("high").req(gpu=2).node("shut").priority(50).obj()
    h = harness(pods=[low, high])
    assert h.preempt(make_pod("p").req(gpu=2).priority(10).obj()) == {"open": ["default/low"]}


def test_nodes_pods_and_pod_groups_added_later_are_seen_by_the_next_verb() -> None:
    h = harness()
    assert h.filter(make_pod("p").req(gpu=2).obj()).feasible == ["open"]
    h.add(make_node("new").alloc(gpu=2).obj(), make_pod("filler").req(gpu=2).node("open").obj(),
          make_pod_group("g").min_member(2).obj())
    assert h.filter(make_pod("p").req(gpu=2).obj()).feasible == ["new"]
    assert h.engine.handle.pod_group("default", "g") is not None


def test_schedule_binds_to_the_best_feasible_node_or_returns_none() -> None:
    h = PluginHarness(nodes=[make_node("a").alloc(gpu=4).obj(), make_node("b").alloc(gpu=4).obj()],
                      pods=[make_pod("old").req(gpu=2).node("b").obj()])
    binding = h.schedule(make_pod("p").req(gpu=1).obj())  # NodeResources binpacks: the fuller node
    assert binding is not None and (binding.node, binding.outcome) == ("b", "bound")
    assert h.schedule(make_pod("big").req(gpu=8).obj()) is None


def test_simulate_runs_a_plugin_that_is_not_installed() -> None:
    nodes = [make_node(n).alloc(gpu=2).labels(gate="closed" if n == "shut" else "open").obj() for n in ("open", "shut")]
    config = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration",
              "profiles": [{"schedulerName": "default-scheduler",
                            "plugins": {"filter": {"enabled": [{"name": "Gate"}]}}}]}
    workload = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "Workload",
                "pods": [{"name": "w", "count": 3, "requests": {"cpu": "1", GPU: 1}}]}
    result = simulate(GATE, config=config, cluster=cluster_yaml(nodes), workload=workload)
    assert result.placements == {"default/w-0": "open", "default/w-1": "open"}
    assert "gate closed" in result.pending["default/w-2"]


def test_expire_times_a_pod_out_only_once_settled_and_past_its_deadline() -> None:
    from extender.framework import PodInfo
    from extender.framework.clock import FakeClock
    from extender.runtime.waiting_pods import WaitingPod

    clock = FakeClock()
    wp = WaitingPod(PodInfo("u", "default", "p"), "n", clock)
    clock.advance(100)
    assert not wp.expire()  # its Permit plugins are still deciding: no deadline yet
    wp.settle({"A": 1.0})
    assert not wp.expire()
    clock.advance(1.0)
    assert wp.expire() and not wp.expire()
    st = wp.wait(5.0)
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "A"


def test_a_pod_one_plugin_allowed_waits_for_the_deadline_of_the_plugin_still_pending() -> None:
    """A asks for 0.05 s, B for 100 s; A allows the pod while its bind waits. The pod is not
    timed out at A's deadline (kube-scheduler stops A's timer when A allows): it waits on for B,
    which allows it."""
    import threading

    from extender.framework import PodInfo, Status
    from extender.framework.clock import FakeClock
    from extender.runtime.waiting_pods import WaitingPod

    wp = WaitingPod(PodInfo("u", "default", "p"), "n", FakeClock())
    assert wp.settle({"A": 0.05, "B": 100.0}) is None
    done = wp._done  # A allows the pod while ``wait`` waits, deterministically
    woken = threading.Event()

    class AllowedWhileWaiting:
        def wait(self, timeout: float | None = None) -> bool:
            if not woken.is_set():
                woken.set()
                wp.allow("A")
            return done.wait(timeout)

        def __getattr__(self, name: str) -> Any:
            return getattr(done, name)

    wp._done = AllowedWhileWaiting()  # type: ignore[assignment]
    result: list[Status] = []
    thread = threading.Thread(target=lambda: result.append(wp.wait(1000.0)), daemon=True)
    thread.start()
    thread.join(0.5)  # A's 0.05 s have passed in real time: still waiting, for B
    assert woken.is_set() and result == []
    wp.allow("B")
    thread.join(5)
    assert result and result[0].ok


def test_a_real_permit_plugin_gang_lets_a_group_bind_together_and_times_it_out_whole() -> None:
    """The harness with a built-in plugin that waits in Permit: the first member waits until the
    second arrives (its bind allows both); a group that never completes is denied at the deadline."""
    from policies.gang.plugin import SPEC as GANG

    def member(name: str, group: str) -> dict[str, Any]:
        return (make_pod(name).req(gpu=1).labels(**{"scheduling.x-k8s.io/pod-group": group})
                .annotations(**{"kube-extender.io/pod-group-min-member": "2"}).obj())

    h = PluginHarness(GANG, args={"Gang": {"permitTimeout": "3s"}}, nodes=[make_node("n").alloc(gpu=4).obj()])
    first = h.bind(member("a-0", "a"), "n")
    assert (first.outcome, first.waiting_for) == ("waiting", ["Gang"])
    second = h.bind(member("a-1", "a"), "n")
    assert (first.result(), second.outcome) == ("bound", "bound")

    lonely = h.bind(member("b-0", "b"), "n")
    h.advance(2.9)
    assert lonely.outcome == "waiting"
    h.advance(0.1)
    assert lonely.outcome == "failed" and "Gang" in lonely.error
