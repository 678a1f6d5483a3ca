#!/usr/bin/env python3
"""Hot-path benchmark: filter + prioritize against a 5,000-node GPU cluster.

    python benchmarks/hot_path.py            # default run (~30-40 s)
    python benchmarks/hot_path.py --quick    # smoke run (< 15 s, smaller cluster)
    python benchmarks/hot_path.py --profile  # also cProfile engine.filter at 500 names
    python benchmarks/hot_path.py --no-wrk   # skip the wrk (C client) figures

What it does (a script that prints figures, not a test: a missed target still exits 0; exit 1 only
when a part could not produce figures, e.g. the server failed to start or a verb answered an error):

1. Generates a deterministic (seeded) cluster: N nodes, 0/2/4/8 ``example.com/gpu`` each, with
   realistic labels, taints, conditions, addresses and nodeInfo, plus about 2 running pods per
   node (GPU pods packed onto GPU nodes, cpu-only pods everywhere). Writes it as a multi-document
   YAML cluster file into a temporary directory.
2. In process: ``create_app`` over a ``MemoryCluster`` of the same objects; times filter,
   prioritize and the pair, both through the Flask test client (wire decode + schema + engine +
   reply encoding) and directly on ``Engine.filter`` / ``Engine.prioritize``.
3. Over HTTP: ``kube-extender serve --cluster FILE`` (gunicorn, its gevent worker with the fast
   lane) as a subprocess; the pair over one persistent HTTP/1.1 keep-alive connection with
   pre-serialized compact JSON bodies, as kube-scheduler sends them, from this script
   (``http.client``); then the server's resident memory (gunicorn master + worker) from /proc.
4. If ``wrk`` is on PATH (a C client; Debian's ``wrk`` package, not a pip dependency): the same
   pair at 500 names for ``--wrk-seconds`` over one connection (``wrk -t1 -c1``), a Lua script
   sending filter then prioritize and timing each with CLOCK_MONOTONIC. Without wrk the row says
   it was skipped.

Like kube-scheduler, prioritize is sent only the names filter kept (the feasible ones).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import http.client
import json
import os
import platform
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from io import StringIO
from pathlib import Path
from typing import Any, Callable

from benchkit import (GPU, PATH_PREFIX, SEED, Server, args_body, generate_cluster, med, mib, pct,  # noqa: E402
                      pending_pod, rss_of, write_cluster_yaml)

TARGET_MS = 2.0           # the target: HTTP filter+prioritize at 500 names, median well under 2 ms
WELL_UNDER_MS = 1.0       # "well under" = at most half the budget
PY_CLIENT = "HTTP, Python client"
WRK_CLIENT = "HTTP, wrk (C)"

# ---------------------------------------------------------------------------------------------
# measurement helpers
# ---------------------------------------------------------------------------------------------

@dataclass
class Series:
    label: str
    names: int
    prio_names: int
    filter_s: list[float] = field(default_factory=list)
    prio_s: list[float] = field(default_factory=list)
    pair_s: list[float] = field(default_factory=list)
    error: str = ""
    skipped: str = ""


def time_pairs(series: Series, do_filter: Callable[[], Any], do_prio: Callable[[Any], Any], iterations: int,
               warmup: int) -> Series:
    perf = time.perf_counter
    for _ in range(warmup):
        do_prio(do_filter())
    for _ in range(iterations):
        t0 = perf()
        kept = do_filter()
        t1 = perf()
        do_prio(kept)
        t2 = perf()
        series.filter_s.append(t1 - t0)
        series.prio_s.append(t2 - t1)
        series.pair_s.append(t2 - t0)
    return series


def ignoring_arg(fn: Callable[[], Any]) -> Callable[[Any], Any]:
    """A prioritize step whose body is pre-serialized: it ignores what filter returned."""
    def call(_: Any) -> Any:
        return fn()
    return call


def measure(series: Series, do_filter: Callable[[], Any], do_prio: Callable[[Any], Any], iterations: int,
            warmup: int, check: Callable[[], None] | None = None) -> Series:
    """time_pairs, with a failure (the code under test is broken, say) recorded on the series."""
    try:
        if check is not None:
            check()
        time_pairs(series, do_filter, do_prio, iterations, warmup)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        series.error = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
    return series


# ---------------------------------------------------------------------------------------------
# the three parts
# ---------------------------------------------------------------------------------------------

def in_process(objects: dict[str, list[dict[str, Any]]], pod: dict[str, Any], cases: list[tuple[int, list[str]]],
               iters: dict[int, int], warmup: int, profile: bool) -> tuple[list[Series], dict[int, list[str]], str]:
    from extender.app import create_app
    from extender.cluster.memory import MemoryCluster
    from extender.config.model import default_config

    t0 = time.perf_counter()
    app = create_app(default_config(), source=MemoryCluster(objects))
    state = app.extensions["kube_extender"]
    engine = state.engine
    print(f"  app built over {len(state.cache.snapshot())} cached nodes in {time.perf_counter() - t0:.1f} s",
          flush=True)
    client = app.test_client()
    fpath, ppath = f"{PATH_PREFIX}/filter", f"{PATH_PREFIX}/prioritize"
    out: list[Series] = []
    feasible_of: dict[int, list[str]] = {}
    for n, names in cases:
        # what filter keeps is what prioritize is sent (as kube-scheduler does); the state is static
        try:
            kept = engine.filter(pod, names).feasible
        except Exception as exc:  # noqa: BLE001 - reported in the table
            error = f"engine.filter raised {type(exc).__name__}: {exc}"
            out += [Series("engine (direct)", n, 0, error=error), Series("Flask test client", n, 0, error=error)]
            continue
        feasible_of[n] = kept
        fbody, pbody = args_body(pod, names), args_body(pod, kept)

        def eng_filter(names: list[str] = names) -> list[str]:
            feasible: list[str] = engine.filter(pod, names).feasible
            return feasible

        def eng_prio(kept: list[str]) -> Any:
            return engine.prioritize(pod, kept)

        def tc_post(path: str, body: bytes) -> Any:
            r = client.post(path, data=body, content_type="application/json")
            if r.status_code != 200:
                raise RuntimeError(f"POST {path}: HTTP {r.status_code}: {r.get_data()[:300]!r}")
            return r.get_data()

        def tc_check(fbody: bytes = fbody, pbody: bytes = pbody, kept: list[str] = kept) -> None:
            got = json.loads(tc_post(fpath, fbody))["NodeNames"] or []
            if sorted(got) != sorted(kept):
                raise RuntimeError(f"test client kept {len(got)} names, engine.filter {len(kept)}")
            if len(json.loads(tc_post(ppath, pbody))) != len(kept):
                raise RuntimeError("prioritize did not score every name it was sent")

        out.append(measure(Series("engine (direct)", n, len(kept)), eng_filter, eng_prio, iters[n], warmup))
        out.append(measure(Series("Flask test client", n, len(kept)),
                           partial(tc_post, fpath, fbody), ignoring_arg(partial(tc_post, ppath, pbody)),
                           iters[n], warmup, tc_check))

    prof_text = ""
    if profile:
        names = cases[0][1]
        pr = cProfile.Profile()
        try:
            for _ in range(20):
                engine.filter(pod, names)
            pr.enable()
            for _ in range(200):
                engine.filter(pod, names)
            pr.disable()
            buf = StringIO()
            pstats.Stats(pr, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(15)
            prof_text = (f"cProfile: 200 x engine.filter, {len(names)} names, top 15 by cumulative time "
                         f"(profiler overhead inflates absolute times)\n" + buf.getvalue())
        except Exception as exc:  # noqa: BLE001
            pr.disable()
            prof_text = f"cProfile: engine.filter raised {type(exc).__name__}: {exc}"
    return out, feasible_of, prof_text


def over_http(server: Server, pod: dict[str, Any], cases: list[tuple[int, list[str]]],
              feasible_of: dict[int, list[str]], iters: dict[int, int], warmup: int,
              bodies: dict[int, tuple[bytes, bytes]]) -> list[Series]:
    """The pair with ``http.client``, per case; ``bodies`` receives each case's (filter body,
    prioritize body with the names the server kept)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    headers = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}

    def post(path: str, body: bytes) -> bytes:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path}: HTTP {resp.status}: {data[:300]!r}")
        return data

    out = []
    try:
        for n, names in cases:
            fbody = args_body(pod, names)
            series = Series(PY_CLIENT, n, 0)
            out.append(series)
            try:
                kept = json.loads(post(f"{PATH_PREFIX}/filter", fbody))["NodeNames"] or []
                series.prio_names = len(kept)
                if n in feasible_of and sorted(kept) != sorted(feasible_of[n]):
                    print(f"  WARNING: the server kept {len(kept)} of {n} names, in process "
                          f"{len(feasible_of[n])}", flush=True)
                pbody = args_body(pod, kept)
                if len(json.loads(post(f"{PATH_PREFIX}/prioritize", pbody))) != len(kept):
                    raise RuntimeError("prioritize did not score every name it was sent")
                bodies[n] = (fbody, pbody)
            except (RuntimeError, ValueError, KeyError, TypeError) as exc:
                series.error = f"{type(exc).__name__}: {exc}"[:300]
                continue
            measure(series, partial(post, f"{PATH_PREFIX}/filter", fbody),
                    ignoring_arg(partial(post, f"{PATH_PREFIX}/prioritize", pbody)), iters[n], warmup)
    finally:
        conn.close()
    return out


