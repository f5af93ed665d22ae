"""Phase-2 tile IR kernels built by hand with TVM's IR builder (docs/IR.md), for the interpreter tests.

Until the front end lands, these stand in for what `tile_nb.jit` produces: the same node kinds (launch_thread
grid, `T.tile.*` calls, `T.parallel` loops, scoped buffers). Each factory returns a `tvm.tirx.PrimFunc`.
This module holds no tests itself; the tests import it.
"""
from __future__ import annotations

import contextlib

import torch
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script import tile as Tx

__all__ = [
    "alloc",
    "atomic_sum_kernel",
    "ceildiv",
    "elementwise_kernel",
    "gemm_kernel",
    "kernel",
    "reduce_kernel",
    "rmsnorm_kernel",
    "softmax_kernel",
    "store",
]


def ceildiv(a, b):
    return (a + b - 1) // b


@contextlib.contextmanager
def kernel(name: str, params: list, grid, threads: int = 128):
    """Build a kernel: `params` are ("A", shape, dtype[, strides]) for tensors
    or ("x", "float32") for scalars.

    Yields (args, block_ids) where args maps each name to its buffer or scalar var; the body built inside the
    `with` is block-level code. The finished PrimFunc is `holder.func` after the block.
    """
    holder = _Holder()
    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name(name)
            args = {}
            for p in params:
                if len(p) == 2:
                    var = T.arg(p[0], getattr(T, p[1])())
                    args[p[0]] = var
                    continue
                pname, shape, dtype, *strides = p
                handle = T.arg(pname, T.handle())
                buf = T.match_buffer(handle, shape, dtype, strides=strides[0] if strides else None)
                IRBuilder.name(pname, buf)
                args[pname] = buf
            grid = grid if isinstance(grid, (list, tuple)) else [grid]
            with contextlib.ExitStack() as stack:
                ids = [
                    stack.enter_context(T.launch_thread(f"blockIdx.{'xyz'[i]}", g))
                    for i, g in enumerate(grid)
                ]
                stack.enter_context(T.launch_thread("threadIdx.x", threads))
                holder.args = args
                yield holder, ids
    holder.func = ib.get()


class _Holder:
    args: dict
    func: tirx.PrimFunc

    def __getitem__(self, name):
        return self.args[name]


def alloc(name: str, shape, dtype: str, scope: str):
    buf = T.alloc_buffer(shape, dtype, scope=scope)
    IRBuilder.name(name, buf)
    return buf


def store(buf, value, indices):
    T.buffer_store(buf, value, list(indices))


def f32(v):
    return tirx.const(v, "float32")


# ---- reference kernels -------------------------------------------------------------------------------------

def gemm_kernel(M, N, K, bm=128, bn=128, bk=32, stages=3, trans_a=False, trans_b=False, in_dtype="float16",
                out_dtype="float32", accum_dtype="float32", clear_accum=False):
    """The seed GEMM: C[M, N] = A @ B with A [M, K] (or [K, M]) and B [K, N] (or [N, K])."""
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    with kernel("gemm", [("A", a_shape, in_dtype), ("B", b_shape, in_dtype), ("C", (M, N), out_dtype)],
                [ceildiv(M, bm), ceildiv(N, bn)]) as (k, (bx, by)):
        A, B, C = k["A"], k["B"], k["C"]
        As = alloc("A_shared", (bk, bm) if trans_a else (bm, bk), in_dtype, "shared.dyn")
        Bs = alloc("B_shared", (bn, bk) if trans_b else (bk, bn), in_dtype, "shared.dyn")
        Cl = alloc("C_local", (bm, bn), accum_dtype, "local.fragment")
        Tx.fill(Cl, tirx.const(0, accum_dtype))
        with T.serial(0, ceildiv(K, bk), annotations={"num_stages": stages}) as ko:
            if trans_a:
                Tx.copy(As[0:bk, 0:bm], A[ko * bk:ko * bk + bk, bx * bm:bx * bm + bm])
            else:
                Tx.copy(As[0:bm, 0:bk], A[bx * bm:bx * bm + bm, ko * bk:ko * bk + bk])
            if trans_b:
                Tx.copy(Bs[0:bn, 0:bk], B[by * bn:by * bn + bn, ko * bk:ko * bk + bk])
            else:
                Tx.copy(Bs[0:bk, 0:bn], B[ko * bk:ko * bk + bk, by * bn:by * bn + bn])
            Tx.gemm(Cl, As, Bs, Cl, trans_a, trans_b, 1.0, 0.0 if clear_accum else 1.0)
        Tx.copy(C[bx * bm:bx * bm + bm, by * bn:by * bn + bn], Cl[0:bm, 0:bn])
    return k.func


