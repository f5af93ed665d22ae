"""What running a kernel of the architecture matrix (kernels/arch_matrix.py) takes: for each kernel name, its
family (the tile_nb.jit kernel its factory specializes), the sizes and options of that specialization, how to
make seeded random inputs for it (in the kernel's parameter order, the output poisoned), and a torch reference
computed in float64 with the tolerance the family's own GPU tests use.

The sizes and options are written here, not read from the IR, so that tests/test_older_ptx_corpus.py can check
them against the specialization's parameters. A T.dynamic dim takes the size given here.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kernels import reference as ref
from kernels import rowwise
from kernels.compare import rel_err
from kernels.seed import gemm_fp8, gemm_int8, gemm_variant


class Rand:
    """Seeded random tensors on `device`; on "meta", tensors of the right shape and dtype and no data."""

    def __init__(self, device, seed: int = 0):
        self.device = torch.device(device)
        meta = self.device.type == "meta"
        self.gen = None if meta else torch.Generator(self.device).manual_seed(seed)

    def _meta(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, device=self.device) if self.gen is None else None

    def normal(self, shape, dtype, scale: float = 1.0):
        empty = self._meta(shape, dtype)
        if empty is not None:
            return empty
        return (torch.randn(shape, generator=self.gen, device=self.device) * scale).to(dtype)

    def uniform(self, shape, dtype, low: float, high: float):
        empty = self._meta(shape, dtype)
        if empty is not None:
            return empty
        return (torch.rand(shape, generator=self.gen, device=self.device) * (high - low) + low).to(dtype)

    def int8(self, shape):
        empty = self._meta(shape, torch.int8)
        if empty is not None:
            return empty
        return torch.randint(-128, 128, shape, generator=self.gen, device=self.device, dtype=torch.int8)

    def poison(self, shape, dtype):
        """An output filled with what no result is: NaN, or the most negative int32 (|sum of int8 products| is
        below 2^31 here)."""
        fill = float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min
        return torch.full(shape, fill, dtype=dtype, device=self.device)


_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _within(tol):
    def check(out, expected, inputs, options):
        err = rel_err(out, expected)
        assert err < tol, f"relative error {err:.2e} >= {tol:.0e}"
    return check


def _exact(out, expected, inputs, options):
    got = out.double()
    assert not torch.isnan(got).any(), "output has NaNs (unwritten or wrong)"
    bad = (got != expected).sum().item()
    assert bad == 0, f"{bad} of {got.numel()} elements differ from the exact result"


# ---------------------------------------------------------------------------------------------- GEMMs

def _gemm_inputs(s, o, rand):
    M, N, K, dt = s["M"], s["N"], s["K"], _DT[o.get("in_dtype", "float16")]
    return {
        "A": rand.normal((K, M) if o.get("trans_A") else (M, K), dt),
        "B": rand.normal((N, K) if o.get("trans_B") else (K, N), dt),
        "C": rand.poison((M, N), _DT[o.get("out_dtype", "float32")]),
    }


def _gemm_reference(x, o):
    a, b = x["A"].double(), x["B"].double()
    return (a.T if o.get("trans_A") else a) @ (b.T if o.get("trans_B") else b)


def _gemm_check(out, expected, inputs, options):
    # tests/test_gpu_gemm.py test_dtypes: 1e-3 for a float32 C, 2e-3 for a float16 one
    _within(2e-3 if options.get("out_dtype") == "float16" else 1e-3)(out, expected, inputs, options)


def _fp8_inputs(s, o, rand):
    M, N, K = s["M"], s["N"], s["K"]
    e4m3 = torch.float8_e4m3fn
    return {"A": rand.normal((M, K), e4m3, 3.0), "B": rand.normal((N, K), e4m3, 3.0),
            "C": rand.poison((M, N), torch.bfloat16), "scale_A": rand.uniform((1,), torch.float32, 0.3, 0.4),
            "scale_B": rand.uniform((1,), torch.float32, 1.5, 2.0)}


def _fp8_reference(x, o):
    return (x["A"].double() @ x["B"].double().T) * x["scale_A"].double() * x["scale_B"].double()


def _fp8_check(out, expected, x, options):
    """tests/test_gpu_gemm.py's bound: 2^-9 of sum |a b| (Hopper's 8-bit accumulation; the FMA path is
    float32), plus the bfloat16 C's rounding."""
    scale = x["scale_A"].double() * x["scale_B"].double()
    magnitude = (x["A"].double().abs() @ x["B"].double().abs().T) * scale
    bound = 2.0 ** -9 * magnitude + 2.0 ** -8 * expected.abs() + 1e-30
    got = out.double()
    assert not torch.isnan(got).any(), "output has NaNs (unwritten or wrong)"
    worst = ((got - expected).abs() / bound).max().item()
    assert worst <= 1.0, f"error reaches {worst:.2f} of the bound"


