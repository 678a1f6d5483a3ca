"""The shell blocks of docs/writing-a-policy.md, for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-policy.md"
SKIP_MARK = "not run by the guide's test"


def blocks() -> list[tuple[str, bool]]:
    """Every ``sh`` block of the guide, in order, and whether the guide's test runs it (not when
    an HTML comment right above it says it is not run)."""
    out = []
    for match in re.finditer(r"(<!--(?:(?!-->).)*-->\n)?```sh\n(.*?)```\n", GUIDE.read_text(), flags=re.S):
        out.append((match.group(2), not (match.group(1) and SKIP_MARK in match.group(1))))
    return out


def commands(block: str) -> list[str]:
    """The command lines of a block, here-document bodies left out."""
    out, body_end = [], None
    for line in block.splitlines():
        if body_end is not None:
            body_end = None if line == body_end else body_end
            continue
        heredoc = re.search(r"<<'(\w+)'", line)
        body_end = heredoc.group(1) if heredoc else None
        if line.strip():
            out.append(line)
    return out


def file_writes(block: str) -> bool:
    """Whether the block only makes folders and files (mkdir, touch, cat > FILE)."""
    return all(re.match(r"(mkdir|touch|cat >) ", line) for line in commands(block))