def elementwise_kernel(M, N, bm=32, bn=64, dtype="float32"):
    """C = sigmoid(A) * x + B, rows past M skipped by an `if`, columns guarded by the copies."""
    with kernel("elementwise", [("A", (M, N), dtype), ("B", (M, N), dtype), ("C", (M, N), dtype),
                                ("x", "float32")], [ceildiv(M, bm), ceildiv(N, bn)]) as (k, (bx, by)):
        A, B, C, x = k["A"], k["B"], k["C"], k["x"]
        Af = alloc("A_frag", (bm, bn), dtype, "local.fragment")
        Bf = alloc("B_frag", (bm, bn), dtype, "local.fragment")
        Tx.copy(Af[0:bm, 0:bn], A[bx * bm:bx * bm + bm, by * bn:by * bn + bn])
        Tx.copy(Bf[0:bm, 0:bn], B[bx * bm:bx * bm + bm, by * bn:by * bn + bn])
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                with T.If(bx * bm + i < M):
                    with T.Then():
                        store(Af, tirx.sigmoid(Af[i, j]) * tirx.Cast(dtype, x) + Bf[i, j], (i, j))
        Tx.copy(C[bx * bm:bx * bm + bm, by * bn:by * bn + bn], Af[0:bm, 0:bn])
    return k.func


def softmax_kernel(M, N, bm=8, bn=256, dtype="float32"):
    """Row softmax of A [M, N] (N <= bn): padded columns set to -inf before the max."""
    with kernel("softmax", [("A", (M, N), dtype), ("Out", (M, N), dtype)], ceildiv(M, bm)) as (k, (bx,)):
        A, Out = k["A"], k["Out"]
        S = alloc("S", (bm, bn), "float32", "local.fragment")
        row_max = alloc("row_max", (bm,), "float32", "local.fragment")
        row_sum = alloc("row_sum", (bm,), "float32", "local.fragment")
        Tx.copy(S[0:bm, 0:bn], A[bx * bm:bx * bm + bm, 0:bn])
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                store(S, tirx.if_then_else(j < N, S[i, j], -tirx.infinity("float32")), (i, j))
        Tx.max(row_max[0:bm], S[0:bm, 0:bn], [1], False)
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                store(S, tirx.exp2((S[i, j] - row_max[i]) * f32(1.4426950408889634)), (i, j))
        Tx.sum(row_sum[0:bm], S[0:bm, 0:bn], [1], False)
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                store(S, S[i, j] / row_sum[i], (i, j))
        Tx.copy(Out[bx * bm:bx * bm + bm, 0:bn], S[0:bm, 0:bn])
    return k.func


