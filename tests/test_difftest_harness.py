"""The differential-test harness itself (tests/difftest): it must report a wrong kernel, a stray write into an
output's guard zone and a GPU-side difference, and its reproducers must run with plain python. Fast: these run
with the unit tests."""
import dataclasses
import os
import subprocess
import sys

import torch
from difftest import FAMILIES, RandomChooser, check, render
from difftest.case import GUARD
from difftest.families.copies import CopySpec
from difftest.families.loops import LoopSpec

COPY = CopySpec(shape=(37, 20), tile=(16, 8), src_off=(-1, 2), path=("shared", "fragment"),
                dtypes=("float16", "float16", "float32", "float16"))


def test_a_correct_kernel_passes():
    problems, outputs = check.check_interpreter(render(COPY).load())
    assert problems == [] and set(outputs) == {"Y", "Y outside its view"}


def test_a_wrong_kernel_is_reported_with_the_differing_elements():
    case = render(COPY)
    wrong = case.kernel_source.replace("b0 * 16 - 1, b1 * 8 + 2", "b0 * 16, b1 * 8 + 2")
    assert wrong != case.kernel_source
    problems, _ = check.check_interpreter(dataclasses.replace(case, kernel_source=wrong).load())
    assert len(problems) == 1 and problems[0].startswith("interpreter vs model, output Y:")
    assert "elements differ (exact)" in problems[0]


def test_a_write_into_the_guard_zone_shows():
    ns = render(COPY).load()
    args, before, result = check.run_case(ns, "cpu")
    expected = check.expect(ns, args, before, ns["model"](*ns["make_inputs"]("cpu")))
    assert set(expected) == {"Y", "Y outside its view"}
    assert all(
        check.compare(v, expected[k], check.EXACT) is None for k, v in check.observe(ns, args, result).items()
    )
    check.base_of(args[1])[GUARD - 1] = 1.0   # a stray store at Y[-1], as an unguarded copy would make
    actual = check.observe(ns, args, result)
    assert check.compare(actual["Y"], expected["Y"], check.EXACT) is None
    diff = check.compare(actual["Y outside its view"], expected["Y outside its view"], check.EXACT)
    assert (
        diff is not None and diff.startswith("1 of 128 elements differ") and "got 1.0, expected nan" in diff
    )


def test_close_rule_scales_with_the_operands_and_matches_nan_and_inf():
    e = torch.tensor([1.0, 1000.0, float("nan"), float("inf")])
    rule = {"kind": "close", "rtol": 1e-3, "atol": 1e-3}
    assert check.compare(e + torch.tensor([5e-4, 0.5, 0.0, 0.0]), e, rule) is None
    assert check.compare(e + torch.tensor([5e-3, 0.0, 0.0, 0.0]), e, rule) is not None
    assert check.compare(torch.tensor([1.0, 1000.0, 1.0, float("inf")]), e, rule) is not None


def test_gpu_comparison_plumbing_runs_on_the_cpu():
    ns = render(COPY).load()
    problems, outputs = check.check_interpreter(ns)
    assert problems == [] and check.check_gpu(ns, outputs, device="cpu") == []
    shifted = dict(outputs, Y=outputs["Y"].clone())
    shifted["Y"][3, 4] += 1
    found = check.check_gpu(ns, shifted, device="cpu")
    assert len(found) == 1 and "GPU vs interpreter, output Y: 1 of" in found[0] and "[3, 4]" in found[0]
    assert "GPU vs model: agrees" in found[0]


def test_every_family_draws_and_renders_kernels_that_elaborate():
    for family, module in FAMILIES.items():
        for seed in range(3):
            case = module.render(module.draw(RandomChooser(seed)))
            ns = case.load()
            assert (
                callable(ns["KERNEL"]) and ns["KERNEL"].specialize(*ns["make_inputs"]("cpu")) is not None
            ), family


def test_the_same_seed_gives_the_same_kernel():
    for module in FAMILIES.values():
        assert module.draw(RandomChooser(11)) == module.draw(RandomChooser(11))


def test_reproducer_runs_with_plain_python(tmp_path):
    case = render(LoopSpec(rows=3, length=10, outer=("range", 2, 9, 3)))
    wrong = dataclasses.replace(case, kernel_source=case.kernel_source.replace("% 1009", "% 1013"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for c, rc in ((case, 0), (wrong, 1)):
        path = c.write_reproducer(str(tmp_path))
        run = subprocess.run(
            [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == rc, run.stdout + run.stderr
        assert ("interpreter vs model: ok" if rc == 0 else "interpreter vs model: FAILED") in run.stdout
