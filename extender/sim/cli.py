"""``kube-extender simulate``: run a workload through an emulated kube-scheduler and this extender.

    kube-extender simulate [--cluster FILE] [--workload FILE] [--config FILE] [--seed N]
                           [--extender URL] [--out DIR] [--version 1.29|1.30] [--real-time] [--quiet]

Without ``--extender`` the extender runs in-process (``create_app`` with the ``--config``
ExtenderConfiguration) on the same in-memory cluster as the emulated scheduler, which calls it
through the Flask test client. The scheduler side is derived from the same configuration as
``kube-extender config scheduler`` prints it (verbs, weight, nodeCacheCapable, managedResources,
httpTimeout, ignorable). With ``--extender URL`` (the urlPrefix of a running extender) the
scheduler talks HTTP to it and keeps its own copy of the cluster, where it is the only writer it
knows about: the remote extender must serve the same cluster for the results to mean anything.

Defaults: the embedded demo cluster and the sample workload shipped in
``extender/sim/data/sample-workload.yaml``; output in ``./simulation-out`` (report.json,
report.txt, utilization.svg).

``extender.sim`` may not import ``extender.app``, ``extender.config`` or ``extender.cluster``
(``.importlinter``: sibling layers are independent), so ``extender.cli`` passes them in a
:class:`Wiring`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from extender.sim.client import AppTransport, HTTPTransport, Transport, TransportError, tls_context
from extender.sim.config import ExtenderSpec, SchedulerConfig, SimConfigError
from extender.sim.report import OutputError, build_report, prepare_out_dir, render_text, write_outputs
from extender.sim.clocks import RealClock, VirtualClock
from extender.sim.scheduler import Scheduler
from extender.sim.workload import WorkloadError, cluster_extras, load_workload

DEFAULT_OUT = "simulation-out"


@dataclass(frozen=True)
class Wiring:
    """What ``simulate`` needs from the layers above ``extender.sim``:

    * ``load_config(path | None)`` -> ExtenderConfig (``extender.config.model.load_config``);
    * ``create_app(config, source=cluster)`` -> Flask app (``extender.app.create_app``);
    * ``scheduler_entry(config, url | None)`` -> the ``extenders[]`` dict (``extender.cli.scheduler_entry``);
    * ``load_cluster(path | None)`` -> MemoryCluster (``MemoryCluster.from_file`` / ``MemoryCluster.demo``);
    * ``background(app)`` -> (run the app's background passes once - admission, nudges and
      wake-ups - returning whether they did anything, "is there work they may still do?"), for
      running them in virtual time;
    * ``user_errors``: exception types to report as "kube-extender: <message>", exit 1.
    """

    load_config: Callable[[str | None], Any]
    create_app: Callable[..., Any]
    scheduler_entry: Callable[[Any, str | None], dict[str, Any]]
    load_cluster: Callable[[str | None], Any]
    background: Callable[[Any], tuple[Callable[[], bool], Callable[[], bool]]]
    user_errors: tuple[type[BaseException], ...] = ()


def sample_workload_path() -> Path:
    return Path(str(importlib_resources.files("extender.sim").joinpath("data/sample-workload.yaml")))


def _demo_cluster_text() -> str:
    return importlib_resources.files("extender").joinpath("cluster/data/demo-cluster.yaml").read_text()


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "simulate", help="run a workload through an emulated kube-scheduler and this extender",
        description="Emulate kube-scheduler's scheduling loop (queue, in-tree filters and scores, extender "
                    "filter/prioritize/preempt/bind, asynchronous binding, preemption) against this extender, "
                    "in-process or at --extender URL, in virtual time; print a report and write report.json, "
                    "report.txt and utilization.svg into --out.")
    p.add_argument("--cluster", metavar="FILE",
                   help="YAML file of Nodes, Pods, PriorityClasses, PodDisruptionBudgets (default: the embedded demo cluster)")
    p.add_argument("--workload", metavar="FILE", help="workload YAML (default: the shipped sample workload)")
    p.add_argument("--config", metavar="FILE", help="ExtenderConfiguration YAML (default: built-in defaults)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed: tie-breaks, preemption offsets, UIDs (default 0)")
    p.add_argument("--extender", metavar="URL",
                   help="urlPrefix of a running extender to call over HTTP; it must see the same cluster as the "
                        "simulation (a served memory cluster does not see the simulated pods) "
                        "(default: run the extender in-process)")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"output directory (default ./{DEFAULT_OUT})")
    p.add_argument("--version", dest="k8s_version", choices=["1.29", "1.30"], default="1.30",
                   help="kube-scheduler behaviour to emulate: 1.29, or 1.30 and later (default 1.30)")
    p.add_argument("--graceful-termination", action="store_true",
                   help="deleted and preempted pods stay on their node, terminating, for their "
                        "terminationGracePeriodSeconds (default 30) as a kubelet keeps them, instead of "
                        "disappearing at once")
    p.add_argument("--real-time", action="store_true",
                   help="run on the wall clock (arrivals, backoffs and deletions really wait) instead of virtual time")
    p.add_argument("--progress-every", type=int, default=500, metavar="N",
                   help="print a progress line every N scheduling cycles (and every 5 s) on stderr (default 500)")
    p.add_argument("--quiet", action="store_true", help="no progress lines; print only the summary and the files written")
    return p


def _progress(scheduler: Scheduler, wall0: float) -> None:
    with scheduler._cond:  # noqa: SLF001 - a consistent read of the counters
        bound = sum(1 for t in scheduler.traces.values() if t.state == "bound")
        pending = sum(1 for t in scheduler.traces.values() if t.state == "pending")
        cycles = len(scheduler.cycles)
    print(f"[simulate] t={scheduler.clock.elapsed():.1f}s virtual, {time.perf_counter() - wall0:.1f}s wall: "
          f"{cycles} cycles, {bound} bound, {pending} pending", file=sys.stderr, flush=True)


def _fetch_snapshot(transport: Transport, url_prefix: str, path: str = "/debug/snapshot") -> dict[str, Any] | None:
    parts = urlsplit(url_prefix)
    url = f"{parts.scheme or 'http'}://{parts.netloc}{path}"
    try:
        resp = transport.get(url, 5.0)
        if resp.status != 200:
            return None
        data = json.loads(resp.body)
        return data if isinstance(data, dict) else None
    except (TransportError, ValueError, OSError):
        return None


def run(args: argparse.Namespace, wiring: Wiring) -> int:
    try:
        return _run(args, wiring)
    except (WorkloadError, SimConfigError, OutputError) as exc:
        print(f"kube-extender: {exc}", file=sys.stderr)
        return 1
    except wiring.user_errors as exc:  # type: ignore[misc]
        print(f"kube-extender: {exc}", file=sys.stderr)
        return 1


def _run_background_in_virtual_time(scheduler: Scheduler, run: Callable[[], bool], busy: Callable[[], bool],
                                    every: float) -> None:
    """The in-process extender's admission, nudge and wake-up passes as emulator actions every
    ``every`` virtual seconds while the workload has actions left or ``busy()`` says another pass
    may still do something (bounded by the emulator's horizon, ``max_virtual_seconds``, without
    progress), so a run with a pod that can never be admitted still ends."""
    last_progress = scheduler.clock.now()

    def tick() -> None:
        nonlocal last_progress
        now = scheduler.clock.now()
        if run():
            last_progress = now
        more = scheduler.pending_actions() > 0
        if more or (busy() and now - last_progress <= scheduler.cfg.max_virtual_seconds):
            scheduler.after(every, "extender background passes", tick)
    scheduler.at(scheduler.clock.now(), "extender background passes", tick)


def _run(args: argparse.Namespace, wiring: Wiring) -> int:
    config = wiring.load_config(args.config)
    cluster = wiring.load_cluster(args.cluster)  # validates the file, with the project's messages
    cluster_text = Path(args.cluster).read_text() if args.cluster else _demo_cluster_text()
    classes, pdbs = cluster_extras(cluster_text)
    workload = load_workload(args.workload or sample_workload_path(), seed=args.seed, priority_classes=classes)
    prepare_out_dir(args.out)  # before the run, not after it: its results would be lost
    entry = wiring.scheduler_entry(config, args.extender)
    transport: Transport
    clock = RealClock() if args.real_time else VirtualClock()
    app = None
    if args.extender:
        transport = HTTPTransport(tls_context(ExtenderSpec.from_dict(entry)))
    elif args.real_time:
        transport = AppTransport(wiring.create_app(config, source=cluster))
    else:  # the extender's background passes run in virtual time too
        app = wiring.create_app(config, source=cluster, clock=clock, background=False)
        transport = AppTransport(app)
    sched_config = SchedulerConfig.from_dict({"extenders": [entry]}, transports=[transport],
                                             version=args.k8s_version, seed=args.seed)
    scheduler = Scheduler(sched_config, cluster, clock=clock, pdbs=pdbs, mirror_extender_binds=bool(args.extender),
                          graceful_termination=args.graceful_termination)
    workload.install(scheduler, cluster)
    if app is not None:
        _run_background_in_virtual_time(scheduler, *wiring.background(app), every=config.admission.interval)
    wall0 = time.perf_counter()
    if not args.quiet:
        mode = f"extender at {args.extender}" if args.extender else "extender in-process"
        print(f"[simulate] {len(workload.pods)} workload pods from {workload.origin}; {mode}; "
              f"kube-scheduler {args.k8s_version} behaviour", file=sys.stderr, flush=True)
    summary = scheduler.run(progress=None if args.quiet else (lambda s: _progress(s, wall0)),
                            progress_every=max(args.progress_every, 0), progress_seconds=0 if args.quiet else 5.0)
    scheduler.close()
    managed = [r["name"] for r in entry.get("managedResources") or []]
    report = build_report(scheduler, summary, managed=managed,
                          extender_snapshot=_fetch_snapshot(transport, entry["urlPrefix"]),
                          extender_quota=_fetch_snapshot(transport, entry["urlPrefix"], "/debug/quota"),
                          cluster_events=getattr(cluster, "events", ()))
    if args.quiet:
        s = report["summary"]
        print(f"{s['pods']} pods: {s['bound']} bound, {s['pending']} pending, {s['preempted']} preempted, "
              f"{s['completed']} completed")
    else:
        sys.stdout.write(render_text(report))
    sys.stdout.flush()  # the results are out even if writing the files fails after all
    paths = write_outputs(report, args.out)
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    transport.close()
    if report["summary"]["endReason"].startswith("crashed"):
        print(f"simulate: the emulated kube-scheduler {report['summary']['endReason']}", file=sys.stderr)
        return 3
    return 0
