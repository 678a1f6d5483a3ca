"""One source of truth: the rendered extender configuration passes ``kube-extender config check``;
the scheduler's ``extenders:`` entry (scheduler ConfigMap, NOTES) equals what
``kube-extender config scheduler --config <rendered config> --url <url>`` prints; verbs, managed
resources, profiles, TLS files and the timeout budget agree; the URL reaches the extender.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import yaml
from chart_kit import (
    BIND_MARGIN, ENTRY_HEADER, NAMESPACE, SECOND, STANDALONE, ci, cli, cli_entry_text, container,
    expected_url, extender_config, fullname, gang_config, mode_ids, needs_helm, notes, one, pod_spec,
    rendered, scheduler_config, seconds, template, values_of,
)

from extender.cli import POD_MAX_BACKOFF_SECONDS


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
@pytest.mark.parametrize("timeout", ["1.5ms", "2.0005s", "1m0.5s", "90s", "0.25s"])
def test_the_scheduler_gets_the_http_timeout_the_extender_prints(timeout: str, tmp_path: Path) -> None:
    """kube-scheduler's entry carries httpTimeout as `kube-extender config scheduler` writes it
    (exactly, in the largest unit that holds it whole), in both renders of the entry."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"scheduler": {"enabled": True}, "config": {
        "extender": {"httpTimeout": timeout}, "profiles": [{"schedulerName": "gpu-scheduler"}]}}))
    run = template(str(values))
    assert run.returncode == 0, run.stderr
    docs = tuple(d for d in yaml.safe_load_all(run.stdout) if d)
    v = {"fullnameOverride": ""}
    config = extender_config(docs, v)
    (entry,) = scheduler_config(docs, v)["extenders"]
    want = yaml.safe_load(cli_entry_text(config, entry["urlPrefix"], tmp_path))["extenders"][0]
    assert entry["httpTimeout"] == want["httpTimeout"]
    assert seconds(entry["httpTimeout"]) == seconds(timeout)


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
