"""The seed GEMM exactly as the feature discussion writes it, and its `T.ptr` variant."""
import tile_nb
import tile_nb.language as T


@tile_nb.lazy_jit
def gemm(A, B, C, out_dtype: T.dtype = T.float32, block_M: int = 128, block_N: int = 128, block_K: int = 32):
    M, N, K = T.const('M, N, K')

    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], out_dtype]

    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


@tile_nb.lazy_jit
def gemm_ptr(
    A: T.ptr, B: T.ptr, C: T.ptr,
    out_dtype: T.dtype = T.float32,
    block_M: int = 128,
    block_N: int = 128,
    block_K: int = 32,
):
    M, N, K = T.const('M, N, K')

    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], out_dtype]

    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


# Tiles small enough for the interpreter: what the FMA and TF32 GEMM tests run `gemm_variant` with.
SMALL_TILES = dict(block_M=64, block_N=64, block_K=16, num_stages=2)


@tile_nb.jit
def gemm_variant(A, B, C, block_M: int = 128, block_N: int = 128, block_K: int = 32, threads: int = 128,
                 num_stages: int = 3, in_dtype: T.dtype = T.float16, out_dtype: T.dtype = T.float32,
                 trans_A: bool = False, trans_B: bool = False, clear_accum: bool = False,
                 b_dtype: T.dtype = None, acc_dtype: T.dtype = T.float32, tile_dtype: T.dtype = None,
                 dynamic_M: bool = False):
    """The seed GEMM with its storage order, dtypes and launch shape as compile-time parameters (A is [K, M]
    when trans_A, B is [N, K] when trans_B). A is in_dtype, B b_dtype (in_dtype when None), their shared tiles
    tile_dtype (the operand's own when None; T.tfloat32 asks for TF32 products); the accumulator is acc_dtype,
    cast to out_dtype on the copy out. M is T.dynamic when dynamic_M. The lowering, runtime and GPU tests
    share it, and so do the FMA (float32 / float64) and TF32 GEMM tests."""
    if dynamic_M:
        M = T.dynamic('M')
        N, K = T.const('N, K')
    else:
        M, N, K = T.const('M, N, K')
    b_dtype = in_dtype if b_dtype is None else b_dtype
    A: T.Tensor[[K, M] if trans_A else [M, K], in_dtype]
    B: T.Tensor[[N, K] if trans_B else [K, N], b_dtype]
    C: T.Tensor[[M, N], out_dtype]
    a_tile = in_dtype if tile_dtype is None else tile_dtype
    b_tile = b_dtype if tile_dtype is None else tile_dtype
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_K, block_M) if trans_A else (block_M, block_K), a_tile)
        B_shared = T.alloc_shared((block_N, block_K) if trans_B else (block_K, block_N), b_tile)
        C_local = T.alloc_fragment((block_M, block_N), acc_dtype)
        if not clear_accum:
            T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            if trans_A:
                T.copy(A[k * block_K, bx * block_M], A_shared)
            else:
                T.copy(A[bx * block_M, k * block_K], A_shared)
            if trans_B:
                T.copy(B[by * block_N, k * block_K], B_shared)
            else:
                T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B,
                   clear_accum=clear_accum)
        T.copy(C_local, C[bx * block_M, by * block_N])


@tile_nb.jit
def gemm_minus_row_max(A, B, C, tile_dtype: T.dtype = T.float32, block_M: int = 64, block_N: int = 64,
                       block_K: int = 32):
    """C = S - rowmax(S), S = A @ B of float32 storage in tiles of tile_dtype (T.tfloat32: TF32 products;
    float32: the FMA path), N <= block_N: the accumulator read by a row reduction and a T.Parallel loop in its
    own register layout (all warps along M, wgmma's row order)."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float32]
    B: T.Tensor[[K, N], T.float32]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        A_shared = T.alloc_shared((block_M, block_K), tile_dtype)
        B_shared = T.alloc_shared((block_K, block_N), tile_dtype)
        S = T.alloc_fragment((block_M, block_N), T.float32)
        row_max = T.alloc_fragment((block_M,), T.float32)
        T.clear(S)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, 0], B_shared)
            T.gemm(A_shared, B_shared, S)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.if_then_else(j < N, S[i, j], -T.infinity(T.float32))
        T.reduce_max(S, row_max, dim=1)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = S[i, j] - row_max[i]
        T.copy(S, C[bx * block_M, 0])


@tile_nb.jit
def two_gemms_one_accumulator(A, B, A2, B2, C, in_dtype: T.dtype = T.float16, tile_dtype: T.dtype = None,
                              block: int = 64, block_K: int = 32):
    """C = A B + A2 B2 in one float32 accumulator: A and B in_dtype (in tiles of tile_dtype, in_dtype when
    None), A2 and B2 float32 (the FMA path), so the two T.gemm calls take different paths; the accumulator
    keeps the first call's layout."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], in_dtype]
    B: T.Tensor[[K, N], in_dtype]
    A2: T.Tensor[[M, K], T.float32]
    B2: T.Tensor[[K, N], T.float32]
    C: T.Tensor[[M, N], T.float32]
    tile = in_dtype if tile_dtype is None else tile_dtype
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        a_t = T.alloc_shared((block, block_K), tile)
        b_t = T.alloc_shared((block_K, block), tile)
        a_f = T.alloc_shared((block, block_K), T.float32)
        b_f = T.alloc_shared((block_K, block), T.float32)
        acc = T.alloc_fragment((block, block), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block, k * block_K], a_t)
            T.copy(B[k * block_K, by * block], b_t)
            T.copy(A2[bx * block, k * block_K], a_f)
            T.copy(B2[k * block_K, by * block], b_f)
            T.gemm(a_t, b_t, acc)
            T.gemm(a_f, b_f, acc)
        T.copy(acc, C[bx * block, by * block])


