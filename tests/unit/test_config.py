"""The configuration file: defaults, validation errors that name the key, plugin args."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import config_of

from extender.app import create_app, plugin_registry
from extender.cluster.memory import MemoryCluster
from extender.config.model import ConfigError, load_config, parse_duration
from extender.framework.durations import GO_MAX_SECONDS, format_duration


def test_defaults_manage_example_gpu_with_all_verbs() -> None:
    c = config_of()
    assert [r.name for r in c.managed_resources] == ["example.com/gpu"]
    assert c.verbs() == {"filter": "filter", "prioritize": "prioritize", "preempt": "preempt", "bind": "bind"}
    assert c.extender.url_prefix == "http://127.0.0.1:8888/scheduler"
    assert c.extender.http_timeout == 5.0 and c.assumed_pod_ttl == 30.0


@pytest.mark.parametrize("overrides, path", [
    ({"managedResources": [{"name": "cpu"}]}, "managedResources[0].name"),
    ({"managedResources": [{"name": "kubernetes.io/foo"}]}, "managedResources[0].name"),
    ({"managedResources": [{"name": "a.io/x"}, {"name": "a.io/x"}]}, "managedResources"),
    ({"server": {"port": 70000}}, "server.port"),
    ({"server": {"prot": 1}}, "server.prot"),
    ({"server": {"maxRequestBytes": "lots"}}, "server.maxRequestBytes"),
    ({"extender": {"httpTimeout": "5 seconds"}}, "extender.httpTimeout"),
    ({"extender": {"weight": 0}}, "extender.weight"),
    ({"extender": {"filterVerb": "a/b"}}, "extender.filterVerb"),
    ({"extender": {"filterVerb": "filter", "prioritizeVerb": "filter"}}, "extender.prioritizeVerb"),
    ({"extender": {"httpTimeout": float("inf")}}, "extender.httpTimeout"),
    ({"cache": {"assumedPodTTL": float("nan")}}, "cache.assumedPodTTL"),
    ({"profiles": [{"schedulerName": "a", "pluginConfig": [
        {"name": "NodeResources", "args": {"scoringStrategy": {"type": "LeastAllocated"}}},
        {"name": "NodeResources", "args": {}}]}]}, "profiles[0].pluginConfig[1].name"),
    ({"cache": {"assumedPodTTL": "-1s"}}, "cache.assumedPodTTL"),
    ({"admission": {"interval": 0}}, "admission.interval"),
    ({"admission": {"resync": "100ms"}}, "admission.resync"),
    ({"requeue": {"qps": 0}}, "requeue.qps"),
    ({"requeue": {"nudge": "sometimes"}}, "requeue.nudge"),
    ({"requeue": {"minInterval": "soon"}}, "requeue.minInterval"),
    ({"profiles": []}, "profiles"),
    ({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]}, "profiles"),
    ({"profiles": [{"schedulerName": "a", "plugins": {"filtr": {}}}]}, "profiles[0].plugins.filtr"),
    ({"annotationPrefix": "No Slash"}, "annotationPrefix"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_errors_name_the_key_path(overrides: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_of(**overrides)
    assert path in [p for p, _ in err.value.problems], err.value.problems


def test_wrong_kind_and_api_version() -> None:
    from extender.config.model import parse_config
    with pytest.raises(ConfigError) as err:
        parse_config({"apiVersion": "v1", "kind": "Pod"})
    assert err.value.problems == [("apiVersion", "must be kube-extender.io/v1alpha1"),
                                  ("kind", "must be ExtenderConfiguration")]


def test_api_version_and_kind_are_optional_as_the_readme_says() -> None:
    """The README promises every key is optional; a file of just the keys one changes works."""
    from extender.config.model import parse_config
    config = parse_config({"server": {"port": 9000}}, "small.yaml")
    assert config.server.port == 9000 and config.effective()["apiVersion"] == "kube-extender.io/v1alpha1"
    assert config.effective()["kind"] == "ExtenderConfiguration"


BAD_FILE = """\
managedResources: [{name: example.com/gpu}]
servr: {port: 9000}
server: {prot: 1, logLevel: loud}
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint: {enabled: [{name: DeviceShar}, {name: Gnag}], disabled: [NodeResorces]}
    filtr: {}
