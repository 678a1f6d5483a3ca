"""Shared helpers of the benchmark scripts: the seeded cluster generator and its YAML, Go-shaped
request bodies, percentiles, process memory (/proc), free ports, and ``Server`` - ``kube-extender
serve --cluster FILE`` as a subprocess. Scripts import them from here (``benchmarks/`` is on
``sys.path`` when a script in it runs), never copy them."""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from extender.sim.workload import Workload, parse_workload  # noqa: E402

GPU = "example.com/gpu"
SEED = 20260101
PATH_PREFIX = "/scheduler"

# ---------------------------------------------------------------------------------------------
# cluster generation
# ---------------------------------------------------------------------------------------------

# (weight, gpus, cpu cores, memory GiB, instance type, gpu product)
NODE_SHAPES = [
    (0.25, 0, 16, 64, "m6i.4xlarge", None),
    (0.15, 0, 32, 128, "m6i.8xlarge", None),
    (0.15, 2, 32, 256, "g5.12xlarge", "NVIDIA-A10G"),
    (0.20, 4, 48, 384, "g6e.12xlarge", "NVIDIA-L40S"),
    (0.25, 8, 96, 1152, "p4de.24xlarge", "NVIDIA-A100-SXM4-80GB"),
]
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
PRIORITY_CLASSES = {"batch-low": 100, "training": 1000, "inference": 5000, "system-node-critical": 2000001000}
TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _ts(rng: random.Random, day_lo: int, day_hi: int) -> str:
    d = rng.randint(day_lo, day_hi)
    return f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:" \
           f"{rng.randint(0, 59):02d}Z"


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


def make_node(rng: random.Random, i: int) -> dict[str, Any]:
    r = rng.random()
    acc = 0.0
    shape = NODE_SHAPES[-1]
    for s in NODE_SHAPES:
        acc += s[0]
        if r < acc:
            shape = s
            break
    _, gpus, cpu, mem_gi, itype, product = shape
    name = f"ip-10-{(i >> 8) & 255}-{i & 255}-{rng.randint(1, 254)}.ec2.internal"
    zone = ZONES[i % len(ZONES)]
    pool = f"{'gpu' if gpus else 'cpu'}-{itype.split('.')[0]}"
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone, "karpenter.sh/nodepool": pool,
        "karpenter.sh/capacity-type": "on-demand" if rng.random() < 0.7 else "spot",
    }
    if gpus:
        labels.update({"nvidia.com/gpu.product": str(product), "nvidia.com/gpu.count": str(gpus),
                       "nvidia.com/gpu.present": "true"})
    created = _ts(rng, 0, 20)
    heartbeat = "2026-03-02T10:14:50Z"
    ready = rng.random() >= 0.01              # ~1% of nodes NotReady
    conditions = [
        {"type": t, "status": "False", "lastHeartbeatTime": heartbeat, "lastTransitionTime": created,
         "reason": f"KubeletHasSufficient{k}", "message": f"kubelet has sufficient {k.lower()} available"}
        for t, k in (("MemoryPressure", "Memory"), ("DiskPressure", "Disk"), ("PIDPressure", "PID"))
    ]
    conditions.append({"type": "Ready", "status": "True" if ready else "Unknown", "lastHeartbeatTime": heartbeat,
                       "lastTransitionTime": created, "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                       "message": "kubelet is posting ready status" if ready else
                       "Kubelet stopped posting node status."})
    ip = f"10.{(i >> 8) & 255}.{i & 255}.{rng.randint(1, 254)}"
    mem_ki = mem_gi * 1024 * 1024
    capacity = {"cpu": str(cpu), "ephemeral-storage": "203070420Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": f"{mem_ki}Ki", "pods": "110"}
    allocatable = {"cpu": f"{cpu * 1000 - 90 - cpu * 10}m", "ephemeral-storage": "186052146878",
                   "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": f"{mem_ki - 1_600_000}Ki", "pods": "110"}
    if gpus:
        capacity[GPU] = str(gpus)
        allocatable[GPU] = str(gpus)
    spec: dict[str, Any] = {"podCIDR": f"100.64.{i % 256}.0/24", "podCIDRs": [f"100.64.{i % 256}.0/24"],
                            "providerID": f"aws:///{zone}/i-0{rng.getrandbits(64):016x}"}
    if gpus:
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if not ready:
        spec.setdefault("taints", []).append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                              "timeAdded": heartbeat})
    if rng.random() < 0.005:                  # a few cordoned nodes
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": _uid(rng), "creationTimestamp": created, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": spec,
        "status": {
            "capacity": capacity, "allocatable": allocatable, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "InternalDNS", "address": name},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": f"{rng.getrandbits(128):032x}", "systemUUID": _uid(rng),
                         "bootID": _uid(rng), "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                         "osImage": "Amazon Linux 2023.6.20241121", "containerRuntimeVersion": "containerd://1.7.23",
                         "kubeletVersion": "v1.31.2-eks-94953ac", "kubeProxyVersion": "v1.31.2-eks-94953ac",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause:3.9"],
                        "sizeBytes": 299530}],
        },
    }


