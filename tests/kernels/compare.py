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
