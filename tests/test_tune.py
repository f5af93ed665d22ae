"""Autotuning on the CPU: configuration spaces, resource pruning, compile-only searches in worker
processes, the process pool's failure handling, the tuning store across processes, progress
reporters, and `%%tilekernel --tune`.

Timing on the GPU is in tests/test_gpu_tune.py; the Ray path in tests/test_tune_ray.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tile_nb
from tile_nb.bench import TuneResult, TuneStore, expand_configs, tune
from tile_nb.bench.limits import DeviceLimits, limits_for, resource_problem
from tile_nb.bench.pool import ProcessPool
from tile_nb.bench.tuning import ConfigError, lowering_refusal

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from kernels import fake_gpu
from kernels.seed import gemm_variant


def _has_cuda_compiler() -> bool:
    from tile_nb.backend.cuda_compile import available_compiler

    return available_compiler() is not None


needs_compiler = pytest.mark.skipif(not _has_cuda_compiler(), reason="needs nvcc or NVRTC to build cubins")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own kernel cache and tuning store."""
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# -------------------------------------------------------------------------------------------
# configuration spaces
def test_configs_as_a_grid_or_a_list():
    grid = expand_configs({"block_M": [64, 128], "num_stages": [2, 3]})
    assert grid == [{"block_M": 64, "num_stages": 2}, {"block_M": 64, "num_stages": 3},
                    {"block_M": 128, "num_stages": 2}, {"block_M": 128, "num_stages": 3}]
    assert expand_configs([{"block_M": 64}, {"block_M": 64}, {"block_M": 128}]) == [{"block_M": 64},
                                                                                   {"block_M": 128}]
    with pytest.raises(ConfigError, match="'block_M' maps to 64"):
        expand_configs({"block_M": 64})
    with pytest.raises(ConfigError, match=r"configs\[1\] must be a dict"):
        expand_configs([{"block_M": 64}, 128])
    with pytest.raises(ConfigError, match="empty"):
        expand_configs([])


def test_a_config_naming_no_compile_time_parameter_is_refused_at_decoration():
    with pytest.raises(ConfigError, match=r"sets 'blockM'.*did you mean 'block_M'"):
        tile_nb.autotune(configs=[{"blockM": 64}])(gemm_variant)
    with pytest.raises(ConfigError, match="'M'"):   # a const comes from the tensors, it is not tuned
        tile_nb.autotune(configs={"M": [64]})(gemm_variant)
    with pytest.raises(TypeError, match="unknown option"):
        tile_nb.autotune(configs=[{"block_M": 64}], warmup=3)(gemm_variant)


def test_an_autotuned_kernel_refuses_a_tuned_value_in_the_call():
    tuned = tile_nb.autotune(configs={"block_M": [64, 128]})(gemm_variant)
    A, B, C = (torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.float16),
               torch.zeros(64, 64))
    with pytest.raises(ConfigError, match="block_M is chosen by autotune"):
        tuned(A, B, C, block_M=64)


# ------------------------------------------------------------------------------------------------
# resource limits
def test_limits_table_without_a_gpu():
    h = limits_for("sm_90a", use_device=False)
    assert (h.shared_per_block, h.registers_per_sm, h.registers_per_thread) == (232448, 65536, 255)
    assert limits_for("sm_80", use_device=False).shared_per_block == 163 * 1024


def test_resource_problem_names_what_does_not_fit():
    lim = DeviceLimits("sm_90a", shared_per_block=232448)
    fits = {
        "registers": 154,
        "shared_bytes": 0,
        "dynamic_shared_bytes": 147504,
        "spill_stores": 0,
        "spill_loads": 0,
    }
    assert resource_problem(fits, 288, lim) is None
    assert "shared memory 262,144 B > 232,448 B" in resource_problem(
        dict(fits, dynamic_shared_bytes=262144), 256, lim
    )
    assert resource_problem(dict(fits, shared_bytes=240000, dynamic_shared_bytes=None), 128, lim).startswith(
        "shared memory 240,000 B")   # static (ptxas) and dynamic (IR) shared memory both count
    assert resource_problem(dict(fits, registers=254), 288, lim) == \
        "254 registers x 288 threads = 73,152 > 65,536 registers per SM"
    spilled = dict(fits, spill_stores=64, spill_loads=32)
    assert resource_problem(spilled, 256, lim) == \
        "spills 64 B stored + 32 B loaded (limit 0 B; max_spill_bytes=None allows spills)"
    assert resource_problem(spilled, 256, lim, max_spill_bytes=None) is None
    assert resource_problem(spilled, 256, lim, max_spill_bytes=96) is None


