"""The conformance runner on a tiny fake tilelang checkout made here (this
project's own scripts, not tilelang's):
a passing, a failing, an erroring (missing API) and a timing-out example, an
excluded sm_100 one, and two tests."""
import json
import os
import textwrap
import time

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb import conformance
from tile_nb.interp.errors import OutOfBoundsError


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _fake_checkout(root):
    _write(root, "examples/ok/example_ok.py", """
        import tilelang

        def main(n=10):
            import torch
            assert tilelang.cdiv(n, 4) == 2, "called with the test file's size"
            torch.testing.assert_close(torch.tensor([1.0]), torch.tensor([1.0005]), atol=1e-2, rtol=0)

        if __name__ == "__main__":
            main(100)   # not this: the test file's call wins
    """)
    _write(root, "examples/ok/test_example_ok.py", """
        import example_ok

        def test_ok():
            example_ok.main(n=8)
    """)
    _write(root, "examples/bad/example_bad.py", """
        import tilelang
        assert tilelang.next_power_of_2(5) == 4, "reference check failed"
    """)
    _write(root, "examples/swz/example_swizzle.py", """
        import tilelang.language as T
        T.cummax
    """)
    _write(root, "examples/slow/example_slow.py", """
        import time
        import tilelang
        time.sleep(60)
    """)
    _write(root, "examples/bw/example_tmem.py", """
        import tilelang.language as T
        T.alloc_tmem([128, 128], T.float32)
    """)
    cells = [
        {"cell_type": "markdown", "source": ["# a demo"]},
        {
            "cell_type": "code",
            "source": ["%matplotlib inline\n", "import tilelang\n", "n = tilelang.cdiv(9, 2)"],
            "outputs": [],
        },
        {
            "cell_type": "code",
            "source": "raise ValueError('shown on purpose')",
            "outputs": [{"output_type": "error", "ename": "ValueError"}],
        },
        {"cell_type": "code", "source": "assert n == 5", "outputs": []},
    ]
    _write(root, "examples/demo/demo.ipynb", json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5}))
    _write(root, "testing/python/language/test_tilelang_language_eager_jit.py", """
        import tilelang

        def test_passes():
            assert tilelang.cdiv(3, 2) == 2

        def test_uses_barrier():
            import tilelang.language as T
            T.alloc_cluster_barrier
    """)


def test_classify():
    assert conformance.classify("import tilelang\nT.alloc_barrier(1)\nT.tma_copy(a, b)")[0] == "low-level"
    assert conformance.classify("import tilelang\nT.tcgen05_gemm(a)")[0] == "sm_100"
    assert conformance.classify("import tilelang\n", "examples/amd/example_x.py")[0] == "AMD"
    assert conformance.classify("import tilelang\nT.copy(a, b)\nT.gemm(a, b, c)") == ("tile-level", [])
    assert conformance.classify("import triton\n")[0] == "no tilelang"
    emitter = "from tilelang.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter\n"
    assert conformance.classify("import tilelang\n" + emitter)[0] == "low-level"
    hand_mma = "import tilelang\nmma_emitter.ldmatrix_a(A_local, A_shared, ki)"
    assert conformance.classify(hand_mma)[0] == "low-level"
    assert conformance.classify("import tilelang\n@T.prim_func\ndef k(): T.ws(0)")[0] == "low-level"
    turned_off = 'import tilelang\nkernel = tl.compile(f, pass_configs={"tl.disable_warp_specialized": True})'
    assert conformance.classify(turned_off) == ("tile-level", [])


