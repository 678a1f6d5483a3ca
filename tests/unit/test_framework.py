"""The seeds' extension-point semantics, rule by rule, with scripted fake plugins."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from builders import make_node, make_pod
from fakes import fake

from extender.cache.cache import ClusterCache
from extender.framework.clock import FakeClock
from extender.framework.cycle_state import CycleState
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime.waiting_pods import WaitingPods


class NullWriter:
    def bind(self, *a: Any) -> None: ...
    def patch_pod_metadata(self, *a: Any, **k: Any) -> None: ...
    def evict(self, *a: Any) -> None: ...
    def record_event(self, *a: Any, **k: Any) -> None: ...


def handle(http_timeout: float = 5.0, clock: FakeClock | None = None) -> EngineHandle:
    clock = clock or FakeClock()
    return EngineHandle(ClusterCache(["example.com/gpu"], clock), NullWriter(), clock, WaitingPods(),
                        frozenset({"example.com/gpu"}), http_timeout=http_timeout)


POD = PodInfo.from_pod(make_pod("p").obj())
NODES = [NodeInfo(n, make_node(n).obj()) for n in ("n1", "n2", "n3")]


def framework(**points: Any) -> Framework:
    return Framework("default-scheduler", handle(), **points)


# ---- Filter -----------------------------------------------------------------------------------

def test_filter_runs_plugins_in_order_and_first_rejection_ends_the_node() -> None:
    journal: list = []
    a = fake("A", {"filter"}, journal, filter=lambda n: Status.unschedulable("A says no") if n == "n2" else Status())
    b = fake("B", {"filter"}, journal, filter=Status())
    result = framework(filter=[a, b]).run_filter(CycleState(), POD, NODES)
    assert result.feasible == ["n1", "n3"]
    assert result.rejected["n2"].plugin == "A"
    assert ("B", "filter", "n2") not in journal
    assert [e for e in journal if e[2] == "n1"] == [("A", "filter", "n1"), ("B", "filter", "n1")]


@pytest.mark.parametrize("answer, code", [
    (Status.unschedulable("x"), Code.UNSCHEDULABLE),
    (Status.unresolvable("x"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
    (RuntimeError("boom"), Code.ERROR),
], ids=["unschedulable", "unresolvable", "exception becomes error"])
def test_filter_rejection_codes_are_kept_and_name_the_plugin(answer: Any, code: Code) -> None:
    result = framework(filter=[fake("A", {"filter"}, filter=answer)]).run_filter(CycleState(), POD, NODES[:1])
    assert result.feasible == []
    assert result.rejected["n1"].code is code
    assert result.rejected["n1"].plugin == "A"
    if code is Code.ERROR:
        assert "A" in result.rejected["n1"].message and "boom" in result.rejected["n1"].message


# ---- PreFilter ----------------------------------------------------------------------------------

class Boom:
    """A Filter plugin that fails on every node, per node or in a batch."""

    name = "Boom"

    def filter(self, state: Any, pod: Any, node: Any) -> Status:
        raise RuntimeError("boom")


class BatchBoom(Boom):
    name = "BatchBoom"

    def filter_all(self, state: Any, pod: Any, nodes: Any) -> dict[str, Status]:
        raise RuntimeError("boom")


@pytest.mark.parametrize("plugins", [[Boom()], [BatchBoom()], [fake("Ok", {"filter"}), Boom()]],
                         ids=["per node", "batch", "second of two"])
def test_a_crashing_filter_is_one_error_and_one_traceback_per_request(plugins: list[Any], caplog: Any) -> None:
    nodes = [NodeInfo(f"n{i}", make_node(f"n{i}").obj()) for i in range(200)]
    with caplog.at_level("ERROR"):
        result = framework(filter=plugins).run_filter(CycleState(), POD, nodes)
    assert result.feasible == [] and len(result.rejected) == 200
    assert {st.code for st in result.rejected.values()} == {Code.ERROR}
    assert len({id(st) for st in result.rejected.values()}) == 1, "one shared Error status"
    assert len([r for r in caplog.records if r.exc_info]) == 1


def test_prefilter_results_intersect() -> None:
    a = fake("A", {"preFilter"}, pre_filter=({"n1", "n2"}, Status()))
    b = fake("B", {"preFilter"}, pre_filter=({"n2", "n3"}, Status()))
    allowed, st = framework(pre_filter=[a, b]).run_pre_filter(CycleState(), POD, None)  # type: ignore[arg-type]
    assert st.ok and allowed == frozenset({"n2"})


def test_prefilter_rejection_aborts_and_later_plugins_do_not_run() -> None:
    journal: list = []
    a = fake("A", {"preFilter"}, journal, pre_filter=(None, Status.unresolvable("gated")))
    b = fake("B", {"preFilter"}, journal)
    allowed, st = framework(pre_filter=[a, b]).run_pre_filter(CycleState(), POD, None)  # type: ignore[arg-type]
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.plugin == "A"
    assert [j[0] for j in journal] == ["A"]


def test_prefilter_skip_disables_that_plugins_filter() -> None:
    journal: list = []
    a = fake("A", {"preFilter", "filter"}, journal, pre_filter=(None, Status(Code.SKIP)),
             filter=Status.unschedulable("never asked"))
    fw = framework(pre_filter=[a], filter=[a])
    state = CycleState()
    fw.run_pre_filter(state, POD, None)  # type: ignore[arg-type]
    assert fw.run_filter(state, POD, NODES).feasible == ["n1", "n2", "n3"]
    assert ("A", "filter", "n1") not in journal


# ---- PostFilter ---------------------------------------------------------------------------------

def test_postfilter_stops_at_first_success() -> None:
    journal: list = []
    a = fake("A", {"postFilter"}, journal, post_filter=(None, Status.unschedulable("cannot help")))
    b = fake("B", {"postFilter"}, journal, post_filter=("n2", Status()))
    c = fake("C", {"postFilter"}, journal, post_filter=("n3", Status()))
    nominated, st = framework(post_filter=[a, b, c]).run_post_filter(CycleState(), POD, {})
    assert (nominated, st.ok, st.plugin) == ("n2", True, "B")
    assert [j[0] for j in journal] == ["A", "B"]


# ---- Score ----------------------------------------------------------------------------------

def test_score_normalizes_once_per_plugin_then_weights_average() -> None:
    journal: list = []
    scores = {"n1": 10, "n2": 20, "n3": 40}
    a = fake("A", {"score"}, journal, score=lambda n: scores[n],
             normalize=lambda s: s.update({k: v * 100 // 40 for k, v in s.items()}))
    b = fake("B", {"score"}, journal, score=lambda n: 100 if n == "n1" else 0)
    totals, st = framework(score=[(a, 1), (b, 3)]).run_score(CycleState(), POD, NODES)
    assert st.ok
    # A normalized: n1 25, n2 50, n3 100; weighted with B (x3): (25+300)/4, (50+0)/4, (100+0)/4
    assert totals == {"n1": 81, "n2": 12, "n3": 25}
    assert [j for j in journal if j[1] == "normalize"] == [("A", "normalize", "p")]


@pytest.mark.parametrize("bad", [101, -1, 5.0, "7"], ids=repr)
def test_score_out_of_range_or_not_int_is_an_error(bad: Any) -> None:
    totals, st = framework(score=[(fake("A", {"score"}, score=bad), 1)]).run_score(CycleState(), POD, NODES)
    assert st.code is Code.ERROR and st.plugin == "A"


def test_prescore_skip_drops_that_plugins_score() -> None:
    a = fake("A", {"preScore", "score"}, pre_score=Status(Code.SKIP), score=100)
    b = fake("B", {"score"}, score=50)
    totals, st = framework(pre_score=[a], score=[(a, 1), (b, 1)]).run_score(CycleState(), POD, NODES)
    assert st.ok and totals == {"n1": 50, "n2": 50, "n3": 50}


def test_prescore_error_aborts_scoring() -> None:
    a = fake("A", {"preScore"}, pre_score=Status.failure("broken"))
    _, st = framework(pre_score=[a]).run_score(CycleState(), POD, NODES)
    assert st.code is Code.ERROR


# ---- Reserve / Unreserve --------------------------------------------------------------------

def test_reserve_failure_unreserves_every_reserve_plugin_in_reverse_order() -> None:
    journal: list = []
    a = fake("A", {"reserve"}, journal)
    b = fake("B", {"reserve"}, journal, reserve=Status.unschedulable("no room"))
    c = fake("C", {"reserve"}, journal)
    st = framework(reserve=[a, b, c]).run_reserve(CycleState(), POD, "n1")
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "B"
    assert journal == [("A", "reserve", "n1"), ("B", "reserve", "n1"),
                       ("C", "unreserve", "n1"), ("B", "unreserve", "n1"), ("A", "unreserve", "n1")]


def test_unreserve_failure_is_swallowed_and_the_rest_still_run() -> None:
    journal: list = []
    a = fake("A", {"reserve"}, journal)
    b = fake("B", {"reserve"}, journal, unreserve=RuntimeError("oops"))
    framework(reserve=[a, b]).run_unreserve(CycleState(), POD, "n1")
    assert journal == [("B", "unreserve", "n1"), ("A", "unreserve", "n1")]


# ---- Permit ---------------------------------------------------------------------------------

def test_permit_deny_wins_over_wait() -> None:
    a = fake("A", {"permit"}, permit=(Status.wait(), 10.0))
    b = fake("B", {"permit"}, permit=(Status.unschedulable("denied"), 0.0))
    st = framework(permit=[a, b]).run_permit(CycleState(), POD, "n1")
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "B"


def test_permit_wait_is_released_when_every_waiting_plugin_allows() -> None:
    a = fake("A", {"permit"}, permit=(Status.wait(), 30.0))
    b = fake("B", {"permit"}, permit=(Status.wait(), 30.0))
    fw = framework(permit=[a, b])
    assert fw.run_permit(CycleState(), POD, "n1").code is Code.WAIT
    wp = fw.waiting_pods.get(POD.uid)
    assert wp is not None and wp.pending_plugins() == ["A", "B"]
    result: list[Status] = []
    t = threading.Thread(target=lambda: result.append(fw.wait_on_permit(POD)))
    t.start()
    wp.allow("A")
    t.join(0.2)
    assert t.is_alive(), "one allow of two must not release the pod"
    wp.allow("B")
    t.join(5)
    assert result and result[0].ok
    assert fw.waiting_pods.get(POD.uid) is None


def test_permit_reject_through_the_handle_denies() -> None:
    fw = framework(permit=[fake("A", {"permit"}, permit=(Status.wait(), 30.0))])
    fw.run_permit(CycleState(), POD, "n1")
    fw.handle.waiting_pods.get(POD.uid).reject("Gang", "group timed out")  # type: ignore[union-attr]
    st = fw.wait_on_permit(POD)
    assert st.code is Code.UNSCHEDULABLE and st.plugin == "Gang" and "group timed out" in st.message


def test_permit_wait_times_out_into_a_denial_within_the_http_budget() -> None:
    fw = Framework("p", handle(http_timeout=0.3), permit=[fake("A", {"permit"}, permit=(Status.wait(), 60.0))])
    fw.run_permit(CycleState(), POD, "n1")
    st = fw.wait_on_permit(POD)  # budget = 0.3 - min(1, 0.15) = 0.15 s, far below the plugin's 60 s
    assert st.code is Code.UNSCHEDULABLE and "timed out" in st.message


def test_permit_budget_leaves_room_for_the_binding_call() -> None:
    assert handle(http_timeout=5.0).permit_budget() == 4.0
    assert handle(http_timeout=1.0).permit_budget() == 0.5


# ---- Bind -----------------------------------------------------------------------------------

def test_bind_first_plugin_that_does_not_skip_handles_it() -> None:
    journal: list = []
    a = fake("A", {"bind"}, journal, bind=Status(Code.SKIP))
    b = fake("B", {"bind"}, journal, bind=Status())
    c = fake("C", {"bind"}, journal, bind=Status.failure("never called"))
    st = framework(bind=[a, b, c]).run_bind(CycleState(), POD, "n1")
    assert st.ok and st.plugin == "B"
    assert [j[0] for j in journal] == ["A", "B"]


def test_bind_with_every_plugin_skipping_is_an_error() -> None:
    st = framework(bind=[fake("A", {"bind"}, bind=Status(Code.SKIP))]).run_bind(CycleState(), POD, "n1")
    assert st.code is Code.ERROR


def test_prebind_error_and_postbind_exception() -> None:
    fw = framework(pre_bind=[fake("A", {"preBind"}, pre_bind=RuntimeError("disk"))],
                   post_bind=[fake("B", {"postBind"}, post_bind=RuntimeError("ignored"))])
    st = fw.run_pre_bind(CycleState(), POD, "n1")
    assert st.code is Code.ERROR and st.plugin == "A"
    fw.run_post_bind(CycleState(), POD, "n1")  # informational: must not raise
