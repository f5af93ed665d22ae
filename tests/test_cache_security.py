"""Security and repair of the on-disk caches: private folders (0700, owned by the user), refusal of a folder
or file someone else could change (with its owner and mode in the message), swapped modules never loaded,
damaged entries and tuning records repaired with a warning, leftovers of killed writers removed, and shipped
Ray entries checked against the key the receiver computes.

Cases with another owner need root (`os.chown` to uid 65534, or a real second user through `setpriv`); they
skip with the reason elsewhere.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kernels.tirx_modules import add_module

import tile_nb.runtime as rt
from tile_nb.runtime import cache as cache_mod
from tile_nb.runtime.cache import DiskCache, compute_key, key_material
from tile_nb.runtime.cache_guard import CacheSecurityError, CacheWarning

# the module: tile_nb.runtime.compile is a function
compile_mod = importlib.import_module("tile_nb.runtime.compile")
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

NOBODY = 65534
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="giving a folder to another uid (os.chown) needs root")
KEY = "ab" + "0" * 62


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no user name"


def _has_cuda_compiler() -> bool:
    from tile_nb.backend.cuda_compile import available_compiler

    return available_compiler() is not None


needs_compiler = pytest.mark.skipif(not _has_cuda_compiler(), reason="needs nvcc or NVRTC to build cubins")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache folder (pytest's tmp_path: 0700, the
    user's) and an empty memory cache."""
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILE_NB_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(cache_mod, "_swept", set())
    rt.clear_memory_cache()
    yield tmp_path / "cache"
    rt.clear_memory_cache()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def only_entry(cache: Path) -> Path:
    (entry,) = [p for p in (cache / "v1").glob("*/*") if p.is_dir() and not p.name.startswith(".")]
    return entry


def rewrite_meta(entry: Path, change, *, keep_checksum: bool) -> None:
    """Edit meta.json; with `keep_checksum`, update meta.sha256 too (as the cache
    would: the edit is not damage)."""
    meta = json.loads((entry / "meta.json").read_text())
    change(meta)
    raw = json.dumps(meta, indent=1, sort_keys=True).encode()
    (entry / "meta.json").write_bytes(raw)
    if keep_checksum:
        import hashlib

        (entry / "meta.sha256").write_text(hashlib.sha256(raw).hexdigest() + "\n")


# ------------------------------------------------------------------------------------------ private folders

def test_new_folders_are_0700_and_files_0600_whatever_the_umask(tmp_path, monkeypatch):
    from tile_nb.bench.tune_store import TuneStore

    root = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(root))
    old = os.umask(0o002)          # a umask that would leave folders group-writable
    try:
        entry = DiskCache().store(KEY, {"name": "k"}, {"x.txt": "hello"})
        saved = TuneStore().save("cd" + "1" * 62, {}, {"best": {"b": 1}, "points": []})
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", root, root / "v1", root / "v1" / "ab", entry,
                   root / "tune-v1", saved.parent):
        assert mode_of(folder) == 0o700, folder
    for file in (*entry.iterdir(), saved):
        assert mode_of(file) == 0o600, file
    assert DiskCache().load(KEY).text("x.txt") == "hello"


@pytest.mark.parametrize("mode, who", [(0o777, "group and others"), (0o775, "its group"), (0o703, "others")],
                         ids=["0777", "0775", "0703"])
def test_a_root_writable_by_group_or_others_is_refused(cache_dir, mode, who):
    cache_dir.mkdir()
    os.chmod(cache_dir, mode)
    for use in (lambda: DiskCache().load(KEY), lambda: DiskCache().store(KEY, {}, {"x.txt": "x"})):
        with pytest.raises(CacheSecurityError) as info:
            use()
        err = info.value
        text = str(err)
        assert str(cache_dir) in text and f"writable by {who}" in text and f"mode {mode:04o}" in text
        assert f"uid {os.geteuid()}" in text and "chmod -R go-w" in text and "TILE_NB_CACHE_DIR" in text
        assert (err.path, err.mode, err.uid) == (str(cache_dir), mode, os.geteuid())
    assert os.listdir(cache_dir) == []          # nothing was written into it