def test_runner_on_a_fake_checkout(tmp_path, capsys):
    root = tmp_path / "tilelang"
    _fake_checkout(root)
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    rc = conformance.main(
        [
            str(root),
            "--backend",
            "interp",
            "--timeout",
            "10",
            "--jobs",
            "7",
            "--commit",
            "abc123",
            "--json",
            str(out_json),
            "--markdown",
            str(out_md),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    cases = {c["name"]: c for c in json.loads(out_json.read_text())["cases"]}
    ok = cases["examples/ok/example_ok.py"]
    assert (ok["status"], ok["call"]) == ("pass", [[], {"n": 8}]) and abs(ok["max_error"] - 5e-4) < 1e-6, ok
    bad = cases["examples/bad/example_bad.py"]
    assert (bad["status"], bad["error"]) == ("fail", "AssertionError: reference check failed")
    swz = cases["examples/swz/example_swizzle.py"]
    assert (swz["status"], swz["missing"]) == ("error", "tilelang.language.cummax")
    assert cases["examples/slow/example_slow.py"]["status"] == "timeout"
    tmem = cases["examples/bw/example_tmem.py"]
    assert (tmem["klass"], tmem["status"]) == ("sm_100", "excluded")
    assert cases["examples/demo/demo.ipynb"]["status"] == "pass"
    tests = "testing/python/language/test_tilelang_language_eager_jit.py::"
    assert cases[tests + "test_passes"]["status"] == "pass"
    barrier = cases[tests + "test_uses_barrier"]
    assert (barrier["status"], barrier["missing"]) == ("error", "tilelang.language.alloc_cluster_barrier")
    assert "| examples/bad/example_bad.py | tile-level | fail | AssertionError: reference check failed |  |" \
        in printed
    assert "| examples/swz/example_swizzle.py | tile-level | error | missing: tilelang.language.cummax |" \
        in printed
    assert "| tile-level | 4 | 1 | 1 | 1 | 1 | 0 | 0 |" in printed
    assert "| sm_100 | 1 | 0 | 0 | 0 | 0 | 0 | 1 |" in printed
    assert "| test | 2 | 1 | 0 | 1 | 0 | 0 | 0 |" in printed
    assert "| notebook | 1 | 1 | 0 | 0 | 0 | 0 | 0 |" in printed
    doc = out_md.read_text()
    assert (
        "tilelang commit: `abc123`" in doc and "Examples: 1 of 4 pass" in doc and "Notebooks: 1 of 1" in doc
    )
    assert "| `tilelang.language.alloc_cluster_barrier` | 1 |" in doc
    assert "| `tilelang.language.cummax` | 1 |" in doc


def test_tile_level_share_names_missing_reference_packages():
    def case(name, status, error="", klass="tile-level"):
        c = conformance.Case(f"examples/{name}.py", "example", f"/x/{name}.py", klass)
        c.status, c.error = status, error
        return c

    ran = [case("a", "pass"), case("b", "pass"), case("c", "fail", "AssertionError: off"),
           case("d", "error", "ModuleNotFoundError: No module named 'flash_attn'"),
           case("e", "error", "ModuleNotFoundError: No module named 'flash_attn.ops'"),
           case("f", "pass", klass="low-level")]
    line = conformance._tile_level_line(ran)
    assert "2 of 5 pass (40%)" in line
    assert "2 of the others stop importing a package their reference needs" in line
    assert "`flash_attn` (2)" in line


def test_budget_cuts_the_run_short_and_still_writes_the_results(tmp_path):
    """A device call has a wall limit: with --budget, the slow example is stopped at the budget (not at its
    own --timeout), the cases behind it are reported 'not run', and the JSON is written."""
    root = tmp_path / "tilelang"
    _fake_checkout(root)
    out_json = tmp_path / "r.json"
    rc = conformance.main([str(root), "--backend", "interp", "--timeout", "60", "--jobs", "1",
                           "--budget", "8", "--cases", "examples/slow/*", "examples/swz/*",
                           "--commit", "abc", "--json", str(out_json)])
    assert rc == 0
    cases = {c["name"]: c for c in json.loads(out_json.read_text())["cases"]}
    slow = cases["examples/slow/example_slow.py"]       # sorted first, so it runs first (one job)
    assert slow["status"] == "timeout" and slow["seconds"] <= 8.5, slow   # cut at the budget, not at 60 s
    left = cases["examples/swz/example_swizzle.py"]
    assert left["status"] == "not run" and "--budget of 8 s was spent" in left["error"], left


def test_cases_asked_to_run_alone_run_after_the_others_one_at_a_time(monkeypatch):
    """`--alone GLOB`: an example that needs most of the GPU's memory runs with nothing beside it."""
    import threading

    lock, running, log = threading.Lock(), [0], []

    def fake_run_case(case, backend, limit, shadow):
        with lock:
            running[0] += 1
            log.append(("start", case.name, running[0]))
        time.sleep(0.05)
        with lock:
            running[0] -= 1
            log.append(("end", case.name, running[0]))
        case.status = "pass"
        return case

    monkeypatch.setattr(conformance, "run_case", fake_run_case)
    names = ["examples/a/example_a.py", "examples/big/example_big.py", "examples/b/example_b.py",
             "examples/c/example_c.py"]
    cases = [conformance.Case(name=n, kind="example", path=n, klass="tile-level") for n in names]
    conformance.run_all(cases, jobs=3, alone=("examples/big/*",))
    starts = [(name, n) for what, name, n in log if what == "start"]
    assert starts[-1] == ("examples/big/example_big.py", 1), log   # last, and alone when it started
    big_start = log.index(("start", "examples/big/example_big.py", 1))
    ends = [i for i, (what, name, _) in enumerate(log) if what == "end" and "big" not in name]
    assert len(ends) == 3 and max(ends) < big_start, log   # every other case had ended
    assert max(n for _, _, n in log) > 1   # the others did share the pool
    assert all(c.status == "pass" for c in cases)


@tile_nb.jit
def _fill_past(X):
    """Writes past a [1] fragment: the lowering refuses it, in the NotLowerableWarning of the first
    interpreted call, before the interpreter stops at the same write."""
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=128):
        s = T.alloc_fragment([1], T.float32)
        for i in T.Parallel(4):
            s[i] = X[0]


def test_the_interp_run_reads_the_gpu_lowerings_refusal_from_the_warning(capsys):
    """A NotLowerableWarning printed the way Python prints warnings to stderr becomes the case's
    gpu_lowering; the markdown lists passing examples the lowering refuses."""
    import io
    import warnings

    stream = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(OutOfBoundsError):
            _fill_past(torch.randn(8))
    for w in caught:
        stream.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    refusal = conformance.lowering_refusal("some output\n" + stream.getvalue())
    assert refusal is not None and refusal.startswith("_fill_past(): s[i] is out of bounds"), refusal
    assert conformance.lowering_refusal("no warnings here\n") is None
    ok = conformance.Case(name="examples/a/example_a.py", kind="example", path="a.py", status="pass")
    refused = conformance.Case(name="examples/b/example_b.py", kind="example", path="b.py", status="pass",
                               gpu_lowering=refusal)
    doc = conformance.markdown([ok, refused], commit="abc", backend="interp", command="x", timeout=1,
                               machine_text="m")
    assert "takes every kernel of 1; it refuses a kernel of 1 (the first refusal)" in doc
    assert "| examples/b/example_b.py | _fill_past(): s[i] is out of bounds: index 0 (i) reaches 3" in doc
    none_refused = conformance.markdown([ok], commit="abc", backend="interp", command="x", timeout=1,
                                        machine_text="m")
    assert "takes every kernel of 1.\n" in none_refused and "the lowering's refusal" not in none_refused


def test_a_relative_pythonpath_reaches_the_cases(monkeypatch, tmp_path):
    """Each case runs in its example's directory: a relative PYTHONPATH entry (`.gl/pydeps`, as the results
    page's command gives it) is made absolute, or the references' packages would not import."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "deps" + os.pathsep + str(tmp_path / "abs"))
    entries = conformance._child_env()["PYTHONPATH"].split(os.pathsep)
    assert entries[1:] == [str(tmp_path / "deps"), str(tmp_path / "abs")]


def test_deps_put_a_folder_first_on_the_path_of_the_cases_it_names(tmp_path, capsys, monkeypatch):
    """`--deps GLOB=DIR`: the matching cases import a reference package from DIR, ahead of the one every case
    sees (tilelang's gdn examples need flash-linear-attention's API of June 2025); the others keep theirs."""
    root = tmp_path / "checkout"
    for name in ("old", "new"):
        _write(root, f"examples/{name}/example_{name}.py", f"""
            import tilelang
            import refpkg
            assert refpkg.VERSION == {name!r}, f"reference package {{refpkg.VERSION}}"
        """)
    _write(tmp_path, "everyone/refpkg.py", "VERSION = 'new'\n")
    _write(tmp_path, "june/refpkg.py", "VERSION = 'old'\n")
    out = tmp_path / "r.json"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "everyone"))
    assert conformance.main([str(root), "--backend", "interp", "--json", str(out),
                             "--deps", f"examples/old/*={tmp_path / 'june'}"]) == 0
    cases = {c["name"]: c for c in json.loads(out.read_text())["cases"]}
    assert cases["examples/old/example_old.py"]["status"] == "pass"
    assert cases["examples/old/example_old.py"]["deps"] == str(tmp_path / "june")
    assert cases["examples/new/example_new.py"]["status"] == "pass"
    assert cases["examples/new/example_new.py"]["deps"] is None
    with pytest.raises(SystemExit):
        conformance.main([str(root), "--deps", "examples/old/*"])
    assert "expected GLOB=DIR" in capsys.readouterr().err


def test_the_commit_is_the_checkouts_own_not_an_enclosing_repositorys(tmp_path):
    """A tilelang copy without .git inside another repository (an ignored folder of this one) has no commit of
    its own: the runner must not record the enclosing repository's (it did: tile_nb's HEAD as tilelang's)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    (tmp_path / "copy").mkdir()
    assert conformance._git_commit(str(tmp_path / "copy")) is None
    assert conformance._git_commit(str(tmp_path)) == git("rev-parse", "HEAD")
