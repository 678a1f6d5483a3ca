"""Calling a kube-extender started as a real process, over loopback: a free port for it, and
(status, JSON) of a request."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(port: int, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer) of a GET, or of a POST when there is a body; (0, None) when nothing
    answers (not started yet, or gone)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
    except OSError:
        return 0, None
