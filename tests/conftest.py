"""Test tiers: CPU by default; `gpu` tests run only where torch sees a CUDA device."""
import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    """Memoized probe that never raises."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken torch install means no GPU tier
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none is present on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
