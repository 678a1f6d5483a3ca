"""The project stands on its own: nothing in it points outside the repository, and every link in
its documents leads to a file that exists in it, and to a heading there when it names one."""

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
ANCHORED_LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


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


DOCUMENTS = [p.relative_to(REPO).as_posix() for p in
             [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
              *sorted((REPO / "charts").rglob("README.md")),
              *sorted((REPO / "policies").rglob("README.md")),
              *sorted((REPO / "benchmarks").glob("*.md"))]]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(document: Path) -> set[str]:
    """The fragments GitHub gives the headings of ``document`` (lower case, punctuation but ``-``
    and ``_`` dropped, spaces as ``-``, ``-1``, ``-2`` ... for repeats); code blocks have none."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", document.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("document", DOCUMENTS)
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


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_link_to_a_heading_finds_it(document: str) -> None:
    """``[...](other.md#heading)`` and ``[...](#heading)``: the heading exists, so moving a section
    to another document cannot leave a link pointing at nothing."""
    path = REPO / document
    broken = []
    for target, fragment in ANCHORED_LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"[a-z]+:", target) or not (target == "" or target.endswith(".md")):
            continue
        linked = (path.parent / target).resolve() if target else path
        if not linked.exists() or fragment not in anchors(linked):
            broken.append(f"{target}#{fragment}")
    assert broken == []


def test_anchors_are_the_ones_github_makes(tmp_path: Path) -> None:
    document = tmp_path / "d.md"
    document.write_text("# Title\n\n## The scheduler's side (`extenders:`)\n\n```sh\n# not a heading\n```\n"
                        "## Bind cost: `bind_cost.py`\n## Notes\n## Notes\n")
    assert anchors(document) == {"title", "the-schedulers-side-extenders", "bind-cost-bind_costpy",
                                 "notes", "notes-1"}
