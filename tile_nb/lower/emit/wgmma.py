"""`T.gemm` on Hopper warpgroup MMA (`wgmma.mma_async`, sm_90a), A and B read by
the tensor cores from shared memory.

Chosen by the plan when the target is sm_90a and the shapes fit (analysis/mma.py's `wgmma_eligible`);
otherwise gemm.py's mma.sync path runs. Layout decisions:
- warpgroup g (threads 128g..128g+127) owns m-blocks of 64 rows; each m-block is one `m64nNk16` per k16 step
  (`m64nNk32` per k32 step for 8-bit floats, e4m3 / e5m2: the same 32 bytes of each row);
- A (not transposed, K-major, rows of 64 or 128 bytes): the swizzled SharedTile (XOR of 16-byte chunk with the
  row), which is exactly the hardware's 64B/128B swizzle pattern at 1024-byte aligned atoms;
- 8-bit operands are read K-major only (PTX: no transpose for them), so B must be stored [N, K];
- K-major 16-bit operands longer than 64 columns (a head dim of 128) are stored in 64-column panels, each a
  128B-swizzled [rows, 64] tile; a k-step's descriptor starts in the panel that holds its columns;
- B stored [K, N] (MN-major): `panel` SharedTile ([N/64][K][64], 128B swizzle), descriptor LBO = panel stride,
  SBO = 1024 (8 K-rows); B stored [N, K] (K-major): like A. A stored [K, M] (transpose_A, 16-bit) is
  MN-major the same way (the instruction's transpose-A immediate): an m-block is one 64-column panel, a k16
  step 16 of its 128-byte rows.
- the accumulator registers follow the wgmma D fragment: per n8 block i, d[4i..4i+3] = rows l/4 (+8),
  columns 8i + 2(l%4) (+1), warp w of the group on rows 16w..16w+15 (`WgmmaAccLayout.element`).
Synchronisation per k-tile: wgmma.fence; the MMAs; commit; wait_group 0 (the stage may be refilled right after
the next barrier). cp.async writes are generic-proxy writes: the pipeline adds `fence.proxy.async.shared::cta`
after waiting for them and before the barrier (pipeline.py).
"""
from __future__ import annotations

from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.layout import WgmmaAccLayout
from ..analysis.mma import EIGHT_BIT, elem_bytes, gemm_k, read_as_panels, wgmma_operand_types
from ..errors import LoweringError
from ..irwalk import region_of
from . import intrin

__all__ = ["PINGPONG_BARRIER", "drain_accumulators", "fence_registers", "lower_gemm_wgmma", "wait_for_gemm"]
_K_STEP_BYTES = 32  # every wgmma k-step reads 32 bytes of a row: k16 for 16-bit, k32 for 8-bit operands
PINGPONG_BARRIER = 2  # named barrier of consumer warpgroup 0 in the ping-pong schedule (warpgroup w: 2 + w)


def _desc_source():
    # Shared by every wgmma helper of a kernel: guarded, since each helper carries its own copy of the source.
    return """
#ifndef TNB_SMEM_DESC_DEFINED
#define TNB_SMEM_DESC_DEFINED
__forceinline__ __device__ unsigned long long tnb_smem_desc(unsigned lo, int sbo, int mode) {
  unsigned hi = (((unsigned)sbo & 0x3FFFF) >> 4) | ((unsigned)mode << 30);
  return ((unsigned long long)hi << 32) | lo;
}
#endif
"""


def _desc_low_word(tile_ptr, lbo: int) -> tirx.Expr:
    """The low 32 bits of a shared-memory descriptor of the tile starting at `tile_ptr`: start address
    >> 4 (14 bits) and leading byte offset >> 4. Shared memory is < 256 KiB, so start + offset never
    carries out of the start field: the descriptor of a k-step is this word plus (byte offset >> 4), one
    add per MMA. Computed from warp-uniform values only (the pool, the stage, the warpgroup from
    `em.warp_tx`), the word and the adds stay in uniform registers, where wgmma reads descriptors,
    instead of being moved there per MMA (R2UR)."""
    code = """
__forceinline__ __device__ unsigned tnb_smem_desc_lo(const void* base, int lbo) {
  return ((((unsigned)__cvta_generic_to_shared(base)) & 0x3FFFF) >> 4) | ((((unsigned)lbo & 0x3FFFF) >> 4) << 16);
}
"""
    return cuda_func_call("tnb_smem_desc_lo", tile_ptr, lbo, source_code=code, return_type="uint32")


