"""`tilelang.language.fp8` on tile_nb: the FP8 dtypes of NVIDIA GPUs (tile_nb targets CUDA only)."""
from __future__ import annotations


def determine_fp8_type(fp8_format: str = "e4m3"):
    """The tile_nb FP8 dtype for `fp8_format` ("e4m3" -> float8_e4m3fn, "e5m2" -> float8_e5m2)."""
    from ... import language as T

    if fp8_format not in ("e4m3", "e5m2"):
        raise ValueError(f"Unsupported FP8 format: {fp8_format}")
    return T.float8_e4m3fn if fp8_format == "e4m3" else T.float8_e5m2


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    """The torch dtype of `determine_fp8_type(fp8_format)`."""
    import torch

    return torch.float8_e4m3fn if fp8_format == "e4m3" else torch.float8_e5m2
