#!/usr/bin/env python3
"""Bind cost: what binding through kube-extender costs, against kube-scheduler binding itself.

    python benchmarks/bind_cost.py                       # 200 nodes x 16 GPUs, 2,000 pods of 1 GPU (~1 min)
    python benchmarks/bind_cost.py --quick               # 20 nodes, 200 pods (~20 s)
    python benchmarks/bind_cost.py --before /tmp/old/.venv/bin/kube-extender    # also measure another installation

Everything goes through the real transport: ``extender.testing.harness`` runs the fake API server
(real HTTP, list/watch, Bindings) and the emulated kube-scheduler (1.30, ``RealClock``) in this
process, and kube-extender as a ``kube-extender serve --cluster kube`` process (gunicorn master +
gevent worker), so its CPU time can be read from ``/proc``. The same workload runs twice in one
invocation: once with the extender's ``bindVerb: ""`` (it answers filter and prioritize, the
emulated kube-scheduler writes the Binding) and once with the extender binding (``bindVerb:
bind``). Each run: the nodes are seeded, the extender starts and syncs, its idle CPU rate is
measured for ``--idle`` seconds, then ``--pods`` pods are created at once and the run ends when all
are bound (or nothing was bound for ``--stall`` seconds).

Printed per run: pods bound, bound pods/s (first creation to last Binding), the binding cycle's
p50/p99 (from the end of the scheduling cycle that chose the node to the end of the binding
cycle, as the emulated kube-scheduler runs it: the extender's bind verb or its own Binding), the
extender verbs called, API requests per bound pod by client (User-Agent), verb and resource, the
connections each client used (distinct client addresses in the API server's request log), and
the extender's CPU seconds (master + worker, ``utime + stime``, less the idle rate over the same
wall time).

The two figures the runs exist for:

* **writes per bound pod by the extender's client**: Bindings and the pod patches made while
  binding. Scheduling-gate removals, nudges, nomination clears, Events and Leases are printed
  separately and not counted; the emulator's own writes are another client's. Target: 1.0.
* **extender CPU per 1,000 binds against per 1,000 filter+prioritize pairs**: a pair costs the
  CPU of the run where kube-scheduler binds divided by its pairs (an upper bound: it includes
  following every pod through the watch, which the other run does as well); a bind costs what the
  run where the extender binds used beyond its pairs at that price, divided by its binds. Target:
  a bind costs no more than a pair.

``--before EXE`` runs both modes against another installation's ``kube-extender`` first (same
harness, same workload; e.g. a ``git worktree`` of an older commit with its own venv) and prints
its columns beside the current code's. A script that prints figures, not a test: exit status 0
when every run produced figures, 1 when a run failed; a missed target is reported, not failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchkit import percentile
from extender.sim.records import CycleRecord, PodTrace
from extender.testing.fakeapi.faults import RequestRecord
from extender.testing.harness import Harness, HarnessError, node, pod
from extender.testing.harness.extenders import ProcessExtender

EXTENDER = "kube-extender"
SCHEDULER = "kube-scheduler"
NUDGE_ANNOTATION = "nudged-at"


@dataclass
class Run:
    label: str
    mode: str
    """``scheduler`` (kube-scheduler binds) or ``extender`` (kube-extender binds)."""
    pods: int = 0
    bound: int = 0
    bind_failures: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Why binding cycles failed (the emulated kube-scheduler's message, shortened)."""
    wall: float = 0.0
    binds_ms: list[float] = field(default_factory=list)
    verbs: Counter[str] = field(default_factory=Counter)
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """(client, verb, resource) -> count; the client is ``kube-extender`` or ``kube-scheduler``."""
    writes: Counter[str] = field(default_factory=Counter)
    """The extender's writes by kind: binding, pod patch (counted), gate, nudge, status, event, lease."""
    connections: Counter[str] = field(default_factory=Counter)
    pool_full: int = 0
    """urllib3's "Connection pool is full, discarding connection" warnings in the extender's log."""
    cpu: float = 0.0
    system: float = 0.0
    """The kernel's share of the CPU time (stime / (utime + stime))."""
    idle_rate: float = 0.0
    error: str = ""

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.wall if self.wall > 0 else 0.0

    @property
    def pairs(self) -> int:
        return self.verbs["filter"]

    @property
    def counted_writes(self) -> int:
        return self.writes["binding"] + self.writes["pod patch"]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20 nodes, 200 pods")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--gpus", type=int, default=16, help="GPUs per node")
    p.add_argument("--pods", type=int, default=2000, help="pods of 1 GPU, created at once")
    p.add_argument("--api-latency", type=float, default=0.0, metavar="SECONDS",
                   help="the API server answers every pod write this much later (as an etcd commit would)")
    p.add_argument("--idle", type=float, default=3.0, help="seconds of idle CPU measured before the pods")
    p.add_argument("--stall", type=float, default=30.0, help="end a run after this long without a binding")
    p.add_argument("--before", metavar="EXE", help="also measure this kube-extender executable, first")
    p.add_argument("--repeat", type=int, default=1, help="run every mode this many times, in turn; medians printed")
    p.add_argument("--only", choices=("scheduler", "extender"), help="run one mode only")
    p.add_argument("--keep", action="store_true", help="keep the harness directories (configs, extender logs)")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.pods = 20, 200
    if args.pods > args.nodes * args.gpus:
        p.error(f"--pods {args.pods} do not fit on {args.nodes} nodes x {args.gpus} GPUs")
    return args