def make_pod(rng: random.Random, node: dict[str, Any], *, app: str, namespace: str, requests: dict[str, str],
             priority_class: str, gpu_tolerant: bool) -> dict[str, Any]:
    """A running pod bound to ``node``, as a Deployment's pod looks in ``kubectl get -o yaml`` minus the
    defaulted noise (managedFields, status.conditions, terminationMessagePath, ...): the cluster file is
    parsed by pure-Python PyYAML at start-up, so every byte per pod costs start-up time."""
    tmpl = f"{rng.getrandbits(40):010x}"[:9]
    name = f"{app}-{tmpl}-{_suffix(rng)}"
    limits = {k: v for k, v in requests.items() if k in (GPU, "memory")}
    created = _ts(rng, 21, 55)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "generateName": f"{app}-{tmpl}-", "namespace": namespace, "uid": _uid(rng),
                     "creationTimestamp": created, "labels": {"app": app, "pod-template-hash": tmpl},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{tmpl}",
                                          "uid": _uid(rng), "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "containers": [{"name": "main",
                            "image": f"registry.example.com/{namespace}/{app}:1.{rng.randint(0, 20)}",
                            "resources": {"requests": requests, "limits": limits}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler",
            "tolerations": ([GPU_TOLERATION] if gpu_tolerant else []) + TOLERATIONS,
            "priorityClassName": priority_class, "priority": PRIORITY_CLASSES[priority_class],
            "preemptionPolicy": "PreemptLowerPriority", "nodeName": node["metadata"]["name"],
        },
        "status": {"phase": "Running", "qosClass": "Burstable", "hostIP": node["status"]["addresses"][0]["address"],
                   "podIP": f"100.{64 + rng.randint(0, 63)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                   "startTime": created},
    }


GPU_APPS = [("trainer", "ml", "training"), ("finetune", "ml", "training"), ("llm-serve", "inference", "inference"),
            ("sweep", "research", "batch-low"), ("render", "batch", "batch-low")]
CPU_APPS = [("web", "frontend", "inference"), ("api", "backend", "inference"), ("etl", "batch", "batch-low"),
            ("node-exporter", "monitoring", "system-node-critical"), ("log-shipper", "logging", "system-node-critical"),
            ("dataloader", "ml", "training")]


