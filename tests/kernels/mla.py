"""FlashMLA's decode shape for one KV head (64 query heads per CTA on 256 threads, head dim 512 + a 64-wide
rotary part): the kernel of tests/test_wgmma_column_split.py and benchmarks/mla_decode.py."""
import tile_nb
import tile_nb.language as T


@tile_nb.jit
def mla_decode(Q, Q_pe, KV, K_pe, block_N: int = 64, threads: int = 256, register_p: bool = True):
    """FlashMLA's decode for one KV head: softmax((Q KV^T + Q_pe K_pe^T) * scale) KV for 64 query heads per
    CTA. The probabilities go to shared memory (each warpgroup computed half of their columns) and, with
    `register_p`, back into a fragment that the second T.gemm reads as its A operand from registers."""
    H, S, D, P = T.const("H, S, D, P")
    Q: T.Tensor[[H, D], T.float16]
    Q_pe: T.Tensor[[H, P], T.float16]
    KV: T.Tensor[[S, D], T.float16]
    K_pe: T.Tensor[[S, P], T.float16]
    O = T.empty((H, D), T.float16)
    scale = 0.125 * 1.44269504
    with T.Kernel(T.ceildiv(H, 64), threads=threads) as hid:
        Q_shared = T.alloc_shared([64, D], T.float16)
        Q_pe_shared = T.alloc_shared([64, P], T.float16)
        KV_shared = T.alloc_shared([block_N, D], T.float16)
        K_pe_shared = T.alloc_shared([block_N, P], T.float16)
        S_shared = T.alloc_shared([64, block_N], T.float16)
        acc_s = T.alloc_fragment([64, block_N], T.float32)
        acc_s_cast = T.alloc_fragment([64, block_N], T.float16)
        acc_o = T.alloc_fragment([64, D], T.float32)
        scores_max = T.alloc_fragment([64], T.float32)
        scores_max_prev = T.alloc_fragment([64], T.float32)
        scores_scale = T.alloc_fragment([64], T.float32)
        scores_sum = T.alloc_fragment([64], T.float32)
        logsum = T.alloc_fragment([64], T.float32)
        T.copy(Q[hid * 64, 0], Q_shared)
        T.copy(Q_pe[hid * 64, 0], Q_pe_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(T.float32))
        for k in T.Pipelined(T.ceildiv(S, block_N), num_stages=2):
            T.copy(KV[k * block_N, 0], KV_shared)
            T.copy(K_pe[k * block_N, 0], K_pe_shared)
            T.clear(acc_s)
            T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True)
            T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True)
            for i, j in T.Parallel(64, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < S, acc_s[i, j], -T.infinity(T.float32))
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(64):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(64, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            T.reduce_sum(acc_s, scores_sum, dim=1)
            T.copy(acc_s, S_shared)
            for i in T.Parallel(64):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(64, D):
                acc_o[i, j] *= scores_scale[i]
            if register_p:
                T.copy(S_shared, acc_s_cast)
                T.gemm(acc_s_cast, KV_shared, acc_o)
            else:
                T.gemm(S_shared, KV_shared, acc_o)
        for i, j in T.Parallel(64, D):
            acc_o[i, j] /= logsum[i]
        T.copy(acc_o, O[hid * 64, 0])
    return O
