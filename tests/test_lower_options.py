"""Lowering options (tile_nb/lower/options.py): one typed, frozen value, resolved function attribute > kernel
> run-time options > environment > default, keyed into the compile caches, sent whole to tuning workers.

CPU only: lowering through TVM, keys without building.
"""
import pytest
from kernels.cuda import target
from kernels.seed import gemm_ir

import tile_nb
from tile_nb.lower import ENV_SWITCHES, LoweringOptionError, LoweringOptions, lower_with_plan, resolve
from tile_nb.lower import options as lo


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    lo.reset_options()
    yield
    lo.reset_options()


def test_every_field_has_a_default_a_doc_and_an_attribute():
    opts = LoweringOptions()
    assert opts.tma is None and opts.wgmma is True and opts.raster == 8 and opts.cluster == 0
    for f in lo.FIELDS.values():
        assert f.metadata["doc"] and f.metadata["attr"].startswith("tile_nb."), f.name
    assert len(ENV_SWITCHES) == 16 and "TILE_NB_TMA" in ENV_SWITCHES
    assert LoweringOptions.__doc__ and lo.LoweringOptions.__dataclass_params__.frozen


def test_values_are_typed_and_checked():
    assert LoweringOptions(tma=0).tma is False and LoweringOptions(raster="4").raster == 4
    with pytest.raises(LoweringOptionError, match=r"LoweringOptions.wgmma = None: expected True/False"):
        LoweringOptions(wgmma=None)
    with pytest.raises(LoweringOptionError, match=r"unknown lowering option 'tmaa'; the options are wgmma,"):
        LoweringOptions.from_dict({"tmaa": 1})


def test_the_environment_is_read_and_a_bad_value_names_its_variable(monkeypatch):
    monkeypatch.setenv("TILE_NB_TMA", "0")
    monkeypatch.setenv("TILE_NB_RASTER", "1")
    monkeypatch.setenv("TILE_NB_STREAM_K", "auto")
    assert LoweringOptions.from_environment() == {"tma": False, "raster": 1, "stream_k": None}
    assert lo.current().changed() == {"tma": False, "raster": 1}
    monkeypatch.setenv("TILE_NB_PERSISTENT", "maybe")
    with pytest.raises(LoweringOptionError, match=r"TILE_NB_PERSISTENT = 'maybe': expected 0, 1 or auto"):
        lo.current()


def test_precedence_attribute_kernel_process_environment_default(monkeypatch):
    func = gemm_ir(256, 256, 256)
    monkeypatch.setenv("TILE_NB_TMA", "1")
    monkeypatch.setenv("TILE_NB_RASTER", "2")
    assert resolve(func).tma is True and resolve(func).raster == 2
    with tile_nb.options(tma=False):
        assert resolve(func).tma is False and resolve(func).raster == 2
        assert resolve(func, {"tma": True}).tma is True
        assert resolve(func.with_attr("tile_nb.tma", 0), {"tma": True}).tma is False
        # a whole value sets every field: neither the process's options nor the environment apply
        assert resolve(func, LoweringOptions(cluster=2)) == LoweringOptions(cluster=2)
    assert resolve(func).tma is True


def test_set_options_counts_changes_and_the_key_follows():
    start = lo.generation()
    before = lo.current().key()
    tile_nb.set_options(stream_k=False)
    assert lo.generation() == start + 1 and lo.current().stream_k is False and lo.current().key() != before
    tile_nb.set_options()
    assert lo.current().stream_k is False  # kept
    with pytest.raises(LoweringOptionError, match="unknown lowering option"):
        tile_nb.set_options(streamk=False)
    lo.reset_options()
    assert lo.current().key() == before
    assert hash(LoweringOptions(tma=False).key()) == hash(LoweringOptions(tma=0).key())


def test_the_plan_follows_the_options_given():
    func = gemm_ir(1024, 1024, 1024)
    plan = lower_with_plan(func, target("sm_90a"), options=resolve(func, {"tma": False}))[1]
    assert plan.tma is None and plan.options.tma is False
    assert plan.refusal("tma").code == "tma.off"
    assert lower_with_plan(func, target("sm_90a"))[1].tma is not None


