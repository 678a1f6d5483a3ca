"""The worked example (examples/accelerator-model) as a third party ships it: installed with pip
(``make install-test`` does it), found through its entry point by the commands an operator runs,
configured in a file and exercised by ``kube-extender simulate`` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import yaml

from extender.testing.kit import cluster_yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "accelerator-model"
sys.path.insert(0, str(EXAMPLE / "tests"))

from accelerator_cluster import nodes  # noqa: E402
from test_accelerator_model_sim import CONFIG, WORKLOAD  # noqa: E402

PACKAGE = "kube-extender-accelerator-model"
KUBE_EXTENDER = str(Path(sys.executable).parent / "kube-extender")


def _installed() -> metadata.Distribution:
    try:
        return metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise AssertionError(f"{PACKAGE} is not installed in {sys.prefix}: run `make install-test` "
                             f"(it runs pip install ./examples/accelerator-model)") from None


def test_the_example_is_installed_by_pip_as_a_regular_package() -> None:
    dist = _installed()
    pyproject = (EXAMPLE / "pyproject.toml").read_text()
    assert f'version = "{dist.version}"' in pyproject
    # a built wheel's files, not a link to the source tree: the entry point came out of packaging
    assert not any(str(f).endswith(".pth") for f in dist.files or ())
    assert [ep.value for ep in dist.entry_points.select(group="kube_extender.plugins")] == \
        ["accelerator_model.plugin:SPEC"]


def test_kube_extender_plugins_lists_it_with_package_version_points_and_args() -> None:
    version = _installed().version
    out = subprocess.run([KUBE_EXTENDER, "plugins", "--json"], capture_output=True, text=True, check=True).stdout
    plugin = {p["name"]: p for p in json.loads(out)}["AcceleratorModel"]
    assert (plugin["package"], plugin["version"]) == (PACKAGE, version)
    assert plugin["extensionPoints"] == ["preFilter", "filter", "preScore", "score"]
    assert set(plugin["args"]["properties"]) == {"resource", "nodeLabel", "podAnnotation", "prices"}
    text = subprocess.run([KUBE_EXTENDER, "plugins"], capture_output=True, text=True, check=True).stdout
    assert f"AcceleratorModel  ({PACKAGE} {version})" in text and "nodeLabel: string" in text


def test_simulate_finds_configures_and_runs_it(tmp_path: Path) -> None:
    _installed()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (tmp_path / "cluster.yaml").write_text(cluster_yaml(nodes()))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD))
    run = subprocess.run([KUBE_EXTENDER, "simulate", "--config", "config.yaml", "--cluster", "cluster.yaml",
                          "--workload", "workload.yaml", "--seed", "1", "--quiet", "--out", "out"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {b["pod"]: b["node"] for b in report["bound"]} == {
        "default/web": "cpu-1", "ml/infer": "t4-1", "ml/train-0": "a100-1", "ml/train-1": "h100-1"}
    assert "accelerator model is not one the pod accepts" in report["pending"][0]["reason"]


def test_config_check_names_the_package_of_a_plugin_whose_args_are_wrong(tmp_path: Path) -> None:
    bad = yaml.safe_load(yaml.safe_dump(CONFIG))
    bad["profiles"][0]["pluginConfig"][0]["args"]["prices"] = {"Tesla-T4": -1}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    run = subprocess.run([KUBE_EXTENDER, "config", "check", "bad.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 1
    line = run.stderr.splitlines()[0]
    assert line.startswith("bad.yaml: profiles[0].pluginConfig[AcceleratorModel].args.prices")
    assert f"plugin AcceleratorModel of package {PACKAGE} {_installed().version}" in line
