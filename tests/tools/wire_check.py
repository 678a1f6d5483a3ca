#!/usr/bin/env python3
"""Black-box wire check of a running kube-extender against the kube-scheduler extender contract.

Usage: wire_check.py BASE_URL        e.g. http://127.0.0.1:18888/scheduler

The server must have been started fresh on tests/integration/data/smoke-cluster.yaml with the
default configuration (managed resource example.com/gpu). Requests are shaped exactly as
kube-scheduler's Go client sends them (capitalised keys, null for the unused fields); replies are
judged by the extender contract as kube-scheduler reads them (see ``extender.sim``), and the
request bodies captured from real kube-schedulers (tests/payloads) must get answers of the right
shape. Standard library only.
"""
import http.client
import json
import sys
import urllib.error
import urllib.request

NODES = ["node-a", "node-b", "node-c", "node-d"]
UID = {"trainer-0": "5b0c0d00-0000-4000-8000-000000000002",
       "trainer-1": "5b0c0d00-0000-4000-8000-000000000003",
       "batch-low": "5b0c0d00-0000-4000-8000-000000000001"}


def pod(name, gpus, priority=1000, uid=None):
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid or UID.get(name, "00000000-0000-4000-8000-0000000000ff"),
                     "creationTimestamp": "2026-01-01T00:01:00Z", "resourceVersion": "42"},
        "spec": {"schedulerName": "default-scheduler", "priority": priority,
                 "preemptionPolicy": "PreemptLowerPriority", "restartPolicy": "Always",
                 "containers": [{"name": "main", "image": "example.com/trainer:1",
                                 "resources": {"requests": {"cpu": "2", "example.com/gpu": str(gpus)},
                                               "limits": {"example.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def node_obj(name, gpus):
    alloc = {"cpu": "15800m", "memory": "63Gi", "pods": "110"}
    if gpus is not None:
        alloc["example.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True"}],
                                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}


class Check:
    def __init__(self, base):
        self.base = base.rstrip("/")
        self.passed = 0
        self.failed = 0

    def post(self, verb, body, raw=None):
        data = raw if raw is not None else json.dumps(body, separators=(",", ":")).encode()
        req = urllib.request.Request(f"{self.base}/{verb}", data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "Go-http-client/1.1"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Content-Type", ""), err.read()
        except (OSError, http.client.HTTPException) as err:  # the server dropped or refused the connection
            return 0, "", f"no HTTP answer: {err!r}".encode()

    def expect(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")

    def json_of(self, name, status, body):
        if status != 200:
            self.expect(name, False, f"HTTP {status}: {body[:200]!r}")
            return None
        try:
            return json.loads(body)
        except ValueError:
            self.expect(name, False, f"reply is not JSON: {body[:200]!r}")
            return None


def filter_result_ok(c, name, reply, want_names, want_failed, want_unresolvable):
    if not isinstance(reply, dict):
        return c.expect(name, False, f"reply must be a JSON object, got {type(reply).__name__}")
    keys = {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    missing = keys - set(reply)
    if missing:
        return c.expect(name, False, f"missing exact keys {sorted(missing)} in {sorted(reply)}")
    names = reply["NodeNames"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return c.expect(name, False, f"NodeNames must be a list of strings, got {names!r}")
    if set(names) - set(NODES):
        return c.expect(name, False, f"NodeNames not a subset of the input: {names}")
    failed = reply["FailedNodes"] or {}
    unres = reply["FailedAndUnresolvableNodes"] or {}
    if not isinstance(failed, dict) or not isinstance(unres, dict):
        return c.expect(name, False, "FailedNodes / FailedAndUnresolvableNodes must be maps")
    if reply["Error"] not in ("", None):
        return c.expect(name, False, f"Error set: {reply['Error']!r}")
    problems = []
    if sorted(names) != sorted(want_names):
        problems.append(f"survivors {sorted(names)} != {sorted(want_names)}")
    for n in want_failed:
        if n not in failed or n in unres:
            problems.append(f"{n} should be in FailedNodes only (preemption may help)")
    for n in want_unresolvable:
        if n not in unres:
            problems.append(f"{n} should be in FailedAndUnresolvableNodes")
    for n, msg in list(failed.items()) + list(unres.items()):
        if not isinstance(msg, str) or not msg:
            problems.append(f"reason for {n} must be a non-empty string")
    c.expect(name, not problems, "; ".join(problems))


def main():
    c = Check(sys.argv[1])

    # filter, nodeCacheCapable: true
    st, _, body = c.post("filter", {"Pod": pod("trainer-0", 1), "Nodes": None, "NodeNames": NODES})
    reply = c.json_of("filter (names)", st, body)
    if reply is not None:
        filter_result_ok(c, "filter (names)", reply, ["node-a"], ["node-b"], ["node-c", "node-d"])

    # filter, nodeCacheCapable: false: Nodes is read back, objects echoed
    items = [node_obj("node-a", 4), node_obj("node-b", 2), node_obj("node-c", 0), node_obj("node-d", None)]
    st, _, body = c.post("filter", {"Pod": pod("trainer-0", 1), "Nodes": {"metadata": {}, "items": items},
                                    "NodeNames": None})
    reply = c.json_of("filter (full nodes)", st, body)
    if reply is not None:
        nodes = (reply.get("Nodes") or {}).get("items") if isinstance(reply, dict) else None
        ok = isinstance(nodes, list) and [n.get("metadata", {}).get("name") for n in nodes] == ["node-a"]
        c.expect("filter (full nodes)", ok and nodes[0] == items[0],
                 f"Nodes.items must echo exactly node-a's object, got {str(reply)[:300]}")

    # prioritize: a bare array of {Host, Score:int 0..10}
    st, _, body = c.post("prioritize", {"Pod": pod("trainer-0", 1), "Nodes": None, "NodeNames": ["node-a", "node-b"]})
    reply = c.json_of("prioritize", st, body)
    if reply is not None:
        ok = isinstance(reply, list) and all(
            isinstance(h, dict) and set(h) == {"Host", "Score"} and isinstance(h["Host"], str)
            and type(h["Score"]) is int and 0 <= h["Score"] <= 10 and h["Host"] in ("node-a", "node-b")
            for h in reply)
        c.expect("prioritize", ok, f"need a bare list of {{Host, Score:int 0..10}} over the input, got {str(reply)[:300]}")

    # bind, then bind again (idempotent), then with a wrong UID
    args = {"PodName": "trainer-0", "PodNamespace": "default", "PodUID": UID["trainer-0"], "Node": "node-a"}
    for label in ("bind", "bind again (idempotent)"):
        st, _, body = c.post("bind", args)
        reply = c.json_of(label, st, body)
        if reply is not None:
            c.expect(label, isinstance(reply, dict) and "Error" in reply and reply["Error"] in ("", None),
                     f"want {{\"Error\": \"\"}}, got {str(reply)[:200]}")
    st, _, body = c.post("bind", dict(args, PodName="trainer-1", PodUID="ffffffff-0000-4000-8000-000000000000"))
    reply = c.json_of("bind with a stale UID", st, body)
    if reply is not None:
        c.expect("bind with a stale UID", isinstance(reply, dict) and bool(reply.get("Error")),
                 f"a UID mismatch must be reported in Error, got {str(reply)[:200]}")

    # the reservation is visible: node-a has 3 of 4 left, so 4 GPUs fit nowhere
    st, _, body = c.post("filter", {"Pod": pod("trainer-1", 4), "Nodes": None, "NodeNames": NODES})
    reply = c.json_of("filter after bind", st, body)
    if reply is not None:
        filter_result_ok(c, "filter after bind", reply, [], ["node-a"], ["node-b", "node-c", "node-d"])

    # preempt: always NodeNameToMetaVictims; keep a node only where the victims make room
    victims = {"node-b": {"Pods": [{"UID": UID["batch-low"]}], "NumPDBViolations": 0}}
    cases = [("preempt keeps a node that fits", pod("preemptor-2", 2, 500), ["node-b"]),
             ("preempt drops a node that cannot fit", pod("preemptor-4", 4, 500), []),
             ("preempt never evicts equal or higher priority", pod("preemptor-low", 2, 50), [])]
    for label, p, want in cases:
        st, _, body = c.post("preempt", {"Pod": p, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})
        reply = c.json_of(label, st, body)
        if reply is None:
            continue
        got = reply.get("NodeNameToMetaVictims") if isinstance(reply, dict) else None
        ok = isinstance(reply, dict) and "NodeNameToMetaVictims" in reply and isinstance(got or {}, dict)
        kept = sorted(got or {})
        if ok and want:
            mv = got["node-b"]
            ok = isinstance(mv, dict) and mv.get("Pods") == [{"UID": UID["batch-low"]}] and type(mv.get("NumPDBViolations")) is int
        c.expect(label, ok and kept == want, f"want nodes {want}, got {str(reply)[:300]}")

    # bad input: a clear 400 with a JSON body, never a crash
    for label, raw in (("garbage body", b"not json"), ("no Pod", b"{}"),
                       ("NodeNames not a list", json.dumps({"Pod": pod("x", 1), "NodeNames": "node-a"}).encode())):
        st, ctype, body = c.post("filter", None, raw=raw)
        ok = st == 400 and "json" in ctype.lower()
        try:
            json.loads(body)
        except ValueError:
            ok = False
        c.expect(f"filter rejects {label}", ok, f"want HTTP 400 with a JSON error body, got {st} {ctype} {body[:120]!r}")
    st, _, body = c.post("filter", {"Pod": pod("trainer-0", 1), "Nodes": None, "NodeNames": NODES})
    c.expect("still serving after bad input", st == 200, f"HTTP {st}")

    # bodies captured from the real kube-scheduler parse and get contract-shaped answers; their
    # nodes (node-1..3) are unknown to the smoke cluster, so filter must reject them as FailedNodes
    import glob
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "..", "payloads", "kube-scheduler-*", "*.json"))):
        rec = json.load(open(path))
        verb = rec["path"].rsplit("/", 1)[-1]
        label = f"real {os.path.basename(os.path.dirname(path))} {verb} body"
        st, _, body = c.post(verb, None, raw=json.dumps(rec["body"], separators=(",", ":")).encode())
        reply = c.json_of(label, st, body)
        if reply is None:
            continue
        if verb == "filter":
            sent = rec["body"]["NodeNames"]
            ok = (isinstance(reply, dict) and isinstance(reply.get("NodeNames"), list)
                  and not reply["NodeNames"] and sorted(reply.get("FailedNodes") or {}) == sorted(sent))
            c.expect(label, ok, f"unknown nodes {sent} must all be in FailedNodes, got {str(reply)[:200]}")
        elif verb == "prioritize":
            c.expect(label, isinstance(reply, list) and all(type(h.get("Score")) is int for h in reply if isinstance(h, dict)),
                     f"want a bare list, got {str(reply)[:200]}")
        elif verb == "bind":
            c.expect(label, isinstance(reply, dict) and bool(reply.get("Error")),
                     f"binding a pod the server does not know must report Error, got {str(reply)[:200]}")
        elif verb == "preempt":
            c.expect(label, isinstance(reply, dict) and "NodeNameToMetaVictims" in reply,
                     f"want NodeNameToMetaVictims, got {str(reply)[:200]}")

    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
