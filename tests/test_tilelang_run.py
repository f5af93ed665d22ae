"""`import tilelang` on tile_nb: the stand-in module, `python -m tile_nb.run`,
the shadowing refusal, the magic.

The tilelang-spelled scripts here are this project's own, written for these tests."""
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import tile_nb
import tile_nb.tilelang as stand_in
from tile_nb.tilelang import UnsupportedTilelangAPI, mapping
from tile_nb.tilelang._support import missing_feature

SCRIPT = '''
import sys
import torch
import tilelang
import tilelang.language as T


@tilelang.jit
def scale(A, factor: float = 2.0, block: int = 32):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty([N], T.float32)
    with T.Kernel(tilelang.cdiv(N, block), threads=32) as bx:
        for i in T.Parallel(block):
            B[bx * block + i] = A[bx * block + i] * factor
    return B


def main(n=64):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    a = torch.randn(n, device="cuda", generator=gen)   # the --cpu run makes this a CPU tensor
    assert a.device.type == "cpu" and torch.cuda.is_available()
    b = scale(a, factor=0.5)
    torch.testing.assert_close(b, a * 0.5)
    kernel = scale.compile(a, factor=0.5)      # tilelang's spelling: bind compile-time values, call later
    torch.testing.assert_close(kernel(a), a * 0.5)
    profiler = scale.compile(N=n, factor=0.5).get_profiler()
    profiler.assert_allclose(lambda x: x * 0.5, atol=0, rtol=0, max_mismatched_ratio=0)
    assert profiler.do_bench() >= 0
    print("scaled", sys.argv[1:], tilelang.__name__, T.float is T.float32)


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def clean_mapping():
    yield
    mapping.uninstall()


def _run(args, cwd, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "tile_nb.run", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_script_runs_on_the_interpreter(tmp_path):
    script = tmp_path / "scale.py"
    script.write_text(SCRIPT)
    out = _run(["--cpu", "--result-json", str(tmp_path / "r.json"), str(script), "--flag"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "scaled ['--flag'] tile_nb.tilelang True" in out.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "pass" and result["max_error"] == 0.0


def test_missing_api_is_named_and_failed_checks_are_failures(tmp_path):
    (tmp_path / "swz.py").write_text("import tilelang.language as T\nT.cummax\n")
    (tmp_path / "bad.py").write_text("import tilelang\nassert tilelang.cdiv(7, 2) == 3, 'cdiv'\n")
    out = _run(["--result-json", str(tmp_path / "r.json"), "swz.py"], tmp_path)
    assert out.returncode == 1 and "tile_nb does not support tilelang.language.cummax yet" in out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert (result["status"], result["missing"]) == ("error", "tilelang.language.cummax")
    out = _run(["--result-json", str(tmp_path / "r.json"), "bad.py"], tmp_path)
    result = json.loads((tmp_path / "r.json").read_text())
    assert out.returncode == 1 and (result["status"], result["error"]) == ("fail", "AssertionError: cdiv")


def test_a_check_that_prints_its_failure_fails_the_run(tmp_path):
    """tilelang's gdn and flash-decoding examples check with a similarity helper that, with
    raise_assert=False, prints a red "<name> Error: <diff>" line and goes on: such a run is a failure, not a
    pass."""
    helper = 'def warn(m):\n    print(f"\\033[31mWARNING: {m}\\033[0m")\n'
    (tmp_path / "quiet.py").write_text(helper + 'warn("dk Error: 0.31")\nprint("done")\n')
    fine = 'warn("o all zero")\nprint("Error: plain text is not a check")\n'
    (tmp_path / "fine.py").write_text(helper + fine)
    out = _run(["--result-json", str(tmp_path / "r.json"), "quiet.py"], tmp_path)
    result = json.loads((tmp_path / "r.json").read_text())
    assert out.returncode == 1 and "done" in out.stdout
    assert (result["status"], result["error"]) == (
        "fail", "AssertionError: a check printed a failure and did not raise: WARNING: dk Error: 0.31")
    out = _run(["--result-json", str(tmp_path / "r.json"), "fine.py"], tmp_path)
    assert out.returncode == 0 and json.loads((tmp_path / "r.json").read_text())["status"] == "pass"


def test_an_assert_close_the_script_catches_still_fails_the_run(tmp_path):
    """tilelang's gdn examples wrap their assert_close in try/except and print "failed" with the message: the
    run fails with that message; an assert_close that holds, caught or not, leaves it passing."""
    check = ("import torch\ntry:\n"
             "    torch.testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, {}]))\n"
             "    print('passed')\nexcept Exception as e:\n    print('failed', e)\nprint('done')\n")
    (tmp_path / "caught.py").write_text(check.format("2.5"))
    (tmp_path / "holds.py").write_text(check.format("2.0"))
    out = _run(["--result-json", str(tmp_path / "r.json"), "caught.py"], tmp_path)
    result = json.loads((tmp_path / "r.json").read_text())
    assert out.returncode == 1 and "done" in out.stdout and result["status"] == "fail"
    assert result["error"].startswith(
        "AssertionError: an assert_close failed and the script caught it and went on: "
        "Tensor-likes are not close!; Mismatched elements: 1 / 2 (50.0%)")
    assert result["max_error"] == 0.5
    out = _run(["--result-json", str(tmp_path / "r.json"), "holds.py"], tmp_path)
    assert out.returncode == 0 and json.loads((tmp_path / "r.json").read_text())["status"] == "pass"


def test_refuses_to_shadow_a_real_tilelang(tmp_path):
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text("REAL = True\n")
    (tmp_path / "s.py").write_text("import tilelang\nprint(tilelang.__name__)\n")
    out = _run(["s.py"], tmp_path)          # the script's folder holds a real tilelang
    assert out.returncode == 3 and out.stdout == ""
    assert "a real tilelang is importable here" in out.stderr and "--shadow" in out.stderr
    out = _run(["--shadow", "s.py"], tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "tile_nb.tilelang"
    assert "hiding the real tilelang" in out.stderr


def test_mapping_in_process(tmp_path, monkeypatch, clean_mapping):
    pkg = tmp_path / "tilelang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(mapping.RealTilelangError, match="tile_nb will not hide it silently"):
        mapping.install()
    assert not mapping.installed()
    mapping.install(shadow=True)
    import tilelang
    import tilelang.language as T

    assert tilelang is stand_in and T.Kernel is __import__("tile_nb.language").language.Kernel
    mapping.uninstall()
    sys.modules.pop("tilelang", None)
    import tilelang as real

    assert getattr(real, "REAL", False)
    sys.modules.pop("tilelang", None)


def test_unsupported_names_say_which_api(clean_mapping):
    with pytest.raises(UnsupportedTilelangAPI, match=r"does not support tilelang\.language\.cummax yet"):
        stand_in.language.cummax
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.autodd"):
        stand_in.autodd
    assert not hasattr(stand_in.language, "__wrapped__")      # dunder probes stay AttributeErrors
    mapping.install()
    namespace = {}
    # A name from a stub module is an ImportError (the error is an AttributeError, which pickle's module
    # search needs), and the conformance runner still reads which API it was.
    with pytest.raises(
        ImportError,
        match=r"cannot import name 'TensorCorePolicy' from '(tile_nb\.)?tilelang\.carver\.roller\.policy'",
    ) as info:
        exec("from tilelang.carver.roller.policy import TensorCorePolicy", namespace)
    assert missing_feature(str(info.value)) == "tilelang.carver.roller.policy.TensorCorePolicy"
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.intrinsics yet \(imported with \*\)"):
        exec("from tilelang.intrinsics import *", namespace)
    # A @T.prim_func factory under tilelang.jit(out_idx=...) is tile_nb's own now: the call gives the kernel.
    tile_nb.run_source(textwrap.dedent("""
        import tilelang
        import tilelang.language as T

        @tilelang.jit(out_idx=[-1])
        def factory(M):
            @T.prim_func
            def main(A: T.Tensor((M,), T.float32), B: T.Tensor((M,), T.float32)):
                with T.Kernel(1, threads=32) as _:
                    for i in T.serial(M):
                        B[i] = A[i] * 2.0
            return main
    """), namespace)
    kernel = namespace["factory"](5)
    a = torch.randn(5)
    torch.testing.assert_close(kernel(a), 2 * a)
    assert "__global__" in kernel.get_kernel_source()
    with pytest.raises(UnsupportedTilelangAPI, match=r"pass_configs=\{'tl.some_new_key'"):
        stand_in.jit(pass_configs={"tl.some_new_key": True})
    assert stand_in.cdiv(7, 2) == 4 and stand_in.next_power_of_2(33) == 64
    build, lowering, hints = stand_in._pass_configs(
        {stand_in.PassConfigKey.TL_ENABLE_FAST_MATH: True, "tl.disable_tma_lower": True}
    )
    assert (build, lowering) == ({"fast_math": True}, {"approx_math": True})
    assert hints == ["pass_configs tl.disable_tma_lower=True: recorded, not applied (tile_nb decides where "
                     "copies use TMA itself (LoweringOptions.tma))"]


def test_line_magic(clean_mapping):
    from tile_nb.notebook.tilelang_magic import tilelang_on_tile_nb

    assert "now resolves to tile_nb's stand-in" in tilelang_on_tile_nb("")
    import tilelang

    assert tilelang is stand_in
    assert "back to normal" in tilelang_on_tile_nb("off")
    assert "tilelang" not in sys.modules and not mapping.installed()
    with pytest.raises(ValueError, match="usage"):
        tilelang_on_tile_nb("--nope")


def test_autotune_runs_a_given_configuration():
    """A call giving any tuned parameter runs what it gives, without a search (tilelang's rule); the search
    itself is tested in tests/test_tilelang_host_api.py."""
    tuned = stand_in.autotune(configs=[{"block": 32}, {"block": 64, "stages": 2}])(lambda x, **kw: (x, kw))
    assert tuned(1, block=32, stages=3) == (1, {"block": 32, "stages": 3})
    assert tuned(1, stages=3) == (1, {"stages": 3})


def test_magic_in_an_ipython_shell(clean_mapping, capsys):
    from IPython.testing import globalipapp

    # None once another test module started it
    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "tile_nb.notebook")
    try:
        shell.run_line_magic("tilelang_on_tile_nb", "")
        result = shell.run_cell("import tilelang\nimport tilelang.language as T\nname = tilelang.__name__\n"
                                "n = tilelang.cdiv(10, 4)")
        result.raise_error()
        assert (shell.user_ns["name"], shell.user_ns["n"]) == ("tile_nb.tilelang", 3)
        shell.run_line_magic("tilelang_on_tile_nb", "off")
        assert "now resolves to tile_nb's stand-in" in capsys.readouterr().out
    finally:
        from tile_nb.notebook.tracebacks import uninstall

        uninstall(shell)


def test_pickle_module_search_passes_over_the_stand_in(clean_mapping):
    """pickle looks for a name in every module of sys.modules (torch.compile's inductor pickles graphs so):
    the stand-in's modules, stubs included, answer AttributeError, not the unsupported-API error."""
    import pickle

    mapping.install()
    exec("import tilelang.carver.arch\nimport tilelang.language", {})

    def orphan():
        pass

    orphan.__module__ = None
    assert pickle.whichmodule(orphan, "a_name_nobody_has") == "__main__"
    assert not hasattr(stand_in.language, "a_name_nobody_has")