# ---- the extender process ----------------------------------------------------------------------------

def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the gunicorn master and its worker)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _cpu(pids: list[int]) -> tuple[float, float]:
    """(utime, stime) of ``pids``, in seconds (a process gone counts 0)."""
    user = system = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user, system = user + int(fields[11]), system + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def _version(exe: Path) -> str:
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
        return (out.stdout or out.stderr).strip().splitlines()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown version"


# ---- one run -----------------------------------------------------------------------------------------------

def _write_kind(rec: RequestRecord) -> str:
    """What one of the extender's writes was for (see the module docstring)."""
    if rec.resource == "pods/binding":
        return "binding"
    if rec.resource == "pods":
        body = rec.body if isinstance(rec.body, dict) else {}
        if "schedulingGates" in (body.get("spec") or {}):
            return "gate"
        keys = list(((body.get("metadata") or {}).get("annotations") or {}))
        if keys and all(k.endswith(NUDGE_ANNOTATION) for k in keys):
            return "nudge"
        return "pod patch"
    if rec.resource == "pods/status":
        return "status"
    if rec.resource == "events":
        return "event"
    if rec.resource == "leases":
        return "lease"
    return f"{rec.verb} {rec.resource}"


def _client(agent: str) -> str:
    """The API server's clients are the emulated kube-scheduler and the extender (the harness
    writes to the store directly; older kube-extenders sent the Kubernetes client's default
    User-Agent)."""
    return SCHEDULER if agent.startswith(SCHEDULER) else EXTENDER


