"""Impossible combinations of values fail at render time with a message that names the fix, and
the values schema rejects typos and malformed values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import cli, extender_config, needs_helm, template


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
    ("http-timeout-under-a-millisecond", {"config": {"extender": {"httpTimeout": "500us"}}}, (),
     "config.extender.httpTimeout (500us) must be at least 1ms"),
    ("admission-interval-zero", {"config": {"admission": {"interval": "0s"}}}, (),
     "config.admission.interval (0s) must be at least 50ms"),
    ("admission-interval-under-50ms", {"config": {"admission": {"interval": "49ms"}}}, (),
     "config.admission.interval (49ms) must be at least 50ms"),
    ("admission-resync-under-a-second", {"config": {"admission": {"resync": "999ms"}}}, (),
     "config.admission.resync (999ms) must be at least 1s"),
    ("admission-hold-under-a-second", {"config": {"admission": {"holdTimeout": "0.5s"}}}, (),
     "config.admission.holdTimeout (0.5s) must be at least 1s"),
    ("gates-without-rbac", {"rbac": {"create": False}, "features": {"binding": False, "schedulingGates": True}}, (),
     "patch pods to lift scheduling gates (features.schedulingGates)"),
    ("nudge-without-rbac", {"rbac": {"create": False}, "features": {"binding": False},
                            "config": {"requeue": {"nudge": True}}}, (),
     "patch pods to nudge them (config.requeue.nudge)"),
    ("binding-without-rbac", {"rbac": {"create": False}}, (),
     "create pods/binding and patch pods and pods/status (features.binding)"),
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
    ("lease-gap-under-a-second", {"config": {"leaderElection": {"renewDeadline": "14500ms"}}}, (),
     "config.leaderElection.renewDeadline (14500ms) must be at least 1s below leaseDuration (15s)"),
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
    ("gang-duration-in-words", {"gang": {"backoff": "90 seconds"}}, "/gang/backoff"),
    ("gang-duration-without-a-unit", {"gang": {"backoff": "1m30"}}, "/gang/backoff"),
    ("gang-duration-negative", {"gang": {"reservationTimeout": "-5s"}}, "/gang/reservationTimeout"),
    ("gang-duration-unknown-unit", {"gang": {"permitTimeout": "3d"}}, "/gang/permitTimeout"),
    ("gang-duration-a-bare-dot", {"gang": {"permitTimeout": ".s"}}, "/gang/permitTimeout"),
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


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("lease-gap-of-a-second", {"config": {"leaderElection": {"renewDeadline": "14s"}}}),
    ("gang-durations-of-several-units", {"features": {"gang": True},
                                         "gang": {"permitTimeout": "1s500ms", "backoff": "1m30s",
                                                  "reservationTimeout": "1h2m3.5s"}}),
    ("gang-durations-in-small-units", {"features": {"gang": True},
                                       "gang": {"permitTimeout": "2500000us", "backoff": "1500000000ns",
                                                "reservationTimeout": "90000000µs"}}),
    ("admission-at-its-minima", {"config": {"admission": {"interval": "50ms", "resync": "1s",
                                                          "holdTimeout": "1000ms"}}}),
    ("durations-as-go-spells-them", {"features": {"gang": True},
                                     "gang": {"permitTimeout": ".5s", "backoff": "+1s", "reservationTimeout": "1.m"},
                                     "config": {"extender": {"httpTimeout": "5000000\u03bcs"}}}),
    ("timeouts-in-microseconds", {"config": {"extender": {"httpTimeout": "1000us"},
                                             "admission": {"interval": "50000us", "holdTimeout": "1000000000ns"}}}),
    ("admission-minima-in-other-units", {"config": {"admission": {"interval": "0.05s", "resync": "0.5s500ms",
                                                                  "holdTimeout": "0.25s750ms"}}}),
    ("lease-gap-of-a-second-in-float-dust", {"config": {"leaderElection": {"leaseDuration": "2.9s",
                                                                           "renewDeadline": "1.9s",
                                                                           "retryPeriod": "500ms"}}}),
]


@needs_helm
@pytest.mark.parametrize("values", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_values_at_the_extenders_limits_render_and_pass_config_check(values: dict[str, Any], tmp_path: Path) -> None:
    """What the extender accepts, the chart renders: the refusals above stop at the extender's own
    limits, not before them."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    run = template(str(path))
    assert run.returncode == 0, run.stderr
    config = extender_config(tuple(d for d in yaml.safe_load_all(run.stdout) if d), {"fullnameOverride": ""})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code, out, err = cli("config", "check", str(tmp_path / "config.yaml"))
    assert code == 0, err