def test_the_lowering_budget_refusals_count_as_pruned():
    assert (
        lowering_refusal(
            "LoweringError: the kernel needs 256.0 KiB of shared memory per block; sm_90a allows "
            "227.0 KiB:\n  A_shared ..."
        )
        == "shared memory 256.0 KiB > 227.0 KiB per block (sm_90a; refused by the lowering)"
    )
    assert (
        lowering_refusal(
            "LoweringError: the kernel's register fragments need 512 32-bit registers per thread; "
            "a thread has at most 255:"
        )
        == "register fragments 512 > 255 registers per thread (refused by the lowering)"
    )
    assert (
        lowering_refusal("LoweringError: T.gemm: a 128x256 accumulator cannot be split over 12 warps") is None
    )


# ---------------------------------------------------------------------------------------------
# compile-only search
@needs_compiler
@pytest.mark.slow
def test_compile_only_search_prunes_by_resources_and_records_failures(monkeypatch, capsys):
    """No GPU: every configuration is elaborated here, compiled in worker processes and pruned; nothing
    is timed, stored or chosen, and the result says so. The register file is shrunk to 10,000 so that
    ptxas's real register counts (read back from the worker) decide one prune (the launch's threads
    count: 128 and a producer warp)."""
    from tile_nb.bench import tuning

    small = DeviceLimits("sm_90a", shared_per_block=232448, registers_per_sm=10000)
    monkeypatch.setattr(tuning, "limits_for", lambda arch, use_device=True: small)
    # 58 regs x 160: fits
    configs = [{"block_M": 64, "block_N": 64, "block_K": 32, "threads": 128},
               # ~90 regs x 160 > 10,000
               {"block_M": 128, "block_N": 64, "block_K": 32, "threads": 128},
               # 256 KiB of shared tiles
               {"block_M": 256, "block_N": 256, "block_K": 64, "threads": 256, "num_stages": 4},
               {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 384},               # no warp split
               # division by zero
               {"block_M": 128, "block_N": 128, "block_K": 0, "threads": 128}]
    result = tune(gemm_variant, configs, M=256, N=256, K=256, workers=2, progress="print")
    assert isinstance(result, TuneResult) and result.mode == "compile-only" and not result.gpu
    ok, regs, smem, split, zero = result.points
    assert ok.compiled and ok.timing is None and ok.resources["registers"] > 0 and ok.compile_s > 0
    assert regs.pruned.startswith(f"{regs.resources['registers']} registers x 160 threads") and \
        regs.stage == "resources"
    assert smem.pruned == "shared memory 256.0 KiB > 227.0 KiB per block (sm_90a; refused by the lowering)"
    assert split.stage == "compile" and "cannot be split over 12 warps" in split.error
    assert zero.stage == "elaborate" and "ZeroDivisionError" in zero.error
    assert result.best() is None and result.best_config is None
    assert result.pool == "process" and result.workers == 2
    assert {"setup", "elaborate", "compile_wall", "compile_busy", "total"} <= set(result.timings)
    assert TuneStore().entries() == []   # compile-only results are not a choice: nothing stored

    text = repr(result)
    assert (
        "(compile-only, no GPU timing)" in text.splitlines()[0] and "1 compiled, 2 pruned, 2 failed" in text
    )
    assert "compile-only: no GPU timed these configurations" in text and "torch sees no GPU" in text
    table = result.table()
    assert "median" not in table.splitlines()[0] and "regs" in table.splitlines()[0]
    printed = capsys.readouterr().out
    assert printed.count("compile]") == 5 and "pruned: shared memory 256.0 KiB" in printed


