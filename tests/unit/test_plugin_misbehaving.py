"""A third-party plugin that answers wrong: an error naming it, never an anonymous crash or a\nplugin silently off."""

from __future__ import annotations

import time
from typing import Any

import pytest

from extender.config.model import ConfigError
from extender.framework import SKIP, SUCCESS, PluginSpec, Status
from extender.runtime.outcomes import EngineError
from extender.testing.kit import PluginHarness, make_node, make_pod, make_pod_group

NODES = [make_node("a").alloc(gpu=2).obj(), make_node("b").alloc(gpu=2).obj()]


def spec_of(name: str, **methods: Any) -> PluginSpec:
    cls = type(name, (), {"name": name, "__init__": lambda self, args, handle: None, **methods})
    return PluginSpec(name, cls)


# 1. A wrong return value escapes the Framework when the profile has another plugin at the point
#    (the default profile always does): a bare AttributeError out of the verb, no plugin named.
#    With the plugin alone at the point the same value gives "plugin X failed in Filter: ...".

def test_a_filter_returning_none_is_an_error_naming_the_plugin() -> None:
    h = PluginHarness(spec_of("BadFilter", filter=lambda self, s, p, n: None), nodes=NODES)
    verdict = h.filter(make_pod("p").req(gpu=1).obj())  # raises AttributeError today
    assert verdict.feasible == [] and "BadFilter" in verdict.error


def test_a_filter_returning_none_answers_the_wire_with_an_error_naming_the_plugin() -> None:
    h = PluginHarness(spec_of("BadFilter", filter=lambda self, s, p, n: None), nodes=NODES)
    pod = make_pod("p").req(gpu=1).obj()
    reply = h.app.test_client().post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["a", "b"]})
    assert reply.status_code == 200
    assert "BadFilter" in reply.get_json()["Error"]  # today: "internal error: AttributeError: 'NoneType' ..."


