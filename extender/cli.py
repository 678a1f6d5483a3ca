"""The ``kube-extender`` command.

    kube-extender serve [--config FILE] [--cluster FILE] [--host H] [--port P] [--threads N]
    kube-extender config scheduler [--config FILE] [--url URL] [--full]
    kube-extender config check FILE
    kube-extender plugins [--json]
    kube-extender simulate [--cluster FILE] [--workload FILE] [--config FILE] [--seed N] [--extender URL]
                           [--out DIR] [--version 1.29|1.30] [--real-time] [--quiet]
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
from typing import Any, Callable, Sequence

import yaml

from extender import __version__
from extender.cluster.kube.credentials import CredentialsError
from extender.cluster.memory import MemoryCluster
from extender.cluster.objects import ClusterFileError
from extender.cluster.parsed import load_parsed, parse_apart, remove_parsed
from extender.config.model import ConfigError, ExtenderConfig, load_config
from extender.framework.durations import format_duration
from extender.logs import setup_logging
from extender.metrics import Metrics
from extender.runtime.registry import PluginLoadError
from extender.sim import cli as sim_cli

log = logging.getLogger("extender.cli")

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kube-extender",
                                description="A Kubernetes scheduler extender running its own scheduling framework.")
    p.add_argument("--version", action="version", version=f"kube-extender {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the extender verbs over HTTP (gunicorn, one worker)",
                           description="Serve filter/prioritize/preempt/bind. Without --cluster the embedded "
                                       "demo cluster is used.")
    serve.add_argument("--config", metavar="FILE", help="ExtenderConfiguration YAML (default: built-in defaults)")
    serve.add_argument("--cluster", metavar="FILE|kube",
                       help="'kube' to follow a real cluster (credentials: --kubeconfig, else in-cluster, else "
                            "$KUBECONFIG, else ~/.kube/config), or a YAML file of Nodes and Pods to serve from "
                            "memory (default: the embedded demo cluster)")
    serve.add_argument("--kubeconfig", metavar="FILE", help="with --cluster kube: use this kubeconfig")
    serve.add_argument("--host", help="address to listen on (default: server.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: server.port, 8888)")
    serve.add_argument("--threads", type=int,
                       help="request threads of the gthread worker (default: server.threads, 64); refused with the "
                            "gevent worker (the default), whose concurrency is server.connections")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default: server.logLevel")

    config = sub.add_parser("config", help="work with the configuration",
                            description="Print the kube-scheduler stanza or check a configuration file.")
    csub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    sched = csub.add_parser("scheduler", help="print the KubeSchedulerConfiguration `extenders:` entry",
                            description="Print the kube-scheduler (kubescheduler.config.k8s.io/v1) extenders entry "
                                        "that matches this extender's configuration.")
    sched.add_argument("--config", metavar="FILE", help="ExtenderConfiguration YAML (default: built-in defaults)")
    sched.add_argument("--url", help="urlPrefix kube-scheduler should call (default: extender.urlPrefix)")
    sched.add_argument("--full", action="store_true",
                       help="print a whole KubeSchedulerConfiguration with one profile per schedulerName")
    check = csub.add_parser("check", help="validate a configuration file (plugins and their args included)",
                            description="Exit 0 and print a summary if FILE is valid; else list every problem "
                                        "with its key path and exit 1.")
    check.add_argument("file", metavar="FILE")
    plugins = sub.add_parser("plugins", help="list the plugins this installation can enable",
                             description="List every plugin, built in or installed as a package (entry-point "
                                         "group kube_extender.plugins): package, version, extension points and "
                                         "args. Exit 1 with one line naming the package when one does not load "
                                         "or two share a name.")
    plugins.add_argument("--json", action="store_true", help="print the list as JSON (args as JSON schemas)")
    sim_cli.add_parser(sub)
    return p


POD_MAX_BACKOFF_SECONDS = 4
"""kube-scheduler's ``podMaxBackoffSeconds`` we ship (default there: 10). A pod the extender
rejected for lack of a managed resource is retried only when its backoff has run out, whatever
events come; under churn every waiting pod is retried and rejected in the same waves, so their
backoffs line up, and capacity freed just after a wave sat idle for up to the whole backoff (~8 s
with 10). 4 s bounds that wait at the cost of retrying each unschedulable pod every 4 s instead of
10 s: one cheap filter call each (benchmarks/churn.py measures both)."""


def scheduler_configuration(config: ExtenderConfig, url: str | None = None) -> dict[str, Any]:
    """A whole KubeSchedulerConfiguration for this extender: one profile per schedulerName, the
    ``extenders`` entry, and the backoff we ship (``POD_MAX_BACKOFF_SECONDS``)."""
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "podMaxBackoffSeconds": POD_MAX_BACKOFF_SECONDS,
            "profiles": [{"schedulerName": p.scheduler_name} for p in config.profiles],
            "extenders": [scheduler_entry(config, url)]}


def scheduler_entry(config: ExtenderConfig, url: str | None = None) -> dict[str, Any]:
    """The kube-scheduler ``extenders:`` entry consistent with ``config``."""
    e = config.extender
    entry: dict[str, Any] = {"urlPrefix": url or e.url_prefix}
    for key, verb in (("filterVerb", e.filter_verb), ("prioritizeVerb", e.prioritize_verb),
                      ("preemptVerb", e.preempt_verb), ("bindVerb", e.bind_verb)):
        if verb:
            entry[key] = verb
    if e.prioritize_verb:
        entry["weight"] = e.weight
    # kube-scheduler's enableHTTPS does not pick the scheme (the URL does); without a CA it turns
    # the certificate check off: said only with a CA, or where insecure is asked for anyway
    tls = e.tls_config or {}
    entry["enableHTTPS"] = (url or e.url_prefix).startswith("https://") and bool(tls.get("caFile") or tls.get("insecure"))
    if e.tls_config:
        entry["tlsConfig"] = dict(e.tls_config)
    entry["httpTimeout"] = format_duration(e.http_timeout)
    entry["nodeCacheCapable"] = e.node_cache_capable
    entry["ignorable"] = e.ignorable
    entry["managedResources"] = [{"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                                 for r in config.managed_resources]
    return entry


def load_checked(path: str | None) -> ExtenderConfig:
    """The configuration file with every profile built as ``serve`` would build it. ConfigError
    lists every problem at once: the schema's, and the plugins' of the profiles that parsed (a
    profile with a schema problem is left out; the others keep their ``profiles[i]`` of the file)."""
    from extender.app import checked, profile_problems

    try:
        return checked(load_config(path))
    except ConfigError as exc:
        if exc.partial is None:
            raise
        more = [(exc.file_path(key), message) for key, message in profile_problems(exc.partial)]
        raise ConfigError(exc.problems + more, exc.source) from None


def _print_scheduler(args: argparse.Namespace) -> int:
    config = load_checked(args.config)
    if args.full:
        sys.stdout.write(yaml.safe_dump(scheduler_configuration(config, args.url), sort_keys=False))
    else:
        sys.stdout.write("# Add to your KubeSchedulerConfiguration (apiVersion: kubescheduler.config.k8s.io/v1), "
                         f"with podMaxBackoffSeconds: {POD_MAX_BACKOFF_SECONDS}:\n")
        sys.stdout.write(yaml.safe_dump({"extenders": [scheduler_entry(config, args.url)]}, sort_keys=False))
    return 0


def _check(args: argparse.Namespace) -> int:
    config = load_checked(args.file)
    profiles = ", ".join(p.scheduler_name for p in config.profiles)
    managed = ", ".join(sorted(config.managed_names)) or "(none)"
    print(f"{args.file}: ok (profiles: {profiles}; managed resources: {managed}; "
          f"verbs: {', '.join(config.verbs())}; httpTimeout: {format_duration(config.extender.http_timeout)})")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    import json

    from extender.app import plugin_registry
    from extender.runtime.catalog import args_lines, describe

    plugins = describe(plugin_registry())
    if args.json:
        print(json.dumps(plugins, indent=2))
        return 0
    for p in plugins:
        points = ("(not known before it is built)" if p["extensionPoints"] is None
                  else ", ".join(p["extensionPoints"]))
        print(f"{p['name']}  ({p['package']} {p['version']})".rstrip())
        if p["description"]:
            print(f"  {p['description']}")
        if p["entryPoint"]:
            print(f"  entry point: {p['entryPoint']}")
        print(f"  extension points: {points}")
        print("  args:")
        print("\n".join(args_lines(p["args"])))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from extender.app import create_app, shutdown
    from extender.server import ExtenderServer, tls_problems

    # Everything that can be refused is refused here, before forking, in one line each (a
    # configuration: one line per problem) - never as a worker's traceback.
    config = load_checked(args.config).with_server(host=args.host, port=args.port, threads=args.threads,
                                                   log_level=args.log_level)
    tls_refused = tls_problems(config.server.tls)  # the workers load the files only once they serve
    if tls_refused:
        raise ConfigError(tls_refused, args.config or "")
    if args.threads is not None and config.server.worker != "gthread":
        print(f"kube-extender: --threads applies to the gthread worker; the {config.server.worker} worker serves up "
              f"to server.connections ({config.server.connections}) requests at once. Set server.worker: gthread "
              "to use threads, or server.connections", file=sys.stderr)
        return 2
    setup_logging(config.server.log_level, config.server.log_format)
    kube = args.cluster == "kube"
    cluster_file = None if kube else args.cluster
    if args.kubeconfig and not kube:
        print("kube-extender: --kubeconfig needs --cluster kube", file=sys.stderr)
        return 2
    kubeconfig = None
    if kube:
        from extender.cluster.kube.credentials import find_credentials_apart
        credentials = find_credentials_apart(args.kubeconfig)
        log.info("kubernetes credentials", extra={"source": credentials.source,
                                                  "kubeconfig": credentials.kubeconfig or "-"})
        kubeconfig = credentials.kubeconfig or None
    # Parse the cluster file before forking, so a bad file fails here with a clear message - in a
    # child process, so the master does not keep the parsed objects (extender.cluster.parsed).
    parsed = parse_apart(cluster_file) if cluster_file else None
    if parsed is not None:
        atexit.register(remove_parsed, parsed, os.getpid())

    def factory() -> Any:
        setup_logging(config.server.log_level, config.server.log_format)
        if kube:
            from extender.app import create_kube_app
            return create_kube_app(config, kubeconfig=kubeconfig)
        metrics = Metrics()
        source = (MemoryCluster(load_parsed(parsed), metrics=metrics) if parsed is not None
                  else MemoryCluster.demo())
        return create_app(config, source=source, metrics=metrics)

    tls = config.server.tls
    ExtenderServer(factory, host=config.server.host, port=config.server.port, threads=config.server.threads,
                   log_level=config.server.log_level, cert_file=tls.cert_file, key_file=tls.key_file,
                   client_ca_file=tls.client_ca_file, worker=config.server.worker,
                   connections=config.server.connections, on_exit=shutdown).run()
    return 0


def sim_wiring() -> sim_cli.Wiring:
    """What ``simulate`` needs from the layers above ``extender.sim``."""
    from extender.app import create_app

    def load_cluster(path: str | None) -> MemoryCluster:
        # every Event is kept: the report tells the extender's evictions by them
        return MemoryCluster.from_file(path, event_log=None) if path else MemoryCluster.demo(event_log=None)

    return sim_cli.Wiring(load_config=load_checked, create_app=create_app, scheduler_entry=scheduler_entry,
                          load_cluster=load_cluster, background=_background_passes,
                          user_errors=(ConfigError, ClusterFileError))


def _simulate(args: argparse.Namespace) -> int:
    return sim_cli.run(args, sim_wiring())


def _background_passes(app: Any) -> tuple[Callable[[], bool], Callable[[], bool]]:
    """One pass of the app's background loops (admission, nudges and wake-ups: did it do
    anything?), and whether another pass may still do something: the cluster changed since the
    last question, or wake-ups are not yet due."""
    state = app.extensions["kube_extender"]
    seen = [-1]

    def run() -> bool:
        admitted = state.admitter.run_once().admitted if state.admitter is not None else []
        return bool(admitted) | bool(state.nudger.run_once())

    def busy() -> bool:
        changes, seen[0] = seen[0], state.cache.change_count()
        return changes != seen[0] or state.queue.wakeups.pending() > 0

    return run, busy


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "plugins":
            return _plugins(args)
        if args.config_command == "scheduler":
            return _print_scheduler(args)
        return _check(args)
    except ConfigError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        count = len(exc.problems)
        print(f"kube-extender: {exc.source or 'the configuration'} is not a valid configuration "
              f"({count} problem{'s' if count != 1 else ''})", file=sys.stderr)
        return 1
    except (ClusterFileError, CredentialsError, PluginLoadError) as exc:
        print(f"kube-extender: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