- schedulerName: gpu
  plugins:
    postFilter: {enabled: [{name: ManagedPremption}]}
  pluginConfig:
  - name: NodeResources
    args: {scoringStrategy: {typ: MostAllocated}}
  - name: Gost
  - name: CapacityQuota
    args: {quota: {}}
"""


SCHEMA_PROBLEMS = ["servr: unknown key (did you mean server?)",
                   "server.prot: unknown key (did you mean port?)",
                   "server.logLevel: Must be one of: debug, info, warning, error."]


PROFILE_0_PLUGIN_PROBLEMS = [
    "profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin 'DeviceShar' (did you mean DeviceShare?)",
    "profiles[0].plugins.multiPoint.enabled[1].name: unknown plugin 'Gnag' (did you mean Gang?)",
    "profiles[0].plugins.multiPoint.disabled[0]: unknown plugin 'NodeResorces' (did you mean NodeResources?)",
]
PROFILE_1_PLUGIN_PROBLEMS = [
    "profiles[1].plugins.postFilter.enabled[0].name: unknown plugin 'ManagedPremption' "
    "(did you mean ManagedPreemption?)",
    # every plugin the installation has: the built-in ones and the installed packages' (the test
    # environment has examples/accelerator-model)
    f"profiles[1].pluginConfig[Gost].name: unknown plugin 'Gost' (known: {', '.join(plugin_registry().names())})",
    "profiles[1].pluginConfig[NodeResources].args.scoringStrategy.typ: unknown key (did you mean type?)",
    # args of a plugin no point enables are judged too: wrong now, wrong the day it is enabled
    "profiles[1].pluginConfig[CapacityQuota].args.quota: unknown key (did you mean quotas?)",
]


@pytest.mark.parametrize("text, more", [
    pytest.param(BAD_FILE, ["profiles[0].plugins.filtr: unknown key (did you mean filter?)",
                            *PROFILE_1_PLUGIN_PROBLEMS],
                 id="a profile does not parse: the plugins of the others are judged, by their own index"),
    pytest.param(BAD_FILE.replace("    filtr: {}\n", ""), PROFILE_0_PLUGIN_PROBLEMS + PROFILE_1_PLUGIN_PROBLEMS,
                 id="the profiles parse: every plugin problem comes with the others"),
    pytest.param(BAD_FILE.replace("    postFilter:", "    postFiltr:"), [
        "profiles[0].plugins.filtr: unknown key (did you mean filter?)",
        "profiles[1].plugins.postFiltr: unknown key (did you mean postFilter?)",
    ], id="no profile parses: their plugins cannot be judged yet"),
])
def test_every_problem_at_once_with_file_key_path_and_a_suggestion(tmp_path: Path, text: str,
                                                                   more: list[str]) -> None:
    """Schema problems do not hide plugin problems, every unknown plugin is named (not only the
    first of a profile), each problem is one line with the file and the key path, and a
    misspelled key or plugin name gets the name it was probably meant to be."""
    from extender.cli import load_checked
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_checked(str(path))
    assert sorted(err.value.lines()) == sorted(f"{path}: {line}" for line in SCHEMA_PROBLEMS + more)


@pytest.mark.parametrize("profile, path", [
    ({"schedulerName": "s", "plugins": {"filter": {"enabled": [{"name": "Nope"}]}}},
     "profiles[0].plugins.filter.enabled[0].name"),
    ({"schedulerName": "s", "pluginConfig": [{"name": "NodeResources", "args": {"scoringStrategy": {"type": "Fast"}}}]},
     "profiles[0].pluginConfig[NodeResources].args.scoringStrategy.type"),
    ({"schedulerName": "s", "pluginConfig": [{"name": "Ghost", "args": {}}]}, "profiles[0].pluginConfig[Ghost].name"),
    ({"schedulerName": "s", "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}},
      "pluginConfig": [{"name": "Gang", "args": {"reservationTimeout": "0s"}}]},
     "profiles[0].pluginConfig[Gang].args.reservationTimeout"),
    ({"schedulerName": "s", "pluginConfig": [{"name": "PrioritySort", "args": {"x": 1}}]},
     "profiles[0].pluginConfig[PrioritySort].args"),
    ({"schedulerName": "s", "pluginConfig": [{"name": "NodeResources", "args": {"scoringStrategy": {
        "resources": [{"name": "example.com/gpus"}]}}}]},  # a typo: no managed resource would be scored
     "profiles[0].pluginConfig[NodeResources].args.scoringStrategy.resources"),
    ({"schedulerName": "s", "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}]}},
      "pluginConfig": [{"name": "CapacityQuota", "args": {"quotas": {"team-a": {"min": None}}}}]},
     "profiles[0].pluginConfig[CapacityQuota].args.quotas.team-a.min"),
    ({"schedulerName": "s", "plugins": {"multiPoint": {"enabled": [{"name": "NodeResources", "weight": 500}]}}},
     "profiles[0].plugins.score"),
])
def test_plugin_problems_are_config_errors_at_app_build(profile: dict, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        create_app(config_of(profiles=[profile]), source=MemoryCluster())
    assert path in [p for p, _ in err.value.problems], err.value.problems


@pytest.mark.parametrize("text, seconds", [
    ("5s", 5), ("1m30s", 90), ("250ms", 0.25), (3, 3), ("0", 0),
    # what Go's time.ParseDuration reads besides: the Greek mu, digits on one side of the point, a plus
    ("500\u03bcs", 0.0005), ("500\u00b5s", 0.0005), (".5s", 0.5), ("1.s", 1), ("+1s", 1), ("+0", 0)])
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), True, "soon",
                                   "\u0665s", "1\uff10ms", ".s", "-+1s", "1", "-1s", ""])  # digits Go does not read: Arabic-Indic, fullwidth
def test_what_is_no_duration(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize("given, written", [
    ("5s", "5s"), ("1m30s", "90s"), ("2500ms", "2500ms"), ("0", "0s"),
    ("500us", "500us"), ("500µs", "500us"), ("0.0005s", "500us"), (0.0005, "500us"),
    ("1.5ms", "1500us"), ("1ns", "1ns"), ("1.000000001s", "1000000001ns"), ("1.5ns", "0.0000000015s"),
    ("9ms", "9ms"), ("0.009s", "9ms"), ("0.1s0.2s", "300ms"), ("50000us", "50ms"), ("1h0.5s", "3600500ms"),
], ids=lambda v: str(v))
def test_a_duration_is_written_back_exactly(given: Any, written: str) -> None:
    """/debug/config writes a duration in the largest unit that holds it whole, and reads back as
    the same value: 500us was written "0ms" (rounded to the millisecond)."""
    seconds = parse_duration(given)
    assert format_duration(seconds) == written
    assert parse_duration(written) == seconds


def test_a_duration_is_read_exactly() -> None:
    """A duration is the value its text says, as Go reads it, not a sum of products rounded on the
    way: 50000us is 50ms (it read 0.049999999999999996 and fell under admission.interval's 50ms)."""
    for a, b in [("50000us", "50ms"), ("0.009s", "9ms"), ("0.1s0.2s", "300ms"), ("1000000us", "1s"),
                 ("1.5ms", "1500us")]:
        assert parse_duration(a) == parse_duration(b), (a, b)
    assert config_of(admission={"interval": "50000us"}).admission.interval == 0.05


_PARTS = st.lists(st.tuples(st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 10**12).map(str)),
                            st.sampled_from(["h", "m", "s", "ms", "us", "µs", "ns"])), min_size=1, max_size=4)


