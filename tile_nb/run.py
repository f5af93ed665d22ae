"""Run a tilelang script (or tilelang's pytest tests) on tile_nb: `import tilelang` resolves to tile_nb's
stand-in (tile_nb.tilelang) for this run only.

    python -m tile_nb.run script.py [args...]          # the script as __main__, with its own arguments
    python -m tile_nb.run --cpu script.py              # torch's "cuda" device requests become "cpu"
                                                       # (and Triton kernels run in TRITON_INTERPRET mode)
    python -m tile_nb.run --call main --args '[[], {"M": 256}]' example.py   # import it, call main(M=256)
    python -m tile_nb.run --pytest -- path/test_x.py::test_y -q              # pytest with the same mapping
    python -m tile_nb.run --cpu notebook.ipynb         # a notebook's code cells in order, in one namespace

If a real tilelang is importable, tile_nb says where and refuses (exit status 3) unless `--shadow` is given.
`--result-json PATH` writes the outcome as JSON (what the conformance runner reads): pass / fail (an
AssertionError: the script's own check) / error, the exception's first line, the tilelang API
tile_nb lacks if that was the cause, and the largest absolute error any
`torch.testing.assert_close` / `torch.allclose` check saw.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import sys
import traceback

from .tilelang.checks import errors as _errors
from .tilelang.checks import failed as _failed
from .tilelang.checks import record_error

__all__ = ["main", "record_error"]


def _watch_checks() -> None:
    """Record the absolute error of every torch.testing.assert_close / torch.allclose the script runs."""
    import functools

    import torch
    import torch.testing

    original = torch.testing.assert_close

    @functools.wraps(original)
    def assert_close(actual, expected, *args, **kwargs):
        record_error(actual, expected)
        try:
            return original(actual, expected, *args, **kwargs)
        except AssertionError as e:
            _failed.append("; ".join(line.strip() for line in str(e).splitlines() if line.strip())[:300])
            raise

    torch.testing.assert_close = assert_close
    allclose = torch.allclose

    @functools.wraps(allclose)
    def watched_allclose(input, other, *args, **kwargs):  # noqa: A002 - torch's names
        record_error(input, other)
        return allclose(input, other, *args, **kwargs)

    torch.allclose = watched_allclose


class _AfterImport:
    """A meta-path finder that lets `name` import as usual and then calls `hook()` once (so a run whose script
    never imports torch does not pay for importing it)."""

    def __init__(self, name: str, hook):
        self.name = name
        self.hook = hook

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, hook = spec.loader, self.hook

        def exec_module(module):
            loader.exec_module(module)
            hook()

        spec.loader = _HookedLoader(loader, exec_module)
        return spec


class _HookedLoader:
    def __init__(self, loader, exec_module):
        self._loader = loader
        self.exec_module = exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _when_imported(name: str, hook) -> None:
    if name in sys.modules:
        hook()
    else:
        sys.meta_path.insert(0, _AfterImport(name, hook))


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def outcome_of(exc: BaseException | None, text: str = "") -> dict:
    """pass / fail / error for an exception (None: passed), with its first line
    and the missing tilelang API."""
    from .tilelang._support import missing_feature

    if exc is None:
        return {"status": "pass", "error": "", "missing": None}
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return {"status": "pass", "error": "", "missing": None}
    kind = type(exc).__name__
    message = _first_line(str(exc)) if not isinstance(exc, SystemExit) else f"exit status {exc.code}"
    chain, seen = [], exc
    while seen is not None and len(chain) < 8:
        chain.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    missing = missing_feature("\n".join(chain)) or missing_feature(text)
    status = "fail" if isinstance(exc, AssertionError) and missing is None else "error"
    return {"status": status, "error": f"{kind}: {message}" if message else kind, "missing": missing}


class _PytestRecorder:
    """A pytest plugin: each test's outcome and max error."""

    def __init__(self):
        self.tests: dict[str, dict] = {}

    def pytest_runtest_setup(self, item):
        _errors.clear()

    def pytest_collectreport(self, report):
        from .tilelang._support import missing_feature

        if report.failed:
            text = str(report.longrepr)
            lines = [
                line[2:].strip()
                for line in text.splitlines()
                if line.startswith("E ") and re.match(r"[\w.]+(Error|Exception|API)\b", line[2:].strip())
            ]
            self.tests[report.nodeid or "collect"] = {"status": "error", "missing": missing_feature(text),
                                                      "error": "collection: " + (lines[-1] if lines
                                                                                 else _first_line(text)),
                                                      "max_error": None}

    def pytest_runtest_logreport(self, report):
        from .tilelang._support import missing_feature

        entry = self.tests.setdefault(report.nodeid, {"status": "pass", "error": "", "missing": None})
        if report.skipped and entry["status"] == "pass":
            entry["status"] = "skip"
            longrepr = report.longrepr
            entry["error"] = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
        elif report.failed and entry["status"] in ("pass", "skip"):
            crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
            text = str(report.longrepr)
            message = crash.message if crash is not None else _first_line(text)
            missing = missing_feature(text)
            failed = report.when == "call" and message.startswith("AssertionError") and missing is None
            entry.update(status="fail" if failed else "error", error=_first_line(message), missing=missing)
        if report.when == "teardown":
            entry["max_error"] = max(_errors) if _errors else None


