"""The kube-extender command: config scheduler / config check / serve argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.cli import main


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    return f


def test_config_scheduler_prints_a_valid_extenders_entry(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = write(tmp_path, """apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
managedResources: [{name: vendor.io/fpga, ignoredByScheduler: false}]
extender: {weight: 3, httpTimeout: 2500ms, bindVerb: ""}
""")
    assert main(["config", "scheduler", "--config", str(cfg), "--url", "https://ext.svc:8443/scheduler"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    (entry,) = doc["extenders"]
    assert entry == {"urlPrefix": "https://ext.svc:8443/scheduler", "filterVerb": "filter",
                     "prioritizeVerb": "prioritize", "preemptVerb": "preempt", "weight": 3, "enableHTTPS": True,
                     "httpTimeout": "2500ms", "nodeCacheCapable": True, "ignorable": False,
                     "managedResources": [{"name": "vendor.io/fpga", "ignoredByScheduler": False}]}


def test_config_scheduler_full_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "scheduler", "--full"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1" and doc["kind"] == "KubeSchedulerConfiguration"
    assert doc["profiles"] == [{"schedulerName": "default-scheduler"}]
    assert doc["extenders"][0]["bindVerb"] == "bind"


def test_config_check_ok_and_bad(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = write(tmp_path, "apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n")
    assert main(["config", "check", str(good)]) == 0
    assert "ok" in capsys.readouterr().out
    bad = write(tmp_path, """apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
profiles: [{schedulerName: s, plugins: {score: {enabled: [{name: NodeResources, weight: 500}]}}}]
""")
    assert main(["config", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "profiles[0].plugins.score" in err and "weight" in err


def test_serve_with_a_broken_cluster_file_fails_before_serving(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text("kind: Pod\nmetadata: {}\n")
    assert main(["serve", "--cluster", str(f), "--port", "1"]) == 1
    assert "needs metadata.name" in capsys.readouterr().err


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["serve", "--help"], ["config", "--help"], ["config", "scheduler", "--help"],
                 ["config", "check", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert "usage" in capsys.readouterr().out
