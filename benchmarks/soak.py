#!/usr/bin/env python3
"""Fault-injection soak: mixed pods through kube-scheduler and kube-extender over a faulty API
server, the extender killed and failed over, elastic quotas on both namespaces, checked from the
API server's objects alone.

    python benchmarks/soak.py                      # 10,000 pods, 2 replicas as processes (several minutes)
    python benchmarks/soak.py --quick              # 600 pods, kills, a hand-over, tides (about 2 minutes)
    python benchmarks/soak.py --pods 3000 --seed 7 --in-process --log soak.log

Runs ``extender.testing.harness.soak`` (see its docstring for the deployment, the workload, the
faults and the checks) and prints the figures: pods by kind and outcome, gangs by outcome and how
long they stayed partly bound, quotas (pods evicted to reclaim lent quota, each namespace's peak
beyond its min, how long a namespace under its min waited while the other borrowed, the tides'
reclaim pods' time from creation to Binding), faults injected by kind (each counted once it hit
a request), extender kills (mid-bind), hand-overs, restarts and failovers, scheduling cycles and
bind failures, API requests per client, run time, and every violation found (the first 20 of
each kind). Exit status 1 on any violation, on a run that did not resolve every feasible pod, or
on a failed action; else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from collections import Counter

from extender.testing.harness import HarnessError
from extender.testing.harness.soak import SoakResult, SoakSpec, run_soak


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="600 pods on 8 nodes, a kill every 20 s, a hand-over every 30 s, a tide every 12 s")
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=SoakSpec.nodes)
    p.add_argument("--arrival-rate", type=float, default=SoakSpec.arrival_rate, help="pods per second")
    p.add_argument("--fault-rate", type=float, default=SoakSpec.fault_rate, help="API faults injected per second")
    p.add_argument("--kill-every", type=float, default=SoakSpec.kill_every, help="seconds between leader kills (0: none)")
    p.add_argument("--tide-every", type=float, default=SoakSpec.tide_every,
                   help="seconds between quota tides: one namespace borrows, the other wants its min back "
                        "(0: none)")
    p.add_argument("--handover-every", type=float, default=SoakSpec.handover_every,
                   help="seconds between clean hand-overs (0: none)")
    p.add_argument("--in-process", action="store_true", help="replicas in this process (no SIGKILL: a kill fences it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", metavar="FILE", help="write the components' logs here (default: dropped)")
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.nodes, args.kill_every, args.handover_every, args.tide_every = 600, 8, 20.0, 30.0, 12.0
    return args


def _p50(sorted_values: list[float]) -> float:
    return sorted_values[len(sorted_values) // 2]


def _print(result: SoakResult, wall: float) -> None:
    spec = result.spec
    print(f"\n== soak: {spec.pods} pods (+{spec.infeasible_pods} infeasible), {spec.nodes} nodes x {spec.devices} GPUs, "
          f"{spec.replicas} replicas ({'processes' if spec.processes else 'in process'}), seed {spec.seed} ==")
    print(f"ended: {result.reason} after {result.duration:.0f} s of workload ({wall:.0f} s wall, set-up included)")
    kinds = sorted({kind for kind, _ in result.outcomes})
    outcomes = sorted({outcome for _, outcome in result.outcomes})
    print("\npods by kind and outcome:")
    print(f"  {'kind':<11}" + "".join(f"{o:>24}" for o in outcomes) + f"{'total':>8}")
    for kind in kinds:
        row = [result.outcomes.get((kind, o), 0) for o in outcomes]
        print(f"  {kind:<11}" + "".join(f"{n:>24}" for n in row) + f"{sum(row):>8}")
    totals = Counter(o for (_, o), n in result.outcomes.items() for _ in range(n))
    print(f"  {'total':<11}" + "".join(f"{totals[o]:>24}" for o in outcomes) + f"{sum(totals.values()):>8}")
    partial = result.partial_seconds
    print(f"\ngangs: {dict(sorted(result.groups.items()))}; partly bound (first to minMember-th Binding): "
          + (f"p50 {_p50(partial):.2f} s, max {partial[-1]:.2f} s" if partial else "-"))
    waits, binds = result.reclaim_seconds, result.reclaim_bind_seconds
    print(f"quotas: {result.quota_evictions} pods evicted to reclaim lent quota; borrowed at most "
          + ", ".join(f"{ns} {n} GPUs beyond its min" for ns, n in sorted(result.borrowed_peak.items())))
    print(f"  {len(waits)} stretches under min with pending demand while others borrowed: "
          + (f"p50 {_p50(waits):.2f} s, max {waits[-1]:.2f} s ({result.longest_reclaim[1]} from "
             f"{result.longest_reclaim[2]:.1f} s)" if waits else "-"))
    print(f"  tides' reclaim pods, created to bound ({len(binds)}): "
          + (f"p50 {_p50(binds):.2f} s, max {binds[-1]:.2f} s" if binds else "-"))
    print(f"\nfaults injected ({sum(result.faults.values())}): "
          + ", ".join(f"{k} {n}" for k, n in sorted(result.faults.items())))
    print(f"extender: {result.kills} SIGKILLs ({result.kills_mid_bind} with a Binding in flight), "
          f"{result.handovers} clean hand-overs, {result.restarts} restarts, {result.failovers} failovers")
    print(f"kube-scheduler: {result.cycles} scheduling cycles, {result.bind_failures} bind failures; API requests: "
          + ", ".join(f"{k} {n}" for k, n in sorted(result.requests.items())))
    print("\nviolations (checked from the API server's objects):")
    for kind, found in result.violations.items():
        print(f"  {kind:<12} {len(found)}")
        for line in found[:20]:
            print(f"      {line}")
    if result.action_errors:
        print(f"\nfailed actions ({len(result.action_errors)}):")
        for line in result.action_errors[:20]:
            print(f"      {line}")
    print(f"\nverdict: {'PASS' if result.ok and not result.action_errors else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
    else:
        logging.disable(logging.CRITICAL)
    spec = SoakSpec(pods=args.pods, nodes=args.nodes, arrival_rate=args.arrival_rate, fault_rate=args.fault_rate,
                    kill_every=args.kill_every, handover_every=args.handover_every, tide_every=args.tide_every,
                    processes=not args.in_process, seed=args.seed)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print(f"spec: {dataclasses.asdict(spec)}")
    start = time.monotonic()
    try:
        result = run_soak(spec, progress=lambda line: print(line, flush=True))
    except HarnessError as exc:
        print(f"set-up failed: {exc}")
        return 1
    _print(result, time.monotonic() - start)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0 if result.ok and not result.action_errors else 1


if __name__ == "__main__":
    sys.exit(main())
