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
    "APPROX_OPS",
    "address_of",
    "approx_math",
    "asm_statement",
    "atomic_add_float32_vector",
    "atomic_extreme",
    "cp_async",
    "cp_async_commit",
    "cp_async_wait",
    "cta_sync",
    "device_helper",
    "fence_proxy_async",
    "GRID_SYNC_HELPER",
    "grid_sync",
    "ldmatrix_x4",
    "minmax_nan",
    "mma_m16n8k16",
    "mma_m16n8k8_tf32",
    "named_barrier",
    "named_barrier_arrive",
    "named_barrier_sync",
    "set_max_registers",
    "to_tf32",
    "warp_uniform",
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


_RAW_ZERO = {16: "make_uint4(0u, 0u, 0u, 0u)", 8: "make_uint2(0u, 0u)", 4: "0u"}


def _copy_sync_source(nbytes: int) -> tuple[str, str]:
    raw = {16: "uint4", 8: "uint2", 4: "unsigned"}[nbytes]
    name = f"tnb_copy_sync_{nbytes}"
    src = f"""
__forceinline__ __device__ void {name}(void* smem, const void* gmem, int src_bytes) {{
  // cp.async's contract without cp.async (sm_75): the first src_bytes bytes copied, the rest zero-filled.
  {raw} v = {_RAW_ZERO[nbytes]};
  if (src_bytes >= {nbytes}) {{
    v = *(const {raw}*)gmem;
  }} else {{
    for (int i = 0; i < src_bytes; ++i) ((unsigned char*)&v)[i] = ((const unsigned char*)gmem)[i];
  }}
  *({raw}*)smem = v;
}}
"""
    return name, src


def cp_async(dst_ptr, src_ptr, nbytes: int, src_bytes, *, sync: bool = False) -> tirx.Expr:
    """Asynchronous global->shared copy of `nbytes` (4, 8 or 16); `src_bytes` = 0 writes zeros. With `sync`
    (targets without cp.async, arch.py) the same copy as one load and one store, complete when it returns."""
    name, src = _copy_sync_source(nbytes) if sync else _cp_async_source(nbytes)
    return cuda_func_call(name, dst_ptr, src_ptr, src_bytes, source_code=src)


def asm_statement(name: str, ptx: str) -> tirx.Expr:
    """A device function `name()` that is one PTX instruction `ptx` (a compiler memory barrier too)."""
    src = f"""
__forceinline__ __device__ void {name}() {{
  asm volatile("{ptx}\\n" ::: "memory");
}}
"""
    return cuda_func_call(name, source_code=src)


def cp_async_commit() -> tirx.Expr:
    return asm_statement("tnb_cp_async_commit", "cp.async.commit_group;")


def cp_async_wait(pending: int) -> tirx.Expr:
    """Wait until at most `pending` committed cp.async groups of this thread are still in flight."""
    return asm_statement(f"tnb_cp_async_wait_{pending}", f"cp.async.wait_group {pending};")


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


def mma_m16n8k16(acc_ptr, a_ptr, b_ptr, in_dtype: str, *, k8: bool = False) -> tirx.Expr:
    """acc[0:4] += A(16x16, 4 regs) @ B(16x8, 2 regs), fp32 accumulation, PTX fragment layouts.

    With `k8` (sm_75, which has mma.sync m16n8k8 but not m16n8k16, float16 only): two m16n8k8 MMAs, the first
    on k 0..7 (A's registers 0 and 1, B's register 0), the second on k 8..15 (A's 2 and 3, B's 1): in the PTX
    ISA's fragment layouts the m16n8k16 registers are exactly the two m16n8k8 fragments side by side."""
    ptx_t = {"float16": "f16", "bfloat16": "bf16"}[in_dtype]
    if k8:
        if in_dtype != "float16":
            raise ValueError(f"mma.sync m16n8k8 on sm_75 takes float16 inputs, not {in_dtype}")
        name = "tnb_mma_m16n8k8x2_f16_f32"
        src = f"""
__forceinline__ __device__ void {name}(float* c, void* a, void* b) {{
  unsigned* A = (unsigned*)a;
  unsigned* B = (unsigned*)b;
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {{%0, %1, %2, %3}}, {{%4, %5}}, {{%6}}, {{%0, %1, %2, %3}};\\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(A[0]), "r"(A[1]), "r"(B[0]));
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {{%0, %1, %2, %3}}, {{%4, %5}}, {{%6}}, {{%0, %1, %2, %3}};\\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(A[2]), "r"(A[3]), "r"(B[1]));
}}
"""
        return cuda_func_call(name, acc_ptr, a_ptr, b_ptr, source_code=src)
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