WRK_PAIR_LUA = r"""
-- kube-scheduler's sequence on each keep-alive connection: filter, then prioritize with the names
-- filter kept (bodies pre-serialized by the benchmark). One connection per wrk thread (-tN -cN), so
-- each thread's Lua state follows one connection. Each request and each pair is timed with
-- CLOCK_MONOTONIC through LuaJIT's ffi: from handing the request to wrk to its whole response.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } hot_path_timespec;
int clock_gettime(int clk_id, hot_path_timespec *tp);
]]
local ts = ffi.new("hot_path_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end
local function slurp(path)
  local f = assert(io.open(path, "rb")); local data = f:read("*a"); f:close(); return data
end
local dir = os.getenv("HOT_PATH_WRK_DIR")
local headers = {["Content-Type"] = "application/json", ["User-Agent"] = "Go-http-client/1.1",
                 ["Accept-Encoding"] = "gzip"}
local filter_req = wrk.format("POST", os.getenv("HOT_PATH_FILTER"), headers, slurp(dir .. "/filter.json"))
local prio_req = wrk.format("POST", os.getenv("HOT_PATH_PRIORITIZE"), headers, slurp(dir .. "/prioritize.json"))
local sending, t_filter, t_filtered, t_prio = "prioritize", 0, nil, 0
filter_us, prio_us, pair_us, bad_filter, bad_prio = {}, {}, {}, 0, 0

-- wrk calls request() for each request it writes and response() for each response, in turn; a
-- pair is recorded only when its filter answer came back before its prioritize was sent. A bad
-- answer: any status but 200, or a filter answer whose Error is set.
request = function()
  if sending == "prioritize" then
    sending, t_filter, t_filtered = "filter", now_us(), nil
    return filter_req
  end
  sending, t_prio = "prioritize", now_us()
  return prio_req
end

response = function(status, headers, body)
  local t = now_us()
  if sending == "filter" then
    if status ~= 200 or not string.find(body, '"Error":""', 1, true) then bad_filter = bad_filter + 1 end
    t_filtered = t
  else
    if status ~= 200 then bad_prio = bad_prio + 1 end
    if t_filtered ~= nil then
      local n = #pair_us + 1
      filter_us[n], prio_us[n], pair_us[n] = t_filtered - t_filter, t - t_prio, t - t_filter
      t_filtered = nil
    end
  end
end

local threads = {}
setup = function(thread) table.insert(threads, thread) end

done = function(summary, latency, requests)
  local out = assert(io.open(dir .. "/samples.txt", "w"))
  local e = summary.errors
  out:write(string.format("errors %d %d %d %d %d\n", e.connect, e.read, e.write, e.status, e.timeout))
  for _, thread in ipairs(threads) do
    local f, p, pr = thread:get("filter_us"), thread:get("prio_us"), thread:get("pair_us")
    out:write(string.format("bad %d %d\n", thread:get("bad_filter"), thread:get("bad_prio")))
    for i = 1, #pr do out:write(string.format("%.1f %.1f %.1f\n", f[i], p[i], pr[i])) end
  end
  out:close()
end
"""
WRK_SOCKET_ERRORS = ("connect", "read", "write", "status", "timeout")