def generate_cluster(n_nodes: int, seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    nodes = [make_node(rng, i) for i in range(n_nodes)]
    target_pods = 2 * n_nodes
    pods: list[dict[str, Any]] = []
    # GPU pods: each GPU node is used 0..100% (skewed busy), in pods of 1, 2, 4 or 8 GPUs.
    for node in nodes:
        gpus = int(node["status"]["allocatable"].get(GPU, "0"))
        if not gpus:
            continue
        used = min(gpus, round(gpus * rng.choice([0, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0, 1.0])))
        while used > 0:
            size = rng.choice([s for s in (1, 1, 1, 2, 2, 4, 8) if s <= used])
            app, ns, pc = rng.choice(GPU_APPS)
            pods.append(make_pod(rng, node, app=app, namespace=ns, priority_class=pc, gpu_tolerant=True,
                                 requests={"cpu": str(2 * size), "memory": f"{16 * size}Gi", GPU: str(size)}))
            used -= size
    # cpu-only pods spread over every node until about 2 pods per node.
    while len(pods) < target_pods:
        node = rng.choice(nodes)
        app, ns, pc = rng.choice(CPU_APPS)
        pods.append(make_pod(rng, node, app=app, namespace=ns, priority_class=pc,
                             gpu_tolerant=app in ("node-exporter", "log-shipper"),
                             requests={"cpu": rng.choice(["100m", "250m", "500m", "1", "2"]),
                                       "memory": rng.choice(["128Mi", "256Mi", "512Mi", "1Gi", "4Gi"])}))
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "globalDefault": name == "training", "preemptionPolicy": "PreemptLowerPriority"}
               for name, value in PRIORITY_CLASSES.items()]
    return {"Node": nodes, "Pod": pods, "PriorityClass": classes, "PodDisruptionBudget": []}