def to_tf32(x) -> tirx.Expr:
    """A float32 value rounded to TF32 (`cvt.rna.tf32.f32`: nearest, ties away from zero), as the uint32
    register a .tf32 MMA operand is."""
    code = """
__forceinline__ __device__ unsigned tnb_to_tf32(float x) {
  unsigned y;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
  return y;
}
"""
    return cuda_func_call("tnb_to_tf32", x, source_code=code, return_type="uint32")


def mma_m16n8k8_tf32(acc_ptr, a_ptr, b_ptr) -> tirx.Expr:
    """acc[0:4] += A(16x8 tf32, 4 regs) @ B(8x8 tf32, 2 regs), float32 accumulation (sm_80+). PTX fragment
    layouts (g = lane / 4, t = lane % 4): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k t,
    n g), b1 (k t + 4, n g); c as m16n8k16's."""
    name = "tnb_mma_m16n8k8_tf32_f32"
    src = f"""
__forceinline__ __device__ void {name}(float* c, void* a, void* b) {{
  unsigned* A = (unsigned*)a;
  unsigned* B = (unsigned*)b;
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
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


def device_helper(name, params, body, *args) -> tirx.Expr:
    """A call of the inline device function `name(params) { body }` (its source goes with the call)."""
    src = f"""
__forceinline__ __device__ void {name}({params}) {{
{body}
}}
"""
    return cuda_func_call(name, *args, source_code=src)


def cta_sync() -> tirx.Expr:
    return cuda_func_call("tnb_cta_sync", source_code=_SYNC)


# The grid barrier of cooperative groups: it uses the grid workspace that only a cooperative launch provides,
# so a kernel calling it is launched cooperatively (backend/build.py finds the helper by this name).
GRID_SYNC_HELPER = "tnb_grid_sync"
_GRID_SYNC = f"""
#include <cooperative_groups.h>
__forceinline__ __device__ void {GRID_SYNC_HELPER}() {{
  // every thread of every block arrives; global writes before it are visible to all blocks after it
  cooperative_groups::this_grid().sync();
}}
"""


def grid_sync() -> tirx.Expr:
    return cuda_func_call(GRID_SYNC_HELPER, source_code=_GRID_SYNC)


# ---- vector moves between memory and registers, with dtype conversion --------------------------------------

# C types of TVM's CUDA code for each dtype (how it declares buffers of that dtype).
C_TYPES = {"float16": "half", "bfloat16": "nv_bfloat16", "float32": "float", "float64": "double",
           "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
           "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long",
           "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}
_RAW = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}
_TO_FLOAT = {"float16": "__half2float({})", "bfloat16": "__bfloat162float({})"}
_FROM_FLOAT = {"float16": "__float2half_rn({})", "bfloat16": "__float2bfloat16_rn({})"}


def convert(value: str, src: str, dst: str) -> str:
    """C++ text converting `value` of dtype `src` to `dst`, rounding as TVM's casts (and torch) do."""
    if src == dst:
        return value
    if src in _TO_FLOAT:
        value, src = _TO_FLOAT[src].format(value), "float32"
        if dst == "float32":
            return value
    if dst in _FROM_FLOAT:
        return _FROM_FLOAT[dst].format(value if src in ("float32", "float64") else f"(float)({value})")
    return f"({C_TYPES[dst]})({value})"


def vector_bytes_ok(n: int, dtype: str) -> bool:
    return str(dtype) in C_TYPES and n * tvm_bits(dtype) // 8 in _RAW


def tvm_bits(dtype) -> int:
    import tvm

    return tvm.DataType(str(dtype)).bits


def vector_load(dst_ptr, src_ptr, n: int, src_dtype: str, dst_dtype: str) -> tirx.Expr:
    """Load `n` consecutive elements of `src_dtype` at `src_ptr` (one aligned access of n * size bytes) into
    the registers at `dst_ptr`, converted to `dst_dtype`."""
    src_dtype, dst_dtype = str(src_dtype), str(dst_dtype)
    nbytes = n * tvm_bits(src_dtype) // 8
    name = f"tnb_vld_{src_dtype}x{n}_{dst_dtype}"
    code = f"""
__forceinline__ __device__ void {name}(void* dst, const void* src) {{
  {_RAW[nbytes]} raw = *(const {_RAW[nbytes]}*)src;
  const {C_TYPES[src_dtype]}* s = (const {C_TYPES[src_dtype]}*)&raw;
  {C_TYPES[dst_dtype]}* d = ({C_TYPES[dst_dtype]}*)dst;
#pragma unroll
  for (int i = 0; i < {n}; ++i) d[i] = {convert("s[i]", src_dtype, dst_dtype)};
}}
"""
    return cuda_func_call(name, dst_ptr, src_ptr, source_code=code)


