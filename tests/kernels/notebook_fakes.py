"""A stand-in jit function for the notebook tests, built with TVM's IR builder (no front end needed).

`FakeGemm` has the duck-typed surface the views use: `template()`, `specialize()`, `compile()`, a call, and a
Python signature (through `__wrapped__`). Its IR follows docs/IR.md for a tiled GEMM.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace


def build_gemm(M, N, K, block_M=64, block_N=64, block_K=32):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    def cdiv(a, b):
        return (a + b - 1) // b

    with IRBuilder() as ib, T.prim_func():
        T.func_name("gemm")
        handles = [T.arg(n, T.handle()) for n in "ABC"]
        A = T.match_buffer(handles[0], (M, K), "float16")
        B = T.match_buffer(handles[1], (K, N), "float16")
        C = T.match_buffer(handles[2], (M, N), "float32")
        for n, b in zip("ABC", (A, B, C), strict=True):
            IRBuilder.name(n, b)
        with T.launch_thread("blockIdx.x", cdiv(M, block_M)) as bx, \
                T.launch_thread("blockIdx.y", cdiv(N, block_N)) as by, \
                T.launch_thread("threadIdx.x", 128) as tx:
            IRBuilder.name("bx", bx)
            IRBuilder.name("by", by)
            IRBuilder.name("tx", tx)
            A_s = T.alloc_buffer((block_M, block_K), "float16", scope="shared.dyn")
            C_l = T.alloc_buffer((block_M, block_N), "float32", scope="local.fragment")
            IRBuilder.name("A_shared", A_s)
            IRBuilder.name("C_local", C_l)
            with T.serial(cdiv(K, block_K), annotations={"num_stages": 3}) as k:
                IRBuilder.name("k", k)
                T.tile.copy(A_s[0:block_M, 0:block_K],
                            A[bx * block_M:bx * block_M + block_M, k * block_K:k * block_K + block_K])
    return ib.get()


def _gemm(A, B, C, block_M: int = 64, block_N: int = 64, block_K: int = 32):
    """The Python function the fake jit wraps (only its signature is used)."""


class FakeGemm:
    """Duck-typed stand-in for a `@tile_nb.jit` GEMM."""

    __name__ = "gemm"

    def __init__(self, stopped=None):
        functools.update_wrapper(self, _gemm)
        self.__name__ = "gemm"
        self.stopped = stopped
        self.calls = []

    def template(self, **compile_kwargs):
        from tvm import tirx

        M, N, K = (tirx.Var(n, "int32") for n in "MNK")
        func = build_gemm(M, N, K, **compile_kwargs)
        return SimpleNamespace(func=func, script=func.script, stopped=self.stopped)

    def _consts(self, args, kwargs):
        consts = {k: kwargs[k] for k in "MNK" if k in kwargs}
        if args:
            A, B = args[0], args[1]
            consts = {"M": A.shape[0], "K": A.shape[1], "N": B.shape[1]}
        return consts, {k: v for k, v in kwargs.items() if k.startswith("block_")}

    def specialize(self, *args, **kwargs):
        consts, compile_kwargs = self._consts(args, kwargs)
        return build_gemm(consts["M"], consts["N"], consts["K"], **compile_kwargs)

    def compile(self, *args, **kwargs):
        func = self.specialize(*args, **kwargs)
        return SimpleNamespace(
            cuda_source='extern "C" __global__ void gemm_kernel(half* A) {\n  // body\n}',
            ptx=".version 8.0\n.target sm_90a\n.visible .entry gemm_kernel()\n{\n  ret;\n}",
            sass=None, lowered_ir=func,
            resources={"registers": 40, "shared_bytes": 4096, "spill_stores": 0, "spill_loads": 0},
            timings={"lower": 0.012, "codegen": 0.003, "nvcc": 0.8})

    def __call__(self, A, B, C, **kwargs):
        self.calls.append((A, B, C))
        C.copy_(A.float() @ B.float())
