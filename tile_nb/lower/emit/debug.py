"""CUDA lowering of `T.print`, `T.device_assert` and `T.assume` (language/debug.py gives
the IR, docs/debugging.md the text).

- A print becomes device `printf` under `if (threadIdx.x == thread && blockIdx matches)`, with the
  interpreter's text (interp/debug.py) character for character: floats widened to double and printed `%g`,
  integers `%lld`. A tile prints from one thread: a header, then one `printf` per row chunk (ROW_CHUNK
  values), so that lines of different blocks never mix inside a line. A fragment tile arrives staged in
  shared memory (language/debug.py); one element of a fragment is refused here (it lives in the registers
  of the thread its layout chooses).
- An assert becomes `if (!cond) { printf(<line, block, thread, values>); __assertfail(...); }`: CUDA's own
  device-side assert (cudaErrorAssert after the launch; runtime/launch.py turns it into DeviceAssertError).
- An assume becomes `__builtin_assume(cond)` (the interpreter checks it as an assert).
Kernels without these calls never reach this module's rules.
"""
from __future__ import annotations

from tvm import ir, tirx
from tvm.script.ir_builder import tirx as T

from ...language.debug import ASSERT, ASSUME, BREAKPOINT, PRINT, PRINT_TILE, ROW_CHUNK
from ..errors import LoweringError
from . import intrin

__all__ = ["DEBUG_CALLS", "debug_call", "emit_debug"]

DEBUG_CALLS = (PRINT, PRINT_TILE, ASSERT, ASSUME, BREAKPOINT)


def debug_call(stmt):
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, ir.Call):
        return None
    call = stmt.value
    if getattr(call.op, "name", "") != "tirx.call_extern" or not call.args:
        return None
    name = call.args[0]
    return str(name.value) if isinstance(name, ir.StringImm) and name.value in DEBUG_CALLS else None


def _walk(stmt, visit):
    visit(stmt)
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _walk(s, visit)
        return
    for field in ("body", "then_case", "else_case"):
        child = getattr(stmt, field, None)
        if isinstance(child, tirx.Stmt):
            _walk(child, visit)


def _c_text(text: str) -> str:
    return text.replace("%", "%%")


def _spec(dtype: str, value):
    """(printf conversion, argument) of a value as the interpreter formats it."""
    if dtype.startswith(("float", "bfloat")):
        return "%g", tirx.Cast("float64", value) if dtype != "float64" else value
    if dtype == "uint64":
        return "%llu", value
    if dtype == "int64":
        return "%lld", value
    if dtype == "uint32":
        return "%u", value
    return "%d", tirx.Cast("int32", value) if dtype != "int32" else value


def _block_vars(em) -> list:
    """The kernel's blockIdx vars (x, y, z order) as emitted expressions."""
    found = {}

    def visit(s):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            tag = str(s.node.thread_tag)
            if tag.startswith("blockIdx"):
                found[tag] = s.node.var
    _walk(em.func.body, visit)
    return [em.expr(found[k]) for k in sorted(found)]


def _prefix(em, line: int, thread: int, show: bool):
    """('[line 12, block (%d, %d)] ' format, its args)."""
    blocks = _block_vars(em) or [tirx.const(0, "int32")]
    fmt = f"[line {line}, block ({', '.join(['%d'] * len(blocks))})" + (
        f", thread {thread}] " if show else "] "
    )
    return fmt, blocks


def _guard(em, thread: int, wanted: list[int]):
    if em.tx is None:
        raise LoweringError("T.print needs the kernel's threadIdx.x (it prints from one thread)")
    cond = em.tx == tirx.const(thread, str(em.tx.ty.dtype))
    for var, want in zip(_block_vars(em), wanted, strict=False):
        if want >= 0:
            cond = tirx.And(cond, var == tirx.const(want, str(var.ty.dtype)))
    return cond


