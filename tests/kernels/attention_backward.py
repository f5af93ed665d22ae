"""FlashAttention backward (issue 33 item 4), with grouped-query attention (HK KV heads, each shared by
H // HK query heads), causal or not, and any sequence length in one compiled kernel (S is T.dynamic). Every
gradient tile has one owner CTA: no atomics, no float32 gradient buffers, and the same result on every run.

- `flash_attention_fwd` is reference.flash_attention_gqa returning O and the row logsumexp the backward needs,
  in base 2 of the scaled scores: LSE = max(s) * c + log2(sum(exp2(s * c - max(s) * c))), c = log2(e) /
  sqrt(D), so that P = exp2(s * c - LSE). Its defaults are the forward benchmark's winning tiles (128 x 128,
  256 threads: benchmarks/results/attention.md);
- `attention_bwd_preprocess`: Delta = rowsum(dO * O) in float32;
- `attention_bwd_dkdv`: one CTA per (key block, KV head, batch) keeps its dK and dV tiles in registers over
  every query block of every query head of its group (one pipelined loop over both), then stores them once.
  128 key rows over two warpgroups put its four GEMMs on wgmma; P^T and dS^T stay in registers as operands;
- `attention_bwd_dq`: one CTA per (query block, query head, batch) walks the key blocks as the forward does,
  recomputing P and dP, and accumulates dQ = dS K with dS in registers (three wgmma GEMMs per key block).
  Recomputing costs two GEMMs per tile; adding dQ into memory from the dK/dV kernel instead (float32 atomics
  and an mma.sync GEMM of 64 query rows) took about half that kernel's time on an H100
  (benchmarks/results/backward.md, twenty-first session);
- `attention_bwd_dkdv_dq` + `attention_bwd_dq_convert` (`attention_backward_atomic`): that design again, now
  that a transposed-A T.gemm runs on wgmma and float32 atomics go 2 or 4 at a time: five wgmma GEMMs instead
  of seven, not deterministic. A candidate for benchmarks/backward.py's sweep, not yet timed;
- `attention_backward` (Python) runs the three backward kernels.

`dtype` is float16 or bfloat16 on the GPU; float32 or float64 run on the interpreter (float64 with float64
arithmetic, for gradcheck).
"""
import tile_nb
import tile_nb.language as T

LOG2E = 1.4426950408889634


