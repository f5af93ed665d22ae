"""Finding a kernel's source text: files, notebook cells, closures, and
`exec`'d code registered in `linecache`.

In-body annotations (`A: T.Tensor[...]`) are not in the bytecode, so the front end needs the
source. Python keeps it for files; IPython registers every cell in `linecache`; for `exec`,
`run_source` does the same registration.
"""
from __future__ import annotations

import ast
import itertools
import linecache
import textwrap
from dataclasses import dataclass

from ..errors import SourceNotFoundError

__all__ = ["KernelSource", "get_source", "run_source", "register_source"]


@dataclass(frozen=True)
class KernelSource:
    """The function's definition as text, where it starts in its file, and its parsed tree."""

    filename: str
    first_line: int  # 1-based line of the `def` (or first decorator) in `filename`
    text: str  # dedented
    indent: int  # columns removed by dedenting
    tree: ast.FunctionDef


def _counter():
    return itertools.count(1)


_exec_ids = _counter()


def register_source(text: str, filename: str | None = None) -> str:
    """Put `text` into `linecache` under `filename` (made up if None) so its
    functions' source can be found."""
    if filename is None:
        filename = f"<tile_nb-exec-{next(_exec_ids)}>"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    # A None mtime marks an entry linecache.checkcache must keep, as IPython does for cells.
    linecache.cache[filename] = (len(text), None, lines, filename)
    return filename


def run_source(text: str, globals_: dict | None = None, filename: str | None = None) -> dict:
    """`exec` a source string so that kernels defined in it work: the text is registered in `linecache` first.

    >>> ns = run_source(open("kernels.py").read())   # ns["gemm"] is the decorated kernel
    """
    filename = register_source(text, filename)
    namespace = {} if globals_ is None else globals_
    namespace.setdefault("__name__", "__tile_nb_exec__")
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - this helper's purpose
    return namespace


def _not_found(fn, why: str) -> SourceNotFoundError:
    code = fn.__code__
    return SourceNotFoundError(
        f"cannot find the source of kernel '{fn.__qualname__}' ({why}); tile_nb reads the kernel body's "
        "annotations from its source text",
        filename=code.co_filename, lineno=code.co_firstlineno,
        hint="define the kernel in a .py file or a notebook cell; for exec'd code use "
             "tile_nb.run_source(text, namespace), or compile(text, filename, 'exec') after "
             "tile_nb.register_source(text, filename)")


def get_source(fn) -> KernelSource:
    """The source of `fn` through `linecache` (which also covers IPython cells and `run_source`)."""
    code = fn.__code__
    filename = code.co_filename
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        raise _not_found(fn, f"'{filename}' is not a file and not registered in linecache")
    start = code.co_firstlineno  # first decorator or the def
    if start > len(lines):
        raise _not_found(fn, f"'{filename}' has {len(lines)} lines but the function starts at line {start}")
    block = _function_block(lines, start - 1)
    first = block[0]
    indent = len(first) - len(first.lstrip())
    text = textwrap.dedent("".join(block))
    try:
        module = ast.parse(text)
    except SyntaxError as err:
        raise _not_found(
            fn,
            f"its source at {filename}:{start} does not parse ({err.msg}); the file may have "
            "changed since the function was defined",
        ) from None
    tree = next((n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if tree is None or tree.name != fn.__name__:
        raise _not_found(fn, f"line {start} of '{filename}' does not define '{fn.__name__}'; the source may "
                             "have changed since the function was defined")
    return KernelSource(filename, start, text, indent, tree)


def _function_block(lines: list[str], start: int) -> list[str]:
    """Lines from `start` through the end of the decorated def that begins there (by indentation)."""
    first = lines[start]
    base = len(first) - len(first.lstrip())
    end = start + 1
    seen_def = first.lstrip().startswith(("def ", "async def "))
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        if not seen_def:
            seen_def = stripped.startswith(("def ", "async def "))
            end += 1
            continue
        if stripped and not stripped.startswith("#") and len(line) - len(line.lstrip()) <= base \
                and not stripped.startswith((")", "]", "}")):
            break
        end += 1
    return lines[start:end]
