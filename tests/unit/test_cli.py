"""The kube-extender command: config scheduler / config check / serve argument errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import main


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    return f


def test_config_scheduler_prints_a_valid_extenders_entry(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = write(tmp_path, """apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
managedResources: [{name: vendor.io/fpga, ignoredByScheduler: false}]
extender: {weight: 3, httpTimeout: 2500ms, bindVerb: ""}
""")
    assert main(["config", "scheduler", "--config", str(cfg), "--url", "https://ext.svc:8443/scheduler"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    (entry,) = doc["extenders"]
    assert entry == {"urlPrefix": "https://ext.svc:8443/scheduler", "filterVerb": "filter",
                     "prioritizeVerb": "prioritize", "preemptVerb": "preempt", "weight": 3,
                     # no CA and no insecure: kube-scheduler verifies against the system roots
                     # (with enableHTTPS and no CA it would skip verification, silently)
                     "enableHTTPS": False,
                     "httpTimeout": "2500ms", "nodeCacheCapable": True, "ignorable": False,
                     "managedResources": [{"name": "vendor.io/fpga", "ignoredByScheduler": False}]}


@pytest.mark.parametrize("tls, enable", [
    ("{caFile: /etc/ext/ca.crt}", True), ("{insecure: true}", True), ("{serverName: ext.svc}", False),
], ids=["a CA", "insecure said", "neither"])
def test_enable_https_only_where_it_cannot_switch_verification_off_unasked(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, tls: str, enable: bool) -> None:
    cfg = write(tmp_path, f"""apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
extender: {{urlPrefix: "https://ext.svc:8443/scheduler", tlsConfig: {tls}}}
""")
    assert main(["config", "scheduler", "--config", str(cfg)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["extenders"][0]["enableHTTPS"] is enable


def test_config_scheduler_full_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "scheduler", "--full"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1" and doc["kind"] == "KubeSchedulerConfiguration"
    assert doc["profiles"] == [{"schedulerName": "default-scheduler"}]
    assert doc["extenders"][0]["bindVerb"] == "bind"
    assert doc["podMaxBackoffSeconds"] == 4, "the backoff the churn figures are measured with"


def test_config_check_ok_and_bad(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = write(tmp_path, "apiVersion: kube-extender.io/v1alpha1\nkind: ExtenderConfiguration\n")
    assert main(["config", "check", str(good)]) == 0
    assert "ok" in capsys.readouterr().out
    bad = write(tmp_path, """apiVersion: kube-extender.io/v1alpha1
kind: ExtenderConfiguration
profiles: [{schedulerName: s, plugins: {score: {enabled: [{name: NodeResources, weight: 500}]}}}]
""")
    assert main(["config", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "profiles[0].plugins.score" in err and "weight" in err


def test_serve_with_a_broken_cluster_file_fails_before_serving(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text("kind: Pod\nmetadata: {}\n")
    assert main(["serve", "--cluster", str(f), "--port", "1"]) == 1
    assert "needs metadata.name" in capsys.readouterr().err


def test_help_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["serve", "--help"], ["config", "--help"], ["config", "scheduler", "--help"],
                 ["config", "check", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert "usage" in capsys.readouterr().out


BAD_PLUGINS = """\
profiles:
- schedulerName: default-scheduler
  plugins: {multiPoint: {enabled: [{name: DeviceShar}, {name: Gnag}]}}
