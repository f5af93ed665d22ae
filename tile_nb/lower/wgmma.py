"""`T.gemm` on Hopper warpgroup MMA (`wgmma.mma_async`, sm_90a), A and B read by the tensor cores from shared memory.

Chosen by `analyze` when the target is sm_90a and the shapes fit (see `wgmma_eligible`); otherwise gemm.py's
mma.sync path runs. Layout decisions:
- warpgroup g (threads 128g..128g+127) owns m-blocks of 64 rows; each m-block is one `m64nNk16` per k16 step;
- A (not transposed, K-major, rows of block_K*2 = 64 or 128 bytes): the swizzled SharedTile (XOR of 16-byte
  chunk with the row), which is exactly the hardware's 64B/128B swizzle pattern at 1024-byte aligned atoms;
- B stored [K, N] (MN-major): `panel` SharedTile ([N/64][K][64], 128B swizzle), descriptor LBO = panel stride,
  SBO = 1024 (8 K-rows); B stored [N, K] (K-major): like A.
- the accumulator registers follow the wgmma D fragment: per n8 block i, d[4i..4i+3] = rows l/4 (+8),
  columns 8i + 2(l%4) (+1), warp w of the group on rows 16w..16w+15 (`WgmmaAccLayout.element`).
Synchronisation per k-tile: wgmma.fence; the MMAs; commit; wait_group 0 (the stage may be refilled right after
the next barrier). cp.async writes are generic-proxy writes: the pipeline adds `fence.proxy.async.shared::cta`
after waiting for them and before the barrier (pipeline.py).
"""
from __future__ import annotations

from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call
from tvm.script.ir_builder import tirx as T

from . import intrin
from .irwalk import region_of
from .layout import WgmmaAccLayout

__all__ = ["drain_accumulators", "lower_gemm_wgmma", "wgmma_eligible"]


