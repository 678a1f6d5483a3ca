"""Wire conversion: request bodies -> engine calls -> reply dicts with the exact Go field names.

Replies always carry every field (Go emits no ``omitempty``): filter answers ``Nodes``,
``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes`` and ``Error``; prioritize a bare
array of ``{"Host", "Score"}`` with integer scores 0..10; preempt ``NodeNameToMetaVictims`` (in
both nodeCacheCapable modes); bind ``{"Error": ""}``.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

import numpy as np
import orjson
from marshmallow import Schema, ValidationError

from extender.cache.columns import json_plain
from extender.framework.interfaces import MAX_NODE_SCORE
from extender.framework.problems import as_text as problems_text
from extender.runtime.batch import Priorities
from extender.runtime.engine import Candidate, FilterOutcome, NodeTexts, PreemptDecision

MAX_EXTENDER_PRIORITY = 10


class BadRequest(ValueError):
    """A request body that cannot be used; answered with HTTP 400 and a JSON body naming it."""

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.details = details


def decode(body: bytes) -> Any:
    if not body:
        raise BadRequest("empty request body: expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


def load(schema: Schema, data: Any) -> dict[str, Any]:
    """Validate an envelope; BadRequest lists every problem with its key path."""
    try:
        return schema.load(data)
    except ValidationError as exc:
        problems = problems_text(exc.messages)
        raise BadRequest("; ".join(problems), problems) from exc


_ARGS_KEYS = frozenset({"Pod", "Nodes", "NodeNames"})
_STR = frozenset({str})


def load_extender_args(schema: Schema, data: Any) -> dict[str, Any]:
    """ExtenderArgs as kube-scheduler sends it with ``nodeCacheCapable: true`` (exact keys,
    ``Nodes: null``, a list of names) is checked inline - the same checks the schema makes, in
    one pass; any other shape (other key case, full Node objects, anything malformed) goes
    through the schema, which names the problem."""
    if type(data) is dict and data.keys() <= _ARGS_KEYS and data.get("Nodes") is None:
        pod, names = data.get("Pod"), data.get("NodeNames")
        meta = pod.get("metadata") if type(pod) is dict else None
        if (type(meta) is dict and type(meta.get("name")) is str and meta["name"]
                and type(names) is list and set(map(type, names)) <= _STR):
            return {"Pod": pod, "Nodes": None, "NodeNames": names}
    return load(schema, data)


def node_names_of(args: Mapping[str, Any]) -> list[str]:
    """The candidate names: ``NodeNames`` when sent (nodeCacheCapable: true), else the names of
    ``Nodes.items``."""
    if args.get("NodeNames") is not None:
        return args["NodeNames"]
    return [item["metadata"]["name"] for item in args["Nodes"].get("items") or []]


def filter_reply(args: Mapping[str, Any], outcome: FilterOutcome) -> dict[str, Any]:
    if outcome.error:
        return filter_error(outcome.error)
    if args.get("NodeNames") is not None:
        nodes: Any = None
        names: Any = outcome.feasible
    else:
        keep = set(outcome.feasible)
        node_list = args["Nodes"]
        nodes = {**node_list, "items": [i for i in node_list.get("items") or [] if i["metadata"]["name"] in keep]}
        names = None
    return {"Nodes": nodes, "NodeNames": names, "FailedNodes": _texts(outcome.failed),
            "FailedAndUnresolvableNodes": _texts(outcome.unresolvable), "Error": ""}


def _texts(texts: Mapping[str, str]) -> Any:
    """A name -> text map for the reply: ``NodeTexts`` already serialized from its groups - per
    group, the names joined around the text in one C-level pass (a repeated name is a repeated
    key with the same text, or the later group's, which is the one a decoder keeps) -, any other
    mapping as it is. A group with a name needing an escape takes orjson over the dict."""
    if not isinstance(texts, NodeTexts):
        return texts
    if not texts:
        return {}
    parts = ["{"]
    for names, text, plain in texts.groups():
        if not plain and not json_plain("".join(names)):
            return dict(texts)
        between = '":' + orjson.dumps(text).decode() + ',"'
        parts += ('"', between.join(names), between[:-2], ",")
    parts[-1] = "}"
    return orjson.Fragment("".join(parts))


def filter_error(message: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
            "Error": message or "internal error"}


def to_extender_score(score: int) -> int:
    """0..MAX_NODE_SCORE -> 0..10, rounding half up; the only place the scale changes."""
    score = min(max(score, 0), MAX_NODE_SCORE)
    return (score * MAX_EXTENDER_PRIORITY + MAX_NODE_SCORE // 2) // MAX_NODE_SCORE


_EXTENDER_SCORES = np.array([to_extender_score(s) for s in range(MAX_NODE_SCORE + 1)], dtype=np.int64)
_ENTRY_TAILS = {s: f'","Score":{to_extender_score(s)}}}' for s in range(MAX_NODE_SCORE + 1)}
"""The end of a reply entry after the host's name, by score 0..MAX_NODE_SCORE."""


def prioritize_reply(scores: Priorities | Sequence[tuple[str, int]]) -> orjson.Fragment:
    """``HostPriorityList``: every (node, 0..MAX_NODE_SCORE score) as ``{"Host", "Score"}`` on
    the extender's 0..10 scale (out-of-range scores are clamped), already serialized. Node names
    need no escape in JSON: the document is then joined from per-score fragments in a few
    C-level passes (5,000 dicts built for orjson cost more than the rest of the reply); a score
    out of range or a name needing an escape takes orjson over the dicts."""
    if isinstance(scores, Priorities):
        names, values = scores.names, scores.scores.tolist()
    else:
        names, values = [name for name, _ in scores], [s for _, s in scores]
    if not len(names):
        return orjson.Fragment(b"[]")
    if json_plain("".join(names)):
        try:
            body = ',{"Host":"'.join(map(operator.add, names, map(_ENTRY_TAILS.__getitem__, values)))
            return orjson.Fragment(('[{"Host":"' + body + "]").encode())
        except KeyError:
            pass  # a score out of range: clamped below
    clamped = np.clip(np.array(values, dtype=np.int64), 0, MAX_NODE_SCORE)
    return orjson.Fragment(orjson.dumps([{"Host": name, "Score": score}
                                         for name, score in zip(names, _EXTENDER_SCORES[clamped].tolist())]))


def preempt_candidates(args: Mapping[str, Any]) -> dict[str, Candidate]:
    """Candidates from either request form; UIDs from full pods when nodeCacheCapable is false."""
    out: dict[str, Candidate] = {}
    if args.get("NodeNameToMetaVictims") is not None:
        for node, mv in args["NodeNameToMetaVictims"].items():
            mv = mv or {}
            out[node] = Candidate([(p["UID"], None) for p in mv.get("Pods") or []], mv.get("NumPDBViolations") or 0)
    elif args.get("NodeNameToVictims") is not None:
        for node, v in args["NodeNameToVictims"].items():
            v = v or {}
            victims = []
            for i, pod in enumerate(v.get("Pods") or []):
                uid = (pod.get("metadata") or {}).get("uid")
                if not isinstance(uid, str) or not uid:
                    raise BadRequest(f"NodeNameToVictims[{node}].Pods[{i}]: metadata.uid is required")
                victims.append((uid, pod))
            out[node] = Candidate(victims, v.get("NumPDBViolations") or 0)
    return out


def preempt_reply(decisions: Mapping[str, PreemptDecision]) -> dict[str, Any]:
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in d.victims], "NumPDBViolations": int(d.num_pdb_violations)}
        for node, d in decisions.items()}}


def bind_reply(error: str) -> dict[str, str]:
    return {"Error": error}