def vector_store(dst_ptr, src_ptr, n: int, src_dtype: str, dst_dtype: str) -> tirx.Expr:
    """Store `n` registers of `src_dtype` at `src_ptr`, converted to `dst_dtype`, as one aligned access at
    `dst_ptr`."""
    src_dtype, dst_dtype = str(src_dtype), str(dst_dtype)
    nbytes = n * tvm_bits(dst_dtype) // 8
    name = f"tnb_vst_{src_dtype}x{n}_{dst_dtype}"
    code = f"""
__forceinline__ __device__ void {name}(void* dst, const void* src) {{
  {_RAW[nbytes]} raw;
  {C_TYPES[dst_dtype]}* d = ({C_TYPES[dst_dtype]}*)&raw;
  const {C_TYPES[src_dtype]}* s = (const {C_TYPES[src_dtype]}*)src;
#pragma unroll
  for (int i = 0; i < {n}; ++i) d[i] = {convert("s[i]", src_dtype, dst_dtype)};
  *({_RAW[nbytes]}*)dst = raw;
}}
"""
    return cuda_func_call(name, dst_ptr, src_ptr, source_code=code)


def _shuffle(stem: str, intrinsic: str, arg: str, value, arg_value, dtype) -> tirx.Expr:
    """A call of `tnb_<stem>_<dtype>(v, <arg>)`, defined as `<intrinsic>(0xffffffff, v, <arg>, 32)`."""
    dtype = str(dtype)
    name = f"tnb_{stem}_{dtype}"
    code = f"""
__forceinline__ __device__ {C_TYPES[dtype]} {name}({C_TYPES[dtype]} v, int {arg}) {{
  return {intrinsic}(0xffffffffu, v, {arg}, 32);
}}
"""
    return cuda_func_call(name, value, arg_value, source_code=code, return_type=dtype)


def shfl_xor(value, mask: int, dtype: str) -> tirx.Expr:
    """`__shfl_xor_sync(0xffffffff, value, mask)`: the value of lane (lane ^ mask). Every lane of the warp
    must execute it."""
    return _shuffle("shfl_xor", "__shfl_xor_sync", "mask", value, mask, dtype)


def shfl_up(value, delta: int, dtype: str) -> tirx.Expr:
    """`__shfl_up_sync(0xffffffff, value, delta)`: the value of lane (lane - delta); lanes below `delta` get
    their own. Every lane of the warp must execute it."""
    return _shuffle("shfl_up", "__shfl_up_sync", "delta", value, delta, dtype)


def shfl_idx(value, lane: int, dtype: str) -> tirx.Expr:
    """`__shfl_sync(0xffffffff, value, lane)`: lane `lane`'s value, in every
    lane. Every lane must execute it."""
    return _shuffle("shfl_idx", "__shfl_sync", "lane", value, lane, dtype)


# The float max/min of docs/IR.md (torch.maximum's): a NaN operand gives NaN. PTX `max.NaN` / `min.NaN`
# (sm_80+) is one FMNMX as fmaxf is; before sm_80 a compare-select. 16-bit floats have CUDA's __hmax_nan /
# __hmin_nan; float64 has no NaN-propagating instruction.
_MINMAX_NAN = {
    "float32": """
__forceinline__ __device__ float {name}(float a, float b) {{
#if __CUDA_ARCH__ >= 800
  float r;
  asm("{kind}.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : f{kind}f(a, b);
#endif
}}
""",
    "float64": """
__forceinline__ __device__ double {name}(double a, double b) {{
  return (a != a || b != b) ? a + b : f{kind}(a, b);
}}
""",
    "float16": """
__forceinline__ __device__ half {name}(half a, half b) {{
  return __h{kind}_nan(a, b);
}}
""",
    "bfloat16": """
__forceinline__ __device__ nv_bfloat16 {name}(nv_bfloat16 a, nv_bfloat16 b) {{
  return __h{kind}_nan(a, b);
}}
""",
}


