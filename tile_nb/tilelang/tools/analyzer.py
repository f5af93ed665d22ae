"""`tilelang.tools.Analyzer` on tile_nb: FLOPs and global-memory bytes of an elaborated kernel (tile_nb's
phase-2 IR, as `f.get_tir(...)` gives it), counted from its statements, and the roofline time they imply.

    result = Analyzer.analysis(f.get_tir(block_M=128, ...), CUDA("cuda"))
    result.total_flops, result.total_global_bytes, result.estimated_time

Counting (tile_nb's own walk of the IR, tile_nb/tilelang/tools/analyzer.py):
- every statement runs once per block: the grid's blockIdx extents multiply, threadIdx does not (kernel bodies
  are block-level code); each enclosing loop (serial, T.Pipelined, T.Parallel, unrolled) multiplies by its
  extent; both must be constants (a T.dynamic dim is refused, naming the loop);
- FLOPs: 2*m*n*k of each `T.gemm` tile (m x n accumulator, k its K extent, times any batch dims), whole tiles:
  an edge tile that the guards cut counts whole, as the tensor cores compute it. Other operations (reductions,
  elementwise math) are not counted;
- bytes: every region of a tile operation (`T.copy`, ...) in a global buffer, whole, as read (a source) or
  written (the destination); every element a statement loads from or stores to a global buffer (T.Parallel
  loops, `T.im2col`'s gathers, index tables), including loads a predicate skips (image padding): what the
  kernel asks for, an upper bound of what DRAM serves (caches are not modelled);
- an `if` counts its larger branch (FLOPs and bytes separately); a `while` loop is refused (unknown trips).
`estimated_time` (seconds) is the larger of FLOPs at the device's peak (16-bit tensor cores; twice that for
8-bit products; unknown for CUDA-core FLOPs) and bytes at its DRAM bandwidth, from the carver `CUDA` device's
datasheet peaks (`expected_tflops`, `expected_bandwidth_GBps`); None where a peak is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AnalysisResult", "Analyzer"]


@dataclass(frozen=True)
class AnalysisResult:
    total_flops: int
    total_global_bytes: int
    estimated_time: float | None        # seconds; None without the device's peaks
    expected_tflops: float | None
    expected_bandwidth_GBps: float | None
    global_read_bytes: int = 0
    global_write_bytes: int = 0
    gemm_calls: int = 0                 # T.gemm tiles computed, over the grid and loops
    blocks: int = 1


@dataclass
class _Counts:
    flops: int = 0
    read: int = 0
    write: int = 0
    gemms: int = 0
    gemm_dtypes: set = field(default_factory=set)

    def add(self, other: _Counts, times: int = 1) -> None:
        self.flops += other.flops * times
        self.read += other.read * times
        self.write += other.write * times
        self.gemms += other.gemms * times
        self.gemm_dtypes |= other.gemm_dtypes

    def larger(self, other: _Counts) -> _Counts:
        return _Counts(max(self.flops, other.flops), max(self.read, other.read), max(self.write, other.write),
                       max(self.gemms, other.gemms), self.gemm_dtypes | other.gemm_dtypes)


def _elem_bytes(buf) -> int:
    import tvm

    dt = tvm.DataType(str(buf.dtype))
    return max(1, dt.bits * dt.lanes // 8)


def _is_global(buf) -> bool:
    return buf.scope() == "global"


def _const(e, what: str) -> int:
    from ...lower.exprs import const_int

    value = const_int(e)
    if value is None:
        raise ValueError(f"tilelang.tools.Analyzer: {what} is {e}, not a constant; analyze a specialization "
                         f"with every size given (f.get_tir(...) with the tensors' shapes and consts)")
    return value


class _Walk:
    def __init__(self):
        self.blocks = 1

    def loads(self, expr, counts: _Counts) -> None:
        from ...lower.exprs import walk_loads

        def visit(load):
            if _is_global(load.source):
                counts.read += _elem_bytes(load.source)

        if expr is not None:
            walk_loads(expr, visit)

    def stmt(self, s) -> _Counts:
        from tvm import tirx

        counts = _Counts()
        if isinstance(s, tirx.SeqStmt):
            for item in s.seq:
                counts.add(self.stmt(item))
        elif isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            tag = s.node.thread_tag
            extent = _const(s.value, f"the grid extent {tag}")
            inner = self.stmt(s.body)
            if tag.startswith("blockIdx"):
                self.blocks *= extent
                counts.add(inner, extent)
            else:
                counts.add(inner)
        elif isinstance(s, tirx.For):
            extent = _const(s.extent, f"the extent of loop `{s.loop_var}`")
            self.loads(s.min, counts)
            binding = getattr(s, "thread_binding", None)
            inner = self.stmt(s.body)
            if binding is not None and not binding.thread_tag.startswith("blockIdx"):
                extent = 1
            elif binding is not None:
                self.blocks *= extent
            counts.add(inner, extent)
        elif isinstance(s, tirx.IfThenElse):
            self.loads(s.condition, counts)
            then = self.stmt(s.then_case)
            other = self.stmt(s.else_case) if s.else_case is not None else _Counts()
            counts.add(then.larger(other))
        elif isinstance(s, tirx.While):
            raise ValueError("tilelang.tools.Analyzer: a while loop runs an unknown number of times; the "
                             "analysis counts loops with constant extents only")
        elif isinstance(s, tirx.TilePrimitiveCall):
            self.tile_op(s, counts)
        elif isinstance(s, tirx.BufferStore):
            if _is_global(s.buffer):
                counts.write += _elem_bytes(s.buffer)
            self.loads(s.value, counts)
            for index in s.indices:
                self.loads(index, counts)
        elif isinstance(s, tirx.Evaluate):
            from ...lower.irwalk import atomic_target

            self.loads(s.value, counts)
            target = atomic_target(s.value)
            if target is not None and _is_global(target):
                counts.write += _elem_bytes(target)
        else:
            if isinstance(s, tirx.Bind):
                self.loads(s.value, counts)
            body = getattr(s, "body", None)
            if isinstance(body, tirx.Stmt):
                counts.add(self.stmt(body))
        return counts

    def tile_op(self, call, counts: _Counts) -> None:
        import tvm

        from ...lower.irwalk import gemm_k, region_of

        regions = [a for a in call.args if isinstance(a, tvm.ir.expr.TensorRegion)]
        for i, region in enumerate(regions):
            buf, rng = region_of(region)
            for start, _ in rng:
                self.loads(start, counts)
            if _is_global(buf):
                elems = 1
                for _, extent in rng:
                    elems *= _const(extent, f"a region extent of {buf.name}")
                if i == 0:
                    counts.write += elems * _elem_bytes(buf)
                else:
                    counts.read += elems * _elem_bytes(buf)
        for a in call.args:
            if isinstance(a, tvm.ir.Expr) and not isinstance(a, tvm.ir.expr.TensorRegion):
                self.loads(a, counts)
        if call.op.name == "tirx.tile.gemm":
            (c, c_rng), (a, a_rng), (_, b_rng) = (region_of(call.args[i]) for i in range(3))
            c_ext = [_const(e, f"an extent of {c.name}") for _, e in c_rng]
            bm, bn = c_ext[-2], c_ext[-1]
            k = gemm_k(a_rng, b_rng, bool(call.args[4]), bool(call.args[5]), bm, bn)
            batch = 1
            for e in c_ext[:-2]:
                batch *= e
            counts.flops += 2 * bm * bn * k * batch
            counts.gemms += 1
            counts.gemm_dtypes.add((str(a.dtype), str(c.dtype)))


def _prim_func(fn):
    import tvm

    from ...language.functions import PrimFuncDefinition

    if isinstance(fn, tvm.IRModule):
        funcs = [f for f in fn.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
        if len(funcs) != 1:
            main = [f for gv, f in fn.functions.items() if gv.name_hint == "main"]
            if not main:
                raise ValueError(f"tilelang.tools.Analyzer: the IRModule holds {len(funcs)} PrimFuncs and "
                                 "none is named main; pass the one to analyze")
            funcs = main
        return funcs[0]
    if isinstance(fn, tvm.tirx.PrimFunc):
        return fn
    if isinstance(fn, PrimFuncDefinition):   # a @T.prim_func with its sizes in the signature
        from ... import jit

        return jit(fn).specialize()
    raise TypeError(f"tilelang.tools.Analyzer.analysis(fn, ...): expected a PrimFunc (such as "
                    f"f.get_tir(...) gives), an IRModule or a @T.prim_func; got {type(fn).__name__}")


def _peak(device, dtypes) -> float | None:
    """The tensor-core peak for the kernel's T.gemm operand types (None when one runs on the CUDA cores)."""
    from ..carver.gemm_hints import gemm_path

    peak = getattr(device, "peak_tflops", None)
    if peak is None or not dtypes:
        return peak
    scale = 1.0
    for a, c in dtypes:
        try:
            path = gemm_path(a, c, device.caps)
        except ValueError:
            return None
        if path == "fma":
            return None
        if a not in ("float16", "bfloat16"):
            scale = 2.0 if scale == 1.0 else scale   # 8-bit operands: twice the 16-bit rate
    return peak * scale


