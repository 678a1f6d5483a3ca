"""The oracle: what a reply to a fuzzed request may be, from the extender contract (the wire
types with their exact Go field names, what kube-scheduler accepts back) and the project's
promise for bad input (a 4xx whose JSON body names the problem), not from the server's code.

A 200 must be a valid answer to the request as sent:

* filter: exactly ``Nodes``, ``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``,
  ``Error``; with ``Error`` set, nothing else; else the survivors (``NodeNames`` when names were
  sent, the sent Node objects unchanged when Nodes were) are a subset of the names sent, and
  every name sent is kept, failed or unresolvable exactly once, with a reason;
* prioritize: a bare array of ``{"Host", "Score"}``, one per name sent, in order, integer scores
  0..10 (no floats anywhere);
* preempt: exactly ``NodeNameToMetaVictims``, keeping only candidates that were sent, each with
  at least one victim (kube-scheduler refuses a node without), victims only among those sent
  for that node;
* bind: exactly ``{"Error": ...}``;

and never for a pod asking for a negative or malformed quantity (the API server refuses such a
pod), nor an internal error reported in ``Error``. The request is read as the extender documents
it: JSON with duplicate keys resolved last-wins, struct fields matched exactly, else ignoring
case (``go_field``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from wire_fuzz.client import Reply

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def go_field(obj: dict[str, Any], name: str) -> Any:
    """The value of struct field ``name`` as the extender documents reading it: the key spelled
    exactly so, else the first key equal ignoring case; None when absent."""
    if name in obj:
        return obj[name]
    return next((v for k, v in obj.items() if k.lower() == name.lower()), None)


def sent(body: bytes) -> Any:
    """The request body as a JSON value (duplicate keys: the last one), or raise ValueError. An
    integer no Go integer type holds (beyond 64 bits) is read as a double: RFC 8259 promises no
    more across implementations, and the extender's decoder does the same."""
    return json.loads(body.decode("utf-8"), parse_constant=_no_constant, parse_int=_int)


def _int(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_float(text: str) -> Any:
    raise ValueError(f"a float ({text}) where Go wants an int64")


def judge(verb: str, request_body: bytes, reply: Reply, errors_expected: tuple[int, ...] = ()) -> list[str]:
    """What is wrong with ``reply`` to a ``verb`` request carrying ``request_body`` (empty: fine).
    ``errors_expected``: statuses of 500 and above that HTTP itself demands for how the request
    was sent (501 for an unknown transfer coding); they too must name the problem."""
    if reply.headers.get("content-type", "").split(";")[0] != "application/json":
        return [f"{reply.status} with Content-Type {reply.headers.get('content-type')!r}: {reply.body[:120]!r}"]
    try:
        payload = reply.json()
    except ValueError:
        return [f"{reply.status} with a body that is not JSON: {reply.body[:120]!r}"]
    if 400 <= reply.status < 500 or reply.status in errors_expected:
        if not (isinstance(payload, dict) and isinstance(payload.get("error"), str) and payload["error"]
                and isinstance(payload.get("message"), str) and payload["message"]):
            return [f"{reply.status} without error and message: {payload!r:.200}"]
        return []
    if reply.status != 200:
        return [f"status {reply.status}: {payload!r:.300}"]
    try:
        args = sent(request_body)
    except ValueError as exc:
        return [f"200 for a body that is not JSON ({exc}): {payload!r:.200}"]
    if not isinstance(args, dict):
        return [f"200 for a body that is not a JSON object: {payload!r:.200}"]
    pod = go_field(args, "Pod") if verb != "bind" else None
    if bad_quantities(pod):
        return [f"200 for a pod with a bad quantity: {bad_quantities(pod)[0]}"]
    try:
        json.loads(reply.body, parse_float=_no_float)
        floats = []
    except ValueError as exc:
        floats = [str(exc)] if verb in ("prioritize", "preempt") else []
    return floats + {"filter": _judge_filter, "prioritize": _judge_prioritize, "preempt": _judge_preempt,
                     "bind": _judge_bind}[verb](args, payload)


_QUANTITY = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[eE][+-]?[0-9]+|[numkMGTPE])?")


def bad_quantity(value: Any) -> bool:
    """``value`` is no amount a pod may request: not a quantity (ASCII digits only; Go trims
    spaces first), or below zero. ``null`` is not bad: Go decodes it as zero."""
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return True
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    if not _QUANTITY.fullmatch(text):
        return True
    return text.startswith("-") and any(c in "123456789" for c in text.split("e")[0].split("E")[0])


