"""``kube-extender simulate`` on the embedded demo cluster with the shipped sample workload.

The subcommand is built from ``extender.sim.cli.add_parser``/``run`` exactly as ``extender.cli``
wires it (a parser with subcommands, and a :class:`Wiring` of the layers above the simulator).
"""

from __future__ import annotations

import argparse
import json
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterator

import pytest
from werkzeug.serving import make_server

from extender.app import create_app
from extender.cli import sim_wiring
from extender.cluster.memory import MemoryCluster
from extender.config.model import load_config
from extender.sim import cli as sim_cli

WIRING = sim_wiring()


def simulate(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="kube-extender")
    sub = parser.add_subparsers(dest="command", required=True)
    sim_cli.add_parser(sub)
    args = parser.parse_args(["simulate", *argv])
    assert args.command == "simulate"
    return sim_cli.run(args, WIRING)


def test_simulate_the_sample_workload_on_the_demo_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate("--out", str(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert "Bound (" in out and "Pending (1):" in out and "Preempted (1):" in out
    assert "ml/trainer-1" in out and "Insufficient example.com/gpu" in out
    assert "Utilization (managed resources from extender /debug/snapshot)" in out
    assert "[simulate]" in err  # progress/announcement on stderr

    report = json.loads((tmp_path / "report.json").read_text())
    bound = {b["pod"]: b["node"] for b in report["bound"]}
    # binpacking: both inference pods on the fullest GPU node; the batch jobs fill gpu-node-2
    assert bound["ml/infer-0"] == bound["ml/infer-1"] == "gpu-node-1"
    assert bound["ml/trainer-0"] == "gpu-node-2"
    # the high-priority pod preempted the low-priority batch pod through the extender's preempt verb
    assert bound["ml/urgent"] == "gpu-node-3"
    assert report["preempted"] == [{"pod": "ml/batch-low-1", "node": "gpu-node-3", "by": "ml/urgent",
                                    "via": "kube-scheduler"}]
    (preemption,) = report["preemptions"]
    assert set(preemption["candidates"]) == {"gpu-node-3", "cpu-node-1"}
    assert preemption["extenders"][0]["kept"] == {"gpu-node-3": ["6d656d6f-0000-4000-8000-0000000000b1"]}
    # a shortage of an ignoredByScheduler resource alone never reaches the preempt verb (kube-scheduler's
    # dry run finds no victim): trainer-1 stays pending
    (pending,) = report["pending"]
    assert pending["pod"] == "ml/trainer-1" and "Insufficient example.com/gpu" in pending["reason"]
    assert {c["pod"] for c in report["completed"]} == {"ml/batch-0", "ml/batch-1", "ml/batch-2"}
    assert report["utilization"]["discrepancies"] == []
    assert report["utilization"]["totals"]["example.com/gpu"]["display"] == "8/10"
    assert report["latency"]["filter"]["calls"] > 0 and report["latency"]["preempt"]["calls"] == 1

    root = ET.parse(tmp_path / "utilization.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "gpu-node-1" in texts and "cpu-node-1" in texts and "4/4 (100%)" in texts
    assert "7 bound · 1 pending · 1 preempted · 3 completed" in texts
    assert (tmp_path / "report.txt").read_text() == out[: len((tmp_path / "report.txt").read_text())]


def test_simulate_is_deterministic_for_a_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate("--out", str(tmp_path / "a"), "--seed", "3", "--quiet") == 0
    assert simulate("--out", str(tmp_path / "b"), "--seed", "3", "--quiet", "--version", "1.29") == 0
    out = capsys.readouterr().out
    assert out.count("12 pods: 7 bound, 1 pending, 1 preempted, 3 completed") == 2
    a = json.loads((tmp_path / "a" / "report.json").read_text())
    b = json.loads((tmp_path / "b" / "report.json").read_text())
    assert a["bound"] == b["bound"] or {x["pod"] for x in a["bound"]} == {x["pod"] for x in b["bound"]}
    assert b["summary"]["version"] == "1.29"


def test_simulate_reports_bad_input_by_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text("pods:\n  - name: ok\n  - name: broken\n    requests: {cpu: lots}\n")
    assert simulate("--workload", str(bad), "--out", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert f"{bad} entry 2 (broken): requests.cpu:" in err and "not a Kubernetes quantity" in err
    cfg = tmp_path / "c.yaml"
    cfg.write_text("apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\nextender: {weight: 0}\n")
    assert simulate("--config", str(cfg), "--out", str(tmp_path)) == 1
    assert "extender.weight" in capsys.readouterr().err
    assert simulate("--cluster", str(tmp_path / "missing.yaml"), "--out", str(tmp_path)) == 1
    assert "missing.yaml: cannot read" in capsys.readouterr().err


def test_simulate_reports_a_workload_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_bytes(b"pods:\n  - name: caf\xe9\n")  # Latin-1, not UTF-8
    assert simulate("--workload", str(bad), "--out", str(tmp_path / "o")) == 1
    out, err = capsys.readouterr()
    assert err == f"kube-extender: {bad}: not UTF-8 text (byte 19): a workload file is YAML\n"
    assert out == "" and not (tmp_path / "o").exists()


def _occupied_by_a_file(tmp_path: Path) -> Path:
    (tmp_path / "taken").write_text("not a directory\n")
    return tmp_path / "taken"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "taken").write_text("not a directory\n")
    return tmp_path / "taken" / "out"


def _read_only(tmp_path: Path) -> Path:
    (tmp_path / "ro").mkdir(mode=0o500)
    return tmp_path / "ro"


@pytest.mark.parametrize("make_out, message", [
    (_occupied_by_a_file, "not a directory"),
    (_under_a_file, "cannot write: Not a directory"),
    pytest.param(_read_only, "cannot write: Permission denied",
                 marks=pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root may write anywhere")),
], ids=["a file", "under a file", "read-only"])
def test_simulate_checks_the_output_directory_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make_out: Any, message: str) -> None:
    out_dir = make_out(tmp_path)
    assert simulate("--out", str(out_dir)) == 1
    out, err = capsys.readouterr()
    assert err == f"kube-extender: {out_dir}: {message}\n", "one line, before the run"
    assert out == ""


def test_simulate_reports_a_failed_write_after_the_run_with_the_results_printed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report.json").mkdir()  # the directory is writable, that one file is not
    assert simulate("--out", str(tmp_path), "--quiet") == 1
    out, err = capsys.readouterr()
    assert "12 pods: 7 bound, 1 pending, 1 preempted, 3 completed" in out
    assert err == f"kube-extender: {tmp_path}: cannot write: Is a directory\n"


def test_simulate_a_custom_cluster_in_real_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("""apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: v1
kind: Node
metadata: {name: box, labels: {kubernetes.io/hostname: box}}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10", example.com/gpu: "1"}
""")
    workload = tmp_path / "w.yaml"
    workload.write_text("""- {name: first, priorityClassName: low, requests: {example.com/gpu: 1}, deleteAfter: 0.3}
- {name: second, priorityClassName: low, requests: {example.com/gpu: 1}, arrival: 0.1}
""")
    assert simulate("--cluster", str(cluster), "--workload", str(workload), "--out", str(tmp_path / "o"),
                    "--real-time", "--quiet") == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [c["pod"] for c in report["completed"]] == ["default/first"]
    (second,) = report["bound"]
    assert second["pod"] == "default/second" and second["attempts"] >= 2
    assert 0.3 <= report["summary"]["virtualSeconds"] < 5  # wall-clock seconds in --real-time


@pytest.fixture
def served_extender() -> Iterator[str]:
    """kube-extender over real HTTP (werkzeug, threaded) on the demo cluster."""
    app = create_app(load_config(None), source=MemoryCluster.demo())
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/scheduler"
    server.shutdown()


def test_simulate_against_an_extender_url(tmp_path: Path, served_extender: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Over HTTP the extender serves its own copy of the cluster: it never sees the simulator's
    workload pods, so its binds of them fail and those pods are retried (documented). The
    cluster's own pending pods (trainer-0/1) do exist on both sides and bind normally."""
    assert simulate("--extender", served_extender, "--out", str(tmp_path), "--quiet") == 0
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    assert report["extenders"][0]["urlPrefix"] == served_extender
    assert report["latency"]["filter"]["calls"] > 0 and report["latency"]["bind"]["calls"] > 0
    assert report["latency"]["bind"]["errors"] == report["summary"]["bindFailures"] > 0
    bound = {b["pod"]: b for b in report["bound"]}
    assert bound["ml/trainer-0"]["boundBy"] == served_extender
    assert report["utilization"]["source"] == "extender /debug/snapshot"


def test_png_is_written_when_cairosvg_is_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import types

    rendered: list[bytes] = []

    def svg2png(bytestring: bytes, write_to: str) -> None:
        rendered.append(bytestring)
        Path(write_to).write_bytes(b"\x89PNG fake")

    monkeypatch.setitem(__import__("sys").modules, "cairosvg", types.SimpleNamespace(svg2png=svg2png))
    assert simulate("--out", str(tmp_path), "--quiet") == 0
    assert (tmp_path / "utilization.png").exists() and rendered[0].startswith(b"<svg")
    assert "utilization.png" in capsys.readouterr().out


def test_gated_pods_are_admitted_in_virtual_time_and_a_hopeless_one_does_not_prolong_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("""apiVersion: v1
kind: Node
metadata: {name: box, labels: {kubernetes.io/hostname: box}}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10", example.com/gpu: "2"}
""")
    workload = tmp_path / "w.yaml"
    workload.write_text("""- {name: first, requests: {example.com/gpu: 2}, deleteAfter: 30}
- {name: waits, requests: {example.com/gpu: 2}, arrival: 1, gates: [kube-extender.io/admission]}
- {name: never, requests: {example.com/gpu: 8}, arrival: 1, gates: [kube-extender.io/admission]}
""")
    assert simulate("--cluster", str(cluster), "--workload", str(workload), "--out", str(tmp_path / "o"),
                    "--quiet") == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [c["pod"] for c in report["completed"]] == ["default/first"]
    (waits,) = report["bound"]
    assert waits["pod"] == "default/waits" and waits["attempts"] == 1, "admitted once the GPUs were free"
    assert [p["pod"] for p in report["pending"]] == ["default/never"]
    assert report["summary"]["virtualSeconds"] < 60, "the run ends once nothing can change"


def test_simulate_reports_quota_use_per_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An ElasticQuota in the cluster file and CapacityQuota enabled: team-a (min 1, max 2) gets
    2 of its 3 pods placed, and the report says where each namespace stands."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("""apiVersion: v1
kind: Node
metadata: {name: box, labels: {kubernetes.io/hostname: box}}
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "10", example.com/gpu: "4"}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: quota, namespace: team-a}
spec: {min: {example.com/gpu: "1"}, max: {example.com/gpu: "2"}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: quota, namespace: team-b}
spec: {min: {example.com/gpu: "2"}}
""")
    workload = tmp_path / "w.yaml"
    workload.write_text("- {name: a, namespace: team-a, count: 3, requests: {example.com/gpu: 1}}\n")
    config = tmp_path / "config.yaml"
    config.write_text("""apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
profiles:
- schedulerName: default-scheduler
  plugins: {multiPoint: {enabled: [{name: CapacityQuota}]}}
""")
    assert simulate("--cluster", str(cluster), "--workload", str(workload), "--config", str(config),
                    "--out", str(tmp_path / "o")) == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert len(report["bound"]) == 2
    assert report["quota"]["team-a"]["example.com/gpu"] == {"min": "1", "max": "2", "used": "2", "borrowed": "1",
                                                            "lent": "0", "pending": "1"}
    assert report["quota"]["team-b"]["example.com/gpu"]["lent"] == "1"
    text = capsys.readouterr().out
    assert "Quota use per namespace" in text and "team-a     example.com/gpu  1    2    2     1" in text


def test_a_run_kube_scheduler_crashes_in_exits_3_with_its_report_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply the real scheduler panics on ends the run (extender.sim.client.SchedulerPanic);
    simulate still writes its report, says why on stderr and exits 3 - a CI job running it notices
    (it exited 0)."""
    from extender.sim import scheduler as sim_scheduler
    from extender.sim.client import SchedulerPanic

    real = sim_scheduler.Scheduler._schedule_one

    def schedule_one(self: Any, qp: Any) -> None:
        if qp.record.key == "ml/urgent":
            raise SchedulerPanic("runtime error: invalid memory address or nil pointer dereference (test)")
        real(self, qp)

    monkeypatch.setattr(sim_scheduler.Scheduler, "_schedule_one", schedule_one)
    assert simulate("--out", str(tmp_path), "--quiet") == 3
    assert "the emulated kube-scheduler crashed: panic: runtime error" in capsys.readouterr().err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["endReason"].startswith("crashed: panic:")
