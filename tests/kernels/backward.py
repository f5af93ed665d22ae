"""Backward kernels of the row kernels (issue 33 item 4): RMSNorm (dX, dW), LayerNorm (dX, dW, dB), softmax
(dX) and a fused cross-entropy forward + backward (per-row loss and dlogits from logits and int64 targets), in
the form of tests/kernels/rowwise.py: each CTA holds `block_M` whole rows in register fragments, row
statistics are fragment reductions.

The norm backwards are persistent: `grid = min(ctas, ceildiv(M, block_M))` CTAs, CTA `bx` taking row
blocks bx, bx + grid, bx + 2 grid, ... (X and dY staged in shared memory by a `stages`-deep T.Pipelined
loop: the loads of the next blocks are in flight while it computes this one) and keeping its dW (and dB)
column sums in registers over its rows. Each CTA writes its sums to row `bx` of a `[grid, N]` partial-sum
output in the accumulation dtype, and `col_sum` adds those rows, so the result does not depend on the
order CTAs run in (no atomics). `norm_bwd_config(N)` gives threads, ctas and stages to pass (the defaults
are its choice at N = 4096 on the H200).

`dtype` is the dtype of the tensors (float16, bfloat16, float32 or float64); arithmetic is in
float32, or float64 for float64 tensors (the interpreter's gradcheck). `dynamic_rows=True`
makes the row count a `T.dynamic` dim.
"""
import functools

import tile_nb
import tile_nb.language as T


@tile_nb.jit
def col_sum(P, dtype: T.dtype = T.float32, acc: T.dtype = T.float32, block_R: int = 64, block_N: int = 32,
            threads: int = 128, dynamic_rows: bool = False):
    """out[j] = sum_r P[r, j] (P in `acc`, out in `dtype`): the second pass of dW / dB. Narrow column blocks
    (one CTA per `block_N` columns: 128 CTAs at N = 4096) and elementwise sums over the row blocks, one
    reduction across threads at the end."""
    R = T.dynamic('R') if dynamic_rows else T.const('R')
    N = T.const('N')
    P: T.Tensor[[R, N], acc]
    out = T.empty((N,), dtype)
    with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
        p = T.alloc_fragment((block_R, block_N), acc)
        a = T.alloc_fragment((block_R, block_N), acc)
        s = T.alloc_fragment((block_N,), acc)
        T.clear(a)
        for k in T.serial(T.ceildiv(R, block_R)):
            T.copy(P[k * block_R, bx * block_N], p)
            for r, c in T.Parallel(block_R, block_N):
                a[r, c] = a[r, c] + p[r, c]
        T.reduce_sum(a, s, dim=0)
        T.copy(s, out[bx * block_N])
    return out


def _grid(M, block_M: int, ctas: int):
    """CTAs of a persistent row kernel: `ctas`, or fewer when there are fewer row blocks."""
    return T.min(ctas, T.ceildiv(M, block_M))


