"""The README's curl examples, run verbatim against a real `kube-extender serve` on the demo
cluster (only the port differs), in document order; where the README shows the JSON answer
right after a command, the answer must be exactly that."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from http_calls import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def examples() -> list[tuple[str, object]]:
    """(curl command, expected JSON or None) in document order."""
    blocks = BLOCK.findall(README.read_text())
    out: list[tuple[str, object]] = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "sh":
            continue
        cmds = [line for line in body.splitlines() if line.startswith("curl ")]
        expected = None
        if len(cmds) == 1 and i + 1 < len(blocks) and blocks[i + 1][0] == "json":
            expected = json.loads(blocks[i + 1][1])
        out.extend((c, expected if c == cmds[-1] else None) for c in cmds)
    return out


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    exe = Path(sys.executable).parent / "kube-extender"
    p = free_port()
    proc = subprocess.Popen([str(exe), "serve", "--host", "127.0.0.1", "--port", str(p)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{p}/readyz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "server died")
                time.sleep(0.1)
        yield p
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_curl_examples_work_verbatim(port: int) -> None:
    cases = examples()
    assert len(cases) >= 10, "the README lost its curl examples"
    for command, expected in cases:
        run = subprocess.run(command.replace("localhost:8888", f"localhost:{port}") + " -w '\\n%{http_code}'",
                             shell=True, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, (command, run.stderr)
        body, _, code = run.stdout.rpartition("\n")
        bad_input = isinstance(expected, dict) and expected.get("error") == "bad request"
        wanted_code = "400" if bad_input else "200"
        assert code == wanted_code, (command, code, body[:300])
        if "/metrics" in command:
            assert "kube_extender_requests_total" in body
            continue
        answer = json.loads(body)
        if expected is not None:
            assert answer == expected, command
