"""RBAC follows the features and nothing more: the ClusterRole holds exactly the rules the enabled
features use (pod patches exactly when the extender patches pods), the Lease role only with leader
election, the scheduler's bindings only in second-scheduler mode, and no wildcard anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import NAMESPACE, ci, extender_config, fullname, needs_helm, one, rendered, values_of


def expected_rules(v: dict[str, Any]) -> list[dict[str, Any]]:
    f = v["features"]
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["pods"],
              "verbs": ["get", "list", "watch"]
              + (["patch"] if f["binding"] or f["schedulingGates"] or v["config"]["requeue"]["nudge"] else [])}]
    if f["binding"]:
        rules.append({"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]})
    if f["preemption"]:
        rules.append({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]})
    if f["binding"] or f["preemption"]:  # nominations: set by preemption, cleared by a bind that displaced them
        rules.append({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]})
    rules.append({"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]})
    if v["config"]["kubernetes"]["events"]:
        rules.append({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]})
    if f["gang"]:
        rules.append({"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["get", "list", "watch"]})
    if f.get("quota"):
        rules.append({"apiGroups": ["scheduling.x-k8s.io"], "resources": ["elasticquotas"],
                      "verbs": ["get", "list", "watch"]})
    return rules


@needs_helm
@ci
def test_rbac_is_derived_from_the_features_and_nothing_more(values: str) -> None:
    v = values_of(values)
    docs = rendered(values)
    name = fullname(v)
    assert one(docs, "ClusterRole", name)["rules"] == expected_rules(v)
    binding = one(docs, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    config = extender_config(docs, v)
    le = config["leaderElection"]
    lease_roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{name}-lease"]
    if le["enabled"]:
        (role,) = lease_roles
        assert role["metadata"]["namespace"] == le["leaseNamespace"]
        assert role["rules"] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [le["leaseName"]],
             "verbs": ["get", "update"]}]
    else:
        assert not lease_roles
    scheduler_refs = sorted(d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] != name)
    if v["scheduler"]["enabled"]:
        assert scheduler_refs == ["system:kube-scheduler", "system:volume-scheduler"]
        reader = one(docs, "RoleBinding", f"{name}-auth-reader")
        assert reader["metadata"]["namespace"] == "kube-system"
        assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                     "name": "extension-apiserver-authentication-reader"}
    else:
        assert scheduler_refs == []
    # nothing cluster-wide beyond these: no wildcard anywhere
    for doc in docs:
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]


PATCH_CASES = [(b, g, n) for b in (True, False) for g in (True, False) for n in (True, False)]


@needs_helm
@pytest.mark.parametrize("binding, gates, nudge", PATCH_CASES,
                         ids=[f"binding={b}-gates={g}-nudge={n}" for b, g, n in PATCH_CASES])
def test_pod_patch_is_granted_exactly_when_the_extender_patches_pods(binding: bool, gates: bool, nudge: bool,
                                                                     tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"features": {"binding": binding, "schedulingGates": gates},
                                    "config": {"requeue": {"nudge": nudge}}}))
    v = values_of(str(path))
    docs = rendered(str(path))
    config = extender_config(docs, v)
    assert config["admission"]["enabled"] is gates
    assert config["requeue"]["nudge"] is nudge
    rules = one(docs, "ClusterRole", fullname(v))["rules"]
    assert rules == expected_rules(v)
    (pods,) = [r for r in rules if r["resources"] == ["pods"]]
    assert ("patch" in pods["verbs"]) == (binding or gates or nudge)