def norm_bwd_config(N: int, itemsize: int = 2, sms: int = 132) -> dict:
    """threads, ctas and stages for rms_norm_bwd / layer_norm_bwd at row length N (`itemsize`-byte tensors,
    `sms` SMs; the defaults are the H200's fp16 case). 16 elements of a row per thread, 128 to 1024 threads
    (256 at N = 4096, 512 at 8192): on sm_90a LayerNorm backward's loop then issues about 850 / 1900 warp
    instructions per row and SM, well under the ~1500 / 3000 cycles the SM's share of the copy bandwidth
    gives a row (at 8 per thread: 1280 / 3200, the reductions' cross-warp sums growing with the warps), in
    <= 128 registers, unspilled with static or dynamic rows. CTAs: as many as 128 registers a thread let
    run at once (2 per SM at N = 4096, 1 at 8192), so all stay resident. Stages: up to 4, as the resident
    CTAs' shared rows of X and dY fit 160 KiB. Not computed in the kernel: its template (phase 1, the torch
    op's schema) builds for every N."""
    N = int(N)
    threads = max(128, min(1024, N // 16 // 32 * 32))
    per_sm = max(1, 65536 // (threads * 128))
    stages = max(2, min(4, 160 * 1024 // (per_sm * 2 * N * itemsize)))
    return dict(threads=threads, ctas=sms * per_sm, stages=stages)


@tile_nb.jit
def rms_norm_bwd(
    X,
    W,
    dY,
    dtype: T.dtype = T.float16,
    eps: float = 1e-6,
    block_M: int = 1,
    threads: int = 256,
    ctas: int = 264,
    stages: int = 4,
    dynamic_rows: bool = False,
):
    """For Y = X * r * W, r = rsqrt(mean(X^2) + eps): dX = r * (dY*W - X*r * mean(dY*W * X*r)), and per CTA
    the column sums of dY * X * r over its rows (col_sum of them is dW)."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    dY: T.Tensor[[M, N], dtype]
    grid = _grid(M, block_M, ctas)
    dX = T.empty((M, N), dtype)
    dW_part = T.empty((grid, N), acc)
    with T.Kernel(grid, threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        g = T.alloc_fragment((block_M, N), acc)
        t = T.alloc_fragment((block_M, N), acc)
        w = T.alloc_fragment((N,), acc)
        dw = T.alloc_fragment((N,), acc)
        xs = T.alloc_shared((block_M, N), dtype)
        gs = T.alloc_shared((block_M, N), dtype)
        rstd = T.alloc_fragment((block_M,), acc)
        dot = T.alloc_fragment((block_M,), acc)
        T.copy(W, w)
        T.clear(dw)
        # row blocks bx, bx + grid, bx + 2 grid, ...: neighbouring CTAs read neighbouring rows at the same
        # time. X and dY come through shared memory in a `stages`-deep pipeline (cp.async on sm_80+): the next
        # stages - 1 blocks' loads are in flight while this one computes, without holding registers.
        for k in T.Pipelined(T.ceildiv(T.ceildiv(M, block_M) - bx, grid), num_stages=stages):
            row = (bx + k * grid) * block_M
            T.copy(X[row, 0], xs)
            T.copy(dY[row, 0], gs)
            T.copy(xs, x)
            T.copy(gs, g)
            for i, j in T.Parallel(block_M, N):
                t[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(t, rstd, dim=1)
            for i in T.Parallel(block_M):
                rstd[i] = T.rsqrt(rstd[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * rstd[i]          # x hat (0 in rows past M: X reads as 0 there)
                t[i, j] = g[i, j] * x[i, j]          # dY * x hat: the dW terms
            T.reduce_sum(t, dw, dim=0, clear=False)
            for i, j in T.Parallel(block_M, N):
                g[i, j] = g[i, j] * w[j]             # dY * W
                t[i, j] = g[i, j] * x[i, j]
            T.reduce_sum(t, dot, dim=1)
            for i, j in T.Parallel(block_M, N):
                g[i, j] = rstd[i] * (g[i, j] - x[i, j] * dot[i] / N)
            T.copy(g, dX[row, 0])
        T.copy(dw, dW_part[bx, 0])
    return dX, dW_part


@tile_nb.jit
def layer_norm_bwd(
    X,
    W,
    dY,
    dtype: T.dtype = T.float16,
    eps: float = 1e-5,
    block_M: int = 1,
    threads: int = 256,
    ctas: int = 264,
    stages: int = 4,
    dynamic_rows: bool = False,
):
    """For Y = (X - mean) * rstd * W + B: dX = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dY * W,
    and per CTA the column sums of dY * xhat (-> dW) and of dY (-> dB) over its rows."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    dY: T.Tensor[[M, N], dtype]
    grid = _grid(M, block_M, ctas)
    dX = T.empty((M, N), dtype)
    dW_part = T.empty((grid, N), acc)
    dB_part = T.empty((grid, N), acc)
    with T.Kernel(grid, threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        g = T.alloc_fragment((block_M, N), acc)
        t = T.alloc_fragment((block_M, N), acc)
        w = T.alloc_fragment((N,), acc)
        dw = T.alloc_fragment((N,), acc)
        db = T.alloc_fragment((N,), acc)
        xs = T.alloc_shared((block_M, N), dtype)
        gs = T.alloc_shared((block_M, N), dtype)
        mean = T.alloc_fragment((block_M,), acc)
        rstd = T.alloc_fragment((block_M,), acc)
        g_mean = T.alloc_fragment((block_M,), acc)
        dot = T.alloc_fragment((block_M,), acc)
        T.copy(W, w)
        T.clear(dw)
        T.clear(db)
        # as rms_norm_bwd
        for k in T.Pipelined(T.ceildiv(T.ceildiv(M, block_M) - bx, grid), num_stages=stages):
            row = (bx + k * grid) * block_M
            T.copy(X[row, 0], xs)
            T.copy(dY[row, 0], gs)
            T.copy(xs, x)
            T.copy(gs, g)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_M):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] - mean[i]
                t[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(t, rstd, dim=1)
            for i in T.Parallel(block_M):
                rstd[i] = T.rsqrt(rstd[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * rstd[i]          # x hat (0 in rows past M: X reads as 0 there)
                t[i, j] = g[i, j] * x[i, j]
            T.reduce_sum(t, dw, dim=0, clear=False)
            T.reduce_sum(g, db, dim=0, clear=False)
            for i, j in T.Parallel(block_M, N):
                g[i, j] = g[i, j] * w[j]
                t[i, j] = g[i, j] * x[i, j]
            T.reduce_sum(g, g_mean, dim=1)
            T.reduce_sum(t, dot, dim=1)
            for i, j in T.Parallel(block_M, N):
                g[i, j] = rstd[i] * (g[i, j] - g_mean[i] / N - x[i, j] * dot[i] / N)
            T.copy(g, dX[row, 0])
        T.copy(dw, dW_part[bx, 0])
        T.copy(db, dB_part[bx, 0])
    return dX, dW_part, dB_part


@tile_nb.jit
def softmax_fwd(
    X, dtype: T.dtype = T.float16, block_M: int = 1, threads: int = 128, dynamic_rows: bool = False
):
    """Y = softmax(X, dim=1) as a new tensor (rowwise.softmax writes its Y in
    place, so it cannot be paired)."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    X: T.Tensor[[M, N], dtype]
    Y = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        row_max = T.alloc_fragment((block_M,), acc)
        row_sum = T.alloc_fragment((block_M,), acc)
        T.copy(X[bx * block_M, 0], x)
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = T.exp(x[i, j] - row_max[i])
        T.reduce_sum(x, row_sum, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] / row_sum[i]
        T.copy(x, Y[bx * block_M, 0])
    return Y


@tile_nb.jit
def softmax_bwd(Y, grad_Y, dtype: T.dtype = T.float16, block_M: int = 1, threads: int = 128,
                dynamic_rows: bool = False):
    """For Y = softmax(X): dX = Y * (dY - sum(dY * Y)). Named for tile_nb.torch.autograd pairing with
    softmax_fwd (`Y` is the saved forward output, `grad_Y` its gradient)."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    Y: T.Tensor[[M, N], dtype]
    grad_Y: T.Tensor[[M, N], dtype]
    grad_X = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        y = T.alloc_fragment((block_M, N), acc)
        g = T.alloc_fragment((block_M, N), acc)
        t = T.alloc_fragment((block_M, N), acc)
        dot = T.alloc_fragment((block_M,), acc)
        T.copy(Y[bx * block_M, 0], y)
        T.copy(grad_Y[bx * block_M, 0], g)
        for i, j in T.Parallel(block_M, N):
            t[i, j] = g[i, j] * y[i, j]
        T.reduce_sum(t, dot, dim=1)
        for i, j in T.Parallel(block_M, N):
            g[i, j] = y[i, j] * (g[i, j] - dot[i])
        T.copy(g, grad_X[bx * block_M, 0])
    return grad_X


@tile_nb.jit
def cross_entropy_fwd_bwd(
    logits,
    targets,
    dtype: T.dtype = T.float16,
    grad_scale: float = 1.0,
    block_M: int = 1,
    threads: int = 128,
    dynamic_rows: bool = False,
):
    """loss[i] = logsumexp(logits[i]) - logits[i, targets[i]] (in the accumulation dtype) and
    dlogits = grad_scale * (softmax(logits) - onehot(targets)) (in `dtype`): the gradient of
    grad_scale * loss.sum() (grad_scale = 1 / M for a mean). Targets must lie in [0, N): no ignore_index."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    logits: T.Tensor[[M, N], dtype]
    targets: T.Tensor[[M], T.int64]
    loss = T.empty((M,), acc)
    dlogits = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        t = T.alloc_fragment((block_M, N), acc)
        tgt = T.alloc_fragment((block_M,), T.int64)
        row_max = T.alloc_fragment((block_M,), acc)
        row_sum = T.alloc_fragment((block_M,), acc)
        picked = T.alloc_fragment((block_M,), acc)
        T.copy(logits[bx * block_M, 0], x)
        T.copy(targets[bx * block_M], tgt)
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(block_M, N):
            t[i, j] = T.if_then_else(T.cast(tgt[i], T.int32) == j, x[i, j], T.cast(0, acc))
            x[i, j] = T.exp(x[i, j] - row_max[i])
        T.reduce_sum(t, picked, dim=1)
        T.reduce_sum(x, row_sum, dim=1)
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                loss[bx * block_M + i] = row_max[i] + T.log(row_sum[i]) - picked[i]
        for i, j in T.Parallel(block_M, N):
            x[i, j] = grad_scale * (
                x[i, j] / row_sum[i]
                - T.if_then_else(T.cast(tgt[i], T.int32) == j, T.cast(1, acc), T.cast(0, acc))
            )
        T.copy(x, dlogits[bx * block_M, 0])
    return loss, dlogits


# ---- forwards that return their outputs (T.empty), so they can be paired with the backwards above ----------
@tile_nb.jit
def rms_norm_fwd(X, W, dtype: T.dtype = T.float16, eps: float = 1e-6, block_M: int = 1, threads: int = 128,
                 dynamic_rows: bool = False):
    """Y = X / sqrt(mean(X^2) + eps) * W (rowwise.rms_norm with a returned Y and any dtype)."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    Y = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        sq = T.alloc_fragment((block_M, N), acc)
        w = T.alloc_fragment((N,), acc)
        rstd = T.alloc_fragment((block_M,), acc)
        T.copy(X[bx * block_M, 0], x)
        T.copy(W, w)
        for i, j in T.Parallel(block_M, N):
            sq[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(sq, rstd, dim=1)
        for i in T.Parallel(block_M):
            rstd[i] = T.rsqrt(rstd[i] / N + eps)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] * rstd[i] * w[j]
        T.copy(x, Y[bx * block_M, 0])
    return Y


@tile_nb.jit
def layer_norm_fwd(
    X,
    W,
    B,
    dtype: T.dtype = T.float16,
    eps: float = 1e-5,
    block_M: int = 1,
    threads: int = 128,
    dynamic_rows: bool = False,
):
    """Y = (X - mean) / sqrt(var + eps) * W + B (rowwise.layer_norm with a returned Y and any dtype)."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    B: T.Tensor[[N], dtype]
    Y = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), acc)
        d = T.alloc_fragment((block_M, N), acc)
        w = T.alloc_fragment((N,), acc)
        b = T.alloc_fragment((N,), acc)
        mean = T.alloc_fragment((block_M,), acc)
        rstd = T.alloc_fragment((block_M,), acc)
        T.copy(X[bx * block_M, 0], x)
        T.copy(W, w)
        T.copy(B, b)
        T.reduce_sum(x, mean, dim=1)
        for i in T.Parallel(block_M):
            mean[i] = mean[i] / N
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] - mean[i]
            d[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(d, rstd, dim=1)
        for i in T.Parallel(block_M):
            rstd[i] = T.rsqrt(rstd[i] / N + eps)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] * rstd[i] * w[j] + b[j]
        T.copy(x, Y[bx * block_M, 0])
    return Y


# ---- the pairs: differentiable functions (tile_nb.torch.autograd) ------------------------------------------
def _acc(compile_values):
    return "float64" if str(compile_values.get("dtype", "float16")) == "float64" else "float32"


def _col_sum(part, compile_values):
    """col_sum of a partial-sum output, in the forward's dtype and row mode."""
    from tile_nb import torch as tt

    return tt.op(col_sum)(part, dtype=compile_values.get("dtype", "float16"), acc=_acc(compile_values),
                          dynamic_rows=compile_values.get("dynamic_rows", False))


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _norm_values(compile_values, X):
    """The forward's values a norm backward shares (dtype, eps, dynamic_rows), and the backward's own threads,
    CTAs and stages (norm_bwd_config for X's row length, element size and device; the forward's block_M and
    threads are its own tuning)."""
    sms = _sm_count(X.device.index) if X.is_cuda else 132
    out = {k: v for k, v in compile_values.items() if k in ("dtype", "eps", "dynamic_rows")}
    return dict(out, **norm_bwd_config(X.shape[1], X.element_size(), sms))


@functools.cache
def _sm_count(index):
    import torch

    return torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device()
                                            ).multi_processor_count


def _rms_norm_backward(ctx, grad):
    from tile_nb import torch as tt

    X, W = ctx.saved_tensors
    dX, dW_part = tt.op(rms_norm_bwd)(X, W, grad.contiguous(), **_norm_values(ctx.compile_values, X))
    return dX, _col_sum(dW_part, ctx.compile_values)


def _layer_norm_backward(ctx, grad):
    from tile_nb import torch as tt

    X, W, _ = ctx.saved_tensors
    values = _norm_values(ctx.compile_values, X)
    dX, dW_part, dB_part = tt.op(layer_norm_bwd)(X, W, grad.contiguous(), **values)
    return dX, _col_sum(dW_part, ctx.compile_values), _col_sum(dB_part, ctx.compile_values)


def _cross_entropy_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _cross_entropy_backward(ctx, grad_loss, grad_dlogits):
    """The gradient of the loss only (dlogits is an output for the caller, not differentiated through)."""
    (dlogits,) = ctx.saved_tensors
    scale = grad_loss.to(dlogits.dtype)[:, None]
    return dlogits * scale, None


def _pairs():
    from tile_nb import torch as tt

    return dict(
        softmax=tt.autograd(softmax_fwd, backward=softmax_bwd, save=("Y",)),
        rms_norm=tt.autograd(rms_norm_fwd, backward=_rms_norm_backward, setup_context=_save_inputs),
        layer_norm=tt.autograd(layer_norm_fwd, backward=_layer_norm_backward, setup_context=_save_inputs),
        cross_entropy=tt.autograd(cross_entropy_fwd_bwd, backward=_cross_entropy_backward,
                                  setup_context=_cross_entropy_setup),
    )


def differentiable():
    """{'softmax', 'rms_norm', 'layer_norm', 'cross_entropy'} -> the differentiable function of each pair
    (built on first use: importing this module does not import torch). cross_entropy(logits, targets,
    grad_scale=1.0) returns (loss, dlogits) and differentiates the loss (dlogits is computed for
    grad_scale = 1: leave it there)."""
    global _PAIRS
    if _PAIRS is None:
        _PAIRS = _pairs()
    return _PAIRS


_PAIRS = None


@tile_nb.jit
def cross_entropy_chunked(
    logits,
    targets,
    dtype: T.dtype = T.bfloat16,
    grad_scale: float = 1.0,
    block_M: int = 1,
    block_N: int = 4096,
    threads: int = 256,
    dynamic_rows: bool = False,
):
    """cross_entropy_fwd_bwd for vocabularies too wide for one row in registers (cross_entropy_fwd_bwd's two
    row fragments need 250 KiB at 32000 float32 columns, over sm_90a's 227 KiB): the row in `block_N`-column
    chunks, an online max and sum of exp in one pass, then a second pass that writes dlogits. Same outputs."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    acc = T.float64 if dtype == T.float64 else T.float32
    logits: T.Tensor[[M, N], dtype]
    targets: T.Tensor[[M], T.int64]
    loss = T.empty((M,), acc)
    dlogits = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, block_N), acc)
        t = T.alloc_fragment((block_M, block_N), acc)
        tgt = T.alloc_fragment((block_M,), T.int64)
        m = T.alloc_fragment((block_M,), acc)
        m_prev = T.alloc_fragment((block_M,), acc)
        s = T.alloc_fragment((block_M,), acc)
        chunk_sum = T.alloc_fragment((block_M,), acc)
        picked = T.alloc_fragment((block_M,), acc)
        T.copy(targets[bx * block_M], tgt)
        T.fill(m, -T.infinity(acc))
        T.clear(s)
        T.clear(picked)
        for k in T.serial(T.ceildiv(N, block_N)):
            T.copy(logits[bx * block_M, k * block_N], x)
            for i, j in T.Parallel(block_M, block_N):
                t[i, j] = T.if_then_else(T.cast(tgt[i], T.int32) == k * block_N + j, x[i, j], T.cast(0, acc))
                x[i, j] = T.if_then_else(k * block_N + j < N, x[i, j], -T.infinity(acc))
            T.reduce_sum(t, picked, dim=1, clear=False)
            T.copy(m, m_prev)
            T.reduce_max(x, m, dim=1, clear=False)
            for i, j in T.Parallel(block_M, block_N):
                x[i, j] = T.exp(x[i, j] - m[i])
            T.reduce_sum(x, chunk_sum, dim=1)
            for i in T.Parallel(block_M):
                s[i] = s[i] * T.exp(m_prev[i] - m[i]) + chunk_sum[i]
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                loss[bx * block_M + i] = m[i] + T.log(s[i]) - picked[i]
        for k in T.serial(T.ceildiv(N, block_N)):
            T.copy(logits[bx * block_M, k * block_N], x)
            for i, j in T.Parallel(block_M, block_N):
                x[i, j] = grad_scale * (T.exp(x[i, j] - m[i]) / s[i] - T.if_then_else(
                    T.cast(tgt[i], T.int32) == k * block_N + j, T.cast(1, acc), T.cast(0, acc)))
            T.copy(x, dlogits[bx * block_M, k * block_N])
    return loss, dlogits
