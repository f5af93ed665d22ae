"""benchmarks/vs_tilelang.py's bookkeeping, on files written here (no tilelang, no GPU): which calls a
regression file makes, the order files run in, and the comparison table."""
import importlib.util
import json
import os
import textwrap

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "vs_tilelang.py")
_spec = importlib.util.spec_from_file_location("vs_tilelang", _PATH)
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))


def test_regression_calls_reads_each_function_and_its_shape(tmp_path):
    path = tmp_path / "examples" / "gemm" / "regression_example_gemm.py"
    _write(str(path), """
        import tilelang.testing
        import example_gemm
        import example_splitk


        def regression_example_gemm():
            tilelang.testing.process_func(example_gemm.run_regression_perf)


        def regression_example_splitk():
            tilelang.testing.process_func(example_splitk.run_regression_perf, M=1024, dtype="float16")


        def helper():
            tilelang.testing.process_func(example_gemm.other)
    """)
    assert vs.regression_calls(str(path)) == {
        "regression_example_gemm": ("example_gemm", "run_regression_perf", {}),
        "regression_example_splitk": ("example_splitk", "run_regression_perf",
                                      {"M": 1024, "dtype": "float16"}),
    }


def test_regression_files_run_in_the_order_of_the_globs_each_once(tmp_path):
    for folder in ("gemm", "attention", "cast"):
        _write(str(tmp_path / "examples" / folder / f"regression_{folder}.py"), "")
    _write(str(tmp_path / "examples" / "gemm" / "example_gemm.py"), "")        # not a regression file
    files = vs.regression_files(str(tmp_path), ["examples/cast/*", "examples/gemm/*", "examples/*/*"])
    assert [os.path.basename(f) for f in files] == ["regression_cast.py", "regression_gemm.py",
                                                   "regression_attention.py"]
    assert len(vs.regression_files(str(tmp_path), [])) == 3


def test_compare_gives_ratios_only_where_both_sides_timed(tmp_path):
    def side(name, rows, sticks):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(dict(device="H200", date="2026-12-06", yardsticks=sticks, rows=rows)))
        return str(path)

    tl = side("tl", [{"file": "a/regression_a.py", "cases": {"regression_gemm": {"ms": 0.5},
                                                             "regression_attn": {"ms": 2.0}}}],
              {"torch matmul": 0.4})
    failed = {"error": "LoweringError: x | y"}
    nb = side("nb", [{"file": "a/regression_a.py", "cases": {"regression_gemm": {"ms": 0.25},
                                                             "regression_attn": failed}},
                     {"file": "b/regression_b.py", "error": "no result in 60 s"}],
              {"torch matmul": 0.41})
    table = vs.compare(tl, nb)
    assert "| gemm | 0.5000 | 0.2500 | **2.00** |" in table
    assert "| attn | 2.0000 | error: LoweringError: x / y |  |" in table      # no ratio, '|' escaped
    assert "| regression_b.py | error: not run | error: no result in 60 s | |" in table
    assert "| torch matmul | 0.4000 | 0.4100 |" in table


def test_cpu_smoke_needs_tile_nb(monkeypatch):
    monkeypatch.setattr("sys.argv", ["vs_tilelang.py", "x", "--impl", "tilelang", "--cpu"])
    with pytest.raises(SystemExit):
        vs.main()


def test_an_example_that_parses_its_command_line_sees_no_options(tmp_path, monkeypatch):
    """convolution's run_regression_perf parses sys.argv: it must see none (as under `python
    regression_x.py`), not the runner's own `--child ...` (both sides failed with SystemExit: 2 on
    2026-12-06)."""
    import sys
    import types

    tilelang, profiler = types.ModuleType("tilelang"), types.ModuleType("tilelang.profiler")
    tilelang.profiler = profiler
    monkeypatch.setitem(sys.modules, "tilelang", tilelang)
    monkeypatch.setitem(sys.modules, "tilelang.profiler", profiler)
    monkeypatch.setattr(vs, "_shared_timer", lambda: None)
    monkeypatch.setattr(sys, "argv", ["vs_tilelang.py", "--child", "somewhere"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "examples" / "conv"
    _write(str(folder / "example_cli_conv.py"), """
        import argparse


        def run_regression_perf(argv=None):
            parser = argparse.ArgumentParser()
            parser.add_argument("--n", type=int, default=3)
            return parser.parse_args(argv).n / 2
    """)
    _write(str(folder / "regression_example_cli_conv.py"), """
        import tilelang.testing
        import example_cli_conv


        def regression_example_cli_conv():
            tilelang.testing.process_func(example_cli_conv.run_regression_perf)
    """)
    cases = vs.run_file(str(folder / "regression_example_cli_conv.py"))["cases"]
    assert cases["regression_example_cli_conv"]["ms"] == 1.5, cases
