"""The pods: hardened, probed (the exec probe, with mTLS, tried against a real kube-extender), restarted
when their configuration changes, and reachable only where the NetworkPolicy says.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from chart_kit import CHART, ci, container, extender_config, fullname, needs_helm, one, pod_spec, rendered, values_of
from http_calls import free_port


def probe_target(probe: dict[str, Any]) -> str:
    if "httpGet" in probe:
        return str(probe["httpGet"]["path"])
    return urllib.parse.urlsplit(probe["exec"]["command"][3]).path


@needs_helm
@ci
def test_pods_are_hardened_probed_and_restarted_on_config_changes(values: str) -> None:
    v = values_of(values)
    docs = rendered(values)
    spec = pod_spec(docs)
    assert spec["securityContext"]["runAsNonRoot"] is True
    config_cm = one(docs, "ConfigMap", fullname(v))
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    data = config_cm["data"]["config.yaml"]
    assert annotations["checksum/config"] == hashlib.sha256(data.removesuffix("\n").encode()).hexdigest()
    if v["scheduler"]["enabled"]:
        sdata = one(docs, "ConfigMap", f"{fullname(v)}-scheduler")["data"]["scheduler-config.yaml"]
        assert annotations["checksum/scheduler-config"] == hashlib.sha256(sdata.removesuffix("\n").encode()).hexdigest()
    names = [c["name"] for c in spec["containers"]]
    assert names == (["kube-extender", "kube-scheduler"] if v["scheduler"]["enabled"] else ["kube-extender"])
    volumes = {vol["name"]: vol for vol in spec["volumes"]}
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert tmp and "emptyDir" in volumes[tmp[0]["name"]]
        assert probe_target(c["livenessProbe"]) in ("/healthz", "/livez")
        assert probe_target(c["readinessProbe"]) == "/readyz"
    ext = container(docs, "kube-extender")
    assert ext["args"] == ["serve", "--cluster", "kube", "--config", "/etc/kube-extender/config.yaml"]
    config = extender_config(docs, v)
    exposed = v["scheduler"]["extenderListenAddress"] not in ("127.0.0.1", "::1") or not v["scheduler"]["enabled"]
    kubelet_can_probe = exposed and not v["tls"]["clientVerification"]["enabled"]
    assert ("httpGet" in ext["readinessProbe"]) == kubelet_can_probe
    if not kubelet_can_probe:  # exec: loopback URL on the configured port and scheme
        url = urllib.parse.urlsplit(ext["readinessProbe"]["exec"]["command"][3])
        assert url.port == config["server"]["port"]
        assert url.scheme == ("https" if "tls" in config["server"] else "http")
    # every file the extender configuration names is mounted into the extender container
    mounts = {m["mountPath"]: m for m in ext["volumeMounts"]}
    for path in list(config["server"].get("tls", {}).values()) + ["/etc/kube-extender/config.yaml"]:
        directory, name = path.rsplit("/", 1)
        source = volumes[mounts[directory]["name"]]
        keys = {i["path"] for i in source["secret"]["items"]} if "secret" in source else {"config.yaml"}
        assert name in keys, path
    # a rollout never waits for standbys that cannot turn Ready
    strategy = one(docs, "Deployment")["spec"]["strategy"]
    if config["leaderElection"]["enabled"] and strategy["type"] == "RollingUpdate":
        assert strategy["rollingUpdate"]["maxUnavailable"] in ("100%", v["replicaCount"])


@needs_helm
@ci
def test_network_policy_opens_only_the_extender_port_to_the_configured_peers(values: str) -> None:
    v = values_of(values)
    docs = rendered(values)
    if not v["networkPolicy"]["enabled"]:
        assert not [d for d in docs if d["kind"] == "NetworkPolicy"]
        return
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress"] + (["Egress"] if v["networkPolicy"]["egress"] else [])
    port_names = {p["name"] for p in container(docs, "kube-extender").get("ports", [])}
    peers = []
    for rule in policy["ingress"]:
        assert [p["port"] for p in rule["ports"]] == [next(iter(port_names))]
        peers.append(rule["from"])
    want = []
    if not v["scheduler"]["enabled"]:
        want.append(v["networkPolicy"]["schedulerFrom"])
    if port_names and v["networkPolicy"]["metricsFrom"]:
        want.append(v["networkPolicy"]["metricsFrom"])
    assert peers == want


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("chart-pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=test-ca", cwd=d)
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n" if name == "server"
                                       else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", str(d / f"{name}.ext"), cwd=d)
    return d


@contextlib.contextmanager
def serving(config: dict[str, Any], tmp: Path) -> Iterator[int]:
    """`kube-extender serve` on the demo cluster with (a localised copy of) a rendered configuration."""
    port = free_port()
    config = copy.deepcopy(config)
    config["server"].update(host="127.0.0.1", port=port)
    config["leaderElection"]["enabled"] = False  # no API server here
    path = tmp / "served.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([str(Path(sys.executable).parent / "kube-extender"), "serve", "--config", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(150):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "server died")
            time.sleep(0.1)
        time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
@needs_helm
def test_exec_probe_passes_only_with_the_client_certificate(pki: Path, tmp_path: Path) -> None:
    """The rendered exec probe (mTLS) against a real server using the rendered configuration's TLS."""
    values = str(CHART / "ci" / "tls-client-verification-values.yaml")
    docs = rendered(values)
    config = extender_config(docs, values_of(values))
    tls = config["server"]["tls"]
    files = {tls["certFile"]: pki / "server.crt", tls["keyFile"]: pki / "server.key", tls["clientCAFile"]: pki / "ca.crt"}
    config["server"]["tls"] = {k: str(files[p]) for k, p in tls.items()}
    probe = container(docs, "kube-extender")["readinessProbe"]["exec"]["command"]
    assert probe[0] == "python3"
    with serving(config, tmp_path) as port:
        url = probe[3].replace(f":{config['server']['port']}/", f":{port}/")
        base = [sys.executable, *probe[1:3], url]
        ok = subprocess.run(base + [str(pki / "client.crt"), str(pki / "client.key")], capture_output=True, timeout=30)
        assert ok.returncode == 0, ok.stderr
        refused = subprocess.run(base, capture_output=True, timeout=30)
        assert refused.returncode != 0
