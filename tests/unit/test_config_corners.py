"""Configuration corners: what the file may say without a traceback, a silently ignored setting
or a kube-scheduler entry kube-scheduler cannot read."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.app import create_app
from extender.cli import main
from extender.cluster.memory import MemoryCluster
from extender.config.model import ConfigError, load_config, parse_config, valid_extended_resource_name


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`kube-extender config check FILE`: the exit code and stderr; a traceback fails the test."""
    rc = main(["config", "check", str(write(tmp_path, text))])
    return rc, capsys.readouterr().err


def scheduler_entry_of(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["config", "scheduler", "--config", str(write(tmp_path, text))]) == 0
    (entry,) = yaml.safe_load(capsys.readouterr().out)["extenders"]
    return entry


def extension_points(config: Any) -> dict[str, Any]:
    app = create_app(config, source=MemoryCluster(), background=False)
    return app.test_client().get("/debug/config").get_json()["profiles"][0]["extensionPoints"]


# 1. A huge integer duration: OverflowError traceback instead of a config error.
def test_a_huge_integer_duration_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, f"cache: {{assumedPodTTL: {10 ** 400}}}\n", capsys)
    assert rc == 1 and "cache.assumedPodTTL" in err


# 2. A duration string that overflows to infinity is accepted, then `config check` crashes formatting it.
def test_an_infinite_duration_string_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, f'extender: {{httpTimeout: "{"9" * 400}h"}}\n', capsys)
    assert rc == 1 and "extender.httpTimeout" in err


# 3. maxRequestBytes: .inf / .nan -> ValueError traceback (milli raises ValueError, not QuantityError).
@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_an_infinite_byte_size_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 value: str) -> None:
    rc, err = check(tmp_path, f"server: {{maxRequestBytes: {value}}}\n", capsys)
    assert rc == 1 and "server.maxRequestBytes" in err


# 4. An unhashable YAML key (valid YAML) -> TypeError traceback from the repeated-key check.
def test_an_unhashable_yaml_key_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, "server:\n  {a: 1}: 2\n", capsys)
    assert rc == 1 and "config.yaml" in err


# 5. YAML merge keys (which yaml.safe_load supports) are refused as "not valid YAML".
def test_yaml_merge_keys_are_valid_yaml(tmp_path: Path) -> None:
    f = write(tmp_path, textwrap.dedent("""\
        profiles:
          - &base {schedulerName: a, plugins: {multiPoint: {enabled: [{name: Gang}]}}}
          - <<: *base
            schedulerName: b
        """))
    config = load_config(f)
    assert [p.scheduler_name for p in config.profiles] == ["a", "b"]


# 6. An empty (null) `extender:` section passes `config check` but `serve` crashes in with_server.
def test_a_null_extender_section_does_not_crash_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write(tmp_path, "extender:\nserver: {port: 18123}\n")
    assert main(["config", "check", str(f)]) == 0
    monkeypatch.setattr("extender.server.ExtenderServer.run", lambda self: None)
    assert main(["serve", "--config", str(f)]) == 0  # AttributeError: 'NoneType' object has no attribute 'get'


# 7. httpTimeout below a millisecond is printed as "0ms", which kube-scheduler reads as its 5s default.
def test_config_scheduler_does_not_print_a_zero_http_timeout(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["config", "scheduler", "--config", str(write(tmp_path, "extender: {httpTimeout: 400us}\n"))])
    out = capsys.readouterr().out
    assert rc == 1 or "httpTimeout: 0ms" not in out


# 8. httpTimeout beyond Go's time.Duration range (~2562047h) is printed; kube-scheduler cannot decode it.
def test_config_scheduler_refuses_an_http_timeout_go_cannot_parse(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, "extender: {httpTimeout: 3000000h}\n", capsys)
    assert rc == 1 and "extender.httpTimeout" in err


# 11. Per-point `disabled` does not remove a multiPoint-enabled plugin (kube-scheduler's
#     expandMultiPointPlugins skips it there, and skips all of multiPoint with "*").
def test_disabled_at_a_point_removes_a_multipoint_plugin_there() -> None:
    config = parse_config({"profiles": [{"schedulerName": "a", "plugins": {
        "multiPoint": {"enabled": [{"name": "Gang"}]},
        "permit": {"disabled": ["Gang"]},
        "reserve": {"disabled": ["*"]}}}]})
    points = extension_points(config)
    assert "Gang" not in points["permit"]
    assert points["reserve"] == []


# 12. bindVerb "" (kube-scheduler binds; no Reserve/Permit here) with Gang enabled: all-or-nothing
#     silently lost (the same reasoning as the existing ignorable+Gang refusal).
def test_gang_without_the_bind_verb_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, textwrap.dedent("""\
        extender: {bindVerb: ""}
        profiles:
          - schedulerName: a
            plugins: {multiPoint: {enabled: [{name: Gang}]}}
        """), capsys)
    assert rc == 1 and "bindVerb" in err