class Analyzer:
    """tilelang's entry point: `Analyzer.analysis(fn, device)`."""

    def __init__(self, fn, device=None):
        from ..carver.arch import CUDA

        if device is not None and not isinstance(device, CUDA):
            raise TypeError(f"tilelang.tools.Analyzer.analysis(fn, device): expected a "
                            f"tilelang.carver.arch.CUDA or None, got {type(device).__name__}")
        self.fn = _prim_func(fn)
        self.device = device

    def calculate(self) -> AnalysisResult:
        walk = _Walk()
        counts = walk.stmt(self.fn.body)
        total = counts.read + counts.write
        bandwidth = getattr(self.device, "bandwidth_GBps", None)
        peak = _peak(self.device, counts.gemm_dtypes)
        times = []
        if bandwidth:
            times.append(total / (bandwidth * 1e9))
        if counts.flops:
            times.append(counts.flops / (peak * 1e12) if peak else None)
        estimated = None if not times or None in times else max(times)
        return AnalysisResult(
            total_flops=counts.flops, total_global_bytes=total, estimated_time=estimated,
            expected_tflops=peak, expected_bandwidth_GBps=bandwidth, global_read_bytes=counts.read,
            global_write_bytes=counts.write, gemm_calls=counts.gemms, blocks=walk.blocks)

    @classmethod
    def analysis(cls, fn, device=None) -> AnalysisResult:
        """FLOPs, global bytes and roofline time of `fn` on `device` (see the module docstring)."""
        return cls(fn, device).calculate()
