"""Backward kernels against torch on the GPU (issue 33 item 4), same run, same
timing harness (tile_nb.bench.timing).

    python benchmarks/backward.py [--attention 4,32,4096] [--dims 64 128] [--norms 16384,4096]
                                  [--json out.json]
    # a smoke run, on the interpreter:
    python benchmarks/backward.py --device cpu --attention 1,2,70 --dims 32 --norms 5,64

- FlashAttention forward + backward: tests/kernels/attention_backward.py (flash_attention_fwd, then
  attention_backward: the Delta preprocess, the dK/dV kernel and the dQ kernel, no atomics) against
  F.scaled_dot_product_attention and torch.autograd.grad of it (torch's choice of backend: cuDNN on the H200).
  TFLOP/s counts 3.5x the forward's 4 B H S^2 D (halved for causal), as the issue does. Gradients are compared
  with SDPA's first (max abs error of dQ, dK, dV). The forward and the backward are also timed alone
  (`fwd_ms`, `bwd_ms`: ours, torch's; the backward given the forward's outputs, counting 2.5x the forward's
  FLOPs), and on CUDA, unless --no-sweep, a few other backward configurations, in `sweep`.
- RMSNorm and LayerNorm backward: tests/kernels/backward.py (the persistent rms_norm_bwd / layer_norm_bwd, one
  float32 dW / dB partial row per CTA, then col_sum of those rows) against torch.autograd.grad of F.rms_norm /
  F.layer_norm. GB/s counts the bytes a backward must move at least (read X, dY; write dX; W and dW are one
  row), next to a device-to-device copy of X's size (`of_copy`: the fraction of the copy's GB/s; the issue's
  target is >= 0.9). The default configuration (bw.norm_bwd_config: threads, CTAs, pipeline stages) is timed,
  then (on CUDA, unless --no-sweep) a few others, in `sweep`.
Ratios are tile_nb's speed over torch's (> 1: tile_nb faster). Results: benchmarks/results/backward.md.
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
from kernels import attention_backward as ab  # noqa: E402
from kernels import backward as bw  # noqa: E402

import tile_nb  # noqa: E402
from tile_nb.bench.timing import do_bench  # noqa: E402

DEVICE = "cuda"  # --device cpu: a smoke run on the interpreter (tiny shapes)


def _attention_sweep(D: int) -> dict[str, tuple[dict, dict]]:
    """Backward configurations timed besides the default (--sweep), as (attention_backward's keywords: the
    dkdv / dq kernels' compile-time arguments, lowering options): pipeline depths, every wgmma waited for
    right after it (`wgmma_late_wait` off), smaller dQ tiles, dQ added by atomics in the dK/dV kernel
    (attention_backward_atomic: five GEMMs instead of seven, float32 atomics), and at head dim 64 the dK/dV
    kernel's 128 x 128 tile."""
    configs = {
        "dQ by atomics in the dK/dV kernel": (dict(atomic_dq=True), {}),
        "dkdv stages=2": (dict(dkdv=dict(num_stages=2)), {}),
        "dq stages=3": (dict(dq=dict(num_stages=3)), {}),
        "waits right after each wgmma": ({}, {"wgmma_late_wait": False}),
        "dq 64x64 t128": (dict(dq=dict(block_M=64, block_N=64, threads=128)), {}),
    }
    if D <= 64:
        configs["dkdv 128x128 t256"] = (dict(dkdv=dict(block_M=128, block_N=128, threads=256)), {})
    return configs


def attention_case(B: int, H: int, S: int, D: int, causal: bool, dtype=torch.float16,
                   sweep: bool = False) -> dict:
    """Forward + backward, and each alone (the backward given the forward's outputs), against SDPA."""
    torch.manual_seed(S + D)
    q, k, v = (torch.randn(B, H, S, D, dtype=dtype, device=DEVICE) for _ in range(3))
    dO = torch.randn_like(q)
    name = str(dtype).removeprefix("torch.")
    O, LSE = ab.flash_attention_fwd(q, k, v, dtype=name, causal=causal)

    def ours_fwd():
        return ab.flash_attention_fwd(q, k, v, dtype=name, causal=causal)

    def ours_bwd(atomic_dq=False, **cfg):
        backward = ab.attention_backward_atomic if atomic_dq else ab.attention_backward
        return backward(q, k, v, O, LSE, dO, causal=causal, **cfg)

    def ours():
        O, LSE = ours_fwd()
        return ab.attention_backward(q, k, v, O, LSE, dO, causal=causal)

    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

    def theirs_fwd():
        return F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    out = theirs_fwd()

    def theirs_bwd():
        return torch.autograd.grad(out, (qg, kg, vg), dO, retain_graph=True)

    def theirs():
        return torch.autograd.grad(theirs_fwd(), (qg, kg, vg), dO)

    def errors_of(got):
        return [float((a.float() - b.float()).abs().max()) for a, b in zip(got, expected, strict=True)]

    expected = theirs()
    errors = errors_of(ours())
    times = {label: do_bench(fn).median_ms for label, fn in
             (("ours", ours), ("torch", theirs), ("ours_fwd", ours_fwd), ("torch_fwd", theirs_fwd),
              ("ours_bwd", ours_bwd), ("torch_bwd", theirs_bwd))}
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)   # the forward's; the backward counts 2.5x
    row = dict(kind="attention", shape=[B, H, S, D], causal=causal, dtype=name, max_err_dq_dk_dv=errors,
               tile_nb_ms=times["ours"], torch_ms=times["torch"],
               tile_nb_tflops=3.5 * flops / times["ours"] / 1e9,
               torch_tflops=3.5 * flops / times["torch"] / 1e9,
               ratio=times["torch"] / times["ours"],
               fwd_ms=[times["ours_fwd"], times["torch_fwd"]], bwd_ms=[times["ours_bwd"], times["torch_bwd"]],
               bwd_tflops=[2.5 * flops / times["ours_bwd"] / 1e9, 2.5 * flops / times["torch_bwd"] / 1e9],
               bwd_ratio=times["torch_bwd"] / times["ours_bwd"])
    if sweep:
        row["sweep"] = {}
        for label, (cfg, lowering) in _attention_sweep(D).items():
            try:
                with tile_nb.options(**lowering):
                    err = max(errors_of(ours_bwd(**cfg)))
                    ms = do_bench(lambda cfg=cfg: ours_bwd(**cfg)).median_ms
                row["sweep"][label] = dict(bwd_ms=ms, bwd_tflops=2.5 * flops / ms / 1e9, max_err=err)
            except Exception as exc:  # noqa: BLE001 - one configuration's failure is reported, the others still run
                row["sweep"][label] = dict(error=f"{type(exc).__name__}: {exc}"[:200])
    return row


