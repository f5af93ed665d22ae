"""A plain FlashAttention forward in Triton: the baseline column of benchmarks/attention.py, nothing more.

Not part of tile_nb and not a tuned kernel: the textbook algorithm, written to be read, so that the attention
benchmark can report tile_nb's kernel beside a plain Triton FlashAttention in the same run. Triton is not a
dependency of the project; attention.py shows "-" in this column when it cannot be imported.

The algorithm: one program per (BLOCK_M rows of queries, batch, head). It keeps the BLOCK_M x D output
accumulator, the running row maximum m and the running row sum l of exp(scores - m) in registers, and walks
the keys and values in blocks of BLOCK_N. Each block: scores = Q K^T (scaled by sm_scale * log2(e), so the
exponentials are exp2), new maximum, rescale of l and of the accumulator by exp2(old max - new max), P V
added. At the end the accumulator is divided by l.

Masking is kept off the main loop. Causal: the keys below the tile's first query row (rounded down to
BLOCK_N) are visible to every row of the tile and are read without masks; only the one or two blocks that
straddle the diagonal are masked, and the loop stops there. Not causal: full blocks without masks, then the
last partial block (when S is not a multiple of BLOCK_N) with a mask on the key index. Query rows past S are
loaded as zeros and not stored.

    attention(q, k, v, causal)  # q, k, v: [B, H, S, D] contiguous fp16 CUDA tensors, D a power of 2, 16..256

Self-test against torch's SDPA (on the GPU, or on the CPU through Triton's interpreter):

    TRITON_INTERPRET=1 python benchmarks/triton_attention.py --selftest
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["CONFIGS", "attention", "config_name"]

# The handful of configurations the benchmark tries, taking the fastest that is correct. No tuning past that.
CONFIGS = [
    dict(block_M=128, block_N=64, num_warps=4, num_stages=2),
    dict(block_M=128, block_N=64, num_warps=4, num_stages=3),
    dict(block_M=128, block_N=64, num_warps=8, num_stages=2),
    dict(block_M=128, block_N=64, num_warps=8, num_stages=3),
    dict(block_M=128, block_N=128, num_warps=8, num_stages=2),
    dict(block_M=64, block_N=64, num_warps=4, num_stages=3),
]

LOG2E = 1.4426950408889634


def config_name(cfg: dict) -> str:
    """128x64 w4 s3: block_M x block_N, warps, stages."""
    return f"{cfg['block_M']}x{cfg['block_N']} w{cfg['num_warps']} s{cfg['num_stages']}"


@triton.jit
def _kv_blocks(acc, l_i, m_i, q, k_base, v_base, offs_m, start, stop, S, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Key/value blocks [start, stop) in steps of BLOCK_N into the running (acc, l_i, m_i) of one query tile.

    MASKED: mask keys at or past S and, when CAUSAL, keys after the query row. Without it every key of every
    block must be in range and visible to every row.
    """
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(start, stop, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_offsets = offs_n[:, None] * HEAD_DIM + offs_d[None, :]  # [BLOCK_N, HEAD_DIM]
        if MASKED:
            in_range = offs_n < S
            k = tl.load(k_base + kv_offsets, mask=in_range[:, None], other=0.0)
            v = tl.load(v_base + kv_offsets, mask=in_range[:, None], other=0.0)
        else:
            k = tl.load(k_base + kv_offsets)
            v = tl.load(v_base + kv_offsets)

        qk = tl.dot(q, tl.trans(k)) * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
        if MASKED:
            visible = in_range[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None])
            qk = tl.where(visible, qk, float("-inf"))

        # Online softmax. Every row sees at least one key in its first block (see attention's comments), so
        # m_new is finite and no (-inf) - (-inf) arises.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)  # 0 on the first block (m_i = -inf)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_fwd(Q, K, V, O, S, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)  # batch * H + head
    base = bh.to(tl.int64) * S * HEAD_DIM  # q, k, v, o are contiguous [B, H, S, D]
    q_base, k_base, v_base, o_base = Q + base, K + base, V + base, O + base

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_offsets = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    row_in_range = offs_m < S
    q = tl.load(q_base + q_offsets, mask=row_in_range[:, None], other=0.0)

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)

    if CAUSAL:
        # Keys below the tile's first row, rounded down to a block: visible to all rows, all < S.
        lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        # The blocks that straddle the diagonal; the loop stops at the tile's last row (or S).
        hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    else:
        lo = S // BLOCK_N * BLOCK_N  # full blocks
        hi = S  # then the partial one, if any
    acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_base, v_base, offs_m, 0, lo, S, qk_scale,
                               HEAD_DIM, BLOCK_N, False, CAUSAL)
    # First masked block starts at lo <= every row of the tile (causal) and lo < S: each row sees key lo.
    acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_base, v_base, offs_m, lo, hi, S, qk_scale,
                               HEAD_DIM, BLOCK_N, True, CAUSAL)

    out = acc / l_i[:, None]
    tl.store(o_base + q_offsets, out.to(O.dtype.element_ty), mask=row_in_range[:, None])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, block_M: int = 128,
              block_N: int = 64, num_warps: int | None = None, num_stages: int | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over [B, H, S, D] contiguous tensors of one dtype; returns a new tensor."""
    assert q.shape == k.shape == v.shape and q.dim() == 4, (q.shape, k.shape, v.shape)
    assert q.dtype == k.dtype == v.dtype, (q.dtype, k.dtype, v.dtype)
    B, H, S, D = q.shape
    assert D in (16, 32, 64, 128, 256), f"head dim {D}: a power of 2 from 16 to 256"
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if num_warps is None:
        num_warps = 4 if D <= 64 else 8
    if num_stages is None:
        num_stages = 2
    o = torch.empty_like(q)
    qk_scale = 1.0 / math.sqrt(D) * LOG2E  # sm_scale, in log2 units for exp2
    grid = (triton.cdiv(S, block_M), B * H)
    _attention_fwd[grid](q, k, v, o, S, qk_scale, HEAD_DIM=D, BLOCK_M=block_M, BLOCK_N=block_N,
                         CAUSAL=bool(causal), num_warps=num_warps, num_stages=num_stages)
    return o


def _interpreter_numpy_shim() -> None:
    """Triton 3.6's interpreter turns scalars (1-element arrays) into loop bounds with int(array), which
    numpy 2.4 refuses ("only 0-dimensional arrays can be converted"); give it .item() instead.
    Interpreter only: compiled kernels never take this path.
    """
    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patched


def _selftest() -> int:
    import os

    import torch.nn.functional as F

    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if interpreting:
        _interpreter_numpy_shim()
    if not interpreting and not torch.cuda.is_available():
        print("no CUDA device: run with TRITON_INTERPRET=1 to use Triton's interpreter on the CPU")
        return 2
    device = "cpu" if interpreting else "cuda"
    torch.manual_seed(0)
    # Small shapes, with S not a multiple of either tile size too; the CPU interpreter is slow.
    seqs = (100, 128, 200) if interpreting else (100, 128, 1000, 4096)
    configs = [dict(block_M=128, block_N=64), dict(block_M=64, block_N=64), dict(block_M=64, block_N=128)]
    if not interpreting:
        configs = CONFIGS
    failures = 0
    for d in (64, 128):
        for s in seqs:
            q, k, v = (torch.randn(2, 3, s, d, device=device, dtype=torch.float16) for _ in range(3))
            for causal in (False, True):
                expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                for cfg in configs:
                    o = attention(q, k, v, causal, **cfg)
                    err = (o.float() - expected).abs().max().item()
                    ok = err < 1e-2 and o.dtype == q.dtype and o.shape == q.shape
                    failures += not ok
                    print(f"B2 H3 S{s:<5} D{d:<4} causal={causal!s:5} {cfg['block_M']}x{cfg['block_N']}: "
                          f"max abs err {err:.2e} {'ok' if ok else 'FAIL'}")
    print("all ok" if not failures else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    import sys

    if "--selftest" in sys.argv[1:]:
        sys.exit(_selftest())
    print(__doc__)