@pytest.mark.parametrize("mode", [0o700, 0o755], ids=["0700", "0755"])
def test_a_private_or_read_only_shared_root_of_ones_own_is_used(cache_dir, mode):
    cache_dir.mkdir()
    # 0755: what earlier versions made under umask 022; nobody else can write it
    os.chmod(cache_dir, mode)
    assert DiskCache().store(KEY, {}, {"x.txt": "x"}) is not None
    assert DiskCache().load(KEY).text("x.txt") == "x"


def test_a_root_reached_through_a_symbolic_link_is_checked_at_its_target(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "link"))
    assert DiskCache().store(KEY, {}, {"x.txt": "x"}) is not None
    os.chmod(real, 0o777)
    with pytest.raises(CacheSecurityError, match="mode 0777"):
        DiskCache().load(KEY)


@needs_root
def test_a_root_of_another_user_is_refused_even_when_private(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chown(cache_dir, NOBODY, NOBODY)
    with pytest.raises(CacheSecurityError) as info:
        DiskCache().store(KEY, {}, {"x.txt": "x"})
    text = str(info.value)
    assert str(cache_dir) in text and "belongs to another user" in text
    assert f"uid {NOBODY} ({_user(NOBODY)})" in text and "mode 0700" in text and "TILE_NB_CACHE_DIR" in text
    assert info.value.uid == NOBODY and os.listdir(cache_dir) == []


@pytest.mark.skipif(not IS_ROOT or shutil.which("setpriv") is None,
                    reason="a second real user needs root and setpriv (util-linux)")
def test_a_cache_folder_made_by_another_user_is_refused(monkeypatch):
    """The attack of issue 29: another local user creates the cache folder 0777 before the victim does."""
    shared = Path(tempfile.mkdtemp(prefix="tile_nb_shared_", dir="/tmp"))
    try:
        os.chmod(shared, 0o1777)                  # like /tmp: anyone may create a folder in it
        folder = shared / "cache"
        made = subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "sh",
                "-c",
                f"umask 0; mkdir -m 0777 {folder} && mkdir -m 0777 {folder}/v1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        assert os.stat(folder).st_uid == NOBODY          # really made by the other user
        monkeypatch.setenv("TILE_NB_CACHE_DIR", str(folder))
        with pytest.raises(CacheSecurityError) as info:
            DiskCache().store(KEY, {}, {"x.txt": "x"})
        text = str(info.value)
        assert str(folder) in text and f"uid {NOBODY}" in text and "mode 0777" in text
        assert os.listdir(folder / "v1") == []           # the victim wrote nothing there
        with pytest.raises(CacheSecurityError):
            rt.compile(add_module(), "sm_90a")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _give_away(path: Path) -> None:
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


@pytest.mark.parametrize("damage", ["subfolder_of_another_user", "entry_0777", "meta_of_another_user",
                                    "file_group_writable", "v1_is_a_link"])
def test_a_folder_or_file_below_the_root_that_others_could_change_is_refused(cache_dir, tmp_path, damage):
    entry = DiskCache().store(KEY, {"name": "k"}, {"x.txt": "x"})
    target = {"subfolder_of_another_user": entry.parent, "entry_0777": entry,
              "meta_of_another_user": entry / "meta.json", "file_group_writable": entry / "x.txt",
              "v1_is_a_link": cache_dir / "v1"}[damage]
    if damage in ("subfolder_of_another_user", "meta_of_another_user"):
        if not IS_ROOT:
            pytest.skip("giving a file to another uid (os.chown) needs root")
        _give_away(target)
    elif damage == "entry_0777":
        os.chmod(target, 0o777)
    elif damage == "file_group_writable":
        os.chmod(target, 0o664)
    else:
        moved = tmp_path / "elsewhere"
        os.rename(target, moved)
        target.symlink_to(moved)
    with pytest.raises(CacheSecurityError) as info:
        DiskCache().load(KEY)
    assert info.value.path == str(target) and str(target) in str(info.value)


def test_a_refused_cache_stops_compile_with_the_error_unless_the_cache_is_off(cache_dir, monkeypatch):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    with pytest.raises(CacheSecurityError, match="mode 0777"):
        rt.compile(add_module(), "sm_90a")                     # never a silent uncached run
    assert not rt.compile(add_module(), "sm_90a", options={"cache": False}).from_cache
    rt.clear_memory_cache()
    monkeypatch.setenv("TILE_NB_DISABLE_CACHE", "1")
    assert rt.compile(add_module(), "sm_90a").name == "add"
    assert os.listdir(cache_dir) == []


def test_the_security_error_pickles_with_its_fields(cache_dir):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    with pytest.raises(CacheSecurityError) as info:
        DiskCache().load(KEY)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is CacheSecurityError and str(again) == str(info.value)
    assert (again.path, again.uid, again.owner, again.mode, again.problem) == \
        (info.value.path, info.value.uid, info.value.owner, 0o777, info.value.problem)


# ------------------------------------------------------------------------------------------ swapped modules

class _Loads:
    """Stands in for tvm.runtime.load_module: records every path the compile path loads."""

    def __init__(self):
        self.paths = []

    def __call__(self, path):
        self.paths.append(path)
        return {"add": lambda *args: None}


@pytest.fixture
def entry_with_module(cache_dir, monkeypatch):
    """A cached `add` kernel whose entry holds a module.so, in a process that believes it can launch it (this
    machine has no GPU, so the module is a stand-in file and loading it is recorded, not done)."""
    import tvm

    monkeypatch.setattr(compile_mod, "_launch_problem", lambda arch: None)
    loads = _Loads()
    monkeypatch.setattr(tvm.runtime, "load_module", loads)
    built = rt.compile(add_module(), "sm_90a")
    entry = DiskCache().load(built.key)
    files = dict(entry.files, **{"module.so": b"\x7fELF the victim's module"})
    keep = {k: v for k, v in entry.meta.items() if k not in ("format", "key", "files", "created")}
    DiskCache().store(built.key, keep, files, replace=True)
    rt.clear_memory_cache()
    return Path(DiskCache().entry_path(built.key)), loads


def test_an_intact_module_is_loaded_from_the_cache(entry_with_module):
    entry, loads = entry_with_module
    kernel = rt.compile(add_module(), "sm_90a")
    assert kernel.from_cache and loads.paths == [str(entry / "module.so")]   # the detector sees a load


@pytest.mark.parametrize(
    "swap", ["owned_by_another_user", "group_writable", "other_bytes", "other_bytes_and_meta"]
)
def test_a_swapped_module_is_never_loaded(entry_with_module, swap):
    entry, loads = entry_with_module
    module = entry / "module.so"
    if swap == "owned_by_another_user":
        if not IS_ROOT:
            pytest.skip("giving a file to another uid (os.chown) needs root")
        module.unlink()
        module.write_bytes(b"\x7fELF the attacker's module")
        os.chmod(module, 0o600)
        _give_away(module)
    elif swap == "group_writable":
        os.chmod(module, 0o664)
    else:
        module.write_bytes(b"\x7fELF the attacker's module")
        # the checksum in meta.json made to match, meta.sha256 left as it was
        if swap == "other_bytes_and_meta":
            import hashlib

            data = module.read_bytes()
            rewrite_meta(entry, lambda m: m["files"]["module.so"].update(
                sha256=hashlib.sha256(data).hexdigest(), size=len(data)), keep_checksum=False)
    if swap in ("owned_by_another_user", "group_writable"):
        with pytest.raises(CacheSecurityError) as info:
            rt.compile(add_module(), "sm_90a")
        assert info.value.path == str(module)
    else:
        with pytest.warns(
            CacheWarning, match="damaged .*(module.so does not match|meta.json does not match)"
        ):
            kernel = rt.compile(add_module(), "sm_90a")
        assert not kernel.from_cache                           # rebuilt instead
    assert loads.paths == []


# ------------------------------------------------------------------------------------------ damaged entries

def test_a_meta_json_without_name_is_repaired_with_a_warning(cache_dir):
    rt.compile(add_module(), "sm_90a")
    entry = only_entry(cache_dir)
    rewrite_meta(entry, lambda m: m.pop("name"), keep_checksum=True)
    rt.clear_memory_cache()
    with pytest.warns(CacheWarning, match=f"{entry}.*lacks 'name'"):
        again = rt.compile(add_module(), "sm_90a")
    assert not again.from_cache and again.name == "add"
    assert json.loads((only_entry(cache_dir) / "meta.json").read_text())["name"] == "add"   # rewritten
    rt.clear_memory_cache()
    assert rt.compile(add_module(), "sm_90a").from_cache    # no longer a permanent miss


def test_a_meta_json_changed_behind_its_checksum_is_rebuilt_with_a_warning(cache_dir):
    rt.compile(add_module(), "sm_90a")
    entry = only_entry(cache_dir)
    rewrite_meta(entry, lambda m: m.update(arch="sm_80"), keep_checksum=False)
    rt.clear_memory_cache()
    with pytest.warns(CacheWarning, match="meta.json does not match its checksum in meta.sha256"):
        again = rt.compile(add_module(), "sm_90a")
    assert not again.from_cache and again.arch == "sm_90a"
    rt.clear_memory_cache()
    assert rt.compile(add_module(), "sm_90a").from_cache


def test_an_entry_without_its_meta_checksum_is_rebuilt(cache_dir):
    rt.compile(add_module(), "sm_90a")
    (only_entry(cache_dir) / "meta.sha256").unlink()
    rt.clear_memory_cache()
    with pytest.warns(CacheWarning, match="meta.sha256 is unreadable"):
        assert not rt.compile(add_module(), "sm_90a").from_cache


def _age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past), follow_symlinks=False)


