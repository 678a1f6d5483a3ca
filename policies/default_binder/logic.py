"""How a failed write becomes a verdict: a lost precondition (already bound elsewhere, UID
mismatch) and a transient failure are both errors for this bind; the message says which."""

from __future__ import annotations

from extender.framework.handle import WriteError


def describe_failure(exc: WriteError, pod_key: str, node: str) -> str:
    kind = "conflict" if exc.conflict else "failed"
    return f"binding {pod_key} to {node} {kind}: {exc}"
