"""The Helm chart (charts/kube-extender) with the real helm binary.

* ``helm lint --strict`` and ``helm template`` for every ``ci/*-values.yaml``;
* every rendered manifest validated offline against the Kubernetes JSON schemas (kubernetes-validate,
  strict: unknown fields are errors) at the kube-scheduler version the chart deploys and at the newest
  version the package ships; the ServiceMonitor (a CRD) is checked by hand;
* consistency: the rendered extender configuration passes ``kube-extender config check``; the
  scheduler's ``extenders:`` entry (scheduler ConfigMap, NOTES) equals what
  ``kube-extender config scheduler --config <rendered config> --url <url>`` prints; verbs, managed
  resources, profiles, TLS files and the timeout budget agree; RBAC follows the features;
* what the values turn on in the extender, as it reads the rendered file: the Gang plugin and its
  args in every profile with ``features.gang`` (a profile's own Gang settings win), ``admission``
  with ``features.schedulingGates``, ``requeue``, the server's worker;
* impossible combinations fail with a clear message; the schema rejects typos;
* every value is documented (``# --``), typed in values.schema.json and listed in the chart README.

helm is taken from ``<repo>/.tools/helm`` (``make tools``) or PATH; without it these tests skip.
``python tests/chart/test_chart.py`` rewrites the values table of the chart README.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

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


def test_ci_values_cover_the_required_setups() -> None:
    assert SECOND and STANDALONE
    want = {"default", "second-scheduler", "tls-client-verification", "ha", "networkpolicy-servicemonitor",
            "binding-disabled", "gang-preemption", "gang-profiles", "admission-requeue", "nvidia", "quota"}
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


# ---- one source of truth ------------------------------------------------------------------------

@needs_helm
@ci
def test_rendered_extender_configuration_passes_config_check(values: str, tmp_path: Path) -> None:
    config = extender_config(rendered(values), values_of(values))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = cli("config", "check", str(path))
    assert code == 0, err
    assert ": ok" in out


@needs_helm
@ci
def test_notes_print_the_entry_of_kube_extender_config_scheduler(values: str, tmp_path: Path) -> None:
    """NOTES carry exactly the text `kube-extender config scheduler --config <rendered> --url <url>` prints."""
    v = values_of(values)
    config = extender_config(rendered(values), v)
    url = expected_url(v, config)
    assert config["extender"]["urlPrefix"] == url
    want = cli_entry_text(config, url, tmp_path)
    text = notes(values)
    if v["scheduler"]["enabled"]:  # the entry is shown for reference, under "extenders:"
        start = text.index("\nextenders:\n") + 1
        want = want.split("\n", 1)[1]
    else:
        start = text.index(ENTRY_HEADER)
    block = text[start:].split("\n\n", 1)[0] + "\n"
    assert block == want
    assert yaml.safe_load(block) == yaml.safe_load(want)
    # without --url the rendered configuration alone gives the same entry
    path = tmp_path / "config.yaml"
    code, out, _ = cli("config", "scheduler", "--config", str(path))
    assert code == 0 and out == cli_entry_text(config, url, tmp_path)


@needs_helm
@pytest.mark.parametrize("values", SECOND, ids=mode_ids(SECOND))
def test_scheduler_configuration_agrees_with_the_extender_configuration(values: str, tmp_path: Path) -> None:
    from extender.config.model import valid_extended_resource_name

    docs = rendered(values)
    v = values_of(values)
    config = extender_config(docs, v)
    sched = scheduler_config(docs, v)
    assert sched["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert sched["kind"] == "KubeSchedulerConfiguration"
    assert sched["podMaxBackoffSeconds"] == POD_MAX_BACKOFF_SECONDS, "the backoff `config scheduler --full` ships"

    # the extenders entry is the one the extender itself derives from its configuration
    (entry,) = sched["extenders"]
    url = expected_url(v, config)
    want = yaml.safe_load(cli_entry_text(config, url, tmp_path))["extenders"][0]
    assert entry == want
    # ... and text-identical to it (NOTES and the ConfigMap share one template)
    cm_text = one(docs, "ConfigMap", f"{fullname(v)}-scheduler")["data"]["scheduler-config.yaml"]
    assert cli_entry_text(config, url, tmp_path).split("\n", 1)[1] in cm_text

    # verbs: the ones the extender serves, bind only when it binds
    e = config["extender"]
    for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
        assert entry.get(key, "") == e[key]
    assert ("bindVerb" in entry) == v["features"]["binding"]
    assert entry["nodeCacheCapable"] is True
    # managed resources, with ignoredByScheduler
    assert entry["managedResources"] == [{"name": r["name"], "ignoredByScheduler": r["ignoredByScheduler"]}
                                         for r in config["managedResources"]]
    # the same timeout on both sides
    assert seconds(entry["httpTimeout"]) == seconds(e["httpTimeout"])
    # kube-scheduler's own validation (validateExtenders, buildExtenders)
    if entry.get("prioritizeVerb"):
        assert entry["weight"] > 0
    for r in entry["managedResources"]:
        assert valid_extended_resource_name(r["name"]) is None
    tls = entry.get("tlsConfig", {})
    assert not (tls.get("insecure") and tls.get("caFile"))
    # the URL reaches the sidecar: loopback, the port and prefix it serves, the scheme of its TLS
    parsed = urllib.parse.urlsplit(entry["urlPrefix"])
    assert parsed.hostname in ("127.0.0.1", "::1")
    assert parsed.port == config["server"]["port"]
    assert parsed.path == config["server"]["pathPrefix"]
    assert (parsed.scheme == "https") == ("tls" in config["server"]) == entry["enableHTTPS"]
    assert ("clientCAFile" in config["server"].get("tls", {})) <= ("certFile" in tls)

    # profiles: one kube-scheduler profile per extender profile, same names
    assert [p["schedulerName"] for p in sched["profiles"]] == [p["schedulerName"] for p in config["profiles"]]
    assert "default-scheduler" not in [p["schedulerName"] for p in sched["profiles"]]
    # leader election on, on a Lease the chart's Role lets it renew
    le = sched["leaderElection"]
    assert le["leaderElect"] is True and le["resourceLock"] == "leases"
    assert le["resourceNamespace"] == NAMESPACE
    role = one(docs, "Role", f"{fullname(v)}-scheduler-lease")
    assert any(le["resourceName"] in r.get("resourceNames", []) and "update" in r["verbs"] for r in role["rules"])

    # the kube-scheduler container reads this file and every file tlsConfig names is mounted
    ks = container(docs, "kube-scheduler")
    assert "--config=/etc/kubernetes/scheduler-config.yaml" in ks["args"]
    mounts = {m["mountPath"]: m for m in ks["volumeMounts"]}
    assert mounts["/etc/kubernetes/scheduler-config.yaml"]["subPath"] == "scheduler-config.yaml"
    volumes = {vol["name"]: vol for vol in pod_spec(docs)["volumes"]}
    for key in ("caFile", "certFile", "keyFile"):
        if key in tls:
            directory, name = tls[key].rsplit("/", 1)
            mount = mounts[directory]
            items = {i["path"] for i in volumes[mount["name"]]["secret"]["items"]}
            assert name in items, (key, tls[key])
    # the extender listens where kube-scheduler calls
    assert config["server"]["host"] == v["scheduler"]["extenderListenAddress"]
    assert pod_spec(docs)["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


@needs_helm
@ci
def test_timeout_budget(values: str) -> None:
    """Permit waits fit inside httpTimeout minus the bind margin; both sides use one httpTimeout."""
    v = values_of(values)
    config = extender_config(rendered(values), v)
    timeout = seconds(config["extender"]["httpTimeout"])
    budget = timeout - min(BIND_MARGIN, timeout * 0.5)
    if v["features"]["gang"]:
        assert seconds(v["gang"]["permitTimeout"]) < budget
        for profile in config["profiles"]:  # gang.* or the profile's own args
            args = (gang_config(profile) or {}).get("args") or {}
            assert seconds(args.get("permitTimeout", "3s")) < budget, profile["schedulerName"]
    if v["scheduler"]["enabled"]:
        (entry,) = scheduler_config(rendered(values), v)["extenders"]
        assert seconds(entry["httpTimeout"]) == timeout


@needs_helm
@pytest.mark.parametrize("values", STANDALONE, ids=mode_ids(STANDALONE))
def test_standalone_url_reaches_the_service(values: str) -> None:
    v = values_of(values)
    docs = rendered(values)
    config = extender_config(docs, v)
    assert config["server"]["host"] == "0.0.0.0"
    service = one(docs, "Service")
    (port,) = service["spec"]["ports"]
    url = urllib.parse.urlsplit(config["extender"]["urlPrefix"])
    assert url.port == port["port"]
    if v["service"]["clusterIP"]:
        assert service["spec"]["clusterIP"] == url.hostname
    else:
        assert url.hostname == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    (cport,) = [p for p in container(docs, "kube-extender")["ports"] if p["name"] == port["targetPort"]]
    assert cport["containerPort"] == config["server"]["port"]
    assert service["spec"]["selector"].items() <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()


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


# ---- what the values turn on in the extender --------------------------------------------------------

def given_profiles(v: dict[str, Any]) -> list[dict[str, Any]]:
    """config.profiles as the user wrote them, with the mode's default schedulerName filled in."""
    default = "kube-extender" if v["scheduler"]["enabled"] else "default-scheduler"
    return [{**p, "schedulerName": p.get("schedulerName") or default} for p in v["config"]["profiles"]]