@dataclass
class WrkPairs:
    """What one wrk run of ``WRK_PAIR_LUA`` saw: (filter, prioritize, pair) seconds per pair, the
    bad answers per verb (not 200, or a filter ``Error``), wrk's own socket error counts (a
    ``timeout`` is a request unanswered after wrk's 2 s), its exit code and output."""

    samples: list[tuple[float, float, float]]
    bad_filter: int
    bad_prio: int
    socket_errors: dict[str, int]
    returncode: int
    output: str

    def problem(self) -> str:
        """Why the run does not count ("" when it does)."""
        errors = {k: v for k, v in self.socket_errors.items() if v}
        if self.returncode == 0 and not (self.bad_filter or self.bad_prio or errors):
            return ""
        return (f"wrk exit {self.returncode}, bad answers: {self.bad_filter} filter, {self.bad_prio} prioritize, "
                f"socket errors {errors or 'none'}: {self.output.strip()[:300]}")


def run_wrk_pairs(port: int, tmp: Path, bodies: tuple[bytes, bytes], seconds: float,
                  connections: int = 1) -> WrkPairs | str:
    """``WRK_PAIR_LUA`` on ``connections`` connections (one wrk thread each) for ``seconds``;
    a string says why wrk could not run (not on PATH, failed to start, wrote no samples)."""
    wrk = shutil.which("wrk")
    if not wrk:
        return "wrk is not on PATH (Debian/Ubuntu: apt-get install wrk)"
    work = tmp / "wrk"
    work.mkdir(exist_ok=True)
    (work / "filter.json").write_bytes(bodies[0])
    (work / "prioritize.json").write_bytes(bodies[1])
    script = work / "pair.lua"
    script.write_text(WRK_PAIR_LUA)
    env = {**os.environ, "HOT_PATH_WRK_DIR": str(work), "HOT_PATH_FILTER": f"{PATH_PREFIX}/filter",
           "HOT_PATH_PRIORITIZE": f"{PATH_PREFIX}/prioritize"}
    cmd = [wrk, f"-t{connections}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", str(script),
           f"http://127.0.0.1:{port}"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, env=env)
        lines = (work / "samples.txt").read_text().splitlines()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"wrk failed: {exc}"[:300]
    out = WrkPairs([], 0, 0, {}, res.returncode, res.stdout + res.stderr)
    for line in lines:
        head, *rest = line.split()
        if head == "errors":
            out.socket_errors = dict(zip(WRK_SOCKET_ERRORS, map(int, rest)))
        elif head == "bad":
            out.bad_filter += int(rest[0])
            out.bad_prio += int(rest[1])
        else:
            f, p, pair = (float(x) / 1e6 for x in (head, *rest))
            out.samples.append((f, p, pair))
    return out


