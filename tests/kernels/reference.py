"""Reference kernels of the tile language beyond GEMM: elementwise, softmax, RMSNorm,
FlashAttention forward and a dequantizing GEMM, written the way a tilelang user writes them. Tests
run each on every backend against torch."""
import tile_nb
import tile_nb.language as T

LOG2E = 1.4426950408889634


@tile_nb.jit
def gelu_tanh(X, Y, block: int = 256):
    N = T.const('N')
    X: T.Tensor[[N], T.float16]
    Y: T.Tensor[[N], T.float16]
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                x = T.cast(X[bx * block + i], T.float32)
                inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
                Y[bx * block + i] = T.cast(0.5 * x * (1.0 + T.tanh(inner)), T.float16)


@tile_nb.jit
def softmax(X, Y, block_M: int = 4):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    Y: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        row_max = T.alloc_fragment((block_M,), T.float32)
        row_sum = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], x)
        T.reduce_max(x, row_max, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)
        T.reduce_sum(x, row_sum, dim=1)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] / row_sum[i]
        T.copy(x, Y[bx * block_M, 0])


@tile_nb.jit
def rms_norm(X, W, Y, eps: float = 1e-6, block_M: int = 4):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float16]
    W: T.Tensor[[N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        sq = T.alloc_fragment((block_M, N), T.float32)
        ss = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], x)
        for i, j in T.Parallel(block_M, N):
            sq[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(sq, ss, dim=1)
        for i in T.Parallel(block_M):
            ss[i] = T.rsqrt(ss[i] / N + eps)
        for i, j in T.Parallel(block_M, N):
            x[i, j] = x[i, j] * ss[i] * T.cast(W[j], T.float32)
        T.copy(x, Y[bx * block_M, 0])


@tile_nb.jit
def flash_attention(Q, K, V, O, causal: bool = False, block_M: int = 64, block_N: int = 64,
                    num_stages: int = 2, threads: int = 128):
    B, H, S, D = T.const('B, H, S, D')
    Q: T.Tensor[[B, H, S, D], T.float16]
    K: T.Tensor[[B, H, S, D], T.float16]
    V: T.Tensor[[B, H, S, D], T.float16]
    O: T.Tensor[[B, H, S, D], T.float16]
    scale = T.rsqrt(T.cast(D, T.float32)) * LOG2E
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        Q_s = T.alloc_shared((block_M, D), T.float16)
        K_s = T.alloc_shared((block_N, D), T.float16)
        V_s = T.alloc_shared((block_N, D), T.float16)
        scores = T.alloc_fragment((block_M, block_N), T.float32)
        probs = T.alloc_fragment((block_M, block_N), T.float16)
        acc = T.alloc_fragment((block_M, D), T.float32)
        m = T.alloc_fragment((block_M,), T.float32)
        m_prev = T.alloc_fragment((block_M,), T.float32)
        rescale = T.alloc_fragment((block_M,), T.float32)
        row_sum = T.alloc_fragment((block_M,), T.float32)
        denom = T.alloc_fragment((block_M,), T.float32)
        T.copy(Q[bz, by, bx * block_M, 0], Q_s)
        T.clear(acc)
        T.clear(denom)
        T.fill(m, -T.infinity(T.float32))
        n_blocks = T.ceildiv(S, block_N)
        if causal:
            n_blocks = T.min(n_blocks, T.ceildiv((bx + 1) * block_M, block_N))
        for k in T.Pipelined(n_blocks, num_stages=num_stages):
            T.copy(K[bz, by, k * block_N, 0], K_s)
            for i, j in T.Parallel(block_M, block_N):
                if causal:
                    masked = (k * block_N + j >= S) | (k * block_N + j > bx * block_M + i)
                else:
                    masked = k * block_N + j >= S
                scores[i, j] = T.if_then_else(masked, -T.infinity(T.float32), 0.0)
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
                acc[i, j] *= rescale[i]
            T.copy(V[bz, by, k * block_N, 0], V_s)
            T.gemm(probs, V_s, acc)
        for i, j in T.Parallel(block_M, D):
            acc[i, j] /= denom[i]
        T.copy(acc, O[bz, by, bx * block_M, 0])


@tile_nb.jit
def dequant_gemm(A, Bq, Scale, C, block_M: int = 64, block_N: int = 64, block_K: int = 32):
    """C = A @ (Bq * Scale[None, :]) with int8 weights Bq and one fp16 scale per output column."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    Bq: T.Tensor[[K, N], T.int8]
    Scale: T.Tensor[[N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        Bq_s = T.alloc_shared((block_K, block_N), T.int8)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block_M, k * block_K], A_s)
            T.copy(Bq[k * block_K, by * block_N], Bq_s)
            for i, j in T.Parallel(block_K, block_N):
                B_s[i, j] = T.cast(Bq_s[i, j], T.float16) * T.if_then_else(
                    by * block_N + j < N, Scale[T.min(by * block_N + j, N - 1)], T.float16(0))
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[bx * block_M, by * block_N])


@tile_nb.jit
def column_sums(X, out, block_M: int = 32):
    """Column sums with one CTA per row block and atomics across CTAs."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    out: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        s = T.alloc_fragment((N,), T.float32)
        T.copy(X[bx * block_M, 0], x)
        T.reduce_sum(x, s, dim=0)
        for j in T.Parallel(N):
            T.atomic_add(out[j], s[j])


@tile_nb.jit
def flash_attention_gqa(Q, K, V, O, dtype: T.dtype = T.float16, causal: bool = False, block_M: int = 64,
                        block_N: int = 64, num_stages: int = 2, threads: int = 128):
    """FlashAttention forward with grouped-query attention (HK KV heads, each shared by H // HK query heads),
    any sequence length in one compiled kernel (S is T.dynamic), fp16 or bf16."""
    B, H, HK, D = T.const('B, H, HK, D')
    S = T.dynamic('S')
    Q: T.Tensor[[B, H, S, D], dtype]
    K: T.Tensor[[B, HK, S, D], dtype]
    V: T.Tensor[[B, HK, S, D], dtype]
    O: T.Tensor[[B, H, S, D], dtype]
    scale = T.rsqrt(T.cast(D, T.float32)) * LOG2E
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, by, bz):
        Q_s = T.alloc_shared((block_M, D), dtype)
        K_s = T.alloc_shared((block_N, D), dtype)
        V_s = T.alloc_shared((block_N, D), dtype)
        scores = T.alloc_fragment((block_M, block_N), T.float32)
        probs = T.alloc_fragment((block_M, block_N), dtype)
        acc = T.alloc_fragment((block_M, D), T.float32)
        m = T.alloc_fragment((block_M,), T.float32)
        m_prev = T.alloc_fragment((block_M,), T.float32)
        rescale = T.alloc_fragment((block_M,), T.float32)
        row_sum = T.alloc_fragment((block_M,), T.float32)
        denom = T.alloc_fragment((block_M,), T.float32)
        kv_head = by // (H // HK)
        T.copy(Q[bz, by, bx * block_M, 0], Q_s)
        T.clear(acc)
        T.clear(denom)
        T.fill(m, -T.infinity(T.float32))
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
                scores[i, j] = T.if_then_else(masked, -T.infinity(T.float32), 0.0)
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
                acc[i, j] *= rescale[i]
            T.copy(V[bz, kv_head, k * block_N, 0], V_s)
            T.gemm(probs, V_s, acc)
        for i, j in T.Parallel(block_M, D):
            acc[i, j] /= denom[i]
        T.copy(acc, O[bz, by, bx * block_M, 0])
