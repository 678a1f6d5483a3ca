"""Installability corners: what a user installing the chart as documented runs into."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from chart_kit import CHART, NAMESPACE, REPO, helm, needs_helm


def render(tmp_path: Path, values: dict[str, Any], release: str = "ke") -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run = helm("template", release, str(CHART), "--namespace", NAMESPACE, "--values", str(path))
    docs = [d for d in yaml.safe_load_all(run.stdout) if d] if run.returncode == 0 else []
    return run.returncode, docs, run.stderr


def kind(docs: list[dict[str, Any]], k: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == k and (name is None or d["metadata"]["name"] == name)]
    return found


# 1 -----------------------------------------------------------------------------------------------
@needs_helm
def test_servicemonitor_verifies_the_name_the_certificate_is_documented_to_carry(tmp_path: Path) -> None:
    """Second scheduler exposed for metrics, over TLS with a CA: the docs say the serving certificate
    must name the urlPrefix host (127.0.0.1) or tls.scheduler.serverName. kube-scheduler verifies
    serverName; the ServiceMonitor verifies <fullname>.<ns>.svc against the same CA, a name the
    certificate need not carry -> Prometheus scrapes fail with an x509 name mismatch."""
    code, docs, err = render(tmp_path, {
        "scheduler": {"enabled": True, "extenderListenAddress": "0.0.0.0"},
        "config": {"profiles": [{"schedulerName": "gpu-scheduler"}]},
        "tls": {"enabled": True, "secretName": "extender-tls",
                "scheduler": {"caSecretName": "extender-ca", "serverName": "kube-extender.sched.svc"}},
        "serviceMonitor": {"enabled": True},
    })
    assert code == 0, err
    sched = yaml.safe_load(kind(docs, "ConfigMap", "ke-kube-extender-scheduler")["data"]["scheduler-config.yaml"])
    scheduler_name = sched["extenders"][0]["tlsConfig"]["serverName"]
    (endpoint,) = kind(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert "ca" in endpoint["tlsConfig"]  # it does verify
    assert endpoint["tlsConfig"]["serverName"] == scheduler_name, (
        f"ServiceMonitor verifies {endpoint['tlsConfig']['serverName']!r}, kube-scheduler {scheduler_name!r}")


# 2 -----------------------------------------------------------------------------------------------
@needs_helm
def test_rolling_update_without_rolling_update_block_is_refused_like_an_explicit_25_percent(tmp_path: Path) -> None:
    """`updateStrategy: {type: RollingUpdate}` gets Kubernetes' defaults (maxSurge 25% -> 1,
    maxUnavailable 25% -> 0): the new pod is a standby that never turns Ready while the old leader
    runs, so the rollout never finishes. The chart refuses the same thing written explicitly."""
    explicit, _, err = render(tmp_path, {"updateStrategy": {"type": "RollingUpdate",
                                                            "rollingUpdate": {"maxUnavailable": "25%"}}})
    assert explicit != 0 and "would never finish a rollout" in err  # refused
    code, docs, err = render(tmp_path, {"updateStrategy": {"type": "RollingUpdate"}})
    if code == 0:
        strategy = kind(docs, "Deployment")["spec"]["strategy"]
        assert strategy.get("rollingUpdate", {}).get("maxUnavailable") in ("100%", 1), (
            f"rendered {strategy}: Kubernetes defaults maxUnavailable to 25% (0 of 1 pod), a stalled rollout")


# 3 -----------------------------------------------------------------------------------------------
@needs_helm
def test_managed_preemption_profile_without_features_preemption_is_refused_or_granted_eviction(
        tmp_path: Path) -> None:
    """Enabling ManagedPreemption in config.profiles (as policies/preemption/README.md and
    docs/configuration.md say) but leaving features.preemption at its default installs cleanly, yet
    the ClusterRole lacks pods/eviction: every eviction is a 403, logged at INFO as "eviction
    refused", and pods never preempt. The chart refuses the analogous binding case."""
    code, docs, err = render(tmp_path, {"config": {"profiles": [
        {"schedulerName": "", "plugins": {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}}}]}})
    if code != 0:
        return  # refused: fine
    cfg = yaml.safe_load(kind(docs, "ConfigMap", "ke-kube-extender")["data"]["config.yaml"])
    assert cfg["profiles"][0]["plugins"]["postFilter"]["enabled"] == [{"name": "ManagedPreemption"}]
    rules = kind(docs, "ClusterRole")["rules"]
    assert any("pods/eviction" in r["resources"] and "create" in r["verbs"] for r in rules), rules


# 4 -----------------------------------------------------------------------------------------------
@needs_helm
def test_writing_a_policy_port_forward_targets_a_deployment_the_chart_creates(tmp_path: Path) -> None:
    """docs/writing-a-policy.md step 7 installs release gpu-extender and then runs
    `kubectl -n kube-system port-forward deploy/gpu-extender 8888`; the chart names the
    Deployment gpu-extender-kube-extender, so the command fails (NotFound)."""
    guide = (REPO / "docs" / "writing-a-policy.md").read_text()
    match = re.search(r"helm upgrade --install (\S+) charts/kube-extender -n (\S+).*?\n"
                      r"kubectl -n (\S+) port-forward deploy/(\S+) ", guide)
    assert match, "guide changed"
    release, namespace, pf_namespace, target = match.groups()
    assert namespace == pf_namespace
    code, docs, err = render(tmp_path, {}, release=release)
    assert code == 0, err
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"]
    assert target in names, f"guide port-forwards deploy/{target}; the chart creates {names}"


# 5 -----------------------------------------------------------------------------------------------
@needs_helm
def test_operations_rbac_reference_matches_what_binding_needs(tmp_path: Path) -> None:
    """docs/operations.md "RBAC" (the list for rbac.create=false users) says pods/status patch is
    needed "only with extender-driven preemption"; the extender also patches pods/status when a pod
    it binds displaces a nomination (runtime/binding.py _clear_displaced_nominations), which is why
    the chart grants it with features.binding alone."""
    code, docs, err = render(tmp_path, {"features": {"binding": True, "preemption": False}})
    assert code == 0, err
    rules = kind(docs, "ClusterRole")["rules"]
    assert any(r["resources"] == ["pods/status"] for r in rules)  # chart: needed for binding
    ops = (REPO / "docs" / "operations.md").read_text()
    line = next(ln for ln in ops.splitlines() if "verbs: [patch]" in ln and "nominatedNodeName" in ln)
    assert "only with extender-driven preemption" not in line, line
