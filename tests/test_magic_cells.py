"""`%%tilekernel` picks the kernels of its cell and names the cell it ran in
(issue 29), in IPython's test shell."""
from __future__ import annotations

import ast
import re
import types

import pytest

pytest.importorskip("IPython")

SCALE = '''\
def scale(X, Y, block: int = 32):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] * 2.0
'''

SHIFT = '''\
def shift(X, Y, block: int = 32):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] + 1.0
'''

REFERENCE = '''\
def reference(x):
    return x * 2.0
'''


@pytest.fixture(scope="module")
def ip():
    from IPython import get_ipython
    from IPython.testing import globalipapp

    shell = globalipapp.start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tile_nb.notebook")
    from tile_nb.notebook.tracebacks import install

    # load_ext does nothing if a module before this one loaded the extension and only uninstalled it
    install(shell)
    shell.run_cell("import torch\nimport tile_nb\nimport tile_nb.language as T\n"
                   "X = torch.arange(64, dtype=torch.float32); Y = torch.zeros(64)\n").raise_error()
    yield shell
    shell.run_line_magic("unload_ext", "tile_nb.notebook")  # so the next module's load_ext installs it again
    # the next module's start_ipython() gets the shell
    if hasattr(globalipapp.start_ipython, "already_called"):
        del globalipapp.start_ipython.already_called


@pytest.fixture
def short_errors(monkeypatch):
    monkeypatch.delenv("TILE_NB_TRACEBACK", raising=False)


def numbered(ip, text: str):
    """Run a cell as a notebook does: it gets an execution number (`In [n]`)."""
    return ip.run_cell(text, store_history=True)


def is_kernel(value) -> bool:
    return type(value).__name__ == "JITFunction"


def test_a_reference_after_the_kernel_stays_a_function(ip):
    result = ip.run_cell("%%tilekernel\n" + SCALE + "\n" + REFERENCE)
    result.raise_error()
    assert result.result.name == "scale"
    assert is_kernel(ip.user_ns["scale"])
    assert isinstance(ip.user_ns["reference"], types.FunctionType)
    ip.run_cell("Y.zero_()\nscale(X, Y)\nok = bool(torch.equal(Y, reference(X)))").raise_error()
    assert ip.user_ns["ok"]
    assert "note:" not in result.result.to_text()  # one kernel: nothing to choose


def test_any_alias_of_the_language_and_decorated_kernels(ip):
    cell = ("import tile_nb.language as TL\n" + SCALE.replace("T.", "TL.").replace("scale", "scale_tl")
            + "\ndef helper(n):\n    with open(n) as f:\n        return f.read()\n")
    result = ip.run_cell("%%tilekernel\n" + cell)
    result.raise_error()
    assert is_kernel(ip.user_ns["scale_tl"]) and isinstance(ip.user_ns["helper"], types.FunctionType)
    decorated = ip.user_ns["scale_tl"]
    result = ip.run_cell("%%tilekernel\n@tile_nb.jit\n" + SCALE + "\n" + REFERENCE)
    result.raise_error()
    assert is_kernel(ip.user_ns["scale"]) and ip.user_ns["scale_tl"] is decorated


def test_two_kernels_without_name_are_both_usable_and_the_view_says_which_it_shows(ip):
    result = ip.run_cell("%%tilekernel --shapes N=64\n" + SCALE + "\n" + SHIFT)
    result.raise_error()
    view = result.result
    assert view.name == "shift"
    assert is_kernel(ip.user_ns["scale"]) and is_kernel(ip.user_ns["shift"])
    ip.run_cell("Y.zero_(); scale(X, Y); doubled = Y.clone()\nshift(X, Y); shifted = Y.clone()").raise_error()
    assert ip.user_ns["doubled"].tolist() == [2.0 * i for i in range(64)]
    assert ip.user_ns["shifted"].tolist() == [i + 1.0 for i in range(64)]
    bundle = view._repr_mimebundle_()
    note = ("note: this cell defines the kernels scale, shift; shown: shift (the last); --name scale shows "
            "another")
    assert note in bundle["text/plain"]
    assert "--name scale shows another" in bundle["text/html"]
    again = ip.run_cell("%%tilekernel --shapes N=64\n" + SCALE + "\n" + SHIFT).result._repr_mimebundle_()
    assert again["text/plain"] == bundle["text/plain"]  # deterministic, as nbval needs


def test_name_picks_a_kernel_and_call_picks_the_called_one(ip):
    result = ip.run_cell(
        "%%tilekernel --name scale --shapes N=64\n" + SCALE + "\n" + SHIFT + "\n" + REFERENCE
    )
    result.raise_error()
    assert result.result.name == "scale" and "note:" not in result.result.to_text()
    result = ip.run_cell('%%tilekernel --call "scale(X, Y)"\n' + SCALE + "\n" + SHIFT)
    result.raise_error()
    assert result.result.name == "scale" and "note:" not in result.result.to_text()