def test_leftovers_of_killed_writers_are_removed_when_the_cache_is_written(cache_dir):
    from tile_nb.runtime.cache_guard import STALE_AFTER_S

    DiskCache().store("cd" + "2" * 62, {}, {"x.txt": "x"})     # makes the folders
    cache_mod._swept.clear()
    here, there = cache_dir / "v1" / "ab", cache_dir / "v1" / "cd"
    here.mkdir(mode=0o700)
    old = [here / ".tmp-abcdef-1", here / ".trash-abcdef-2", there / ".tmp-cdcdcd-3"]
    fresh = here / ".tmp-abcdef-4"                             # a live writer's
    for folder in (*old, fresh):
        folder.mkdir(mode=0o700)
        (folder / "kernel.cu").write_text("half written")
    for folder in old:
        _age(folder, STALE_AFTER_S + 60)
    DiskCache().store(KEY, {}, {"x.txt": "x"})
    assert [p.exists() for p in old] == [False, False, False] and fresh.exists()


def test_leftover_temporary_files_of_the_tuning_store_are_removed(cache_dir):
    from tile_nb.bench.tune_store import TuneStore
    from tile_nb.runtime.cache_guard import STALE_AFTER_S

    store = TuneStore()
    path = store.save(KEY, {}, {"best": {"b": 1}, "points": []})
    old, fresh = path.parent / f".{path.name}.1234.tmp", path.parent / ".tmp-abcdef-0001.tmp"
    old.write_text("{")
    fresh.write_text("{")
    _age(old, STALE_AFTER_S + 60)
    store.save(KEY, {}, {"best": {"b": 2}, "points": []})
    assert not old.exists() and fresh.exists() and store.load(KEY)["best"] == {"b": 2}


