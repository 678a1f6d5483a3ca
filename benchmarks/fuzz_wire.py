"""The wire fuzz, full run: generated requests per verb against the real server, once per worker.

    python benchmarks/fuzz_wire.py                       # 10,000 per verb and worker (~15-20 min)
    python benchmarks/fuzz_wire.py --examples 500        # a quick look
    python benchmarks/fuzz_wire.py --workers gthread --verbs filter,bind --seed 7

For each worker (``server.worker: gevent``, with the fast lane, and ``gthread``) it starts
``kube-extender serve --cluster tests/integration/data/fuzz-cluster.yaml`` with
``server.maxRequestBytes`` of 256 KiB, sends ``--examples`` generated requests per verb (mutations
of the golden payloads in tests/payloads/, sent in every framing; see ``tests/wire_fuzz``), and
judges every reply and the server between them. It prints the replies per verb, worker and
outcome (200, 4xx by status, 5xx, no reply) and every violation (the first few of each kind),
and exits 1 when there was one. The same ``--seed`` sends the same requests.

Not a test: the suite runs a short seeded fuzz (tests/integration/test_wire_fuzz_http.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from wire_fuzz import VERBS, WORKERS  # noqa: E402
from wire_fuzz.run import Fuzzer, Violation, fuzz  # noqa: E402
from wire_fuzz.server import Server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000, help="generated requests per verb and worker")
    parser.add_argument("--workers", default=",".join(WORKERS), help="comma-separated: gevent, gthread")
    parser.add_argument("--verbs", default=",".join(VERBS), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=100, help="requests between checkpoints")
    parser.add_argument("--digest-every", type=int, default=5, help="compare the cache digest every n requests")
    parser.add_argument("--show", type=int, default=3, help="violations shown per kind")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (server logs)")
    args = parser.parse_args(argv)
    workers, verbs = args.workers.split(","), args.verbs.split(",")
    for name, chosen, known in (("worker", workers, WORKERS), ("verb", verbs, VERBS)):
        if unknown := sorted(set(chosen) - set(known)):
            parser.error(f"unknown {name}(s): {', '.join(unknown)}")

    print(f"wire fuzz: {args.examples} requests per verb and worker, seed {args.seed}; "
          f"nproc {os.cpu_count()}, Python {platform.python_version()}, load {_load()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-wire-"))
    counts: Counter[tuple[str, str, str]] = Counter()
    violations: list[Violation] = []
    for worker in workers:
        started = time.perf_counter()
        server = Server(worker, tmp).start()
        try:
            fuzzer = Fuzzer(server, batch=args.batch, digest_every=args.digest_every)
            for verb in verbs:
                t0 = time.perf_counter()
                fuzz(fuzzer, verb, args.examples, args.seed)
                print(f"  {worker:8} {verb:10} {sum(n for k, n in fuzzer.counts.items() if k[:2] == (verb, worker)):6} "
                      f"replies in {time.perf_counter() - t0:6.1f} s", flush=True)
            fuzzer.finish()
        finally:
            server.stop()
        counts.update(fuzzer.counts)
        violations += fuzzer.violations
        print(f"  {worker}: {fuzzer.sent} requests, {len(fuzzer.violations)} violations, "
              f"{time.perf_counter() - started:.0f} s", flush=True)

    print()
    print(_table(counts, workers, verbs))
    print()
    if violations:
        print(f"{len(violations)} violations:")
        shown: Counter[tuple[str, str, str]] = Counter()
        for v in violations:
            kind = (v.worker, v.verb, v.problem[:50])
            shown[kind] += 1
            if shown[kind] <= args.show:
                print(v)
        for kind, n in shown.items():
            if n > args.show:
                print(f"  ... and {n - args.show} more of [{kind[0]} {kind[1]}] {kind[2]}")
    else:
        print("no violations")
    print(f"load at the end {_load()}; server logs in {tmp}" if args.keep else f"load at the end {_load()}")
    if not args.keep:
        for path in sorted(tmp.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        tmp.rmdir()
    return 1 if violations else 0


def _table(counts: Counter[tuple[str, str, str]], workers: list[str], verbs: list[str]) -> str:
    """Replies per verb and worker: total, 200, 4xx and 5xx (each by status), no reply."""
    rows = [f"{'verb':10} {'worker':8} {'replies':>7} {'200':>6} {'4xx':>6}  {'by status':52} {'5xx':>4}  "
            f"{'by status':10} {'none':>4}"]
    for verb in verbs:
        for worker in workers:
            mine = {outcome: n for (v, w, outcome), n in counts.items() if (v, w) == (verb, worker)}
            by_class: dict[str, dict[str, int]] = {"4xx": defaultdict(int), "5xx": defaultdict(int)}
            for outcome, n in mine.items():
                if outcome[:3] in by_class:
                    by_class[outcome[:3]][outcome.split()[1]] += n
            cells: list[str] = []
            for statuses in by_class.values():
                cells += [f"{sum(statuses.values()):>{4 if cells else 6}}",
                          ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))]
            rows.append(f"{verb:10} {worker:8} {sum(mine.values()):7} {mine.get('200', 0):6} {cells[0]}  "
                        f"{cells[1]:52} {cells[2]}  {cells[3]:10} {mine.get('no reply', 0):4}")
    return "\n".join(rows)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
