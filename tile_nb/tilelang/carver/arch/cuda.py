"""`tilelang.carver.arch.CUDA` on tile_nb: the GPU a kernel is built for, described with the facts tile_nb's
lowering and its GEMM heuristic use.

    arch = CUDA("cuda")      # the arch every compile picks: TILE_NB_ARCH, else the GPU here, else sm_90a
    arch.arch, arch.compute_max_core, arch.smem_cap     # "sm_90a", 132, 232448

The arch comes from `tile_nb.backend.target.resolve_target`. Counts (SMs, L2, shared memory per SM) come from
torch's device properties when the GPU in this process is of that arch; otherwise (no GPU, or a target for
another GPU) from a reference GPU of that arch (an H100 SXM for sm_90, an A100 SXM for sm_80), and
`has_device` is False and `source` says so. `smem_cap` is the shared memory a block may use under tile_nb's
lowering (its budget check, tile_nb/lower/analysis/budget.py), capped by what the device reports. Peaks
(dense 16-bit tensor-core TFLOP/s, DRAM GB/s) are datasheet numbers of the GPUs named below; None elsewhere.
AMD devices (`CDNA`, `RDNA`), Apple `METAL` and `CPU` are refused: tile_nb builds CUDA only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..._support import unsupported
from . import driver

__all__ = ["CUDA", "CDNA", "RDNA", "METAL", "CPU", "TileDevice", "get_arch", "auto_infer_current_arch",
           "is_cuda_arch", "is_volta_arch", "is_ampere_arch", "is_ada_arch", "is_hopper_arch",
           "is_cdna_arch", "is_rdna_arch", "is_metal_arch", "is_cpu_arch", "has_mma_support",
           "is_tensorcore_supported_precision"]


@dataclass(frozen=True)
class _Reference:
    name: str
    sms: int
    l2_bytes: int
    smem_per_sm: int
    tflops: float | None    # dense float16/bfloat16 tensor-core peak, float32 accumulation
    gbps: float | None      # DRAM bandwidth


# Datasheet facts (NVIDIA's H200, H100 and A100 product briefs).
_BY_SM = {
    90: _Reference("NVIDIA H100 SXM", 132, 50 * 2**20, 228 * 1024, 989.0, 3350.0),
    80: _Reference("NVIDIA A100 SXM 80GB", 108, 40 * 2**20, 164 * 1024, 312.0, 2039.0),
}
# (name substring, tflops, GB/s), first match wins: peaks of a present device by its name.
_BY_NAME = (("H200", 989.0, 4800.0), ("H100 PCIe", 756.0, 2000.0), ("H100", 989.0, 3350.0),
            ("A100-PCIE-40GB", 312.0, 1555.0), ("A100-SXM4-40GB", 312.0, 1555.0), ("A100", 312.0, 2039.0))


class TileDevice:
    """What the carver's templates read of a device."""

    platform = "unknown"


