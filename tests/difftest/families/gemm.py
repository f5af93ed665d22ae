"""GEMMs: C = A @ B tile by tile with T.gemm, over odd, prime and unit M, N, K, every transpose pair, float16
and bfloat16 inputs, float32 or float16 accumulators, a serial or pipelined k loop (1-3 stages), an A operand
passed as a transposed view (T.StridedTensor), and three epilogues: a fragment copy, an expression in
T.Parallel with a cast, and a copy through shared memory.

Integer-valued inputs make every partial sum exact (|sums| < 2048 also in float16), so those are compared
bitwise whatever the accumulation order; random floats within a tolerance that grows with sqrt(K)."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, close, exact
from ..choose import Chooser
from .common import SIZES, kernel_name, times

__all__ = ["GemmSpec", "draw", "render"]


@dataclass(frozen=True)
class GemmSpec:
    mnk: tuple                  # (M, N, K)
    block: tuple                # (bm, bn, bk)
    trans_a: bool = False       # A stored [K, M]
    trans_b: bool = False       # B stored [N, K]
    in_dtype: str = "float16"
    acc_dtype: str = "float32"
    out_dtype: str = "float32"
    stages: int = 2             # 0: T.serial; else T.Pipelined(num_stages=stages)
    threads: int = 128
    epilogue: str = "copy"      # "copy", "parallel" (C = cast(acc * 2 - 1)), "shared" (acc -> shared -> C)
    values: str = "int"         # "int" (exact) or "normal"
    a_view: str = "contiguous"  # or "transposed": A given as a transposed view, annotated T.StridedTensor
    dynamic_m: bool = False     # M declared with T.dynamic


def draw(c: Chooser) -> GemmSpec:
    mnk = (c.choice(SIZES), c.choice(SIZES), c.choice(SIZES))
    block = (c.choice((16, 32, 64, 64, 128)), c.choice((16, 32, 64, 64, 128)), c.choice((16, 32, 32, 64)))
    in_dtype = c.choice(("float16", "bfloat16"))
    acc = c.choice(("float32", "float32", "float16"))
    values = "int" if acc != "float32" else c.choice(("int", "normal"))
    out = acc if acc != "float32" else c.choice(("float32", "float32", "float16", "bfloat16"))
    if values == "normal" and out != "float32":
        out = "float32"
    threads = c.choice((128, 128, 256))
    if block[0] * block[1] < 256 * threads // 32 and c.integer(0, 9):
        # mma.sync splits the accumulator into 16x16 tiles per warp: most draws give every warp one (a few
        # keep a smaller tile, which must be refused with a clear error)
        block = (max(block[0], 32 * threads // 128), 64) + block[2:]
    return GemmSpec(mnk, block, c.boolean(), c.boolean(), in_dtype, acc, out, c.choice((0, 1, 2, 3)),
                    threads, c.choice(("copy", "parallel", "shared")), values,
                    c.choice(("contiguous", "contiguous", "transposed")), c.choice((False, False, True)))


def render(spec: GemmSpec) -> Case:
    (M, N, K), (bm, bn, bk) = spec.mnk, spec.block
    name = kernel_name("gemm", spec)
    a_shape = (K, M) if spec.trans_a else (M, K)
    b_shape = (N, K) if spec.trans_b else (K, N)
    values = {"values": "int", "hi": 2} if spec.values == "int" else {"values": "normal"}
    A = TensorArg("A", a_shape, spec.in_dtype, view=spec.a_view, **values)
    B = TensorArg("B", b_shape, spec.in_dtype, **values)
    C = TensorArg("C", (M, N), spec.out_dtype, values="poison", view="guarded")
    src = Source()
    src("@tile_nb.jit")
    with src.block(f"def {name}(A, B, C):"):
        if spec.dynamic_m:
            src("N, K = T.const('N, K')")
            src("M = T.dynamic('M')")
        else:
            src("M, N, K = T.const('M, N, K')")
        a_dims = "[K, M]" if spec.trans_a else "[M, K]"
        if spec.a_view == "transposed":
            src("sA0, sA1 = T.const('sA0, sA1')")
            src(f"A: T.StridedTensor[{a_dims}, [sA0, sA1], T.{spec.in_dtype}]")
        else:
            src(f"A: T.Tensor[{a_dims}, T.{spec.in_dtype}]")
        src(f"B: T.Tensor[{'[N, K]' if spec.trans_b else '[K, N]'}, T.{spec.in_dtype}]")
        src(f"C: T.Tensor[[M, N], T.{spec.out_dtype}]")
        with src.block(
            f"with T.Kernel(T.ceildiv(N, {bn}), T.ceildiv(M, {bm}), threads={spec.threads}) as (bx, by):"
        ):
            src(f"A_s = T.alloc_shared({(bk, bm) if spec.trans_a else (bm, bk)}, T.{spec.in_dtype})")
            src(f"B_s = T.alloc_shared({(bn, bk) if spec.trans_b else (bk, bn)}, T.{spec.in_dtype})")
            src(f"acc = T.alloc_fragment(({bm}, {bn}), T.{spec.acc_dtype})")
            src("T.clear(acc)")
            loop = f"T.Pipelined(T.ceildiv(K, {bk}), num_stages={spec.stages})" if spec.stages else \
                f"T.serial(T.ceildiv(K, {bk}))"
            with src.block(f"for k in {loop}:"):
                a_at = (
                    f"{times('k', bk)}, {times('by', bm)}"
                    if spec.trans_a
                    else f"{times('by', bm)}, {times('k', bk)}"
                )
                b_at = (
                    f"{times('bx', bn)}, {times('k', bk)}"
                    if spec.trans_b
                    else f"{times('k', bk)}, {times('bx', bn)}"
                )
                src(f"T.copy(A[{a_at}], A_s)")
                src(f"T.copy(B[{b_at}], B_s)")
                flags = "".join(
                    [
                        ", transpose_A=True" if spec.trans_a else "",
                        ", transpose_B=True" if spec.trans_b else "",
                    ]
                )
                src(f"T.gemm(A_s, B_s, acc{flags})")
            corner = f"{times('by', bm)}, {times('bx', bn)}"
            if spec.epilogue == "copy":
                src(f"T.copy(acc, C[{corner}])")
            elif spec.epilogue == "shared":
                src(f"C_s = T.alloc_shared(({bm}, {bn}), T.{spec.out_dtype})")
                src("T.copy(acc, C_s)")
                src(f"T.copy(C_s, C[{corner}])")
            else:
                with src.block(f"for i, j in T.Parallel({bm}, {bn}):"):
                    with src.block(f"if ({times('by', bm)} + i < M) & ({times('bx', bn)} + j < N):"):
                        src(f"C[{times('by', bm)} + i, {times('bx', bn)} + j] = "
                            f"T.cast(T.cast(acc[i, j], T.float32) * 2.0 - 1.0, T.{spec.out_dtype})")
    model = Source()
    with model.block("def model(A, B, C):"):
        model(f"acc = tiled_gemm(A, B, {spec.trans_a}, {spec.trans_b}, torch.{spec.acc_dtype})")
        if spec.epilogue == "parallel":
            model("acc = acc.float() * 2.0 - 1.0")
        model(f"return {{'C': acc.to(torch.{spec.out_dtype})}}")
    if spec.values == "int":
        rules = {"model": exact(), "gpu": exact()}
    else:
        tol = 2e-5 * max(K, 1) ** 0.5
        rules = {"model": close(1e-5, tol), "gpu": close(1e-4, 4 * tol)}
    return Case("gemm", spec, name, src.text(), [A, B, C], model.text(), {"C": 2}, {"C": rules},
                helpers=["tiled_gemm"])