def names_gang(plugins: dict[str, Any] | None) -> bool:
    """The profile's plugins name Gang in an enabled or disabled list: the user decided."""
    for point in (plugins or {}).values():
        point = point or {}
        if any(ref.get("name") == "Gang" for ref in point.get("enabled") or []):
            return True
        if any((ref.get("name") if isinstance(ref, dict) else ref) == "Gang" for ref in point.get("disabled") or []):
            return True
    return False


def gang_config(profile: dict[str, Any]) -> dict[str, Any] | None:
    found = [pc for pc in profile.get("pluginConfig") or [] if pc["name"] == "Gang"]
    assert len(found) <= 1, found
    return found[0] if found else None


def effective(config: dict[str, Any], tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """What kube-extender makes of a rendered configuration: the parsed model and `/debug/config`
    (plugins per extension point) of an app built from it."""
    from extender.app import create_app
    from extender.cluster.memory import MemoryCluster
    from extender.config.model import load_config

    path = tmp_path / "effective.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    parsed = load_config(path)
    app = create_app(parsed, source=MemoryCluster(), background=False)
    response = app.test_client().get("/debug/config")
    assert response.status_code == 200
    return parsed, response.get_json()


@needs_helm
@ci
def test_features_gang_puts_the_gang_plugin_and_its_args_in_every_profile(values: str, tmp_path: Path) -> None:
    from policies.gang.args import GangArgsSchema

    v = values_of(values)
    config = extender_config(rendered(values), v)
    given = given_profiles(v)
    assert [p["schedulerName"] for p in config["profiles"]] == [p["schedulerName"] for p in given]
    parsed, described = effective(config, tmp_path)
    points = {p["schedulerName"]: p["extensionPoints"] for p in described["profiles"]}
    g = v["gang"]
    chart_args = {"permitTimeout": g["permitTimeout"], "backoff": g["backoff"], "reservationTimeout": g["reservationTimeout"]}
    for mine, theirs, spec in zip(config["profiles"], given, parsed.profiles):
        name = mine["schedulerName"]
        plugins = theirs.get("plugins") or {}
        others = [pc for pc in theirs.get("pluginConfig") or [] if pc["name"] != "Gang"]
        if not v["features"]["gang"]:  # the profile as written
            assert mine.get("plugins", {}) == plugins and mine.get("pluginConfig", []) == (theirs.get("pluginConfig") or [])
            assert "Gang" not in points[name]["permit"]
            continue
        # Gang at multiPoint, after the profile's own multiPoint plugins, unless the profile names it
        if names_gang(plugins):
            assert mine["plugins"] == plugins
        else:
            multi = plugins.get("multiPoint") or {}
            assert mine["plugins"] == {**plugins, "multiPoint": {**multi, "enabled": [*(multi.get("enabled") or []),
                                                                                        {"name": "Gang"}]}}
            for point in ("preEnqueue", "preFilter", "reserve", "permit"):
                assert "Gang" in points[name][point], (name, point)
        # args: the profile's own pluginConfig for Gang wins whole; else gang.*; other entries untouched
        own = gang_config(theirs)
        assert gang_config(mine) == (own or {"name": "Gang", "args": chart_args})
        assert [pc for pc in mine["pluginConfig"] if pc["name"] != "Gang"] == others
        # ... and they reach the plugin as the durations the values say
        args = GangArgsSchema().load(dict(spec.plugin_args["Gang"]))
        want = (own or {"args": chart_args})["args"]
        assert args.permit_timeout == seconds(want.get("permitTimeout", "3s"))
        assert args.backoff == seconds(want.get("backoff", "10s"))
        assert args.reservation_timeout == seconds(want.get("reservationTimeout", "15s"))


@needs_helm
def test_nvidia_values_render_the_documented_gpu_configuration(tmp_path: Path) -> None:
    """ci/nvidia-values.yaml is docs/examples/nvidia-extender.yaml as chart values: the rendered
    configuration manages the same resources with the same profile, kube-scheduler is told to
    count nvidia.com/gpu itself, DeviceShare and ManagedPreemption run, and the extender may evict."""
    values = str(CHART / "ci" / "nvidia-values.yaml")
    v = values_of(values)
    docs = rendered(values)
    config = extender_config(docs, v)
    example = yaml.safe_load((REPO / "docs" / "examples" / "nvidia-extender.yaml").read_text())
    assert config["managedResources"] == example["managedResources"]
    (profile,) = config["profiles"]
    assert {k: profile[k] for k in ("schedulerName", "plugins", "pluginConfig")} == example["profiles"][0]
    _, described = effective(config, tmp_path)
    points = described["profiles"][0]["extensionPoints"]
    assert points["filter"] == ["DeviceShare"] and points["postFilter"] == ["ManagedPreemption"]
    assert "NodeResources" not in points["score"][0]["name"]
    text = notes(values)
    entry = yaml.safe_load(text[text.index(ENTRY_HEADER):].split("\n\n", 1)[0])["extenders"][0]
    assert entry["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False},
                                         {"name": "kube-extender.io/gpu-memory", "ignoredByScheduler": True},
                                         {"name": "kube-extender.io/gpu-compute", "ignoredByScheduler": True}]
    rules = one(docs, "ClusterRole", fullname(v))["rules"]
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rules


@needs_helm
def test_a_profiles_own_gang_settings_win() -> None:
    values = str(CHART / "ci" / "gang-profiles-values.yaml")
    config = extender_config(rendered(values), values_of(values))
    profiles = {p["schedulerName"]: p for p in config["profiles"]}
    assert profiles["gpu"]["plugins"]["multiPoint"]["enabled"] == [{"name": "NodeResources"}, {"name": "Gang"}]
    assert gang_config(profiles["gpu"]) == {"name": "Gang", "args": {"permitTimeout": "2500ms", "backoff": "30s",
                                                                      "reservationTimeout": "1m"}}
    assert gang_config(profiles["gpu-tight"]) == {"name": "Gang", "args": {"permitTimeout": "1s", "backoff": "5s"}}
    assert "multiPoint" in profiles["gpu-tight"]["plugins"]
    assert profiles["gpu-no-gang"]["plugins"] == {"permit": {"disabled": ["Gang"]}}


@needs_helm
@ci
def test_admission_requeue_and_server_worker_follow_the_values(values: str, tmp_path: Path) -> None:
    v = values_of(values)
    docs = rendered(values)
    config = extender_config(docs, v)
    c = v["config"]
    gates = v["features"]["schedulingGates"]
    assert config["admission"] == {"enabled": gates, **c["admission"]}
    assert config["requeue"] == {**c["requeue"], "qps": config["requeue"]["qps"]}
    assert float(config["requeue"]["qps"]) == float(c["requeue"]["qps"])
    for key in ("worker", "connections", "threads"):
        assert config["server"][key] == c["server"][key]
    parsed, _ = effective(config, tmp_path)  # as kube-extender reads them
    a = parsed.admission
    assert (a.enabled, a.gate, a.strategy) == (gates, c["admission"]["gate"], c["admission"]["strategy"])
    assert (a.interval, a.resync) == (seconds(c["admission"]["interval"]), seconds(c["admission"]["resync"]))
    r = parsed.requeue
    assert (r.nudge, r.qps, r.min_interval) == (c["requeue"]["nudge"], float(c["requeue"]["qps"]),
                                                seconds(c["requeue"]["minInterval"]))
    assert (parsed.server.worker, parsed.server.connections) == (c["server"]["worker"], c["server"]["connections"])
    # lifting gates and nudging are pod patches: the ClusterRole has them whenever they are on
    (pods,) = [r for r in one(docs, "ClusterRole", fullname(v))["rules"] if r["resources"] == ["pods"]]
    if a.enabled or r.nudge:
        assert "patch" in pods["verbs"]


@needs_helm
def test_nudge_qps_given_with_set_is_rendered_as_a_number() -> None:
    """`--set config.requeue.qps=2.5` passes a string (helm parses only integers); the extender gets 2.5."""
    run = template(None, "--set", "config.requeue.qps=2.5")
    assert run.returncode == 0, run.stderr
    docs = tuple(d for d in yaml.safe_load_all(run.stdout) if d)
    assert extender_config(docs, values_of(str(CHART / "ci" / "default-values.yaml")))["requeue"]["qps"] == 2.5


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


# ---- RBAC ----------------------------------------------------------------------------------------

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


# ---- the pods -------------------------------------------------------------------------------------

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


# ---- impossible combinations ------------------------------------------------------------------------

NEGATIVE: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = [
    ("replicas-without-leader-election", {"replicaCount": 2, "config": {"leaderElection": {"enabled": False}}}, (),
     "replicaCount=2 needs config.leaderElection.enabled=true"),
    ("replicas-in-second-scheduler-mode", {"replicaCount": 2, "scheduler": {"enabled": True},
                                           "config": {"profiles": [{"schedulerName": "s"}]}}, (),
     "not possible in second-scheduler mode"),
    ("gang-permit-at-budget", {"features": {"gang": True}, "gang": {"permitTimeout": "4s"}}, (),
     "gang.permitTimeout (4s) must be below the Permit budget of 4s"),
    ("gang-permit-above-timeout", {"features": {"gang": True}, "gang": {"permitTimeout": "3s"},
                                   "config": {"extender": {"httpTimeout": "1500ms"}}}, (),
     "must be below the Permit budget of 0.75s"),
    ("gang-without-binding", {"features": {"gang": True, "binding": False}}, (),
     "features.gang=true needs features.binding=true"),
    ("gang-with-ignorable", {"features": {"gang": True}, "config": {"extender": {"ignorable": True}}}, (),
     "features.gang=true needs config.extender.ignorable=false"),
    ("gang-backoff-zero", {"features": {"gang": True}, "gang": {"backoff": "0s"}}, (),
     "gang.backoff (0s) must be positive"),
    ("gang-profile-permit-at-budget", {"features": {"gang": True},
                                       "config": {"profiles": [{"schedulerName": "", "pluginConfig": [
                                           {"name": "Gang", "args": {"permitTimeout": "4s"}}]}]}}, (),
     "config.profiles[0].pluginConfig Gang args.permitTimeout (4s) must be below the Permit budget of 4s"),
    ("gang-profile-permit-in-seconds", {"features": {"gang": True},
                                        "config": {"profiles": [{"schedulerName": "", "pluginConfig": [
                                            {"name": "Gang", "args": {"permitTimeout": 5}}]}]}}, (),
     "args.permitTimeout (5) must be below the Permit budget of 4s"),
    ("nudge-qps-too-low", {"config": {"requeue": {"qps": "0.05"}}}, (),
     "config.requeue.qps (0.05) must be between 0.1 and 1000"),
    ("admission-interval-zero", {"config": {"admission": {"interval": "0s"}}}, (),
     "config.admission.interval (0s) must be positive"),
    ("gates-without-rbac", {"rbac": {"create": False}, "features": {"binding": False, "schedulingGates": True}}, (),
     "patch pods to lift scheduling gates (features.schedulingGates)"),
    ("nudge-without-rbac", {"rbac": {"create": False}, "features": {"binding": False},
                            "config": {"requeue": {"nudge": True}}}, (),
     "patch pods to nudge them (config.requeue.nudge)"),
    ("binding-without-rbac", {"rbac": {"create": False}}, (),
     "create pods/binding and patch pods (features.binding)"),
    ("binding-without-bind-verb", {"config": {"extender": {"bindVerb": ""}}}, (),
     "features.binding=true needs config.extender.bindVerb"),
    ("client-verification-without-ca", {"tls": {"enabled": True, "secretName": "t", "scheduler": {"caFile": "/ca"},
                                                "clientVerification": {"enabled": True}}}, (),
     "needs tls.clientVerification.caSecretName"),
    ("client-verification-without-client-cert", {"tls": {"enabled": True, "secretName": "t", "scheduler": {"caFile": "/ca"},
                                                         "clientVerification": {"enabled": True, "caSecretName": "c"}}}, (),
     "needs tls.scheduler.clientSecretName"),
    ("client-verification-without-tls", {"tls": {"clientVerification": {"enabled": True, "caSecretName": "c"}}}, (),
     "needs tls.enabled=true"),
    ("tls-without-secret", {"tls": {"enabled": True}}, (), "tls.enabled=true needs tls.secretName"),
    ("tls-without-verification", {"tls": {"enabled": True, "secretName": "t"}}, (),
     "say how kube-scheduler verifies the extender's certificate"),
    ("tls-insecure-with-ca", {"tls": {"enabled": True, "secretName": "t",
                                      "scheduler": {"caFile": "/ca", "insecure": True}}}, (),
     "kube-scheduler refuses to start with both"),
    ("url-scheme-against-tls", {"config": {"extender": {"urlPrefix": "https://x.example:8888/scheduler"}}}, (),
     "must start with http:// when tls.enabled=false"),
    ("second-scheduler-named-default", {"scheduler": {"enabled": True},
                                        "config": {"profiles": [{"schedulerName": "default-scheduler"}]}}, (),
     "two schedulers would take the same pods"),
    ("scheduler-newer-than-cluster", {"scheduler": {"enabled": True}}, ("--kube-version", "1.31.0"),
     "scheduler.image.tag v1.34.1 is newer than the cluster"),
    ("servicemonitor-on-loopback-sidecar", {"scheduler": {"enabled": True}, "serviceMonitor": {"enabled": True}}, (),
     "Prometheus cannot reach /metrics"),
    ("networkpolicy-without-scheduler-peers", {"networkPolicy": {"enabled": True}}, (),
     "needs networkPolicy.schedulerFrom"),
    ("rollout-that-never-ends", {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}, (),
     "would never finish a rollout"),
    ("pdb-blocking-every-eviction", {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": ""}}, (),
     "forbids every eviction"),
    ("lease-timings-out-of-order", {"config": {"leaderElection": {"renewDeadline": "20s"}}}, (),
     "0 < retryPeriod (2s) < renewDeadline (20s) < leaseDuration (15s)"),
    ("duplicate-profiles", {"config": {"profiles": [{"schedulerName": ""}, {"schedulerName": "default-scheduler"}]}}, (),
     "appears twice"),
]


@needs_helm
@pytest.mark.parametrize("values, extra, message", [c[1:] for c in NEGATIVE], ids=[c[0] for c in NEGATIVE])
def test_impossible_combinations_fail_with_a_clear_message(values: dict[str, Any], extra: tuple[str, ...],
                                                           message: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run = template(str(path), *extra)
    assert run.returncode != 0, f"rendered although it should fail: {values}"
    assert message in run.stderr, run.stderr


SCHEMA_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-key", {"config": {"extender": {"timeout": "5s"}}}, "additional properties 'timeout' not allowed"),
    ("bad-log-level", {"config": {"server": {"logLevel": "verbose"}}}, "/config/server/logLevel"),
    ("bad-duration", {"config": {"extender": {"httpTimeout": "5 seconds"}}}, "/config/extender/httpTimeout"),
    ("bad-resource-name", {"config": {"managedResources": [{"name": "gpu"}]}}, "/config/managedResources/0/name"),
    ("weight-out-of-range", {"config": {"extender": {"weight": 0}}}, "/config/extender/weight"),
    ("bad-listen-address", {"scheduler": {"extenderListenAddress": "10.0.0.1"}}, "/scheduler/extenderListenAddress"),
    ("features-typo", {"features": {"bind": True}}, "additional properties 'bind' not allowed"),
    ("gang-duration-the-plugin-cannot-read", {"gang": {"backoff": "1m30s"}}, "/gang/backoff"),
    ("bad-admission-strategy", {"config": {"admission": {"strategy": "FIFO"}}}, "/config/admission/strategy"),
    ("bad-admission-gate", {"config": {"admission": {"gate": "not a gate"}}}, "/config/admission/gate"),
    ("admission-enabled-is-a-feature", {"config": {"admission": {"enabled": True}}},
     "additional properties 'enabled' not allowed"),
    ("bad-worker", {"config": {"server": {"worker": "sync"}}}, "/config/server/worker"),
    ("connections-out-of-range", {"config": {"server": {"connections": 5}}}, "/config/server/connections"),
    ("nudge-qps-zero", {"config": {"requeue": {"qps": 0}}}, "/config/requeue/qps"),
    ("requeue-typo", {"config": {"requeue": {"nudges": True}}}, "additional properties 'nudges' not allowed"),
]


@needs_helm
@pytest.mark.parametrize("values, message", [c[1:] for c in SCHEMA_ERRORS], ids=[c[0] for c in SCHEMA_ERRORS])
def test_schema_rejects_bad_values(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run = template(str(path))
    assert run.returncode != 0
    assert message in run.stderr, run.stderr


# ---- documentation --------------------------------------------------------------------------------

def value_lines() -> list[tuple[str, int, bool]]:
    """(dotted key, line index, is a leaf) for every key of values.yaml, from its text."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    out: list[tuple[str, int, bool]] = []
    stack: list[tuple[int, str]] = []
    key_re = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9]*):(.*)$")
    for n, line in enumerate(lines):
        m = key_re.match(line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        following = [x for x in lines[n + 1:] if x.strip() and not x.strip().startswith("#")][:1]
        leaf = bool(rest) or not following or len(following[0]) - len(following[0].lstrip()) <= indent
        out.append((path, n, leaf))
        stack.append((indent, key))
    return out


def documented_values() -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every `# --` documented value, in file order."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    data = yaml.safe_load("\n".join(lines))
    rows = []
    for path, n, _leaf in value_lines():
        comment = lines[n - 1].strip() if n else ""
        if not comment.startswith("# --"):
            continue
        value: Any = data
        for part in path.split("."):
            value = value[part]
        kind = {bool: "bool", int: "int", str: "string", list: "list", dict: "object"}.get(type(value), "")
        default = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else f'"{value}"'
        rows.append((path, kind, default, comment.removeprefix("# --").strip()))
    return rows


def values_table() -> str:
    head = "| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n"
    rows = []
    for key, kind, default, desc in documented_values():
        cells = [f"`{key}`", kind, f"`{default}`", desc]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
    return head + "".join(rows)


def test_every_value_is_documented() -> None:
    """helm-docs style: every leaf value has a `# --` comment right above it (values under a
    documented free-form object, like resources, are part of that object's default)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented = {p for p, n, _ in value_lines() if n and lines[n - 1].strip().startswith("# --")}
    missing = [p for p, _, leaf in value_lines() if leaf and not any(p == d or p.startswith(d + ".") for d in documented)]
    assert not missing, f"values without a `# --` comment: {missing}"


def test_schema_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        return schema["definitions"][ref.rsplit("/", 1)[1]] if ref else node

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        node = resolve(node)
        assert "type" in node, f"{path}: no type in the schema"
        if isinstance(value, dict) and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: typos would pass"
            for key, sub in value.items():
                assert key in node["properties"], f"{path}.{key} is not in values.schema.json"
                walk(sub, node["properties"][key], f"{path}.{key}")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "")


def test_chart_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    begin, end = "<!-- values:begin -->\n", "<!-- values:end -->"
    assert begin in readme and end in readme
    current = readme.split(begin, 1)[1].split(end, 1)[0]
    assert current == values_table(), "the values table is stale: run `python tests/chart/test_chart.py`"


# ---- the exec probe against a real kube-extender ------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


if __name__ == "__main__":  # rewrite the values table of the chart README
    readme_path = CHART / "README.md"
    text = readme_path.read_text()
    head, rest = text.split("<!-- values:begin -->\n", 1)
    _, tail = rest.split("<!-- values:end -->", 1)
    readme_path.write_text(f"{head}<!-- values:begin -->\n{values_table()}<!-- values:end -->{tail}")
    print(f"wrote {readme_path}")