@tile_nb.jit
def flash_attention_fwd(Q, K, V, dtype: T.dtype = T.float16, causal: bool = False, block_M: int = 128,
                        block_N: int = 128, num_stages: int = 2, threads: int = 256):
    """O = softmax(Q K^T / sqrt(D)) V per head, and LSE (float32, base 2, see the module docstring)."""
    B, H, HK, D = T.const('B, H, HK, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    Q: T.Tensor[[B, H, S, D], dtype]
    K: T.Tensor[[B, HK, S, D], dtype]
    V: T.Tensor[[B, HK, S, D], dtype]
    O = T.empty((B, H, S, D), dtype)
    LSE = T.empty((B, H, S), acc)
    scale = T.rsqrt(T.cast(D, acc)) * LOG2E
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        Q_s = T.alloc_shared((block_M, D), dtype)
        K_s = T.alloc_shared((block_N, D), dtype)
        V_s = T.alloc_shared((block_N, D), dtype)
        scores = T.alloc_fragment((block_M, block_N), acc)
        probs = T.alloc_fragment((block_M, block_N), dtype)
        o = T.alloc_fragment((block_M, D), acc)
        m = T.alloc_fragment((block_M,), acc)
        m_prev = T.alloc_fragment((block_M,), acc)
        rescale = T.alloc_fragment((block_M,), acc)
        row_sum = T.alloc_fragment((block_M,), acc)
        denom = T.alloc_fragment((block_M,), acc)
        kv_head = by // (H // HK)
        T.copy(Q[bz, by, bx * block_M, 0], Q_s)
        T.clear(o)
        T.clear(denom)
        T.fill(m, -T.infinity(acc))
        n_blocks = T.ceildiv(S, block_N)
        if causal:
            n_blocks = T.min(n_blocks, T.ceildiv((bx + 1) * block_M, block_N))
        for k in T.Pipelined(n_blocks, num_stages=num_stages):
            T.copy(K[bz, kv_head, k * block_N, 0], K_s)
            for i, j in T.Parallel(block_M, block_N):
                if causal:
                    masked = (k * block_N + j >= S) | (k * block_N + j > bx * block_M + i)
                else:
                    masked = k * block_N + j >= S
                scores[i, j] = T.if_then_else(masked, -T.infinity(acc), T.cast(0, acc))
            T.gemm(Q_s, K_s, scores, transpose_B=True)
            T.copy(m, m_prev)
            T.reduce_max(scores, m, dim=1, clear=False)
            for i in T.Parallel(block_M):
                rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
            for i, j in T.Parallel(block_M, block_N):
                scores[i, j] = T.exp2(scores[i, j] * scale - m[i] * scale)
            T.reduce_sum(scores, row_sum, dim=1)
            for i in T.Parallel(block_M):
                denom[i] = denom[i] * rescale[i] + row_sum[i]
            T.copy(scores, probs)
            for i, j in T.Parallel(block_M, D):
                o[i, j] *= rescale[i]
            T.copy(V[bz, kv_head, k * block_N, 0], V_s)
            T.gemm(probs, V_s, o)
        for i, j in T.Parallel(block_M, D):
            o[i, j] /= denom[i]
        T.copy(o, O[bz, by, bx * block_M, 0])
        for i in T.Parallel(block_M):
            if bx * block_M + i < S:
                LSE[bz, by, bx * block_M + i] = m[i] * scale + T.log2(denom[i])
    return O, LSE


@tile_nb.jit
def attention_bwd_preprocess(O, dO, dtype: T.dtype = T.float16, block_M: int = 64, threads: int = 128):
    """Delta[b, h, s] = sum_d dO[b, h, s, d] * O[b, h, s, d]."""
    B, H, D = T.const('B, H, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    O: T.Tensor[[B, H, S, D], dtype]
    dO: T.Tensor[[B, H, S, D], dtype]
    Delta = T.empty((B, H, S), acc)
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        o = T.alloc_fragment((block_M, D), acc)
        do = T.alloc_fragment((block_M, D), acc)
        delta = T.alloc_fragment((block_M,), acc)
        T.copy(O[bz, by, bx * block_M, 0], o)
        T.copy(dO[bz, by, bx * block_M, 0], do)
        for i, j in T.Parallel(block_M, D):
            o[i, j] = o[i, j] * do[i, j]
        T.reduce_sum(o, delta, dim=1)
        T.copy(delta, Delta[bz, by, bx * block_M])
    return Delta


@tile_nb.jit
def attention_bwd_dkdv(Q, K, V, dO, LSE, Delta, dtype: T.dtype = T.float16, causal: bool = False,
                       block_M: int = 64, block_N: int = 128, threads: int = 256, num_stages: int = 3):
    """(dK, dV) in `dtype` for the output gradient dO; LSE from flash_attention_fwd, Delta from
    attention_bwd_preprocess. Three stages: 1-4% faster than two at B=4 H=32 S=4096, head dim 64 and 128,
    causal and not (H100, 2026-12-06, benchmarks/results/backward.md)."""
    B, H, HK, D = T.const('B, H, HK, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    Q: T.Tensor[[B, H, S, D], dtype]
    K: T.Tensor[[B, HK, S, D], dtype]
    V: T.Tensor[[B, HK, S, D], dtype]
    dO: T.Tensor[[B, H, S, D], dtype]
    LSE: T.Tensor[[B, H, S], acc]
    Delta: T.Tensor[[B, H, S], acc]
    dK = T.empty((B, HK, S, D), dtype)
    dV = T.empty((B, HK, S, D), dtype)
    scale = T.rsqrt(T.cast(D, acc)) * LOG2E
    sm_scale = T.rsqrt(T.cast(D, acc))
    with T.Kernel(T.ceildiv(S, block_N), HK, B, threads=threads) as (bx, by, bz):
        K_s = T.alloc_shared((block_N, D), dtype)
        V_s = T.alloc_shared((block_N, D), dtype)
        Q_s = T.alloc_shared((block_M, D), dtype)
        dO_s = T.alloc_shared((block_M, D), dtype)
        sT = T.alloc_fragment((block_N, block_M), acc)       # scores, transposed: key j, query i
        dpT = T.alloc_fragment((block_N, block_M), acc)
        pT = T.alloc_fragment((block_N, block_M), dtype)     # P^T and dS^T: register operands of T.gemm
        dsT = T.alloc_fragment((block_N, block_M), dtype)
        dk = T.alloc_fragment((block_N, D), acc)
        dv = T.alloc_fragment((block_N, D), acc)
        lse = T.alloc_shared((block_M,), acc)    # in shared memory, so that the pipeline loads them ahead
        delta = T.alloc_shared((block_M,), acc)
        T.copy(K[bz, by, bx * block_N, 0], K_s)
        T.copy(V[bz, by, bx * block_N, 0], V_s)
        T.clear(dk)
        T.clear(dv)
        first = 0
        if causal:
            first = (bx * block_N) // block_M
        n_m = T.ceildiv(S, block_M) - first
        groups = H // HK
        # one loop over (query head of the group, query block), so that the pipeline runs across heads
        for it in T.Pipelined(groups * n_m, num_stages=num_stages):
            h = by * groups + it // n_m
            m = first + it % n_m
            T.copy(Q[bz, h, m * block_M, 0], Q_s)
            T.copy(dO[bz, h, m * block_M, 0], dO_s)
            T.copy(LSE[bz, h, m * block_M], lse)
            T.copy(Delta[bz, h, m * block_M], delta)
            T.clear(sT)
            T.gemm(K_s, Q_s, sT, transpose_B=True)
            for j, i in T.Parallel(block_N, block_M):
                if causal:
                    masked = (
                        (m * block_M + i >= S)
                        | (bx * block_N + j >= S)
                        | (bx * block_N + j > m * block_M + i)
                    )
                else:
                    masked = (m * block_M + i >= S) | (bx * block_N + j >= S)
                sT[j, i] = T.if_then_else(masked, T.cast(0, acc), T.exp2(sT[j, i] * scale - lse[i]))
            T.copy(sT, pT)
            T.clear(dpT)
            T.gemm(V_s, dO_s, dpT, transpose_B=True)          # (dO V^T)^T
            T.gemm(pT, dO_s, dv)                              # dV += P^T dO: runs while dS is computed
            for j, i in T.Parallel(block_N, block_M):
                sT[j, i] = sT[j, i] * (dpT[j, i] - delta[i]) * sm_scale
            T.copy(sT, dsT)
            T.gemm(dsT, Q_s, dk)                              # dK += dS^T Q
        T.copy(dk, dK[bz, by, bx * block_N, 0])
        T.copy(dv, dV[bz, by, bx * block_N, 0])
    return dK, dV


@tile_nb.jit
def attention_bwd_dq(Q, K, V, dO, LSE, Delta, dtype: T.dtype = T.float16, causal: bool = False,
                     block_M: int = 128, block_N: int = 64, threads: int = 256, num_stages: int = 2):
    """dQ in `dtype`: one CTA per query block walks the key blocks as the forward does, recomputing P and
    dP."""
    B, H, HK, D = T.const('B, H, HK, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    Q: T.Tensor[[B, H, S, D], dtype]
    K: T.Tensor[[B, HK, S, D], dtype]
    V: T.Tensor[[B, HK, S, D], dtype]
    dO: T.Tensor[[B, H, S, D], dtype]
    LSE: T.Tensor[[B, H, S], acc]
    Delta: T.Tensor[[B, H, S], acc]
    dQ = T.empty((B, H, S, D), dtype)
    scale = T.rsqrt(T.cast(D, acc)) * LOG2E
    sm_scale = T.rsqrt(T.cast(D, acc))
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        Q_s = T.alloc_shared((block_M, D), dtype)
        dO_s = T.alloc_shared((block_M, D), dtype)
        K_s = T.alloc_shared((block_N, D), dtype)
        V_s = T.alloc_shared((block_N, D), dtype)
        s = T.alloc_fragment((block_M, block_N), acc)
        dp = T.alloc_fragment((block_M, block_N), acc)
        ds = T.alloc_fragment((block_M, block_N), dtype)     # dS: the register operand of dQ's T.gemm
        dq = T.alloc_fragment((block_M, D), acc)
        lse = T.alloc_fragment((block_M,), acc)
        delta = T.alloc_fragment((block_M,), acc)
        kv_head = by // (H // HK)
        T.copy(Q[bz, by, bx * block_M, 0], Q_s)
        T.copy(dO[bz, by, bx * block_M, 0], dO_s)
        T.copy(LSE[bz, by, bx * block_M], lse)
        T.copy(Delta[bz, by, bx * block_M], delta)
        T.clear(dq)
        n_blocks = T.ceildiv(S, block_N)
        if causal:
            n_blocks = T.min(n_blocks, T.ceildiv((bx + 1) * block_M, block_N))
        for k in T.Pipelined(n_blocks, num_stages=num_stages):
            T.copy(K[bz, kv_head, k * block_N, 0], K_s)
            T.copy(V[bz, kv_head, k * block_N, 0], V_s)
            T.clear(s)
            T.gemm(Q_s, K_s, s, transpose_B=True)
            T.clear(dp)
            T.gemm(dO_s, V_s, dp, transpose_B=True)
            for i, j in T.Parallel(block_M, block_N):
                if causal:
                    masked = (
                        (bx * block_M + i >= S)
                        | (k * block_N + j >= S)
                        | (k * block_N + j > bx * block_M + i)
                    )
                else:
                    masked = (bx * block_M + i >= S) | (k * block_N + j >= S)
                s[i, j] = T.if_then_else(masked, T.cast(0, acc), T.exp2(s[i, j] * scale - lse[i]))
                s[i, j] = s[i, j] * (dp[i, j] - delta[i]) * sm_scale
            T.copy(s, ds)
            T.gemm(ds, K_s, dq)                               # dQ += dS K
        T.copy(dq, dQ[bz, by, bx * block_M, 0])
    return dQ


@tile_nb.jit
def attention_bwd_dkdv_dq(Q, K, V, dO, LSE, Delta, dQacc, dtype: T.dtype = T.float16, causal: bool = False,
                          block_M: int = 64, block_N: int = 128, threads: int = 256, num_stages: int = 3):
    """attention_bwd_dkdv plus dQ: each step also adds its dS K (64 query rows) into the float32 `dQacc`
    (zeros on entry) with atomics, FlashAttention-2's five GEMMs instead of seven over both kernels; dS goes
    through shared memory as the [keys, queries] A of a transposed-A T.gemm, and K^T is kept beside K so that
    dQ's B is stored [N, K]: its 64 query rows then split over the two warpgroups by columns on wgmma at head
    dim 64 too (a [K, N] B would need 32-column slices, which wgmma's panels do not take). A candidate against
    attention_bwd_dq on the GPU (benchmarks/backward.py): not deterministic, as atomics are not."""
    B, H, HK, D = T.const('B, H, HK, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    Q: T.Tensor[[B, H, S, D], dtype]
    K: T.Tensor[[B, HK, S, D], dtype]
    V: T.Tensor[[B, HK, S, D], dtype]
    dO: T.Tensor[[B, H, S, D], dtype]
    LSE: T.Tensor[[B, H, S], acc]
    Delta: T.Tensor[[B, H, S], acc]
    dQacc: T.Tensor[[B, H, S, D], acc]
    dK = T.empty((B, HK, S, D), dtype)
    dV = T.empty((B, HK, S, D), dtype)
    scale = T.rsqrt(T.cast(D, acc)) * LOG2E
    sm_scale = T.rsqrt(T.cast(D, acc))
    with T.Kernel(T.ceildiv(S, block_N), HK, B, threads=threads) as (bx, by, bz):
        K_s = T.alloc_shared((block_N, D), dtype)
        V_s = T.alloc_shared((block_N, D), dtype)
        Q_s = T.alloc_shared((block_M, D), dtype)
        dO_s = T.alloc_shared((block_M, D), dtype)
        dsT_s = T.alloc_shared((block_N, block_M), dtype)    # dS^T, read transposed as dQ's A
        Kt_s = T.alloc_shared((D, block_N), dtype)           # K^T: dQ's B stored [N, K]
        sT = T.alloc_fragment((block_N, block_M), acc)
        dpT = T.alloc_fragment((block_N, block_M), acc)
        pT = T.alloc_fragment((block_N, block_M), dtype)
        dsT = T.alloc_fragment((block_N, block_M), dtype)
        dk = T.alloc_fragment((block_N, D), acc)
        dv = T.alloc_fragment((block_N, D), acc)
        dq = T.alloc_fragment((block_M, D), acc)
        lse = T.alloc_shared((block_M,), acc)
        delta = T.alloc_shared((block_M,), acc)
        T.copy(K[bz, by, bx * block_N, 0], K_s)
        T.copy(V[bz, by, bx * block_N, 0], V_s)
        for d, j in T.Parallel(D, block_N):
            Kt_s[d, j] = K_s[j, d]
        T.clear(dk)
        T.clear(dv)
        first = 0
        if causal:
            first = (bx * block_N) // block_M
        n_m = T.ceildiv(S, block_M) - first
        groups = H // HK
        for it in T.Pipelined(groups * n_m, num_stages=num_stages):
            h = by * groups + it // n_m
            m = first + it % n_m
            T.copy(Q[bz, h, m * block_M, 0], Q_s)
            T.copy(dO[bz, h, m * block_M, 0], dO_s)
            T.copy(LSE[bz, h, m * block_M], lse)
            T.copy(Delta[bz, h, m * block_M], delta)
            T.clear(sT)
            T.gemm(K_s, Q_s, sT, transpose_B=True)
            for j, i in T.Parallel(block_N, block_M):
                if causal:
                    masked = (
                        (m * block_M + i >= S)
                        | (bx * block_N + j >= S)
                        | (bx * block_N + j > m * block_M + i)
                    )
                else:
                    masked = (m * block_M + i >= S) | (bx * block_N + j >= S)
                sT[j, i] = T.if_then_else(masked, T.cast(0, acc), T.exp2(sT[j, i] * scale - lse[i]))
            T.copy(sT, pT)
            T.clear(dpT)
            T.gemm(V_s, dO_s, dpT, transpose_B=True)
            T.gemm(pT, dO_s, dv)
            for j, i in T.Parallel(block_N, block_M):
                sT[j, i] = sT[j, i] * (dpT[j, i] - delta[i]) * sm_scale
            T.copy(sT, dsT)
            T.copy(sT, dsT_s)
            T.gemm(dsT, Q_s, dk)
            T.clear(dq)
            T.gemm(dsT_s, Kt_s, dq, transpose_A=True, transpose_B=True)   # dQ rows of this step: dS K
            T.atomic_add(dQacc[bz, h, m * block_M, 0], dq)
        T.copy(dk, dK[bz, by, bx * block_N, 0])
        T.copy(dv, dV[bz, by, bx * block_N, 0])
    return dK, dV


@tile_nb.jit
def attention_bwd_dq_convert(dQacc, dtype: T.dtype = T.float16, block_M: int = 64, threads: int = 128):
    """dQ in `dtype` from attention_bwd_dkdv_dq's float32 sums."""
    B, H, D = T.const('B, H, D')
    S = T.dynamic('S')
    acc = T.float64 if dtype == T.float64 else T.float32
    dQacc: T.Tensor[[B, H, S, D], acc]
    dQ = T.empty((B, H, S, D), dtype)
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        tile = T.alloc_fragment((block_M, D), acc)
        out = T.alloc_fragment((block_M, D), dtype)
        T.copy(dQacc[bz, by, bx * block_M, 0], tile)
        T.copy(tile, out)
        T.copy(out, dQ[bz, by, bx * block_M, 0])
    return dQ


def attention_backward_atomic(Q, K, V, O, LSE, dO, causal=False, dtype=None, dkdv=None):
    """(dQ, dK, dV) as attention_backward, with dQ added by the dK/dV kernel (attention_bwd_dkdv_dq) into a
    float32 buffer and converted: one pass over the tiles instead of two."""
    import torch

    dtype = dtype or str(Q.dtype).removeprefix("torch.")
    dO = dO.contiguous()
    Delta = attention_bwd_preprocess(O, dO, dtype=dtype)
    dQacc = torch.zeros(Q.shape, dtype=Delta.dtype, device=Q.device)
    dK, dV = attention_bwd_dkdv_dq(Q, K, V, dO, LSE, Delta, dQacc, dtype=dtype, causal=causal, **(dkdv or {}))
    return attention_bwd_dq_convert(dQacc, dtype=dtype), dK, dV


def attention_backward(Q, K, V, O, LSE, dO, causal=False, dtype=None, dkdv=None, dq=None):
    """(dQ, dK, dV) in the inputs' dtype: the preprocess kernel, then attention_bwd_dkdv and attention_bwd_dq
    (`dkdv`, `dq`: their compile-time arguments, e.g. dict(num_stages=3)). Kernels are called through
    tile_nb.torch.op, so torch.compile can trace this."""
    from tile_nb import torch as tt

    dtype = dtype or str(Q.dtype).removeprefix("torch.")
    dO = dO.contiguous()
    Delta = tt.op(attention_bwd_preprocess)(O, dO, dtype=dtype)
    dK, dV = tt.op(attention_bwd_dkdv)(Q, K, V, dO, LSE, Delta, dtype=dtype, causal=causal, **(dkdv or {}))
    dQ = tt.op(attention_bwd_dq)(Q, K, V, dO, LSE, Delta, dtype=dtype, causal=causal, **(dq or {}))
    return dQ, dK, dV


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, *output)


def _backward(ctx, grad_O, grad_LSE):
    """The gradient of O only (LSE is an output for the backward, not differentiated through)."""
    Q, K, V, O, LSE = ctx.saved_tensors
    cv = ctx.compile_values
    return attention_backward(Q, K, V, O, LSE, grad_O, causal=cv.get("causal", False), dtype=cv.get("dtype"))


_PAIR = None


def flash_attention():
    """flash_attention_fwd paired with its backward (tile_nb.torch.autograd): a differentiable (O, LSE) = f(Q,
    K, V, **compile-time values) whose O has gradients for Q, K and V. Built on first use."""
    global _PAIR
    if _PAIR is None:
        from tile_nb import torch as tt

        _PAIR = tt.autograd(flash_attention_fwd, backward=_backward, setup_context=_setup)
    return _PAIR
