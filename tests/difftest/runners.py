"""The two tiers, their hypothesis settings, and what a failure reports.

CPU tier (no GPU): the interpreter against the torch model, then lower + build for sm_90a and sm_80 (nvcc,
ptxas -v): each must compile, or be refused with a clear error, within the resource limits of check.py.
GPU tier: the compiled kernel on CUDA tensors against the interpreter on the same inputs.

Settings (environment):
    DIFFTEST_EXAMPLES=N   examples per family (default: CPU tier 14 hypothesis draws, GPU tier seeds 0..24)
    DIFFTEST_RANDOM=1     a fresh random draw each run (default: derandomized, the same kernels every run)
    DIFFTEST_SHRINK=1     let hypothesis shrink a failing kernel (slow: every candidate compiles)
    DIFFTEST_OUT=DIR      where reproducers are written (default: <tmp>/tile_nb_difftest)
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

from . import check
from .case import Case
from .choose import HypothesisChooser
from .families import FAMILIES

__all__ = ["Outcome", "DifftestRefusal", "hypothesis_settings", "run_cpu", "run_gpu", "spec_strategy",
           "report"]

TARGETS = ("sm_90a", "sm_80")
DEFAULT_EXAMPLES = {"cpu": 14}


class DifftestRefusal(UserWarning):
    """A generated kernel the lowering refused with a clear error: not a failure, but listed."""


@dataclass
class Outcome:
    case: Case
    problems: list = field(default_factory=list)    # failures, one line each (with details)
    refusals: list = field(default_factory=list)    # (target, message)
    resources: dict = field(default_factory=dict)   # target -> resource summary
    skipped: str | None = None                      # why the case could not run at all

    @property
    def ok(self) -> bool:
        return not self.problems


def spec_strategy(family: str):
    """A hypothesis strategy of `family`'s specs (the falsifying example prints as the spec's repr)."""
    from hypothesis import strategies as st

    module = FAMILIES[family]
    return st.composite(lambda draw: module.draw(HypothesisChooser(draw)))()


def hypothesis_settings(tier: str):
    """Per-tier settings: derandomized unless DIFFTEST_RANDOM=1; no shrinking unless DIFFTEST_SHRINK=1 (each
    kernel costs a compile); no deadline (compile times vary with the machine's load)."""
    from hypothesis import HealthCheck, Phase, settings

    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if os.environ.get("DIFFTEST_SHRINK") == "1":
        phases.append(Phase.shrink)
    randomized = os.environ.get("DIFFTEST_RANDOM") == "1"
    return settings(
        max_examples=int(os.environ.get("DIFFTEST_EXAMPLES") or DEFAULT_EXAMPLES[tier]),
        deadline=None,
        derandomize=not randomized,
        database=None if not randomized else settings.default.database,
        phases=phases,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _load(case: Case, outcome: Outcome):
    try:
        return case.load()
    except Exception as err:  # noqa: BLE001 - a kernel that does not elaborate is a finding too
        kind = check.classify_compile_error(err)
        if kind == "refused":
            outcome.refusals.append(("elaborate", check.describe_refusal(err)))
        else:
            outcome.problems.append(f"defining the kernel raised {type(err).__name__}: {err}")
        return None


def run_cpu(case: Case, targets=TARGETS, compile_: bool = True) -> Outcome:
    """Interpreter vs model, then compile for each target."""
    outcome = Outcome(case)
    ns = _load(case, outcome)
    if ns is None:
        return outcome
    problems, _ = check.check_interpreter(ns)
    outcome.problems += problems
    if compile_:
        for target in targets:
            kind, detail = check.check_compile(ns, target)
            if kind == "ok":
                outcome.resources[target] = detail
            elif kind == "refused":
                outcome.refusals.append((target, detail))
            else:
                outcome.problems.append(f"compile for {target}: {kind}: {detail}")
    return outcome


# A kernel that faults (illegal address) leaves the CUDA context unusable for the rest of the process: later
# cases are skipped with the name of the culprit instead of failing for its reason.
_broken_context: str | None = None


def run_gpu(case: Case) -> Outcome:
    """The compiled kernel on the GPU against the interpreter (and the interpreter against the model)."""
    global _broken_context
    outcome = Outcome(case)
    if _broken_context is not None:
        outcome.skipped = f"the CUDA context is unusable since {_broken_context} faulted; rerun from there"
        return outcome
    ns = _load(case, outcome)
    if ns is None:
        return outcome
    problems, interp_outputs = check.check_interpreter(ns)
    outcome.problems += problems
    if not interp_outputs:
        return outcome
    try:
        ns["KERNEL"].compile(*ns["make_inputs"]("cpu"))
    except Exception as err:  # noqa: BLE001
        if check.classify_compile_error(err) == "refused":
            outcome.refusals.append(("device", check.describe_refusal(err)))
        else:
            outcome.problems.append(f"compile for the device raised {type(err).__name__}: {err}")
        return outcome
    outcome.problems += check.check_gpu(ns, interp_outputs)
    if any("GPU run raised" in p and ("illegal" in p or "CUDA error" in p) for p in outcome.problems):
        _broken_context = f"{case.family} kernel {case.kernel_name} ({case.spec!r})"
    return outcome


def report(outcome: Outcome, tier: str, rerun: str | None = None) -> None:
    """Warn about refusals; on failure write the reproducer and raise an AssertionError that says everything
    (`rerun`: the command that regenerates this kernel, where there is one)."""
    __tracebackhide__ = True
    case = outcome.case
    if outcome.skipped:
        import pytest

        pytest.skip(outcome.skipped)
    for target, message in outcome.refusals:
        warnings.warn(DifftestRefusal(f"{case.family} kernel refused for {target}: {message}"), stacklevel=2)
    if outcome.ok:
        return
    path = case.write_reproducer()
    lines = [f"difftest {tier} tier: {case.family} kernel {case.kernel_name} failed",
             f"spec: {case.spec!r}"]
    lines += [f"note: {n}" for n in case.notes]
    lines += [f"problem: {p}" for p in outcome.problems]
    lines += [f"reproducer (plain python): {path}"]
    lines += [f"rerun: {rerun}"] if rerun else []
    lines += ["kernel:", case.kernel_source]
    raise AssertionError("\n".join(lines))