def _int8_inputs(s, o, rand):
    M, N, K = s["M"], s["N"], s["K"]
    return {"A": rand.int8((M, K)), "B": rand.int8((N, K)), "C": rand.poison((M, N), torch.int32)}


def _int8_reference(x, o):  # float64 holds every sum exactly (|C| < 2^31 < 2^53); CUDA has no int64 matmul
    return x["A"].double() @ x["B"].double().T


def _dequant_inputs(s, o, rand):
    M, N, K = s["M"], s["N"], s["K"]
    return {"A": rand.normal((M, K), torch.float16), "Bq": rand.int8((K, N)),
            "Scale": rand.uniform((N,), torch.float16, 0.01, 0.03), "C": rand.poison((M, N), torch.float32)}


def _dequant_reference(x, o):  # C = A @ (Bq * Scale[None, :])
    return x["A"].double() @ (x["Bq"].double() * x["Scale"].double()[None, :])


# ---------------------------------------------------------------------------------------------- attention

def _attention_inputs(s, o, rand):
    B, H, S, D = s["B"], s["H"], s["S"], s["D"]
    HK = s.get("HK", H)
    return {"Q": rand.normal((B, H, S, D), torch.float16), "K": rand.normal((B, HK, S, D), torch.float16),
            "V": rand.normal((B, HK, S, D), torch.float16), "O": rand.poison((B, H, S, D), torch.float16)}


def _attention_reference(x, o, heads_at_once: int = 8):
    """softmax(Q K^T / sqrt(D)) V in float64, causal where the kernel is; K and V repeated for grouped-query
    attention (query head h reads KV head h // (H // HK)). A few heads at a time: the 4 x 32 x 4096^2 scores
    of the largest case would take 17 GB at once."""
    q, k, v = x["Q"], x["K"], x["V"]
    B, H, S, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    masked = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1) if o.get("causal") else None
    for b in range(B):
        for h in range(0, H, heads_at_once):
            hs = slice(h, h + heads_at_once)
            scores = q[b, hs].double() @ k[b, hs].double().transpose(-1, -2) / math.sqrt(D)
            if masked is not None:
                scores = scores.masked_fill(masked, float("-inf"))
            out[b, hs] = torch.softmax(scores, dim=-1) @ v[b, hs].double()
    return out


# ---------------------------------------------------------------------------------------------- rows

def _rows_inputs(*vectors):
    def make(s, o, rand):
        M, N = s["M"], s["N"]
        x = {"X": rand.normal((M, N), torch.float16)}
        x.update({name: rand.normal((N,), torch.float16) for name in vectors})
        x["Y"] = rand.poison((M, N), torch.float16)
        return x
    return make


def _rms_norm(x, o, eps=1e-6):
    X = x["X"].double()
    return X * torch.rsqrt((X * X).mean(dim=1, keepdim=True) + eps) * x["W"].double()


def _layer_norm(x, o, eps=1e-5):
    N = x["X"].shape[1]
    return F.layer_norm(x["X"].double(), (N,), x["W"].double(), x["B"].double(), eps)


def _gelu_tanh(x, o):
    X = x["X"].double()
    return 0.5 * X * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (X + 0.044715 * X ** 3)))


def _add_bias(x, o):  # one float16 rounding of an exact sum: the kernel's result bit for bit
    return (x["X"].double() + x["Bias"].double()[None, :]).half().double()


@dataclass(frozen=True)
class Family:
    kernel: object      # the tile_nb.jit kernel
    inputs: Callable    # (sizes, options, Rand) -> {parameter name: tensor}, in parameter order
    output: str         # the parameter the kernel writes
    reference: Callable  # (inputs, options) -> the expected output in float64
    check: Callable     # (output, expected, inputs, options) -> None, or an AssertionError
    small: dict         # sizes for the CPU interpreter: off the tiles, a few tiles at most


FAMILIES = {
    "gemm": Family(gemm_variant, _gemm_inputs, "C", _gemm_reference, _gemm_check, dict(M=70, N=130, K=90)),
    "gemm_fp8": Family(gemm_fp8, _fp8_inputs, "C", _fp8_reference, _fp8_check, dict(M=70, N=100, K=160)),
    "gemm_int8": Family(gemm_int8, _int8_inputs, "C", _int8_reference, _exact, dict(M=70, N=100, K=160)),
    "dequant_gemm": Family(ref.dequant_gemm, _dequant_inputs, "C", _dequant_reference, _within(2e-3),
                           dict(M=100, N=70, K=90)),
    # tests/test_reference_kernels.py: 5e-3 for FlashAttention, 2e-3 for the row kernels and dequant_gemm
    "flash_attention": Family(ref.flash_attention, _attention_inputs, "O", _attention_reference,
                              _within(5e-3), dict(B=1, H=2, S=100, D=64)),
    "flash_attention_gqa": Family(ref.flash_attention_gqa, _attention_inputs, "O", _attention_reference,
                                  _within(5e-3), dict(B=1, H=4, HK=2, S=100, D=64)),
    "softmax": Family(rowwise.softmax, _rows_inputs(), "Y",
                      lambda x, o: torch.softmax(x["X"].double(), dim=1), _within(2e-3), dict(M=5, N=100)),
    "rms_norm": Family(rowwise.rms_norm, _rows_inputs("W"), "Y", _rms_norm, _within(2e-3), dict(M=5, N=100)),
    "layer_norm": Family(rowwise.layer_norm, _rows_inputs("W", "B"), "Y", _layer_norm, _within(2e-3),
                         dict(M=5, N=100)),
    "gelu_tanh": Family(rowwise.gelu_tanh, _rows_inputs(), "Y", _gelu_tanh, _within(2e-3), dict(M=5, N=100)),
    "add_bias": Family(rowwise.add_bias, _rows_inputs("Bias"), "Y", _add_bias, _exact, dict(M=5, N=100)),
}


