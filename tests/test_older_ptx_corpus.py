"""Every kernel of the architecture matrix (benchmarks/results/architectures.md: the corpus and three
configurations for the smaller GPUs) built for sm_75 / sm_80 / sm_89 and run on the H200 as PTX of that
virtual architecture (`compute_75`, `compute_80`, `compute_89`: the driver compiles it), compared with a
float64 torch reference; a kernel refused for that architecture must be refused with the matrix's expected
reason (issue 35: the table's "ran on the H200 as PTX and agreed with torch" column; docs/architectures.md).

Tiers:
- CPU: the inputs made for each kernel have the names, shapes and dtypes of its specialization's parameters;
  the torch references agree with the CPU interpreter running the same kernel families at small sizes;
  each compute_XY lowering refuses exactly what the matrix refuses for sm_XY; the JUnit reader that prints
  the table.
- GPU (`gpu`, the H200; written, not run yet): the (kernel, compute_XY) matrix.

`python tests/test_older_ptx_corpus.py RUN.xml` prints the table from the JUnit XML of a GPU run
(`python -m pytest -m gpu tests/test_older_ptx_corpus.py --junitxml RUN.xml`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from kernels import arch_matrix, arch_runs  # noqa: E402
from kernels.corpus import SM_COUNT  # noqa: E402

PTX_ARCHS = ("compute_75", "compute_80", "compute_89")
NAMES = sorted(arch_runs.RUNS)
GPU_TEST = "test_runs_as_older_ptx_and_agrees_with_torch"


def _sm(arch: str) -> str:
    return "sm_" + arch.removeprefix("compute_")


# ---------------------------------------------------------------------------------------------- CPU

def test_every_kernel_of_the_matrix_has_inputs_and_a_reference():
    assert set(arch_runs.RUNS) == set(arch_matrix.kernels())
    assert {r.family for r in arch_runs.RUNS.values()} == set(arch_runs.FAMILIES)


@pytest.mark.parametrize("name", NAMES)
def test_the_inputs_match_the_parameters_of_the_specialization(name):
    """Names, shapes and dtypes in parameter order (tensors on "meta": no memory); a T.dynamic dim takes one
    size across the parameters."""
    import torch

    func = arch_matrix.kernels()[name]()
    inputs = arch_runs.make_inputs(name, "meta")
    assert [p.name for p in func.params] == list(inputs), name
    dynamic = {}
    for p, t in zip(func.params, inputs.values(), strict=True):
        assert t.dtype == getattr(torch, str(p.dtype)), (name, p.name, t.dtype, p.dtype)
        assert len(p.shape) == t.dim(), (name, p.name, list(p.shape), tuple(t.shape))
        for dim, size in zip(p.shape, t.shape, strict=True):
            if hasattr(dim, "value"):
                assert int(dim.value) == size, (name, p.name, list(p.shape), tuple(t.shape))
            else:  # T.dynamic: any size, the same wherever the dim appears
                assert dynamic.setdefault(dim.name, size) == size, (name, p.name, dim.name, dynamic)
    assert not dynamic or set(dynamic) <= set(arch_runs.RUNS[name].sizes), dynamic


def _interpreter_cases():
    seen = {}
    for name in NAMES:
        run = arch_runs.RUNS[name]
        seen.setdefault((run.family, tuple(sorted(run.options.items()))), name)
    return sorted(seen.values())


@pytest.mark.parametrize("name", _interpreter_cases())
def test_the_reference_agrees_with_the_interpreter(name):
    """Each (family, options) of the table at the family's small sizes (off the tiles) on the CPU interpreter:
    the reference the GPU test holds the kernel to is the kernel's own semantics."""
    run = arch_runs.RUNS[name]
    family = arch_runs.FAMILIES[run.family]
    inputs = arch_runs.make_inputs(name, "cpu", seed=1, sizes=family.small)
    family.kernel(*inputs.values(), **run.options)
    arch_runs.check(name, inputs)


def test_a_wrong_reference_would_fail():
    """The checks can fail: a transposed B, a missing causal mask and one changed int8 element are caught."""
    import torch

    inputs = arch_runs.make_inputs("gemm_fp16_out_trans_B_1024", "cpu", sizes=dict(M=40, N=40, K=40))
    a, b = inputs["A"].double(), inputs["B"].double()
    inputs["C"].copy_(a @ b)  # B used as [K, N]: the wrong product
    with pytest.raises(AssertionError, match="relative error"):
        arch_runs.check("gemm_fp16_out_trans_B_1024", inputs)
    inputs["C"].copy_(a @ b.T)
    arch_runs.check("gemm_fp16_out_trans_B_1024", inputs)

    small = arch_runs.FAMILIES["flash_attention"].small
    inputs = arch_runs.make_inputs("flash_attention_d128_causal_sm90a", "cpu", sizes=small)
    inputs["O"].copy_(arch_runs.FAMILIES["flash_attention"].reference(inputs, {}))  # not causal
    with pytest.raises(AssertionError, match="relative error"):
        arch_runs.check("flash_attention_d128_causal_sm90a", inputs)

    inputs = arch_runs.make_inputs("gemm_int8_4096_sm90a", "cpu", sizes=dict(M=8, N=8, K=16))
    inputs["C"].copy_(inputs["A"].int() @ inputs["B"].int().T)
    arch_runs.check("gemm_int8_4096_sm90a", inputs)
    inputs["C"][3, 5] += 1
    with pytest.raises(AssertionError, match="1 of 64 elements differ"):
        arch_runs.check("gemm_int8_4096_sm90a", inputs)
    assert not torch.isnan(arch_runs.make_inputs("rowwise_add_bias_sm80", "cpu")["X"]).any()


