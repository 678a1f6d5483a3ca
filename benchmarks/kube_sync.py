#!/usr/bin/env python3
"""Scale benchmark: initial sync of a large cluster from the fake API server, then a pod-event stream.

    python benchmarks/kube_sync.py            # 5,000 nodes, 150,000 pods (20,000 managed), 1,000 ev/s for 60 s
    python benchmarks/kube_sync.py --quick    # 500 nodes, 15,000 pods (2,000 managed), 10 s of events

Targets: ready in under 60 s, at most 400 MB resident; a malformed object in a list or a watch is
skipped, logged and counted (``kube_extender_skipped_objects_total``), never fatal.

What it does (a script that prints figures, not a test; exit code 0 = all targets met, 1 = a target
missed, 2 = the run itself failed):

1. Generates a deterministic (seeded) cluster and seeds a :class:`FakeApiServer` running in *this*
   process (``create_many(copy=False)``): nodes with allocatable cpu/memory/pods/ephemeral-storage
   and ``example.com/gpu`` 0/4/8, labels, taints on GPU nodes, conditions, addresses, nodeInfo and a
   few images; pods from Deployments/StatefulSets/Jobs with realistic specs (1-2 containers with
   requests/limits, env, probes, volume mounts, projected service-account volumes, tolerations,
   ownerReferences, labels, annotations, ~1 KB of ``managedFields``, status with conditions and
   containerStatuses). ``--managed`` of them request ``example.com/gpu`` (about 85 % bound to GPU
   nodes within capacity, the rest pending), the others are cpu-only. A handful of malformed
   objects is mixed in; they must be skipped and counted without stopping the sync.
2. Runs ``kube-extender serve --cluster kube --kubeconfig FILE`` as a subprocess (gunicorn master +
   one gthread worker), so its memory is measured in isolation. Time to ready = process start to
   the first ``/readyz`` 200. Resident memory (VmRSS/VmHWM of the worker, and master + worker) from
   ``/proc``.
3. Streams ``--rate`` pod events per second for ``--seconds`` from a generator thread (paced in
   10 ms batches): managed pending pods created, pending pods bound (``api.bind``), annotation /
   label merge patches, managed pods deleted, cpu-only pods created and deleted; halfway through,
   one malformed pod and one malformed node arrive through the watch. Meanwhile a probe thread,
   20 times per second, creates a managed *probe* pod (pending) and polls the extender's
   ``GET /debug/pods/<ns>/<name>`` until it answers 200 ("create lag"), then binds it to a
   dedicated ``probe-node`` through the fake API and polls ``GET /debug/snapshot?node=probe-node``
   until the pod is listed there ("bind lag"), then deletes it. Lag = API write (in this process,
   synchronous with the watch event being queued) to visibility in the extender.
4. After the stream: resident memory again, the extender's watch-event, reconnect, relist and
   skipped-object counters and cache sizes from ``/metrics``, a table and a verdict.

The benchmark process (fake API server: HTTP list/watch serving, store writes, event generation,
probing) and the extender share the machine's CPUs; the CPU time of each side is printed so the
figures can be read with that in mind. The extender is always stopped (SIGTERM, then SIGKILL) and
the fake API server shut down in ``finally`` blocks.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import http.client
import itertools
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from extender.testing.fakeapi import FakeApiServer  # noqa: E402
from extender.testing.fakeapi.errors import ApiError as FakeApiError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import descendants, free_port, kube_extender_cmd, percentile  # noqa: E402

GPU = "example.com/gpu"
SEED = 20260521
READY_TARGET_S = 60.0
RSS_TARGET_MB = 400.0
PROBE_NS = "bench-probe"
PROBE_NODE = "probe-node"
TICK = os.sysconf("SC_CLK_TCK")
EPOCH = datetime(2026, 3, 1, tzinfo=timezone.utc)

# ---------------------------------------------------------------------------------------------
# cluster generation (deterministic)
# ---------------------------------------------------------------------------------------------

_ALPHA = "bcdfghjklmnpqrstvwxz2456789"


def _ts(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(rng: random.Random) -> str:
    h = "%032x" % rng.getrandbits(128)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _suffix(n: int, width: int = 5) -> str:
    """A unique pod-name suffix per counter value (base 27, like generateName's alphabet)."""
    out = []
    for _ in range(width):
        n, r = divmod(n, len(_ALPHA))
        out.append(_ALPHA[r])
    return "".join(reversed(out))


def _hex(rng: random.Random, n: int) -> str:
    return "%0*x" % (n, rng.getrandbits(4 * n))


GPU_SHAPES = (0, 0, 0, 4, 4, 8, 8, 8, 8, 8)  # 30 % cpu-only nodes, 20 % 4-GPU, 50 % 8-GPU
IMAGES = (
    ("registry.k8s.io/kube-proxy:v1.33.1", 30_000_000), ("quay.io/prometheus/node-exporter:v1.9.1", 12_000_000),
    ("docker.io/calico/node:v3.29.3", 150_000_000), ("nvcr.io/nvidia/k8s-device-plugin:v0.17.1", 170_000_000),
    ("registry.k8s.io/pause:3.10", 320_000), ("docker.io/library/busybox:1.37", 2_200_000),
    ("ghcr.io/example/trainer:2.4.1", 7_400_000_000), ("ghcr.io/example/web:5.12.0", 95_000_000),
)


def make_node(rng: random.Random, i: int, *, name: str | None = None, gpus: int | None = None) -> dict[str, Any]:
    name = name or f"node-{i:05d}"
    gpus = rng.choice(GPU_SHAPES) if gpus is None else gpus
    zone = f"eu-west-1{'abc'[i % 3]}"
    itype = {0: "m7i.16xlarge", 4: "g6.12xlarge", 8: "p5.48xlarge"}.get(gpus, "p5.48xlarge")
    cpu, mem = (64, 256) if gpus == 0 else (48, 192) if gpus == 4 else (192, 2048)
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": zone, "node-role.kubernetes.io/worker": "",
        "example.com/pool": "gpu" if gpus else "general",
    }
    alloc = {"cpu": f"{cpu * 1000 - 250}m", "memory": f"{mem * 1024 * 1024 - 2_097_152}Ki", "pods": "110",
             "ephemeral-storage": "478Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    capacity = {"cpu": str(cpu), "memory": f"{mem * 1024 * 1024}Ki", "pods": "110", "ephemeral-storage": "500Gi",
                "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    if gpus:
        labels["example.com/gpu.product"] = "H100-SXM5-80GB" if gpus == 8 else "L4"
        labels["example.com/gpu.count"] = str(gpus)
        alloc[GPU] = capacity[GPU] = str(gpus)
    hb = _ts(86_400 * 80 + rng.randint(0, 3600))
    since = _ts(rng.randint(0, 86_400 * 30))
    conditions = [
        {"type": t, "status": "False", "lastHeartbeatTime": hb, "lastTransitionTime": since, "reason": r,
         "message": m}
        for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": hb, "lastTransitionTime": since,
          "reason": "KubeletReady", "message": "kubelet is posting ready status"}]
    images = [{"names": [img, img.rsplit(":", 1)[0] + "@sha256:" + _hex(rng, 64)], "sizeBytes": size}
              for img, size in rng.sample(IMAGES, 4)]
    node: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": _uid(rng), "creationTimestamp": since, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     "csi.volume.kubernetes.io/nodeid":
                                         json.dumps({"ebs.csi.aws.com": f"i-{_hex(rng, 17)}"})}},
        "spec": {"providerID": f"aws:///{zone}/i-{_hex(rng, 17)}", "podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24",
                 "podCIDRs": [f"10.{i // 256 % 256}.{i % 256}.0/24"]},
        "status": {
            "capacity": capacity, "allocatable": alloc, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"172.20.{i // 250 % 256}.{i % 250 + 1}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": _hex(rng, 32), "systemUUID": _uid(rng), "bootID": _uid(rng),
                         "kernelVersion": "6.8.0-1021-aws", "osImage": "Ubuntu 24.04.2 LTS",
                         "containerRuntimeVersion": "containerd://2.0.5", "kubeletVersion": "v1.33.1",
                         "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    }
    if gpus:
        node["spec"]["taints"] = [{"key": "example.com/gpu", "value": "present", "effect": "NoSchedule"}]
    return node


@dataclass
class Workload:
    """A Deployment/StatefulSet/Job template: pieces shared by its pods (the store never mutates a
    stored object in place: every write stores a modified copy)."""

    namespace: str
    app: str
    kind: str
    owner_name: str
    owner_uid: str
    gpus: int
    labels: dict[str, str]
    annotations: dict[str, str]
    containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    tolerations: list[dict[str, Any]]
    managed_fields: list[dict[str, Any]]
    created: float
    priority_class: str
    priority: int
    node_selector: dict[str, str] | None = None


TEAMS = ("vision", "nlp", "speech", "search", "ads", "payments", "checkout", "identity", "platform", "data",
         "recsys", "fraud", "maps", "media", "infra", "observability", "storage", "security", "growth", "mobile")


def _container(rng: random.Random, name: str, image: str, requests: dict[str, str], limits: dict[str, str],
               port: int) -> dict[str, Any]:
    return {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "OTEL_EXPORTER_OTLP_ENDPOINT",
                                                          "value": "http://otel-collector.observability:4317"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                         {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                          "readOnly": True}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"}, "initialDelaySeconds": 10,
                          "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": port, "scheme": "HTTP"}, "timeoutSeconds": 1,
                           "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }


def _managed_fields(rng: random.Random, w_app: str, created: str) -> list[dict[str, Any]]:
    """About 1 KB of managedFields, shaped like kube-controller-manager's and the kubelet's."""
    spec_fields: dict[str, Any] = {f"f:{k}": {} for k in ("dnsPolicy", "restartPolicy", "schedulerName",
                                                          "serviceAccountName", "terminationGracePeriodSeconds")}
    spec_fields['k:{"name":"' + w_app + '"}'] = {
        ".": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": {}, "f:name": {},
        "f:ports": {}, "f:readinessProbe": {}, "f:resources": {"f:limits": {}, "f:requests": {}},
        "f:securityContext": {}, "f:volumeMounts": {}}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created,
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {},
                                                                       "f:team": {}, "f:version": {}},
                                     "f:ownerReferences": {".": {}, 'k:{"uid":"' + _uid(rng) + '"}': {}}},
                      "f:spec": {"f:containers": spec_fields, "f:volumes": {".": {}, 'k:{"name":"config"}': {}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:status": {"f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {},
                                                                            "f:lastTransitionTime": {}, "f:status": {},
                                                                            "f:type": {}}
                                                    for t in ("ContainersReady", "Ready")},
                                   "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
                                   "f:podIPs": {".": {}}, "f:startTime": {}}}},
    ]


