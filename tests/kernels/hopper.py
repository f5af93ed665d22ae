"""Whether a GPU test gets the Hopper plan it asserts (TMA pipelines, wgmma, persistent CTAs, TMA stores):
an sm_90 device and the sm_90a target. `TILE_NB_ARCH=compute_80` (docs/GPU.md) runs older GPUs' code as
PTX on the same device; such a run builds none of that, so the tests that assert it skip, saying why,
instead of failing (their kernels' results are checked by the tests that do not assert the plan)."""
import pytest
import torch


def why_no_hopper_plan() -> str | None:
    """None where the tests get the Hopper plan, else the reason."""
    if not torch.cuda.is_available():
        return "needs an sm_90 GPU; torch sees no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        return f"asserts the Hopper plan: needs an sm_90 GPU, not sm_{major}{minor}"
    from tile_nb.backend.target import resolve_target, target_label

    label = target_label(resolve_target(None))
    if label != "sm_90a":
        return f"asserts the Hopper plan (TMA, wgmma), which the {label} target (TILE_NB_ARCH) does not build"
    return None


_WHY = why_no_hopper_plan()
needs_hopper_plan = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
