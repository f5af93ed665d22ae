"""`%%tilekernel`: define a kernel in a cell and show its view.

The cell is executed in the user namespace like an ordinary cell, but compiled through IPython's caching
compiler with a first line standing for the `%%tilekernel` line, so `linecache` holds the source (the front
end needs it for in-body annotations) and line numbers in errors are the lines of the cell as the editor shows
them. The source is registered under the number IPython shows for the running cell, so errors name that cell
(`In[2]`), also when they are raised later by a call in another cell.

Every function of the cell whose own body opens `with T.Kernel(...)` (whatever the language module is called),
and every function already decorated with `@tile_nb.jit`, is a kernel: the magic decorates the undecorated
ones. Other functions (references, helpers) stay plain Python functions.
"""
from __future__ import annotations

import ast
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from tile_nb.errors import TileNBError
from tile_nb.jit import jit
from tile_nb.notebook.api import kernel_view
from tile_nb.notebook.tracebacks import refresh

__all__ = [
    "CellSyntaxError",
    "NotAKernelError",
    "TileKernelMagics",
    "cell_kernels",
    "opens_kernel",
    "running_cell_number",
]


class CellSyntaxError(TileNBError):
    """The `%%tilekernel` cell is not valid Python (shown in the short form: the line and a caret)."""


class NotAKernelError(TileNBError):
    """The `%%tilekernel` cell defines no kernel, or `--name` names a function that is not one."""


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
        except Exception as err:  # noqa: BLE001 - a bad value is a usage error, not a traceback from the magic
            raise UsageError(
                f"--shapes {item!r}: the value {text!r} could not be evaluated "
                f"({type(err).__name__}: {err}); --shapes takes NAME=VALUE pairs whose VALUE is a "
                f"Python expression in the notebook's namespace, such as {name}=1024 or {name}=n "
                "for a variable n defined before"
            ) from None
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


_MISSING = object()


def _resolve(node: ast.expr, namespace: dict) -> Any:
    """The value of a dotted name (`T.Kernel`, `tile_nb.language.Kernel`) in `namespace`, else `_MISSING`."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, _MISSING)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, namespace)
        return _MISSING if base is _MISSING else getattr(base, node.attr, _MISSING)
    return _MISSING


def _own_nodes(func: ast.FunctionDef | ast.AsyncFunctionDef):
    """The nodes of the function's body, without those of functions, classes and lambdas nested in it."""
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def opens_kernel(func: ast.FunctionDef | ast.AsyncFunctionDef, namespace: dict) -> bool:
    """Whether the function's own body has a `with T.Kernel(...)` statement,
    `T` being any name of the language.

    The callee is looked up in `namespace` (the cell's globals, after it ran); a name that is
    not bound there is taken by its spelling (`...Kernel`), so a kernel whose module import
    failed is still reported as a kernel.
    """
    language = sys.modules.get("tile_nb.language")  # not loaded: no cell can have used its Kernel
    marker = getattr(language, "Kernel", _MISSING)
    for node in _own_nodes(func):
        if not isinstance(node, ast.With):
            continue
        for item in node.items:
            call = item.context_expr
            if not isinstance(call, ast.Call):
                continue
            target = _resolve(call.func, namespace)
            if target is not _MISSING and target is marker:
                return True
            spelled = (
                call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            )
            if target is _MISSING and spelled == "Kernel":
                return True
    return False


def cell_kernels(tree: ast.Module, namespace: dict) -> tuple[dict[str, ast.AST], list[str]]:
    """The cell's top-level functions by name (in order; a name defined twice keeps its last
    definition) and the names of those that are kernels: already a tile_nb kernel in `namespace`, or
    opening `T.Kernel` in their body."""
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[node.name] = node
    kernels = [name for name, node in defs.items() if name in namespace  # (a `del` in the cell unbinds it)
               and (hasattr(namespace[name], "template") or opens_kernel(node, namespace))]
    return defs, kernels