def pending_pod() -> dict[str, Any]:
    """The pod being scheduled: 1 GPU (shaped as kube-scheduler sends it), not in the cluster."""
    return {
        "metadata": {
            "name": "trainer-6c9f7d8b5-x2k4q", "generateName": "trainer-6c9f7d8b5-", "namespace": "ml",
            "uid": "3f0c2b1e-8d1a-4c5e-9a77-2b6f1e0d9c11", "resourceVersion": "884211",
            "creationTimestamp": "2026-03-02T10:15:03Z",
            "labels": {"app": "trainer", "pod-template-hash": "6c9f7d8b5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-6c9f7d8b5",
                                 "uid": "0b7e9a54-1c7d-4e0e-8f51-4d2a9c3e6f10", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [{
                "name": "main", "image": "registry.example.com/trainer:1.4",
                "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "2", "memory": "4Gi", GPU: "1"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [GPU_TOLERATION] + TOLERATIONS,
            "priority": 1000, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def write_cluster_yaml(objects: dict[str, list[dict[str, Any]]], path: Path) -> None:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    docs = objects["PriorityClass"] + objects.get("PodGroup", []) + objects["Node"] + objects["Pod"]
    with path.open("w") as f:
        f.write("# Generated by benchmarks/hot_path.py (seeded; deterministic).\n")
        yaml.dump_all(docs, f, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000)


def go_json(obj: Any) -> bytes:
    """Compact JSON, as Go's json.Marshal writes it (no spaces; <, >, & escaped)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def args_body(pod: dict[str, Any], names: list[str]) -> bytes:
    return go_json({"Pod": pod, "Nodes": None, "NodeNames": names})


# ---------------------------------------------------------------------------------------------
# an emulator workload
# ---------------------------------------------------------------------------------------------

CLASSES = [("batch-low", 0.4), ("training", 0.4), ("inference", 0.2)]
NAMESPACES = {"batch-low": "research", "training": "ml", "inference": "inference"}


def build_workload(n_pods: int, seed: int, classes: dict[str, dict[str, Any]], batch: int, interval: float,
                   preemption: bool) -> Workload:
    """``n_pods`` pending pods of 1 (65%) or 2 GPUs tolerating the GPU taint, in the cluster's
    priority classes, ``batch`` of them arriving every ``interval`` virtual seconds."""
    rng = random.Random(seed + 7)
    entries = []
    for i in range(n_pods):
        gpus = 1 if rng.random() < 0.65 else 2
        pc = rng.choices([c for c, _ in CLASSES], weights=[w for _, w in CLASSES])[0]
        entries.append({
            "name": f"bench-{i:05d}", "namespace": NAMESPACES[pc], "priorityClassName": pc,
            "preemptionPolicy": "PreemptLowerPriority" if preemption else "Never",
            "requests": {"cpu": str(2 * gpus), "memory": f"{8 * gpus}Gi", GPU: str(gpus)},
            "limits": {GPU: str(gpus)}, "tolerations": [dict(GPU_TOLERATION)],
            "labels": {"app": "bench", "bench/index": str(i)},
            "arrival": (i // batch) * interval,
        })
    return parse_workload({"pods": entries}, origin="benchkit", seed=seed, priority_classes=classes)


# ---------------------------------------------------------------------------------------------
# measurement helpers
# ---------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) in the values' own unit; NaN when there are none.
    The one definition every benchmark prints."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(1, math.ceil(q / 100 * len(s)))
    return s[k - 1]


def pct(values: list[float], q: float) -> float:
    """``percentile`` of seconds, in milliseconds."""
    return percentile(values, q) * 1000


def med(values: list[float]) -> float:
    return statistics.median(values) * 1000


def mib(kb: int) -> str:
    return f"{kb / 1024:.1f} MiB"


def rss_of(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])  # kB
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in parents.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kube_extender_cmd() -> list[str]:
    sibling = Path(sys.executable).parent / "kube-extender"
    if sibling.exists():
        return [str(sibling)]
    found = shutil.which("kube-extender")
    if found:
        return [found]
    return [sys.executable, "-m", "extender.cli"]


class Server:
    """``kube-extender serve --cluster FILE [--config FILE]`` as a subprocess (gunicorn master +
    one worker)."""

    def __init__(self, cluster_file: Path, tmp: Path, config_file: Path | None = None) -> None:
        self.port = free_port()
        self.cmd = kube_extender_cmd() + ["serve", "--cluster", str(cluster_file), "--host", "127.0.0.1",
                                          "--port", str(self.port)]
        if config_file is not None:
            self.cmd += ["--config", str(config_file)]
        self.log_path = tmp / "server.log"
        # gunicorn's control socket defaults to one shared path ($HOME/.gunicorn/gunicorn.ctl); a private
        # XDG_RUNTIME_DIR keeps this server from taking over (or being driven through) anyone else's.
        runtime_dir = tmp / "run"
        runtime_dir.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)}
        self._log = self.log_path.open("wb")
        self.started_wall = time.time()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.ready_after: float | None = None
        self.master_parse_s: float | None = None
        self.exit_code: int | None = None

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float) -> None:
        deadline = self.started + timeout
        while True:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                how = f"was killed by signal {-rc} (not sent by this script)" if rc < 0 else f"exited with {rc}"
                raise RuntimeError(f"server {how}; log tail:\n{self.log_tail()}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"server not ready after {timeout:.0f} s; log tail:\n{self.log_tail()}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/readyz")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        self.ready_after = time.perf_counter() - self.started
        self._startup_from_log()

    def _startup_from_log(self) -> None:
        """Exact start-up times from the log (this script may have been busy when the server got ready):
        the worker's "extender configured" line (ms precision) and gunicorn's "Booting worker" line
        (1 s precision: when the cluster file had been parsed, by a child of the master, and the
        master forked the worker)."""
        text = self.log_tail(1 << 22)
        m = re.search(r"ts=(\S+)Z level=info logger=extender\.app msg=\"extender configured\"", text)
        if m:
            try:
                when = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
                self.ready_after = min(self.ready_after or 1e9, max(0.0, when.timestamp() - self.started_wall))
            except ValueError:
                pass
        m = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4})\] \[\d+\] \[INFO\] Booting worker", text)
        if m:
            try:
                self.master_parse_s = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S %z").timestamp() \
                    - self.started_wall
            except ValueError:
                pass

    def pids(self) -> list[int]:
        return [self.proc.pid] + descendants(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        self._log.close()
