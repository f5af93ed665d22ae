"""`%%tilekernel`: define a kernel in a cell and show its view.

The cell is executed in the user namespace like an ordinary cell, but compiled through IPython's caching compiler
with a first line standing for the `%%tilekernel` line, so `linecache` holds the source (the front end needs it for
in-body annotations) and line numbers in errors are the lines of the cell as the editor shows them.
"""
from __future__ import annotations

import ast
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from tile_nb.errors import TileNBError
from tile_nb.notebook.api import kernel_view
from tile_nb.notebook.tracebacks import refresh

__all__ = ["CellSyntaxError", "TileKernelMagics"]


class CellSyntaxError(TileNBError):
    """The `%%tilekernel` cell is not valid Python (shown in the short form: the line and a caret)."""


def _eval(node: ast.expr, namespace: dict, label: str) -> Any:
    code = compile(ast.Expression(body=node), f"<%%tilekernel {label}>", "eval")
    return eval(code, namespace)


def parse_shapes(items: list[str] | None, namespace: dict) -> dict[str, Any]:
    """`["M=1024", "dtype=T.float16"]` -> {"M": 1024, "dtype": <value>}; values are Python expressions."""
    values: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier() or not text:
            raise UsageError(f"--shapes takes NAME=VALUE pairs such as M=1024; got {item!r}")
        try:
            values[name] = _eval(ast.parse(text, mode="eval").body, namespace, "--shapes")
        except SyntaxError:
            raise UsageError(f"--shapes {item!r}: {text!r} is not a Python expression") from None
    return values