def _names(names) -> str:
    return ", ".join(names) or "none"


def running_cell_number(shell) -> int:
    """The number IPython shows for the running cell (`In [n]`).

    IPython 9 counts the cell before running it and earlier versions after, so `shell.execution_count` names
    the next cell on one of them; the running cell's result object carries its own number on both.
    """
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(result, "execution_count", None)
    return number if isinstance(number, int) else shell.execution_count


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
    @argument(
        "--call",
        metavar="EXPR",
        help='specialize and run on namespace values, e.g. --call "gemm(A, B, C)"; CPU tensors run on the '
        "CPU interpreter, CUDA tensors on the GPU",
    )
    @argument(
        "--expect",
        metavar="EXPR",
        help='with --call: the reference output, e.g. --expect "A.float() @ B.float()"; the view gives the '
        "max abs error of the output (the returned value, else the last tensor argument)",
    )
    @argument("--cuda", action="store_true", help="compile and show the CUDA source, PTX and SASS, resources")
    @argument("--lowered", action="store_true", help="compile and show the lowered (thread-level) TIRx")
    @argument(
        "--cpu", action="store_true", help="with --call: run on the CPU interpreter even for CUDA tensors"
    )
    @argument("--bench", action="store_true",
              help="with --call: time the kernel with tile_nb.bench (shown after the view: mark the cell "
                   "# NBVAL_IGNORE_OUTPUT under nbval, since timings vary)")
    @argument(
        "--sweep",
        metavar="SPEC",
        help='time every combination, e.g. --sweep "block_M=64,128 block_N=64,128" (compile-time '
        "parameters and/or consts; values are Python expressions); failures are recorded, not raised",
    )
    @argument(
        "--tune",
        metavar="SPEC",
        nargs="?",
        const="",
        help='autotune: search a grid, e.g. --tune "block_M=64,128 num_stages=2,3" (or, with no SPEC, the '
        "kernel's @tile_nb.autotune configs): compiled in parallel, pruned by resources, timed on the "
        "GPU (compile-only without one); the result is stored and shown as a table and plot",
    )
    @argument(
        "--flops",
        metavar="EXPR",
        help='with --bench/--sweep/--tune: FLOPs of one call, e.g. --flops "2*M*N*K" '
        "(evaluated per configuration, with its values as names)",
    )
    @argument(
        "--bytes",
        metavar="EXPR",
        help="with --bench/--sweep: bytes one call moves (default: the tensor "
        "arguments and outputs, once each)",
    )
    @argument(
        "--baseline",
        metavar="EXPR",
        help="with --bench/--sweep: a reference to time and compare with, "
        'e.g. --baseline "torch.matmul(A, B)" (the kernel\'s tensors by '
        "parameter name)",
    )
    @argument(
        "--results",
        metavar="PATH",
        help="with --sweep/--tune: write the results to this JSON file (after every configuration)",
    )
    @argument(
        "--name",
        metavar="NAME",
        help="the kernel to show, when the cell defines several (default: the only kernel, else the last "
        "one, and the view lists the others)",
    )
    def tilekernel(self, line: str, cell: str):
        """Define a tile kernel in the cell and show its view (template IR beside the specialized IR).

        The cell holds kernel definitions, decorated with `@tile_nb.jit` or not, and may hold other code. It
        runs in the notebook's namespace, so everything it defines is usable afterwards. Every function whose
        body opens `with T.Kernel(...)` is a kernel (the magic decorates the undecorated ones); other
        functions, such as a `def reference(x)`, stay plain functions. The view shows the kernel `--name` (or
        `--call`) names, else the only kernel, else the last one (the view then lists the others).
        With a body of only comments (IPython refuses a cell magic whose body is empty), the magic shows a
        kernel defined before: the one `--name` or `--call` names.

        With no option the view shows the phase-1 template (consts symbolic). `--shapes` or `--call` add the
        phase-2 specialized IR beside it, with the lines that specialization changed marked. Examples:

            %%tilekernel --shapes M=256 N=256 K=128
            %%tilekernel --call "gemm(A, B, C)" --expect "A.float() @ B.float()"
            %%tilekernel --shapes M=4096 N=4096 K=4096 --cuda --lowered

        Benchmarks (timings vary: mark such cells `# NBVAL_IGNORE_OUTPUT` under nbval). `--bench` times
        the call with `tile_nb.bench.do_bench` (GPU: warm-up, L2 flush, CUDA events; CPU tensors: the
        interpreter with the host clock, and it says so); alone it prints one line, with `--flops`,
        `--bytes` or `--baseline` it shows a table with TFLOP/s, GB/s and the ratio to the baseline.
        With `--shapes` instead of `--call`, random inputs are made from the kernel's annotations.
        `--sweep` times every combination of the listed values, shows progress, records failing
        configurations with their error, writes `--results` JSON, and shows a table and a plot of
        latency and throughput against the swept parameter:

            %%tilekernel --call "gemm(A, B, C)" --bench --flops "2*M*N*K" --baseline "A @ B"
            %%tilekernel --call "gemm(A, B, C)" --sweep "block_M=64,128 block_N=64,128" --results gemm.json
            %%tilekernel --shapes K=256 --sweep "M=256,512,1024 N=256,512,1024" --baseline "A @ B"

        `--tune` searches configurations for the fastest (`tile_nb.bench.tuning`): compiled in parallel worker
        processes, pruned by shared memory, registers and spills, timed one at a time on the GPU (without one:
        compile-only, and it says so); progress and the table fill in as results arrive; the result is stored,
        so the same search in any later process is read back instead of run:

            %%tilekernel --shapes M=4096 N=4096 K=4096 --tune "block_M=64,128 block_N=128,256 num_stages=2,3"

        The same views from Python: `tile_nb.notebook.show(gemm, M=256, N=256, K=128)` (`gemm.show(...)`),
        `gemm.bench(A, B, C, flops=..., baseline=lambda: A @ B)` and `gemm.sweep({"block_M": [64, 128]},
        args=(A, B, C), results="gemm.json")`.
        Errors in the kernel point at the cell's line; `%tb` prints the full traceback.
        """
        opts = parse_argstring(self.tilekernel, line)
        shell = self.shell
        if _has_code(cell):
            name, kernels = self._define(line, cell, opts.name)
        else:
            name, kernels = self._existing(opts), []
        kernel = shell.user_ns[name]
        kwargs = parse_shapes(opts.shapes, shell.user_ns)
        args: tuple = ()
        called = False
        if opts.call:
            func, args, call_kwargs = parse_call(_unquote(opts.call), shell.user_ns)
            called = hasattr(func, "template")
            kernel = func if called else kernel
            kwargs = {**kwargs, **call_kwargs}
        elif opts.cpu or opts.expect or (opts.bench and not opts.shapes):
            raise UsageError("--cpu, --bench and --expect need --call \"kernel(args...)\" to run the kernel "
                             "(--bench also works with --shapes, on random inputs)")
        expected = None
        if opts.expect:
            expect_text = _unquote(opts.expect)
            expected = lambda: _eval(ast.parse(expect_text, mode="eval").body, shell.user_ns, "--expect")
        notes = []
        if len(kernels) > 1 and opts.name is None and not called:
            others = [k for k in kernels if k != name]
            notes.append(f"this cell defines the kernels {', '.join(kernels)}; shown: {name} (the last); "
                         f"--name {others[-1]} shows another")
        try:
            view = kernel_view(
                kernel,
                args,
                kwargs,
                run=bool(opts.call),
                cpu=opts.cpu,
                cuda=opts.cuda,
                lowered=opts.lowered,
                expected=expected,
                name=name if kernel is shell.user_ns[name] else None,
                notes=notes,
            )
        finally:
            refresh(shell)  # errors of layers loaded just now (compiler, interpreter) get the short form too
        if opts.sweep or opts.bench or opts.tune is not None:
            from IPython.display import display

            from tile_nb.notebook.magic_bench import bench_from_magic, sweep_from_magic, tune_from_magic

            run = (
                tune_from_magic
                if opts.tune is not None
                else sweep_from_magic
                if opts.sweep
                else bench_from_magic
            )
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
            raise UsageError(
                "%%tilekernel: the cell is empty; define a kernel in it, or name one defined before "
                'with --name NAME or --call "NAME(args...)"'
            )
        kernel = self.shell.user_ns.get(name)
        if kernel is None or not hasattr(kernel, "template"):
            raise UsageError(f"%%tilekernel: '{name}' is not a tile_nb kernel in the namespace")
        return name

    def _define(self, line: str, cell: str, wanted: str | None) -> tuple[str, list[str]]:
        """Execute the cell in the user namespace, decorate its kernels; return (the
        kernel to show, all kernels)."""
        shell = self.shell
        body = shell.transform_cell(cell)
        # The first line stands for the magic line, so that line k of the source is line k of the cell.
        source = f"# %%tilekernel {line}".rstrip() + "\n" + body
        filename = shell.compile.cache(source, running_cell_number(shell), raw_code=source)
        try:
            tree = shell.compile.ast_parse(source, filename=filename)
        except SyntaxError as err:  # the short form, not IPython's traceback through the magic machinery
            col = (err.offset - 1) if err.offset else None
            end = (err.end_offset - 1) if err.end_offset and err.end_lineno == err.lineno else None
            raise CellSyntaxError(
                err.msg, filename=filename, lineno=err.lineno, col=col, end_col=end
            ) from None
        code = shell.compile(tree, filename, "exec")
        exec(code, shell.user_ns)  # noqa: S102 - the user's cell, run as IPython would run it
        defs, kernels = cell_kernels(tree, shell.user_ns)
        others = [n for n in defs if n not in kernels]
        if wanted is not None and wanted not in defs:
            raise UsageError(
                f"%%tilekernel --name {wanted}: the cell defines no function '{wanted}'; its kernels: "
                f"{_names(kernels)}" + (f"; other functions: {_names(others)}" if others else "")
            )
        for name in kernels:
            if not hasattr(shell.user_ns[name], "template"):
                shell.user_ns[name] = jit(shell.user_ns[name])
        if wanted is not None and wanted not in kernels:
            node = defs[wanted]
            raise NotAKernelError(
                f"%%tilekernel --name {wanted}: '{wanted}' is not a kernel (its body has no `with "
                "T.Kernel(...)`); "
                f"the cell's kernels: {_names(kernels)}",
                filename=filename,
                lineno=node.lineno,
                col=node.col_offset,
                end_col=_def_end_col(node, source),
                hint=f"name one of the kernels: --name {kernels[-1]}"
                if kernels
                else "a kernel's body opens `with T.Kernel(grid...) as ...:`",
            )
        if not kernels:
            node = next(iter(defs.values()), None)
            where = {} if node is None else dict(filename=filename, lineno=node.lineno, col=node.col_offset,
                                                  end_col=_def_end_col(node, source))
            found = f"it defines {_names(defs)}, none with" if defs else "it defines no function with"
            raise NotAKernelError(f"%%tilekernel: the cell must define a kernel function; {found} "
                                  "`with T.Kernel(...)` in its body", **where,
                                  hint="a kernel's body opens `with T.Kernel(grid...) as ...:`; decorating a "
                                       "function with @tile_nb.jit also makes it one")
        return wanted or kernels[-1], kernels


def _def_end_col(node: ast.AST, source: str) -> int | None:
    """The end column of the `def ...:` line (the caret spans the header, not the body)."""
    lines = source.splitlines()
    if not 0 < node.lineno <= len(lines):
        return None
    return len(lines[node.lineno - 1].rstrip())
