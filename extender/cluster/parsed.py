"""A cluster file parsed apart from the server's master process.

``serve --cluster FILE`` must refuse a bad file before it forks (a clear message, exit 1), yet
the gunicorn master that forks the worker should not keep what it parsed: the objects of a
5,000-node file are ~240 MiB, and the master held them for the server's lifetime while only the
worker's cache uses them. So a forked child parses the file (``parse_apart``) and writes the
objects as a pickle to a private temporary file, then exits, returning its memory; the master
keeps only the file's path, and every worker it starts (the first, and any restarted one) loads
the pickle (``load_parsed``), ~10x faster than parsing the YAML again. The master removes the
file when it exits (``remove_parsed``).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from extender.cluster.objects import ClusterFileError, load_file


def parse_apart(path: str | Path) -> Path:
    """Parse cluster file ``path`` in a forked child; the path of the pickled objects.
    Raises ClusterFileError (the child's message) when the file cannot be used."""
    fd, out = tempfile.mkstemp(prefix="kube-extender-cluster-", suffix=".pickle")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, write, report, leave without running the parent's exit hooks
        os.close(read_end)
        code = 0
        try:
            objects = load_file(path)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(objects, f, protocol=pickle.HIGHEST_PROTOCOL)
        except ClusterFileError as exc:
            os.write(write_end, str(exc).encode())
            code = 1
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            os.write(write_end, f"{path}: cannot be loaded: {type(exc).__name__}: {exc}".encode())
            code = 1
        os._exit(code)
    os.close(fd)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as r:
        message = r.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        os.unlink(out)
        raise ClusterFileError(message or f"{path}: the parser exited with status {status}")
    return Path(out)


def load_parsed(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The objects ``parse_apart`` wrote (a file this process's parent made: trusted)."""
    with open(path, "rb") as f:
        objects: dict[str, list[dict[str, Any]]] = pickle.load(f)
    return objects


def remove_parsed(path: Path, owner: int) -> None:
    """Remove the pickle, in process ``owner`` only (workers inherit the master's exit hooks)."""
    if os.getpid() != owner:
        return
    try:
        path.unlink()
    except FileNotFoundError:
        pass