@dataclass(frozen=True)
class Run:
    family: str
    sizes: dict                                  # the specialization's sizes (a T.dynamic dim: the size run)
    options: dict = field(default_factory=dict)  # its compile-time arguments that change inputs or results


def _cube(n):
    return dict(M=n, N=n, K=n)


_F16_OUT = {"out_dtype": "float16"}

# kernel name (kernels/arch_matrix.py) -> what its factory specializes
RUNS = {
    "gemm_seed_8192_sm90a": Run("gemm", _cube(8192)),
    "gemm_seed_1000x1032x1000_sm90a": Run("gemm", dict(M=1000, N=1032, K=1000)),
    "gemm_seed_1000x1032x1000_sm80": Run("gemm", dict(M=1000, N=1032, K=1000)),
    "gemm_128x256x64_s4_4096_sm90a": Run("gemm", _cube(4096), _F16_OUT),
    "gemm_128x256x64_s4_8192_stream_k_sm90a": Run("gemm", _cube(8192), _F16_OUT),
    "gemm_128x256x64_s4_4096x11008x4096_sm90a": Run("gemm", dict(M=4096, N=11008, K=4096), _F16_OUT),
    "gemm_128x256x64_s3_fp32_out_sm90a": Run("gemm", dict(M=4096, N=4096, K=1024)),
    "gemm_cluster2_sm90a": Run("gemm", _cube(8192), _F16_OUT),
    "gemm_bf16_1024": Run("gemm", _cube(1024), {"in_dtype": "bfloat16"}),
    "gemm_fp16_out_trans_B_1024": Run("gemm", _cube(1024), {"out_dtype": "float16", "trans_B": True}),
    "gemm_fp8_128x256x128_8192_sm90a": Run("gemm_fp8", _cube(8192)),
    "gemm_int8_4096_sm90a": Run("gemm_int8", _cube(4096)),
    "dequant_gemm_sm90a": Run("dequant_gemm", dict(M=1000, N=1024, K=1024)),
    "flash_attention_d64_sm90a": Run("flash_attention", dict(B=4, H=32, S=4096, D=64)),
    "flash_attention_d128_sm90a": Run("flash_attention", dict(B=4, H=32, S=4096, D=128)),
    "flash_attention_d128_causal_sm90a": Run(
        "flash_attention", dict(B=4, H=32, S=4096, D=128), {"causal": True}
    ),
    "flash_attention_d256_sm90a": Run("flash_attention", dict(B=1, H=8, S=1024, D=256)),
    "flash_attention_d128_sm80": Run("flash_attention", dict(B=2, H=8, S=1000, D=128)),
    "flash_attention_d64_64x64": Run("flash_attention", dict(B=1, H=4, S=512, D=64)),
    "flash_attention_gqa_dynamic_sm90a": Run("flash_attention_gqa", dict(B=2, H=32, HK=8, S=1000, D=128)),
    "rowwise_softmax_fp16_sm90a": Run("softmax", dict(M=32768, N=4096)),
    "rowwise_rms_norm_dynamic_sm90a": Run("rms_norm", dict(M=1000, N=4096)),
    "rowwise_layer_norm_sm90a": Run("layer_norm", dict(M=32768, N=1024)),
    "rowwise_gelu_sm90a": Run("gelu_tanh", dict(M=32768, N=4096)),
    "rowwise_add_bias_sm80": Run("add_bias", dict(M=4097, N=1000)),
}


def make_inputs(name: str, device, seed: int = 0, sizes: dict | None = None) -> dict:
    """The inputs of kernel `name` ({parameter: tensor}, the output poisoned), at its own sizes or `sizes`."""
    run = RUNS[name]
    return FAMILIES[run.family].inputs(sizes or run.sizes, run.options, Rand(device, seed))


def check(name: str, inputs: dict) -> None:
    """Compare the output the kernel wrote into `inputs` with the float64 torch reference."""
    run = RUNS[name]
    family = FAMILIES[run.family]
    expected = family.reference(inputs, run.options)
    family.check(inputs[family.output], expected, inputs, run.options)