"""


@pytest.mark.parametrize("argv", [["config", "check"], ["serve", "--port", "1", "--config"],
                                  ["config", "scheduler", "--config"]], ids=["check", "serve", "scheduler"])
def test_a_bad_configuration_is_one_line_per_problem_and_no_traceback(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, argv: list[str]) -> None:
    """`serve --config` refuses the file before starting anything, with the report `config check`
    prints: every problem on its own line naming the file and key, then one summary line."""
    cfg = write(tmp_path, BAD_PLUGINS)
    assert main([*argv, str(cfg)]) == 1
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        f"{cfg}: profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin 'DeviceShar' (did you mean DeviceShare?)",
        f"{cfg}: profiles[0].plugins.multiPoint.enabled[1].name: unknown plugin 'Gnag' (did you mean Gang?)",
        f"kube-extender: {cfg} is not a valid configuration (2 problems)",
    ]
    assert "Traceback" not in out.out + out.err


PROFILE_A = "- schedulerName: a\n  plugins: {multiPoint: {enabled: [{name: Gnag}]}}\n"
PROFILE_B = "- schedulerName: b\n  plugin: {multiPoint: {enabled: [{name: Gang}]}}\n"
PROFILE_C = "- schedulerName: c\n  plugins: {filter: {enabled: [{name: DeviceShar}]}}\n"


@pytest.mark.parametrize("profiles, expected", [
    ([PROFILE_A, PROFILE_B], ["profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin 'Gnag' (did you mean Gang?)",
                              "profiles[1].plugin: unknown key (did you mean plugins?)"]),
    ([PROFILE_B, PROFILE_A], ["profiles[0].plugin: unknown key (did you mean plugins?)",
                              "profiles[1].plugins.multiPoint.enabled[0].name: unknown plugin 'Gnag' (did you mean Gang?)"]),
    ([PROFILE_A, PROFILE_B, PROFILE_C], [
        "profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin 'Gnag' (did you mean Gang?)",
        "profiles[1].plugin: unknown key (did you mean plugins?)",
        "profiles[2].plugins.filter.enabled[0].name: unknown plugin 'DeviceShar' (did you mean DeviceShare?)"]),
], ids=["bad profile last", "bad profile first", "bad profile between"])
def test_check_reports_the_plugins_of_the_profiles_that_parse_beside_a_bad_profile(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, profiles: list[str], expected: list[str]) -> None:
    """A schema problem in one profile leaves that profile out, not the others: their plugin
    problems are reported in the same breath, each under its own index in the file."""
    cfg = write(tmp_path, "profiles:\n" + "".join(profiles))
    assert main(["config", "check", str(cfg)]) == 1
    *lines, summary = capsys.readouterr().err.splitlines()
    assert sorted(lines) == sorted(f"{cfg}: {line}" for line in expected)
    assert summary == f"kube-extender: {cfg} is not a valid configuration ({len(expected)} problems)"


def test_threads_with_the_gevent_worker_is_refused_not_ignored(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    assert main(["serve", "--threads", "8", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--threads applies to the gthread worker" in err
    assert "server.connections (2000)" in err


def test_serve_outside_a_cluster_without_credentials_fails_in_one_line(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["serve", "--cluster", "kube", "--port", "1"]) == 1
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    assert line.startswith("kube-extender: no Kubernetes credentials: ") and "--kubeconfig FILE" in line
    assert str(tmp_path / ".kube" / "config") in line


def kubeconfig(path: Path, server: str = "https://k8s.example:6443") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


@pytest.mark.parametrize("explicit, env_kubeconfig, source", [
    pytest.param(True, True, "--kubeconfig", id="--kubeconfig first"),
    pytest.param(False, True, "$KUBECONFIG", id="then $KUBECONFIG"),
    pytest.param(False, False, "~/.kube/config", id="then ~/.kube/config"),
])
def test_credentials_outside_a_cluster_fall_back_in_kubectls_order(tmp_path: Path, explicit: bool,
                                                                    env_kubeconfig: bool, source: str) -> None:
    from extender.cluster.kube.credentials import find_credentials
    paths = {"--kubeconfig": kubeconfig(tmp_path / "explicit.yaml"),
             "$KUBECONFIG": kubeconfig(tmp_path / "env.yaml"),
             "~/.kube/config": kubeconfig(tmp_path / "home" / ".kube" / "config")}
    env = {"KUBECONFIG": str(paths["$KUBECONFIG"])} if env_kubeconfig else {}
    found = find_credentials(str(paths["--kubeconfig"]) if explicit else None, env, tmp_path / "home")
    assert (found.source, found.kubeconfig) == (source, str(paths[source]))


def test_in_cluster_credentials_come_before_kubeconfig_files(tmp_path: Path) -> None:
    from extender.cluster.kube.credentials import CredentialsError, find_credentials
    token = tmp_path / "token"
    token.write_text("secret")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "KUBECONFIG": str(kubeconfig(tmp_path / "env.yaml"))}
    with pytest.raises(CredentialsError, match="in-cluster credentials are unusable"):
        find_credentials(None, env, tmp_path, token=str(token))  # chosen, then refused: no CA file here
    assert find_credentials(None, {k: v for k, v in env.items() if k != "KUBERNETES_SERVICE_HOST"},
                            tmp_path, token=str(token)).source == "$KUBECONFIG"


@pytest.mark.parametrize("text, problem", [("a: [\n", "while parsing"), ("apiVersion: v1\nkind: Config\n",
                                                                         "current-context")])
def test_a_broken_kubeconfig_is_one_sentence(tmp_path: Path, text: str, problem: str) -> None:
    from extender.cluster.kube.credentials import CredentialsError, find_credentials
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CredentialsError) as err:
        find_credentials(None, {"KUBECONFIG": str(bad)}, tmp_path)
    assert "\n" not in str(err.value) and problem in str(err.value) and "(from $KUBECONFIG)" in str(err.value)


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of PEM files: server.crt with its server.key, other.key, encrypted.key, and
    garbage.pem (not PEM at all)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("pem")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
    openssl("req", "-x509", *curve, "-nodes", "-keyout", "server.key", "-out", "server.crt", "-days", "2",
            "-subj", "/CN=127.0.0.1")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key")
    openssl("pkey", "-in", "other.key", "-aes128", "-passout", "pass:secret", "-out", "encrypted.key")
    (d / "garbage.pem").write_text("not a certificate\n")
    return d


@pytest.mark.parametrize("tls, key, problem", [
    ({"certFile": "missing.crt"}, "certFile", "cannot read {d}/missing.crt: No such file or directory"),
    ({"certFile": "garbage.pem"}, "certFile", "no PEM certificate in {d}/garbage.pem"),
    ({"certFile": "server.key"}, "certFile", "no PEM certificate in {d}/server.key"),
    ({"keyFile": "missing.key"}, "keyFile", "cannot read {d}/missing.key: No such file or directory"),
    ({"keyFile": "garbage.pem"}, "keyFile", "no PEM private key in {d}/garbage.pem"),
    ({"keyFile": "other.key"}, "keyFile",
     "the private key in {d}/other.key does not match the certificate in {d}/server.crt"),
    ({"keyFile": "encrypted.key"}, "keyFile",
     "the private key in {d}/encrypted.key is encrypted: the server has no passphrase for it"),
    ({"clientCAFile": "garbage.pem"}, "clientCAFile", "no PEM certificate in {d}/garbage.pem"),
    ({"clientCAFile": "."}, "clientCAFile", "cannot read {d}: Is a directory"),
], ids=["cert-missing", "cert-garbage", "cert-is-a-key", "key-missing", "key-garbage", "key-of-another-cert",
        "key-encrypted", "client-ca-garbage", "client-ca-directory"])
def test_serve_refuses_unusable_tls_files_before_forking(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pem: Path,
                                                        tls: dict[str, str], key: str, problem: str) -> None:
    """gunicorn's workers load the certificate and key only once they serve: garbage there made
    the gevent worker fail and be restarted for ever (the gthread worker failed every handshake),
    a missing certFile was a gunicorn traceback. `serve` loads them first and refuses the file as
    it refuses any configuration problem."""
    started: list[Any] = []
    monkeypatch.setattr("extender.server.ExtenderServer.run", lambda self: started.append(self))
    files = {"certFile": "server.crt", "keyFile": "server.key", **tls}
    cfg = write(tmp_path, yaml.safe_dump({"server": {"tls": {k: str(pem / v) for k, v in files.items()}}}))
    assert main(["serve", "--config", str(cfg), "--port", "1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{cfg}: server.tls.{key}: {problem.format(d=pem)}",
        f"kube-extender: {cfg} is not a valid configuration (1 problem)",
    ]
    assert started == []


def test_serve_starts_with_usable_tls_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pem: Path) -> None:
    started: list[Any] = []
    monkeypatch.setattr("extender.server.ExtenderServer.run", lambda self: started.append(self))
    tls = {"certFile": str(pem / "server.crt"), "keyFile": str(pem / "server.key"),
           "clientCAFile": str(pem / "server.crt")}
    assert main(["serve", "--config", str(write(tmp_path, yaml.safe_dump({"server": {"tls": tls}}))),
                 "--port", "1"]) == 0
    (server,) = started
    assert (server.cfg.certfile, server.cfg.keyfile, server.cfg.ca_certs) == \
        (tls["certFile"], tls["keyFile"], tls["clientCAFile"])