class CUDA(TileDevice):
    """An NVIDIA GPU (see the module docstring). `target`: "cuda", "sm_80", "cuda -arch=sm_80", a dict or a
    tvm Target; `device_id`: the torch device whose facts are read."""

    platform = "CUDA"

    def __init__(self, target="cuda", device_id: int = 0):
        from ....backend.target import resolve_target, target_arch
        from ....lower.analysis.arch import ArchCaps

        try:
            self.target = resolve_target(target)
        except (ValueError, TypeError) as err:
            raise ValueError(f"tilelang.carver.arch.CUDA(target=...): {err}") from None
        self.arch = target_arch(self.target)
        self.caps = ArchCaps.of(self.arch)
        self.sm_version = self.caps.sm
        self.compute_capability = str(self.caps.sm)
        self.warp_size = 32
        self.reg_cap = 65536
        self.sm_partition = 4
        self.transaction_size = [32, 128]
        props = driver.get_cuda_device_properties(device_id)
        here = props is not None and props.major * 10 + props.minor == self.caps.sm
        ref = _BY_SM.get(self.caps.sm)
        self.has_device = here
        if here:
            self.name = props.name
            self.compute_max_core = int(props.multi_processor_count)
            self.l2_cache_size_bytes = int(getattr(props, "L2_cache_size", 0) or (ref.l2_bytes if ref else 0))
            self.smem_per_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0)
                                   or (ref.smem_per_sm if ref else 0))
            optin = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
            self.source = f"device {device_id} ({props.name})"
        elif ref is not None:
            self.name = ref.name
            self.compute_max_core, self.l2_cache_size_bytes, self.smem_per_sm = ref.sms, ref.l2_bytes, \
                ref.smem_per_sm
            optin = 0
            why = "no GPU here" if props is None else f"the GPU here is sm_{props.major}{props.minor}"
            self.source = f"{self.arch} target, {why}: facts of a reference {ref.name}"
        else:
            why = "no GPU here" if props is None else f"the GPU here is sm_{props.major}{props.minor}"
            raise ValueError(
                f"tilelang.carver.arch.CUDA: {why}, and tile_nb has reference facts (SM count, shared "
                f"memory) for sm_80 and sm_90 only, not {self.arch}; run on that GPU or pick a target "
                f"of those (CUDA('sm_90a'))")
        self.smem_cap = min(self.caps.max_shared_bytes, optin) if optin else self.caps.max_shared_bytes
        self.max_smem_usage = self.smem_cap
        self.peak_tflops, self.bandwidth_GBps = self._peaks(ref)

    def _peaks(self, ref) -> tuple[float | None, float | None]:
        if self.has_device:
            for key, tflops, gbps in _BY_NAME:
                if key in self.name:
                    return tflops, gbps
            if ref is not None and self.name.startswith("tile_nb interpreter"):  # --cpu's pretend H100
                return ref.tflops, ref.gbps
            return None, None
        return (ref.tflops, ref.gbps) if ref is not None else (None, None)

    @property
    def device(self):
        """torch's properties of the device described (None when the facts are a reference GPU's)."""
        return driver.get_cuda_device_properties() if self.has_device else None

    def get_avaliable_tensorintrin_shapes(self) -> list:
        """The MMA shapes tile_nb's lowering emits for this arch ([m, n, k] of a 16-bit product)."""
        shapes = [[16, 8, 16]] if self.caps.mma_k16 else [[16, 8, 8]]
        return ([[64, 256, 16]] if self.caps.wgmma else []) + shapes

    def __repr__(self) -> str:
        return (f"CUDA({self.arch}: {self.name}, {self.compute_max_core} SMs, {self.smem_cap // 1024} KiB "
                f"shared per block; {self.source if not self.has_device else 'the GPU here'})")


def _refused(name: str, why: str):
    class Refused(TileDevice):
        def __init__(self, *args, **kwargs):
            raise unsupported(f"tilelang.carver.arch.{name}", why)

    Refused.__name__ = Refused.__qualname__ = name
    return Refused


CDNA = _refused("CDNA", "AMD Instinct GPUs; tile_nb builds CUDA only: use CUDA('cuda')")
RDNA = _refused("RDNA", "AMD Radeon GPUs; tile_nb builds CUDA only: use CUDA('cuda')")
METAL = _refused("METAL", "Apple GPUs; tile_nb builds CUDA only: use CUDA('cuda')")
CPU = _refused("CPU", "a CPU target; tile_nb builds CUDA only (its CPU interpreter runs CUDA kernels): "
                      "use CUDA('cuda')")


def get_arch(target="cuda") -> CUDA:
    """CUDA(target) for a CUDA target; other target kinds are refused."""
    kind = target if isinstance(target, str) else getattr(getattr(target, "kind", None), "name", "cuda")
    kind = str(kind).split()[0] if kind else "cuda"
    if kind in ("hip", "rocm"):
        CDNA(target)
    if kind == "metal":
        METAL(target)
    if kind in ("llvm", "c", "cpu"):
        CPU(target)
    return CUDA(target)


def auto_infer_current_arch() -> CUDA:
    """The GPU in this process, else the target tile_nb builds for without one (sm_90a; see CUDA)."""
    return CUDA("cuda")


def is_cuda_arch(arch) -> bool:
    return isinstance(arch, CUDA)


def _sm(arch) -> int:
    return arch.sm_version if isinstance(arch, CUDA) else -1


def is_volta_arch(arch) -> bool:
    return 70 <= _sm(arch) < 75


def is_ampere_arch(arch) -> bool:
    return 80 <= _sm(arch) < 89


def is_ada_arch(arch) -> bool:
    return _sm(arch) == 89


def is_hopper_arch(arch) -> bool:
    return _sm(arch) == 90


def has_mma_support(arch) -> bool:
    return _sm(arch) >= 75   # every arch tile_nb builds for has mma.sync


def is_cdna_arch(arch) -> bool:
    return False


def is_rdna_arch(arch) -> bool:
    return False


def is_metal_arch(arch) -> bool:
    return False


def is_cpu_arch(arch) -> bool:
    return False


def is_tensorcore_supported_precision(in_dtype, accum_dtype, arch) -> bool:
    """Whether tile_nb's T.gemm runs this product on the tensor cores of `arch`."""
    from ..gemm_hints import gemm_path

    try:
        return gemm_path(in_dtype, accum_dtype, arch.caps) != "fma"
    except ValueError:
        return False
