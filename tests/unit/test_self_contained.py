"""The project stands on its own: nothing in it points outside the repository, and every link in
its documents leads to a file that exists in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ["README.md", "docs", "extender", "policies", "charts", "tests", "benchmarks", "scripts", "Makefile"]
OUTSIDE = [".." + "/shared", "/work/" + "shared", "shared" + "/spec", "extender-" + "protocol.md",
           "scheduling-" + "framework.md"]
"""Written in pieces so that this file does not match itself."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def files() -> list[Path]:
    out: list[Path] = []
    for name in SOURCES:
        path = REPO / name
        candidates = [path] if path.is_file() else path.rglob("*")
        out += [p for p in candidates if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return out


def test_nothing_refers_outside_the_repository() -> None:
    found = []
    for path in files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(REPO)}: {needle}" for needle in OUTSIDE if needle in text]
    assert found == []


@pytest.mark.parametrize("document", [p.relative_to(REPO).as_posix() for p in
                                      [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
                                       *sorted((REPO / "charts").rglob("README.md")),
                                       *sorted((REPO / "policies").rglob("README.md")),
                                       *sorted((REPO / "benchmarks").glob("*.md"))]])
def test_every_relative_link_leads_to_a_file_in_the_repository(document: str) -> None:
    path = REPO / document
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        resolved = (path.parent / target).resolve()
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            broken.append(target)
    assert broken == []