# ------------------------------------------------------------------------------------------ tuning records

CONFIGS = [{"block_M": 64, "shape": (1, 2)}, {"block_M": 128, "shape": (1, 2)}]


def _saved_search(store, key: str) -> None:
    from tile_nb.bench.results import SweepPoint, TuneResult
    from tile_nb.bench.timing import Timing

    points = [SweepPoint(config=dict(c), timing=Timing(median_ms=ms, p20=ms, p80=ms, n=3, device="cuda"))
              for c, ms in zip(CONFIGS, (2.0, 1.0), strict=True)]
    result = TuneResult(
        "k", {"block_M": [64, 128]}, points, gpu=True, device_name="gpu", best_config=CONFIGS[1]
    )
    store.save(key, {"kernel": {"name": "k"}, "key": {}, "device": "gpu"}, result.to_dict())


def test_a_good_tuning_record_gives_the_search_spaces_own_configuration():
    from tile_nb.bench.tune_store import TuneStore
    from tile_nb.bench.tuning import _stored_result

    store = TuneStore()
    _saved_search(store, KEY)
    cached = _stored_result(store, KEY, CONFIGS)
    assert cached.from_cache and cached.best_config is CONFIGS[1]     # its tuple, not JSON's list


@pytest.mark.parametrize("damage, why", [
    ("no_result", "holds no search result"), ("empty_result", "holds no search result"),
    ("best_outside_the_space", "best configuration .* is not in the search space"),
    ("no_points", "has no points"), ("not_json", "is not JSON"), ("points_unreadable", "does not read back")])