def gemm_ir(M: int, N: int, K: int, **compile_args):
    """The phase-2 IR of `gemm_variant` for these shapes (what the lowering tests compile)."""
    return gemm_variant.specialize(M=M, N=N, K=K, **compile_args)


@tile_nb.jit
def gemm_smem_epilogue(
    A, B, C, block_M: int = 128, block_N: int = 256, block_K: int = 64, threads: int = 256
):
    """The GEMM with its result staged through shared memory (fp16) before the store: the epilogue needs CTA
    barriers, which in a warp-specialized kernel must leave the producer warp out."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        C_shared = T.alloc_shared((block_M, block_N), T.float16)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C_shared)
        T.copy(C_shared, C[bx * block_M, by * block_N])


@tile_nb.jit
def gemm_split_k(A, B, C, block_M: int = 128, block_N: int = 256, block_K: int = 64, split_K: int = 4,
                 threads: int = 256, num_stages: int = 3):
    """Split-K for problems too small to fill the GPU: a third grid axis gives each CTA one of `split_K`
    slices of K, and the partial tiles are summed into C with atomics, so C must be zeroed before the call
    (float32 atomics make the low bits depend on the order the slices land in)."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), split_K, threads=threads) as (bx, by, bz):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        # K steps per slice; the last slices may run past K (zero-filled)
        steps = T.ceildiv(K, block_K * split_K)
        for k in T.Pipelined(steps, num_stages=num_stages):
            T.copy(A[bx * block_M, (bz * steps + k) * block_K], A_shared)
            T.copy(B[(bz * steps + k) * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        for i, j in T.Parallel(block_M, block_N):
            if bx * block_M + i < M and by * block_N + j < N:
                T.atomic_add(C[bx * block_M + i, by * block_N + j], C_local[i, j])


@tile_nb.jit
def gemm_fp8(
    A,
    B,
    C,
    scale_A,
    scale_B,
    a_dtype: T.dtype = T.float8_e4m3fn,
    b_dtype: T.dtype = T.float8_e4m3fn,
    out_dtype: T.dtype = T.bfloat16,
    block_M: int = 128,
    block_N: int = 256,
    block_K: int = 128,
    threads: int = 256,
    num_stages: int = 4,
    precise_accum: bool = False,
):
    """C = (A @ B^T) * scale_A * scale_B with 8-bit float A [M, K] and B [N, K] (both K-major, as
    torch._scaled_mm takes them) and per-tensor scales (one-element tensors).

    Hopper's FP8 tensor cores accumulate with fewer bits than float32 (docs/IR.md). `precise_accum` sums each
    k-tile in its own fragment and adds it to a float32 one on the CUDA cores, which keeps float32 accuracy
    for the registers of a second accumulator (use 128x128 tiles)."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], a_dtype]
    B: T.Tensor[[N, K], b_dtype]
    C: T.Tensor[[M, N], out_dtype]
    scale_A: T.Tensor[[1], T.float32]
    scale_B: T.Tensor[[1], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), a_dtype)
        B_shared = T.alloc_shared((block_N, block_K), b_dtype)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        if precise_accum:
            C_tile = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[by * block_N, k * block_K], B_shared)
            if precise_accum:
                T.gemm(A_shared, B_shared, C_tile, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(block_M, block_N):
                    C_local[i, j] += C_tile[i, j]
            else:
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
        for i, j in T.Parallel(block_M, block_N):
            C_local[i, j] = C_local[i, j] * scale_A[0] * scale_B[0]
        T.copy(C_local, C[bx * block_M, by * block_N])


@tile_nb.jit
def gemm_int8(A, B, C, block_M: int = 128, block_N: int = 256, block_K: int = 128, threads: int = 256,
              num_stages: int = 4):
    """C = A @ B^T in exact integer arithmetic: int8 A [M, K] and B [N, K] (K-major), int32 C."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.int8]
    B: T.Tensor[[N, K], T.int8]
    C: T.Tensor[[M, N], T.int32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.int8)
        B_shared = T.alloc_shared((block_N, block_K), T.int8)
        C_local = T.alloc_fragment((block_M, block_N), T.int32)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[by * block_N, k * block_K], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_B=True)
        T.copy(C_local, C[bx * block_M, by * block_N])


@tile_nb.jit
def gemm_a_in_registers(A, B, C, block_M: int = 64, block_N: int = 64, block_K: int = 64, threads: int = 128):
    """A GEMM whose A tile is a register fragment loaded straight from global memory: wgmma's register form (A
    from registers in the accumulator's layout, B from shared memory), as FlashAttention's P V uses it."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_frag = T.alloc_fragment((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block_M, k * block_K], A_frag)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_frag, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


def fresh_gemm():
    """A fresh kernel object (empty memory cache) of the seed GEMM, so each test that calls it compiles."""
    return tile_nb.jit(gemm.fn)