def wgmma_eligible(target, call, threads) -> bool:
    if target is None or "sm_90a" not in str(target.attrs.get("arch", "")):
        return False
    (c, c_rng), (a, a_rng), (b, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    if trans_a or threads % 128 or str(a.dtype) not in ("float16", "bfloat16") or str(b.dtype) != str(a.dtype):
        return False
    bm, bn = int(c.shape[0]), int(c.shape[1])
    a_ext = [int(e) for _, e in a_rng]
    b_ext = [int(e) for _, e in b_rng]
    wgs = threads // 128
    bk = a_ext[-1]
    if bm % (64 * wgs) or bn % 64 or bn > 256 or bk * 2 not in (64, 128) or bk % 16:
        return False
    if [int(x) for x in a.shape[-2:]] != a_ext[-2:] or [int(x) for x in b.shape[-2:]] != b_ext[-2:]:
        return False  # whole-tile operands only (descriptors address the tile from its start)
    if trans_b and b_ext[-1] * 2 != bk * 2:
        return False
    return True


def _desc_source():
    # Shared by every wgmma helper of a kernel: guarded, since each helper carries its own copy of the source.
    return """
#ifndef TNB_SMEM_DESC_DEFINED
#define TNB_SMEM_DESC_DEFINED
__forceinline__ __device__ unsigned long long tnb_smem_desc(void* ptr, int lbo, int sbo, int mode) {
  unsigned addr = (unsigned)__cvta_generic_to_shared(ptr);
  unsigned long long d = 0;
  d |= (unsigned long long)((addr & 0x3FFFF) >> 4);
  d |= (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16;
  d |= (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32;
  d |= (unsigned long long)mode << 62;
  return d;
}
#endif
"""


def _wgmma_call(n, in_dtype, acc_ptr, a_ptr, a_lbo, a_sbo, a_mode, b_ptr, b_lbo, b_sbo, b_mode, trans_b):
    t = {"float16": "f16", "bfloat16": "bf16"}[in_dtype]
    regs = n // 2
    name = f"tnb_wgmma_m64n{n}k16_{t}_tb{int(trans_b)}"
    outs = ", ".join(f"%{i}" for i in range(regs))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    src = _desc_source() + f"""
__forceinline__ __device__ void {name}(float* d, void* a, int albo, int asbo, int amode,
                                      void* b, int blbo, int bsbo, int bmode) {{
  unsigned long long da = tnb_smem_desc(a, albo, asbo, amode);
  unsigned long long db = tnb_smem_desc(b, blbo, bsbo, bmode);
  asm volatile("{{\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{outs}}}, %{regs}, %{regs + 1}, 1, 1, 1, 0, {int(trans_b)};\\n"
    "}}\\n"
    : {cons}
    : "l"(da), "l"(db) : "memory");
}}
"""
    return cuda_func_call(name, acc_ptr, a_ptr, a_lbo, a_sbo, a_mode, b_ptr, b_lbo, b_sbo, b_mode, source_code=src)


def _wait_with_regs(regs, acc_ptr, pending=0):
    name = f"tnb_wgmma_wait{pending}_r{regs}"
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    src = f"""
__forceinline__ __device__ void {name}(float* d) {{
  asm volatile("wgmma.wait_group.sync.aligned {pending};\\n" : {cons} :: "memory");
}}
"""
    return cuda_func_call(name, acc_ptr, source_code=src)


def lower_gemm_wgmma(em, call):
    (c_buf, _), (a_buf, a_rng), (b_buf, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_b = bool(call.args[5])
    beta = float(call.args[7].value)
    lay = em.plan.accumulators[c_buf]
    a_tile, b_tile = em.tile(a_buf), em.tile(b_buf)
    a_view, b_view = em.view(a_buf), em.view(b_buf)
    in_dtype = str(a_buf.dtype)
    bk = int(a_rng[-1][1])
    acc = em.registers[c_buf]
    if beta == 0.0:
        with T.unroll(0, lay.regs) as r:
            T.buffer_store(acc, tirx.const(0, "float32"), [r])
    a_row_bytes = bk * 2
    a_mode = 1 if a_row_bytes == 128 else 2  # 128B or 64B swizzle
    a_sbo = 8 * a_row_bytes
    if trans_b:  # [N, K], K-major like A
        b_lbo, b_sbo, b_mode = 16, 8 * a_row_bytes, a_mode
    else:  # [K, N] in 64-column panels; LBO = panel stride, SBO = 8 K-rows of 128 bytes
        lbo_sbo = (b_tile.rows * 128, 1024)
        if (em.func.attrs or {}).get("tile_nb.wgmma_swap_lbo_sbo", 0):
            lbo_sbo = lbo_sbo[::-1]
        b_lbo, b_sbo = lbo_sbo
        b_mode = 1
    g = tirx.floordiv(em.tx, 128)

    T.evaluate(intrin.asm_statement("tnb_wgmma_fence", "wgmma.fence.sync.aligned;"))
    with T.unroll(0, bk // 16) as kk, T.unroll(0, lay.mblocks) as mb:
        # Tile start of this m-block and k-step; the hardware applies the swizzle to the address bits,
        # so the k-step inside a 64/128-byte row is a plain +32 bytes (offset2 with col = 16 kk, row 64 m).
        m0 = (g * lay.mblocks + mb) * 64
        a_off = m0 * bk + kk * 16
        a_ptr = intrin.address_of(a_view, [a_off + _stage_off(em, a_tile, a_buf)])
        if trans_b:
            b_ptr = intrin.address_of(b_view, [kk * 16 + _stage_off(em, b_tile, b_buf)])
        else:
            b_ptr = intrin.address_of(b_view, [kk * 16 * 64 + _stage_off(em, b_tile, b_buf)])
        T.evaluate(_wgmma_call(lay.bn, in_dtype, intrin.address_of(acc, [mb * (lay.bn // 2)]),
                               a_ptr, 16, a_sbo, a_mode, b_ptr, b_lbo, b_sbo, b_mode, not trans_b))
    T.evaluate(intrin.asm_statement("tnb_wgmma_commit", "wgmma.commit_group.sync.aligned;"))
    # Keep this k-tile's group in flight: wait only for the previous one (whose stage the TMA pipeline of
    # tma.py then releases, or the overlap variant's copies refill); the loop drains with wait 0 after it.
    if em.scope.mma_in_flight:
        _wait(acc, lay, 1)
    else:
        _wait(acc, lay, 0)
        em.round_accumulator(c_buf)


def _wait(acc, lay, pending):
    # The wait names the accumulator registers ("+f"), so nvcc cannot move their later uses above it.
    with T.unroll(0, lay.mblocks) as mb:
        T.evaluate(_wait_with_regs(lay.bn // 2, intrin.address_of(acc, [mb * (lay.bn // 2)]), pending))


def drain_accumulators(em, stmts):
    """After a loop whose T.gemm left a wgmma group in flight: wait for it (naming each accumulator's registers)."""
    from .irwalk import tile_calls

    drained = []
    for stmt in stmts:
        for call in tile_calls(stmt):
            c_buf = region_of(call.args[0])[0] if call.op.name == "tirx.tile.gemm" else None
            lay = em.plan.accumulators.get(c_buf) if c_buf is not None else None
            if isinstance(lay, WgmmaAccLayout) and not any(c_buf.same_as(b) for b in drained):
                _wait(em.registers[c_buf], lay, 0)
                drained.append(c_buf)


def _stage_off(em, tile, buf):
    st = em.stage.get(buf)
    if tile.stages > 1 and st is not None:
        return st * tile.elems
    return 0