def test_a_damaged_tuning_record_is_ignored_with_a_warning_and_removed(damage, why):
    from tile_nb.bench.tune_store import TuneStore
    from tile_nb.bench.tuning import _stored_result

    store = TuneStore()
    _saved_search(store, KEY)
    path = store.path(KEY)
    record = json.loads(path.read_text())
    if damage == "no_result":
        del record["result"]
    elif damage == "empty_result":
        record["result"] = {}
    elif damage == "best_outside_the_space":
        record["result"]["best"] = {"block_M": 256, "shape": [1, 2]}
    elif damage == "no_points":
        del record["result"]["points"]
    elif damage == "points_unreadable":
        record["result"]["points"] = [{"timing": None}]
    path.write_text("{ not json" if damage == "not_json" else json.dumps(record))
    with pytest.warns(CacheWarning, match=f"{path}.*{why}"):
        assert _stored_result(store, KEY, CONFIGS) is None
    assert not path.exists()
    _saved_search(store, KEY)                                    # the next search stores a good one again
    assert _stored_result(store, KEY, CONFIGS).best_config is CONFIGS[1]


@needs_root
def test_a_tuning_record_of_another_user_is_refused():
    from tile_nb.bench.tune_store import TuneStore

    store = TuneStore()
    _saved_search(store, KEY)
    _give_away(store.path(KEY))
    with pytest.raises(CacheSecurityError, match=f"{store.path(KEY)}.*belongs to another user"):
        store.load(KEY)


# ------------------------------------------------------------------------------------------
# shipped Ray entries

