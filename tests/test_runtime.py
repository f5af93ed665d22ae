"""tile_nb.runtime on the CPU: CompiledKernel fields, the memory cache, and the disk cache (hits in a new
process, corrupt entries rebuilt, two processes writing the same entry at once)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kernels.tirx_modules import add_module

import tile_nb.runtime as rt
from tile_nb.backend import available_compiler
from tile_nb.runtime.cache import DiskCache, compute_key, key_material

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
PYPATH = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])   # keep e.g. the GPU kit's TVM
HAS_COMPILER = available_compiler() is not None


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own empty cache folder and an empty memory cache."""
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILE_NB_DISABLE_CACHE", raising=False)
    rt.clear_memory_cache()
    yield tmp_path / "cache"
    rt.clear_memory_cache()


def entries(cache: Path):
    return sorted(p for p in (cache / "v1").glob("*/*") if p.is_dir() and not p.name.startswith("."))


def run_in_new_process(cache: Path, body: str) -> dict:
    """Run `body` in a fresh Python (so only the disk cache can help) and return the JSON it prints last."""
    script = textwrap.dedent("""
        import json, sys, time
        sys.path[:0] = [{root!r}, {tests!r}]
        import tvm
        import tile_nb.runtime as rt
        from kernels.tirx_modules import add_module
    """).format(root=str(ROOT), tests=str(TESTS)) + textwrap.dedent(body)
    env = dict(os.environ, TILE_NB_CACHE_DIR=str(cache), PYTHONPATH=PYPATH)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_compile_fills_every_field(cache_dir):
    kernel = rt.compile(add_module(), "sm_90a")
    assert kernel.name == "add" and kernel.params == ("A", "B", "C", "n") and kernel.arch == "sm_90a"
    assert "add_kernel" in kernel.cuda_source
    assert "T.prim_func" in kernel.lowered_ir or "prim_func" in kernel.lowered_ir
    assert {"key", "codegen"} <= set(kernel.timings)
    assert not kernel.from_cache
    if HAS_COMPILER:
        assert kernel.cubin[:4] == b"\x7fELF"
        assert kernel.resources.registers > 0 and kernel.resources.spill_stores == 0
        assert kernel.ptx and ".entry add_kernel" in kernel.ptx
        assert "cubin" in kernel.timings
    assert "CompiledKernel add(A, B, C, n)" in repr(kernel)


@pytest.mark.skipif(__import__("tile_nb.backend", fromlist=["x"]).cuda_runtime_loaded(),
                    reason="this process has a GPU runtime")
def test_kernel_without_gpu_says_why_it_cannot_launch():
    kernel = rt.compile(add_module(), "sm_90a")
    assert not kernel.launchable
    with pytest.raises(rt.KernelNotLaunchableError, match="no CUDA driver"):
        kernel(1, 2, 3, 4)


def test_memory_cache_returns_the_same_object():
    a = rt.compile(add_module(), "sm_90a")
    b = rt.compile(add_module(), "sm_90a")
    assert a is b


def test_key_depends_on_ir_target_and_options():
    base = key_material("ir", "sm_90a", {"compiler": "auto"})
    keys = {compute_key(base),
            compute_key(key_material("ir2", "sm_90a", {"compiler": "auto"})),
            compute_key(key_material("ir", "sm_80", {"compiler": "auto"})),
            compute_key(key_material("ir", "sm_90a", {"compiler": "nvcc"}))}
    assert len(keys) == 4
    assert compute_key(base) == compute_key(key_material("ir", "sm_90a", {"compiler": "auto"}))
    assert {"tile_nb", "sources", "tvm", "target", "options", "ir_sha256"} <= set(base)


def test_different_kernels_get_different_entries(cache_dir):
    rt.compile(add_module(n_threads=128), "sm_90a")
    rt.compile(add_module(n_threads=256), "sm_90a")
    rt.compile(add_module(n_threads=128), "sm_80")
    assert len(entries(cache_dir)) == 3


def test_unknown_option_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="known options"):
        rt.compile(add_module(), "sm_90a", options={"fastmath": False})


def test_cache_false_and_env_switch_write_nothing(cache_dir, monkeypatch):
    rt.compile(add_module(), "sm_90a", options={"cache": False})
    assert not entries(cache_dir) if cache_dir.exists() else True
    rt.clear_memory_cache()
    monkeypatch.setenv("TILE_NB_DISABLE_CACHE", "1")
    rt.compile(add_module(), "sm_90a")
    assert not cache_dir.exists() or not entries(cache_dir)


def test_entry_is_plain_files_with_checksums(cache_dir):
    kernel = rt.compile(add_module(), "sm_90a")
    (entry,) = entries(cache_dir)
    assert kernel.cache_path == str(entry)
    names = {p.name for p in entry.iterdir()}
    assert {"meta.json", "kernel.cu", "lowered.py"} <= names
    assert not any(n.endswith((".pkl", ".pickle")) for n in names)
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["key"] == kernel.key == entry.name and meta["name"] == "add"
    assert set(meta["files"]) == names - {"meta.json", "meta.sha256"}    # meta.sha256: meta.json's own
    assert not list(entry.parent.glob(".tmp-*"))