@settings(max_examples=500, deadline=None)
@given(parts=_PARTS)
def test_every_duration_text_is_written_back_to_the_same_value(parts: list[tuple[int, str | None, str]]) -> None:
    text = "".join(f"{whole}{'' if frac is None else '.' + frac}{unit}" for whole, frac, unit in parts)
    try:
        seconds = parse_duration(text)
    except ValueError:  # longer than Go holds
        return
    assert parse_duration(format_duration(seconds)) == seconds, (text, format_duration(seconds))


@settings(max_examples=500, deadline=None)
@given(seconds=st.one_of(st.floats(0, GO_MAX_SECONDS), st.floats(0, 1e-3), st.integers(0, int(GO_MAX_SECONDS))))
def test_every_duration_in_seconds_is_written_back_to_the_same_value(seconds: float) -> None:
    value = parse_duration(seconds)
    written = format_duration(value)
    assert re.fullmatch(r"([0-9]+(\.[0-9]+)?(h|m|s|ms|us|ns))+", written), written  # Go's notation, no exponent
    assert parse_duration(written) == value, written


def test_load_config_from_file_and_unreadable(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\nserver: {port: 9999}\n")
    assert load_config(f).server.port == 9999
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    f.write_text("a: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(f)


@pytest.mark.parametrize("content, path, message", [
    (b"server:\n  host: \xff\n", "", "not UTF-8 text"),  # a Latin-1 file, say
    (b"server:\n  port: 9000\nserver:\n  host: 0.0.0.0\n", "server", "repeated key (line 3)"),
    (b"server:\n  port: 9000\n  port: 9001\n", "port", "repeated key (line 3)"),
], ids=["not UTF-8", "a section twice", "a key twice"])
def test_a_file_that_would_be_misread_is_a_config_error(tmp_path: Path, content: bytes, path: str,
                                                        message: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    ((where, text),) = err.value.problems
    assert where == path and text.startswith(message) and err.value.source == str(f)


def test_a_default_plugin_named_in_multipoint_takes_its_weight() -> None:
    """As kube-scheduler merges plugin sets: the user's multiPoint entry replaces the default's."""
    app = create_app(config_of(profiles=[{"schedulerName": "default-scheduler", "plugins": {
        "multiPoint": {"enabled": [{"name": "NodeResources", "weight": 5}]}}}]), source=MemoryCluster())
    points = app.test_client().get("/debug/config").get_json()["profiles"][0]["extensionPoints"]
    assert points["score"] == [{"name": "NodeResources", "weight": 5}]


def test_the_default_url_of_an_ipv6_host_is_a_url() -> None:
    import urllib.parse

    url = config_of(server={"host": "::1"}).extender.url_prefix
    parts = urllib.parse.urlsplit(url)
    assert (url, parts.hostname, parts.port) == ("http://[::1]:8888/scheduler", "::1", 8888)


@pytest.mark.parametrize("flags, problem", [
    ({"port": 70000}, "--port"), ({"port": 0}, "--port"), ({"threads": 0}, "--threads"),
])
def test_serve_flags_are_checked_as_the_keys_they_override(flags: dict[str, int], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_of().with_server(**flags)
    assert [p for p, _ in err.value.problems] == [problem]


def test_gang_with_an_ignorable_extender_is_refused() -> None:
    profile = {"schedulerName": "s", "plugins": {"multiPoint": {"enabled": [{"name": "Gang"}]}}}
    with pytest.raises(ConfigError) as err:
        create_app(config_of(extender={"ignorable": True}, profiles=[profile]), source=MemoryCluster())
    assert [p for p, _ in err.value.problems] == ["extender.ignorable"]
    assert create_app(config_of(extender={"ignorable": True}), source=MemoryCluster())  # without Gang: fine


def test_the_documented_defaults_are_the_defaults() -> None:
    """docs/configuration.md shows every key with its default: read as a file, it configures the
    same extender as no file at all (the profile's plugins per extension point included)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "kind: ExtenderConfiguration" in b)
    documented, default = config_of(**yaml.safe_load(block)), config_of()
    assert {k: v for k, v in documented.effective().items() if k != "profiles"} == \
        {k: v for k, v in default.effective().items() if k != "profiles"}
    plugins = [[p["extensionPoints"] for p in create_app(c, source=MemoryCluster()).test_client()
                .get("/debug/config").get_json()["profiles"]] for c in (documented, default)]
    assert plugins[0] == plugins[1]


def test_the_readme_configuration_example_is_a_valid_file() -> None:
    """The README's "Configure" example (managed resources and Gang on the default profile) loads
    and enables what it says."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Configure"):]
    config = config_of(**yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1)))
    points = create_app(config, source=MemoryCluster()).test_client().get("/debug/config").get_json()
    assert "Gang" in points["profiles"][0]["extensionPoints"]["permit"]