def _shipped(files: dict[str, bytes]):
    import hashlib

    material = key_material("@T.prim_func\ndef k(): pass\n", "cuda -arch=sm_90a", {})
    meta = {"name": "k", "material": material,
            "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()}}
    return compute_key(material), files, meta


def test_a_shipped_entry_that_checks_out_is_stored():
    from tile_nb.bench.ray_pool import publish_entry

    key, files, meta = _shipped({"kernel.cu": b"__global__ void k() {}"})
    publish_entry(key, files, meta, expected_key=key)
    assert DiskCache().load(key).text("kernel.cu") == "__global__ void k() {}"


@pytest.mark.parametrize("damage, why", [
    ("key_of_another_kernel", "is not the key of its own material"),
    ("material_edited", "is not the key of its own material"),
    ("not_the_jobs_key", "is not the key this process computes for the job it sent"),
    ("file_changed", "kernel.cu does not match its sha256"),
    ("file_not_listed", "lists files"),
    ("name_outside_the_folder", "plain names"),
    ("no_material", "has no key material")])
def test_a_shipped_entry_that_does_not_check_out_is_refused(cache_dir, damage, why):
    from tile_nb.bench.ray_pool import ShippedEntryError, publish_entry

    key, files, meta = _shipped({"kernel.cu": b"__global__ void k() {}"})
    expected = key
    if damage == "key_of_another_kernel":
        key = "ee" + "f" * 62
    elif damage == "material_edited":
        meta["material"] = dict(meta["material"], target="cuda -arch=sm_80")
    elif damage == "not_the_jobs_key":
        expected = "ee" + "f" * 62
    elif damage == "file_changed":
        files["kernel.cu"] = b"__global__ void evil() {}"
    elif damage == "file_not_listed":
        files["extra.so"] = b"\x7fELF"
    elif damage == "name_outside_the_folder":
        key, files, meta = _shipped({"../../evil.so": b"\x7fELF"})
        expected = key
    else:
        del meta["material"]
    with pytest.raises(ShippedEntryError, match=why):
        publish_entry(key, files, meta, expected_key=expected)
    assert not (cache_dir / "v1").exists() or not list((cache_dir / "v1").rglob("*.cu"))
    assert not (cache_dir.parent / "evil.so").exists()


@needs_compiler
def test_the_receiver_computes_the_key_a_worker_published_under(cache_dir, tmp_path, monkeypatch):
    """What the Ray path relies on: the parent (or a GPU actor) recomputes the worker's key from the job it
    sent, so a good entry is accepted and one built with other lowering switches is refused."""
    from kernels.seed import gemm_variant

    from tile_nb.bench.compile_worker import compile_job
    from tile_nb.bench.ray_pool import ShippedEntryError, expected_key_of, publish_entry

    func = rt.with_device_facts(
        gemm_variant.specialize(M=128, N=128, K=64, block_M=64, block_N=64, block_K=32), "sm_90a"
    )
    job = {"id": 1, "ir": func.script(), "target": "sm_90a", "options": {}, "env": {}}
    out = compile_job(dict(job, ship_entry=True))
    assert out["ok"], out.get("error")
    assert expected_key_of(job) == out["key"] and "material" in out["meta"] and "files" in out["meta"]
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "receiver"))      # another machine's cache
    rt.clear_memory_cache()
    with pytest.raises(ShippedEntryError, match="not the key this process computes"):
        publish_entry(out["key"], out["files"], out["meta"],
                      expected_key=expected_key_of(dict(job, env={"TILE_NB_TMA": "0"})))
    publish_entry(out["key"], out["files"], out["meta"], expected_key=expected_key_of(job))
    kernel = rt.compile(func, "sm_90a")
    assert kernel.from_cache and kernel.key == out["key"]


# ------------------------------------------------------------------------------------------ on the GPU

_CONSTRUCTOR = r"""
#include <stdio.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("loaded", f); fclose(f); }
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("swap", ["victims_own_bytes", "owned_by_another_user", "group_writable"])
def test_gpu_a_swapped_module_so_is_never_dlopened(cache_dir, tmp_path, swap):
    """On a GPU the entry holds a real module.so; a library whose constructor leaves a mark takes its place.
    The next compile must refuse it or rebuild, never load it: no mark."""
    torch = pytest.importorskip("torch")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler to build the stand-in library")
    if swap == "owned_by_another_user" and not IS_ROOT:
        pytest.skip("giving a file to another uid (os.chown) needs root")
    kernel = rt.compile(add_module(), None)
    assert kernel.launchable, kernel.not_launchable_reason
    module = Path(kernel.cache_path) / "module.so"
    assert module.is_file()
    mark = tmp_path / "loaded.txt"
    source = tmp_path / "evil.c"
    source.write_text(_CONSTRUCTOR % mark)
    evil = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(evil), str(source)], check=True, timeout=120)
    module.unlink()
    shutil.copyfile(evil, module)
    os.chmod(module, 0o664 if swap == "group_writable" else 0o600)
    if swap == "owned_by_another_user":
        _give_away(module)
    rt.clear_memory_cache()
    if swap == "victims_own_bytes":
        with pytest.warns(CacheWarning, match="module.so does not match"):
            again = rt.compile(add_module(), None)
        assert not again.from_cache and again.launchable
        a, b = torch.ones(1000, device="cuda"), torch.ones(1000, device="cuda")
        c = torch.zeros(1000, device="cuda")
        again(a, b, c, 1000)
        torch.cuda.synchronize()
        assert bool((c == 2).all())
    else:
        with pytest.raises(CacheSecurityError):
            rt.compile(add_module(), None)
    assert not mark.exists()
    import ctypes

    ctypes.CDLL(str(evil))            # the detector works: loading the library does leave the mark
    assert mark.read_text() == "loaded"
