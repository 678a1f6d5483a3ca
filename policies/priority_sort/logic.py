"""Queue order: higher priority first; among equals, the older pod first; then by namespace/name
so the order is total and deterministic."""

from __future__ import annotations

from datetime import datetime, timezone

from extender.framework.views import PodInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def created(pod: PodInfo) -> datetime:
    """creationTimestamp as an aware datetime; a missing or malformed one sorts first."""
    text = pod.creation_timestamp
    if not text:
        return _EPOCH
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _EPOCH
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def less(a: PodInfo, b: PodInfo) -> bool:
    if a.priority != b.priority:
        return a.priority > b.priority
    ca, cb = created(a), created(b)
    if ca != cb:
        return ca < cb
    return a.key < b.key
