"""A fixed corpus of kernels whose generated CUDA must not change by accident: GEMM variants (the seed,
persistent 128x256 tiles with and without stream-K, clusters, fp8, int8, the sm_80 path), FlashAttention at
head dims 64 / 128 / 256 (and GQA with a T.dynamic sequence length), and the row kernels.

A refactoring of the lowering (issue 32) must leave every one byte-identical; tests/test_golden_cuda.py
checks that against tests/golden/cuda_sha256.json (sha256 of each kernel's CUDA source: 1.4 MB of sources
would weigh on every GPU run's carry). The GPU tests of earlier sessions ran these kernels against torch,
except the NaN-propagating max/min of commit 1f721c1, which the next GPU session must run; so the stored
hashes guard checked kernels, not merely whatever the code produced. To see what changed, dump the
sources at two commits and diff them:

    python tests/kernels/corpus.py --dump build/corpus-new     # then the same at the old commit, and diff -r
    python tests/kernels/corpus.py --write-hashes              # accept the new sources (review the diff)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]

from kernels import reference as ref  # noqa: E402
from kernels import rowwise  # noqa: E402
from kernels.seed import gemm_fp8, gemm_int8, gemm_ir  # noqa: E402

HASHES = HERE.parent / "golden" / "cuda_sha256.json"
# The architectures tests/test_architectures.py builds every corpus kernel for (or checks the refusal on).
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120")
SM_COUNT = 132  # the H200's, fixed so the persistent and stream-K plans do not depend on this machine

_BIG = dict(block_N=256, block_K=64, threads=256, num_stages=4, out_dtype="float16")
_FA = dict(block_M=128, block_N=128, threads=256)

# name -> (phase-2 IR factory, arch)
CORPUS = {
    "gemm_seed_8192_sm90a": (lambda: gemm_ir(8192, 8192, 8192), "sm_90a"),
    "gemm_seed_1000x1032x1000_sm90a": (lambda: gemm_ir(1000, 1032, 1000), "sm_90a"),
    "gemm_128x256x64_s4_4096_sm90a": (lambda: gemm_ir(4096, 4096, 4096, **_BIG), "sm_90a"),
    "gemm_128x256x64_s4_8192_stream_k_sm90a": (lambda: gemm_ir(8192, 8192, 8192, **_BIG), "sm_90a"),
    "gemm_128x256x64_s4_4096x11008x4096_sm90a": (lambda: gemm_ir(4096, 11008, 4096, **_BIG), "sm_90a"),
    "gemm_128x256x64_s3_fp32_out_sm90a": (
        lambda: gemm_ir(4096, 4096, 1024, block_N=256, block_K=64, threads=256, num_stages=3),
        "sm_90a",
    ),
    "gemm_cluster2_sm90a": (
        lambda: gemm_ir(8192, 8192, 8192, **_BIG).with_attr("tile_nb.cluster", 2),
        "sm_90a",
    ),
    "gemm_fp8_128x256x128_8192_sm90a": (
        lambda: gemm_fp8.specialize(
            M=8192, N=8192, K=8192, block_N=256, block_K=128, threads=256, num_stages=4
        ),
        "sm_90a",
    ),
    "gemm_int8_4096_sm90a": (lambda: gemm_int8.specialize(M=4096, N=4096, K=4096), "sm_90a"),
    "gemm_seed_1000x1032x1000_sm80": (lambda: gemm_ir(1000, 1032, 1000), "sm_80"),
    "flash_attention_d64_sm90a": (
        lambda: ref.flash_attention.specialize(B=4, H=32, S=4096, D=64, block_M=64, block_N=128),
        "sm_90a",
    ),
    "flash_attention_d128_sm90a": (
        lambda: ref.flash_attention.specialize(B=4, H=32, S=4096, D=128, **_FA),
        "sm_90a",
    ),
    "flash_attention_d128_causal_sm90a": (
        lambda: ref.flash_attention.specialize(B=4, H=32, S=4096, D=128, causal=True, **_FA),
        "sm_90a",
    ),
    "flash_attention_d256_sm90a": (
        lambda: ref.flash_attention.specialize(B=1, H=8, S=1024, D=256, block_M=64, block_N=64),
        "sm_90a",
    ),
    "flash_attention_d128_sm80": (
        lambda: ref.flash_attention.specialize(B=2, H=8, S=1000, D=128, block_M=64, block_N=64),
        "sm_80",
    ),
    "flash_attention_gqa_dynamic_sm90a": (
        lambda: ref.flash_attention_gqa.specialize(B=2, H=32, HK=8, D=128, **_FA),
        "sm_90a",
    ),
    "rowwise_softmax_fp16_sm90a": (lambda: rowwise.softmax.specialize(M=32768, N=4096), "sm_90a"),
    "rowwise_rms_norm_dynamic_sm90a": (
        lambda: rowwise.rms_norm.specialize(N=4096, dynamic_rows=True),
        "sm_90a",
    ),
    "rowwise_layer_norm_sm90a": (lambda: rowwise.layer_norm.specialize(M=32768, N=1024), "sm_90a"),
    "rowwise_gelu_sm90a": (lambda: rowwise.gelu_tanh.specialize(M=32768, N=4096, block_M=1), "sm_90a"),
    "rowwise_add_bias_sm80": (lambda: rowwise.add_bias.specialize(M=4097, N=1000), "sm_80"),
    "dequant_gemm_sm90a": (lambda: ref.dequant_gemm.specialize(M=1000, N=1024, K=1024), "sm_90a"),
}


def cuda_source(name: str) -> str:
    """The CUDA source the corpus kernel `name` compiles to with the lowering's defaults (every lowering
    option at its default but the SM count, whatever the environment or tile_nb.set_options say; nvcc builds
    it; the disk cache is not used)."""
    from tile_nb.lower import LoweringOptions
    from tile_nb.runtime import compile as rt_compile

    make, arch = CORPUS[name]
    return rt_compile(
        make(), arch, options={"cache": False}, lowering=LoweringOptions(sm_count=SM_COUNT)
    ).cuda_source


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", metavar="DIR", help="write each kernel's CUDA source to DIR/<name>.cu")
    ap.add_argument("--write-hashes", action="store_true", help=f"store the sources' sha256 in {HASHES.name}")
    args = ap.parse_args(argv)
    hashes = {}
    for name in CORPUS:
        source = cuda_source(name)
        hashes[name] = sha256(source)
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            (Path(args.dump) / f"{name}.cu").write_text(source)
        print(f"{hashes[name][:16]}  {name}", flush=True)
    if args.write_hashes:
        HASHES.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        print(f"wrote {HASHES}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