def bad_quantities(pod: Any) -> list[str]:
    """Where a pod (as sent) requests a bad quantity: containers', init containers' and overhead."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return []
    found = []
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            res = c.get("resources") if isinstance(c, dict) else None
            for kind in ("requests", "limits"):
                values = res.get(kind) if isinstance(res, dict) else None
                for name, q in (values.items() if isinstance(values, dict) else ()):
                    if bad_quantity(q):
                        found.append(f"{key}[{i}].{kind}[{name}] = {q!r:.40}")
    overhead = spec.get("overhead")
    for name, q in overhead.items() if isinstance(overhead, dict) else ():
        if bad_quantity(q):
            found.append(f"overhead[{name}] = {q!r:.40}")
    return found


def _names_sent(args: dict[str, Any]) -> tuple[list[Any], bool]:
    """The candidate names of an ExtenderArgs, and whether they came as NodeNames."""
    names = go_field(args, "NodeNames")
    if names is not None:
        return names, True
    nodes = go_field(args, "Nodes") or {}
    return [i["metadata"]["name"] for i in nodes.get("items") or []], False


def _judge_filter(args: dict[str, Any], reply: Any) -> list[str]:
    if not isinstance(reply, dict) or set(reply) != FILTER_KEYS:
        return [f"filter reply keys {sorted(reply) if isinstance(reply, dict) else type(reply).__name__}"]
    if not isinstance(reply["Error"], str):
        return [f"filter Error {reply['Error']!r}"]
    if reply["Error"]:
        problems = [] if not reply["Error"].startswith("internal error") else [f"internal error: {reply['Error']}"]
        if any(reply[k] is not None for k in FILTER_KEYS - {"Error"}):
            problems.append(f"filter Error with results: {reply!r:.200}")
        return problems
    names, by_name = _names_sent(args)
    if by_name:
        if reply["Nodes"] is not None or not isinstance(reply["NodeNames"], list):
            return [f"filter (NodeNames sent) answered Nodes={reply['Nodes']!r:.60} NodeNames={reply['NodeNames']!r:.60}"]
        survivors = reply["NodeNames"]
    else:
        items = (reply["Nodes"] or {}).get("items") if isinstance(reply["Nodes"], dict) else None
        if reply["NodeNames"] is not None or not isinstance(items, list):
            return [f"filter (Nodes sent) answered Nodes={reply['Nodes']!r:.60} NodeNames={reply['NodeNames']!r:.60}"]
        sent_items = (go_field(args, "Nodes") or {}).get("items") or []
        if any(item not in sent_items for item in items):
            return ["filter answered Node objects that were not sent (they must be echoed unchanged)"]
        survivors = [i["metadata"]["name"] for i in items]
    failed, unresolvable = reply["FailedNodes"], reply["FailedAndUnresolvableNodes"]
    if not isinstance(failed, dict) or not isinstance(unresolvable, dict):
        return [f"filter failed maps {failed!r:.60} {unresolvable!r:.60}"]
    problems = []
    if not all(isinstance(n, str) for n in survivors) or not set(survivors) <= set(names):
        problems.append(f"filter kept names that were not sent: {sorted(set(map(str, survivors)) - set(names))[:5]}")
    if len(survivors) != len(set(survivors)) and len(names) == len(set(names)):
        problems.append("filter kept a name twice")
    if not set(failed) | set(unresolvable) <= set(names):
        problems.append(f"filter rejected names that were not sent: {sorted(set(failed) | set(unresolvable))[:5]}")
    for name in set(names):
        homes = (name in survivors) + (name in failed) + (name in unresolvable)
        if homes != 1:
            problems.append(f"filter answered {name!r:.40} {homes} times (kept, failed, unresolvable)")
            break
    if not all(isinstance(r, str) and r for r in [*failed.values(), *unresolvable.values()]):
        problems.append("filter gave an empty or non-string reason")
    return problems


def _judge_prioritize(args: dict[str, Any], reply: Any) -> list[str]:
    names, _ = _names_sent(args)
    if not isinstance(reply, list):
        return [f"prioritize answered {type(reply).__name__}, not a bare array"]
    problems = []
    for entry in reply:
        if not isinstance(entry, dict) or set(entry) != {"Host", "Score"}:
            return [f"prioritize entry {entry!r:.100}"]
        if type(entry["Score"]) is not int or not 0 <= entry["Score"] <= 10:
            problems.append(f"prioritize score {entry['Score']!r} for {entry['Host']!r:.40}")
            break
    if [e["Host"] for e in reply] != names:
        problems.append(f"prioritize hosts {[e['Host'] for e in reply][:5]!r:.100} for names {names[:5]!r:.100}")
    return problems


def _candidates_sent(args: dict[str, Any]) -> dict[str, set[Any]]:
    """node -> victim UIDs of a preempt request (either form)."""
    meta = go_field(args, "NodeNameToMetaVictims")
    if meta is not None:
        return {node: {go_field(p, "UID") for p in go_field(mv or {}, "Pods") or []} for node, mv in meta.items()}
    full = go_field(args, "NodeNameToVictims") or {}
    return {node: {(p.get("metadata") or {}).get("uid") for p in go_field(v or {}, "Pods") or []}
            for node, v in full.items()}


def _judge_preempt(args: dict[str, Any], reply: Any) -> list[str]:
    if not isinstance(reply, dict) or set(reply) != {"NodeNameToMetaVictims"} \
            or not isinstance(reply["NodeNameToMetaVictims"], dict):
        return [f"preempt reply {reply!r:.200}"]
    candidates = _candidates_sent(args)
    for node, mv in reply["NodeNameToMetaVictims"].items():
        if node not in candidates:
            return [f"preempt kept node {node!r:.40} that was not a candidate"]
        if not isinstance(mv, dict) or set(mv) != {"Pods", "NumPDBViolations"} or not isinstance(mv["Pods"], list):
            return [f"preempt victims of {node!r:.40}: {mv!r:.100}"]
        if type(mv["NumPDBViolations"]) is not int or mv["NumPDBViolations"] < 0:
            return [f"preempt NumPDBViolations {mv['NumPDBViolations']!r}"]
        if not mv["Pods"]:
            return [f"preempt kept {node!r:.40} with no victim (kube-scheduler rejects that)"]
        for p in mv["Pods"]:
            if not isinstance(p, dict) or set(p) != {"UID"} or not isinstance(p["UID"], str):
                return [f"preempt victim {p!r:.100}"]
            if p["UID"] not in candidates[node]:
                return [f"preempt named victim {p['UID']!r:.40} on {node!r:.40}, not sent for that node"]
    return []


def _judge_bind(args: dict[str, Any], reply: Any) -> list[str]:
    if not isinstance(reply, dict) or set(reply) != {"Error"} or not isinstance(reply["Error"], str):
        return [f"bind reply {reply!r:.200}"]
    if "internal error" in reply["Error"]:
        return [f"bind internal error: {reply['Error']:.200}"]
    return []