def run_once(label: str, mode: str, args: argparse.Namespace, exe: Path | None) -> Run:
    run = Run(label, mode, pods=args.pods)
    config: dict[str, Any] = {"extender": {"bindVerb": ""}} if mode == "scheduler" else {}
    nodes = [node(f"node-{i:03d}", args.gpus) for i in range(args.nodes)]
    chosen: dict[str, float] = {}
    lock = threading.Lock()

    def scheduled(record: CycleRecord) -> None:
        if record.outcome == "scheduled":
            with lock:
                chosen[record.pod] = time.perf_counter()

    def bound(trace: PodTrace) -> None:
        done = time.perf_counter()
        with lock:
            start = chosen.pop(trace.key, None)
            if start is not None:
                run.binds_ms.append((done - start) * 1000)

    workdir = tempfile.mkdtemp(prefix=f"bind-cost-{label}-{mode}-") if args.keep else None
    h = Harness(objects=nodes, extender=config, processes=True, probe_period=1.0, sync_timeout=120,
                extender_executable=exe, workdir=workdir)
    try:
        h.start()
        replica = h.replicas[0]
        assert isinstance(replica, ProcessExtender) and replica.pid is not None and h.scheduler is not None
        h.scheduler.on_cycle.append(scheduled)
        h.scheduler.on_bound.append(bound)
        pids = _tree(replica.pid)
        c0, t0 = sum(_cpu(pids)), time.perf_counter()
        time.sleep(args.idle)
        (u1, s1), t1 = _cpu(pids), time.perf_counter()
        run.idle_rate = (u1 + s1 - c0) / (t1 - t0)
        h.api.clear_requests()
        if args.api_latency > 0:
            for method in ("POST", "PATCH", "PUT"):
                h.api.add_latency(method, r"/pods/[^/]+(/[a-z]+)?$", args.api_latency)
        calls_before = len(h.scheduler.stats.snapshot())
        start = time.perf_counter()
        first = h.now()
        for i in range(args.pods):
            h.create_pod(pod(f"p-{i:05d}", 1))
        last_count, last_change = 0, time.perf_counter()
        while True:
            count = sum(1 for life in h.lives if life.bound_at is not None)
            if count != last_count:
                last_count, last_change = count, time.perf_counter()
            if count >= args.pods or time.perf_counter() - last_change > args.stall:
                break
            time.sleep(0.05)
        times = [life.bound_at for life in h.lives if life.bound_at is not None]
        run.bound = len(times)
        run.wall = (max(times) - first) if times else 0.0
        scheduler = h.scheduler
        h.wait_until(lambda: scheduler.binds + scheduler.bind_failures >= run.bound, 10.0)  # the last cycles end
        time.sleep(1.0)  # the extender follows the last Bindings through its watch
        (u2, s2), t2 = _cpu(_tree(replica.pid)), time.perf_counter()
        run.cpu = max(0.0, (u2 + s2 - u1 - s1) - run.idle_rate * (t2 - start))
        run.system = (s2 - s1) / max(1e-9, u2 + s2 - u1 - s1)
        run.bind_failures = h.scheduler.bind_failures
        run.failures = Counter(t.message[:160] for t in h.scheduler.traces.values() if t.message)
        run.verbs = Counter(s.verb for s in h.scheduler.stats.snapshot()[calls_before:])
        peers: dict[str, set[Any]] = {}
        for rec in h.api.requests():
            who = _client(rec.user_agent)
            run.requests[(who, rec.verb, rec.resource)] += 1
            peers.setdefault(who, set()).add(rec.peer)
            if who == EXTENDER and rec.method in ("POST", "PUT", "PATCH", "DELETE"):
                run.writes[_write_kind(rec)] += 1
        run.connections = Counter({who: len(p) for who, p in peers.items()})
        run.pool_full = replica.log_file.read_text(errors="replace").count("Connection pool is full")
    except (HarnessError, AssertionError, OSError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        h.stop()
        if workdir:
            print(f"  ({label}, {_binder(mode)}: configuration and extender log kept in {workdir})")
    return run


# ---- the report --------------------------------------------------------------------------------------------

def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _costs(runs: list[Run]) -> tuple[list[float], list[float]]:
    """CPU seconds per 1,000 pairs (one per run where kube-scheduler binds) and per 1,000 binds
    (one per run where the extender binds, its pairs priced at the median of the former) of one
    installation's runs."""
    pairs = [r.cpu / r.pairs * 1000 for r in runs if r.mode == "scheduler" and not r.error and r.pairs]
    pair = _median(pairs)
    binds = [(r.cpu - r.pairs * pair / 1000) / r.verbs["bind"] * 1000
             for r in runs if r.mode == "extender" and not r.error and r.verbs["bind"] and pairs]
    return pairs, binds


def _table(rows: list[tuple[str, list[str]]], heads: list[str]) -> None:
    width = max(len(r[0]) for r in rows)
    cols = [max(len(h), *(len(r[1][i]) for r in rows)) for i, h in enumerate(heads)]
    print(f"  {'':<{width}}  " + "  ".join(f"{h:>{w}}" for h, w in zip(heads, cols)))
    for name, cells in rows:
        print(f"  {name:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, cols)))


def _binder(mode: str) -> str:
    return "kube-scheduler binds" if mode == "scheduler" else "extender binds"


def report(runs: list[Run]) -> None:
    """One column per installation and mode; with repeated runs each cell is the median."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.label, r.mode), []).append(r)
    heads = [f"{label}: {_binder(mode)}" for label, mode in groups]

    def row(name: str, fn: Callable[[Run], float], fmt: str = "{:.1f}") -> tuple[str, list[str]]:
        cells = []
        for group in groups.values():
            ok = [fn(r) for r in group if not r.error]
            cells.append(fmt.format(_median(ok)) if ok else "failed")
        return name, cells

    rows = [
        row("pods bound", lambda r: r.bound, "{:.0f}"),
        row("bind failures (retried)", lambda r: r.bind_failures, "{:.0f}"),
        row("wall s (creation -> last Binding)", lambda r: r.wall),
        row("bound pods/s", lambda r: r.pods_per_second),
        row("binding cycle p50 ms", lambda r: percentile(r.binds_ms, 50)),
        row("binding cycle p99 ms", lambda r: percentile(r.binds_ms, 99)),
        row("extender filter calls", lambda r: r.verbs["filter"], "{:.0f}"),
        row("extender prioritize calls", lambda r: r.verbs["prioritize"], "{:.0f}"),
        row("extender bind calls", lambda r: r.verbs["bind"], "{:.0f}"),
        row("extender CPU s (net of idle)", lambda r: r.cpu, "{:.2f}"),
        row("  of which in the kernel %", lambda r: 100 * r.system, "{:.0f}"),
        row("extender idle CPU s per s", lambda r: r.idle_rate, "{:.3f}"),
    ]

    def per_pod(key: tuple[str, str, str]) -> Callable[[Run], float]:
        return lambda r: r.requests[key] / max(1, r.bound)

    def writes(kind: str) -> Callable[[Run], float]:
        return lambda r: r.writes[kind]

    def connections(client: str) -> Callable[[Run], float]:
        return lambda r: r.connections[client]

    keys = sorted({k for r in runs for k in r.requests}, key=lambda k: (k[0] != EXTENDER, k))
    rows += [row(f"{who} {verb} {res or '-'} /pod", per_pod((who, verb, res)), "{:.3f}") for who, verb, res in keys]
    rows.append(row("extender writes /pod (Binding + pod patches)", lambda r: r.counted_writes / max(1, r.bound),
                    "{:.3f}"))
    kinds = sorted({k for r in runs for k in r.writes} - {"binding", "pod patch"})
    rows += [row(f"  not counted: {kind}", writes(kind), "{:.0f}") for kind in kinds]
    rows += [row(f"connections used by {who}", connections(who), "{:.0f}") for who in (EXTENDER, SCHEDULER)]
    rows.append(row("extender log: pool full, connection dropped", lambda r: r.pool_full, "{:.0f}"))
    print()
    _table(rows, heads)
    for r in runs:
        for message, n in r.failures.most_common(3):
            print(f"  {r.label}, {_binder(r.mode)}: {n} failed: {message}")

    print()
    for label in dict.fromkeys(r.label for r in runs):
        mine = [r for r in runs if r.label == label]
        pairs, binds = _costs(mine)
        pair, bind = _median(pairs), _median(binds)
        each = "" if len(mine) <= 2 else (f" (runs: pairs {', '.join(f'{x:.2f}' for x in pairs)}; "
                                          f"binds {', '.join(f'{x:.2f}' for x in binds)})")
        print(f"  {label}: extender CPU per 1,000 filter+prioritize pairs {pair:.2f} s, per 1,000 binds {bind:.2f} s"
              + each)
        bound = [r for r in mine if r.mode == "extender" and not r.error and r.bound]
        if bound:
            most = max(r.counted_writes / r.bound for r in bound)
            print(f"  {label}: writes per bound pod by the extender's client {most:.3f} (target 1.0): "
                  f"{'MET' if abs(most - 1.0) < 0.0005 else 'MISSED'}")
        if bind == bind and pair == pair:
            print(f"  {label}: CPU per bind <= per pair: {'MET' if bind <= pair else 'MISSED'} "
                  f"({bind / pair:.2f} of a pair)")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    installs: list[tuple[str, Path | None]] = []
    if args.before:
        installs.append(("before", Path(args.before)))
    installs.append(("after" if args.before else "current", None))
    print(f"bind_cost: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods of 1 GPU created at once; "
          f"emulated kube-scheduler 1.30; kube-extender as a process (gevent worker)")
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f} at start")
    for label, exe in installs:
        path = exe or Path(sys.executable).parent / "kube-extender"
        print(f"  {label}: {path} ({_version(path)})")
    runs: list[Run] = []
    modes = [args.only] if args.only else ["scheduler", "extender"]
    for rep in range(args.repeat):
        for label, exe in installs:
            for mode in modes:
                run = run_once(label, mode, args, exe)
                runs.append(run)
                print(f"  run {rep + 1}/{args.repeat}, {label}, {_binder(mode)}: "
                      + (f"FAILED: {run.error}" if run.error else
                         f"{run.bound} bound, {run.pods_per_second:.1f} pods/s, extender CPU {run.cpu:.2f} s"),
                      flush=True)
    report(runs)
    print(f"\n  load {os.getloadavg()[0]:.2f} at the end (other work on the machine skews wall time and CPU)")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
