"""Memory-bound row kernels: tile_nb vs torch vs a plain Triton kernel of the same op, as % of copy bandwidth.

    python benchmarks/rowwise.py [--rows 32768] [--cols 1024 4096 8192 16384] [--ops add gelu ...]
                                 [--out r.json]

Ops (fp16 rows unless named): add (a broadcast bias), gelu (tanh), softmax, softmax_fp32, rmsnorm, layernorm;
gelu_approx and gelu_precise are the GELU kernel under the lowering option approx_math (tanh.approx.f32
whatever the toolkit) and with tanh computed precisely (built without --use_fast_math, approx_math off): torch
and Triton are timed again for them, so their ratios stay within one op's rows. The kernels are
tests/kernels/rowwise.py (the fast form: whole rows in register fragments). Also timed: the same kernels with
the row count `T.dynamic` (`dyn`), and the unchanged reference softmax (fp32) and RMSNorm of
tests/kernels/reference.py (`ref`) at 1024 and 8192 columns.

Every kernel is timed with tile_nb.bench.do_bench (L2 flushed before each run, CUDA events, median), each
output checked against torch first. Bandwidth = bytes read + written once (inputs read once, outputs written
once; the [N] weights are counted) / time; "% copy" divides by the device-to-device copy (`Y.copy_(X)`)
measured in the same run on the same bytes. tile_nb is the best of a few (block_M, threads) configurations per
size (listed in the output); the Triton kernels are written the obvious way (one row per program, BLOCK = next
power of 2 of N, default num_warps), as a user would.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests"]
from kernels import reference as ref  # noqa: E402
from kernels import rowwise as rw  # noqa: E402

from tile_nb.bench.timing import do_bench  # noqa: E402

# (block_M, threads) candidates per row length: 8..32 elements per thread.
CONFIGS = {1024: [(1, 128), (2, 128), (4, 128), (4, 256), (8, 256)],
           4096: [(1, 128), (1, 256), (1, 512), (2, 256)],
           8192: [(1, 256), (1, 512), (1, 1024)],
           16384: [(1, 512), (1, 1024)]}


# ---- the ops: inputs, torch, tile_nb -----------------------------------------------------------------------

def make_inputs(op, M, N):
    dtype = torch.float32 if op == "softmax_fp32" else torch.float16
    X = torch.randn(M, N, device="cuda", dtype=dtype)
    W = torch.randn(N, device="cuda", dtype=torch.float16)
    B = torch.randn(N, device="cuda", dtype=torch.float16)
    return X, W, B, torch.empty_like(X)


# the GELU variants differ only in tile_nb's math: torch, Triton and the reference are gelu's
_SAME_AS = {"gelu_approx": "gelu", "gelu_precise": "gelu"}


def torch_fn(op, X, W, B, Y):
    op = _SAME_AS.get(op, op)
    N = X.shape[1]
    return {
        "add": lambda: torch.add(X, B, out=Y),
        "gelu": lambda: F.gelu(X, approximate="tanh"),
        "softmax": lambda: torch.softmax(X, dim=1),
        "softmax_fp32": lambda: torch.softmax(X, dim=1),
        "rmsnorm": lambda: F.rms_norm(X, (N,), W, 1e-6),
        "layernorm": lambda: F.layer_norm(X, (N,), W, B, 1e-5),
    }[op]


def reference_out(op, X, W, B):
    op = _SAME_AS.get(op, op)
    x, N = X.float(), X.shape[1]
    out = {
        "add": lambda: x + B.float(),
        "gelu": lambda: F.gelu(x, approximate="tanh"),
        "softmax": lambda: torch.softmax(x, 1),
        "softmax_fp32": lambda: torch.softmax(X.double(), 1),
        "rmsnorm": lambda: F.rms_norm(x, (N,), W.float(), 1e-6),
        "layernorm": lambda: F.layer_norm(x, (N,), W.float(), B.float(), 1e-5),
    }[op]()
    return out


def tile_fn(op, X, W, B, Y, **cfg):
    k = {"add": lambda: rw.add_bias(X, B, Y, **cfg),
         "gelu": lambda: rw.gelu_tanh(X, Y, **cfg),
         "gelu_approx": lambda: rw.gelu_tanh_approx(X, Y, **cfg),
         "gelu_precise": lambda: rw.gelu_tanh_precise(X, Y, **cfg),
         "softmax": lambda: rw.softmax(X, Y, **cfg),
         "softmax_fp32": lambda: rw.softmax(X, Y, dtype="float32", **cfg),
         "rmsnorm": lambda: rw.rms_norm(X, W, Y, **cfg),
         "layernorm": lambda: rw.layer_norm(X, W, B, Y, **cfg)}[op]
    return k


def bytes_moved(op, X):
    n = X.numel() * X.element_size() * 2
    extra = {"add": 1, "rmsnorm": 1, "layernorm": 2}.get(op, 0) * X.shape[1] * 2
    return n + extra


# ---- plain Triton kernels (one row per program) ------------------------------------------------------------

def triton_fns():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_k(X, B, Y, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * N + cols, mask=m)
        b = tl.load(B + cols, mask=m)
        tl.store(Y + row * N + cols, x + b, mask=m)

    @triton.jit
    def gelu_k(X, Y, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * N + cols, mask=m).to(tl.float32)
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
        tl.store(Y + row * N + cols, (0.5 * x * (1.0 + t)).to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def softmax_k(X, Y, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * N + cols, mask=m, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(Y + row * N + cols, (e / tl.sum(e, 0)).to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def rms_k(X, W, Y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(x * x, 0) / N + eps)
        tl.store(Y + row * N + cols, (x * r * w).to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def ln_k(X, W, B, Y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
        mean = tl.sum(x, 0) / N
        d = tl.where(m, x - mean, 0.0)
        r = 1.0 / tl.sqrt(tl.sum(d * d, 0) / N + eps)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + row * N + cols, (d * r * w + b).to(Y.dtype.element_ty), mask=m)

    def make(op, X, W, B, Y):
        op = _SAME_AS.get(op, op)
        M, N = X.shape
        blk = triton.next_power_of_2(N)
        return {
            "add": lambda: add_k[(M,)](X, B, Y, N, BLOCK=blk),
            "gelu": lambda: gelu_k[(M,)](X, Y, N, BLOCK=blk),
            "softmax": lambda: softmax_k[(M,)](X, Y, N, BLOCK=blk),
            "softmax_fp32": lambda: softmax_k[(M,)](X, Y, N, BLOCK=blk),
            "rmsnorm": lambda: rms_k[(M,)](X, W, Y, N, 1e-6, BLOCK=blk),
            "layernorm": lambda: ln_k[(M,)](X, W, B, Y, N, 1e-5, BLOCK=blk),
        }[op]

    return make


# ---- the run -----------------------------------------------------------------------------------------------

def rel_err(out, expected) -> float:
    out, expected = out.double(), expected.double()
    if torch.isnan(out).any():
        return float("nan")
    return ((out - expected).norm() / expected.norm()).item()


def timed(fn):
    return do_bench(fn, warmup_ms=10, rep_ms=60).median_ms * 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--cols", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    ap.add_argument("--ops", nargs="+", default=["add", "gelu", "gelu_approx", "gelu_precise", "softmax",
                                                 "softmax_fp32", "rmsnorm", "layernorm"])
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--out", "--json", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    triton_make = None if args.no_triton else triton_fns()
    start = time.time()
    info = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "triton": getattr(sys.modules.get("triton"), "__version__", None),
        "rows": args.rows,
    }
    print(f"device: {info['device']}  date: {info['date']}  torch {info['torch']}  triton {info['triton']}")
    rows = []
    M = args.rows
    for N in args.cols:
        X16 = torch.randn(M, N, device="cuda", dtype=torch.float16)
        Y16 = torch.empty_like(X16)
        copy16 = X16.numel() * 2 * 2 / timed(lambda: Y16.copy_(X16)) / 1e9
        X32, Y32 = X16.float(), torch.empty(M, N, device="cuda")
        copy32 = X32.numel() * 4 * 2 / timed(lambda: Y32.copy_(X32)) / 1e9
        X16 = Y16 = X32 = Y32 = None  # free before the next size (the timed lambdas are done with them)
        print(f"N={N}: copy {copy16:.0f} GB/s (fp16), {copy32:.0f} GB/s (fp32)")
        for op in args.ops:
            X, W, B, Y = make_inputs(op, M, N)
            copy_bw = copy32 if op == "softmax_fp32" else copy16
            nbytes = bytes_moved(op, X)
            expected = reference_out(op, X, W, B)
            tol = 1e-5 if op == "softmax_fp32" else 2e-3
            entries = {}
            fn = torch_fn(op, X, W, B, Y)
            out = fn()
            entries["torch"] = (timed(fn), rel_err(out, expected), "")
            if triton_make is not None:
                fn = triton_make(op, X, W, B, Y)
                Y.fill_(float("nan"))
                fn()
                entries["triton"] = (timed(fn), rel_err(Y, expected), "")
            best = None
            for block_M, threads in CONFIGS.get(N, [(1, 256)]):
                cfg = dict(block_M=block_M, threads=threads)
                fn = tile_fn(op, X, W, B, Y, **cfg)
                try:
                    Y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - a config that does not fit is reported, not fatal
                    print(f"  {op} N={N} {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")
                    continue
                err = rel_err(Y, expected)
                t = timed(fn)
                if best is None or t < best[0]:
                    best = (t, err, f"block_M={block_M} threads={threads}", cfg)
            if best is not None:
                entries["tile_nb"] = best[:3]
                fn = tile_fn(op, X, W, B, Y, dynamic_rows=True, **best[3])
                Y.fill_(float("nan"))
                fn()
                entries["tile_nb dyn"] = (timed(fn), rel_err(Y, expected), best[2])
            if N in (1024, 8192) and op in ("softmax_fp32", "rmsnorm"):
                for block_M in (1, 4):
                    if op == "softmax_fp32":
                        fn = lambda bm=block_M: ref.softmax(X, Y, block_M=bm)  # noqa: E731
                    else:
                        fn = lambda bm=block_M: ref.rms_norm(X, W, Y, block_M=bm)  # noqa: E731
                    try:
                        Y.fill_(float("nan"))
                        fn()
                        torch.cuda.synchronize()
                    except Exception as exc:  # noqa: BLE001
                        print(f"  ref {op} N={N} block_M={block_M}: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:150]}")
                        continue
                    entries[f"ref bm{block_M}"] = (timed(fn), rel_err(Y, expected), f"block_M={block_M}")
            t_torch = entries["torch"][0]
            t_triton = entries.get("triton", (None,))[0]
            for name, (t, err, note) in entries.items():
                gbs = nbytes / t / 1e9
                row = dict(
                    op=op,
                    rows=M,
                    cols=N,
                    impl=name,
                    ms=t * 1e3,
                    gbs=gbs,
                    pct_copy=100 * gbs / copy_bw,
                    copy_gbs=copy_bw,
                    rel_err=err,
                    ok=bool(err <= tol),
                    vs_torch=t_torch / t,
                    vs_triton=(t_triton / t) if t_triton else None,
                    config=note,
                )
                rows.append(row)
                flag = "" if row["ok"] else f"  WRONG (err {err:.1e})"
                vt = f"  x{row['vs_triton']:.2f} triton" if row["vs_triton"] else ""
                print(
                    f"  {op:12s} N={N:5d} {name:12s} {t * 1e6:9.1f} us {gbs:7.0f} GB/s "
                    f"{row['pct_copy']:5.1f}% copy"
                    f"  x{row['vs_torch']:.2f} torch{vt}  {note}{flag}"
                )
            X = W = B = Y = None
            torch.cuda.empty_cache()
    info["seconds"] = time.time() - start
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)
    # Short table last (the device tool returns the tail of the output).
    print(
        f"\nsummary ({info['device']}, {info['date']}): tile_nb best config, % of copy bandwidth, x "
        "torch, x triton"
    )
    for r in rows:
        if r["impl"] in ("tile_nb", "tile_nb dyn") or r["impl"].startswith("ref"):
            vt = f"{r['vs_triton']:.2f}" if r["vs_triton"] else "-"
            print(
                f"{r['op']:12s} {r['cols']:5d} {r['impl']:11s} "
                f"{r['pct_copy']:5.1f}%  {r['vs_torch']:.2f}  {vt}"
                f"{'' if r['ok'] else '  WRONG'}"
            )


if __name__ == "__main__":
    main()
