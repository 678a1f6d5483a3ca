"""Rendering the Helm chart (charts/kube-extender) with the real helm binary, for the chart's tests.

helm is taken from ``<repo>/.tools/helm`` (``make tools``) or PATH; without it the tests marked
``needs_helm`` skip. Renders are cached per values file; ``ci`` parametrizes a test over every
``ci/*-values.yaml`` (``SECOND`` and ``STANDALONE``: the files of each mode). The helpers read the
rendered objects (``one``, ``extender_config``, ``scheduler_config``, ``container``) and derive
what the chart must produce independently of its templates (``expected_url``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import POD_MAX_BACKOFF_SECONDS

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kube-extender"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "ke"
NAMESPACE = "sched"
ENTRY_HEADER = ("# Add to your KubeSchedulerConfiguration (apiVersion: kubescheduler.config.k8s.io/v1), "
                f"with podMaxBackoffSeconds: {POD_MAX_BACKOFF_SECONDS}:")
BIND_MARGIN = 1.0  # extender/runtime/handle.py BIND_MARGIN_SECONDS


def find_helm() -> str | None:
    local = REPO / ".tools" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("helm")


HELM = find_helm()
needs_helm = pytest.mark.skipif(HELM is None, reason="helm not found at .tools/helm (run `make tools`) nor on PATH")


# ---- running helm -------------------------------------------------------------------------------

def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    home = Path(tempfile.gettempdir()) / "kube-extender-chart-tests"
    env = {**os.environ, "KUBECONFIG": os.devnull, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, env=env)


@functools.lru_cache(maxsize=None)
def template(values: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values:
        args += ["--values", values]
    return helm(*args, *extra)


@functools.lru_cache(maxsize=None)
def rendered(values: str) -> tuple[dict[str, Any], ...]:
    run = template(values)
    assert run.returncode == 0, run.stderr
    return tuple(d for d in yaml.safe_load_all(run.stdout) if d)


@functools.lru_cache(maxsize=None)
def notes(values: str) -> str:
    """NOTES.txt as `helm install` prints it (client-side dry run: no cluster)."""
    run = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", values,
               "--dry-run=client", "--output", "json")
    assert run.returncode == 0, run.stderr
    return str(json.loads(run.stdout)["info"]["notes"])


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


@functools.lru_cache(maxsize=None)
def values_of(values: str) -> dict[str, Any]:
    """The chart's values with one ci file applied (as helm coalesces them)."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    return deep_merge(defaults, yaml.safe_load(Path(values).read_text()) or {})


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def fullname(values: dict[str, Any]) -> str:
    return values["fullnameOverride"] or f"{RELEASE}-kube-extender"


def extender_config(docs: tuple[dict[str, Any], ...], values: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(one(docs, "ConfigMap", fullname(values))["data"]["config.yaml"])


def scheduler_config(docs: tuple[dict[str, Any], ...], values: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(one(docs, "ConfigMap", f"{fullname(values)}-scheduler")["data"]["scheduler-config.yaml"])


def pod_spec(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def container(docs: tuple[dict[str, Any], ...], name: str) -> dict[str, Any]:
    (c,) = [c for c in pod_spec(docs)["containers"] if c["name"] == name]
    return c


def seconds(text: str) -> float:
    from extender.config.model import parse_duration
    return parse_duration(text)


def cli(*argv: str) -> tuple[int, str, str]:
    """`kube-extender ...` in-process (the console script's main)."""
    from extender.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cli_entry_text(config: dict[str, Any], url: str, tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    code, out, err = cli("config", "scheduler", "--config", str(path), "--url", url)
    assert code == 0, err
    return out


def expected_url(values: dict[str, Any], config: dict[str, Any]) -> str:
    """Where kube-scheduler must call, derived independently of the chart's helper."""
    if values["config"]["extender"]["urlPrefix"]:
        return str(values["config"]["extender"]["urlPrefix"])
    scheme = "https" if values["tls"]["enabled"] else "http"
    server = config["server"]
    if values["scheduler"]["enabled"]:
        host = "[::1]" if values["scheduler"]["extenderListenAddress"] in ("::1", "::") else "127.0.0.1"
        return f"{scheme}://{host}:{server['port']}{server['pathPrefix']}"
    host = values["service"]["clusterIP"] or f"{fullname(values)}.{NAMESPACE}.svc"
    return f"{scheme}://{host}:{values['service']['port']}{server['pathPrefix']}"


CI_IDS = [f.name.removesuffix("-values.yaml") for f in CI_FILES]
ci = pytest.mark.parametrize("values", [str(f) for f in CI_FILES], ids=CI_IDS)
SECOND = [str(f) for f in CI_FILES if ((yaml.safe_load(f.read_text()) or {}).get("scheduler") or {}).get("enabled")]
STANDALONE = [str(f) for f in CI_FILES if str(f) not in SECOND]


def mode_ids(files: list[str]) -> list[str]:
    return [Path(f).name.removesuffix("-values.yaml") for f in files]


def gang_config(profile: dict[str, Any]) -> dict[str, Any] | None:
    found = [pc for pc in profile.get("pluginConfig") or [] if pc["name"] == "Gang"]
    assert len(found) <= 1, found
    return found[0] if found else None