def rmsnorm_kernel(M, N, bm=4, bn=128, dtype="float16", eps=1e-6):
    """Out = A * rsqrt(mean(A^2) + eps) * W, N <= bn; math in float32."""
    with kernel("rmsnorm", [("A", (M, N), dtype), ("W", (N,), dtype), ("Out", (M, N), dtype)],
                ceildiv(M, bm)) as (k, (bx,)):
        A, W, Out = k["A"], k["W"], k["Out"]
        X = alloc("X", (bm, bn), "float32", "local.fragment")
        Sq = alloc("Sq", (bm, bn), "float32", "local.fragment")
        ss = alloc("ss", (bm,), "float32", "local.fragment")
        Wf = alloc("W_frag", (bn,), "float32", "local.fragment")
        Tx.copy(X[0:bm, 0:bn], A[bx * bm:bx * bm + bm, 0:bn])
        Tx.copy(Wf[0:bn], W[0:bn])
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                store(Sq, X[i, j] * X[i, j], (i, j))
        Tx.sum(ss[0:bm], Sq[0:bm, 0:bn], [1], False)
        with T.parallel(0, bm) as i:
            store(ss, tirx.rsqrt(ss[i] / f32(N) + f32(eps)), (i,))
        with T.parallel(0, bm) as i:
            with T.parallel(0, bn) as j:
                store(X, X[i, j] * ss[i] * Wf[j], (i, j))
        Tx.copy(Out[bx * bm:bx * bm + bm, 0:bn], X[0:bm, 0:bn])
    return k.func


def reduce_kernel(M, N, kind="sum", dim=1, bm=16, bn=32, dtype="float32"):
    """Out[M] (dim=1) or Out[N] (dim=0): reduce A [M, N] tile by tile,
    accumulating across tiles with accum."""
    op = {"sum": Tx.sum, "max": Tx.max, "min": Tx.min}[kind]
    init = {"sum": tirx.const(0, dtype), "max": tirx.min_value(dtype), "min": tirx.max_value(dtype)}[kind]
    outer, inner = (M, N) if dim == 1 else (N, M)
    bo, bi = (bm, bn) if dim == 1 else (bn, bm)
    with kernel(f"reduce_{kind}", [("A", (M, N), dtype), ("Out", (outer,), dtype)], ceildiv(outer, bo)) \
            as (k, (bx,)):
        A, Out = k["A"], k["Out"]
        tile = alloc("tile", (bm, bn), dtype, "shared.dyn")
        acc = alloc("acc", (bo,), dtype, "local.fragment")
        Tx.fill(acc, init)
        with T.serial(0, ceildiv(inner, bi)) as ko:
            if dim == 1:
                Tx.copy(tile[0:bm, 0:bn], A[bx * bm:bx * bm + bm, ko * bn:ko * bn + bn])
            else:
                Tx.copy(tile[0:bm, 0:bn], A[ko * bm:ko * bm + bm, bx * bn:bx * bn + bn])
            # past-the-edge elements were read as 0: mask them to the reduction's identity
            with T.parallel(0, bm) as i:
                with T.parallel(0, bn) as j:
                    row = (bx * bm + i) if dim == 1 else (ko * bm + i)
                    col = (ko * bn + j) if dim == 1 else (bx * bn + j)
                    store(tile, tirx.if_then_else(tirx.all(row < M, col < N), tile[i, j], init), (i, j))
            op(acc[0:bo], tile[0:bm, 0:bn], [dim], True)
        Tx.copy(Out[bx * bo:bx * bo + bo], acc[0:bo])
    return k.func


def atomic_sum_kernel(M, N, bm=16):
    """Out[N] += column sums of A [M, N] (float32), one atomicAdd per element from every block."""
    with kernel("atomic_sum", [("A", (M, N), "float32"), ("Out", (N,), "float32")], ceildiv(M, bm)) \
            as (k, (bx,)):
        A, Out = k["A"], k["Out"]
        with T.parallel(0, bm) as i:
            with T.parallel(0, N) as j:
                with T.If(bx * bm + i < M):
                    with T.Then():
                        T.evaluate(tirx.call_extern("float32", "atomicAdd", tirx.address_of(Out[j]),
                                                    A[bx * bm + i, j]))
    return k.func


def randn(*shape, dtype=torch.float32, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)