# T.atomic_max / T.atomic_min into memory: the C type of each dtype, its bits' integer type with the two
# reinterpretations (for the compare-and-swap), and a conversion to a type that compares.
_ATOMIC_FLOATS = {
    "float32": ("float", "unsigned int", "__float_as_uint", "__uint_as_float", ""),
    "float64": ("double", "unsigned long long", "(unsigned long long)__double_as_longlong",
                "__longlong_as_double", ""),
    "float16": ("half", "unsigned short", "__half_as_ushort", "__ushort_as_half", "__half2float"),
    "bfloat16": ("nv_bfloat16", "unsigned short", "__bfloat16_as_ushort", "__ushort_as_bfloat16",
                 "__bfloat162float"),
}
_ATOMIC_INTS = {"int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long"}


def atomic_extreme(kind: str, address, value, dtype: str) -> tirx.Expr:
    """`*address = max(*address, value)` (kind "max") or min, atomically. Integers: CUDA's atomicMax /
    atomicMin. Floats (which CUDA's atomics do not order): a compare-and-swap loop that writes the value it
    picks bit for bit, with a NaN on either side winning, as T.max (minmax_nan) and the interpreter."""
    name = f"tnb_atomic_{kind}_{dtype}"
    if dtype in _ATOMIC_INTS:
        ctype = _ATOMIC_INTS[dtype]
        src = f"""
__forceinline__ __device__ void {name}(void* address, {ctype} value) {{
  atomic{kind.capitalize()}(reinterpret_cast<{ctype}*>(address), value);
}}
"""
        return cuda_func_call(name, address, value, source_code=src)
    ctype, word, to_word, from_word, compare = _ATOMIC_FLOATS[dtype]
    wins = ">" if kind == "max" else "<"
    src = f"""
__forceinline__ __device__ void {name}(void* address, {ctype} value) {{
  {word}* word = reinterpret_cast<{word}*>(address);
  {word} old = *word;
  while (true) {{
    {ctype} current = {from_word}(old);
    if ({compare}(current) != {compare}(current)) return;      // NaN stays
    bool take = {compare}(value) != {compare}(value) || {compare}(value) {wins} {compare}(current);
    if (!take) return;
    {word} seen = atomicCAS(word, old, {to_word}(value));
    if (seen == old) return;
    old = seen;
  }}
}}
"""
    return cuda_func_call(name, address, value, source_code=src)


def atomic_add_float32_vector(address, registers, n: int) -> tirx.Expr:
    """`address[k] += registers[k]` for k < n (2 or 4 float32, `address` n-element aligned) as one vector
    atomic, which sm_90 has (CUDA's `atomicAdd(float2*)` / `atomicAdd(float4*)`): each element's add stays
    atomic, as n scalar atomicAdds would be."""
    vec = {2: "float2", 4: "float4"}[n]
    name = f"tnb_atomic_add_float32x{n}"
    src = f"""
__forceinline__ __device__ void {name}(void* address, const void* registers) {{
  atomicAdd(reinterpret_cast<{vec}*>(address), *reinterpret_cast<const {vec}*>(registers));
}}
"""
    return cuda_func_call(name, address, registers, source_code=src)


def minmax_nan(kind: str, a, b, dtype: str) -> tirx.Expr:
    """`max(a, b)` (kind "max") or `min(a, b)` of floats where a NaN operand gives NaN, as torch.maximum and
    the interpreter; a dtype without such a helper (8-bit floats) keeps TVM's own max/min."""
    dtype = str(dtype)
    template = _MINMAX_NAN.get(dtype)
    if template is None:
        return tirx.max(a, b) if kind == "max" else tirx.min(a, b)
    name = f"tnb_{kind}_nan_{dtype}"
    return cuda_func_call(name, a, b, source_code=template.format(name=name, kind=kind), return_type=dtype)


def combine(kind: str, a, b) -> tirx.Expr:
    """Two values of a reduction combined: "sum" adds, "max" / "min" as minmax_nan for floats."""
    if kind == "sum":
        return a + b
    dtype = str(a.ty)
    if dtype.startswith(("float", "bfloat")):
        return minmax_nan(kind, a, b, dtype)
    return tirx.max(a, b) if kind == "max" else tirx.min(a, b)


def warp_uniform(value) -> tirx.Expr:
    """An int32 value of lane 0 (`__shfl_sync(0xffffffff, value, 0)`), for values that are the same in every
    lane anyway (a warp's role in a warp-specialized kernel): ptxas then knows that branches on it do not
    diverge, and keeps warp-collective work under them free of divergence handling. Every lane executes it."""
    code = """
__forceinline__ __device__ int tnb_warp_uniform(int v) {
  return __shfl_sync(0xffffffffu, v, 0, 32);
}
"""
    return cuda_func_call("tnb_warp_uniform", value, source_code=code, return_type="int32")


