"""Where ``serve --cluster kube`` takes its Kubernetes credentials from, decided before serving.

In this order, as kubectl users expect: ``--kubeconfig FILE``; the Pod's service account when the
process runs inside a cluster; ``$KUBECONFIG`` (a ``:``-separated list is merged, as kubectl
does); ``~/.kube/config``. The chosen credentials are loaded once here, so a missing or broken
source fails at once with :class:`CredentialsError` - one sentence that says what to do - instead
of a traceback from the worker process.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class CredentialsError(RuntimeError):
    """No usable Kubernetes credentials; the message says what was tried and what to do."""


@dataclass(frozen=True)
class Credentials:
    """``kubeconfig`` is the file (or ``:``-separated list) to load; empty means in-cluster."""

    kubeconfig: str
    source: str
    """How it was chosen: ``--kubeconfig``, ``in-cluster``, ``$KUBECONFIG`` or ``~/.kube/config``."""


def find_credentials(explicit: str | None = None, environ: Mapping[str, str] | None = None,
                     home: Path | None = None, token: str = TOKEN) -> Credentials:
    """The credentials ``serve --cluster kube`` uses (see the module docstring), checked by
    loading them. Raises CredentialsError."""
    from kubernetes import client as k8s  # imported here: the command line starts faster without it
    from kubernetes import config as k8s_config

    env = os.environ if environ is None else environ
    if explicit:
        return _loaded(Credentials(explicit, "--kubeconfig"))
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT") and os.path.exists(token):
        try:
            k8s_config.load_incluster_config(client_configuration=k8s.Configuration())
        except k8s_config.ConfigException as exc:
            raise CredentialsError(f"in-cluster credentials are unusable: {exc}") from None
        return Credentials("", "in-cluster")
    if env.get("KUBECONFIG"):
        return _loaded(Credentials(env["KUBECONFIG"], "$KUBECONFIG"))
    default = (home or Path.home()) / ".kube" / "config"
    if default.is_file():
        return _loaded(Credentials(str(default), "~/.kube/config"))
    raise CredentialsError("no Kubernetes credentials: not running in a cluster, $KUBECONFIG is not set and "
                           f"{default} does not exist; pass --kubeconfig FILE, set KUBECONFIG, or run "
                           "kube-extender in a Pod with a ServiceAccount")


def _loaded(creds: Credentials) -> Credentials:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    try:
        k8s_config.load_kube_config(config_file=creds.kubeconfig, client_configuration=k8s.Configuration())
    except (k8s_config.ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as exc:
        # the client reports a file that is not YAML or not a mapping by the parser's or Python's
        # own exceptions; all of them mean "this kubeconfig cannot be used"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CredentialsError(f"cannot use the kubeconfig {creds.kubeconfig} (from {creds.source}): {first}; "
                               "pass --kubeconfig FILE with a working one") from None
    return creds


def find_credentials_apart(explicit: str | None = None) -> Credentials:
    """``find_credentials`` in a forked child process, for the server's master: loading credentials
    imports the Kubernetes client, which imports urllib3 and its ``ssl`` names; in a process that
    later forks gunicorn's gevent worker, those references escape gevent's patching of ``ssl``, and
    API requests over TLS would block the whole worker. The master only learns the answer. Raises
    CredentialsError like ``find_credentials``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, never return into the caller's code
        os.close(read)
        try:
            creds = find_credentials(explicit)
            answer = {"kubeconfig": creds.kubeconfig, "source": creds.source}
        except CredentialsError as exc:
            answer = {"error": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - anything else is still one line for the user
            answer = {"error": f"looking for Kubernetes credentials failed: {type(exc).__name__}: {exc}"}
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(answer))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answers:
        text = answers.read()
    os.waitpid(pid, 0)
    answer = json.loads(text) if text else {"error": "looking for Kubernetes credentials failed"}
    if "error" in answer:
        raise CredentialsError(answer["error"])
    return Credentials(answer["kubeconfig"], answer["source"])