def _sweep_configs(default: dict, N: int) -> dict[str, dict]:
    """Configurations tried besides the default (--sweep): twice and three times the CTAs (more
    per SM than the registers hold at once: a second wave), 2 and 3 stages, 8 and 32 elements of a
    row per thread instead of 16."""
    variants = [
        dict(ctas=2 * default["ctas"]),
        dict(ctas=3 * default["ctas"]),
        dict(stages=2),
        dict(stages=3),
        dict(threads=max(128, min(1024, N // 8))),
        dict(threads=max(128, min(1024, N // 32))),
    ]
    out = {}
    for change in variants:
        cfg = dict(default, **change)
        if cfg != default:
            out[" ".join(f"{k}={v}" for k, v in cfg.items())] = cfg
    return out


def norm_case(op: str, M: int, N: int, dtype=torch.float16, sweep: bool = False) -> dict:
    torch.manual_seed(M + N)
    x = torch.randn(M, N, dtype=dtype, device=DEVICE)
    w = torch.randn(N, dtype=dtype, device=DEVICE)
    b = torch.randn(N, dtype=dtype, device=DEVICE)
    dy = torch.randn_like(x)
    name = str(dtype).removeprefix("torch.")

    # the persistent kernel (one float32 dW / dB partial row per CTA), then col_sum of those rows
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if DEVICE == "cuda" else 132
    default = bw.norm_bwd_config(N, x.element_size(), sms)
    if op == "rms_norm":
        def ours(**cfg):
            cfg = dict(default, **cfg)
            dX, part = bw.rms_norm_bwd(x, w, dy, dtype=name, **cfg)
            return dX, bw.col_sum(part, dtype=name)
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

        def theirs():
            y = F.rms_norm(xg, (N,), wg, eps=1e-6)
            return torch.autograd.grad(y, (xg, wg), dy)
    else:
        def ours(**cfg):
            cfg = dict(default, **cfg)
            dX, dw_part, db_part = bw.layer_norm_bwd(x, w, dy, dtype=name, **cfg)
            return dX, bw.col_sum(dw_part, dtype=name), bw.col_sum(db_part, dtype=name)
        xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))

        def theirs():
            y = F.layer_norm(xg, (N,), wg, bg, eps=1e-5)
            return torch.autograd.grad(y, (xg, wg, bg), dy)

    def max_rel_err(got):
        return [
            float((a.float() - e.float()).abs().max() / e.float().abs().max())
            for a, e in zip(got, expected, strict=True)
        ]

    expected = theirs()
    errors = max_rel_err(ours())
    src = torch.empty_like(x)
    t_ours, t_torch, t_copy = do_bench(ours), do_bench(theirs), do_bench(lambda: src.copy_(x))
    moved = 3 * x.numel() * x.element_size()  # X and dY read, dX written; W and dW are one row each
    copy_gbs = 2 * x.numel() * x.element_size() / t_copy.median_ms / 1e6
    row = dict(
        kind=op,
        shape=[M, N],
        dtype=name,
        config=" ".join(f"{k}={v}" for k, v in default.items()),
        max_rel_err=errors,
        tile_nb_ms=t_ours.median_ms,
        torch_ms=t_torch.median_ms,
        tile_nb_gbs=moved / t_ours.median_ms / 1e6,
        torch_gbs=moved / t_torch.median_ms / 1e6,
        copy_gbs=copy_gbs,
        ratio=t_torch.median_ms / t_ours.median_ms,
    )
    row["of_copy"] = row["tile_nb_gbs"] / copy_gbs
    if sweep:
        row["sweep"] = {}
        for label, cfg in _sweep_configs(default, N).items():
            try:
                err = max(max_rel_err(ours(**cfg)))
                ms = do_bench(lambda cfg=cfg: ours(**cfg)).median_ms
                row["sweep"][label] = dict(ms=ms, gbs=moved / ms / 1e6, of_copy=moved / ms / 1e6 / copy_gbs,
                                           max_rel_err=err)
            except Exception as exc:  # noqa: BLE001 - one configuration's failure is reported, the others still run
                row["sweep"][label] = dict(error=f"{type(exc).__name__}: {exc}"[:200])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", nargs="*", default=["4,32,4096"], help="B,H,S of the attention cases")
    parser.add_argument("--dims", nargs="*", type=int, default=[64, 128])
    parser.add_argument(
        "--norms", nargs="*", default=["16384,4096", "4096,8192"], help="M,N of the norm cases"
    )
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-sweep", action="store_true", help="time the default configurations only")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)"
    rows = []
    print(f"{device_name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for shape in args.attention:
        B, H, S = map(int, shape.split(","))
        for D in args.dims:
            for causal in (False, True):
                try:
                    row = attention_case(B, H, S, D, causal, sweep=DEVICE == 'cuda' and not args.no_sweep)
                except Exception as exc:  # noqa: BLE001 - one case's failure is reported, the others still run
                    row = dict(
                        kind="attention",
                        shape=[B, H, S, D],
                        causal=causal,
                        error=f"{type(exc).__name__}: {exc}"[:300],
                    )
                rows.append(row)
                print(json.dumps(row), flush=True)
    for shape in args.norms:
        M, N = map(int, shape.split(","))
        for op in ("rms_norm", "layer_norm"):
            try:
                row = norm_case(op, M, N, sweep=DEVICE == 'cuda' and not args.no_sweep)
            except Exception as exc:  # noqa: BLE001
                row = dict(kind=op, shape=[M, N], error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device_name, torch=torch.__version__,
                           date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