def test_disk_hit_in_a_new_process(cache_dir):
    first = rt.compile(add_module(), "sm_90a")
    assert not first.from_cache
    out = run_in_new_process(
        cache_dir,
        """
        t = time.perf_counter()
        k = rt.compile(add_module(), "sm_90a")
        print(json.dumps({"from_cache": k.from_cache, "seconds": time.perf_counter() - t, "timings": k.timings,
                          "source": k.cuda_source, "registers": k.resources and k.resources.registers}))
    """,
    )
    assert out["from_cache"] is True
    assert set(out["timings"]) == {"key", "cache_load"}
    assert out["source"] == first.cuda_source
    if HAS_COMPILER:
        assert out["registers"] == first.resources.registers


@pytest.mark.parametrize(
    "damage", ["flip_source", "truncate_meta", "wrong_key", "drop_file", "bad_json_type"]
)
def test_corrupt_entry_is_rebuilt_not_loaded(cache_dir, damage):
    first = rt.compile(add_module(), "sm_90a")
    (entry,) = entries(cache_dir)
    meta_path = entry / "meta.json"
    if damage == "flip_source":
        (entry / "kernel.cu").write_text(first.cuda_source.replace("add_kernel", "evil_kernel"))
    elif damage == "truncate_meta":
        meta_path.write_text(meta_path.read_text()[:40])
    elif damage == "wrong_key":
        meta = json.loads(meta_path.read_text())
        meta["key"] = "0" * 64
        meta_path.write_text(json.dumps(meta))
    elif damage == "drop_file":
        (entry / "lowered.py").unlink()
    elif damage == "bad_json_type":
        meta_path.write_text("[1, 2, 3]")
    rt.clear_memory_cache()
    again = rt.compile(add_module(), "sm_90a")
    assert not again.from_cache                           # rebuilt, not loaded
    assert "evil_kernel" not in again.cuda_source
    (entry,) = entries(cache_dir)                         # and the rebuilt entry replaced the bad one
    assert DiskCache().load(entry.name) is not None
    rt.clear_memory_cache()
    assert rt.compile(add_module(), "sm_90a").from_cache


def test_two_processes_compiling_the_same_kernel_at_once(cache_dir):
    body = textwrap.dedent("""
        import json, sys, time
        sys.path[:0] = [{root!r}, {tests!r}]
        import tvm
        import tile_nb.runtime as rt
        from kernels.tirx_modules import add_module
        mod = add_module()
        while time.time() < {start}:      # line both processes up on the same instant
            time.sleep(0.005)
        k = rt.compile(mod, "sm_90a")
        print(json.dumps({{"key": k.key, "from_cache": k.from_cache, "source": k.cuda_source}}))
    """)
    import time

    start = time.time() + 12      # both processes have imported TVM by then
    script = body.format(root=str(ROOT), tests=str(TESTS), start=start)
    env = dict(os.environ, TILE_NB_CACHE_DIR=str(cache_dir), PYTHONPATH=PYPATH)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert outs[0]["key"] == outs[1]["key"] and outs[0]["source"] == outs[1]["source"]
    (entry,) = entries(cache_dir)
    assert DiskCache().load(entry.name) is not None
    assert not list(entry.parent.glob(".tmp-*")) and not list(entry.parent.glob(".trash-*"))
    out = run_in_new_process(cache_dir, """
        k = rt.compile(add_module(), "sm_90a")
        print(json.dumps({"from_cache": k.from_cache}))
    """)
    assert out["from_cache"]


def test_store_race_loser_keeps_the_winner(tmp_path):
    cache = DiskCache(tmp_path)
    key = "ab" + "0" * 62
    assert cache.store(key, {"name": "k"}, {"a.txt": "first"}) is not None
    assert cache.store(key, {"name": "k"}, {"a.txt": "second"}) is None     # lost the race: nothing changes
    assert cache.load(key).text("a.txt") == "first"
    assert cache.store(key, {"name": "k"}, {"a.txt": "better"}, replace=True) is not None
    assert cache.load(key).text("a.txt") == "better"


def test_module_checksum_checked_when_a_module_is_needed(tmp_path):
    cache = DiskCache(tmp_path)
    key = "cd" + "1" * 62
    so = tmp_path / "module.so"
    so.write_bytes(b"\x7fELF not really")
    cache.store(key, {"name": "k"}, {"module.so": so})
    assert cache.load(key, need_module=True) is not None
    (cache.entry_path(key) / "module.so").write_bytes(b"\x7fELF tampered!!")
    assert cache.load(key, need_module=True) is None
    assert not cache.entry_path(key).exists()              # moved aside, to be rebuilt


def test_import_runtime_bench_backend_stays_light():
    code = (
        "import sys, tile_nb.runtime, tile_nb.backend, tile_nb.bench; "
        "bad = [m for m in ('matplotlib', 'IPython', 'ipywidgets', 'jupyter_client') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=PYPATH), timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
