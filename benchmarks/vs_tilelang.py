"""tile_nb against tilelang on tilelang's own performance suite (issue 31's speed table), on a GPU.

tilelang's examples carry `regression_*.py` files whose `regression_*` functions call
`tilelang.testing.process_func(example.run_regression_perf, **shape)`: each builds an example's kernel at the
shapes tilelang tracks and returns its latency from the kernel's profiler. This script reads those calls and
makes them itself (each example imported alone, so one that fails to import costs only its own cases), once on
the real tilelang and once on tile_nb's stand-in for it (`python -m tile_nb.run`), with the same timer on both
sides: tilelang's `do_bench` (behind `profiler.do_bench` and direct calls) is replaced by
tile_nb.bench.timing.do_bench (L2 flush, CUDA events, median), which imports no compiler. Each side also times
two torch yardsticks (an fp16 matmul and SDPA) so that runs on different leases compare honestly.

    # a checkout of tilelang's examples at .gl/tilelang; the real tilelang importable (PYTHONPATH):
    python benchmarks/vs_tilelang.py .gl/tilelang --impl tilelang --json tl.json
    # tile_nb's stand-in (TVM from the devkit on PYTHONPATH, no real tilelang):
    python benchmarks/vs_tilelang.py .gl/tilelang --impl tile_nb --json nb.json
    python benchmarks/vs_tilelang.py --compare tl.json nb.json      # the table (markdown)

Every regression file runs in its own process (`--timeout` each; a crash is that file's error only), first
`--warm-jobs` at a time untimed (each kernel built and run once, filling the implementation's kernel cache;
`--warm-only` stops there, so both implementations can warm up side by side), then one at a time, timed.
Not yet run on a GPU (docs/tilelang.md, "Where tile_nb stands"); its table will go under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import fnmatch
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARM_ENV = "TILE_NB_VS_TILELANG_WARM"  # set in the children of the untimed pass


# ---- in the child: one regression file, on whichever tilelang `import tilelang` gives --------------------

def _shared_timer():
    """tilelang's do_bench signature, timed by tile_nb's harness (milliseconds, median)."""
    sys.path.insert(0, ROOT)
    from tile_nb.bench.timing import do_bench

    def timed(fn, *args, **kwargs):
        return do_bench(fn).median_ms

    def once(fn, *args, **kwargs):  # the untimed pass: build and run each kernel, leave the GPU to the others
        import torch

        fn()
        torch.cuda.synchronize()
        return 1.0
    return once if os.environ.get(WARM_ENV) else timed


def _yardsticks(timer) -> dict:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    a, b = (torch.randn(4096, 4096, dtype=torch.float16, device="cuda") for _ in range(2))
    q, k, v = (torch.randn(4, 32, 1024, 128, dtype=torch.float16, device="cuda") for _ in range(3))
    return {"torch matmul 4096^3 fp16": timer(lambda: a @ b),
            "torch SDPA 4x32x1024x128 fp16": timer(lambda: F.scaled_dot_product_attention(q, k, v))}


def run_file(path: str) -> dict:
    """Every `regression_*` function of one regression file: {case: latency ms or error}."""
    import tilelang.profiler

    timer = _shared_timer()
    tilelang.profiler.do_bench = timer
    bench_module = sys.modules.get("tilelang.profiler.bench")  # what tilelang's own Profiler calls
    if bench_module is not None:
        bench_module.do_bench = timer
    folder = os.path.dirname(os.path.abspath(path))
    os.chdir(folder)
    sys.path.insert(0, folder)
    # as `python regression_x.py` would run: an example that parses its command line (convolution's
    # run_regression_perf) reads no options, not this script's
    sys.argv = [path]
    results = {}
    for name, (module_name, function, kwargs) in regression_calls(path).items():
        start = time.perf_counter()
        try:  # each example imported on its own: one that fails to import costs only its own cases
            ms = float(getattr(importlib.import_module(module_name), function)(**kwargs))
            results[name] = dict(ms=ms, seconds=round(time.perf_counter() - start, 1))
        except BaseException as exc:  # noqa: BLE001 - one function's failure is reported, the others still run
            results[name] = dict(error=_first_line(exc), seconds=round(time.perf_counter() - start, 1))
    return {"file": path, "cases": results}


def regression_calls(path: str) -> dict:
    """{regression function: (example module, its function, keyword arguments)} read from a regression file
    whose functions each call `tilelang.testing.process_func(example.run_regression_perf, k=v, ...)`."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    calls = {}
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("regression_")):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "process_func" and node.args
                    and isinstance(node.args[0], ast.Attribute) and isinstance(node.args[0].value, ast.Name)):
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                calls[fn.name] = (node.args[0].value.id, node.args[0].attr, kwargs)
    return calls


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# ---- in the parent: every file in a child process ---------------------------------------------------------

def regression_files(checkout: str, only: list[str]) -> list[str]:
    found = []
    for folder, _, files in os.walk(os.path.join(checkout, "examples")):
        found += [os.path.join(folder, f) for f in files if f.startswith("regression_") and f.endswith(".py")]
    rel = {f: os.path.relpath(f, checkout) for f in sorted(found)}
    if not only:
        return list(rel)
    # in the globs' order (first things first, while the budget lasts), each file once
    return list(dict.fromkeys(f for g in only for f in rel if fnmatch.fnmatch(rel[f], g)))


