"""What the values turn on in the extender, as it reads the rendered file: the Gang plugin and its
args in every profile with ``features.gang`` (a profile's own Gang settings win), the NVIDIA
example, ``admission`` with ``features.schedulingGates``, ``requeue``, the server's worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import (
    CHART, ENTRY_HEADER, REPO, ci, extender_config, fullname, gang_config, needs_helm, notes, one,
    rendered, seconds, template, values_of,
)


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
def test_a_profiles_own_gang_settings_win(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    values = str(CHART / "ci" / "gang-profiles-values.yaml")
    config = extender_config(rendered(values), values_of(values))
    profiles = {p["schedulerName"]: p for p in config["profiles"]}
    assert profiles["gpu"]["plugins"]["multiPoint"]["enabled"] == [{"name": "NodeResources"}, {"name": "Gang"}]
    assert gang_config(profiles["gpu"]) == {"name": "Gang", "args": {"permitTimeout": "2500ms", "backoff": "30s",
                                                                      "reservationTimeout": "1m"}}
    assert gang_config(profiles["gpu-tight"]) == {"name": "Gang", "args": {"permitTimeout": "1s", "backoff": "5s"}}
    assert "multiPoint" in profiles["gpu-tight"]["plugins"]
    assert profiles["gpu-no-gang"]["plugins"] == {"permit": {"disabled": ["Gang"]}}
    # gpu-no-gang has Gang's args too, and disables it by name: no warning about them at start
    with caplog.at_level("WARNING", logger="extender.runtime.profile"):
        effective(config, tmp_path)
    assert [r.getMessage() for r in caplog.records] == []


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