def set_max_registers(change: str, count: int) -> tirx.Expr:
    """`setmaxnreg.{inc,dec}.sync.aligned.u32 count`: this warpgroup's registers per thread become `count`
    (sm_90a; every warp of the warpgroup executes it). ptxas honours it only where what is live there fits."""
    assert change in ("inc", "dec") and count % 8 == 0 and 24 <= count <= 256, (change, count)
    return asm_statement(f"tnb_setmaxnreg_{change}_{count}", f"setmaxnreg.{change}.sync.aligned.u32 {count};")


def fence_proxy_async() -> tirx.Expr:
    """`fence.proxy.async.shared::cta`: shared memory written by ordinary stores (cp.async included) becomes
    visible to the async proxy (wgmma, TMA)."""
    return asm_statement("tnb_fence_proxy_async", "fence.proxy.async.shared::cta;")


def warp_sync() -> tirx.Expr:
    """`bar.warp.sync -1`: the warp's lanes meet, and their memory accesses before it are ordered before
    theirs after it (so one lane may publish the warp's shared-memory writes, e.g. by an mbarrier arrival)."""
    return asm_statement("tnb_warp_sync", "bar.warp.sync -1;")


def named_barrier(threads: int) -> tirx.Expr:
    """`bar.sync 1, threads`: a CTA barrier over the first `threads` threads only (id 0 is __syncthreads)."""
    return asm_statement(f"tnb_bar_sync_1_{threads}", f"bar.sync 1, {threads};")


def _bar(op: str, barrier, threads: int) -> tirx.Expr:
    name = f"tnb_bar_{op}_{threads}"
    code = f"""
__forceinline__ __device__ void {name}(int id) {{
  asm volatile("bar.{op} %0, {threads};\\n" :: "r"(id) : "memory");
}}
"""
    return cuda_func_call(name, barrier, source_code=code)


def named_barrier_sync(barrier, threads: int) -> tirx.Expr:
    """`bar.sync barrier, threads` with a runtime barrier id: wait until `threads` threads have arrived (this
    one included)."""
    return _bar("sync", barrier, threads)


def named_barrier_arrive(barrier, threads: int) -> tirx.Expr:
    """`bar.arrive barrier, threads`: count this thread towards the barrier without waiting."""
    return _bar("arrive", barrier, threads)


# ---- approximate transcendentals (LoweringOptions.approx_math) ---------------------------------------------
# One PTX instruction on float32 per op (sm_75+, which every target tile_nb builds for has). PTX ISA bounds,
# used by the tests and written in docs/IR.md: tanh.approx.f32 relative error at most 2^-11;
# ex2.approx.ftz.f32 at most 2 ulp, subnormal inputs and results flushed to zero; exp is ex2 of x * log2(e)
# (as CUDA's __expf), whose rounding adds about |x| * 2^-24 relative.
_APPROX_PTX = {
    "tirx.tanh": ("tanh", "tanh.approx.f32", "x"),
    "tirx.exp2": ("exp2", "ex2.approx.ftz.f32", "x"),
    "tirx.exp": ("exp", "ex2.approx.ftz.f32", "x * 1.4426950408889634f"),
}
APPROX_OPS = frozenset(_APPROX_PTX)


def approx_math(op: str, x, dtype: str) -> tirx.Expr | None:
    """`T.tanh(x)` / `T.exp2(x)` / `T.exp(x)` (`op` as "tirx.tanh") as the approximate instruction, for a
    float32, float16 or bfloat16 `x` (the 16-bit ones converted to float32 and back); None for other dtypes
    (float64 keeps the precise function)."""
    dtype = str(dtype)
    if op not in _APPROX_PTX or dtype not in ("float32", "float16", "bfloat16"):
        return None
    short, instruction, operand = _APPROX_PTX[op]
    name = f"tnb_{short}_approx"
    code = f"""
__forceinline__ __device__ float {name}(float x) {{
  float y;
  asm("{instruction} %0, %1;" : "=f"(y) : "f"({operand}));
  return y;
}}
"""
    wide = x if dtype == "float32" else tirx.Cast("float32", x)
    call = cuda_func_call(name, wide, source_code=code, return_type="float32")
    return call if dtype == "float32" else tirx.Cast(dtype, call)