def test_name_of_a_function_that_is_not_a_kernel(ip, capsys, short_errors):
    from tile_nb.notebook.magic import NotAKernelError

    result = numbered(ip, "%%tilekernel --name reference\n" + SCALE + "\n" + REFERENCE)
    assert isinstance(result.error_in_exec, NotAKernelError)
    out = capsys.readouterr().out
    assert out.startswith("NotAKernelError: %%tilekernel --name reference: 'reference' is not a kernel")
    assert "the cell's kernels: scale" in out and "hint: name one of the kernels: --name scale" in out
    # It points at the def line of `reference` (line 10 of the cell, counting the %%tilekernel line).
    assert f"--> In[{result.execution_count}], line 10, col 1" in out
    source = next(line for line in out.splitlines() if "def reference(x):" in line)
    assert source.lstrip().startswith("10 |")
    assert is_kernel(ip.user_ns["scale"])  # the cell ran: its kernels are defined all the same


def test_name_of_a_missing_function_lists_what_the_cell_defines(ip, capsys):
    numbered(ip, "%%tilekernel --name nope\n" + SCALE + "\n" + REFERENCE)
    err = capsys.readouterr().err
    assert (
        "--name nope: the cell defines no function 'nope'; its kernels: scale; other functions: reference"
        in err
    )


def test_a_shapes_value_that_does_not_evaluate_is_a_one_paragraph_usage_error(ip, capsys):
    result = numbered(ip, "%%tilekernel --shapes N=abc\n" + SCALE)
    err = capsys.readouterr().err
    assert "UsageError: --shapes 'N=abc': the value 'abc' could not be evaluated (NameError: " in err
    assert "such as N=1024" in err
    assert "Traceback" not in err and "magic.py" not in err and len(err.strip().splitlines()) == 1
    assert result.error_in_exec is not None


def test_a_cell_without_a_kernel_names_the_functions_it_found(ip, capsys, short_errors):
    from tile_nb.notebook.magic import NotAKernelError

    result = numbered(ip, "%%tilekernel\n" + REFERENCE + "\ndef helper():\n    return 1\n")
    assert isinstance(result.error_in_exec, NotAKernelError)
    out = capsys.readouterr().out
    assert "the cell must define a kernel function; it defines reference, helper, none with" in out
    assert f"In[{result.execution_count}], line 2" in out
    assert isinstance(ip.user_ns["reference"], types.FunctionType)  # not made a kernel
    result = numbered(ip, "%%tilekernel\nx = 1\n")
    assert "it defines no function with `with T.Kernel(...)`" in str(result.error_in_exec)


BAD_BODY = SCALE.replace("        for i in T.Parallel(block):\n", "        while True:\n")


def test_an_error_while_the_magic_runs_names_the_cell(ip, capsys, short_errors):
    for _ in range(3):   # execution numbers well past 1
        numbered(ip, "pass")
    result = numbered(ip, "%%tilekernel\n" + BAD_BODY)
    assert type(result.error_in_exec).__name__ == "UnsupportedSyntaxError"
    count = result.execution_count
    assert count > 3
    out = capsys.readouterr().out
    labels = re.findall(r"In\[(\d+)\]", out)
    assert labels == [str(count)], out
    assert f"--> In[{count}], line 7" in out and "while True:" in out
    # The message text names the same cell ("cell [n]" in IPython's shell, "cell In[n]" under ipykernel).
    assert re.search(rf"--> cell (In)?\[{count}\], line 7", str(result.error_in_exec))


def test_an_error_of_a_later_call_names_the_cell_that_defined_the_kernel(ip, capsys, short_errors):
    defined = numbered(ip, "%%tilekernel\n" + SCALE)
    defined.raise_error()
    numbered(ip, "Z = torch.zeros(64, dtype=torch.float64)")
    call = numbered(ip, "scale(Z, Y)")
    assert type(call.error_in_exec).__name__ == "DtypeMismatchError"
    assert call.execution_count > defined.execution_count + 1
    out = capsys.readouterr().out
    assert f"--> In[{defined.execution_count}], line 4" in out, out
    assert "X: T.Tensor[[N], T.float32]" in out
    assert re.search(rf"--> cell (In)?\[{defined.execution_count}\], line 4", str(call.error_in_exec))


def test_running_cell_number_follows_the_running_cells_result(ip):
    from tile_nb.notebook.magic import running_cell_number

    ip.user_ns["_number"] = lambda: running_cell_number(ip)
    result = numbered(ip, "seen = _number()")
    assert ip.user_ns["seen"] == result.execution_count
    assert running_cell_number(ip) == ip.execution_count  # outside a cell: the next cell's number


@pytest.mark.parametrize("body, expected", [
    ("with T.Kernel(4) as bx:\n    pass", True),
    ("if True:\n    with T.Kernel(4) as bx, open('f'):\n        pass", True),
    ("with tile_nb.language.Kernel(4) as bx:\n    pass", True),
    ("with Unbound.Kernel(4) as bx:\n    pass", True),   # by spelling, when the name is not bound
    ("with open('f') as f:\n    pass", False),
    ("with T.Parallel(4) as i:\n    pass", False),
    # a factory, not a kernel
    ("def inner():\n    with T.Kernel(4) as bx:\n        pass\nreturn inner", False),
])
def test_opens_kernel(body, expected):
    import tile_nb
    import tile_nb.language as T
    from tile_nb.notebook.magic import opens_kernel

    func = ast.parse("def f():\n" + "\n".join("    " + line for line in body.splitlines())).body[0]
    assert opens_kernel(func, {"T": T, "tile_nb": tile_nb}) is expected