def make_workloads(rng: random.Random, n_gpu: int, n_cpu: int) -> tuple[list[Workload], list[Workload]]:
    gpu_wl: list[Workload] = []
    cpu_wl: list[Workload] = []
    for kind_gpu, count, out in ((True, n_gpu, gpu_wl), (False, n_cpu, cpu_wl)):
        for j in range(count):
            team = TEAMS[j % len(TEAMS)]
            ns = f"{team}-{'prod' if j % 3 else 'staging'}"
            if kind_gpu:
                app = f"{rng.choice(('train', 'infer', 'finetune', 'embed', 'eval'))}-{team}-{j}"
                gpus = rng.choice((1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 4)) if "infer" not in app else 1
                kind = rng.choice(("Job", "StatefulSet", "ReplicaSet"))
            else:
                app = f"{rng.choice(('api', 'web', 'worker', 'cache', 'ingest', 'cron', 'proxy'))}-{team}-{j}"
                gpus = 0
                kind = rng.choice(("ReplicaSet", "ReplicaSet", "ReplicaSet", "StatefulSet", "Job"))
            version = f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
            image = f"ghcr.io/example/{app.split('-')[0]}:{version}"
            cpu = rng.choice(("100m", "250m", "500m", "1", "2", "4")) if not gpus else str(8 * gpus)
            mem = rng.choice(("128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi")) if not gpus else f"{64 * gpus}Gi"
            requests = {"cpu": cpu, "memory": mem}
            limits = {"memory": mem}
            if gpus:
                requests[GPU] = limits[GPU] = str(gpus)
            containers = [_container(rng, app, image, requests, limits, 8080)]
            if rng.random() < 0.35:
                containers.append(_container(rng, "sidecar", f"ghcr.io/example/envoy:1.3{rng.randint(0, 4)}.1",
                                             {"cpu": "50m", "memory": "64Mi"}, {"memory": "64Mi"}, 15090))
            rs_hash = _hex(rng, 10)[:10].translate(str.maketrans("0123456789abcdef", "bcdfghjklm456789"))
            labels = {"app": app, "app.kubernetes.io/name": app, "app.kubernetes.io/part-of": team,
                      "team": team, "version": version}
            owner_name = f"{app}-{rs_hash}" if kind == "ReplicaSet" else app
            if kind == "ReplicaSet":
                labels["pod-template-hash"] = rs_hash
            elif kind == "Job":
                labels["batch.kubernetes.io/job-name"] = app
            created = rng.uniform(86_400 * 60, 86_400 * 79)
            tolerations = [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}]
            if gpus:
                tolerations.append({"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
            volumes = [
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]
            pc, prio = (("batch-high", 100000) if gpus and kind == "Job" else ("", 0))
            out.append(Workload(
                namespace=ns, app=app, kind=kind, owner_name=owner_name, owner_uid=_uid(rng), gpus=gpus,
                labels=labels,
                annotations={"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
                             "kubectl.kubernetes.io/restartedAt": _ts(created - 3600)},
                containers=containers, volumes=volumes, tolerations=tolerations,
                managed_fields=_managed_fields(rng, app, _ts(created)), created=created,
                priority_class=pc, priority=prio,
                node_selector={"example.com/pool": "gpu"} if gpus else None))
    return gpu_wl, cpu_wl


_name_counter = itertools.count()


def make_pod(rng: random.Random, w: Workload, node: str | None, *, name: str | None = None,
             namespace: str | None = None, phase: str | None = None) -> dict[str, Any]:
    n = next(_name_counter)
    if name is None:
        name = f"{w.owner_name}-{_suffix(n)}" if w.kind != "StatefulSet" else f"{w.app}-{n}"
    created = w.created + rng.uniform(0, 86_400)
    meta: dict[str, Any] = {
        "name": name, "namespace": namespace or w.namespace, "uid": _uid(rng),
        "generateName": f"{w.owner_name}-", "creationTimestamp": _ts(created),
        "labels": w.labels, "annotations": w.annotations,
        "ownerReferences": [{"apiVersion": "apps/v1" if w.kind != "Job" else "batch/v1", "kind": w.kind,
                             "name": w.owner_name, "uid": w.owner_uid, "controller": True,
                             "blockOwnerDeletion": True}],
        "managedFields": w.managed_fields,
    }
    spec: dict[str, Any] = {
        "containers": w.containers, "volumes": w.volumes, "tolerations": w.tolerations,
        "restartPolicy": "Always" if w.kind != "Job" else "Never", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": w.app, "serviceAccount": w.app,
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000}, "schedulerName": "default-scheduler",
        "enableServiceLinks": True, "priority": w.priority, "preemptionPolicy": "PreemptLowerPriority",
    }
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if w.node_selector:
        spec["nodeSelector"] = w.node_selector
    if node:
        spec["nodeName"] = node
        started = created + rng.uniform(1, 30)
        ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(2, 254)}"
        status: dict[str, Any] = {
            "phase": phase or "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _ts(started + dt)}
                for t, dt in (("PodReadyToStartContainers", 2), ("Initialized", 0), ("Ready", 9),
                              ("ContainersReady", 9), ("PodScheduled", -1))],
            "hostIP": f"172.20.{rng.randint(0, 30)}.{rng.randint(1, 250)}", "hostIPs": [],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": _ts(started), "qosClass": "Burstable",
            "containerStatuses": [
                {"name": c["name"], "ready": True, "restartCount": rng.choice((0, 0, 0, 1, 2)),
                 "image": c["image"], "imageID": c["image"].rsplit(":", 1)[0] + "@sha256:" + _hex(rng, 64),
                 "containerID": "containerd://" + _hex(rng, 64), "started": True,
                 "state": {"running": {"startedAt": _ts(started + 3)}}}
                for c in w.containers],
        }
        status["hostIPs"] = [{"ip": status["hostIP"]}]
    else:
        status = {"phase": phase or "Pending", "qosClass": "Burstable", "conditions": [
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "lastTransitionTime": _ts(created + 1), "reason": "Unschedulable",
             "message": "0/5000 nodes are available: waiting for the extender."}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


@dataclass
class Cluster:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    gpu_nodes: list[str]
    all_nodes: list[str]
    gpu_workloads: list[Workload]
    cpu_workloads: list[Workload]
    pending_managed: list[tuple[str, str]]
    bound_managed: list[tuple[str, str]]
    cpu_pods: list[tuple[str, str]]
    expected: dict[str, int]
    malformed: dict[str, list[str]]


def generate_cluster(n_nodes: int, n_pods: int, n_managed: int, seed: int = SEED) -> Cluster:
    rng = random.Random(seed)
    nodes = [make_node(rng, i) for i in range(n_nodes)]
    probe = make_node(rng, n_nodes, name=PROBE_NODE, gpus=8)
    probe["status"]["allocatable"][GPU] = probe["status"]["capacity"][GPU] = "100000"
    probe["spec"]["taints"] = [{"key": "example.com/benchmark-probe", "effect": "NoSchedule"}]
    nodes.append(probe)
    free = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, 0)) for n in nodes[:n_nodes]}
    gpu_nodes = [name for name, g in free.items() if g]
    all_nodes = list(free)
    gpu_wl, cpu_wl = make_workloads(rng, max(4, n_managed // 100), max(10, (n_pods - n_managed) // 250))
    pods: list[dict[str, Any]] = []
    pending_managed: list[tuple[str, str]] = []
    bound_managed: list[tuple[str, str]] = []
    cpu_pods: list[tuple[str, str]] = []
    used_gpus = 0
    cursor = 0
    target_bound = int(n_managed * 0.85)
    for i in range(n_managed):
        w = gpu_wl[i % len(gpu_wl)]
        node = None
        if len(bound_managed) < target_bound:
            for _ in range(len(gpu_nodes)):
                cand = gpu_nodes[cursor % len(gpu_nodes)]
                cursor += 1
                if free[cand] >= w.gpus:
                    node = cand
                    free[cand] -= w.gpus
                    used_gpus += w.gpus
                    break
        pod = make_pod(rng, w, node)
        pods.append(pod)
        (bound_managed if node else pending_managed).append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    n_cpu = n_pods - n_managed
    for i in range(n_cpu):
        w = cpu_wl[i % len(cpu_wl)]
        pending = rng.random() < 0.01
        phase = "Succeeded" if (w.kind == "Job" and rng.random() < 0.3) else None
        pod = make_pod(rng, w, None if pending else all_nodes[rng.randrange(len(all_nodes))], phase=phase)
        pods.append(pod)
        cpu_pods.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    # Malformed objects: each must be skipped, logged and counted, never fatal.
    malformed: dict[str, list[str]] = {"node": [], "pod": []}
    bad_node = make_node(rng, n_nodes + 1, name="bad-node-gpu-lots", gpus=8)
    bad_node["status"]["allocatable"][GPU] = "lots"
    bad_node2 = make_node(rng, n_nodes + 2, name="bad-node-allocatable-list", gpus=4)
    bad_node2["status"]["allocatable"] = [{"name": GPU, "value": "4"}]
    for b in (bad_node, bad_node2):
        nodes.append(b)
        malformed["node"].append(b["metadata"]["name"])
    w = gpu_wl[0]
    bad_pods = []
    p = make_pod(rng, w, None, name="bad-pod-quantity")
    p["spec"]["containers"] = [dict(w.containers[0], resources={"requests": {"cpu": "1", GPU: "two"},
                                                                "limits": {GPU: "two"}})]
    bad_pods.append(p)
    p = make_pod(rng, w, gpu_nodes[0], name="bad-pod-bound-quantity")
    p["spec"]["containers"] = [dict(w.containers[0], resources={"requests": {GPU: "1.5.0"}, "limits": {GPU: "1.5.0"}})]
    bad_pods.append(p)
    p = make_pod(rng, w, None, name="bad-pod-priority")
    p["spec"]["priority"] = "high"
    bad_pods.append(p)
    p = make_pod(rng, w, None, name="bad-pod-requests-list")
    p["spec"]["containers"] = [dict(w.containers[0], resources={"requests": [GPU, "1"]})]
    bad_pods.append(p)
    for b in bad_pods:
        pods.append(b)
        malformed["pod"].append(f"{b['metadata']['namespace']}/{b['metadata']['name']}")
    # Shuffle so the malformed objects and managed pods are spread over the list pages
    # (the store serves lists in (namespace, name) order anyway).
    rng.shuffle(pods)
    expected = {"nodes": n_nodes + 1, "pods": len(bound_managed), "pending_pods": len(pending_managed),
                "skipped_node": len(malformed["node"]), "skipped_pod": len(malformed["pod"]),
                "gpus_used": used_gpus}
    return Cluster(nodes, pods, gpu_nodes, all_nodes, gpu_wl, cpu_wl, pending_managed, bound_managed, cpu_pods,
                   expected, malformed)


def json_size(objs: list[dict[str, Any]], sample: int = 2000) -> float:
    import orjson
    picked = objs[:: max(1, len(objs) // sample)]
    return sum(len(orjson.dumps(o)) for o in picked) / max(1, len(picked))


# ---------------------------------------------------------------------------------------------
# process helpers
# ---------------------------------------------------------------------------------------------

def proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:", "RssFile:", "Threads:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def mb(kb: float) -> float:
    return kb / 1024.0


class Extender:
    """``kube-extender serve --cluster kube`` as a subprocess (gunicorn master + one worker)."""

    def __init__(self, kubeconfig: str, tmp: Path) -> None:
        self.port = free_port()
        self.cmd = kube_extender_cmd() + ["serve", "--cluster", "kube", "--kubeconfig", kubeconfig,
                                          "--host", "127.0.0.1", "--port", str(self.port)]
        self.log_path = tmp / "extender.log"
        # gunicorn's control socket defaults to a shared path under $HOME; a private runtime dir keeps
        # this server from colliding with any other gunicorn on the machine.
        runtime = tmp / "run"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PYTHONUNBUFFERED": "1"}
        self._log = self.log_path.open("wb")
        self.started_wall = time.time()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.exit_code: int | None = None
        self._conn: http.client.HTTPConnection | None = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 3000) -> str:
        return self.log_text()[-n:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def worker(self) -> int | None:
        kids = descendants(self.proc.pid)
        return kids[0] if kids else None

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
        """GET over one persistent keep-alive connection (reconnects once on a broken one)."""
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self._conn.request("GET", path)
                r = self._conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # our own session: master + worker only
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.exit_code = self.proc.returncode
        self._log.close()


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value for the kube_extender_* samples."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("kube_extender_"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def metric_sum(m: dict[str, float], name: str, **labels: str) -> float:
    total = 0.0
    for key, value in m.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def log_times(text: str, started_wall: float) -> dict[str, float]:
    """Seconds after process start of the worker's milestones, from its logfmt lines."""
    out: dict[str, float] = {}

    def at(ts: str) -> float:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp() - started_wall

    for line in text.splitlines():
        m = re.match(r"ts=(\S+)Z level=\w+ logger=(\S+) msg=(\"[^\"]*\"|\S+)(.*)", line)
        if not m:
            continue
        ts, logger, msg, rest = m.groups()
        msg = msg.strip('"')
        if msg == "extender configured" and "configured" not in out:
            out["configured"] = at(ts)
        elif msg == "listed":
            kind = re.search(r"kind=(\w+)", rest)
            if kind and f"listed_{kind.group(1)}" not in out:
                out[f"listed_{kind.group(1)}"] = at(ts)
    return out


# ---------------------------------------------------------------------------------------------
# event stream and probes
# ---------------------------------------------------------------------------------------------

@dataclass
class StreamStats:
    ops: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    events: int = 0
    started: float = 0.0
    ended: float = 0.0
    behind_max: int = 0
    cpu_s: float = 0.0
    malformed_sent: dict[str, int] = field(default_factory=lambda: {"node": 0, "pod": 0})


class EventGenerator(threading.Thread):
    """``rate`` pod events per second for ``seconds``, paced in 10 ms batches."""

    MIX = (("create_managed", 0.15), ("bind", 0.15), ("patch", 0.30), ("delete_managed", 0.15),
           ("create_cpu", 0.125), ("delete_cpu", 0.125))

    def __init__(self, api: FakeApiServer, cluster: Cluster, rate: int, seconds: float, seed: int = SEED + 1) -> None:
        super().__init__(name="event-generator", daemon=True)
        self.api = api
        self.c = cluster
        self.rate = rate
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.stats = StreamStats()
        self.stop_flag = threading.Event()
        self.exc: BaseException | None = None
        names, weights = zip(*self.MIX)
        self._names = names
        self._cum = list(itertools.accumulate(weights))

    @staticmethod
    def _take(pool: list[tuple[str, str]], rng: random.Random) -> tuple[str, str] | None:
        if not pool:
            return None
        i = rng.randrange(len(pool))
        pool[i], pool[-1] = pool[-1], pool[i]
        return pool.pop()

    def _one(self, i: int) -> str:
        rng, c, api = self.rng, self.c, self.api
        op = self._names[min(len(self._names) - 1, bisect.bisect_left(self._cum, rng.random() * self._cum[-1]))]
        if op == "bind" and not c.pending_managed:
            op = "create_managed"
        if op == "delete_managed" and not c.bound_managed:
            op = "create_managed"
        if op == "delete_cpu" and not c.cpu_pods:
            op = "create_cpu"
        if op == "create_managed":
            pod = make_pod(rng, rng.choice(c.gpu_workloads), None, name=f"stream-gpu-{i}")
            api.create_many([pod], copy=False)
            c.pending_managed.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        elif op == "bind":
            key = self._take(c.pending_managed, rng)
            assert key is not None
            api.bind(key[0], key[1], rng.choice(c.gpu_nodes))
            c.bound_managed.append(key)
        elif op == "patch":
            pool = c.bound_managed if rng.random() < 1 / 3 and c.bound_managed else c.cpu_pods
            ns, name = pool[rng.randrange(len(pool))]
            api.store.patch(api.resource_type("pods"), ns, name, "application/merge-patch+json",
                            {"metadata": {"annotations": {"bench.example.com/touched": str(i)},
                                          "labels": {"bench-revision": str(i % 97)}}}, admit=False)
        elif op == "delete_managed":
            key = self._take(c.bound_managed, rng)
            assert key is not None
            api.delete("Pod", key[0], key[1])
        elif op == "create_cpu":
            w = rng.choice(c.cpu_workloads)
            pod = make_pod(rng, w, rng.choice(c.all_nodes), name=f"stream-cpu-{i}")
            api.create_many([pod], copy=False)
            c.cpu_pods.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        elif op == "delete_cpu":
            key = self._take(c.cpu_pods, rng)
            assert key is not None
            api.delete("Pod", key[0], key[1])
        return op

    def _malformed(self) -> None:
        """One malformed pod and one malformed node through the watch (plus a bad update of a node)."""
        w = self.c.gpu_workloads[0]
        pod = make_pod(self.rng, w, None, name="stream-bad-pod-quantity")
        pod["spec"]["containers"] = [dict(w.containers[0], resources={"requests": {GPU: "many"},
                                                                      "limits": {GPU: "many"}})]
        self.api.create_many([pod], copy=False)
        self.stats.malformed_sent["pod"] += 1
        node = make_node(self.rng, 99_999, name="stream-bad-node", gpus=8)
        node["status"]["allocatable"][GPU] = "lots"
        self.api.create_many([node], copy=False)
        self.stats.malformed_sent["node"] += 1

    def run(self) -> None:
        t_cpu = time.thread_time()
        try:
            s = self.stats
            total = int(self.rate * self.seconds)
            s.started = time.perf_counter()
            done = 0
            half_done = False
            while done < total and not self.stop_flag.is_set():
                elapsed = time.perf_counter() - s.started
                due = min(total, int(self.rate * elapsed) + 1)
                s.behind_max = max(s.behind_max, due - done)
                while done < due:
                    try:
                        op = self._one(done)
                        s.ops[op] = s.ops.get(op, 0) + 1
                        s.events += 1
                    except FakeApiError as exc:
                        key = f"{exc.code}"
                        s.errors[key] = s.errors.get(key, 0) + 1
                    done += 1
                if not half_done and done >= total // 2:
                    half_done = True
                    self._malformed()
                next_at = s.started + (done + max(1, self.rate // 100)) / self.rate
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(min(delay, 0.01))
            s.ended = time.perf_counter()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.exc = exc
            self.stats.ended = time.perf_counter()
        finally:
            self.stats.cpu_s = time.thread_time() - t_cpu


@dataclass
class ProbeStats:
    create_lag: list[float] = field(default_factory=list)
    bind_lag: list[float] = field(default_factory=list)
    series: list[tuple[float, float]] = field(default_factory=list)  # (write time, lag) of every probe
    timeouts: dict[str, int] = field(default_factory=lambda: {"create": 0, "bind": 0})
    req_pods_s: list[float] = field(default_factory=list)
    req_snapshot_s: list[float] = field(default_factory=list)
    events: int = 0
    cpu_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    interrupted: int = 0  # a probe still waiting when the stream ended (not counted as a timeout)


class _Interrupted(Exception):
    pass


class Prober(threading.Thread):
    """Every 1/hz s: create a managed probe pod (pending) and wait until the extender's
    /debug/pods knows it; bind it to probe-node and wait until /debug/snapshot?node=probe-node
    lists it; then delete it."""

    def __init__(self, api: FakeApiServer, ext: Extender, cluster: Cluster, hz: float, timeout: float = 30.0,
                 poll_pods: float = 0.002, poll_snapshot: float = 0.005) -> None:
        super().__init__(name="prober", daemon=True)
        self.api = api
        self.ext = ext
        self.c = cluster
        self.hz = hz
        self.timeout = timeout
        self.poll_pods = poll_pods
        self.poll_snapshot = poll_snapshot
        self.stats = ProbeStats()
        self.stop_flag = threading.Event()
        self.rng = random.Random(SEED + 2)
        self.n = 0
        self.conn: http.client.HTTPConnection | None = None

    def _get(self, path: str) -> tuple[int, bytes, float]:
        t = time.perf_counter()
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.ext.port, timeout=30)
            try:
                self.conn.request("GET", path)
                r = self.conn.getresponse()
                body = r.read()
                return r.status, body, time.perf_counter() - t
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _wait(self, check: Callable[[], bool], poll: float) -> float | None:
        """When ``check`` first held; None on timeout; raises _Interrupted when asked to stop."""
        deadline = time.perf_counter() + self.timeout
        while time.perf_counter() < deadline:
            if check():
                return time.perf_counter()
            if self.stop_flag.is_set():
                raise _Interrupted()
            time.sleep(poll)
        return None

    def probe_once(self) -> None:
        s = self.stats
        self.n += 1
        name = f"probe-{self.n}"
        pod = make_pod(self.rng, self.c.gpu_workloads[0], None, name=name, namespace=PROBE_NS)
        path = f"/debug/pods/{PROBE_NS}/{name}"

        def known() -> bool:
            code, _, dt = self._get(path)
            s.req_pods_s.append(dt)
            return code == 200

        t0 = time.perf_counter()
        self.api.create_many([pod], copy=False)
        s.events += 1
        try:
            seen = self._wait(known, self.poll_pods)
            if seen is None:
                s.timeouts["create"] += 1
            else:
                s.create_lag.append(seen - t0)
                s.series.append((t0, seen - t0))
            key = f'"pod":"{PROBE_NS}/{name}"'.encode()

            def bound() -> bool:
                code, body, dt = self._get(f"/debug/snapshot?node={PROBE_NODE}")
                s.req_snapshot_s.append(dt)
                return code == 200 and key in body.replace(b" ", b"")

            t1 = time.perf_counter()
            self.api.bind(PROBE_NS, name, PROBE_NODE)
            s.events += 1
            seen = self._wait(bound, self.poll_snapshot)
            if seen is None:
                s.timeouts["bind"] += 1
            else:
                s.bind_lag.append(seen - t1)
                s.series.append((t1, seen - t1))
        finally:
            self.api.delete("Pod", PROBE_NS, name)  # also when interrupted: leave nothing behind
            s.events += 1

    def run(self) -> None:
        t_cpu = time.thread_time()
        try:
            start = time.perf_counter()
            k = 0
            while not self.stop_flag.is_set():
                try:
                    self.probe_once()
                except _Interrupted:
                    self.stats.interrupted += 1
                    break
                except Exception as exc:  # noqa: BLE001 - keep probing, report at the end
                    self.stats.errors.append(f"{type(exc).__name__}: {exc}")
                    if len(self.stats.errors) > 20:
                        break
                k += 1
                next_at = start + k / self.hz
                now = time.perf_counter()
                if next_at < now:  # behind: skip missed slots rather than bunching probes
                    k = int((now - start) * self.hz)
                    next_at = start + k / self.hz
                self.stop_flag.wait(max(0.0, next_at - now))
        finally:
            self.stats.cpu_s = time.thread_time() - t_cpu
            if self.conn is not None:
                self.conn.close()


class RssSampler(threading.Thread):
    def __init__(self, ext: Extender, period: float = 0.25) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.ext = ext
        self.period = period
        self.samples: list[tuple[float, int, int]] = []  # (t since start, worker kB, total kB)
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(self.period):
            worker = self.ext.worker()
            w = proc_status(worker).get("VmRSS", 0) if worker else 0
            m = proc_status(self.ext.proc.pid).get("VmRSS", 0)
            self.samples.append((time.perf_counter() - self.ext.started, w, w + m))

    def peak(self, since: float = 0.0) -> tuple[int, int]:
        sel = [s for s in self.samples if s[0] >= since]
        return (max((s[1] for s in sel), default=0), max((s[2] for s in sel), default=0))


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def memory_line(ext: Extender) -> dict[str, int]:
    worker = ext.worker()
    w = proc_status(worker) if worker else {}
    m = proc_status(ext.proc.pid)
    return {"worker_rss": w.get("VmRSS", 0), "worker_hwm": w.get("VmHWM", 0), "worker_anon": w.get("RssAnon", 0),
            "master_rss": m.get("VmRSS", 0), "total_rss": w.get("VmRSS", 0) + m.get("VmRSS", 0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--managed", type=int, default=20_000, help="pods requesting example.com/gpu")
    ap.add_argument("--rate", type=int, default=1000, help="pod events per second")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the event stream")
    ap.add_argument("--quick", action="store_true", help="500 nodes / 15,000 pods / 2,000 managed / 10 s")
    ap.add_argument("--probe-hz", type=float, default=20.0, help="lag probes per second")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="give up waiting for /readyz after this")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (extender log)")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.pods, args.managed, args.seconds = 500, 15_000, 2_000, 10.0

    cpus = os.cpu_count() or 1
    load0 = os.getloadavg()[0]
    print(f"kube_sync benchmark: {args.nodes} nodes, {args.pods} pods ({args.managed} managed), "
          f"{args.rate} pod events/s for {args.seconds:g} s")
    print(f"python {sys.version.split()[0]}, {cpus} CPU(s); the fake API server and the event generator run in "
          f"this process and share the CPUs with the extender")

    t = time.perf_counter()
    cluster = generate_cluster(args.nodes, args.pods, args.managed)
    gen_s = time.perf_counter() - t
    pod_json = json_size(cluster.pods)
    node_json = json_size(cluster.nodes)
    mf = json_size([{"managedFields": p["metadata"]["managedFields"]} for p in cluster.pods[:2000]])
    print(f"generated in {gen_s:.1f} s: {len(cluster.nodes)} nodes (~{node_json / 1024:.1f} KB JSON each), "
          f"{len(cluster.pods)} pods (~{pod_json / 1024:.1f} KB JSON each, managedFields ~{mf / 1024:.1f} KB); "
          f"{len(cluster.bound_managed)} managed bound, {len(cluster.pending_managed)} managed pending, "
          f"{len(cluster.malformed['node'])} malformed nodes, {len(cluster.malformed['pod'])} malformed pods")

    api = FakeApiServer(history=max(10_000, int(args.rate * 30)))
    tmp = Path(tempfile.mkdtemp(prefix="kube-sync-bench-"))
    ext: Extender | None = None
    sampler: RssSampler | None = None
    gen: EventGenerator | None = None
    prober: Prober | None = None
    verdict_ok = True
    try:
        api.start()
        t = time.perf_counter()
        api.create_many([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                         for ns in sorted({p["metadata"]["namespace"] for p in cluster.pods} | {PROBE_NS, "default"})],
                        copy=False)
        api.create_many(cluster.nodes, copy=False)
        n_seeded = api.create_many(cluster.pods, copy=False)
        seed_s = time.perf_counter() - t
        cluster.pods.clear()  # the store owns them now
        cluster.nodes.clear()
        gc.collect()
        gc.freeze()  # the seeded store is long-lived: keep the collector from rescanning it
        bench_rss = proc_status(os.getpid()).get("VmRSS", 0)
        print(f"seeded the fake API server in {seed_s:.1f} s ({n_seeded} pods, resourceVersion "
              f"{api.resource_version}); benchmark process RSS {mb(bench_rss):.0f} MB")
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")

        # ---- phase 1: initial sync ---------------------------------------------------------
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        main_cpu0 = time.thread_time()
        ext = Extender(kubeconfig, tmp)
        sampler = RssSampler(ext)
        sampler.start()
        ready_s: float | None = None
        while True:
            if not ext.alive():
                raise RuntimeError(f"extender exited with {ext.proc.returncode} before ready; log tail:\n"
                                   f"{ext.log_tail()}")
            elapsed = time.perf_counter() - ext.started
            if elapsed > args.ready_timeout:
                raise RuntimeError(f"extender not ready after {args.ready_timeout:.0f} s; log tail:\n{ext.log_tail()}")
            try:
                code, _ = ext.get("/readyz", timeout=5)
                if code == 200:
                    ready_s = time.perf_counter() - ext.started
                    break
            except OSError:
                pass
            time.sleep(0.05)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        main_cpu1 = time.thread_time()
        worker = ext.worker()
        ext_cpu_ready = proc_cpu(worker) if worker else 0.0
        mem_ready = memory_line(ext)
        peak_sync = sampler.peak()
        milestones = log_times(ext.log_text(), ext.started_wall)
        _, mtext = ext.get("/metrics")
        m_ready = parse_metrics(mtext.decode())
        bench_sync_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        api_sync_cpu = bench_sync_cpu - (main_cpu1 - main_cpu0)

        # settle: RSS again after 2 s of idle (no events yet)
        time.sleep(2.0)
        mem_settled = memory_line(ext)

        # ---- phase 2: event stream ---------------------------------------------------------
        ru2 = resource.getrusage(resource.RUSAGE_SELF)
        main_cpu2 = time.thread_time()
        ext_cpu2 = proc_cpu(worker) if worker else 0.0
        stream_t0 = time.perf_counter() - ext.started
        gen = EventGenerator(api, cluster, args.rate, args.seconds)
        prober = Prober(api, ext, cluster, args.probe_hz)
        gen.start()
        prober.start()
        gen.join(args.seconds * 10 + 60)
        gen.stop_flag.set()
        prober.stop_flag.set()
        prober.join(60)
        # drain: a final probe shows the extender has caught up with everything written before it
        drain_t = time.perf_counter()
        final = Prober(api, ext, cluster, 1.0, timeout=120.0)
        final.n = 10**6
        final.probe_once()
        drain_s = time.perf_counter() - drain_t
        # ... and its own deletion: wait until the extender counted every pod event written
        # (the watch-event counter), so the figures below describe a fully caught-up extender
        written = gen.stats.events + prober.stats.events + final.stats.events + gen.stats.malformed_sent["pod"]
        base_events = metric_sum(m_ready, "kube_extender_watch_events_total", kind="pod")
        catch_up_deadline = time.perf_counter() + 60
        while time.perf_counter() < catch_up_deadline:
            _, mtext = ext.get("/metrics")
            if metric_sum(parse_metrics(mtext.decode()), "kube_extender_watch_events_total", kind="pod") \
                    - base_events >= written:
                break
            time.sleep(0.05)
        catch_up_s = time.perf_counter() - drain_t
        ru3 = resource.getrusage(resource.RUSAGE_SELF)
        main_cpu3 = time.thread_time()
        ext_cpu3 = proc_cpu(worker) if worker else 0.0
        stream_t1 = time.perf_counter() - ext.started
        mem_after = memory_line(ext)
        peak_stream = sampler.peak(stream_t0)
        _, mtext = ext.get("/metrics")
        m_after = parse_metrics(mtext.decode())
        sampler.stop_flag.set()
        bench_stream_cpu = (ru3.ru_utime + ru3.ru_stime) - (ru2.ru_utime + ru2.ru_stime)
        api_stream_cpu = bench_stream_cpu - (main_cpu3 - main_cpu2) - gen.stats.cpu_s - prober.stats.cpu_s \
            - final.stats.cpu_s

        # ---- report ------------------------------------------------------------------------
        g, p = gen.stats, prober.stats
        gen_wall = max(1e-9, g.ended - g.started)
        exp = cluster.expected
        print()
        print("=" * 100)
        print("INITIAL SYNC")
        print("=" * 100)
        rows: list[tuple[str, str, str]] = []
        rows.append(("time to ready (process start -> /readyz 200)", f"{ready_s:.1f} s",
                     f"target < {READY_TARGET_S:.0f} s: {'OK' if ready_s < READY_TARGET_S else 'MISSED'}"))
        if "configured" in milestones:
            rows.append(("  worker app configured (log)", f"{milestones['configured']:.1f} s", "gunicorn + imports"))
        for kind in ("node", "pod"):
            if f"listed_{kind}" in milestones:
                rows.append((f"  {kind}s listed (log)", f"{milestones[f'listed_{kind}']:.1f} s", ""))
        rows.append(("extender worker CPU until ready", f"{ext_cpu_ready:.1f} s", ""))
        rows.append(("benchmark process CPU meanwhile (fake API serving lists)", f"{api_sync_cpu:.1f} s",
                     f"{api_sync_cpu / ready_s * 100:.0f} % of one core"))
        rows.append(("worker RSS at ready", f"{mb(mem_ready['worker_rss']):.0f} MB",
                     f"master {mb(mem_ready['master_rss']):.0f} MB, total {mb(mem_ready['total_rss']):.0f} MB"))
        rows.append(("worker peak RSS during sync (VmHWM)", f"{mb(mem_ready['worker_hwm']):.0f} MB",
                     f"sampled peak total {mb(peak_sync[1]):.0f} MB"))
        rows.append(("worker RSS 2 s after ready", f"{mb(mem_settled['worker_rss']):.0f} MB",
                     f"total {mb(mem_settled['total_rss']):.0f} MB"))
        sk_node_r = metric_sum(m_ready, "kube_extender_skipped_objects_total", kind="node")
        sk_pod_r = metric_sum(m_ready, "kube_extender_skipped_objects_total", kind="pod")
        rows.append(("skipped malformed objects (nodes / pods)", f"{sk_node_r:.0f} / {sk_pod_r:.0f}",
                     f"seeded {exp['skipped_node']} / {exp['skipped_pod']}: "
                     f"{'OK' if (sk_node_r, sk_pod_r) == (exp['skipped_node'], exp['skipped_pod']) else 'MISMATCH'}"))
        sizes = {k: metric_sum(m_ready, f"kube_extender_cache_size_{k}") for k in ("nodes", "pods", "pending_pods")}
        ok_sizes = (sizes["nodes"], sizes["pods"], sizes["pending_pods"]) == \
            (exp["nodes"], exp["pods"], exp["pending_pods"])
        rows.append(("cache: nodes / bound pods / pending pods",
                     f"{sizes['nodes']:.0f} / {sizes['pods']:.0f} / {sizes['pending_pods']:.0f}",
                     f"expected {exp['nodes']} / {exp['pods']} / {exp['pending_pods']}: "
                     f"{'OK' if ok_sizes else 'MISMATCH'}"))
        print_table(rows)

        print()
        print("=" * 100)
        print(f"EVENT STREAM ({args.rate}/s requested for {args.seconds:g} s)")
        print("=" * 100)
        rows = []
        rows.append(("pod events written by the generator", f"{g.events}",
                     ", ".join(f"{k} {v}" for k, v in sorted(g.ops.items())) +
                     (f"; API errors {g.errors}" if g.errors else "")))
        rows.append(("achieved generator rate", f"{g.events / gen_wall:.0f} /s",
                     f"over {gen_wall:.1f} s; max backlog {g.behind_max} events"
                     + ("" if not gen.exc else f"; generator failed: {gen.exc!r}")))
        probes_total = len(p.create_lag) + p.timeouts["create"]
        rows.append(("probes (create + bind + delete = 3 events each)", f"{probes_total}",
                     f"{p.events} probe events, {probes_total / gen_wall:.1f} probes/s; timeouts {p.timeouts}"
                     + (f", {p.interrupted} cut short by the end of the stream" if p.interrupted else "")
                     + (f"; errors {p.errors[:3]}" if p.errors else "")))
        for label, lags in (("create lag (write -> /debug/pods 200)", p.create_lag),
                            ("bind lag (bind -> listed in /debug/snapshot?node=)", p.bind_lag),
                            ("all probes", p.create_lag + p.bind_lag)):
            if lags:
                rows.append((label, f"p50 {percentile(lags, 50) * 1000:.0f} ms",
                             f"p99 {percentile(lags, 99) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms, n={len(lags)}"))
        spikes = [(t - g.started, lag) for t, lag in sorted(p.series) if lag >= 0.1]
        groups: list[tuple[float, float]] = []  # (start, worst lag) of each burst of slow probes
        for t, lag in spikes:
            if groups and t - groups[-1][0] < 2.0:
                groups[-1] = (groups[-1][0], max(groups[-1][1], lag))
            else:
                groups.append((t, lag))
        rows.append(("probes with lag >= 100 ms", f"{len(spikes)}",
                     f"in {len(groups)} burst(s) at t = " + ", ".join(f"{t:.1f} s ({lag * 1000:.0f} ms)"
                                                                     for t, lag in groups[:12])
                     + (" ..." if len(groups) > 12 else "") if groups else "none"))
        rows.append(("poll request latency /debug/pods | /debug/snapshot?node=",
                     f"{statistics.median(p.req_pods_s) * 1000:.1f} | "
                     f"{statistics.median(p.req_snapshot_s) * 1000:.1f} ms"
                     if p.req_pods_s and p.req_snapshot_s else "-",
                     "median per request (polls every 2 ms | 5 ms)"))
        rows.append(("drain (final probe after the stream)", f"{drain_s * 1000:.0f} ms",
                     f"every written event counted by the extender {catch_up_s * 1000:.0f} ms after the stream; "
                     f"create {final.stats.create_lag and final.stats.create_lag[0] * 1000 or float('nan'):.0f} ms, "
                     f"bind {final.stats.bind_lag and final.stats.bind_lag[0] * 1000 or float('nan'):.0f} ms"))
        ev_pod = metric_sum(m_after, "kube_extender_watch_events_total", kind="pod") - \
            metric_sum(m_ready, "kube_extender_watch_events_total", kind="pod")
        ev_node = metric_sum(m_after, "kube_extender_watch_events_total", kind="node") - \
            metric_sum(m_ready, "kube_extender_watch_events_total", kind="node")
        rows.append(("watch events applied by the extender (pods / nodes)", f"{ev_pod:.0f} / {ev_node:.0f}",
                     f"pod events written {written} ({'all delivered' if ev_pod >= written else 'MISSING'}); "
                     f"node events written {g.malformed_sent['node']}"))
        by_type = {t: metric_sum(m_after, "kube_extender_watch_events_total", kind="pod", type=t)
                   for t in ("ADDED", "MODIFIED", "DELETED")}
        rows.append(("  by type (pods, whole run)", " / ".join(f"{v:.0f}" for v in by_type.values()),
                     "ADDED / MODIFIED / DELETED"))
        ext_stream_cpu = ext_cpu3 - ext_cpu2
        stream_wall = stream_t1 - stream_t0
        rows.append(("extender worker CPU during the stream", f"{ext_stream_cpu:.1f} s",
                     f"{ext_stream_cpu / stream_wall * 100:.0f} % of one core over {stream_wall:.1f} s"))
        rows.append(("benchmark process CPU during the stream", f"{bench_stream_cpu:.1f} s",
                     f"{bench_stream_cpu / stream_wall * 100:.0f} % of one core: generator thread (store writes) "
                     f"{g.cpu_s:.1f} s, prober {p.cpu_s + final.stats.cpu_s:.1f} s, fake API serving "
                     f"(HTTP/watch threads) {api_stream_cpu:.1f} s"))
        rows.append(("worker RSS after the stream", f"{mb(mem_after['worker_rss']):.0f} MB",
                     f"total {mb(mem_after['total_rss']):.0f} MB; sampled peak during stream worker "
                     f"{mb(peak_stream[0]):.0f} MB / total {mb(peak_stream[1]):.0f} MB; VmHWM "
                     f"{mb(mem_after['worker_hwm']):.0f} MB"))
        for name in ("kube_extender_watch_reconnects_total", "kube_extender_relists_total",
                     "kube_extender_skipped_objects_total"):
            rows.append((name.replace("kube_extender_", ""),
                         " / ".join(f"{metric_sum(m_after, name, kind=k):.0f}" for k in ("node", "pod")),
                         "node / pod (whole run)"))
        sk_node, sk_pod = (metric_sum(m_after, "kube_extender_skipped_objects_total", kind=k) for k in ("node", "pod"))
        exp_sk = (exp["skipped_node"] + g.malformed_sent["node"], exp["skipped_pod"] + g.malformed_sent["pod"])
        rows.append(("malformed objects skipped vs. sent (list + watch)", f"{sk_node:.0f} / {sk_pod:.0f}",
                     f"expected {exp_sk[0]} / {exp_sk[1]}: {'OK' if (sk_node, sk_pod) == exp_sk else 'MISMATCH'}"))
        sizes2 = {k: metric_sum(m_after, f"kube_extender_cache_size_{k}") for k in ("nodes", "pods", "pending_pods")}
        rows.append(("cache after: nodes / bound pods / pending pods",
                     f"{sizes2['nodes']:.0f} / {sizes2['pods']:.0f} / {sizes2['pending_pods']:.0f}",
                     f"expected {exp['nodes']} / {len(cluster.bound_managed)} / {len(cluster.pending_managed)}"))
        print_table(rows)
        warnings = re.findall(r"^.*level=(?:warning|error).*$", ext.log_text(), re.M)
        print(f"\nextender log: {len(warnings)} warning/error lines; first ones:")
        for line in warnings[:8]:
            print("   ", line[:220])

        print()
        print("=" * 100)
        print("VERDICT")
        print("=" * 100)
        peak_worker = max(mem_ready["worker_hwm"], mem_after["worker_hwm"])
        checks = [
            (f"ready in under {READY_TARGET_S:.0f} s", ready_s < READY_TARGET_S, f"{ready_s:.1f} s"),
            (f"worker resident memory <= {RSS_TARGET_MB:.0f} MB (after the stream)",
             mb(mem_after["worker_rss"]) <= RSS_TARGET_MB, f"{mb(mem_after['worker_rss']):.0f} MB"),
            (f"worker peak resident memory (VmHWM) <= {RSS_TARGET_MB:.0f} MB", mb(peak_worker) <= RSS_TARGET_MB,
             f"{mb(peak_worker):.0f} MB"),
            (f"master + worker resident memory <= {RSS_TARGET_MB:.0f} MB (after the stream)",
             mb(mem_after["total_rss"]) <= RSS_TARGET_MB, f"{mb(mem_after['total_rss']):.0f} MB"),
            ("malformed objects skipped and counted, never fatal", (sk_node, sk_pod) == exp_sk and ext.alive(),
             f"{sk_node:.0f} nodes / {sk_pod:.0f} pods skipped, extender alive"),
            ("initial cache contents as expected", ok_sizes, ""),
            ("every written pod event delivered", ev_pod >= written, f"{ev_pod:.0f} / {written}"),
            (f"event rate achieved (>= 95 % of {args.rate}/s)", g.events / gen_wall >= 0.95 * args.rate,
             f"{g.events / gen_wall:.0f}/s"),
        ]
        for what, ok, detail in checks:
            print(f"  [{'PASS' if ok else 'FAIL'}] {what}" + (f": {detail}" if detail else ""))
        verdict_ok = all(ok for _, ok, _ in checks[:6])
        print(f"\n  => {'targets met' if verdict_ok else 'TARGETS MISSED'}"
              f" ({cpus} CPUs shared: the fake API server, the generator and the prober ran in the benchmark "
              f"process; 1-min load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end: other work on "
              f"the machine makes the times noisy, memory figures are not affected)")
    except Exception as exc:  # noqa: BLE001
        print(f"\nbenchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if ext is not None:
            print(f"extender log tail:\n{ext.log_tail()}", file=sys.stderr)
        return 2
    finally:
        for th in (gen, prober):
            if th is not None:
                th.stop_flag.set()
        if sampler is not None:
            sampler.stop_flag.set()
        if ext is not None:
            ext.stop()
            print(f"extender stopped (exit code {ext.exit_code}); log: "
                  f"{ext.log_path if args.keep else '(removed; --keep to keep it)'}")
        api.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if verdict_ok else 1


def print_table(rows: list[tuple[str, str, str]]) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    for a, b, c in rows:
        print(f"  {a:<{w0}}  {b:>{w1}}  {c}")


if __name__ == "__main__":
    sys.exit(main())
