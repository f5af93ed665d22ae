"""`tilelang.env` on tile_nb (tile_nb/tilelang/env.py): tilelang's names mapped onto tile_nb's settings (the
kernel cache folder, the cache switch, the CUDA toolkit), read live and set through tile_nb's variables; names
tile_nb has no counterpart of are refused, naming them."""
import os

import pytest

import tile_nb.tilelang as tilelang
from tile_nb.backend.toolchain import cuda_home
from tile_nb.runtime.cache import cache_dir
from tile_nb.tilelang import UnsupportedTilelangAPI


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILELANG_TMP_DIR", raising=False)


def test_env_maps_onto_tile_nbs_settings(tmp_path, monkeypatch):
    env = tilelang.env
    assert env.TILELANG_CACHE_DIR == str(cache_dir()) == str(tmp_path / "cache")
    assert env.TILELANG_TMP_DIR == os.path.join(str(tmp_path / "cache"), "tmp")
    env.TILELANG_CACHE_DIR = str(tmp_path / "elsewhere")        # sets tile_nb's variable
    assert os.environ["TILE_NB_CACHE_DIR"] == str(tmp_path / "elsewhere") == str(cache_dir())
    assert env.TILELANG_TMP_DIR == os.path.join(str(tmp_path / "elsewhere"), "tmp")
    monkeypatch.setenv("TILELANG_TMP_DIR", str(tmp_path / "t"))
    assert env.TILELANG_TMP_DIR == str(tmp_path / "t")
    assert env.CUDA_HOME == cuda_home()
    from tile_nb.tilelang.env import env as same

    assert same.TILELANG_CACHE_DIR == str(tmp_path / "elsewhere")


def test_env_cache_switches(monkeypatch):
    # set, then deleted: monkeypatch then restores the variable's state after the test, whatever env writes
    monkeypatch.setenv("TILE_NB_DISABLE_CACHE", "0")
    monkeypatch.delenv("TILE_NB_DISABLE_CACHE")
    env = tilelang.env
    assert env.TILELANG_DISABLE_CACHE == "0" and env.is_cache_enabled()
    env.disable_cache()
    assert env.TILELANG_DISABLE_CACHE == "1" and not tilelang.is_cache_enabled()
    env.TILELANG_DISABLE_CACHE = "0"
    assert tilelang.is_cache_enabled() and "TILE_NB_DISABLE_CACHE" not in os.environ
    env.TILELANG_DISABLE_CACHE = "1"
    assert os.environ["TILE_NB_DISABLE_CACHE"] == "1"


def test_env_names_tile_nb_lacks_are_refused():
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.env\.TILELANG_PASS_DIFF") as info:
        tilelang.env.TILELANG_PASS_DIFF  # noqa: B018
    assert isinstance(info.value, AttributeError)      # as a missing module attribute
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.env\.TL_LOWER_TRACE"):
        tilelang.env.TL_LOWER_TRACE = "1"
    with pytest.raises(AttributeError, match="read-only"):
        tilelang.env.CUDA_HOME = "/somewhere"