@needs_compiler
def test_a_worker_publishes_to_the_disk_cache_and_the_parent_loads_it(cache_dir):
    """The contract between the pool and the parent: the worker receives the phase-2 IR as text, builds it,
    and publishes the entry under the key the parent computes, so the parent's compile is a disk hit."""
    func = gemm_variant.specialize(M=128, N=128, K=64, block_M=64, block_N=64, block_K=32)
    job = {"id": 7, "ir": func.script(), "target": "sm_90a", "options": {}, "env": {}}
    with ProcessPool(1, inline_while_starting=False) as pool:
        (out,) = list(pool.run([job]))
        maps = Path(f"/proc/{out['pid']}/maps")
        if maps.exists():  # the worker compiles without torch (tvm_ffi would load it: ~200 MB per worker)
            assert "libtorch" not in maps.read_text()
    assert out["ok"] and out["id"] == 7 and out["pid"] != os.getpid() and out["resources"]["registers"] > 0
    import tile_nb.runtime as rt

    rt.clear_memory_cache()
    kernel = rt.compile(func, "sm_90a")
    assert kernel.from_cache and kernel.key == out["key"] and Path(kernel.cache_path).parent.parent == \
        cache_dir / "v1"


def test_a_job_whose_ir_does_not_parse_fails_at_parse():
    from tile_nb.bench.compile_worker import compile_job

    out = compile_job({"id": 1, "ir": "@T.prim_func\ndef f(:\n", "target": "sm_90a"})
    assert not out["ok"] and out["stage"] == "parse" and out["error"]


# -------------------------------------------------------------------------------------------
# the pool's failures
_STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    out = os.fdopen(os.dup(1), "w", buffering=1)
    out.write(json.dumps({"ready": True}) + "\\n")
    for line in sys.stdin:
        job = json.loads(line)
        if job["id"] == 1:
            os._exit(7)                 # a crash inside the compiler
        if job["id"] == 2:
            time.sleep(60)              # a hang
        out.write(json.dumps({"id": job["id"], "ok": True, "pid": os.getpid()}) + "\\n")
""")


def test_the_pool_reports_a_crashed_or_hung_worker_and_replaces_it():
    command = (sys.executable, "-c", _STAND_IN)
    jobs = [{"id": i} for i in range(5)]
    with ProcessPool(2, timeout_s=3.0, command=command, inline_while_starting=False) as pool:
        outcomes = {o["id"]: o for o in pool.run(jobs)}
    assert sorted(outcomes) == [0, 1, 2, 3, 4]
    assert "died (exit code 7)" in outcomes[1]["error"] and outcomes[1]["stage"] == "compile"
    assert "timed out after 3 s and was killed" in outcomes[2]["error"]
    assert all(outcomes[i]["ok"] for i in (0, 3, 4))


def test_a_worker_that_cannot_start_stops_the_search_with_its_error():
    from tile_nb.bench.pool import WorkerStartError

    command = (
        sys.executable,
        "-c",
        "import sys; sys.stderr.write('ImportError: no module named tvm'); sys.exit(1)",
    )
    with pytest.raises(WorkerStartError, match="no module named tvm"), \
            ProcessPool(1, command=command, inline_while_starting=False) as pool:
        list(pool.run([{"id": 0}]))


# --------------------------------------------------------------------------------------
# the store, across processes
_SECOND_PROCESS = textwrap.dedent("""
    import sys, time, json
    sys.path.insert(0, {tests!r})
    import torch, tile_nb
    from kernels import fake_gpu
    from kernels.seed import gemm_variant
    from tile_nb.bench import pool
    fake_gpu.install()
    class NoPool:                       # a second search would build workers: fail loudly instead
        def __init__(self, *a, **k):
            raise AssertionError("searched again")
    pool.ProcessPool = pool.InlinePool = NoPool
    gemm = tile_nb.autotune(configs={configs!r}, pool="inline")(gemm_variant)
    A = torch.randn(128, 64).half(); B = torch.randn(64, 128).half(); C = torch.zeros(128, 128)
    gemm(A, B, C)                       # reads the stored choice and runs it (CPU tensors: the interpreter)
    err = (C - A.float() @ B.float()).abs().max().item()
    print(json.dumps({{"stats": gemm.stats, "chosen": list(gemm._chosen.values()), "err": err,
                      "timed": fake_gpu.CALLS["timed"]}}))
