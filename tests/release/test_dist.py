"""The release artifacts: ``python -m build`` makes an sdist and a wheel that each install into a
fresh virtualenv (offline, from the dependency wheels) and run: ``kube-extender --version``
prints the one version, and ``kube-extender serve`` serves the embedded demo cluster, whose
files are package data that both artifacts must carry."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from http_calls import free_port
from artifacts import REPO, check_serves_the_demo, running, stop_cleanly, wait_ready, wheelhouse

from extender import __version__

pytestmark = pytest.mark.slow

DATA = ["extender/cluster/data/demo-cluster.yaml", "extender/sim/data/sample-workload.yaml",
        "policies/device_share/README.md"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build``: the sdist, and the wheel built from that sdist (so a file missing
    from the sdist is missing from the wheel too)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], check=True,
                   stdout=subprocess.DEVNULL)
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


def members(artifact: Path) -> list[str]:
    if artifact.suffix == ".whl":
        with zipfile.ZipFile(artifact) as whl:
            return whl.namelist()
    with tarfile.open(artifact) as sdist:
        return [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]


@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_artifact_carries_the_version_the_package_data_and_the_license(kind: str, dist: dict[str, Path]) -> None:
    artifact = dist[kind]
    assert f"-{__version__}" in artifact.name
    names = members(artifact)
    for data in DATA:
        assert data in names, f"{data} missing from the {kind}"
    assert any(n == "LICENSE" or n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
               for n in names), names
    assert not any(n.startswith("tests/") for n in names), "the tests are not part of a release"


@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_artifact_installs_offline_into_a_fresh_venv_and_serves(kind: str, dist: dict[str, Path],
                                                                tmp_path: Path) -> None:
    wheels = wheelhouse()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index", "--find-links", str(wheels),
                    str(dist[kind])], check=True, cwd=tmp_path)
    # Run outside the repository: the installed package is what runs, not the sources.
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import extender; print(extender.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert where.startswith(str(venv)), where
    exe = str(venv / "bin" / "kube-extender")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert version.stdout.strip() == f"kube-extender {__version__}"

    port, log = free_port(), tmp_path / "serve.log"
    with running([exe, "serve", "--host", "127.0.0.1", "--port", str(port)], log, cwd=tmp_path) as proc:
        wait_ready(proc, port, log)
        check_serves_the_demo(port)
        stop_cleanly(proc, log)
