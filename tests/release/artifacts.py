"""What the release tests share: the dependency wheels (cached between runs), serving and
calling a started kube-extender, and the README's request bodies.

The cache lives outside the repository (``$KUBE_EXTENDER_CACHE``, else
``$XDG_CACHE_HOME/kube-extender`` or ``~/.cache/kube-extender``), every entry keyed by what it
was made from, so a second run on one machine builds nothing it already has and a change of
dependencies makes a new entry.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Iterator

from http_calls import call

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    explicit = os.environ.get("KUBE_EXTENDER_CACHE")
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    base = Path(explicit) if explicit else xdg / "kube-extender"
    base.mkdir(parents=True, exist_ok=True)
    return base


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """One maker of a cache entry at a time (parallel suites on one machine wait, then reuse)."""
    with open(cache_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def requirements() -> list[str]:
    """The package's dependencies and what building it from source needs (setup.cfg, pyproject)."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    install = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return install + list(build)


def wheelhouse() -> Path:
    """Wheels of every dependency and of the build requirements, for CPython of this version on
    this platform: enough to install the package, from its wheel or its sdist, with
    ``--no-index``. Made with this machine's pip settings, once per set of requirements."""
    reqs = requirements()
    name = "wheels-" + key(*reqs, f"{sys.version_info.major}.{sys.version_info.minor}", platform.machine())
    path = cache_dir() / name
    with locked(name):
        if not path.is_dir():
            tmp = tempfile.mkdtemp(dir=cache_dir())
            try:
                subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", tmp, *reqs], check=True)
                os.replace(tmp, path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return path


@contextlib.contextmanager
def running(command: list[str], log: Path, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` started in a session of its own, output to ``log``; whatever of it still runs
    at the end is killed, so a failed test leaves nothing behind."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while call(port, "/readyz")[0] != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"not ready (exit status {proc.poll()}); log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop_cleanly(proc: subprocess.Popen[bytes], log: Path, pid: int | None = None, timeout: float = 30) -> None:
    """SIGTERM to ``pid`` (default: the process itself), as the kubelet sends it: ``proc`` must
    exit in time, with status 0 and no traceback in its log."""
    os.kill(pid or proc.pid, signal.SIGTERM)
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {timeout:.0f}s after SIGTERM") from None
    text = log.read_text()
    assert status == 0 and "Traceback" not in text, f"exit status {status}; log:\n{text[-3000:]}"


def readme_request(verb: str) -> tuple[Any, Any]:
    """(request body, shown answer or None) of the README's curl example for ``verb``
    ("Try it with curl"), so the artifacts are tried with exactly what users are told to send."""
    from integration.test_readme import examples

    for command, expected in examples():
        words = shlex.split(command)
        if any(f"/scheduler/{verb}" in w for w in words) and "-d" in words:
            return json.loads(words[words.index("-d") + 1]), expected
    raise AssertionError(f"the README has no curl example for {verb}")


def check_serves_the_demo(port: int) -> None:
    """The README's filter and bind answer as the README shows."""
    body, expected = readme_request("filter")
    status, answer = call(port, "/scheduler/filter", body)
    assert (status, answer["NodeNames"]) == (200, expected["NodeNames"]), answer
    body, expected = readme_request("bind")
    assert call(port, "/scheduler/bind", body) == (200, expected)