def parse_call(text: str, namespace: dict) -> tuple[Any, tuple, dict]:
    """`"gemm(A, B, C)"` -> (gemm, (A, B, C), {}), evaluated in `namespace`."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        tree = None
    if not isinstance(tree, ast.Call):
        raise UsageError(f"--call takes a call expression such as \"gemm(A, B, C)\"; got {text!r}")
    func = _eval(tree.func, namespace, "--call")
    args: list = []
    for node in tree.args:
        if isinstance(node, ast.Starred):
            args.extend(_eval(node.value, namespace, "--call"))
        else:
            args.append(_eval(node, namespace, "--call"))
    kwargs: dict = {}
    for kw in tree.keywords:
        value = _eval(kw.value, namespace, "--call")
        if kw.arg is None:
            kwargs.update(value)
        else:
            kwargs[kw.arg] = value
    return func, tuple(args), kwargs


def _has_code(cell: str) -> bool:
    """Whether the cell has more than blank lines and comments (such a cell shows a kernel defined before)."""
    return any(line.strip() and not line.strip().startswith("#") for line in cell.splitlines())


def _unquote(text: str | None) -> str | None:
    if text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


@magics_class
class TileKernelMagics(Magics):
    """The `%%tilekernel` cell magic (registered by `%load_ext tile_nb`)."""

    @cell_magic
    @magic_arguments("%tilekernel")  # usage reads "%%tilekernel" (IPython adds one %)
    @argument("--shapes", nargs="+", metavar="NAME=VALUE",
              help="specialize without tensors: values for the consts (and compile-time parameters), "
                   "e.g. --shapes M=1024 N=1024 K=1024")
    @argument("--call", metavar="EXPR",
              help='specialize and run on namespace values, e.g. --call "gemm(A, B, C)"; CPU tensors run on the '
                   "CPU interpreter, CUDA tensors on the GPU")
    @argument("--expect", metavar="EXPR",
              help='with --call: the reference output, e.g. --expect "A.float() @ B.float()"; the view gives the '
                   "max abs error of the output (the returned value, else the last tensor argument)")
    @argument("--cuda", action="store_true", help="compile and show the CUDA source, PTX and SASS, resources")
    @argument("--lowered", action="store_true", help="compile and show the lowered (thread-level) TIRx")
    @argument("--cpu", action="store_true", help="with --call: run on the CPU interpreter even for CUDA tensors")
    @argument("--bench", action="store_true",
              help="with --call: time the kernel with tile_nb.bench (shown after the view: mark the cell "
                   "# NBVAL_IGNORE_OUTPUT under nbval, since timings vary)")
    @argument("--sweep", metavar="SPEC",
              help='time every combination, e.g. --sweep "block_M=64,128 block_N=64,128" (compile-time '
                   "parameters and/or consts; values are Python expressions); failures are recorded, not raised")
    @argument("--tune", metavar="SPEC", nargs="?", const="",
              help='autotune: search a grid, e.g. --tune "block_M=64,128 num_stages=2,3" (or, with no SPEC, the '
                   "kernel's @tile_nb.autotune configs): compiled in parallel, pruned by resources, timed on the "
                   "GPU (compile-only without one); the result is stored and shown as a table and plot")
    @argument("--flops", metavar="EXPR", help='with --bench/--sweep/--tune: FLOPs of one call, e.g. --flops "2*M*N*K" '
                                             "(evaluated per configuration, with its values as names)")
    @argument("--bytes", metavar="EXPR", help="with --bench/--sweep: bytes one call moves (default: the tensor "
                                             "arguments and outputs, once each)")
    @argument("--baseline", metavar="EXPR", help='with --bench/--sweep: a reference to time and compare with, '
                                                'e.g. --baseline "torch.matmul(A, B)" (the kernel\'s tensors by '
                                                "parameter name)")
    @argument("--results", metavar="PATH", help="with --sweep/--tune: write the results to this JSON file (after every "
                                               "configuration)")
    @argument("--name", metavar="NAME",
              help="the kernel, when the cell defines several functions (default: the last one defined)")
    def tilekernel(self, line: str, cell: str):
        """Define a tile kernel in the cell and show its view (template IR beside the specialized IR).

        The cell holds a kernel definition, decorated with `@tile_nb.jit` or not (an undecorated function is
        decorated by the magic). It runs in the notebook's namespace, so the kernel is usable afterwards.
        With a body of only comments (IPython refuses a cell magic whose body is empty), the magic shows a kernel
        defined before: the one `--name` or `--call` names.

        With no option the view shows the phase-1 template (consts symbolic). `--shapes` or `--call` add the
        phase-2 specialized IR beside it, with the lines that specialization changed marked. Examples:

            %%tilekernel --shapes M=256 N=256 K=128
            %%tilekernel --call "gemm(A, B, C)" --expect "A.float() @ B.float()"
            %%tilekernel --shapes M=4096 N=4096 K=4096 --cuda --lowered

        Benchmarks (timings vary: mark such cells `# NBVAL_IGNORE_OUTPUT` under nbval). `--bench` times the call
        with `tile_nb.bench.do_bench` (GPU: warm-up, L2 flush, CUDA events; CPU tensors: the interpreter with the
        host clock, and it says so); alone it prints one line, with `--flops`, `--bytes` or `--baseline` it shows
        a table with TFLOP/s, GB/s and the ratio to the baseline. With `--shapes` instead of `--call`, random
        inputs are made from the kernel's annotations. `--sweep` times every combination of the listed values,
        shows progress, records failing configurations with their error, writes `--results` JSON, and shows a
        table and a plot of latency and throughput against the swept parameter:

            %%tilekernel --call "gemm(A, B, C)" --bench --flops "2*M*N*K" --baseline "A @ B"
            %%tilekernel --call "gemm(A, B, C)" --sweep "block_M=64,128 block_N=64,128" --results gemm.json
            %%tilekernel --shapes K=256 --sweep "M=256,512,1024 N=256,512,1024" --baseline "torch.matmul(A, B)"

        `--tune` searches configurations for the fastest (`tile_nb.bench.tuning`): compiled in parallel worker
        processes, pruned by shared memory, registers and spills, timed one at a time on the GPU (without one:
        compile-only, and it says so); progress and the table fill in as results arrive; the result is stored,
        so the same search in any later process is read back instead of run:

            %%tilekernel --shapes M=4096 N=4096 K=4096 --tune "block_M=64,128 block_N=128,256 num_stages=2,3"

        The same views from Python: `tile_nb.notebook.show(gemm, M=256, N=256, K=128)` (`gemm.show(...)`),
        `gemm.bench(A, B, C, flops=..., baseline=lambda: A @ B)` and `gemm.sweep({"block_M": [64, 128]}, args=(A, B,
        C), results="gemm.json")`.
        Errors in the kernel point at the cell's line; `%tb` prints the full traceback.
        """
        opts = parse_argstring(self.tilekernel, line)
        shell = self.shell
        if _has_code(cell):
            name = self._define(line, cell, opts.name)
        else:
            name = self._existing(opts)
        kernel = shell.user_ns[name]
        kwargs = parse_shapes(opts.shapes, shell.user_ns)
        args: tuple = ()
        if opts.call:
            func, args, call_kwargs = parse_call(_unquote(opts.call), shell.user_ns)
            kernel = func if hasattr(func, "template") else kernel
            kwargs = {**kwargs, **call_kwargs}
        elif opts.cpu or opts.expect or (opts.bench and not opts.shapes):
            raise UsageError("--cpu, --bench and --expect need --call \"kernel(args...)\" to run the kernel "
                             "(--bench also works with --shapes, on random inputs)")
        expected = None
        if opts.expect:
            expect_text = _unquote(opts.expect)
            expected = lambda: _eval(ast.parse(expect_text, mode="eval").body, shell.user_ns, "--expect")
        notes = []
        try:
            view = kernel_view(kernel, args, kwargs, run=bool(opts.call), cpu=opts.cpu, cuda=opts.cuda,
                               lowered=opts.lowered, expected=expected, name=name if kernel is shell.user_ns[name]
                               else None, notes=notes)
        finally:
            refresh(shell)  # errors of layers loaded just now (compiler, interpreter) get the short form too
        if opts.sweep or opts.bench or opts.tune is not None:
            from IPython.display import display

            from tile_nb.notebook.magic_bench import bench_from_magic, sweep_from_magic, tune_from_magic

            run = tune_from_magic if opts.tune is not None else sweep_from_magic if opts.sweep else bench_from_magic
            result = run(kernel, opts, args if opts.call else None, kwargs, shell.user_ns,
                         consts=dict(view.consts or {}))  # M, N, K ... as names for --flops / --bytes
            display(view)
            return result  # shown after the view; its numbers vary from run to run
        return view

    # ------------------------------------------------------------------------------------------------ helpers
    def _existing(self, opts) -> str:
        """An empty cell: the kernel named by --name, or called by --call, from the namespace."""
        name = opts.name
        if name is None and opts.call:
            try:
                func = ast.parse(_unquote(opts.call).strip(), mode="eval").body
            except SyntaxError:
                func = None
            name = func.func.id if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) else None
        if name is None:
            raise UsageError("%%tilekernel: the cell is empty; define a kernel in it, or name one defined before "
                             "with --name NAME or --call \"NAME(args...)\"")
        kernel = self.shell.user_ns.get(name)
        if kernel is None or not hasattr(kernel, "template"):
            raise UsageError(f"%%tilekernel: '{name}' is not a tile_nb kernel in the namespace")
        return name

    def _define(self, line: str, cell: str, wanted: str | None) -> str:
        """Execute the cell in the user namespace; return the kernel's name (decorating it when needed)."""
        shell = self.shell
        body = shell.transform_cell(cell)
        # The first line stands for the magic line, so that line k of the source is line k of the cell.
        source = f"# %%tilekernel {line}".rstrip() + "\n" + body
        filename = shell.compile.cache(source, shell.execution_count, raw_code=source)
        try:
            tree = shell.compile.ast_parse(source, filename=filename)
        except SyntaxError as err:  # the short form, not IPython's traceback through the magic machinery
            col = (err.offset - 1) if err.offset else None
            end = (err.end_offset - 1) if err.end_offset and err.end_lineno == err.lineno else None
            raise CellSyntaxError(err.msg, filename=filename, lineno=err.lineno, col=col, end_col=end) from None
        defs = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not defs:
            raise UsageError("%%tilekernel: the cell must define a kernel function (def name(...): ...)")
        if wanted is not None and wanted not in defs:
            raise UsageError(f"%%tilekernel --name {wanted}: the cell defines {', '.join(defs)}")
        name = wanted or defs[-1]
        code = shell.compile(tree, filename, "exec")
        exec(code, shell.user_ns)  # noqa: S102 - the user's cell, run as IPython would run it
        kernel = shell.user_ns[name]
        if not hasattr(kernel, "template"):
            import tile_nb

            kernel = tile_nb.jit(kernel)
            shell.user_ns[name] = kernel
        return name