def _desc_at(base_word, byte_offset) -> tirx.Expr:
    return base_word + tirx.Cast("uint32", tirx.floordiv(byte_offset, 16))


def _wgmma_call(n, types, acc_ptr, a_lo, a_sbo, a_mode, b_lo, b_sbo, b_mode, trans_b, trans_a=False):
    """`a_lo`, `b_lo`: the low words of the operands' descriptors (`_desc_at`); `trans_a`, `trans_b`: the
    operand is MN-major (A stored [K, M], B stored [K, N]: the PTX transpose immediates, 16-bit types only)."""
    ta, tb = types
    integer = EIGHT_BIT.get(ta) == "int"
    k = 32 if ta in EIGHT_BIT else 16
    regs = n // 2
    name = f"tnb_wgmma_m64n{n}k{k}_{ta}_{tb}{'_ta1' if trans_a else ''}_tb{int(trans_b)}"
    outs = ", ".join(f"%{i}" for i in range(regs))
    reg, ctype, dtype = ("r", "int", "s32") if integer else ("f", "float", "f32")
    cons = ", ".join(f'"+{reg}"(d[{i}])' for i in range(regs))
    # scale-d 1 (accumulate); floats: A and B not negated; only 16-bit types
    # take the two transpose immediates.
    flags = "1" if integer else "1, 1, 1" if k == 32 else f"1, 1, 1, {int(trans_a)}, {int(trans_b)}"
    src = _desc_source() + f"""
__forceinline__ __device__ void {name}({ctype}* d, unsigned alo, int asbo, int amode,
                                      unsigned blo, int bsbo, int bmode) {{
  unsigned long long da = tnb_smem_desc(alo, asbo, amode);
  unsigned long long db = tnb_smem_desc(blo, bsbo, bmode);
  asm volatile("{{\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k{k}.{dtype}.{ta}.{tb} {{{outs}}}, %{regs}, %{regs + 1}, {flags};\\n"
    "}}\\n"
    : {cons}
    : "l"(da), "l"(db) : "memory");
}}
"""
    return cuda_func_call(name, acc_ptr, a_lo, a_sbo, a_mode, b_lo, b_sbo, b_mode, source_code=src)


def _wgmma_register_a_call(n, t, acc_ptr, a_ptr, b_lo, b_sbo, b_mode, trans_b):
    """wgmma with A from registers: four 32-bit registers of two 16-bit values each (a wgmma accumulator's
    registers 8kk..8kk+7 of a k16 step, packed in pairs, are exactly that A fragment)."""
    regs = n // 2
    name = f"tnb_wgmma_rs_m64n{n}k16_{t}_tb{int(trans_b)}"
    outs = ", ".join(f"%{i}" for i in range(regs))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    src = (
        _desc_source()
        + f"""
__forceinline__ __device__ void {name}(float* d, void* a, unsigned blo, int bsbo, int bmode) {{
  const unsigned* ar = (const unsigned*)a;
  unsigned long long db = tnb_smem_desc(blo, bsbo, bmode);
  asm volatile("{{\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{outs}}}, {{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, 1, 1, 1, {int(trans_b)};\\n"
    "}}\\n"
    : {cons}
    : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(db) : "memory");
}}
"""
    )
    return cuda_func_call(name, acc_ptr, a_ptr, b_lo, b_sbo, b_mode, source_code=src)


def _wait_with_regs(regs, acc_ptr, pending=0, integer=False):
    reg, ctype = ("r", "int") if integer else ("f", "float")
    name = f"tnb_wgmma_wait{pending}_{'s32_' if integer else ''}r{regs}"
    cons = ", ".join(f'"+{reg}"(d[{i}])' for i in range(regs))
    src = f"""
__forceinline__ __device__ void {name}({ctype}* d) {{
  asm volatile("wgmma.wait_group.sync.aligned {pending};\\n" : {cons} :: "memory");
}}
"""
    return cuda_func_call(name, acc_ptr, source_code=src)


