"""The chart renders and is valid: ``helm lint --strict`` for every ``ci/*-values.yaml``, every
rendered manifest validated offline against the Kubernetes JSON schemas (kubernetes-validate,
strict: unknown fields are errors) at the kube-scheduler version the chart deploys and at the
newest version the package ships (the ServiceMonitor, a CRD, checked by hand), and the image and
appVersion it deploys are the package's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from chart_kit import (
    CHART, CI_IDS, NAMESPACE, RELEASE, REPO, SECOND, STANDALONE, ci, helm, needs_helm, one, rendered,
    seconds, values_of,
)


def test_ci_values_cover_the_required_setups() -> None:
    assert SECOND and STANDALONE
    want = {"default", "second-scheduler", "tls-client-verification", "ha", "networkpolicy-servicemonitor",
            "binding-disabled", "gang-preemption", "gang-profiles", "admission-requeue", "nvidia"}
    assert want <= set(CI_IDS)


def test_chart_app_version_is_the_extender_version() -> None:
    from extender import __version__
    assert str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]) == __version__


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_image_builds_the_image_the_chart_deploys_by_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert values["tag"] == "", "the tag defaults to the appVersion, the package version"
    run = subprocess.run(["make", "-s", "-n", "image", "CONTAINER_ENGINE=docker"], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert f" -t {values['repository']}:{app_version} " in run.stdout, run.stdout
    for doc in (CHART / "README.md", REPO / "Dockerfile"):
        tags = set(re.findall(r"kube-extender:(\d+\.\d+\.\d+)", doc.read_text()))
        assert tags == {app_version}, f"{doc.name} shows image tags {tags}, not the appVersion {app_version}"


# ---- lint, render, validate ---------------------------------------------------------------------

@needs_helm
def test_lint_strict_with_defaults() -> None:
    run = helm("lint", "--strict", str(CHART))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 chart(s) failed" in run.stdout


@needs_helm
@ci
def test_lint_strict(values: str) -> None:
    run = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "--values", values)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[WARNING]" not in run.stdout and "[ERROR]" not in run.stdout, run.stdout


def k8s_versions() -> tuple[str, ...]:
    """The kube-scheduler minor the chart deploys by default, and the newest the package knows."""
    from kubernetes_validate.utils import latest_version
    tag = yaml.safe_load((CHART / "values.yaml").read_text())["scheduler"]["image"]["tag"]
    default = re.match(r"v?(\d+\.\d+)", tag)
    assert default, tag
    return tuple(dict.fromkeys([default.group(1), ".".join(latest_version().split(".")[:2])]))


def check_service_monitor(sm: dict[str, Any], docs: tuple[dict[str, Any], ...], values: dict[str, Any]) -> None:
    """monitoring.coreos.com/v1 is a CRD, absent from the Kubernetes schemas: check what matters by hand."""
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(sm["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels"}
    service = one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "tlsConfig"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == ("https" if values["tls"]["enabled"] else "http")
    assert seconds(endpoint["scrapeTimeout"]) <= seconds(endpoint["interval"])
    assert ("tlsConfig" in endpoint) == values["tls"]["enabled"]
    for key, label in values["serviceMonitor"]["labels"].items():
        assert sm["metadata"]["labels"][key] == label


@needs_helm
@ci
def test_every_manifest_validates_against_the_kubernetes_schemas(values: str) -> None:
    import kubernetes_validate

    docs = rendered(values)
    v = values_of(values)
    kinds = [d["kind"] for d in docs]
    assert {"ConfigMap", "Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= set(kinds)
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        if doc["kind"] == "ServiceMonitor":
            check_service_monitor(doc, docs, v)
            continue
        for version in k8s_versions():
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} at Kubernetes {version}: {path}: {exc.message}")
    assert ("ServiceMonitor" in kinds) == v["serviceMonitor"]["enabled"]
    assert ("NetworkPolicy" in kinds) == v["networkPolicy"]["enabled"]
    assert ("PodDisruptionBudget" in kinds) == v["podDisruptionBudget"]["enabled"]
