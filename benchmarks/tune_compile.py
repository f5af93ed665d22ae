"""Parallel compiles for tuning: the compile stage of a search, serial in one
process vs the worker-process pool.

    python benchmarks/tune_compile.py [--workers 2] [--repeat 2] [--json out.json]

The jobs are those `tile_nb.bench.tune` sends: 32 configurations of the seed GEMM (tests/kernels/seed.py
gemm_variant, M = N = K = 2048; block_M, block_N in {64, 128}, block_K in {32, 64}, 2 to 5 stages, 128
threads), each as its phase-2 IR text, lowered and built to a cubin with ptxas's resource report. Every
measurement runs in a fresh Python process over an empty kernel cache (TVM imported before the clock, as in a
notebook that has run a kernel already):
- serial: `InlinePool` (this process compiles one job after another);
- pool: `ProcessPool(workers)` as tuning uses it: workers start (each imports
  TVM) while this process compiles;
- pool, workers only: the same without the parent's help.
Before each measurement, the cores this process can really use are measured (busy loops alone vs in parallel):
on a shared machine other work takes its share, and the speedup is bounded by that figure, not by
`os.cpu_count()`. Speedup = serial / pool wall time. Also reported: when the first worker result began
(the workers' start-up: a fresh interpreter importing TVM), and the steady-state speedup after it
(jobs compiled per second by the pool once its workers run, over the serial rate). No GPU is needed
(without a driver the build stops at the cubin; with one it also exports the module, which adds the
same per-job work on both sides).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = {"block_M": [64, 128], "block_N": [64, 128], "block_K": [32, 64], "num_stages": [2, 3, 4, 5]}


def child(mode: str, workers: int) -> dict:
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
    import tvm  # noqa: F401 - before the clock
    from kernels.seed import gemm_variant

    from tile_nb.bench import expand_configs
    from tile_nb.bench.pool import InlinePool, ProcessPool
    from tile_nb.bench.tuning import _lowering_options

    jobs = [{"id": i, "ir": gemm_variant.specialize(M=2048, N=2048, K=2048, **c).script(), "target": "sm_90a",
             "options": {}, "lowering": _lowering_options()} for i, c in enumerate(expand_configs(GRID))]
    t0 = time.perf_counter()
    ready_at = None
    if mode == "serial":
        pool = InlinePool()
    else:
        pool = ProcessPool(workers, inline_while_starting=(mode == "pool"))
    outcomes = []
    for out in pool.run(jobs):
        outcomes.append(out)
        if ready_at is None and out.get("pid") != os.getpid():
            ready_at = time.perf_counter() - t0 - out.get("seconds", 0.0)
    wall = time.perf_counter() - t0
    pool.close()
    failed = [o for o in outcomes if not o.get("ok")]
    after = [o for o in outcomes if o.get("pid") != os.getpid()]
    rate = len(after) / (wall - ready_at) if ready_at is not None and wall > ready_at else None
    return {
        "mode": mode,
        "wall_s": wall,
        "busy_s": sum(o.get("seconds", 0.0) for o in outcomes),
        "jobs_per_s": len(jobs) / wall,
        "worker_jobs_per_s": rate,
        "jobs": len(jobs),
        "failed": len(failed),
        "by_parent": sum(o.get("pid") == os.getpid() for o in outcomes),
        "first_worker_result_started_s": ready_at,
    }


_SPIN = (
    "import time\nt = time.perf_counter()\nx = 0\nfor i in range(20_000_000):\n    x += i\n"
    "print(time.perf_counter() - t)\n"
)


def effective_cores(n: int) -> float:
    """How many cores this process can really use now (the machine may be shared): n busy loops in parallel vs
    one alone; n x (time alone / time in parallel)."""
    one = float(
        subprocess.run([sys.executable, "-c", _SPIN], capture_output=True, text=True, check=True).stdout
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE, text=True) for _ in range(n)
    ]
    many = max(float(p.communicate()[0]) for p in procs)
    return n * one / many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.workers)))
        return
    runs = []
    for r in range(args.repeat):
        for mode in ("serial", "pool", "workers-only"):
            env = dict(os.environ, TILE_NB_CACHE_DIR=tempfile.mkdtemp(prefix="tile_nb_tc_"))
            cores = effective_cores(args.workers)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run([sys.executable, __file__, "--child", mode, "--workers", str(args.workers)],
                                  capture_output=True, text=True, env=env, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["load_avg"] = os.getloadavg()[0]
            row["effective_cores_before"] = cores
            row["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            runs.append(row)
            print(f"run {r + 1} {mode:13s} wall {row['wall_s']:6.1f} s  compiling {row['busy_s']:6.1f} s  "
                  f"jobs {row['jobs']} (failed {row['failed']}, by the parent {row['by_parent']})  "
                  f"CPU {row['cpu_s']:.1f} s  load {row['load_avg']:.1f}  usable cores "
                  f"{row['effective_cores_before']:.2f}", flush=True)
    med = {m: statistics.median(r["wall_s"] for r in runs if r["mode"] == m)
           for m in ("serial", "pool", "workers-only")}
    serial_rate = statistics.median(r["jobs_per_s"] for r in runs if r["mode"] == "serial")
    steady = statistics.median(r["worker_jobs_per_s"] for r in runs if r["mode"] == "workers-only")
    start = statistics.median(r["first_worker_result_started_s"] for r in runs if r["mode"] == "workers-only")
    usable = statistics.median(r["effective_cores_before"] for r in runs)
    summary = {
        "steady_state_speedup": steady / serial_rate,
        "worker_start_s": start,
        "usable_cores": usable,
        "machine": f"{platform.node()} ({os.cpu_count()} cores, "
                   f"{platform.processor() or platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "workers": args.workers,
        "median_wall_s": med,
        "speedup_pool": med["serial"] / med["pool"],
        "speedup_workers_only": med["serial"] / med["workers-only"],
        "runs": runs,
    }
    print(f"median wall: serial {med['serial']:.1f} s, pool {med['pool']:.1f} s "
          f"(x{summary['speedup_pool']:.2f}), workers only {med['workers-only']:.1f} s "
          f"(x{summary['speedup_workers_only']:.2f}); workers start in {start:.1f} s, then compile "
          f"x{summary['steady_state_speedup']:.2f} the serial rate; usable cores measured {usable:.2f} "
          f"of {os.cpu_count()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
