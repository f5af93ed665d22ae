"""Compile-time benchmark of the seed GEMM: cold compile and disk-cache hit, each in a fresh process.

    python benchmarks/compile.py [--repeat 3] [--json out.json]

Every measurement runs in its own Python process, so nothing but the disk cache carries over:
- cold (NVRTC) / cold (nvcc): empty cache folder; the time of the first `gemm.compile(...)` call (elaborate,
  lower, TVM codegen, cubin, export of module.so where a GPU is present, cache write). `import tvm` /
  `import tile_nb` happen before the clock starts and are reported on their own.
- warm process: a second, different specialization compiled in the same
  process (one-time TVM set-up excluded).
- disk hit: a new process over the cache the cold run left; the time of the same `gemm.compile(...)` call.
On a machine with a GPU each process also launches the kernel once and checks it against torch.matmul.
Targets (issue 3): cold compile <= 1.5 s, disk-cache hit in a new process <= 50 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE = dict(M=1024, N=1024, K=1024)


def make_gemm(compile_options=None):
    """A fresh kernel object (empty memory cache) of the seed GEMM in tests/kernels/seed.py."""
    import tile_nb

    sys.path.insert(0, str(ROOT / "tests"))
    from kernels.seed import gemm

    return tile_nb.jit(gemm.fn, compile_options=compile_options)


def child(mode: str, compiler: str) -> dict:
    """One measurement, in this (fresh) process; prints a JSON line."""
    t0 = time.perf_counter()
    import torch
    import tvm  # noqa: F401

    import tile_nb
    import tile_nb.runtime  # noqa: F401
    imports = time.perf_counter() - t0
    options = {"compiler": compiler}
    gemm = make_gemm(options)
    out = {"mode": mode, "compiler_option": compiler, "import_s": imports}

    start = time.perf_counter()
    kernel = gemm.compile(**SHAPE)
    out["compile_s"] = time.perf_counter() - start
    out.update(from_cache=kernel.from_cache, timings=kernel.timings, compiler=kernel.compiler,
               resources=str(kernel.resources), launchable=kernel.launchable)
    if mode == "warm":     # a different specialization in the same, now warmed-up, process
        start = time.perf_counter()
        second = make_gemm(options).compile(M=2048, N=2048, K=2048)
        out["compile_s"] = time.perf_counter() - start
        out.update(timings=second.timings, from_cache=second.from_cache)
    if torch.cuda.is_available() and kernel.launchable:
        M, N, K = SHAPE["M"], SHAPE["N"], SHAPE["K"]
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        start = time.perf_counter()
        kernel(A, B, C)
        torch.cuda.synchronize()
        out["first_launch_s"] = time.perf_counter() - start
        ref = A.double() @ B.double()
        out["rel_err"] = float((C.double() - ref).norm() / ref.norm())
    print(json.dumps(out))
    return out


def run_child(mode: str, cache: str, compiler: str, extra_env: dict | None = None) -> dict:
    env = dict(os.environ, TILE_NB_CACHE_DIR=cache, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--compiler", compiler],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        return {"mode": mode, "compiler_option": compiler, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001
        pass
    return "no GPU (CPU only)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--child", choices=["cold", "warm", "hit"])
    parser.add_argument("--compiler", default="auto")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.compiler)
        return

    from tile_nb.backend import toolchain

    rows = []
    compilers = [c for c in ("nvrtc", "nvcc") if toolchain.describe()[c]]
    for _ in range(args.repeat):
        for compiler in compilers:
            with tempfile.TemporaryDirectory(prefix="tile_nb_bench_cache_") as cache:
                rows.append(run_child("cold", cache, compiler))
                rows.append(run_child("hit", cache, compiler))
            with tempfile.TemporaryDirectory(prefix="tile_nb_bench_cache_") as cache:
                rows.append(run_child("warm", cache, compiler))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device_name(), "rows": rows}, indent=1))

    print(f"device: {device_name()}; date: {time.strftime('%Y-%m-%d')}; shape {SHAPE}; "
          f"toolchain {toolchain.describe()}")
    errors = [r for r in rows if "error" in r]
    for r in errors:
        print("ERROR", r["mode"], r["compiler_option"], r["error"][-600:])
    print(
        "| measurement | compiler | median s | min s | max s | n | stages (median run) | first launch "
        "s | rel err |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode in ("cold", "warm", "hit"):
        for compiler in compilers:
            group = [
                r for r in rows if r["mode"] == mode and r["compiler_option"] == compiler and "error" not in r
            ]
            if not group:
                continue
            times = sorted(r["compile_s"] for r in group)
            median_run = sorted(group, key=lambda r: r["compile_s"])[len(group) // 2]
            stages = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in median_run["timings"].items())
            launch = median_run.get("first_launch_s")
            err = median_run.get("rel_err")
            label = {"cold": "cold compile, new process", "warm": "cold cache, warm process",
                     "hit": "disk-cache hit, new process"}[mode]
            print(f"| {label} | {median_run.get('compiler') or compiler} | {statistics.median(times):.3f} | "
                  f"{times[0]:.3f} | {times[-1]:.3f} | {len(times)} | {stages} | "
                  f"{'-' if launch is None else f'{launch:.4f}'} | {'-' if err is None else f'{err:.1e}'} |")
    imports = [r["import_s"] for r in rows if "import_s" in r]
    if imports:
        print(
            "import torch + tvm + tile_nb (not in the times above): median "
            f"{statistics.median(imports):.2f} s"
        )


if __name__ == "__main__":
    main()
