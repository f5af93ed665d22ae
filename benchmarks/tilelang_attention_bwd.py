"""tilelang's FlashAttention example with its backward (examples/flash_attention/example_mha_bwd_bshd.py:
the FlashAttention-2 design, one backward kernel per key block with dQ added by float32 atomics, dQ's T.gemm
with a transposed A) on tile_nb, forward + backward at issue 33's shapes (b4 h32 s4096, d64 / d128, causal
and not) against F.scaled_dot_product_attention + autograd, same timer (tile_nb.bench.timing), same run;
gradients compared with SDPA's first. The design point beside tile_nb's own backward (benchmarks/backward.py).

    python -m tile_nb.run benchmarks/tilelang_attention_bwd.py TILELANG_CHECKOUT OUT.json   # on a GPU
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[1]), "examples", "flash_attention"))
import example_mha_bwd_bshd as ex  # noqa: E402

from tile_nb.bench.timing import do_bench  # noqa: E402

rows = []
B, H, S = 4, 32, 4096
for D in (64, 128):
    for causal in (False, True):
        t0 = time.time()
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.half, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(B, S, H, D, device="cuda", dtype=torch.half)

        def ours():
            return torch.autograd.grad(ex.attention(q, k, v, causal), (q, k, v), do)

        def sdpa():
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=causal).transpose(1, 2)
            return torch.autograd.grad(o, (q, k, v), do)

        try:
            got, ref = ours(), sdpa()
            err = [float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref, strict=True)]
            build_s = time.time() - t0
            t_ours, t_sdpa = do_bench(ours).ms, do_bench(sdpa).ms
            flops = 3.5 * 4 * B * H * S * S * D / (2 if causal else 1)
            row = dict(D=D, causal=causal, ours_ms=t_ours, sdpa_ms=t_sdpa, x_sdpa=t_sdpa / t_ours,
                       ours_tflops=flops / t_ours / 1e9, max_err_dq_dk_dv=err, build_s=build_s)
        except Exception as exc:  # one configuration's failure is its row's error
            row = dict(D=D, causal=causal, error=f"{type(exc).__name__}: {exc}"[:400])
        print(row, flush=True)
        rows.append(row)
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows,
               transpose_a=os.environ.get("TILE_NB_WGMMA_TRANSPOSE_A")), open(sys.argv[2], "w"), indent=1)
