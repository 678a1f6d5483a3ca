"""docs/openapi.yaml against the app: the document is valid, documents exactly the routes the
app serves, and every answer of the Flask test client below is one it gives (the wire fuzz holds
it against every answer of the real server too)."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from builders import make_node, make_pod
from jsonschema import Draft202012Validator
from openapi_doc import OpenApi

OPENAPI = OpenApi()
POD = make_pod("p1").uid("uid-p1").req(gpu=1).priority(50).obj()
RUNNING = make_pod("low").uid("uid-low").req(gpu=2).priority(1).node("n1").obj()


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [r for k, v in node.items() for r in ([v] if k == "$ref" else _refs(v))]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_document_is_valid() -> None:
    assert OPENAPI.doc["openapi"].startswith("3.1")
    for name, schema in OPENAPI.doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    for ref in _refs(OPENAPI.doc):
        assert OPENAPI.resolve(ref) is not None, ref
    for path, item in OPENAPI.doc["paths"].items():
        for method, operation in item.items():
            assert operation["responses"], (path, method)


def test_it_documents_exactly_the_routes_the_app_serves(make_app: Callable[..., Any]) -> None:
    app, _ = make_app([make_node("n1").alloc(gpu=4).obj()])
    served = {(rule.rule.replace("<", "{").replace(">", "}"), method.lower())
              for rule in app.url_map.iter_rules() if rule.endpoint != "static"
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    documented = {(path, method) for path, item in OPENAPI.doc["paths"].items() for method in item}
    assert served == documented


@pytest.fixture
def client(make_app: Callable[..., Any]) -> Any:
    app, _ = make_app([make_node("n1").alloc(gpu=4).obj(), make_node("n2").alloc(gpu=2).obj()], [RUNNING, POD],
                      server={"maxRequestBytes": 4096})
    return app.test_client()


ARGS = {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n2", "ghost"]}
ANSWERS = [
    ("POST", "/scheduler/filter", ARGS, 200),
    ("POST", "/scheduler/filter", {"Pod": POD, "Nodes": {"items": [make_node("n1").obj()]}}, 200),
    ("POST", "/scheduler/prioritize", ARGS, 200),
    ("POST", "/scheduler/preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-low"}]}}}, 200),
    ("POST", "/scheduler/bind", {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-p1", "Node": "n1"}, 200),
    ("POST", "/scheduler/bind", {"PodName": "p1", "PodUID": "uid-p1", "Node": "ghost"}, 200),
    ("POST", "/scheduler/filter", {"Pod": POD, "NodeNames": "n1"}, 400),
    ("POST", "/scheduler/prioritize", b"not json", 400),
    ("POST", "/scheduler/preempt", {"Pod": POD, "Padding": "x" * 5000}, 413),
    ("POST", "/scheduler/bind", {}, 400),
    ("PUT", "/scheduler/filter", None, 405),
    ("POST", "/scheduler/nope", {}, 404),
    ("GET", "/healthz", None, 200),
    ("GET", "/readyz", None, 200),
    ("GET", "/metrics", None, 200),
    ("GET", "/debug/snapshot", None, 200),
    ("GET", "/debug/snapshot?node=n2", None, 200),
    ("GET", "/debug/snapshot?node=ghost", None, 404),
    ("GET", "/debug/pods/default/p1", None, 200),
    ("GET", "/debug/pods/default/nobody", None, 404),
    ("GET", "/debug/queue", None, 200),
    ("GET", "/debug/quota", None, 200),
    ("GET", "/debug/config?pretty", None, 200),
]


def test_every_answer_is_one_the_document_gives(client: Any) -> None:
    client.post("/scheduler/filter", json=ARGS)  # gives /debug/pods something to explain
    for method, path, body, status in ANSWERS:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        resp = client.open(path, method=method, data=data, content_type="application/json")
        assert resp.status_code == status, (method, path, resp.get_data(as_text=True)[:200])
        assert OPENAPI.problems(method, path, status, resp.content_type, resp.get_data()) == [], (method, path)


@pytest.mark.parametrize("status, body", [
    (200, b'[{"Host": "n1", "Score": 11}]'),
    (200, b'{"Host": "n1", "Score": 5}'),
    (500, b'{"error": "internal error"}'),
    (502, b'{"error": "bad gateway", "message": "x"}'),
], ids=["score over 10", "not an array", "error without message", "undocumented status"])
def test_the_checker_refuses_what_the_document_does_not_give(status: int, body: bytes) -> None:
    assert OPENAPI.problems("POST", "/scheduler/prioritize", status, "application/json", body)


def test_a_snapshot_with_devices_is_one_the_document_gives(make_app: Callable[..., Any]) -> None:
    mem, compute, count = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
    node = make_node("gpu-1").obj()
    node["metadata"]["labels"].update({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "24576"})
    held = make_pod("infer").uid("u-infer").req(**{mem: 8192, compute: 30}).node("gpu-1").obj()
    app, _ = make_app([node], [held], managedResources=[{"name": r} for r in (mem, compute, count)],
                      profiles=[{"schedulerName": "default-scheduler", "plugins": {
                          "multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]}}}])
    resp = app.test_client().get("/debug/snapshot")
    assert resp.get_json()["nodes"][0]["devices"], "the case this test is about"
    assert OPENAPI.problems("GET", "/debug/snapshot", 200, resp.content_type, resp.get_data()) == []
