"""The README's quick start: ``make run`` and ``make test`` are all a user types to serve the demo
cluster and to run the suite, and both are targets of the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_quick_start_is_make_run_and_make_test() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Quick start"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the quick start lost its commands"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    targets = re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M)
    assert {"run", "test"} <= set(targets)
