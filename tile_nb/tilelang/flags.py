"""tilelang's `compile_flags=` (nvcc flags) mapped onto tile_nb's build
options (backend/build.py BuildOptions).

tile_nb generates its own CUDA source and already compiles it the way tilelang's usual flags ask (optimized,
half and bfloat16 operators defined, relaxed constexpr, extended lambdas), so most of them change nothing and
are accepted; `--use_fast_math` sets `fast_math`, `--fmad=false` / `--fmad=true` set `fmad` (no multiply-add
contraction), `--ptxas-options=...` adds to `ptxas_options`. Any other flag (another -D macro, -G, -arch, ...)
is refused by name: tile_nb would not honor it.
"""
from __future__ import annotations

from ._support import unsupported

__all__ = ["compile_flag_options"]

# Flags whose effect tile_nb's build already has, or that cannot change its generated code (tile_nb's source
# does not use assert(), so NDEBUG changes nothing; warnings are not results).
_ALREADY = {
    "-O3": "tile_nb compiles at -O3 (nvcc) / NVRTC's default optimization",
    "-DNDEBUG": "tile_nb's device asserts call __assertfail, not assert()",
    "-Wno-deprecated-declarations": "a warning switch",
    "--expt-relaxed-constexpr": "tile_nb passes it to nvcc",
    "--expt-extended-lambda": "tile_nb passes it to nvcc",
    "-U__CUDA_NO_HALF_OPERATORS__": "half operators",
    "-U__CUDA_NO_HALF_CONVERSIONS__": "half conversions",
    "-U__CUDA_NO_HALF2_OPERATORS__": "half2 operators",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__": "bfloat16 operators",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__": "bfloat16 conversions",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__": "bfloat162 operators",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__": "bfloat162 conversions",
}
_FAST_MATH = {"--use_fast_math", "-use_fast_math"}
_FMAD = {"--fmad=false": False, "-fmad=false": False, "--fmad=true": True, "-fmad=true": True}
_PTXAS = ("--ptxas-options=", "-Xptxas=")
_PTXAS_ALREADY = {"-v", "--verbose"}  # tile_nb always asks ptxas for its report


def compile_flag_options(flags, where: str = "tilelang.jit") -> dict:
    """The build options `flags` (a string or a list of nvcc flags) ask for: {"fast_math": True} and/or
    {"fmad": bool} and/or {"ptxas_options": [...]}; UnsupportedTilelangAPI naming every flag tile_nb would
    not honor."""
    if flags is None:
        return {}
    if isinstance(flags, str):
        flags = flags.split()
    options: dict = {}
    ptxas: list[str] = []
    refused: list[str] = []
    for flag in flags:
        if not isinstance(flag, str):
            raise TypeError(f"{where}(compile_flags=...): expected strings (nvcc flags); got {flag!r}")
        flag = flag.strip()
        if flag in _ALREADY or not flag:
            continue
        if flag in _FAST_MATH:
            options["fast_math"] = True
        elif flag in _FMAD:
            options["fmad"] = _FMAD[flag]
        elif flag.startswith(_PTXAS):
            value = flag.split("=", 1)[1]
            ptxas += [o for o in value.split(",") if o and o not in _PTXAS_ALREADY]
        else:
            refused.append(flag)
    if refused:
        raise unsupported(
            f"{where}(compile_flags=[{', '.join(map(repr, refused))}])",
            "tile_nb maps -O3, --use_fast_math, --fmad=true|false, --ptxas-options=..., the -U__CUDA_NO_*__ "
            "switches, -DNDEBUG, --expt-* and -Wno-deprecated-declarations; others would not be "
            "honored",
        )
    if ptxas:
        options["ptxas_options"] = ptxas
    return options
