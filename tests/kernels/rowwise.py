"""Memory-bound row kernels in the fast form: each CTA copies `block_M` whole rows into register
fragments (16-byte vector loads), computes in registers (row statistics by warp shuffles), and copies the
result out. These are the kernels of benchmarks/rowwise.py; the tests run each against torch on the
interpreter and, marked gpu, on CUDA.

Every kernel takes `dynamic_rows=True` to make the row count a `T.dynamic` dim
(one compiled kernel for every M).
"""
import tile_nb
import tile_nb.language as T

LOG2E = 1.4426950408889634
SQRT_2_OVER_PI = 0.7978845608028654


@tile_nb.jit
def add_bias(X, Bias, Y, block_M: int = 8, threads: int = 128, dynamic_rows: bool = False):
    """Y = X + Bias[None, :]."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    X: T.Tensor[[M, N], T.float16]
    Bias: T.Tensor[[N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float16)
        b = T.alloc_fragment((N,), T.float16)
        T.copy(X[bx * block_M, 0], x)
        T.copy(Bias, b)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] + b[j]
        T.copy(x, Y[bx * block_M, 0])


@tile_nb.jit
def gelu_tanh(X, Y, block_M: int = 8, threads: int = 128, dynamic_rows: bool = False):
    """Y = gelu(X) with the tanh approximation, computed in float32."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    X: T.Tensor[[M, N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        T.copy(X[bx * block_M, 0], x)
        for i, j in T.Parallel(block_M, N):
            v = x[i, j]
            x[i, j] = 0.5 * v * (1.0 + T.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
        T.copy(x, Y[bx * block_M, 0])


# The same GELU under the other math choices, for benchmarks/rowwise.py: tanh as tanh.approx.f32
# whatever the toolkit (the lowering option approx_math), and tanh computed precisely (no
# --use_fast_math, approx_math off).
gelu_tanh_approx = tile_nb.jit(gelu_tanh.fn, options={"approx_math": True})
gelu_tanh_precise = tile_nb.jit(
    gelu_tanh.fn, compile_options={"fast_math": False}, options={"approx_math": False}
)


@tile_nb.jit
def softmax(
    X, Y, dtype: T.dtype = T.float16, block_M: int = 1, threads: int = 128, dynamic_rows: bool = False
):
    """Y = softmax(X, dim=1), computed in float32."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    X: T.Tensor[[M, N], dtype]
    Y: T.Tensor[[M, N], dtype]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        row_max = T.alloc_fragment((block_M,), T.float32)
        row_sum = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], x)
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)
        T.reduce_sum(x, row_sum, dim=1)
        for i in T.Parallel(block_M):
            row_sum[i] = 1.0 / row_sum[i]
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] * row_sum[i]
        T.copy(x, Y[bx * block_M, 0])


@tile_nb.jit
def rms_norm(X, W, Y, eps: float = 1e-6, block_M: int = 1, threads: int = 128, dynamic_rows: bool = False):
    """Y = X / sqrt(mean(X^2) + eps) * W, computed in float32."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    X: T.Tensor[[M, N], T.float16]
    W: T.Tensor[[N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        sq = T.alloc_fragment((block_M, N), T.float32)
        w = T.alloc_fragment((N,), T.float32)
        rstd = T.alloc_fragment((block_M,), T.float32)
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


@tile_nb.jit
def layer_norm(
    X, W, B, Y, eps: float = 1e-5, block_M: int = 1, threads: int = 128, dynamic_rows: bool = False
):
    """Y = (X - mean) / sqrt(var + eps) * W + B over each row, computed in float32."""
    M = T.dynamic('M') if dynamic_rows else T.const('M')
    N = T.const('N')
    X: T.Tensor[[M, N], T.float16]
    W: T.Tensor[[N], T.float16]
    B: T.Tensor[[N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        d = T.alloc_fragment((block_M, N), T.float32)
        w = T.alloc_fragment((N,), T.float32)
        b = T.alloc_fragment((N,), T.float32)
        mean = T.alloc_fragment((block_M,), T.float32)
        rstd = T.alloc_fragment((block_M,), T.float32)
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
