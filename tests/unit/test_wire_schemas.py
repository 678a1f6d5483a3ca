"""Wire contract of extender.api.schemas / extender.api.wire, checked without HTTP.

Requests are parsed like Go's ``encoding/json`` decodes them into the extender/v1 structs (spec
section 1.1): keys in any case, an exact match preferred, unknown keys ignored, null/absent fields
are "not set". Malformed envelopes become ``wire.BadRequest`` naming the key path. Every reply
built by ``extender.api.wire`` has exactly the Go field names (PascalCase, no extras, no omitted
fields) and integer scores 0..10.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from builders import make_node, make_pod
from marshmallow import Schema

from extender.api import schemas, wire
from extender.runtime.engine import Candidate, FilterOutcome, NodeTexts, PreemptDecision

PAYLOADS = Path(__file__).resolve().parents[1] / "payloads"

POD = make_pod("trainer").uid("uid-trainer").req(gpu=1).priority(10).obj()
POD_B = make_pod("other").uid("uid-other").req(gpu=2).obj()
NODE_A = make_node("node-a").alloc(gpu=4).obj()
NODE_B = make_node("node-b").alloc(gpu=2).obj()
NODE_LIST = {"metadata": {"resourceVersion": "7"}, "items": [NODE_A, NODE_B]}
VICTIM = make_pod("victim").uid("uid-victim").req(gpu=1).node("node-a").obj()

FILTER_ARGS = schemas.ExtenderArgsSchema()
PREEMPT_ARGS = schemas.ExtenderPreemptionArgsSchema()
BIND_ARGS = schemas.ExtenderBindingArgsSchema()


# ---- request parsing: keys like Go's decoder ------------------------------------------------

@pytest.mark.parametrize("body, want", [
    pytest.param({"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "node-b"]},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "node-b"]}, id="exact-keys-names-mode"),
    pytest.param({"Pod": POD, "Nodes": NODE_LIST, "NodeNames": None},
                 {"Pod": POD, "Nodes": NODE_LIST, "NodeNames": None}, id="exact-keys-full-nodes-mode"),
    pytest.param({"pod": POD, "nodes": None, "nodenames": ["node-a"]},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a"]}, id="all-lowercase"),
    pytest.param({"POD": POD, "NODES": None, "NODENAMES": ["node-a"]},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a"]}, id="all-uppercase"),
    pytest.param({"pod": POD, "nodeNames": ["node-a"]},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a"]}, id="camelCase"),
    pytest.param({"pOd": POD, "nOdEs": NODE_LIST},
                 {"Pod": POD, "Nodes": NODE_LIST, "NodeNames": None}, id="random-case-full-nodes"),
    pytest.param({"Pod": POD, "NodeNames": ["node-a"]},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a"]}, id="absent-Nodes-is-null"),
    pytest.param({"Pod": POD, "Nodes": NODE_LIST},
                 {"Pod": POD, "Nodes": NODE_LIST, "NodeNames": None}, id="absent-NodeNames-is-null"),
    pytest.param({"Pod": POD, "NodeNames": ["node-a"], "Extra": 1, "podX": {}, "Node_Names": 5, "": None},
                 {"Pod": POD, "Nodes": None, "NodeNames": ["node-a"]}, id="unknown-keys-ignored"),
    pytest.param({"Pod": POD, "NodeNames": []},
                 {"Pod": POD, "Nodes": None, "NodeNames": []}, id="empty-name-list"),
    pytest.param({"Pod": POD, "Nodes": {"metadata": {}, "items": None}},
                 {"Pod": POD, "Nodes": {"metadata": {}, "items": None}, "NodeNames": None}, id="null-items"),
])
def test_extender_args_parse_like_go(body: dict[str, Any], want: dict[str, Any]) -> None:
    assert wire.load(FILTER_ARGS, body) == want


@pytest.mark.parametrize("body, want_pod, want_names", [
    pytest.param({"pod": POD_B, "Pod": POD, "NodeNames": ["x"]}, POD, ["x"], id="exact-Pod-after-lowercase"),
    pytest.param({"Pod": POD, "pod": POD_B, "NodeNames": ["x"]}, POD, ["x"], id="exact-Pod-before-lowercase"),
    pytest.param({"Pod": POD, "nodenames": ["lower"], "NodeNames": ["exact"]}, POD, ["exact"],
                 id="exact-NodeNames-after-lowercase"),
    pytest.param({"Pod": POD, "NODENAMES": ["upper"], "NodeNames": ["exact"], "nodeNames": ["camel"]}, POD,
                 ["exact"], id="exact-NodeNames-among-three"),
])
def test_exact_key_wins_over_case_insensitive_match(body: dict[str, Any], want_pod: Any, want_names: list[str]) -> None:
    args = wire.load(FILTER_ARGS, body)
    assert args["Pod"] is want_pod
    assert args["NodeNames"] == want_names


@pytest.mark.parametrize("data, names, want", [
    pytest.param({"pod": 1, "NODENAMES": 2}, ("Pod", "NodeNames"), {"Pod": 1, "NodeNames": 2}, id="fold-case"),
    pytest.param({"Pod": 1, "pod": 2}, ("Pod",), {"Pod": 1}, id="exact-wins"),
    pytest.param({"Pods": 1}, ("Pod",), {}, id="no-prefix-match"),
    pytest.param({"junk": 1}, ("Pod",), {}, id="unknown-dropped"),
    pytest.param([1, 2], ("Pod",), [1, 2], id="non-mapping-untouched"),
])
def test_go_keys(data: Any, names: tuple[str, ...], want: Any) -> None:
    assert schemas.go_keys(data, names) == want


@pytest.mark.parametrize("args, want", [
    pytest.param({"NodeNames": ["b", "a"], "Nodes": None}, ["b", "a"], id="names-mode"),
    pytest.param({"NodeNames": None, "Nodes": NODE_LIST}, ["node-a", "node-b"], id="full-nodes-mode"),
    pytest.param({"NodeNames": None, "Nodes": {"items": None}}, [], id="full-nodes-null-items"),
    pytest.param({"NodeNames": ["x"], "Nodes": NODE_LIST}, ["x"], id="both-sent-names-win"),
])
def test_node_names_of(args: dict[str, Any], want: list[str]) -> None:
    assert wire.node_names_of(args) == want


# ---- preempt and bind requests ------------------------------------------------------------------

@pytest.mark.parametrize("body, want", [
    pytest.param({"Pod": POD, "NodeNameToVictims": None,
                  "NodeNameToMetaVictims": {"node-a": {"Pods": [{"UID": "u1"}, {"UID": "u2"}], "NumPDBViolations": 2}}},
                 {"node-a": Candidate([("u1", None), ("u2", None)], 2)}, id="meta-victims-uids"),
    pytest.param({"pod": POD, "nodenametometavictims": {"node-a": {"pods": [{"uid": "u1"}], "numpdbviolations": 1}}},
                 {"node-a": Candidate([("u1", None)], 1)}, id="meta-victims-lowercase-keys-every-level"),
    pytest.param({"Pod": POD, "NodeNameToMetaVictims": {"NODE-A": {"Pods": [{"UID": "u1"}]}}},
                 {"NODE-A": Candidate([("u1", None)], 0)}, id="map-keys-are-data-not-folded"),
    pytest.param({"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": None, "NumPDBViolations": None}}},
                 {"node-a": Candidate([], 0)}, id="meta-victims-nulls"),
    pytest.param({"Pod": POD, "NodeNameToMetaVictims": {"node-a": None}},
                 {"node-a": Candidate([], 0)}, id="meta-victims-null-entry"),
    pytest.param({"Pod": POD, "NodeNameToVictims": {"node-a": {"Pods": [VICTIM], "NumPDBViolations": 3}},
                  "NodeNameToMetaVictims": None},
                 {"node-a": Candidate([("uid-victim", VICTIM)], 3)}, id="full-victim-pods"),
    pytest.param({"POD": POD, "NODENAMETOVICTIMS": {"node-a": {"PODS": [VICTIM]}}},
                 {"node-a": Candidate([("uid-victim", VICTIM)], 0)}, id="full-victims-uppercase-keys"),
    pytest.param({"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": None}, {}, id="neither-map"),
    pytest.param({"Pod": POD, "NodeNameToMetaVictims": {}, "Extra": [1]}, {}, id="empty-map-unknown-key"),
])
def test_preemption_args_both_modes(body: dict[str, Any], want: dict[str, Candidate]) -> None:
    args = wire.load(PREEMPT_ARGS, body)
    assert args["Pod"] is POD
    assert wire.preempt_candidates(args) == want


def test_preemption_args_absent_maps_are_null() -> None:
    args = wire.load(PREEMPT_ARGS, {"Pod": POD})
    assert args == {"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": None}


@pytest.mark.parametrize("body, want", [
    pytest.param({"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"},
                 {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"}, id="exact"),
    pytest.param({"podname": "p", "podnamespace": "ml", "poduid": "u", "node": "n"},
                 {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"}, id="lowercase"),
    pytest.param({"PODNAME": "p", "PODNAMESPACE": "ml", "PODUID": "u", "NODE": "n"},
                 {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"}, id="uppercase"),
    pytest.param({"PodName": "p", "PodUID": "u", "Node": "n", "Binding": {}},
                 {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n"},
                 id="absent-namespace-default-unknown-ignored"),
    pytest.param({"PodName": "p", "PodNamespace": None, "PodUID": "u", "Node": "n"},
                 {"PodName": "p", "PodNamespace": None, "PodUID": "u", "Node": "n"}, id="null-namespace"),
    pytest.param({"node": "lower", "Node": "exact", "PodName": "p", "PodUID": "u"},
                 {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "exact"}, id="exact-wins"),
])
def test_binding_args(body: dict[str, Any], want: dict[str, Any]) -> None:
    assert wire.load(BIND_ARGS, body) == want


# ---- malformed envelopes: BadRequest naming the key path --------------------------------------

def _bad(schema: Schema, body: Any) -> wire.BadRequest:
    with pytest.raises(wire.BadRequest) as info:
        args = wire.load(schema, body)
        if schema is PREEMPT_ARGS:
            wire.preempt_candidates(args)
    return info.value


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


MALFORMED = [
    # filter / prioritize
    pytest.param(FILTER_ARGS, {"Pod": POD, "NodeNames": "node-a"}, "NodeNames: must be an array of strings",
                 id="NodeNames-string"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "NodeNames": ["node-a", 7]}, "NodeNames: must be an array of strings",
                 id="NodeNames-non-string-item"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "NodeNames": {"node-a": True}}, "NodeNames: must be an array of strings",
                 id="NodeNames-object"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": ["node-a"]}, "Nodes: must be a NodeList object",
                 id="Nodes-array"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": {"items": "node-a"}}, "Nodes.items: must be an array",
                 id="items-string"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": {"items": [1]}}, "Nodes.items[0]: must be a Node object",
                 id="items-not-objects"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": {"items": [NODE_A, {"metadata": {}}]}},
                 "Nodes.items[1]: must be a Node object with metadata.name", id="item-without-name"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": {"items": [NODE_A, {**NODE_B, "spec": _nested(300)}]}},
                 "Nodes.items[1]: nested too deeply to be echoed back", id="item-too-deep-to-echo"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": {"metadata": _nested(300), "items": [NODE_A]}},
                 "Nodes: nested too deeply to be echoed back", id="NodeList-too-deep-to-echo"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "NodeNames": ["node-a"], "Nodes": _nested(300)},
                 "Nodes: nested too deeply to be echoed back", id="NodeList-without-items-too-deep"),
    pytest.param(FILTER_ARGS, {"NodeNames": ["node-a"]}, "Pod: is required", id="Pod-missing"),
    pytest.param(FILTER_ARGS, {"Pod": None, "NodeNames": ["node-a"]}, "Pod: null is not allowed", id="Pod-null"),
    pytest.param(FILTER_ARGS, {"Pod": [POD], "NodeNames": ["node-a"]}, "Pod: Pod must be a JSON object",
                 id="Pod-array"),
    pytest.param(FILTER_ARGS, {"Pod": "trainer", "NodeNames": ["node-a"]}, "Pod: Pod must be a JSON object",
                 id="Pod-string"),
    pytest.param(FILTER_ARGS, {"Pod": {"spec": {}}, "NodeNames": ["node-a"]}, "Pod: Pod needs metadata.name",
                 id="Pod-without-name"),
    pytest.param(FILTER_ARGS, {"Pod": POD}, "one of Nodes", id="neither-Nodes-nor-NodeNames"),
    pytest.param(FILTER_ARGS, {"Pod": POD, "Nodes": None, "NodeNames": None}, "one of Nodes", id="both-null"),
    pytest.param(FILTER_ARGS, [POD], "expected a JSON object, got array", id="body-array"),
    pytest.param(FILTER_ARGS, "x", "expected a JSON object, got string", id="body-string"),
    pytest.param(FILTER_ARGS, None, "expected a JSON object, got null", id="body-null"),
    # preempt
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": [], "NumPDBViolations": 1.5}}},
                 "NodeNameToMetaVictims.node-a.NumPDBViolations: must be an integer", id="NumPDBViolations-1.5"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": [], "NumPDBViolations": "1"}}},
                 "NodeNameToMetaVictims.node-a.NumPDBViolations: must be an integer", id="NumPDBViolations-string"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": [], "NumPDBViolations": True}}},
                 "NodeNameToMetaVictims.node-a.NumPDBViolations: must be an integer", id="NumPDBViolations-bool"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"NumPDBViolations": 2**63}}},
                 "NodeNameToMetaVictims.node-a.NumPDBViolations: must be an integer", id="NumPDBViolations-overflow"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToVictims": {"node-a": {"Pods": [VICTIM], "NumPDBViolations": 1.0}}},
                 "NodeNameToVictims.node-a.NumPDBViolations: must be an integer", id="full-NumPDBViolations-float"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": [{}]}}},
                 "NodeNameToMetaVictims.node-a.Pods[0].UID: is required", id="MetaPod-without-UID"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": ["u1"]}}},
                 "NodeNameToMetaVictims.node-a.Pods[0]: expected a JSON object", id="MetaPod-not-object"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": {"node-a": {"Pods": {"UID": "u1"}}}},
                 "NodeNameToMetaVictims.node-a.Pods", id="MetaPods-not-list"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToMetaVictims": [{"UID": "u1"}]},
                 "NodeNameToMetaVictims", id="MetaVictims-map-is-list"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToVictims": {"node-a": {"Pods": [{"spec": {}}]}}},
                 "NodeNameToVictims.node-a.Pods[0]: Pod needs metadata.name", id="victim-without-name"),
    pytest.param(PREEMPT_ARGS, {"Pod": POD, "NodeNameToVictims": {"node-a": {"Pods": [{"metadata": {"name": "v"}}]}}},
                 "metadata.uid is required", id="victim-without-uid"),
    pytest.param(PREEMPT_ARGS, {"NodeNameToMetaVictims": {}}, "Pod: is required", id="preempt-Pod-missing"),
    # bind
    pytest.param(BIND_ARGS, {"PodName": "p", "PodNamespace": "ml", "Node": "n"}, "PodUID: is required",
                 id="bind-without-PodUID"),
    pytest.param(BIND_ARGS, {"PodName": "p", "PodUID": "", "Node": "n"}, "PodUID: must not be empty",
                 id="bind-empty-PodUID"),
    pytest.param(BIND_ARGS, {"PodName": "p", "PodUID": "u"}, "Node: is required", id="bind-without-Node"),
    pytest.param(BIND_ARGS, {"PodName": "", "PodUID": "u", "Node": "n"}, "PodName: must not be empty",
                 id="bind-empty-PodName"),
    pytest.param(BIND_ARGS, {"PodName": 5, "PodUID": "u", "Node": "n"}, "PodName", id="bind-PodName-number"),
    pytest.param(BIND_ARGS, {"PodName": "p", "PodUID": None, "Node": "n"}, "PodUID: null is not allowed",
                 id="bind-PodUID-null"),
    pytest.param(BIND_ARGS, ["p"], "expected a JSON object, got array", id="bind-body-array"),
]


@pytest.mark.parametrize("schema, body, message", MALFORMED)
def test_malformed_envelope_is_bad_request_naming_the_key(schema: Schema, body: Any, message: str) -> None:
    exc = _bad(schema, body)
    assert message in str(exc)


def test_bad_request_lists_every_problem() -> None:
    exc = _bad(FILTER_ARGS, {"Pod": [], "NodeNames": "x"})
    assert isinstance(exc.details, list)
    assert any(p.startswith("Pod:") for p in exc.details), exc.details
    assert any(p.startswith("NodeNames:") for p in exc.details), exc.details
    assert str(exc) == "; ".join(exc.details)


@pytest.mark.parametrize("raw, message", [
    pytest.param(b"", "empty request body", id="empty"),
    pytest.param(b"not json", "not valid JSON", id="garbage"),
    pytest.param(b'{"Pod": ', "not valid JSON", id="truncated"),
    pytest.param(b"\xff\xfe", "not valid JSON", id="invalid-utf8"),
    pytest.param(b"1e400", "not valid JSON", id="infinite-number"),
])
def test_decode_rejects(raw: bytes, message: str) -> None:
    with pytest.raises(wire.BadRequest, match=message):
        wire.decode(raw)


def test_duplicate_identical_keys_last_wins_like_go() -> None:
    body = b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["first"], "NodeNames": ["last"]}'
    assert wire.load(FILTER_ARGS, wire.decode(body))["NodeNames"] == ["last"]


def test_decode_accepts_go_compact_json() -> None:
    body = json.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["a"]}, separators=(",", ":")).encode()
    assert wire.decode(body)["NodeNames"] == ["a"]


# ---- replies: exact Go field names, validated by the reply schemas -------------------------------

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
NAMES_ARGS = {"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "node-b", "node-c"]}
FULL_ARGS = {"Pod": POD, "Nodes": NODE_LIST, "NodeNames": None}
OUTCOME = FilterOutcome(feasible=["node-a"], failed={"node-b": "Insufficient example.com/gpu"},
                        unresolvable={"node-c": "node(s) didn't offer example.com/gpu"})


def _filter_replies() -> list[Any]:
    return [
        pytest.param(wire.filter_reply(NAMES_ARGS, OUTCOME), id="filter-names-mode"),
        pytest.param(wire.filter_reply(FULL_ARGS, FilterOutcome(feasible=["node-b"], failed={"node-a": "x"})),
                     id="filter-full-nodes-mode"),
        pytest.param(wire.filter_reply(NAMES_ARGS, FilterOutcome()), id="filter-nothing-feasible"),
        pytest.param(wire.filter_reply(NAMES_ARGS, FilterOutcome(error="plugin broke")), id="filter-outcome-error"),
        pytest.param(wire.filter_error("boom"), id="filter-error"),
        pytest.param(wire.filter_error(""), id="filter-error-empty-message"),
    ]


def _assert_exact_keys(reply: Any, keys: set[str]) -> None:
    assert isinstance(reply, dict)
    assert set(reply) == keys, f"keys {sorted(reply)} != {sorted(keys)}"


@pytest.mark.parametrize("reply", _filter_replies())
def test_filter_reply_validates(reply: dict[str, Any]) -> None:
    _assert_exact_keys(reply, FILTER_KEYS)
    assert schemas.ExtenderFilterResultSchema().validate(reply) == {}
    assert isinstance(reply["Error"], str)
    json.dumps(reply)  # plain JSON types only


def test_filter_reply_names_mode() -> None:
    reply = wire.filter_reply(NAMES_ARGS, OUTCOME)
    assert reply == {"Nodes": None, "NodeNames": ["node-a"],
                     "FailedNodes": {"node-b": "Insufficient example.com/gpu"},
                     "FailedAndUnresolvableNodes": {"node-c": "node(s) didn't offer example.com/gpu"}, "Error": ""}


def test_filter_reply_full_nodes_mode_echoes_node_objects() -> None:
    reply = wire.filter_reply(FULL_ARGS, FilterOutcome(feasible=["node-b"], failed={"node-a": "Insufficient"}))
    assert reply["NodeNames"] is None
    assert reply["Nodes"] == {"metadata": {"resourceVersion": "7"}, "items": [NODE_B]}
    assert reply["Nodes"]["items"][0] is FULL_ARGS["Nodes"]["items"][1]  # the very object, unchanged


@pytest.mark.parametrize("groups", [
    pytest.param([], id="none"),
    pytest.param([(["node-b", "node-c"], "Insufficient example.com/gpu")], id="one-group"),
    pytest.param([(["node-b"], "Insufficient example.com/gpu"), (["node-c", "node-d"], "node(s) had \"taints\"")],
                 id="text-with-quotes"),
    pytest.param([(["node-b", "node-c"], "a"), (["node-c"], "b"), (["node-b", "node-b"], "c")],
                 id="repeated-names-later-text-wins"),
    pytest.param([(["node-a"], "a"), (['we"ird', "back\\slash", "tab\there", "ünï"], "b")],
                 id="names-needing-escapes"),
])
def test_grouped_texts_are_the_map_they_stand_for_on_the_wire(groups: list[tuple[list[str], str]]) -> None:
    texts = NodeTexts([(names, text, False) for names, text in groups])
    want: dict[str, str] = {}
    for names, text in groups:
        want.update(dict.fromkeys(names, text))
    assert texts == want and list(texts) == list(want) and len(texts) == len(want) and bool(texts) == bool(want)
    assert texts.sent() == sum(len(names) for names, _ in groups)
    first = NodeTexts([(names, text, True) for names, text in groups[:1]])  # plain names, promised
    outcome = FilterOutcome(feasible=["node-a"], failed=texts, unresolvable=first)
    reply = orjson.loads(orjson.dumps(wire.filter_reply(NAMES_ARGS, outcome)))
    assert reply["FailedNodes"] == want and list(reply["FailedNodes"]) == list(want)
    assert reply["FailedAndUnresolvableNodes"] == dict(first)
    assert schemas.ExtenderFilterResultSchema().validate(reply) == {}


@pytest.mark.parametrize("message, want", [("gpu inventory unavailable", "gpu inventory unavailable"),
                                           ("", "internal error")], ids=["message", "empty-message"])
def test_filter_error_reply(message: str, want: str) -> None:
    assert wire.filter_error(message) == {"Nodes": None, "NodeNames": None, "FailedNodes": None,
                                          "FailedAndUnresolvableNodes": None, "Error": want}


@pytest.mark.parametrize("scores", [
    pytest.param([], id="empty"),
    pytest.param([("node-a", 100), ("node-b", 0)], id="extremes"),
    pytest.param([("node-a", 55), ("node-b", 45), ("node-c", 5)], id="rounding"),
    pytest.param([("node-a", 250), ("node-b", -3)], id="out-of-range-clamped"),
])
def test_prioritize_reply_validates(scores: list[tuple[str, int]]) -> None:
    reply = orjson.loads(orjson.dumps(wire.prioritize_reply(scores)))
    assert isinstance(reply, list) and len(reply) == len(scores)
    for entry, (name, _) in zip(reply, scores):
        _assert_exact_keys(entry, {"Host", "Score"})
        assert entry["Host"] == name
        assert type(entry["Score"]) is int and 0 <= entry["Score"] <= 10
        assert schemas.HostPrioritySchema().validate(entry) == {}


@pytest.mark.parametrize("decisions", [
    pytest.param({}, id="veto-all"),
    pytest.param({"node-a": PreemptDecision(["u1", "u2"], 0)}, id="one-node"),
    pytest.param({"node-a": PreemptDecision(["u1"], 2), "node-b": PreemptDecision(["u3"], 0)}, id="two-nodes"),
])
def test_preempt_reply_validates(decisions: dict[str, PreemptDecision]) -> None:
    reply = wire.preempt_reply(decisions)
    _assert_exact_keys(reply, {"NodeNameToMetaVictims"})
    assert schemas.ExtenderPreemptionResultSchema().validate(reply) == {}
    assert set(reply["NodeNameToMetaVictims"]) == set(decisions)
    for node, mv in reply["NodeNameToMetaVictims"].items():
        _assert_exact_keys(mv, {"Pods", "NumPDBViolations"})
        assert type(mv["NumPDBViolations"]) is int and mv["NumPDBViolations"] == decisions[node].num_pdb_violations
        assert mv["Pods"] == [{"UID": uid} for uid in decisions[node].victims]  # order kept


@pytest.mark.parametrize("error", ["", "pod default/p is already assigned to node n2"], ids=["ok", "failure"])
def test_bind_reply_validates(error: str) -> None:
    reply = wire.bind_reply(error)
    assert reply == {"Error": error}
    assert schemas.ExtenderBindingResultSchema().validate(reply) == {}


# The reply schemas are the oracle above, so they must reject what kube-scheduler cannot read.
@pytest.mark.parametrize("schema, reply", [
    pytest.param(schemas.ExtenderFilterResultSchema(),
                 {"nodes": None, "nodeNames": [], "failedNodes": {}, "failedAndUnresolvableNodes": {}, "error": ""},
                 id="filter-lowercase-keys"),
    pytest.param(schemas.ExtenderFilterResultSchema(), {"NodeNames": ["a"], "Error": ""}, id="filter-omitted-fields"),
    pytest.param(schemas.ExtenderFilterResultSchema(),
                 {"Nodes": None, "NodeNames": ["a"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": "",
                  "Extra": 1}, id="filter-extra-key"),
    pytest.param(schemas.ExtenderFilterResultSchema(),
                 {"Nodes": None, "NodeNames": "a", "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""},
                 id="filter-NodeNames-not-list"),
    pytest.param(schemas.ExtenderFilterResultSchema(),
                 {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
                  "Error": None}, id="filter-Error-null"),
    pytest.param(schemas.HostPrioritySchema(), {"Host": "a", "Score": 5.0}, id="score-float"),
    pytest.param(schemas.HostPrioritySchema(), {"Host": "a", "Score": "5"}, id="score-string"),
    pytest.param(schemas.HostPrioritySchema(), {"host": "a", "score": 5}, id="priority-lowercase"),
    pytest.param(schemas.HostPrioritySchema(), {"Host": "a"}, id="priority-no-score"),
    pytest.param(schemas.ExtenderPreemptionResultSchema(), {"NodeNameToVictims": {}}, id="preempt-wrong-field"),
    pytest.param(schemas.ExtenderPreemptionResultSchema(), {"nodeNameToMetaVictims": {}}, id="preempt-lowercase"),
    pytest.param(schemas.ExtenderPreemptionResultSchema(),
                 {"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}], "NumPDBViolations": 0.5}}},
                 id="preempt-float-pdb"),
    pytest.param(schemas.ExtenderBindingResultSchema(), {"error": ""}, id="bind-lowercase"),
    pytest.param(schemas.ExtenderBindingResultSchema(), {}, id="bind-empty"),
])
def test_reply_schemas_reject_what_go_would_misread(schema: Schema, reply: Any) -> None:
    assert schema.validate(reply) != {}


# Regression: the preempt reply schema once nested the tolerant request-side MetaVictimsSchema.
@pytest.mark.parametrize("reply", [
    pytest.param({"NodeNameToMetaVictims": {"n": {"pods": [{"uid": "u"}], "numPDBViolations": 0}}},
                 id="nested-lowercase-keys"),
    pytest.param({"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}]}}}, id="nested-omitted-NumPDBViolations"),
    pytest.param({"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u", "Name": "x"}], "NumPDBViolations": 0}}},
                 id="nested-extra-key"),
    pytest.param({"NodeNameToMetaVictims": {"n": {"Pods": None, "NumPDBViolations": 0}}}, id="nested-null-Pods"),
    pytest.param({"NodeNameToMetaVictims": {"n": {"Pods": [{"UID": None}], "NumPDBViolations": 0}}},
                 id="nested-null-UID"),
])
def test_preemption_reply_schema_is_exact_below_top_level(reply: Any) -> None:
    assert schemas.ExtenderPreemptionResultSchema().validate(reply) != {}


# ---- score scale: 0..100 -> 0..10, half up, clamped --------------------------------------------

@pytest.mark.parametrize("score, want", [
    (0, 0), (1, 0), (4, 0), (5, 1), (14, 1), (15, 2), (25, 3), (44, 4), (45, 5), (50, 5), (55, 6),
    (94, 9), (95, 10), (99, 10), (100, 10),
    (-1, 0), (-1000, 0), (101, 10), (10**6, 10),
], ids=lambda v: str(v))
def test_to_extender_score(score: int, want: int) -> None:
    got = wire.to_extender_score(score)
    assert type(got) is int
    assert got == want


def test_to_extender_score_is_monotonic_over_the_whole_range() -> None:
    values = [wire.to_extender_score(s) for s in range(-5, 106)]
    assert values == sorted(values)
    assert set(values) == set(range(11))


# ---- golden bodies captured from the real kube-scheduler ----------------------------------------

GOLDEN = sorted(PAYLOADS.glob("kube-scheduler-*/*.json"))


def _golden_id(path: Path) -> str:
    return f"{path.parent.name.removeprefix('kube-scheduler-')}-{path.stem}"


def test_golden_payloads_exist() -> None:
    assert len(GOLDEN) == 8, GOLDEN


@pytest.mark.parametrize("path", GOLDEN, ids=_golden_id)
def test_golden_body_parses(path: Path) -> None:
    rec = json.loads(path.read_text())
    assert rec["method"] == "POST"
    assert rec["headers"]["Content-Type"] == "application/json"
    verb = rec["path"].rsplit("/", 1)[-1]
    body = rec["body"]
    if verb in ("filter", "prioritize"):
        assert set(body) == {"Pod", "Nodes", "NodeNames"}  # Go emits every field, capitalised
        args = wire.load(FILTER_ARGS, body)
        assert args["Nodes"] is None  # nodeCacheCapable: true
        assert wire.node_names_of(args) == ["node-1", "node-2", "node-3"]
        assert args["Pod"]["metadata"]["name"] == "gpu-pod"
    elif verb == "preempt":
        assert set(body) == {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"}
        args = wire.load(PREEMPT_ARGS, body)
        assert args["NodeNameToVictims"] is None
        candidates = wire.preempt_candidates(args)
        assert sorted(candidates) == ["node-1", "node-2", "node-3"]
        for node, cand in candidates.items():
            assert cand.victims == [(mv["UID"], None) for mv in body["NodeNameToMetaVictims"][node]["Pods"]]
            assert cand.num_pdb_violations == 0
    elif verb == "bind":
        assert set(body) == {"PodName", "PodNamespace", "PodUID", "Node"}
        assert wire.load(BIND_ARGS, body) == body
    else:
        pytest.fail(f"unexpected verb {verb} in {path}")
