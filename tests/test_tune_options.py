"""`tune()`'s options as one frozen `TuneOptions`, and its field names still accepted as keywords of `tune`,
`gemm.tune` and `tile_nb.autotune` (notebooks and scripts written before the options object keep working)."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import tile_nb
from tile_nb.bench import TuneOptions, tune

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels.seed import gemm_variant

ZERO = [{"block_M": 64, "block_N": 64, "block_K": 0}]   # fails at elaboration: nothing compiles


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))


def test_options_are_frozen_typed_and_hold_tuples():
    options = TuneOptions(key=["M", "N"], restore=["C"], rounds=5)
    assert options.key == ("M", "N") and options.restore == ("C",) and options.rounds == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.rounds = 2
    assert TuneOptions() == TuneOptions(store=True, pool="process", warmup_ms=25.0, rep_ms=100.0, confirm=3)
    assert len(TuneOptions.names()) == 17


def test_keywords_replace_the_fields_of_the_options_and_the_rest_go_to_the_call():
    options, call = TuneOptions.split(
        TuneOptions(pool="ray", rounds=5), {"pool": "inline", "M": 256, "block_K": 32}
    )
    assert options == TuneOptions(pool="inline", rounds=5) and call == {"M": 256, "block_K": 32}
    assert TuneOptions.split({"rounds": 7}, {})[0] == TuneOptions(rounds=7)
    with pytest.raises(TypeError, match="TuneOptions"):
        TuneOptions.split(["inline"], {})


def test_tune_takes_the_options_object_or_the_old_keywords_alike(tmp_path, capsys):
    path = tmp_path / "r.json"
    by_object = tune(gemm_variant, ZERO, M=128, N=128, K=64,
                     options=TuneOptions(pool="inline", progress="print", results=str(path)))
    printed = capsys.readouterr().out
    assert (
        "compile]" in printed and json.loads(path.read_text())["kernel"] == by_object.name == "gemm_variant"
    )
    by_keywords = tune(gemm_variant, ZERO, M=128, N=128, K=64, pool="inline", progress=None)
    assert capsys.readouterr().out == ""
    assert [p.stage for p in by_object.points] == [p.stage for p in by_keywords.points] == ["elaborate"]
    assert (
        gemm_variant.tune(M=128, N=128, K=64, configs=ZERO, options=TuneOptions(pool="inline", progress=None))
        .points[0]
        .stage
        == "elaborate"
    )


def test_an_autotuned_kernel_takes_the_options_object_too(capsys):
    gemm = tile_nb.autotune(configs=ZERO, options=TuneOptions(pool="inline", progress="print"))(gemm_variant)
    assert gemm.tune(M=128, N=128, K=64).points[0].stage == "elaborate"
    assert "compile]" in capsys.readouterr().out
    assert gemm.tune(M=128, N=128, K=64, options=TuneOptions(progress=None)).points[0].stage == "elaborate"
    assert capsys.readouterr().out == ""
    with pytest.raises(TypeError, match="unknown option"):
        tile_nb.autotune(configs=ZERO, option=TuneOptions())(gemm_variant)
