"""The architecture matrix of issue 35: which kernels are built for which architecture, and which refusal
each pair expects (benchmarks/results/architectures.md). tests/test_architectures.py builds every pair
through ptxas; tests/test_older_ptx_corpus.py runs the pairs that build for sm_75 / sm_80 / sm_89 on the
H200 as PTX."""
from __future__ import annotations

from kernels import corpus
from kernels import reference as ref
from kernels.corpus import ARCHS
from kernels.seed import gemm_ir
from tile_nb.lower.analysis.arch import ArchCaps

# Configurations sized for the smaller GPUs, beside the corpus' (name -> phase-2 IR factory).
EXTRAS = {
    # FlashAttention in 64 KiB of shared memory (sm_75's limit): 64x64 tiles, head dim 64, two stages.
    "flash_attention_d64_64x64": lambda: ref.flash_attention.specialize(
        B=1, H=4, S=512, D=64, block_M=64, block_N=64
    ),
    "gemm_bf16_1024": lambda: gemm_ir(1024, 1024, 1024, in_dtype="bfloat16"),
    "gemm_fp16_out_trans_B_1024": lambda: gemm_ir(1024, 1024, 1024, out_dtype="float16", trans_B=True),
}


def kernels() -> dict:
    """name -> phase-2 IR factory: the corpus kernels, plus configurations sized for the smaller GPUs."""
    out = {name: make for name, (make, _) in corpus.CORPUS.items()}
    out.update(EXTRAS)
    return out


_SMEM = "of shared memory per block; {arch} allows"
_FP8 = "the target {arch} lacks 8-bit float types"
_BF16 = "the target sm_75 lacks bfloat16"
_BIG_SMEM = ("gemm_128x256x64_s4_4096_sm90a", "gemm_128x256x64_s4_8192_stream_k_sm90a",
             "gemm_128x256x64_s4_4096x11008x4096_sm90a", "gemm_cluster2_sm90a", "flash_attention_d128_sm90a",
             "flash_attention_d128_causal_sm90a", "flash_attention_gqa_dynamic_sm90a")


def expected() -> dict:
    """(kernel, arch) -> the text its LoweringError must contain; a pair not listed builds a cubin."""
    out = {}
    for arch in ARCHS:
        caps = ArchCaps.of(arch)
        small = caps.max_shared_bytes < 192 * 1024  # every arch but sm_90a / sm_100a
        for name in _BIG_SMEM:
            if small:
                out[name, arch] = _SMEM.format(arch=arch)
        if caps.max_shared_bytes < 168 * 1024:
            out["flash_attention_d256_sm90a", arch] = _SMEM.format(arch=arch)
        if caps.max_shared_bytes < 144 * 1024:
            out["gemm_128x256x64_s3_fp32_out_sm90a", arch] = _SMEM.format(arch=arch)
        if caps.max_shared_bytes < 88 * 1024:
            for name in ("flash_attention_d64_sm90a", "flash_attention_d128_sm80"):
                out[name, arch] = _SMEM.format(arch=arch)
        if not caps.fp8:
            out["gemm_fp8_128x256x128_8192_sm90a", arch] = _FP8.format(arch=arch)
        elif not caps.wgmma and small:  # (off wgmma, 8-bit floats run as FMAs on the CUDA cores)
            out["gemm_fp8_128x256x128_8192_sm90a", arch] = _SMEM.format(arch=arch)
        if not caps.wgmma and small:  # (off wgmma, int8 runs as multiply-adds on the CUDA cores)
            out["gemm_int8_4096_sm90a", arch] = _SMEM.format(arch=arch)
        if not caps.bf16:
            out["gemm_bf16_1024", arch] = _BF16
    return out
