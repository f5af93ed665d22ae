"""CUDA device helpers used by the lowering, emitted through TVM's `cuda_func_call`.

TVM 0.27 accepts a CUDA function body next to a call (`tvm.backend.cuda.op.cuda_func_call`); codegen prints
each distinct helper once at the top of the kernel source. We use that for the few PTX instructions whose
exact form matters here (cp.async with a zero-fill source size, ldmatrix.x4 with and without .trans, mma.sync
m16n8k16), so the instruction is spelled out in one readable place.

All helpers take plain pointers; callers pass `address_of(buf[index])`. After inlining, nvcc keeps register
arrays in registers as long as every index is a compile-time constant (our loops over fragments are unrolled).
Builder trap (notes/tvm-0.27.md): the calls are expressions; wrap them in `T.evaluate(...)`.
"""
from __future__ import annotations

from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call

__all__ = [
    "address_of",
    "cp_async",
    "cp_async_commit",
    "cp_async_wait",
    "cta_sync",
    "ldmatrix_x4",
    "mma_m16n8k16",
]


def address_of(buf, indices) -> tirx.Expr:
    """`&buf[indices]` as a handle expression."""
    return tirx.address_of(tirx.BufferLoad(buf, list(indices)))


def _cp_async_source(nbytes: int) -> tuple[str, str]:
    # .cg (L2 only) exists for 16-byte copies; smaller ones must use .ca.
    cache = "cg" if nbytes == 16 else "ca"
    name = f"tnb_cp_async_{nbytes}"
    src = f"""
__forceinline__ __device__ void {name}(void* smem, const void* gmem, int src_bytes) {{
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  // src_bytes < {nbytes}: the rest of the destination is zero-filled (edge tiles).
  asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;\\n" :: "r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}}
"""
    return name, src


def cp_async(dst_ptr, src_ptr, nbytes: int, src_bytes) -> tirx.Expr:
    """Asynchronous global->shared copy of `nbytes` (4, 8 or 16); `src_bytes` = 0 writes zeros."""
    name, src = _cp_async_source(nbytes)
    return cuda_func_call(name, dst_ptr, src_ptr, src_bytes, source_code=src)


_COMMIT = """
__forceinline__ __device__ void tnb_cp_async_commit() {
  asm volatile("cp.async.commit_group;\\n" ::: "memory");
}
"""


def cp_async_commit() -> tirx.Expr:
    return cuda_func_call("tnb_cp_async_commit", source_code=_COMMIT)


def cp_async_wait(pending: int) -> tirx.Expr:
    """Wait until at most `pending` committed cp.async groups of this thread are still in flight."""
    name = f"tnb_cp_async_wait_{pending}"
    src = f"""
__forceinline__ __device__ void {name}() {{
  asm volatile("cp.async.wait_group {pending};\\n" ::: "memory");
}}
"""
    return cuda_func_call(name, source_code=src)


def ldmatrix_x4(dst_ptr, smem_ptr, trans: bool) -> tirx.Expr:
    """Four 8x8 b16 matrices from shared memory into 4 uint32 registers at `dst_ptr`.

    Lane l gives the address of row l % 8 of matrix l // 8; register q receives matrix q.
    """
    suffix = ".trans" if trans else ""
    name = "tnb_ldmatrix_x4" + ("_trans" if trans else "")
    src = f"""
__forceinline__ __device__ void {name}(void* dst, void* smem) {{
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  unsigned* d = (unsigned*)dst;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4{suffix}.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(s) : "memory");
}}
"""
    return cuda_func_call(name, dst_ptr, smem_ptr, source_code=src)


def mma_m16n8k16(acc_ptr, a_ptr, b_ptr, in_dtype: str) -> tirx.Expr:
    """acc[0:4] += A(16x16, 4 regs) @ B(16x8, 2 regs), fp32 accumulation, PTX fragment layouts."""
    ptx_t = {"float16": "f16", "bfloat16": "bf16"}[in_dtype]
    name = f"tnb_mma_m16n8k16_{ptx_t}_f32"
    src = f"""
__forceinline__ __device__ void {name}(float* c, void* a, void* b) {{
  unsigned* A = (unsigned*)a;
  unsigned* B = (unsigned*)b;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.{ptx_t}.{ptx_t}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));
}}
"""
    return cuda_func_call(name, acc_ptr, a_ptr, b_ptr, source_code=src)


_SYNC = """
__forceinline__ __device__ void tnb_cta_sync() {
  __syncthreads();
}
"""


def cta_sync() -> tirx.Expr:
    return cuda_func_call("tnb_cta_sync", source_code=_SYNC)
