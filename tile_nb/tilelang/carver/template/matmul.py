"""`tilelang.carver.template.MatmulTemplate` on tile_nb: C = A @ B (B stored [N, K] when trans_B, as tilelang
defaults) described by its sizes and dtypes; `.with_arch(arch).recommend_hints(topk)` ranks GEMM tiles by
tile_nb's own heuristic (carver/gemm_hints.py), and `equivalent_function()` is the computation as a TVM
PrimFunc (a TE matmul, for reading; it is not what tile_nb compiles)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..._support import unsupported
from ..gemm_hints import GemmProblem, gemm_path, recommend_gemm_hints

__all__ = ["MatmulTemplate"]


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MatmulTemplate({name}=...): expected a positive int, got {value!r}")
    return value


def _dtype(name: str, value) -> str:
    from ....language.dtypes import as_dtype

    try:
        return str(as_dtype(value))
    except ValueError as err:
        raise ValueError(f"MatmulTemplate({name}=...): {err}") from None


@dataclass
class MatmulTemplate:
    M: int = None
    N: int = None
    K: int = None
    trans_A: bool = False
    trans_B: bool = True
    in_dtype: str = "float16"
    out_dtype: str = "float16"
    accum_dtype: str = "float16"
    with_bias: bool = False
    _arch: object = field(default=None, repr=False)
    _func: object = field(default=None, repr=False)

    def __post_init__(self):
        for name in ("M", "N", "K"):
            setattr(self, name, _positive(name, getattr(self, name)))
        for name in ("in_dtype", "out_dtype", "accum_dtype"):
            setattr(self, name, _dtype(name, getattr(self, name)))
        if self.with_bias:
            raise unsupported("tilelang.carver.template.MatmulTemplate(with_bias=True)")

    def with_arch(self, arch) -> MatmulTemplate:
        from ..arch import CUDA

        if not isinstance(arch, CUDA):
            raise TypeError(f"MatmulTemplate.with_arch(arch): expected a tilelang.carver.arch.CUDA, got "
                            f"{type(arch).__name__}")
        gemm_path(self.in_dtype, self.accum_dtype, arch.caps, self.trans_A, self.trans_B)  # dtype vs arch
        self._arch = arch
        return self

    def has_arch(self) -> bool:
        return self._arch is not None

    @property
    def arch(self):
        return self._arch

    def recommend_hints(self, topk: int = 10) -> list:
        """Up to `topk` hints (roller.Hint), best first; see carver/gemm_hints.py for how they are chosen."""
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"MatmulTemplate.recommend_hints(topk=...): expected a positive int, got "
                             f"{topk!r}")
        if self._arch is None:
            raise ValueError("MatmulTemplate.recommend_hints: no arch yet; call "
                             ".with_arch(CUDA('cuda')) first")
        problem = GemmProblem(self.M, self.N, self.K, self.in_dtype, self.out_dtype, self.accum_dtype,
                              bool(self.trans_A), bool(self.trans_B))
        return recommend_gemm_hints(problem, self._arch, topk)

    def get_hardware_aware_configs(self, arch=None, topk: int = 10) -> list:
        if arch is not None:
            self.with_arch(arch)
        return self.recommend_hints(topk)

    def equivalent_function(self):
        """C[i, j] = sum_k A[i, k] * B[j, k] (B[k, j] without trans_B) in accum_dtype, cast to out_dtype."""
        if self._func is None:
            from tvm import te

            a_shape = (self.K, self.M) if self.trans_A else (self.M, self.K)
            b_shape = (self.N, self.K) if self.trans_B else (self.K, self.N)
            A = te.placeholder(a_shape, self.in_dtype, name="A")
            B = te.placeholder(b_shape, self.in_dtype, name="B")
            k = te.reduce_axis((0, self.K), name="k")

            def a_at(i, kk):
                return A[kk, i] if self.trans_A else A[i, kk]

            def b_at(j, kk):
                return B[j, kk] if self.trans_B else B[kk, j]

            acc_dtype = self.accum_dtype
            acc = te.compute((self.M, self.N), lambda i, j: te.sum(
                a_at(i, k).astype(acc_dtype) * b_at(j, k).astype(acc_dtype), axis=k), name="C_acc")
            C = te.compute((self.M, self.N), lambda i, j: acc[i, j].astype(self.out_dtype), name="C")
            self._func = te.create_prim_func([A, B, C])
        return self._func

    def params_as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("M", "N", "K", "trans_A", "trans_B", "in_dtype", "out_dtype",
                                              "accum_dtype", "with_bias")}

    @property
    def class_attributes(self) -> dict:
        return self.params_as_dict()
