"""docs/writing-a-policy.md works verbatim: its shell blocks run, in order, in an empty folder, and
what the prose says they print or refuse is what they do. The two blocks that need what this
machine lacks (a container engine with a registry, a cluster) are checked another way: the
Dockerfile against kube-extender's own, the chart values by rendering the chart with helm.

The guide's ``pip install`` goes into a virtualenv layered on the test environment (it sees every
package of the test venv through a ``.pth`` file, and installs into its own site-packages), so the
test venv is left as it was and the guide's commands run unchanged."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from policy_guide import GUIDE, blocks

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def block_with(fragment: str) -> str:
    (found,) = [b for b, _ in blocks() if fragment in b]
    return found


def layered_venv(where: Path) -> dict[str, str]:
    """A virtualenv that sees the test venv's packages, with ``pip``, ``kube-extender`` and
    ``pytest`` commands of its own; the environment that puts them first on PATH."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "test_venv.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    for command, module in (("pip", "pip"), ("kube-extender", "extender.cli"), ("pytest", "pytest")):
        shim = venv / "bin" / command
        shim.write_text(f'#!/bin/sh\nexec "{venv}/bin/python" -m {module} "$@"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
            "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], list[str]]:
    """The guide's runnable blocks run in order in an empty folder: (the folder, the
    environment, each block's output)."""
    root = tmp_path_factory.mktemp("guide")
    env = layered_venv(root)
    work = root / "work"
    work.mkdir()
    outputs = []
    for i, (block, runs) in enumerate(blocks()):
        if not runs:
            continue
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, f"block {i} of the guide failed:\n{block}\n{run.stdout}\n{run.stderr}"
        outputs.append(run.stdout)
    return work, env, outputs


def test_only_the_blocks_that_need_a_cluster_or_a_registry_are_left_out() -> None:
    left_out = [b for b, runs in blocks() if not runs]
    assert len(left_out) == 2
    assert "buildah build" in left_out[0] and "helm upgrade" in left_out[1]


def test_the_plugin_is_installed_and_listed_as_the_guide_shows(walked: tuple[Path, dict[str, str], list[str]]) -> None:
    _, _, outputs = walked
    shown = re.search(r"Among the built-in ones:\n\n```text\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert shown is not None
    listing = next(out for out in outputs if "DedicatedNodes  (" in out)
    assert shown.group(1) in listing


def test_the_configuration_checks_and_a_misspelt_arg_is_refused_as_the_guide_says(
        walked: tuple[Path, dict[str, str], list[str]]) -> None:
    work, env, outputs = walked
    assert any(out.startswith("extender.yaml: ok (profiles: default-scheduler") for out in outputs)
    (work / "bad.yaml").write_text((work / "extender.yaml").read_text().replace("podLabel", "podlabel"))
    run = subprocess.run(["kube-extender", "config", "check", "bad.yaml"], cwd=work, env=env, capture_output=True,
                         text=True)
    assert run.returncode == 1
    said = re.search(r"`(extender\.yaml:\s+profiles\[0\]\.pluginConfig.*?)`\)", GUIDE.read_text(), flags=re.S)
    assert said is not None
    assert run.stderr.splitlines()[0] == "bad.yaml" + " ".join(said.group(1).split())[len("extender.yaml"):]


def test_the_kit_example_passes_and_the_simulation_runs(walked: tuple[Path, dict[str, str], list[str]]) -> None:
    work, _, outputs = walked
    assert any(re.search(r"^3 passed", out, flags=re.M) for out in outputs)
    assert (work / "simulation-out" / "report.json").is_file()


def test_the_derived_image_keeps_kube_extender_s_virtualenv_user_and_entrypoint(
        walked: tuple[Path, dict[str, str], list[str]]) -> None:
    work, _, _ = walked
    ours = (REPO / "Dockerfile").read_text()
    theirs = (work / "dedicated-nodes" / "Dockerfile").read_text()
    venv = re.search(r"RUN python3 -m venv (/opt/[\w-]+)", ours)
    assert venv is not None and f"COPY --from=build {venv.group(1)} {venv.group(1)}" in theirs
    final = theirs.split("\nFROM ")[-1]
    assert final.startswith("${KUBE_EXTENDER_IMAGE}") and "USER" not in final and "ENTRYPOINT" not in final
    assert re.search(r"^USER 65532:65532$", ours, flags=re.M)  # inherited by the final stage
    assert "ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore" in ours
    assert "ARG PIP_INSTALL_OPTIONS" in ours and "${PIP_INSTALL_OPTIONS}" in theirs
    # built as `make image` builds ours: `<engine> build -t <image> <build args> .`
    assert "$(CONTAINER_ENGINE) build -t $(IMAGE) $(IMAGE_BUILD_ARGS) ." in (REPO / "Makefile").read_text()
    assert re.search(r"^buildah build -t [\w./-]+:[\w.]+ \.$", block_with("buildah build"), flags=re.M)


def test_the_chart_values_point_the_deployment_at_the_derived_image_with_the_plugin_enabled(
        walked: tuple[Path, dict[str, str], list[str]]) -> None:
    work, _, _ = walked
    helm = REPO / ".tools" / "helm"
    if not os.access(helm, os.X_OK):
        found = shutil.which("helm")
        if found is None:
            pytest.skip("helm not found at .tools/helm (run `make tools`) nor on PATH")
        helm = Path(found)
    command = block_with("helm upgrade").splitlines()[0].split()
    assert command[:4] == ["helm", "upgrade", "--install", "gpu-extender"] and command[4] == "charts/kube-extender"
    values = work / "values-dedicated-nodes.yaml"
    run = subprocess.run([str(helm), "template", "gpu-extender", str(REPO / "charts" / "kube-extender"),
                          "-n", "kube-system", "-f", str(values)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "KUBECONFIG": os.devnull})
    assert run.returncode == 0, run.stderr
    docs = [d for d in yaml.safe_load_all(run.stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    images = {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert "registry.example.com/platform/kube-extender-dedicated-nodes:0.1.0" in images
    configs = [yaml.safe_load(text) for d in docs if d["kind"] == "ConfigMap" for text in (d.get("data") or {}).values()]
    profiles = [p for c in configs if isinstance(c, dict) and c.get("kind") == "ExtenderConfiguration"
                for p in c["profiles"]]
    assert profiles and all(p["plugins"]["multiPoint"]["enabled"] == [{"name": "DedicatedNodes"}] for p in profiles)
