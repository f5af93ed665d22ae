"""`tilelang.carver.arch.driver` on tile_nb: CUDA device facts, read from `torch.cuda.get_device_properties`.

Under `tile_nb.run --cpu` torch reports tile_nb's pretend device (tile_nb/tilelang/cpu_device.py): one device
of compute capability 9.0 with an H100 SXM's facts, so `get_num_sms()` is 132, `get_shared_memory_per_block()`
49152 bytes, `get_max_dynamic_shared_size_bytes()` 233472 (per SM) and `get_registers_per_block()` 65536. What
torch does not report (`get_persisting_l2_cache_max_size`, `get_device_attribute` of a raw attribute number)
raises UnsupportedTilelangAPI."""
from __future__ import annotations

from ..._support import forwarding_getattr, unsupported

__all__ = ["get_cuda_device_properties", "get_device_name", "get_num_sms", "get_shared_memory_per_block",
           "get_max_dynamic_shared_size_bytes", "get_registers_per_block", "get_persisting_l2_cache_max_size",
           "get_device_attribute"]

_UNITS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


def get_cuda_device_properties(device_id: int = 0):
    """torch's properties of CUDA device `device_id`, or None when torch sees no GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device_id)


def _properties(device_id: int, api: str):
    props = get_cuda_device_properties(device_id)
    if props is None:
        raise RuntimeError(
            f"tilelang.carver.arch.driver.{api}: torch sees no CUDA device (run on a GPU, or with "
            "`python -m tile_nb.run --cpu` for the interpreter's pretend cc 9.0 device)"
        )
    return props


def _scaled(value: int, format: str, api: str) -> int:
    if format not in _UNITS:
        raise ValueError(f"tilelang.carver.arch.driver.{api}(format=...): expected one of {sorted(_UNITS)}, "
                         f"got {format!r}")
    return int(value) // _UNITS[format]


def _field(props, names: tuple, api: str):
    for name in names:
        value = getattr(props, name, None)
        if value is not None:
            return value
    raise unsupported(f"tilelang.carver.arch.driver.{api}", f"torch's device properties have no {names[0]}")


def get_device_name(device_id: int = 0) -> str | None:
    props = get_cuda_device_properties(device_id)
    return props.name if props is not None else None


def get_num_sms(device_id: int = 0) -> int:
    """The number of streaming multiprocessors of the device."""
    return int(_properties(device_id, "get_num_sms").multi_processor_count)


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:
    """Static shared memory a block may use (48 KB on recent GPUs), in `format` units."""
    props = _properties(device_id, "get_shared_memory_per_block")
    return _scaled(_field(props, ("shared_memory_per_block",), "get_shared_memory_per_block"), format,
                   "get_shared_memory_per_block")


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:
    """Shared memory per multiprocessor (what tilelang reads, CUDA's attribute 81), in `format` units."""
    props = _properties(device_id, "get_max_dynamic_shared_size_bytes")
    return _scaled(_field(props, ("shared_memory_per_multiprocessor",), "get_max_dynamic_shared_size_bytes"),
                   format, "get_max_dynamic_shared_size_bytes")


def get_registers_per_block(device_id: int = 0) -> int:
    """32-bit registers a block may use (65536 on every GPU since compute capability 5.0; torch reports the
    same number per multiprocessor, which is what is read)."""
    props = _properties(device_id, "get_registers_per_block")
    return int(_field(props, ("regs_per_multiprocessor",), "get_registers_per_block"))


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    raise unsupported("tilelang.carver.arch.driver.get_persisting_l2_cache_max_size",
                      "torch does not report it and tile_nb reads device facts from torch")


def get_device_attribute(attr: int, device_id: int = 0) -> int:
    raise unsupported("tilelang.carver.arch.driver.get_device_attribute",
                      f"a raw cudaDeviceAttr ({attr}); tile_nb reads device facts from torch's properties")


__getattr__ = forwarding_getattr(__name__, "tilelang.carver.arch.driver", {})
