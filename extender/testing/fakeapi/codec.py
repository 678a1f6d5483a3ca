"""JSON encoding helpers for the fake API server.

Contract:
    * ``dumps(obj)`` returns compact UTF-8 JSON ``bytes``; it uses ``orjson`` when importable
      and falls back to the standard library with identical output semantics (compact
      separators, no NaN handling differences that matter for Kubernetes objects).
    * ``loads(data)`` accepts ``bytes``/``str`` and raises ``ValueError`` on malformed input
      (both backends' decode errors are subclasses of ``ValueError``).
    * ``clone(obj)`` returns a deep copy of a JSON-compatible value (dict/list/str/int/float/
      bool/None).  It is the only copy primitive the store uses, so stored objects can be
      shared between threads without ever being mutated in place.
"""

from __future__ import annotations

import json
from typing import Any

try:  # pragma: no cover - depends on the environment
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None  # type: ignore[assignment]

__all__ = ["dumps", "loads", "clone", "HAVE_ORJSON"]

HAVE_ORJSON: bool = _orjson is not None


def dumps(obj: Any) -> bytes:
    """Serialize ``obj`` to compact JSON bytes."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj)
        except TypeError:
            # orjson refuses e.g. integers wider than 64 bits; the stdlib does not.
            pass
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises ``ValueError`` when ``data`` is not valid JSON."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass  # retry with the stdlib so big ints / odd-but-valid input still parse
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8")
    return json.loads(data)


def _clone_py(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clone_py(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone_py(v) for v in obj]
    return obj


def clone(obj: Any) -> Any:
    """Deep-copy a JSON-compatible value."""
    if _orjson is not None:
        try:
            return _orjson.loads(_orjson.dumps(obj))
        except TypeError:
            pass
    return _clone_py(obj)