def wrk_pair(port: int, tmp: Path, n: int, bodies: tuple[bytes, bytes], kept: int, seconds: int,
             warmup: int) -> Series:
    """The pair over one connection driven by wrk (``-t1 -c1``, ``seconds`` long; the first
    ``warmup`` pairs dropped). The series says ``skipped`` when wrk is absent, ``error`` when it
    failed or saw a bad answer."""
    series = Series(WRK_CLIENT, n, kept)
    if not shutil.which("wrk"):
        series.skipped = "wrk is not on PATH (Debian/Ubuntu: apt-get install wrk)"
        return series
    run = run_wrk_pairs(port, tmp, bodies, seconds)
    if isinstance(run, str):
        series.error = run
        return series
    if run.problem() or len(run.samples) <= warmup:
        series.error = run.problem() or f"only {len(run.samples)} pairs"
        return series
    for f, p, pair in run.samples[warmup:]:
        series.filter_s.append(f)
        series.prio_s.append(p)
        series.pair_s.append(pair)
    return series


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

def verdict(median_ms: float) -> str:
    """MET, MARGINAL or MISSED against the 2 ms target, "well under" meaning <= WELL_UNDER_MS."""
    if median_ms <= WELL_UNDER_MS:
        return f"MET: median {median_ms:.3f} ms is well under 2 ms (<= {WELL_UNDER_MS:g} ms)"
    if median_ms < TARGET_MS:
        return f"MARGINAL: median {median_ms:.3f} ms is under 2 ms but not well under (> {WELL_UNDER_MS:g} ms)"
    return f"MISSED: median {median_ms:.3f} ms is {median_ms / TARGET_MS:.1f}x the 2 ms budget"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=None,
                   help="cluster size (default 5000; 600 with --quick); 2 running pods per node")
    p.add_argument("--iterations", type=int, default=None,
                   help="measured pairs for the 500-name case (default 300; 60 with --quick); "
                        "the 5,000-name case runs a fifth of that (at least 10)")
    p.add_argument("--warmup", type=int, default=None, help="unmeasured pairs before each series (default 20)")
    p.add_argument("--quick", action="store_true", help="fast smoke run: 600 nodes, few iterations")
    p.add_argument("--profile", action="store_true",
                   help="also cProfile engine.filter at 500 names and print the top 15 functions")
    p.add_argument("--no-http", action="store_true", help="skip the HTTP part (in-process figures only)")
    p.add_argument("--no-wrk", action="store_true", help="skip the wrk (C client) pair even if wrk is on PATH")
    p.add_argument("--wrk-seconds", type=int, default=None,
                   help="how long wrk sends pairs at 500 names (default 10; 3 with --quick)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (cluster YAML, server log)")
    a = p.parse_args(argv)

    n_nodes = a.nodes or (600 if a.quick else 5000)
    it_small = a.iterations or (60 if a.quick else 300)
    it_large = max(10, it_small // 5)
    warmup = a.warmup if a.warmup is not None else (5 if a.quick else 20)
    wrk_seconds = a.wrk_seconds or (3 if a.quick else 10)
    started = time.perf_counter()
    cpus = sorted(os.sched_getaffinity(0))

    print(f"hot_path benchmark - machine: nproc={os.cpu_count()} ({len(cpus)} usable), "
          f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.machine()}, "
          f"{platform.system()} {platform.release()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    objects = generate_cluster(n_nodes, a.seed)
    gpu_nodes = [n for n in objects["Node"] if GPU in n["status"]["allocatable"]]
    gpu_pods = sum(1 for q in objects["Pod"] if GPU in q["spec"]["containers"][0]["resources"]["requests"])
    total_gpus = sum(int(n["status"]["allocatable"][GPU]) for n in gpu_nodes)
    used_gpus = sum(int(q["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0)) for q in objects["Pod"])
    print(f"  cluster: {len(objects['Node'])} nodes ({len(gpu_nodes)} with {GPU}: {total_gpus} GPUs, "
          f"{used_gpus} in use), {len(objects['Pod'])} running pods ({gpu_pods} holding GPUs); "
          f"generated in {time.perf_counter() - t0:.1f} s", flush=True)

    rng = random.Random(a.seed + 1)
    all_names = [n["metadata"]["name"] for n in objects["Node"]]
    small = min(500, len(all_names))
    large = min(5000, len(all_names))
    cases = [(small, rng.sample(all_names, small))]
    if large != small:
        cases.append((large, rng.sample(all_names, large)))
    iters = {small: it_small, large: it_large if large != small else it_small}
    pod = pending_pod()

    tmp = Path(tempfile.mkdtemp(prefix="kube-extender-bench-"))
    server: Server | None = None
    http_series: list[Series] = []
    http_error = ""
    inproc_error = ""
    mem: dict[str, Any] = {}
    try:
        cluster_file = tmp / "cluster.yaml"
        size_mb = 0.0
        if not a.no_http:
            t0 = time.perf_counter()
            write_cluster_yaml(objects, cluster_file)
            size_mb = cluster_file.stat().st_size / 1e6
            print(f"  cluster YAML: {size_mb:.1f} MB, written in {time.perf_counter() - t0:.1f} s", flush=True)

        print("in-process ...", flush=True)
        try:
            inproc, feasible_of, prof_text = in_process(objects, pod, cases, iters, warmup, a.profile)
        except Exception as exc:  # noqa: BLE001 - create_app failed, say: the HTTP part may still tell more
            inproc_error = f"{type(exc).__name__}: {exc}"
            print(f"  in-process part FAILED: {inproc_error}", flush=True)
            inproc, feasible_of, prof_text = [], {}, ""
        del objects
        gc.collect()

        if not a.no_http:
            print("over HTTP ...", flush=True)
            try:
                server = Server(cluster_file, tmp)
                print(f"  server starting (pid {server.proc.pid}); a child of the master parses the cluster "
                      f"YAML, then the master forks the worker, which builds its cache from it", flush=True)
                server.wait_ready(timeout=600)
                print(f"  server ready on 127.0.0.1:{server.port} {server.ready_after:.1f} s after start",
                      flush=True)
                mem["idle"] = {pid: rss_of(pid) for pid in server.pids()}
                bodies: dict[int, tuple[bytes, bytes]] = {}
                http_series = over_http(server, pod, cases, feasible_of, iters, warmup, bodies)
                if not a.no_wrk and small in bodies:
                    if shutil.which("wrk"):
                        print(f"  wrk: the pair at {small} names for {wrk_seconds} s ...", flush=True)
                    kept = next(s.prio_names for s in http_series if s.names == small)
                    http_series.append(wrk_pair(server.port, tmp, small, bodies[small], kept, wrk_seconds,
                                                warmup))
                mem["loaded"] = {pid: rss_of(pid) for pid in server.pids()}
            except RuntimeError as exc:
                http_error = str(exc)
                print(f"  HTTP part FAILED: {exc}", flush=True)
    finally:
        if server is not None:
            server.stop()
        if a.keep:
            print(f"  kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- report ---------------------------------------------------------------------------------
    print()
    load_end = os.getloadavg()[0]
    print(f"Machine: nproc={os.cpu_count()}, Python {platform.python_version()} ({sys.executable}); "
          f"1-min load average {load_start:.2f} at start, {load_end:.2f} at end (this run's own included)"
          + (" - other work was running at start: figures are noisy" if load_start > 0.7 else ""))
    print(f"Cluster: {n_nodes} nodes, {2 * n_nodes} running pods; pending pod requests 1 {GPU}")
    print("Times in ms: median / p99 (nearest rank; with n < 100, p99 is the maximum). 'kept' = names filter "
          "kept, which is what prioritize is sent.")
    head = (f"{'path':<20} {'names':>5} {'kept':>5} {'n':>5} | {'filter med':>10} {'p99':>7} | "
            f"{'prio med':>8} {'p99':>7} | {'pair med':>8} {'p99':>7}")
    print(head)
    print("-" * len(head))
    order = ["engine (direct)", "Flask test client", PY_CLIENT, WRK_CLIENT]
    for s in sorted(inproc + http_series, key=lambda s: (s.names, order.index(s.label))):
        if s.error or s.skipped:
            print(f"{s.label:<20} {s.names:>5} {'-':>5} {'-':>5} | "
                  + (f"FAILED: {s.error}" if s.error else f"skipped: {s.skipped}"))
            continue
        print(f"{s.label:<20} {s.names:>5} {s.prio_names:>5} {len(s.pair_s):>5} | "
              f"{med(s.filter_s):>10.3f} {pct(s.filter_s, 99):>7.3f} | "
              f"{med(s.prio_s):>8.3f} {pct(s.prio_s, 99):>7.3f} | "
              f"{med(s.pair_s):>8.3f} {pct(s.pair_s, 99):>7.3f}")
    print()
    if server is not None and server.ready_after is not None:
        parse = (f"; the file was parsed (by a child of the master) and the worker forked after ~{server.master_parse_s:.0f} s"
                 if server.master_parse_s else "")
        print(f"Server start-up: /readyz ready {server.ready_after:.1f} s after start "
              f"({size_mb:.1f} MB cluster YAML{parse})")
    if mem.get("loaded"):
        master = server.proc.pid if server else 0
        for when in ("idle", "loaded"):
            snap = mem[when]
            workers = [pid for pid in snap if pid != master]
            total = sum(v.get("VmRSS", 0) for v in snap.values())
            worker_rss = sum(snap[pid].get("VmRSS", 0) for pid in workers)
            label = "after ready (idle)" if when == "idle" else "after load        "
            print(f"Server RSS {label}: worker {mib(worker_rss)}, master {mib(snap.get(master, {}).get('VmRSS', 0))}, "
                  f"total {mib(total)} ({len(snap)} processes)"
                  + (f"; worker peak VmHWM {mib(sum(snap[pid].get('VmHWM', 0) for pid in workers))}"
                     if when == "loaded" else ""))
    if server is not None:
        print(f"Server stopped with SIGTERM: exit code {server.exit_code}")
    if inproc_error:
        print(f"In-process part FAILED: {inproc_error}")
    if http_error:
        print(f"HTTP part FAILED: {http_error.splitlines()[0]}")
    print()
    verdict_series = [s for s in http_series if s.names == 500 and not s.error and not s.skipped]
    for s in verdict_series:
        print(f"Verdict, {s.label} (target: HTTP filter+prioritize at 500 names, median well under 2 ms; "
              f"{n_nodes}-node cluster): {verdict(med(s.pair_s))}")
    if not verdict_series:
        print("Verdict: not available (no HTTP figures at 500 names)")
    if prof_text:
        print()
        print(prof_text.rstrip())
    print(f"\n(total run time {time.perf_counter() - started:.0f} s)")
    failed = bool(inproc_error or http_error or any(s.error for s in inproc + http_series))
    if failed:
        print("Some part FAILED (see above): exit status 1")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