@pytest.mark.parametrize("arch", PTX_ARCHS)
def test_a_compute_target_refuses_what_the_matrix_refuses_for_its_sm_arch(arch):
    """The lowering alone (no nvcc): compute_XY builds exactly the kernels the matrix builds for sm_XY, and
    refuses the others with the same reason, so the GPU test's refusal branch holds before any GPU runs it."""
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import LoweringError, LoweringOptions, lower

    expected, wrong = arch_matrix.expected(), []
    for name, make in sorted(arch_matrix.kernels().items()):
        want = expected.get((name, _sm(arch)))
        try:
            lower(make(), resolve_target(arch), LoweringOptions(sm_count=SM_COUNT))
            got = None
        except LoweringError as err:
            got = str(err)
        if (want is None) != (got is None) or (want is not None and want not in got):
            wrong.append(f"{name}: expected {want or 'a build'!r}, got {got or 'a build'!r}")
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------------------------- GPU (H200)

@pytest.mark.gpu
@pytest.mark.parametrize("name, arch", [(n, a) for n in NAMES for a in PTX_ARCHS])
def test_runs_as_older_ptx_and_agrees_with_torch(name, arch):
    """Build for compute_XY (the sm_XY lowering, handed to the driver as PTX), run on the GPU at the
    specialization the matrix built, compare with torch; or check the refusal is the one the matrix expects
    for sm_XY, and skip with it."""
    import torch

    from tile_nb.lower import LoweringError, LoweringOptions
    from tile_nb.runtime import compile as rt_compile

    expected = arch_matrix.expected().get((name, _sm(arch)))
    func = arch_matrix.kernels()[name]()
    try:
        kernel = rt_compile(func, arch, options={"cache": False}, lowering=LoweringOptions(sm_count=SM_COUNT))
    except LoweringError as err:
        assert expected is not None, f"{name} for {arch} was refused, expected to build: {err}"
        assert expected in str(err), f"{name} for {arch}: expected a refusal with {expected!r}, got: {err}"
        pytest.skip("refused: " + str(err).splitlines()[0])
    assert expected is None, f"{name} for {arch} built, but a refusal with {expected!r} was expected"
    assert kernel.not_launchable_reason is None, kernel.not_launchable_reason
    inputs = arch_runs.make_inputs(name, "cuda")
    kernel(*inputs.values())
    torch.cuda.synchronize()
    arch_runs.check(name, inputs)


# ---------------------------------------------------------------------------------------------- the table

def outcomes(junit_xml: str) -> dict:
    """(kernel, arch) -> the outcome of the GPU test in a pytest JUnit XML file: "ran as PTX, agreed with
    torch", "refused: <reason>", "FAILED: <first line>" or "skipped: <reason>"."""
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        test = case.get("name", "")
        if not test.startswith(GPU_TEST + "["):
            continue
        name, arch = test[len(GPU_TEST) + 1:-1].rsplit("-", 1)
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        if failed is not None:
            out[name, arch] = "FAILED: " + (failed.get("message") or "").splitlines()[0][:100]
        elif skipped is not None:
            reason = (skipped.get("message") or "").removeprefix("Skipped: ")
            out[name, arch] = reason if reason.startswith("refused: ") else "skipped: " + reason
        else:
            out[name, arch] = "ran as PTX, agreed with torch"
    return out


def table(results: dict) -> str:
    lines = ["| kernel | " + " | ".join(PTX_ARCHS) + " |", "|---|" + "---|" * len(PTX_ARCHS)]
    for name in NAMES:
        cells = (results.get((name, a), "not run").replace("|", "/") for a in PTX_ARCHS)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_the_table_reads_a_junit_file(tmp_path):
    xml = tmp_path / "run.xml"
    prefix = f'<testcase classname="tests.test_older_ptx_corpus" name="{GPU_TEST}'
    xml.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        f'{prefix}[gemm_bf16_1024-compute_80]" time="1.0"/>'
        f'{prefix}[gemm_bf16_1024-compute_75]" time="0.1"><skipped type="pytest.skip" '
        'message="refused: A_shared is bfloat16: the target sm_75 lacks bfloat16">...</skipped></testcase>'
        f'{prefix}[rowwise_add_bias_sm80-compute_89]" time="0.1"><failure message="AssertionError: 3 of 9 '
        'elements differ&#10;more">...</failure></testcase>'
        '<testcase classname="x" name="test_other[a-b]" time="0"/>'
        '</testsuite></testsuites>'
    )
    results = outcomes(str(xml))
    assert results == {
        ("gemm_bf16_1024", "compute_80"): "ran as PTX, agreed with torch",
        ("gemm_bf16_1024", "compute_75"): "refused: A_shared is bfloat16: the target sm_75 lacks bfloat16",
        ("rowwise_add_bias_sm80", "compute_89"): "FAILED: AssertionError: 3 of 9 elements differ",
    }
    printed = table(results).splitlines()
    assert printed[0] == "| kernel | compute_75 | compute_80 | compute_89 |"
    assert len(printed) == 2 + len(NAMES)
    assert ("| gemm_bf16_1024 | refused: A_shared is bfloat16: the target sm_75 lacks bfloat16 "
            "| ran as PTX, agreed with torch | not run |") in printed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} RUN.xml  (pytest -m gpu {__file__} --junitxml RUN.xml)")
    print(table(outcomes(sys.argv[1])))
