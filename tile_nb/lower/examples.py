"""Tile-IR builders for the kernels the lowering is tested and benchmarked on.

They build the phase-2 IR exactly as docs/IR.md describes (what `f.specialize(...)` will produce once the front
end lands), so tests of the lowering do not depend on the front end.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script import tile as Tx

__all__ = ["gemm_ir"]


def gemm_ir(M: int, N: int, K: int, *, block_M: int = 128, block_N: int = 128, block_K: int = 32,
            threads: int = 128, num_stages: int = 3, in_dtype: str = "float16", out_dtype: str = "float32",
            trans_A: bool = False, trans_B: bool = False, clear_accum: bool = False,
            name: str = "gemm") -> tirx.PrimFunc:
    """The seed GEMM of DESIGN.md section 1 (C = A @ B, with optional transposed storage of A and B).

    A is [M, K] ([K, M] when trans_A), B is [K, N] ([N, K] when trans_B), C is [M, N] of `out_dtype`;
    the fragment accumulates in float32 and is cast on the copy out.
    """
    bm, bn, bk = block_M, block_N, block_K
    a_shape, as_shape = ((K, M), (bk, bm)) if trans_A else ((M, K), (bm, bk))
    b_shape, bs_shape = ((N, K), (bn, bk)) if trans_B else ((K, N), (bk, bn))
    with IRBuilder() as ib, T.prim_func():
        T.func_name(name)
        T.func_attr({"global_symbol": name, "tile_nb.threads": threads})
        a = T.arg("A", T.handle())
        A = T.match_buffer(a, a_shape, in_dtype)
        IRBuilder.name("A", A)
        b = T.arg("B", T.handle())
        B = T.match_buffer(b, b_shape, in_dtype)
        IRBuilder.name("B", B)
        c = T.arg("C", T.handle())
        C = T.match_buffer(c, (M, N), out_dtype)
        IRBuilder.name("C", C)
        with T.launch_thread("blockIdx.x", (M + bm - 1) // bm) as bx, \
                    T.launch_thread("blockIdx.y", (N + bn - 1) // bn) as by, \
                    T.launch_thread("threadIdx.x", threads):
            A_s = T.alloc_buffer(as_shape, in_dtype, scope="shared.dyn")
            IRBuilder.name("A_shared", A_s)
            B_s = T.alloc_buffer(bs_shape, in_dtype, scope="shared.dyn")
            IRBuilder.name("B_shared", B_s)
            C_l = T.alloc_buffer((bm, bn), "float32", scope="local.fragment")
            IRBuilder.name("C_local", C_l)
            if not clear_accum:
                Tx.fill(C_l, tirx.const(0, "float32"))
            with T.serial(0, (K + bk - 1) // bk, annotations={"num_stages": num_stages}) as k:
                if trans_A:
                    Tx.copy(A_s[0:bk, 0:bm], A[k * bk:k * bk + bk, bx * bm:bx * bm + bm])
                else:
                    Tx.copy(A_s[0:bm, 0:bk], A[bx * bm:bx * bm + bm, k * bk:k * bk + bk])
                if trans_B:
                    Tx.copy(B_s[0:bn, 0:bk], B[by * bn:by * bn + bn, k * bk:k * bk + bk])
                else:
                    Tx.copy(B_s[0:bk, 0:bn], B[k * bk:k * bk + bk, by * bn:by * bn + bn])
                # clear_accum: beta = 0 on the first k-step only is not expressible here; the seed
                # kernel's clear_accum semantics (C = A_k @ B_k each step) are what the tile IR says.
                Tx.gemm(C_l, A_s, B_s, C_l, trans_A, trans_B, 1.0, 0.0 if clear_accum else 1.0)
            Tx.copy(C[bx * bm:bx * bm + bm, by * bn:by * bn + bn], C_l)
    return ib.get()