def test_compile_keys_differ_by_options_not_by_how_they_were_given(monkeypatch):
    from tile_nb.runtime.compile import cache_key

    func = gemm_ir(256, 256, 256)
    default = cache_key(func, "sm_90a")[0]
    off = cache_key(func, "sm_90a", lowering={"tma": False})[0]
    assert off != default
    monkeypatch.setenv("TILE_NB_TMA", "0")
    assert cache_key(func, "sm_90a")[0] == off
    # whole: the environment is out
    assert cache_key(func, "sm_90a", lowering=LoweringOptions())[0] == default
    monkeypatch.delenv("TILE_NB_TMA")
    with tile_nb.options(tma=False):
        assert cache_key(func, "sm_90a")[0] == off


def test_a_kernel_takes_options_and_refuses_unknown_names():
    @tile_nb.jit(options={"tma": False})
    def k(A):
        pass

    assert k.options == {"tma": False}
    with pytest.raises(LoweringOptionError, match=r"unknown lowering option 'tme'; the options are"):
        tile_nb.jit(options={"tme": 0})(lambda A: None)

    @tile_nb.jit(options=LoweringOptions(raster=1))
    def whole(A):
        pass

    assert whole.options == LoweringOptions(raster=1)


def test_changing_options_makes_the_jit_forget_its_launches():
    """The fast path does not look at the options: a change through tile_nb.set_options /
    tile_nb.options empties its tables, so the next call of a shape seen before goes through
    `_compiled`, keyed by the new options."""
    from kernels.seed import gemm_variant

    class Spec:
        launches = {("facts",): "old launch"}

    class Template:
        specializations = {(1,): Spec}

    gemm_variant._fast["kw"] = "entry"
    gemm_variant._templates["t"] = Template
    try:
        with tile_nb.options(tma=False):
            assert not gemm_variant._fast and Spec.launches == {}
    finally:
        gemm_variant._templates.pop("t")


def test_the_jit_compiles_again_under_other_options():
    from kernels.seed import gemm_variant

    shapes = dict(M=256, N=256, K=256, target="sm_90a", block_N=256, block_K=64, threads=256)
    with tile_nb.options(tma=False):
        plain = gemm_variant.compile(**shapes)
    tma = gemm_variant.compile(**shapes)
    assert plain.plan["pipeline_kind"] == "cp.async" and tma.plan["pipeline_kind"] == "tma"
    assert [r["code"] for r in plain.plan["refusals"]][:1] == ["tma.off"]


def test_a_job_carries_its_options_whole(monkeypatch):
    from tile_nb.bench.compile_worker import job_lowering

    monkeypatch.setenv("TILE_NB_TMA", "0")
    assert job_lowering({"lowering": LoweringOptions().to_dict()}) == LoweringOptions()
    assert job_lowering({"env": {"TILE_NB_CLUSTER": "2"}}) == LoweringOptions(cluster=2)


def test_the_plan_is_built_once_and_read_only():
    import dataclasses

    plan = lower_with_plan(gemm_ir(1024, 1024, 1024), target("sm_90a"))[1]
    for mapping in (plan.shared, plan.accumulators, plan.pipelines, plan.grid, plan.workspaces,
                    plan.fragments.layouts, plan.fragments.shared):
        with pytest.raises(TypeError):
            mapping[object()] = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tma = None
    assert isinstance(plan.refusals, tuple) and isinstance(plan.notes, tuple)
    assert plan.summary()["options"] == {} and plan.options == LoweringOptions()


def test_the_wgmma_descriptor_probe_is_an_option_the_emitter_follows():
    """`tile_nb.wgmma_swap_lbo_sbo` (benchmarks/gemm.py --probe) resolves like the other attributes into
    LoweringOptions; the emitter reads it there, and it changes only B's descriptor."""
    func = gemm_ir(256, 256, 256)  # B stored [K, N]: 64-column panels, the descriptor the probe swaps
    probe = func.with_attr("tile_nb.wgmma_swap_lbo_sbo", 1)
    assert resolve(func).wgmma_swap_lbo_sbo is False and resolve(probe).wgmma_swap_lbo_sbo is True
    default, _ = lower_with_plan(func, target("sm_90a"))
    swapped, plan = lower_with_plan(probe, target("sm_90a"))
    assert plan.options.changed() == {"wgmma_swap_lbo_sbo": True}
    pairs = zip(default.script().splitlines(), swapped.script().splitlines(), strict=True)
    changed = [new for old, new in pairs if old != new and "T.func_attr" not in new]
    assert changed and all("desc[1]" in line for line in changed)  # B's descriptor, nothing else