""")


@needs_compiler
@pytest.mark.slow
def test_a_stored_result_is_used_by_a_new_process_without_searching(monkeypatch, cache_dir):
    fake_gpu.install(monkeypatch.setattr)
    configs = {"block_M": [64, 128], "block_N": [64], "block_K": [32]}
    A = torch.randn(128, 64).half()
    B = torch.randn(64, 128).half()
    C = torch.zeros(128, 128)
    first = tune(gemm_variant, configs, A, B, C, pool="inline", progress=None)
    assert first.mode == "gpu" and not first.from_cache and first.best_config["block_M"] == 128
    (entry,) = TuneStore().entries()
    assert (
        entry.kernel == "gemm_variant" and entry.device == fake_gpu.DEVICE and entry.best == first.best_config
    )
    assert entry.key_values["M"] == "128" and entry.key_values["out_dtype"] == "T.float32"
    assert Path(first.results) == entry.path
    record = json.loads(entry.path.read_text())
    assert record["material"]["kernel"]["source_sha256"] and record["material"]["tvm"]
    assert len(record["result"]["points"]) == 2

    again = tune(gemm_variant, configs, A, B, C, pool="inline", progress=None)  # this process, from disk
    assert (
        again.from_cache
        and again.best_config == first.best_config
        and "read from the tuning store" in repr(again)
    )

    code = _SECOND_PROCESS.format(tests=str(TESTS), configs=configs)
    env = dict(os.environ, TILE_NB_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["stats"] == {"searched": 0, "from_store": 1, "from_memory": 0} and report["timed"] == 0
    assert report["chosen"] == [first.best_config] and report["err"] < 1e-2


@needs_compiler
def test_another_shape_or_config_space_is_another_search_and_clear_removes(monkeypatch):
    fake_gpu.install(monkeypatch.setattr)
    gemm = tile_nb.autotune(configs={"block_M": [64, 128], "block_N": [64], "block_K": [32]}, pool="inline",
                            progress=None)(gemm_variant)
    gemm.tune(M=128, N=128, K=64)
    gemm.tune(M=128, N=128, K=64)   # stored: not searched again
    gemm.tune(M=256, N=128, K=64)
    tune(gemm_variant, [{"block_M": 64, "block_N": 64, "block_K": 32}], M=128, N=128, K=64, pool="inline",
         progress=None)
    entries = TuneStore().entries("gemm_variant")
    assert sorted((e.key_values["M"], len(e.best)) for e in entries) == [("128", 3), ("128", 3), ("256", 3)]
    # every stored search of this kernel source, whatever its space and fake_gpu.CALLS["timed"] >= 5
    assert len(gemm.stored()) == 3
    listing = subprocess.run([sys.executable, "-m", "tile_nb.bench.tune_store", "list", "gemm_variant"],
                             capture_output=True, text=True, check=True).stdout
    assert "3 stored tuning(s)" in listing and listing.count("<tuning gemm_variant [M=256") == 1
    assert gemm.clear_stored() == 3 and TuneStore().entries() == []


def test_a_kernel_with_an_unstable_global_is_not_stored(monkeypatch):
    ns = tile_nb.run_source(textwrap.dedent('''
        import tile_nb
        import tile_nb.language as T

        class Opaque:
            pass

        SETTING = Opaque()

        @tile_nb.jit
        def copy(X, Y, block: int = 64):
            N = T.const('N')
            X: T.Tensor[[N], T.float32]
            Y: T.Tensor[[N], T.float32]
            with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N and SETTING is not None:
                        Y[bx * block + i] = X[bx * block + i]
    '''))
    identity = ns["copy"].identity()
    assert not identity["persistable"] and "global SETTING has no stable value" in identity["why"]
    assert gemm_variant.identity()["persistable"]


# ------------------------------------------------------------------------------------------------------
# progress
def test_progress_reporters(capsys):
    from tile_nb.bench.progress import PrintReporter, TqdmReporter, make_reporter
    from tile_nb.bench.results import SweepPoint

    assert isinstance(make_reporter("auto", 3), PrintReporter)   # not a terminal, not a notebook kernel
    with pytest.raises(ValueError, match="progress must be one of"):
        make_reporter("fancy", 3)
    printer = make_reporter("print", 3, "gemm")
    printer.begin("compile", 2)
    printer.update(None, SweepPoint({"block_M": 64}, pruned="shared memory 1 B > 0 B"), "compile")
    assert capsys.readouterr().out == "[1/2 compile] block_M=64: pruned: shared memory 1 B > 0 B\n"
    pytest.importorskip("tqdm", reason="tqdm is in the test extra; this checks its reporter")
    reporter = make_reporter("tqdm", 2, "gemm")
    assert isinstance(reporter, TqdmReporter)
    reporter.begin("compile", 2)
    reporter.update(None, SweepPoint({"block_M": 64}, pruned="shared memory"), "compile")
    reporter.close(None)
    err = capsys.readouterr().err
    assert "gemm compile" in err and "1/2" in err and "pruned: shared memory" in err


@needs_compiler
def test_an_autotuned_kernel_benches_and_runs_its_choice(monkeypatch):
    fake_gpu.install(monkeypatch.setattr)
    gemm = tile_nb.autotune(configs={"block_M": [64, 128], "block_N": [64], "block_K": [32]}, pool="inline",
                            progress=None)(gemm_variant)
    A, B, C = torch.randn(128, 64).half(), torch.randn(64, 128).half(), torch.zeros(128, 128)
    result = gemm.bench(A, B, C, warmup_ms=1, rep_ms=2)       # CPU tensors: the interpreter, chosen config
    assert result.name == "gemm_variant" and result.timing.n >= 10
    assert gemm.stats["searched"] == 1 and list(gemm._chosen.values()) == [{"block_M": 128, "block_N": 64,
                                                                           "block_K": 32}]
    gemm(A, B, C, backend="cpu")
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-2, atol=1e-2)
    assert gemm.stats["searched"] == 1   # the later calls run the choice


def test_retime_best_rounds_the_fastest_working_points():
    """The confirmation step both timing paths share: the `confirm` fastest working points get one median per
    round; a failed re-timing adds nothing; the others are left alone."""
    from types import SimpleNamespace

    from tile_nb.bench.results import SweepPoint, retime_best
    from tile_nb.bench.timing import Timing

    points = [SweepPoint(config={"b": b}, timing=Timing(median_ms=ms, p20=ms, p80=ms, n=3)) for b, ms in
              enumerate([3.0, 1.0, 2.0, 0.5])]
    points[3].error = "failed"   # not ok: never re-timed
    calls = []

    def time_one(i):
        calls.append(i)
        return None if i == 2 and len(calls) > 2 else 10.0 + i

    result = SimpleNamespace(timings={})
    top = retime_best(result, points, range(4), confirm=2, rounds=2, time_one=time_one, args_of=lambda i: [],
                      flops=None, nbytes=None)
    assert top == [1, 2] and calls == [1, 2, 1, 2]
    assert points[1].rounds_ms == [11.0, 11.0] and points[2].rounds_ms == [12.0]
    assert points[0].rounds_ms is None and "confirm" in result.timings


@needs_compiler
@pytest.mark.parametrize("damage", ["no_result", "empty_result", "best_outside_the_space"])
def test_a_damaged_stored_result_is_searched_again_with_a_warning_and_overwritten(monkeypatch, damage):
    from tile_nb.runtime.cache_guard import CacheWarning

    fake_gpu.install(monkeypatch.setattr)
    configs = {"block_M": [64, 128], "block_N": [64], "block_K": [32]}
    args = (torch.randn(128, 64).half(), torch.randn(64, 128).half(), torch.zeros(128, 128))
    first = tune(gemm_variant, configs, *args, pool="inline", progress=None)
    path = Path(first.results)
    record = json.loads(path.read_text())
    if damage == "no_result":
        del record["result"]
    elif damage == "empty_result":
        record["result"] = {}
    else:
        record["result"]["best"] = dict(first.best_config, block_M=256)
    path.write_text(json.dumps(record))
    timed = fake_gpu.CALLS["timed"]
    with pytest.warns(CacheWarning, match="stored tuning .* is damaged"):
        again = tune(gemm_variant, configs, *args, pool="inline", progress=None)
    assert not again.from_cache and fake_gpu.CALLS["timed"] > timed          # searched again
    assert again.best_config == first.best_config
    assert json.loads(path.read_text())["result"]["best"] == first.best_config   # the record was rewritten
    third = tune(gemm_variant, configs, *args, pool="inline", progress=None)
    assert third.from_cache and third.best_config == first.best_config
