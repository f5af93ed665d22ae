"""Comparing a kernel's output with torch's: the relative error, and seeded generators for the inputs."""
import torch


def rel_err(out, expected) -> float:
    """||out - expected|| / ||expected|| in float64 on the CPU; a NaN in `out` (an element left unwritten)
    fails."""
    out, expected = out.double().cpu(), expected.double().cpu()
    assert not torch.isnan(out).any(), "output has NaNs (unwritten or wrong)"
    return (torch.linalg.norm(out - expected) / torch.linalg.norm(expected)).item()


def seeded(seed):
    """A CPU generator seeded with `seed`: the same inputs every run, so a failure can be re-run."""
    return torch.Generator().manual_seed(seed)


# Hopper's 8-bit float wgmma adds its products with fewer bits than float32 (docs/IR.md, "8-bit floats":
# measured worst 2^-10.4 of sum |a b| at K = 16384), so its results are held to this share of sum |a b|.
FP8_WGMMA_ACCUMULATION = 2.0 ** -9


def assert_within_fp8_wgmma_bound(out, a, b_t):
    """|out - a b_t| <= 2^-9 sum_k |a b| + one float32 rounding, elementwise, against the float64 product of
    the same 8-bit values (`b_t` is B as [K, N])."""
    a, b_t = a.double().cpu(), b_t.double().cpu()
    exact = a @ b_t
    bound = FP8_WGMMA_ACCUMULATION * (a.abs() @ b_t.abs()) + 2.0 ** -24 * exact.abs()
    got = out.double().cpu()
    assert not torch.isnan(got).any(), "unwritten (NaN) output elements"
    worst = float(((got - exact).abs() / (bound + 1e-30)).max())
    assert worst <= 1.0, f"error reaches {worst:.2f} of the 8-bit wgmma bound"