def _install(args) -> int | None:
    from .tilelang import mapping

    try:
        mapping.install(shadow=args.shadow)
    except mapping.RealTilelangError as e:
        print(f"tile_nb.run: {e}\n  hint: {e.hint}", file=sys.stderr)
        return 3
    if args.cpu:
        from .tilelang import cpu_device

        _when_imported("torch", cpu_device.install)
        # a script's Triton kernels (the references many examples check against) run on the CPU tensors
        # too, through Triton's own interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    _when_imported("torch", _watch_checks)
    return None


def _write(path: str | None, result: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def notebook_cells(path: str) -> list[tuple[int, str, bool]]:
    """The code cells of a notebook: (cell number among code cells, source, whether its stored outputs hold an
    error). Line magics and shell escapes become comments; a cell magic (`%%...`)
    makes the whole cell a comment."""
    with open(path, encoding="utf-8") as f:
        notebook = json.load(f)
    cells = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if source.lstrip().startswith("%%"):
            source = "\n".join("# " + line for line in source.splitlines())
        else:
            lines = []
            for line in source.splitlines():
                body = line.lstrip()
                if body.startswith(("%", "!")):
                    line = line[: len(line) - len(body)] + "pass  # " + body
                lines.append(line)
            source = "\n".join(lines)
        expected = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        cells.append((len(cells) + 1, source, expected))
    return cells


def _run_notebook(path: str) -> None:
    """Run a notebook's code cells in order in one namespace, as a kernel would. A cell whose
    stored outputs show an error may raise again (the notebook demonstrates that error); any
    other exception stops the run."""
    from . import run_source

    namespace = {"__name__": "__main__"}
    name = os.path.basename(path)
    for number, source, expected in notebook_cells(path):
        try:
            run_source(source, namespace, filename=f"{path} [code cell {number}]")
        except Exception as e:
            if expected:
                continue
            if hasattr(e, "add_note"):
                e.add_note(f"(in code cell {number} of {name})")
            raise


# A failed check that prints instead of raising: tilelang's examples print their similarity checks'
# failures in red (`print_red_warning(f"{name} Error: {diff}")` with raise_assert=False / assert_=False:
# gdn, flash decoding)
_PRINTED_FAILURE = re.compile(r"\x1b\[(?:31|91)m([^\x1b]*\bError\b[^\x1b]*)")


class _PrintedFailures:
    """Standard output, passed through, with the first failure a check printed instead of raising."""

    def __init__(self, stream):
        self.stream, self.first = stream, None

    def write(self, text):
        if self.first is None and (found := _PRINTED_FAILURE.search(text)):
            self.first = found.group(1).strip()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _run_script(args) -> int:
    script = os.path.abspath(args.script)
    sys.argv = [script, *args.script_args]
    sys.path.insert(0, os.path.dirname(script))
    exc = None
    text = ""
    printed = sys.stdout = _PrintedFailures(sys.stdout)
    try:
        if script.endswith(".ipynb"):
            _run_notebook(script)
        elif args.call:
            name = os.path.splitext(os.path.basename(script))[0]
            namespace = runpy.run_path(script, run_name=name)
            call_args, call_kwargs = json.loads(args.args) if args.args else ([], {})
            namespace[args.call](*call_args, **call_kwargs)
        else:
            runpy.run_path(script, run_name="__main__")
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the outcome of someone else's script
        exc = e
        text = traceback.format_exc()
    except KeyboardInterrupt:
        raise
    finally:
        sys.stdout = printed.stream
    if exc is None and printed.first is not None:  # the script ran to its end, but a check said it failed
        exc = AssertionError(f"a check printed a failure and did not raise: {printed.first}")
        text = str(exc)
    elif exc is None and _failed:  # ... or caught the failure of its assert_close and went on
        exc = AssertionError(f"an assert_close failed and the script caught it and went on: {_failed[0]}")
        text = str(exc)
    result = outcome_of(exc, text)
    result["max_error"] = max(_errors) if _errors else None
    result["traceback"] = text[-4000:]
    _write(args.result_json, result)
    if exc is not None and result["status"] != "pass":
        if isinstance(exc, SystemExit):
            return exc.code if isinstance(exc.code, int) else 1
        sys.stderr.write(text)
        return 1
    return 0


def _run_pytest(args) -> int:
    import pytest

    recorder = _PytestRecorder()
    rc = pytest.main(list(args.script_args if args.script is None else [args.script, *args.script_args]),
                     plugins=[recorder])
    _write(args.result_json, {"exit_status": int(rc), "tests": recorder.tests})
    return int(rc)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tile_nb.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shadow", action="store_true",
                        help="stand in for tilelang even when a real tilelang is importable (said on stderr)")
    parser.add_argument("--cpu", action="store_true",
                        help="map torch's 'cuda' device requests to 'cpu' (kernels run on the interpreter)")
    parser.add_argument("--call", help="import the script (not as __main__) and call this function")
    parser.add_argument("--args", help="with --call: JSON [positional list, keyword dict]")
    parser.add_argument(
        "--pytest", action="store_true", help="run pytest with these arguments instead of a script"
    )
    parser.add_argument("--result-json", help="write the outcome as JSON to this path")
    parser.add_argument(
        "script", nargs="?", help="the tilelang script (with --pytest: pytest's first argument)"
    )
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.script == "--":
        args.script, args.script_args = (
            (args.script_args[0] if args.script_args else None),
            args.script_args[1:],
        )
    if args.script is None and not args.pytest:
        _parser().error("a script to run is needed")
    refused = _install(args)
    if refused is not None:
        return refused
    return _run_pytest(args) if args.pytest else _run_script(args)


if __name__ == "__main__":
    sys.exit(main())
