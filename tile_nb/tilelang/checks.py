"""The errors a run's reference checks saw: `tile_nb.run` wraps `torch.testing.assert_close` /
`torch.allclose` to call `record_error`, and so does the stand-in profiler's `assert_allclose`; the
conformance runner reports the largest."""
from __future__ import annotations

__all__ = ["errors", "failed", "record_error"]

errors: list[float] = []
# the first line of each torch.testing.assert_close that raised, caught by the script or not: an example that
# catches its check's failure and prints "failed" has still failed
failed: list[str] = []


def record_error(actual, expected) -> None:
    """Note the largest finite absolute difference of a check (never raises: an observation only)."""
    try:
        import torch

        a = torch.as_tensor(actual).detach().to("cpu", torch.float64)
        e = torch.as_tensor(expected).detach().to("cpu", torch.float64)
        diff = (a - e).abs()
        finite = diff[torch.isfinite(diff)]
        if finite.numel():
            errors.append(float(finite.max()))
    except Exception:  # never change what the check itself does
        pass
