"""The patterns issue 10 lists as silently wrong, written as grammar specs: regression checks that run in both
tiers on every run (the generated kernels cover them too, but only when the draw lands on them)."""
from __future__ import annotations

from .families.copies import CopySpec
from .families.gemm import GemmSpec
from .families.loops import LoopSpec
from .families.pipelined import GatherSpec
from .families.reductions import ReduceSpec

__all__ = ["KNOWN"]

KNOWN = {
    # item 0: a T.StridedTensor given a transposed view (strides (1, 70)), copied through shared memory
    "strided_transposed_view_through_shared": CopySpec(
        shape=(70, 300),
        tile=(32, 64),
        path=("shared",),
        dtypes=("float16", "float16", "float16"),
        x_view="transposed",
    ),
    # the same view as a T.gemm operand
    "strided_transposed_view_gemm_operand": GemmSpec(
        mnk=(70, 64, 96), block=(64, 64, 32), a_view="transposed"
    ),
    # item 1: T.copy between a (block_M, 1) fragment and a tensor corner (a column)
    "trailing_one_fragment_corner": CopySpec(shape=(100, 7), tile=(32, 1), path=("fragment",)),
    # item 1, the reference softmax's pattern at N = 1: a (block_M, N) fragment reduced over dim 1
    "trailing_one_reduce_n1": ReduceSpec(
        shape=(10, 1),
        tile=(4, 1),
        op="max",
        dim=1,
        in_dtype="float32",
        acc_dtype="float32",
        out_dtype="float32",
        values="normal",
        buffer="fragment",
        combine="partial",
        loop="serial",
    ),
    # a unit dim in the middle of a tile
    "middle_one_tile": CopySpec(shape=(2, 64, 33), tile=(2, 1, 32), path=("shared",)),
    # item 2: a T.Pipelined loop whose copy index is computed in the body: row[0] = Idx[k];
    # T.copy(A[row[0] * 32, 0], A_s), consumed by T.gemm (a gather-GEMM) and by T.Parallel
    "pipelined_gather_gemm": GatherSpec(
        rows=256, cols=64, block=32, width=64, n_idx=7, stages=2, index="var", consumer="gemm", m=64
    ),
    "pipelined_gather_accumulate": GatherSpec(
        rows=160,
        cols=64,
        block=32,
        width=64,
        n_idx=5,
        stages=3,
        index="local",
        consumer="accumulate",
        dtype="float32",
    ),
    # item 3: a copy starting at a negative offset: T.copy(X[bx * 128 - 1], t)
    "negative_start_copy": CopySpec(shape=(300,), tile=(128,), src_off=(-1,), path=("shared",)),
    # and a write starting at a negative offset (the store guard must test the lower bound too)
    "negative_start_store": CopySpec(shape=(300,), tile=(128,), dst_off=(-1,), path=("fragment",)),
    # item 4: for i in range(9, -1, -1) runs 10 iterations, 9 down to 0
    "range_negative_step": LoopSpec(rows=3, length=10, outer=("range", 9, -1, -1)),
    # T.dynamic dims (one kernel for every size)
    "dynamic_dims_copy": CopySpec(
        shape=(97, 33), tile=(32, 16), src_off=(1, -1), path=("shared", "fragment"), dynamic=("M", "N")
    ),
    # sizes of 1
    "size_one_copy": CopySpec(shape=(1, 1), tile=(16, 16), path=("shared",)),
    "size_one_gemm": GemmSpec(mnk=(1, 1, 1), block=(64, 64, 32)),
    # prime sizes
    "prime_gemm": GemmSpec(mnk=(97, 61, 31), block=(64, 64, 32), stages=3, epilogue="parallel"),
    "prime_copy_offsets": CopySpec(
        shape=(97, 61), tile=(32, 32), src_off=(1, -1), dst_off=(-1, 1), path=("shared",), y_view="transposed"
    ),
    # issue 29: integer sums wrap around at 32 bits (int32 values up to 2^30), in registers across warps and
    # in shared memory, accumulated over tiles
    "int32_sum_wraps_fragment": ReduceSpec(
        shape=(37, 300),
        tile=(4, 128),
        op="sum",
        dim=1,
        in_dtype="int32",
        acc_dtype="int32",
        out_dtype="int32",
        values="wrap",
        buffer="fragment",
        combine="accum",
        loop="serial",
        threads=256,
    ),
    "int32_sum_wraps_shared_columns": ReduceSpec(
        shape=(70, 45),
        tile=(16, 32),
        op="sum",
        dim=0,
        in_dtype="int32",
        acc_dtype="int32",
        out_dtype="int32",
        values="wrap",
        buffer="shared",
        combine="partial",
        loop="pipelined",
    ),
    # issue 29: a NaN makes max / min NaN (reductions, and T.max / T.min combining the partials)
    "max_propagates_nan": ReduceSpec(
        shape=(37, 100),
        tile=(8, 32),
        op="max",
        dim=1,
        in_dtype="float32",
        acc_dtype="float32",
        out_dtype="float32",
        values="nan",
        buffer="fragment",
        masked=True,
        combine="partial",
        loop="serial",
    ),
    "min_propagates_nan_float16": ReduceSpec(
        shape=(50, 61),
        tile=(16, 8),
        op="min",
        dim=0,
        in_dtype="float16",
        acc_dtype="float16",
        out_dtype="float16",
        values="nan",
        buffer="shared",
        combine="accum",
        loop="range",
    ),
    # item 6: 384 KiB of shared memory (sm_90a allows 227 KiB): must be refused at compile, not at launch
    "shared_memory_over_limit": CopySpec(shape=(512, 192), tile=(512, 192), path=("shared",)),
}