def _c_string(text: str) -> ir.StringImm:
    """A StringImm that TVM's CUDA codegen prints verbatim between quotes: escaped here for C."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return ir.StringImm(escaped)


def _printf(fmt: str, *args):
    T.evaluate(tirx.call_extern("int32", "printf", _c_string(fmt), *args))


def _refuse_thread_code(em, what: str):
    if em.scope.thread_code:
        raise LoweringError(
            f"{what} inside a T.Parallel loop is not supported: the loop's iterations are spread over "
            "the threads; print the tile after the loop, or a value at block level"
        )


def _refuse_fragment(buf, what: str):
    """An element of a fragment lives in the registers of one thread that the layout chooses, and thread 0
    prints (a whole fragment is staged through shared memory by the language: `<name>_print`)."""
    if buf.scope() == "local.fragment":
        raise LoweringError(
            f"{what} of an element of the fragment '{buf.name}' on the GPU: the element lives in "
            "the registers of the thread its layout chooses, and one thread prints. Print the "
            f"whole fragment (`T.print({buf.name})`, staged through shared memory) or a region "
            "of it, or copy it to a shared tile first; the interpreter prints it"
        )


def _loads(e) -> list:
    found = []

    def visit(x):
        if isinstance(x, ir.TensorLoad):
            found.append(x)
            return
        for field in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(x, field, None)
            if isinstance(child, ir.Expr):
                visit(child)
        if isinstance(x, ir.Call):
            for arg in x.args:
                if isinstance(arg, ir.Expr):
                    visit(arg)
    visit(e)
    return found


def _emit_print(em, stmt):
    args = list(stmt.value.args)
    label = str(args[1].value)
    line, thread, show, *wanted = (int(a.value) for a in args[2:8])
    _refuse_thread_code(em, "T.print")
    try:
        value = args[8] if len(args) > 8 else None
        if value is not None:
            for ld in _loads(value):
                _refuse_fragment(ld.source, "T.print")
        fmt, fargs = _prefix(em, line, thread, bool(show))
        fmt += _c_text(label)
        if value is not None:
            conv, arg = _spec(str(value.ty.dtype), em.expr(value))
            fmt += " = " + conv
            fargs.append(arg)
        with T.If(_guard(em, thread, wanted)), T.Then():
            _printf(fmt + "\n", *fargs)
    except LoweringError as err:
        raise em.lines.locate(err, stmt) from None


def _emit_print_tile(em, stmt):
    args = list(stmt.value.args)
    label = str(args[1].value)
    line, thread, show, *wanted = (int(a.value) for a in args[2:8])
    _refuse_thread_code(em, "T.print")
    try:
        start = args[8].args[0]  # address_of(buf[start])
        buf = start.source
        # T.print stages fragments in shared memory; IR built by hand may not
        if buf.scope() == "local.fragment":
            raise LoweringError(
                f"tile_nb_print_tile of the fragment '{buf.name}': copy it to a shared tile first"
            )
        extents = []
        for e in args[9:]:
            if not isinstance(e, tirx.IntImm):
                raise LoweringError(
                    f"T.print of a region of '{buf.name}' needs compile-time extents on the GPU; got {e}"
                )
            extents.append(int(e.value))
        lo = [em.expr(i) for i in start.indices]
        head, hargs = _prefix(em, line, thread, bool(show))
        dtype = str(buf.dtype)
        with T.If(_guard(em, thread, wanted)), T.Then():
            bounds, convs = [], []
            for a, n in zip(lo, extents, strict=True):
                conv, a = _spec(str(a.ty.dtype), a)
                convs.append(f"{conv}:{conv}")
                bounds += [a, a + tirx.const(n, str(a.ty.dtype))]
            region = ", ".join(convs)
            _printf(
                f"{head}{_c_text(label) + ': ' if label else ''}{buf.name}[{region}] {dtype}\n",
                *hargs,
                *bounds,
            )
            _emit_rows(em, head, hargs, buf, lo, extents, dtype)
    except LoweringError as err:
        raise em.lines.locate(err, stmt) from None


def _emit_rows(em, head, hargs, buf, lo, extents, dtype, lead=()):
    """Nested serial loops over the leading dims; per row, one printf per ROW_CHUNK values."""
    depth = len(lead)
    if depth < len(extents) - 1:
        with T.serial(0, extents[depth]) as i:
            _emit_rows(em, head, hargs, buf, lo, extents, dtype, lead + (i,))
        return
    width = extents[-1]
    for c0 in range(0, width, ROW_CHUNK):
        c1 = min(c0 + ROW_CHUNK, width)
        cols = ":" if c1 - c0 == width else f"{c0}:{c1}"
        where = ", ".join(["%d"] * len(lead) + [cols])
        convs, values = [], []
        for c in range(c0, c1):
            # the element at start + (lead, c); the emitter maps the buffer (shared pool views, globals)
            conv, arg = _spec(dtype, em.load(buf, [a + i for a, i in zip(lo, list(lead) + [c], strict=True)]))
            convs.append(conv)
            values.append(arg)
        _printf(f"{head}{buf.name}[{where}] = {' '.join(convs)}\n", *hargs, *lead, *values)


def _emit_assert(em, stmt):
    args = list(stmt.value.args)
    cond, message, line = args[1], str(args[2].value), int(args[3].value)
    try:
        shown = []
        for ld in _loads(cond):
            if str(ld) not in [s for s, _ in shown]:
                shown.append((str(ld), ld))
        fmt, fargs = _prefix(em, line, 0, False)
        fmt = fmt.replace("] ", ", thread %d] ", 1)
        fargs.append(em.tx if em.tx is not None else tirx.const(0, "int32"))
        fmt += "T.device_assert failed" + (": " + _c_text(message) if message else "")
        parts = []
        for text, ld in shown:
            conv, arg = _spec(str(ld.ty.dtype), em.expr(ld))
            parts.append(f"{_c_text(text)} = {conv}")
            fargs.append(arg)
        if parts:
            fmt += " (" + ", ".join(parts) + ")"
        lowered = em.expr(cond)
        kernel = str((em.func.attrs or {}).get("global_symbol", "kernel"))
        filename = em.func.span.source_name.name if em.func.span is not None else "<kernel>"
        # `if (cond) {} else {fail}`: TVM's simplifier turns `!(x < 6)` into `6 <= x`, which a NaN x passes
        with T.If(lowered):
            with T.Then():
                T.evaluate(0)
            with T.Else():
                _printf(fmt + "\n", *fargs)
                T.evaluate(
                    intrin.device_helper(
                        "tnb_device_assert_fail",
                        _ASSERT_PARAMS,
                        _ASSERT_BODY,
                        _c_string(f"T.device_assert at line {line}" + (": " + message if message else "")),
                        _c_string(filename),
                        tirx.const(line, "uint32"),
                        _c_string(kernel),
                    )
                )
    except LoweringError as err:
        raise em.lines.locate(err, stmt) from None


# CUDA's device-side assert (cudaErrorAssert after the launch): NVRTC declares `__assertfail`, nvcc on Linux
# `__assert_fail` (crt/common_functions.h).
_ASSERT_PARAMS = "const char* msg, const char* file, unsigned int line, const char* fn"
_ASSERT_BODY = """#if defined(__CUDACC_RTC__)
  __assertfail(msg, file, line, fn, sizeof(char));
#else
  __assert_fail(msg, file, line, fn);
#endif"""

def _refuse_breakpoint(em, stmt):
    """T.breakpoint stops the CPU interpreter in Python's debugger; a GPU thread has no debugger to stop in,
    and skipping it silently would let a kernel behave differently on the two sides: refused at its line."""
    err = LoweringError(
        "T.breakpoint() is an interpreter-only debugging aid; the GPU lowering refuses it",
        hint="remove the T.breakpoint() call before compiling for the GPU (run the kernel on CPU "
        "tensors to stop there)",
    )
    raise em.lines.locate(err, stmt) from None


def _emit_assume(em, stmt):
    try:
        cond = em.expr(stmt.value.args[1])
    except LoweringError as err:
        raise em.lines.locate(err, stmt) from None
    T.evaluate(intrin.device_helper("tnb_assume", "bool cond", "  __builtin_assume(cond);", cond))


_RULES = {
    PRINT: _emit_print,
    PRINT_TILE: _emit_print_tile,
    ASSERT: _emit_assert,
    ASSUME: _emit_assume,
    BREAKPOINT: _refuse_breakpoint,
}


def emit_debug(em, stmt):
    _RULES[debug_call(stmt)](em, stmt)
