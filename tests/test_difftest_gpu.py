"""Differential tests, GPU tier (tests/difftest/README.md): each generated kernel compiled for the GPU and run
on CUDA tensors, compared with the interpreter on the same inputs (bitwise for copies, integer ops, fills and
integer-valued sums/GEMMs; within the README's tolerances for float math), and the interpreter with the model.

Kernels come from integer seeds (not hypothesis, which the GPU machine lacks): seed n of a family is the
kernel `PYTHONPATH=tests python -m difftest --show <family> <n>` prints, on any machine. DIFFTEST_EXAMPLES
seeds per family (default 25: with the known patterns about 170 compiles, ~3 minutes). A failure prints the
seed and the kernel's spec and writes a standalone reproducer."""
import os

import pytest
from difftest import FAMILIES, RandomChooser, render
from difftest.known import KNOWN
from difftest.runners import report, run_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.difftest]

SEEDS = range(int(os.environ.get("DIFFTEST_EXAMPLES") or 25))


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_pattern_on_gpu(name):
    report(
        run_gpu(render(KNOWN[name])),
        "gpu",
        rerun=f"python -m pytest -p no:nbval 'tests/test_difftest_gpu.py::test_known_pattern_on_gpu[{name}]'",
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generated_kernel_on_gpu(family, seed):
    module = FAMILIES[family]
    report(run_gpu(module.render(module.draw(RandomChooser(seed)))), f"gpu (seed {seed})",
           rerun=f"PYTHONPATH=tests python -m difftest --tier gpu --family {family} --seeds {seed}")
