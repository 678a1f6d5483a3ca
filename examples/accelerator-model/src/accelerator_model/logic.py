"""The rules, as pure functions over plain values: no kube-extender types, no clock, no I/O,
so they are tested on their own and the plugin stays a thin adapter."""

from __future__ import annotations

from typing import Mapping

ANY = None
"""A pod that names no model accepts any."""


def accepted_models(annotation: str | None) -> frozenset[str] | None:
    """The models a pod accepts, from its annotation ("A100, H100"); None (ANY) when it has none.
    Raises ValueError on an annotation that names nothing (", ,"): a typo must not mean "any"."""
    if annotation is None:
        return ANY
    models = frozenset(m.strip() for m in annotation.split(",") if m.strip())
    if not models:
        raise ValueError(f"names no model: {annotation!r}")
    return models


def rejection(node_model: str | None, accepted: frozenset[str] | None) -> str | None:
    """Why a node with ``node_model`` (None: unlabelled) cannot run the pod, or None when it can."""
    if node_model is None:
        return "node has no accelerator model label"
    if accepted is not ANY and node_model not in accepted:
        return "node's accelerator model is not one the pod accepts"
    return None


def price_scores(prices_by_node: Mapping[str, float | None], max_score: int) -> dict[str, int]:
    """Per node, ``max_score`` for the cheapest model down to 0 for the dearest, linear in price;
    an unpriced model (None) scores 0; every node ``max_score`` when all prices are equal."""
    known = [p for p in prices_by_node.values() if p is not None]
    if not known:
        return dict.fromkeys(prices_by_node, 0)
    low, high = min(known), max(known)
    out = {}
    for node, price in prices_by_node.items():
        if price is None:
            out[node] = 0
        elif high == low:
            out[node] = max_score
        else:
            out[node] = round(max_score * (high - price) / (high - low))
    return out
