"""The layer rules of ``.importlinter`` hold for this tree and catch a violation: each case adds one
forbidden import to a copy of the packages and expects ``lint-imports`` to name the broken rule."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--config", str(root / ".importlinter"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    for package in ("extender", "policies"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    return root


def contract_name(key: str) -> str:
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter")
    return parser[f"importlinter:contract:{key}"]["name"]


def verdicts(output: str) -> str:
    """lint-imports' report with the line wraps of long contract names undone."""
    return " ".join(output.split())


@pytest.mark.parametrize("module, line, contract", [
    ("policies/node_resources/logic.py", "import extender.cache.cache", "policies-plugin-api"),
    ("extender/sim/queue.py", "import policies.gang.logic", "emulator-apart"),
    ("extender/sim/client.py", "import extender.runtime.engine", "emulator-apart"),
    ("extender/framework/views.py", "import extender.runtime.engine", "framework-ours"),
    ("extender/cache/snapshot.py", "import policies", "policies-handed-in"),
    ("extender/runtime/engine.py", "import extender.api.wire", "layers"),
    ("policies/gang/plugin.py", "import extender.queue.reservations", "policies-plugin-api"),
    ("extender/sim/client.py", "import extender.queue", "emulator-apart"),
    ("extender/queue/nudger.py", "import extender.api.wire", "no-api-below"),
    ("extender/queue/admission.py", "import extender.runtime.engine", "layers"),
    ("extender/queue/held.py", "import extender.cache.cache", "layers"),
    ("extender/cache/cache.py", "import extender.queue.nominator", "layers"),
    ("extender/framework/handle.py", "import extender.queue.reservations", "framework-ours"),
    ("extender/runtime/handle.py", "import extender.runtime.engine", "handle-no-back-edge"),
], ids=["a policy imports the cache", "the emulator imports a policy", "the emulator imports the runtime",
        "the framework imports the runtime", "the cache imports a policy", "the runtime imports the api",
        "a policy imports the queue", "the emulator imports the queue", "the queue imports the api",
        "the queue imports the runtime", "the queue imports the cache", "the cache imports the queue",
        "the framework imports the queue", "the handle imports the engine"])
def test_a_forbidden_import_breaks_its_rule(tree: Path, module: str, line: str, contract: str) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # noqa: E402 - the violation under test\n")
    try:
        result = lint(tree)
    finally:
        path.write_text(original)
    assert result.returncode != 0, result.stdout
    assert f"{contract_name(contract)} BROKEN" in verdicts(result.stdout)


def test_the_tree_keeps_every_rule(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "0 broken" in result.stdout
