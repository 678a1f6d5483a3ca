"""NVIDIA GPUs without GPUs: the emulated kube-scheduler drives kube-extender over nodes labelled as
NVIDIA's device plugin and GPU Feature Discovery label them.

* The documented example (docs/gpus.md, docs/examples/nvidia-*.yaml) through `kube-extender
  simulate`: shares binpacked per GPU, a whole-GPU pod that makes the extender preempt by itself
  (reported as preempted, with the preemptor), a pod short of whole GPUs told so, and GPU
  figures per device and per node in the report.
* DeviceShare's inventory from GFD labels in a stream of share pods: a node with malformed labels
  gets nothing, and a node's inventory annotation wins over its labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_node, make_pod
from simkit import OurServer, scheduler_for
from test_sim_cli import simulate
from test_sim_device_share import device_use

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
MEM, COMPUTE, GPU = "kube-extender.io/gpu-memory", "kube-extender.io/gpu-compute", "nvidia.com/gpu"


def test_the_documented_configuration_is_the_example_file() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "gpus.md").read_text(), re.S)
    (documented,) = [b for b in blocks if "kind: ExtenderConfiguration" in b and "DeviceShare" in b]
    example = (EXAMPLES / "nvidia-extender.yaml").read_text()
    assert documented.strip() in example and yaml.safe_load(documented) == yaml.safe_load(example)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("nvidia")
    import contextlib
    import io
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        code = simulate("--cluster", str(EXAMPLES / "nvidia-cluster.yaml"), "--workload",
                        str(EXAMPLES / "nvidia-workload.yaml"), "--config", str(EXAMPLES / "nvidia-extender.yaml"),
                        "--out", str(out))
    assert code == 0, text.getvalue()
    return json.loads((out / "report.json").read_text()), text.getvalue()


def test_example_evictions_by_the_extender_are_reported_as_preempted(example_run: tuple[dict[str, Any], str]) -> None:
    report, text = example_run
    bound = {b["pod"]: b["node"] for b in report["bound"]}
    (victim,) = report["preempted"]
    assert victim == {"pod": "ml/batch-1", "node": bound["ml/train"], "by": "ml/train", "via": "extender"}
    assert report["summary"]["preempted"] == 1 and report["summary"]["completed"] == 0
    assert report["preemptions"] == [], "kube-scheduler's own preemption found nothing: a share is invisible to it"
    assert re.search(r"ml/batch-1 +on gpu-. +by ml/train +\(evicted by the extender\)", text), text


def test_example_whole_gpu_shortage_names_the_gpu(example_run: tuple[dict[str, Any], str]) -> None:
    report, _ = example_run
    (pending,) = report["pending"]
    assert pending["pod"] == "ml/big"
    assert pending["reason"].startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert "gpu-memory" not in pending["reason"]


def test_example_reports_gpu_figures_per_device_and_per_node(example_run: tuple[dict[str, Any], str]) -> None:
    report, text = example_run
    util = report["utilization"]
    assert util["discrepancies"] == []
    # every GPU is busy: four shares of 40 GiB, one of them next to a 40 GiB batch pod, and train's whole GPU
    assert {r: util["totals"][r]["display"] for r in (GPU, MEM, COMPUTE)} == {
        GPU: "4/4", MEM: "327680/327680", COMPUTE: "225/400"}
    nodes = {n["name"]: n["resources"] for n in util["nodes"]}
    assert MEM not in nodes["cpu-1"]
    for name in ("gpu-a", "gpu-b"):
        assert nodes[name][MEM]["allocatable"] == 2 * 81920 * 1000 and nodes[name][MEM]["source"] == "extender devices"
    devices = {(d["node"], dev["id"]): dev for d in report["devices"] for dev in d["devices"]}
    assert {d["source"] for d in report["devices"]} == {"gpu-feature-discovery"}
    assert sorted(devices) == [("gpu-a", 0), ("gpu-a", 1), ("gpu-b", 0), ("gpu-b", 1)]
    whole = [dev for dev in devices.values() if dev["exclusive"]]
    assert [(dev["pods"], dev["memoryMiB"]) for dev in whole] == [(["ml/train"], {"used": 81920, "total": 81920})]
    shared = sorted(sorted(dev["pods"]) for dev in devices.values() if not dev["exclusive"])
    assert shared == [["ml/batch-0", "ml/infer-4"], ["ml/infer-0", "ml/infer-1"], ["ml/infer-2", "ml/infer-3"]]
    assert "Devices (used/total per device" in text and "81920/81920 MiB" in text
    assert "gpu-a (NVIDIA-A100-SXM4-80GB, gpu-feature-discovery)" in text


# ---- the inventory from labels, in a stream ---------------------------------------------------------------

CONFIG = yaml.safe_load((EXAMPLES / "nvidia-extender.yaml").read_text())


def gfd_node(name: str, count: str, memory: str, **annotations: str) -> dict[str, Any]:
    node = make_node(name).obj()
    node["metadata"]["labels"].update({"nvidia.com/gpu.count": count, "nvidia.com/gpu.memory": memory,
                                       "nvidia.com/gpu.product": "NVIDIA-L4"})
    node["status"]["allocatable"][GPU] = count if count.isdigit() else "0"
    if annotations:
        node["metadata"]["annotations"] = annotations
    return node


def test_shares_follow_the_gfd_labels_and_the_annotation_wins() -> None:
    """l4-a: 2 x 24 GiB by its labels; l4-b: labels say 4 x 24 GiB but its annotation says one GPU
    of 16 GiB (the annotation wins); l4-bad: `nvidia.com/gpu.memory: 24GB` is not MiB (logged,
    no GPUs). Eight 12 GiB shares: four fit on l4-a, one on l4-b, none on l4-bad, three wait."""
    nodes = [gfd_node("l4-a", "2", "24576"),
             gfd_node("l4-b", "4", "24576", **{"kube-extender.io/device-inventory":
                                              json.dumps({"devices": 1, "memoryMiB": 16384})}),
             gfd_node("l4-bad", "2", "24GB")]
    ours = OurServer(nodes, [], managedResources=CONFIG["managedResources"], profiles=CONFIG["profiles"])
    scheduler = scheduler_for(ours.cluster, [(ours.entry(), ours.transport)], seed=5, max_virtual_seconds=30)
    for i in range(8):
        ours.cluster.add_pod(make_pod(f"share-{i}").uid(f"u-share-{i}").req(**{MEM: 12288}).obj())
    scheduler.run()

    use = device_use(ours)  # (node, GPU) -> memory used, as the pods' assignments say
    assert {k: (memory, len(pods)) for k, (memory, _, pods) in use.items()} == {
        ("l4-a", 0): (24576, 2), ("l4-a", 1): (24576, 2), ("l4-b", 0): (12288, 1)}
    pending = [p for p in ours.cluster.pods() if not p["spec"].get("nodeName")]
    assert len(pending) == 3
    verdict = json.loads(ours.app.test_client().get(
        f"/debug/pods/default/{pending[0]['metadata']['name']}").data)["verdicts"]["filter"]
    assert verdict["rejected"]["l4-bad"]["reasons"] == ["node(s) had no shareable devices"]
    assert verdict["rejected"]["l4-a"]["reasons"] == [f"Insufficient {MEM} on any single device"]