def run_child(impl: str, path: str, timeout: float, cpu: bool = False, warm: bool = False) -> dict:
    launcher = ["-m", "tile_nb.run", *(["--cpu"] if cpu else [])] if impl == "tile_nb" else []
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result_path = out.name
    cmd = [sys.executable, *launcher, os.path.abspath(__file__), "--child", os.path.abspath(path),
           "--child-out", result_path]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    if warm:
        env[WARM_ENV] = "1"
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        with open(result_path) as f:
            text = f.read()
        if text:
            result = json.loads(text)
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            result = {"file": path, "error": f"exit {proc.returncode}: " + " | ".join(tail)[:400]}
    except subprocess.TimeoutExpired:
        result = {"file": path, "error": f"no result in {timeout:.0f} s"}
    finally:
        os.unlink(result_path)
    result["file"] = path
    result["wall_s"] = round(time.perf_counter() - start, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", help="a tilelang checkout (its examples/)")
    parser.add_argument("--impl", choices=["tilelang", "tile_nb"], help="which `import tilelang` to time")
    parser.add_argument("--only", nargs="*", default=[], help="globs over the regression files' paths "
                        "(run in this order)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per regression file")
    parser.add_argument("--warm-jobs", type=int, default=8, help="files at once in the untimed first pass "
                        "(0: no first pass)")
    parser.add_argument("--warm-only", action="store_true", help="only the untimed pass (each kernel built "
                        "and run once): the other implementation's may run beside it")
    parser.add_argument("--budget", type=float, default=540, help="seconds for the whole run: no file starts "
                        "after it")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--cpu", action="store_true", help="tile_nb on its interpreter (a smoke run of this "
                        "script: CPU times mean nothing here; no yardsticks)")
    parser.add_argument("--compare", nargs=2, metavar=("TILELANG_JSON", "TILE_NB_JSON"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        try:
            result = run_file(args.child)
        except BaseException as exc:  # noqa: BLE001
            result = {"file": args.child, "error": _first_line(exc), "trace": traceback.format_exc()[-2000:]}
        with open(args.child_out, "w") as f:
            json.dump(result, f)
        return
    if args.compare:
        print(compare(*args.compare))
        return
    if not (args.checkout and args.impl):
        parser.error("give a tilelang checkout and --impl (or --compare)")
    if args.cpu and args.impl != "tile_nb":
        parser.error("--cpu runs tile_nb's interpreter: give --impl tile_nb")
    deadline = time.monotonic() + args.budget
    files = regression_files(args.checkout, args.only)
    import torch

    timed = not (args.cpu or args.warm_only)
    header = dict(impl=args.impl, device="cpu (interpreter)" if args.cpu else torch.cuda.get_device_name(),
                  torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  files=len(files), yardsticks=_yardsticks(_shared_timer()) if timed else {})
    print(json.dumps(header), flush=True)
    if args.warm_jobs:
        with concurrent.futures.ThreadPoolExecutor(args.warm_jobs) as pool:
            warm = list(pool.map(lambda f: run_child(args.impl, f, args.timeout, args.cpu, warm=True), files))
        print(json.dumps({"warm pass s": max((w["wall_s"] for w in warm), default=0)}), flush=True)
        if args.warm_only:
            for w in warm:
                print(json.dumps(w)[:600], flush=True)
            return
    rows = []
    for path in files:
        if time.monotonic() > deadline:
            rows.append({"file": path, "error": "not run: the budget was spent"})
            continue
        left = max(1.0, deadline - time.monotonic())
        rows.append(run_child(args.impl, path, min(args.timeout, left), args.cpu))
        print(json.dumps(rows[-1])[:1500], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(header, rows=rows), f, indent=1)


def compare(tilelang_json: str, tile_nb_json: str) -> str:
    """A markdown table: case, tilelang ms, tile_nb ms, tilelang / tile_nb (above 1: tile_nb faster)."""
    sides = []
    for path in (tilelang_json, tile_nb_json):
        with open(path) as f:
            sides.append(json.load(f))
    lines = [f"tilelang: {sides[0]['device']}, {sides[0]['date']}; tile_nb: {sides[1]['device']}, "
             f"{sides[1]['date']}", "",
             "| regression case | tilelang ms | tile_nb ms | x tilelang (tilelang ms / tile_nb ms) |",
             "| --- | ---: | ---: | ---: |"]
    by_file = [{r["file"]: r for r in side["rows"]} for side in sides]
    for path in sorted(set(by_file[0]) | set(by_file[1])):
        rows = [by[path] if path in by else {"error": "not run"} for by in by_file]
        names = sorted(set().union(*(r.get("cases", {}) for r in rows)))
        if not names:
            lines.append(f"| {os.path.basename(path)} | {_cell(rows[0])} | {_cell(rows[1])} | |")
        for name in names:
            cells = [r.get("cases", {}).get(name, {"error": r.get("error", "not run")}) for r in rows]
            ms = [c.get("ms") for c in cells]
            ratio = f"**{ms[0] / ms[1]:.2f}**" if all(isinstance(m, float) and m > 0 for m in ms) else ""
            case = name.removeprefix("regression_")
            lines.append(f"| {case} | {_cell(cells[0])} | {_cell(cells[1])} | {ratio} |")
    lines += ["", "| yardstick (same timer, each side's lease) | beside tilelang ms | beside tile_nb ms |",
              "| --- | ---: | ---: |"]
    sticks = [side.get("yardsticks", {}) for side in sides]
    for name in sorted(set(sticks[0]) | set(sticks[1])):
        lines.append(f"| {name} | {_ms(sticks[0].get(name))} | {_ms(sticks[1].get(name))} |")
    return "\n".join(lines)


def _cell(c: dict) -> str:
    if c.get("ms") is not None:
        return _ms(c["ms"])
    return "error: " + c.get("error", "no latency returned").replace("|", "/")[:120]


def _ms(v) -> str:
    return f"{v:.4f}" if isinstance(v, float) else "-"


if __name__ == "__main__":
    main()
