#!/usr/bin/env python3
"""Churn benchmark: how long freed capacity waits for the pods the extender turned away.

    python benchmarks/churn.py                 # 500 pods, 10 nodes x 4 GPUs, both lag orders (about 1 min each)
    python benchmarks/churn.py --quick         # 100 pods, 4 nodes x 4 GPUs (a few seconds each)
    python benchmarks/churn.py --lag 0.3 --jitter 0.05 --process --seed 3

Runs ``extender.testing.harness.churn`` (the emulated kube-scheduler and kube-extender over the
fake API server, on wall time) once per lag order: kube-scheduler's informer first (scheduler
0 ms, extender ``--lag``) and the extender's watch first (the reverse), each watch event delayed
by its side's lag plus a uniform draw in [0, ``--jitter``]. Managed pods (1 GPU each) arrive
faster than capacity frees; bound pods run for a seeded time and are deleted, at most
``--release-rate`` per second.

Printed per order: pods bound / pending, pods rejected at least once, bind failures, capacity
violations, API requests per client, and for every rejected pod that was finally bound the time
from the deletion that freed the capacity it was bound into (the latest release on its node
before its binding) to its Binding: count, p50, p99, max and the slowest pods; then the same
without the pods that were bound right at their backoff expiry (their wait was kube-scheduler's
backoff, which events do not shorten). Pods left Pending are listed with how long they had waited
and whether they fitted in the free capacity at the end. The last lines compare with the target
(p99 <= 5 s, max <= 15 s, nothing left Pending).

A script that prints figures, not a test: exit status 0 when every run produced figures, 1 when
a run failed to set up. A stuck pod does not hold the run: it ends ``--stall-timeout`` seconds
after the last binding, the stuck pods reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from collections import Counter

from extender.cli import POD_MAX_BACKOFF_SECONDS
from extender.testing.harness import HarnessError
from extender.testing.harness.churn import ChurnResult, ChurnSpec, run_churn

TARGET_P99 = 5.0
TARGET_MAX = 15.0


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100 pods on 4 nodes x 4 GPUs, shorter runtimes")
    p.add_argument("--pods", type=int, default=500)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--gpus", type=int, default=4, help="GPUs per node")
    p.add_argument("--arrival-rate", type=float, default=40.0, help="pods created per second")
    p.add_argument("--release-rate", type=float, default=20.0, help="at most this many deletions per second")
    p.add_argument("--runtime", type=float, nargs=2, default=(1.0, 4.0), metavar=("MIN", "MAX"),
                   help="seconds a bound pod runs before it is deleted (uniform)")
    p.add_argument("--lag", type=float, default=0.15, help="seconds the lagging side's watch is behind")
    p.add_argument("--jitter", type=float, default=0.03, help="extra uniform delay per watch event, both sides")
    p.add_argument("--version", choices=("1.29", "1.30"), default="1.30", help="kube-scheduler behaviour")
    p.add_argument("--process", action="store_true", help="run the extender as a `kube-extender serve` process")
    p.add_argument("--max-backoff", type=float, default=POD_MAX_BACKOFF_SECONDS,
                   help="kube-scheduler's podMaxBackoffSeconds (default: the value kube-extender ships; "
                        "kube-scheduler's own is 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stall-timeout", type=float, default=15.0,
                   help="end a run this long after the last binding while pods are still pending")
    p.add_argument("--timeout", type=float, default=300.0, help="end a run after this many seconds in any case")
    p.add_argument("--log", metavar="FILE", help="write the components' logs here (default: warnings are dropped)")
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.nodes, args.arrival_rate, args.runtime = 100, 4, 25.0, (0.2, 0.6)
    return args


def _print_result(result: ChurnResult) -> None:
    bound = sum(1 for life in result.lives if life.bound_at is not None)
    print(f"\n== {result.spec.label} (+ jitter up to {result.spec.jitter * 1000:g} ms) ==")
    print(f"ended: {result.reason} after {result.duration:.1f} s; {bound}/{result.spec.pods} bound, "
          f"{len(result.stuck)} pending; {result.rejected} rejected at least once; {result.cycles} scheduling "
          f"cycles, {result.bind_failures} bind failures; capacity violations: {len(result.violations)}")
    for v in result.violations[:5]:
        print(f"  VIOLATION at {v.time:.2f}s on {v.node}: {v.resource} {v.used / 1000:g} > {v.allocatable / 1000:g}")
    by_client: Counter[tuple[str, str]] = Counter()
    for (agent, verb, resource), n in result.request_counts.items():
        if verb not in ("list", "watch"):
            by_client[(agent.split("/")[0], f"{verb} {resource}")] += n
    print("API writes by client: " + ", ".join(f"{agent} {what}: {n}" for (agent, what), n in sorted(by_client.items())))
    stats = result.stats()
    print(f"release -> Binding of rejected pods: count {stats['count']}, p50 {stats['p50']:.3f} s, "
          f"p99 {stats['p99']:.3f} s, max {stats['max']:.3f} s")
    slowest = sorted(result.latencies, key=lambda item: -item[1])[:5]
    if slowest:
        print("  slowest: " + ", ".join(f"{pod.split('/')[-1]}{'*' if pod in result.backoff_held else ''} "
                                        f"{seconds:.2f}s" for pod, seconds in slowest))
    rest = result.stats(exclude=result.backoff_held)
    print(f"  * bound at their backoff expiry, after the release: {len(result.backoff_held)}; without them: "
          f"count {rest['count']}, p50 {rest['p50']:.3f} s, p99 {rest['p99']:.3f} s, max {rest['max']:.3f} s")
    for stuck in result.stuck:
        print(f"  PENDING {stuck.pod}: {stuck.pending_for:.1f} s since creation, "
              f"{'fits in the free capacity' if stuck.fits else 'no room for it'}")


def _verdict(result: ChurnResult) -> str:
    stats = result.stats()
    met = stats["p99"] <= TARGET_P99 and stats["max"] <= TARGET_MAX and not result.stuck and not result.violations
    return (f"{result.spec.label}: {'MET' if met else 'MISSED'} (p99 {stats['p99']:.2f} s <= {TARGET_P99:g}, "
            f"max {stats['max']:.2f} s <= {TARGET_MAX:g}, pending {len(result.stuck)}, violations {len(result.violations)})")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO)
    else:
        logging.getLogger().addHandler(logging.NullHandler())
        logging.getLogger().setLevel(logging.ERROR)
    base = ChurnSpec(pods=args.pods, nodes=args.nodes, gpus_per_node=args.gpus, arrival_rate=args.arrival_rate,
                     max_release_rate=args.release_rate, runtime=(args.runtime[0], args.runtime[1]), jitter=args.jitter,
                     seed=args.seed, version=args.version, processes=args.process,
                     stall_timeout=args.stall_timeout, timeout=args.timeout,
                     max_backoff=args.max_backoff)
    print(f"churn: {base.pods} pods of 1 GPU, {base.nodes} nodes x {base.gpus_per_node} GPUs, arrivals "
          f"{base.arrival_rate:g}/s, releases <= {base.max_release_rate:g}/s, runtime {base.runtime[0]:g}-"
          f"{base.runtime[1]:g} s, kube-scheduler {base.version} (podMaxBackoffSeconds {base.max_backoff:g}), extender "
          f"{'process' if base.processes else 'in process'}, seed {base.seed}; nproc {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.2f}")
    results = []
    for scheduler_delay, extender_delay in ((0.0, args.lag), (args.lag, 0.0)):
        spec = dataclasses.replace(base, scheduler_delay=scheduler_delay, extender_delay=extender_delay)
        started = time.monotonic()

        def progress(h: object, bound: int, spec: ChurnSpec = spec) -> None:
            print(f"  {spec.label}: {time.monotonic() - started:5.1f} s, {bound}/{spec.pods} bound", file=sys.stderr)

        try:
            result = run_churn(spec, progress)
        except HarnessError as exc:
            print(f"\n== {spec.label} ==\nFAILED to set up: {exc}")
            return 1
        _print_result(result)
        results.append(result)
    print(f"\nTarget: p99 <= {TARGET_P99:g} s, max <= {TARGET_MAX:g} s, nothing left Pending, no violation "
          f"(load {os.getloadavg()[0]:.2f} at the end)")
    for result in results:
        print(_verdict(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