# 13. `disabled: [{name: X, <typo>: ...}]`: extra keys silently ignored (everywhere else: "unknown key").
def test_unknown_keys_in_a_disabled_entry_are_refused() -> None:
    with pytest.raises(ConfigError, match="wieght"):
        parse_config({"profiles": [{"schedulerName": "a", "plugins": {
            "score": {"disabled": [{"name": "NodeResources", "wieght": 3}]}}}]})


# 9. managedResources names kube-scheduler's validateExtendedResourceName rejects are accepted and printed.
@pytest.mark.parametrize("name", ["example.com/" + "g" * 64,        # qualified-name part > 63 characters
                                  "examplekubernetes.io/gpu"])        # contains "kubernetes.io/": native
def test_managed_resource_names_kube_scheduler_rejects_are_config_errors(tmp_path: Path, name: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = check(tmp_path, f"managedResources: [{{name: {name}}}]\n", capsys)
    assert rc == 1 and "managedResources[0].name" in err


# 14. simulate --cluster FILE: a PriorityClass whose value is not an integer, or a non-UTF-8 file,
#     is a traceback (serve --cluster reports them, simulate does not).
@pytest.mark.parametrize("content", [
    b"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: high\n---\n"
    b"apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {priorityClassName: high, "
    b"containers: []}\n",
    b"kind: Node\nmetadata: {name: \"\xff\"}\n",
], ids=["priority-class-value", "not-utf8"])
def test_simulate_with_a_malformed_cluster_file_is_an_error_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_bytes(content)
    assert main(["simulate", "--cluster", str(f), "--quiet", "--out", str(tmp_path / "out")]) == 1
    assert str(f) in capsys.readouterr().err


NESTED_MERGE = textwrap.dedent("""\
    profiles:
      - schedulerName: a
        plugins: {multiPoint: {enabled: [{name: Gang}]}}
        pluginConfig:
          - name: Gang
            args: &base {permitTimeout: 10s, backoff: 1s}
      - schedulerName: b
        plugins: {multiPoint: {enabled: [{name: Gang}]}}
        pluginConfig:
          - name: Gang
            args:
              <<: &tight
                <<: *base
                permitTimeout: 5s
              backoff: 2s
      - schedulerName: c
        plugins: {multiPoint: {enabled: [{name: Gang}]}}
        pluginConfig:
          - name: Gang
            args: *tight
    """)


def test_nested_merge_with_override_reused_by_alias(tmp_path: Path) -> None:
    raw = yaml.safe_load(NESTED_MERGE)
    assert raw["profiles"][2]["pluginConfig"][0]["args"] == {"permitTimeout": "5s", "backoff": "1s"}
    f = tmp_path / "config.yaml"
    f.write_text(NESTED_MERGE)
    config = load_config(f)  # ConfigError: profiles...permitTimeout: repeated key
    assert [p.scheduler_name for p in config.profiles] == ["a", "b", "c"]


def test_a_domain_too_long_for_its_quota_name_is_refused() -> None:
    """kube-scheduler's validateExtendedResourceName also requires v1helper.IsExtendedResourceName,
    which checks IsQualifiedName("requests." + name): the domain gets 253 - len("requests.") = 244
    characters, not 253. A 250-character domain passes here (and is printed into the scheduler
    entry) but kube-scheduler refuses the configuration."""
    domain = ".".join(["a" * 49] * 5) + "bb"  # 251 characters, labels of at most 55
    assert 244 < len(domain) <= 253
    assert valid_extended_resource_name(f"{domain}/gpu") is not None


@pytest.mark.parametrize("lease, renew, refused", [
    ("15s", "14500ms", True),     # 0.5 s: a write may not outlive it, and kube-apiserver may take 1 s
    ("2s", "1500ms", True),
    ("15s", "14999ms", True),
    ("15s", "14s", False),        # 1 s: the least gap
    ("2.9s", "1.9s", False),      # 1 s, though 2.9 - 1.9 is 0.9999999999999998 in floats
    ("15s", "10s", False),        # the defaults: 5 s
], ids=["500ms-gap", "fast-500ms-gap", "1ms-gap", "1s-gap", "1s-gap-in-float-dust", "defaults"])
def test_a_lease_gap_a_write_cannot_fit_in_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              lease: str, renew: str, refused: bool) -> None:
    """Every API write of the leader gives up within leaseDuration - renewDeadline (the fence:
    create_kube_app), so a deposed leader's write lands before a standby may lead. A gap under
    1 s used to be raised to 1 s for the writes - breaking the fence - instead of refused."""
    text = f"leaderElection: {{enabled: true, leaseDuration: {lease}, renewDeadline: {renew}, retryPeriod: 250ms}}\n"
    rc, err = check(tmp_path, text, capsys)
    if not refused:
        assert rc == 0, err
        return
    assert rc == 1
    assert f"{tmp_path / 'config.yaml'}: leaderElection.renewDeadline: " in err, err
    assert "at least 1s below leaseDuration" in err, err
