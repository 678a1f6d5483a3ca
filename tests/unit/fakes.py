"""Fake plugins for framework tests: each records its calls in a shared journal and returns
scripted answers. ``fake(name, points, **answers)`` builds a plugin implementing exactly
``points`` (so the runtime's protocol checks see only those)."""

from __future__ import annotations

from typing import Any, Callable

from extender.framework.handle import Handle
from extender.framework.interfaces import PreFilterResult
from extender.framework.status import Status
from extender.framework.registration import PluginSpec

Journal = list[tuple[str, str, str]]


def _answer(value: Any, *args: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    if callable(value) and not isinstance(value, Status):
        return value(*args)
    return value


def fake(name: str, points: set[str], journal: Journal | None = None, **answers: Any) -> Any:
    """answers: filter=Status | callable(node_name)->Status | exception; score=int | callable(node)->int;
    reserve=Status; permit=(Status, timeout); pre_filter=(names|None, Status); bind=Status; ..."""
    journal = journal if journal is not None else []
    methods: dict[str, Callable[..., Any]] = {"name": name}  # type: ignore[dict-item]

    def record(point: str, subject: str) -> None:
        journal.append((name, point, subject))

    if "preFilter" in points:
        def pre_filter(self: Any, state: Any, pod: Any, snapshot: Any) -> Any:
            record("preFilter", pod.name)
            names, st = answers.get("pre_filter", (None, Status()))
            return (PreFilterResult(frozenset(names)) if names is not None else None), st
        methods["pre_filter"] = pre_filter
    if "filter" in points:
        def filter_(self: Any, state: Any, pod: Any, node: Any) -> Any:
            record("filter", node.name)
            return _answer(answers.get("filter", Status()), node.name)
        methods["filter"] = filter_
    if "postFilter" in points:
        def post_filter(self: Any, state: Any, pod: Any, statuses: Any) -> Any:
            record("postFilter", pod.name)
            return _answer(answers.get("post_filter", (None, Status.unschedulable("no"))))
        methods["post_filter"] = post_filter
    if "preScore" in points:
        def pre_score(self: Any, state: Any, pod: Any, nodes: Any) -> Any:
            record("preScore", pod.name)
            return _answer(answers.get("pre_score", Status()))
        methods["pre_score"] = pre_score
    if "score" in points:
        def score(self: Any, state: Any, pod: Any, node: Any) -> Any:
            record("score", node.name)
            return _answer(answers.get("score", 0), node.name)
        methods["score"] = score
        if "normalize" in answers:
            def normalize_score(self: Any, state: Any, pod: Any, scores: dict[str, int]) -> None:
                record("normalize", pod.name)
                answers["normalize"](scores)
            methods["normalize_score"] = normalize_score
    if "reserve" in points:
        def reserve(self: Any, state: Any, pod: Any, node: str) -> Any:
            record("reserve", node)
            return _answer(answers.get("reserve", Status()))

        def unreserve(self: Any, state: Any, pod: Any, node: str) -> None:
            record("unreserve", node)
            _answer(answers.get("unreserve"))
        methods["reserve"] = reserve
        methods["unreserve"] = unreserve
    if "permit" in points:
        def permit(self: Any, state: Any, pod: Any, node: str) -> Any:
            record("permit", node)
            return _answer(answers.get("permit", (Status(), 0.0)))
        methods["permit"] = permit
    if "preBind" in points:
        def pre_bind(self: Any, state: Any, pod: Any, node: str) -> Any:
            record("preBind", node)
            return _answer(answers.get("pre_bind", Status()))
        methods["pre_bind"] = pre_bind
    if "bind" in points:
        def bind(self: Any, state: Any, pod: Any, node: str) -> Any:
            record("bind", node)
            return _answer(answers.get("bind", Status()))
        methods["bind"] = bind
    if "postBind" in points:
        def post_bind(self: Any, state: Any, pod: Any, node: str) -> None:
            record("postBind", node)
            _answer(answers.get("post_bind"))
        methods["post_bind"] = post_bind
    if "queueSort" in points:
        methods["less"] = lambda self, a, b: a.name < b.name
    cls = type(f"Fake{name}", (), methods)
    return cls()


def spec_of(plugin: Any) -> PluginSpec:
    """A PluginSpec whose factory returns the given instance (args ignored)."""

    def factory(args: Any, handle: Handle) -> Any:
        return plugin

    return PluginSpec(plugin.name, factory, parse_args=lambda raw: raw)