@pytest.mark.parametrize("spec, verb", [
    (spec_of("BadPreFilter", pre_filter=lambda self, s, p, snap: (None, None)), "filter"),
    (spec_of("BadPreScore", pre_score=lambda self, s, p, nodes: None, score=lambda self, s, p, n: 0), "prioritize"),
    (spec_of("BadPostFilter", filter=lambda self, s, p, n: Status.unschedulable("no"),
             post_filter=lambda self, s, p, statuses: (None, None)), "filter"),
    (spec_of("BadPreemption", process_preemption=lambda self, s, p, n, v: (v, None)), "preempt"),
], ids=["preFilter (None, None)", "preScore None", "postFilter (None, None)", "preemption (victims, None)"])
def test_a_wrong_return_value_is_reported_naming_the_plugin(spec: PluginSpec, verb: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    low = make_pod("low").req(gpu=2).node("a").priority(1).obj()
    h = PluginHarness(spec, nodes=NODES, pods=[low])
    pod = make_pod("p").req(gpu=2).priority(10).obj()
    try:
        if verb == "filter" and spec.name == "BadPostFilter":
            # a PostFilter error is logged and the pod stays unschedulable (as kube-scheduler does)
            verdict = h.filter(pod)
            message = " ".join(str(r.__dict__) for r in caplog.records) if not verdict.error else verdict.error
        elif verb == "filter":
            message = h.filter(pod).error
        elif verb == "prioritize":
            h.prioritize(pod)
            message = ""
        else:
            h.preempt(pod)
            message = ""
    except EngineError as exc:  # how a plugin failure in prioritize/preempt is reported
        message = str(exc)
    assert spec.name in message  # today: AttributeError escapes the engine


# 2. A Permit plugin returning (WAIT, None) (a forgotten timeout) fails the bind with an anonymous
#    internal error AND leaves the pod in the Permit waiting room for good: plugins counting the
#    room (handle.waiting_pods) see a ghost, and `left` never moves for it.

def test_a_permit_with_a_bad_timeout_does_not_leave_the_pod_in_the_waiting_room() -> None:
    h = PluginHarness(spec_of("NoTimeout", permit=lambda self, s, p, n: (Status.wait("hold"), None)), nodes=NODES)
    binding = h.bind(make_pod("p").uid("u1").req(gpu=1).obj(), "a")
    assert binding.outcome == "failed"
    assert h.engine.handle.waiting_pods.get("u1") is None  # today: still there
    assert "NoTimeout" in binding.error  # today: "internal error while binding: TypeError: float() ..."


# 3. A factory that returns None (a function factory that forgot `return`) is accepted by start-up
#    (`config check`, `serve`) and the plugin silently runs nowhere, even when enabled explicitly at a
#    point - where a built plugin lacking that point's method is refused ("does not implement filter").

def _forgot_return(args: Any, handle: Any) -> Any:
    class Refuser:
        name = "Refuser"

        def filter(self, state: Any, pod: Any, node: Any) -> Status:
            return Status.unresolvable("refused")
    Refuser()


@pytest.mark.parametrize("plugins", [None, {"filter": {"enabled": [{"name": "Refuser"}]}}],
                         ids=["multiPoint", "filter.enabled"])
def test_a_factory_returning_none_is_refused_at_start_up(plugins: Any) -> None:
    with pytest.raises(ConfigError, match="Refuser"):
        PluginHarness(PluginSpec("Refuser", _forgot_return), nodes=NODES, plugins=plugins)


# 6. A Filter returning a non-rejection, non-success code (SKIP - easy to mistake for "no opinion",
#    as in preFilter - or WAIT) rejects the node as a preemption candidate with an empty reason.
#    kube-scheduler turns such a Filter status into an error naming the plugin.

@pytest.mark.parametrize("returned", [SKIP, Status.wait("later")], ids=["SKIP", "WAIT"])
def test_a_filter_returning_skip_or_wait_is_an_error_naming_the_plugin(returned: Status) -> None:
    h = PluginHarness(spec_of("Shrug", filter=lambda self, s, p, n: returned), nodes=NODES)
    verdict = h.filter(make_pod("p").req(gpu=1).obj())
    assert "Shrug" in verdict.error  # today: no error, every node "failed" with reason ""


# 7. Preemption asks "would it fit?" through handle.run_filters with a fresh CycleState (the built-in
#    ManagedPreemption, Gang, CapacityQuota do): a Filter plugin's PreFilter never ran for it. A plugin
#    following the guide ("parse once in preFilter, keep it in the CycleState; filter only compares")
#    then fails (CycleState.read: KeyError) or, having SKIPped in preFilter, is called anyway - and the
#    pod is never preempted for. kube-scheduler reuses the cycle's PreFilter state in preemption.

class Parsed:
    name = "Parsed"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def pre_filter(self, state: Any, pod: Any, snapshot: Any) -> Any:
        if "team" not in pod.labels:
            return None, SKIP
        state.write("Parsed", pod.labels["team"])
        return None, SUCCESS

    def filter(self, state: Any, pod: Any, node: Any) -> Status:
        team = state.read("Parsed")  # written by pre_filter; not called when pre_filter skipped
        return SUCCESS if node.labels.get("team", team) == team else Status.unresolvable("another team's node")


@pytest.mark.parametrize("labels", [{"team": "ml"}, {}], ids=["state from preFilter", "preFilter skipped"])
def test_preemption_runs_filter_plugins_with_their_prefilter_state(labels: dict[str, str]) -> None:
    low = make_pod("low").uid("low").req(gpu=2).node("a").priority(1).obj()
    h = PluginHarness(PluginSpec("Parsed", Parsed), nodes=[make_node("a").alloc(gpu=2).obj()], pods=[low],
                      plugins={"multiPoint": {"enabled": [{"name": "ManagedPreemption"}, {"name": "Parsed"}]}})
    verdict = h.filter(make_pod("p").req(gpu=2).priority(100).labels(**labels).obj())
    assert verdict.reasons("a") == ("Insufficient example.com/gpu",)  # Parsed itself passes the node
    assert verdict.nominated == "a"  # today: None (Parsed's filter raised KeyError in the preemption check)


# 8. The same plugin elsewhere a Filter runs outside the pod's own filter cycle: the preempt verb
#    (kube-scheduler's preemption, our preemption plugins judging its victims on a fresh
#    CycleState) and Gang's plan (each member's fit on the nodes, members planned before it
#    counted). Both ran Filter plugins on a CycleState no PreFilter had seen.

def _without_victims(self: Any, state: Any, pod: Any, node: Any, victims: Any) -> Any:
    """A preemption plugin keeping kube-scheduler's victims where the pod then passes Filter."""
    sim = node
    for k, v in enumerate(victims):
        sim = sim.without_pod(v.uid, -1 - k)
    fits = self.handle.run_filters(state.clone(), pod, sim)
    return (list(victims), SUCCESS) if fits.ok else ([], Status.unschedulable(fits.message))


@pytest.mark.parametrize("labels", [{"team": "ml"}, {}], ids=["state from preFilter", "preFilter skipped"])
def test_the_preempt_verb_runs_filter_plugins_with_their_prefilter_state(labels: dict[str, str]) -> None:
    keeper = type("Keeper", (), {"name": "Keeper", "__init__": lambda self, args, handle: setattr(self, "handle", handle),
                                 "process_preemption": _without_victims})
    low = make_pod("low").uid("low").req(gpu=2).node("a").priority(1).obj()
    h = PluginHarness(PluginSpec("Parsed", Parsed), PluginSpec("Keeper", keeper),
                      nodes=[make_node("a").alloc(gpu=2).obj()], pods=[low])
    assert h.preempt(make_pod("p").req(gpu=2).priority(100).labels(**labels).obj()) == {"a": ["default/low"]}


@pytest.mark.parametrize("labels", [{"team": "ml"}, {}], ids=["state from preFilter", "preFilter skipped"])
def test_gang_plans_its_members_with_filter_plugins_given_their_prefilter_state(labels: dict[str, str]) -> None:
    group = "scheduling.x-k8s.io/pod-group"
    members = [make_pod(f"m{k}").req(gpu=1).labels(**{group: "g"}, **labels).obj() for k in range(2)]
    h = PluginHarness(PluginSpec("Parsed", Parsed), nodes=[make_node("a").alloc(gpu=2).obj()], pods=members,
                      pod_groups=[make_pod_group("g").min_member(2).obj()],
                      plugins={"multiPoint": {"enabled": [{"name": "Gang"}, {"name": "Parsed"}]}})
    verdict = h.filter(members[0])
    assert (verdict.feasible, verdict.error) == (["a"], "")  # today: "pod group g does not fit: 0 of 2 members..."


def test_the_preempt_verb_keeps_no_candidate_for_a_pod_its_prefilter_finds_unresolvable() -> None:
    """kube-scheduler leaves nodes its PreFilter made unresolvable out of preemption: no eviction
    can help a pod no node may take (a gang backing off, say)."""
    refuser = spec_of("Refuser", pre_filter=lambda self, s, p, snap: (None, Status.unresolvable("never here")),
                      filter=lambda self, s, p, n: SUCCESS)
    low = make_pod("low").uid("low").req(gpu=2).node("a").priority(1).obj()
    h = PluginHarness(refuser, nodes=[make_node("a").alloc(gpu=2).obj()], pods=[low],
                      plugins={"multiPoint": {"enabled": [{"name": "ManagedPreemption"}, {"name": "Refuser"}]}})
    assert h.preempt(make_pod("p").req(gpu=2).priority(100).obj()) == {}  # before: {"a": ["default/low"]}


def _boom(*_: Any) -> Any:
    raise RuntimeError("boom")


def _quota_reporter(fail_after: int) -> PluginSpec:
    """A quota plugin whose report raises from its ``fail_after``+1-th call on."""
    calls: list[int] = []

    def report(self: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) > fail_after:
            raise RuntimeError("boom")
        return {}

    return spec_of("BadQuota", filter=lambda self, s, p, n: SUCCESS, quota_report=report,
                   quota_verdict=lambda self, pod: _boom())


@pytest.mark.parametrize("fail_after", [0, 1], ids=["from-start-up", "later"])
def test_a_raising_quota_reporter_takes_down_neither_start_up_nor_metrics(fail_after: int) -> None:
    """The quota gauges are read at registration (start-up) and at each scrape: a quota_report
    that raises stopped the app from being built (a bare traceback), or made every /metrics a
    500. The other families are still served, and the debug views name the plugin."""
    h = PluginHarness(_quota_reporter(fail_after), nodes=NODES)
    h.app.testing = False
    client = h.app.test_client()
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and "kube_extender_requests" in metrics.get_data(as_text=True)
    quota = client.get("/debug/quota")
    assert quota.status_code == 500 and "plugin BadQuota failed in quota_report" in quota.get_json()["message"]
    h.add(make_pod("p").req(gpu=1).obj())
    client.post("/scheduler/filter", json={"Pod": make_pod("p").req(gpu=1).obj(), "NodeNames": ["a"]})
    pod = client.get("/debug/pods/default/p")
    assert pod.status_code == 200 and "plugin BadQuota failed in quota_verdict" in pod.get_json()["quota"]


def test_a_raising_capacity_reporter_is_named_in_the_snapshot_view() -> None:
    h = PluginHarness(spec_of("BadCapacity", filter=lambda self, s, p, n: SUCCESS, node_capacity=_boom), nodes=NODES)
    h.app.testing = False
    reply = h.app.test_client().get("/debug/snapshot")
    assert reply.status_code == 200
    (devices,) = {str(n.get("devices")) for n in reply.get_json()["nodes"]}
    assert "plugin BadCapacity failed in node_capacity: RuntimeError: boom" in devices