def lower_gemm_wgmma(em, call):
    (c_buf, _), (a_buf, a_rng), (b_buf, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    beta = float(call.args[7].value)
    lay = em.plan.accumulators[c_buf]
    b_tile, b_view = em.tile(b_buf), em.view(b_buf)
    if a_buf not in em.registers:
        a_tile, a_view = em.tile(a_buf), em.view(a_buf)
    types = wgmma_operand_types(a_buf.dtype, b_buf.dtype)
    bk = gemm_k(call)
    a_panels, b_panels = read_as_panels(call)
    _require_panels(b_tile, b_panels, "B")
    if a_buf not in em.registers:
        _require_panels(a_tile, a_panels, "A")
    k_step = _K_STEP_BYTES // elem_bytes(a_buf.dtype)  # elements of K per wgmma
    acc = em.registers[c_buf]
    if beta == 0.0:
        with T.unroll(0, lay.regs) as r:
            T.buffer_store(acc, tirx.const(0, str(acc.dtype)), [r])
    # K-major operands: rows of 64 or 128 bytes, or 64-column panels of 128-byte rows (k_major_panels):
    # (LBO, SBO, swizzle mode 128B / 64B) of their descriptors
    k_row_bytes = min(bk * elem_bytes(a_buf.dtype), 128)
    k_major = (16, 8 * k_row_bytes, 1 if k_row_bytes == 128 else 2)
    b_lbo, b_sbo, b_mode = k_major if trans_b else _mn_major_desc(em, b_tile)  # [N, K] / [K, N]
    # warp-uniform: which rows of A and which columns of B this warpgroup multiplies
    g = tirx.floordiv(em.warp_tx if em.warp_tx is not None else em.tx, 128)
    g_row, g_col = lay.group_coords(g)

    if em.scope.pingpong:
        T.evaluate(intrin.named_barrier_sync(PINGPONG_BARRIER + g, 256))  # this warpgroup's turn
    # Each operand's descriptor is its stage's tile start (for A, this warpgroup's rows; for a slice
    # `A_s[s, :, :]` of a 3-d buffer, slice s's first row) computed once per T.gemm, plus a constant per
    # unrolled k-step and m-block. The hardware applies the swizzle to the address
    # bits, so a k-step inside a 64/128-byte row is a plain +32 bytes.
    desc = T.alloc_buffer((2,), "uint32", scope="local")
    IRBuilder.name("desc", desc)
    b_start = (_region_start(em, b_tile, b_rng) + _stage_off(em, b_tile, b_buf)
               + (_b_column_offset(b_tile, g_col * lay.group_n, trans_b) if lay.col_groups > 1 else 0))
    T.buffer_store(desc, _desc_low_word(intrin.address_of(b_view, [b_start]), b_lbo), [1])
    T.evaluate(intrin.asm_statement("tnb_wgmma_fence", "wgmma.fence.sync.aligned;"))
    if a_buf in em.registers:  # A from registers (plan.py: the fragment has a wgmma accumulator's layout)
        a_regs = em.registers[a_buf]
        with T.unroll(0, bk // 16) as kk, T.unroll(0, lay.mblocks) as mb:
            T.evaluate(_wgmma_register_a_call(
                lay.group_n, types[0], intrin.address_of(acc, [mb * (lay.group_n // 2)]),
                intrin.address_of(a_regs, [mb * (bk // 2) + kk * 8]),
                _desc_at(desc[1], _b_offset(b_tile, kk * 16, trans_b)), b_sbo, b_mode, not trans_b))
        _finish(em, acc, lay, c_buf)
        return
    if trans_a:  # [K, M]: this warpgroup's rows of A are whole 64-column panels
        a_first = _panel_offset(a_tile, g_row * (lay.mblocks * 64), 0)
        a_lbo, a_sbo, a_mode = _mn_major_desc(em, a_tile)
    else:
        a_first = _k_major_offset(a_tile, g_row * (lay.mblocks * 64), 0)
        a_lbo, a_sbo, a_mode = k_major
    a_start = a_first + _region_start(em, a_tile, a_rng) + _stage_off(em, a_tile, a_buf)
    T.buffer_store(desc, _desc_low_word(intrin.address_of(a_view, [a_start]), a_lbo), [0])
    with T.unroll(0, bk // k_step) as kk, T.unroll(0, lay.mblocks) as mb:
        a_elem = (_panel_offset(a_tile, mb * 64, kk * k_step) if trans_a
                  else _k_major_offset(a_tile, mb * 64, kk * k_step))
        a_off = a_elem * (intrin.tvm_bits(a_tile.dtype) // 8)
        T.evaluate(
            _wgmma_call(
                lay.group_n,
                types,
                intrin.address_of(acc, [mb * (lay.group_n // 2)]),
                _desc_at(desc[0], a_off),
                a_sbo,
                a_mode,
                _desc_at(desc[1], _b_offset(b_tile, kk * k_step, trans_b)),
                b_sbo,
                b_mode,
                not trans_b,
                trans_a,
            )
        )
    _finish(em, acc, lay, c_buf)


def _require_panels(tile, as_panels: bool, operand: str) -> None:
    """The descriptors below read an MN-major operand (and a K-major one of more than 128-byte rows) as 64-column
    panels: the plan must have stored the tile so (plan._add_panels), or the GPU would read another layout's bytes
    without a word. A mismatch is tile_nb's bug; refuse rather than build wrong code."""
    if as_panels and not tile.panel:
        raise LoweringError(
            f"internal: wgmma operand {operand} ({tile.buffer.name}) is read as 64-column panels but its shared "
            "tile was not laid out in panels; this is a tile_nb bug (please report it with the kernel)"
        )


def _finish(em, acc, lay, c_buf):
    T.evaluate(intrin.asm_statement("tnb_wgmma_commit", "wgmma.commit_group.sync.aligned;"))
    if em.scope.mma_deferred:  # the loop schedule waits (tma.py: the softmax/MMA overlap)
        return
    if em.scope.pingpong:  # issued: the next warpgroup's turn (tma.py: _pingpong)
        nxt = tirx.floormod(tirx.floordiv(em.tx, 128) + 1, em.scope.pingpong)
        T.evaluate(intrin.named_barrier_arrive(PINGPONG_BARRIER + nxt, 256))
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
        T.evaluate(_wait_with_regs(lay.group_n // 2, intrin.address_of(acc, [mb * (lay.group_n // 2)]), pending,
                                   integer=str(acc.dtype) == "int32"))


def wait_for_gemm(em, call, pending: int):
    """`wgmma.wait_group pending` for a T.gemm issued earlier with its wait deferred, naming its accumulator's
    registers and, for a register A operand, the A registers too: the tensor cores read them after the issue,
    so nvcc must neither reuse them for other values nor move their next write above the wait (CUTLASS's
    warpgroup_fence_operand)."""
    c_buf, a_buf = region_of(call.args[0])[0], region_of(call.args[1])[0]
    lay = em.plan.accumulators[c_buf]
    _wait(em.registers[c_buf], lay, pending)
    if a_buf in em.registers:
        fence_registers(em, [a_buf])


def fence_registers(em, bufs):
    """An empty asm statement that reads and writes the registers of these fragments: code that computes them
    stays above it and code that uses them next stays below (asm statements keep their order), without an
    instruction. Fragments held in other than 32-bit floats or 32-bit / packed 16-bit words are left out."""
    for buf in bufs:
        regs = em.registers.get(buf)
        if regs is None:
            continue
        n, dtype = int(regs.shape[0]), str(regs.dtype)
        if dtype == "float32":
            T.evaluate(_fence(n, "f", intrin.address_of(regs, [0])))
        elif dtype in ("int32", "uint32") or (intrin.tvm_bits(dtype) == 16 and n % 2 == 0):
            words = n if intrin.tvm_bits(dtype) == 32 else n // 2
            T.evaluate(_fence(words, "r", intrin.address_of(regs, [0])))


def _fence(count, constraint, ptr):
    ctype = "float" if constraint == "f" else "unsigned"
    name = f"tnb_fence_operand_{constraint}{count}"
    cons = ", ".join(f'"+{constraint}"(w[{i}])' for i in range(count))
    src = f"""
__forceinline__ __device__ void {name}(void* p) {{
  {ctype}* w = ({ctype}*)p;
  asm volatile("" : {cons} :: "memory");
}}
"""
    return cuda_func_call(name, ptr, source_code=src)


def drain_accumulators(em, stmts):
    """After a loop whose T.gemm left a wgmma group in flight: wait for it (naming
    each accumulator's registers)."""
    from ..irwalk import tile_calls

    drained = []
    for stmt in stmts:
        for call in tile_calls(stmt):
            c_buf = region_of(call.args[0])[0] if call.op.name == "tirx.tile.gemm" else None
            lay = em.plan.accumulators.get(c_buf) if c_buf is not None else None
            if isinstance(lay, WgmmaAccLayout) and not any(c_buf.same_as(b) for b in drained):
                _wait(em.registers[c_buf], lay, 0)
                drained.append(c_buf)


def _mn_major_desc(em, tile):
    """(LBO, SBO, swizzle mode) of an MN-major operand's descriptor ([K, N] B, [K, M] A in 64-column panels):
    LBO = panel stride, SBO = 8 K-rows of 128 bytes, 128B swizzle."""
    lbo, sbo = tile.rows * 128, 1024
    if em.plan.options.wgmma_swap_lbo_sbo:  # the descriptor probe (LoweringOptions)
        lbo, sbo = sbo, lbo
    return lbo, sbo, 1


def _b_offset(b_tile, k, trans_b):
    """Byte offset of B's descriptor start at K element `k` from its tile start: [N, K] (K-major) like A; [K,
    N] in 64-column panels, where a K step is 64 elements of every panel row (8-bit B is always K-major, so
    `k` counts 16-bit elements there)."""
    offset = _k_major_offset(b_tile, 0, k) if trans_b else _panel_offset(b_tile, 0, k)
    return offset * (intrin.tvm_bits(b_tile.dtype) // 8)


def _b_column_offset(b_tile, n, trans_b):
    """Element offset of column `n` of B (a column group's slice, analysis/mma.py's wgmma_split: a whole 8-row
    atom of a K-major [N, K] tile, a whole 64-column panel of a [K, N] one) from its tile start."""
    return _k_major_offset(b_tile, n, 0) if trans_b else _panel_offset(b_tile, n, 0)


def _panel_offset(tile, col, k):
    """Element offset of K row `k`, column `col` (a multiple of 64) of an MN-major operand stored [K, M] in
    64-column panels: panel col / 64, row k of it."""
    return tirx.floordiv(col, 64) * (tile.rows * 64) + k * 64


def _k_major_offset(tile, row, k):
    """Element offset of the (unswizzled) start of row `row`, column `k` of a K-major operand tile: the
    descriptor's start address (the hardware swizzles the address bits itself)."""
    if tile.panel:
        return tirx.floordiv(k, 64) * (tile.rows * 64) + row * 64 + tirx.floormod(k, 64)
    return row * tile.cols + k


def _region_start(em, tile, rng):
    """Element offset of an operand region's first row in its tile: a slice of a 3-d (or deeper) shared
    buffer, `A_s[s, :, :]`, starts `s` whole [rows, cols] slices in (leading dims fold into rows). The
    region's last two dims are the whole tile's (analysis/mma.py's wgmma_refusal), so the start is a row
    whose slice is a whole number of 8-row swizzle atoms: the hardware's swizzle then matches the tile's."""
    if len(rng) <= 2:
        return 0
    row = 0
    for dim, (start, _) in zip(tile.shape[:-1], rng[:-1], strict=True):
        row = row * int(dim) + em.expr(start)
    return _k_major_offset(tile, row, 0)


def _stage_off(em, tile, buf):
    st = em.stage.get(buf)
    if tile.stages > 1 and st is not None:
        return st * tile.elems
    return 0
