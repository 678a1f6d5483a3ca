"""A cluster file parsed in a forked child (``serve --cluster FILE``): the worker gets exactly
what parsing in process gives, a bad file is refused with the parser's message and leaves no
file behind, and only the process that made the pickle removes it."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

import pytest

from extender.cluster.objects import ClusterFileError, load_file
from extender.cluster.parsed import load_parsed, parse_apart, remove_parsed

GOOD = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {example.com/gpu: "4"}}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default, uid: u1}
spec: {nodeName: n1, containers: [{name: c, resources: {requests: {example.com/gpu: "1"}}}]}
"""


def leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "kube-extender-cluster-*")))


def test_the_child_parses_what_the_parent_would(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(GOOD)
    parsed = parse_apart(cluster)
    try:
        assert load_parsed(parsed) == load_file(cluster)
    finally:
        remove_parsed(parsed, os.getpid())
    assert not parsed.exists()


def test_a_bad_file_is_refused_with_the_parsers_message_and_leaves_nothing(tmp_path: Path) -> None:
    cluster = tmp_path / "bad.yaml"
    cluster.write_text("bad: [\n")
    before = leftovers()
    with pytest.raises(ClusterFileError, match="not valid YAML"):
        parse_apart(cluster)
    with pytest.raises(ClusterFileError, match="cannot read"):
        parse_apart(tmp_path / "missing.yaml")
    assert leftovers() == before


def test_only_the_owner_removes_the_pickle(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(GOOD)
    parsed = parse_apart(cluster)
    remove_parsed(parsed, os.getpid() + 1)  # a worker running the master's exit hook
    assert parsed.exists()
    remove_parsed(parsed, os.getpid())
    assert not parsed.exists()
