"""Differential tests, CPU tier (tests/difftest/README.md): kernels generated from a grammar of the tile
language run on the interpreter against a torch model of the grammar, then compile for sm_90a and sm_80
(lower + nvcc + ptxas -v) without a GPU. A failure prints the kernel's spec
and writes a standalone reproducer.

Derandomized by default (the same kernels every run); DIFFTEST_EXAMPLES / DIFFTEST_RANDOM fuzz more.
CI runs this module as its own step (.ci/run); the unit-test run deselects it (-m "not difftest")."""
import pytest

hypothesis = pytest.importorskip("hypothesis")  # the GPU machine has none: this module then skips there

from difftest import FAMILIES, render
from difftest.known import KNOWN
from difftest.runners import hypothesis_settings, report, run_cpu, spec_strategy

pytestmark = pytest.mark.difftest


def _compiler() -> bool:
    from tile_nb.backend.cuda_compile import available_compiler

    return available_compiler() is not None


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_pattern(name):
    compile_ = _compiler()
    report(run_cpu(render(KNOWN[name]), compile_=compile_), "cpu",
           rerun=f"python -m pytest -p no:nbval 'tests/test_difftest_cpu.py::test_known_pattern[{name}]'")
    if not compile_:
        pytest.skip("interpreter vs model passed; the compile checks need nvcc or NVRTC, and neither is here")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generated_kernels(family):
    compile_ = _compiler()

    @hypothesis_settings("cpu")
    @hypothesis.given(spec=spec_strategy(family))
    def check(spec):
        report(
            run_cpu(render(spec), compile_=compile_),
            "cpu",
            rerun="python -m pytest -p no:nbval "
                  f"'tests/test_difftest_cpu.py::test_generated_kernels[{family}]' "
            "(derandomized: the same draws every run), or the reproducer",
        )

    check()
    if not compile_:
        pytest.skip("interpreter vs model passed; the compile checks need nvcc or NVRTC, and neither is here")
