"""The lowering and the CUDA toolchain as the lowering tests use them: a TVM target by arch; the plan, lowered
IR and CUDA source of a function; nvcc's `ptxas -v` report of that source (skipping the test, with the reason,
where nvcc is absent)."""
import os
import re
import shutil
import subprocess

import pytest
import tvm

from tile_nb.lower import lower, lower_with_plan

_DEFAULT_NVCC = "/usr/local/cuda/bin/nvcc"
NVCC = shutil.which("nvcc") or (_DEFAULT_NVCC if os.path.exists(_DEFAULT_NVCC) else None)


def target(arch):
    return tvm.target.Target({"kind": "cuda", "arch": arch})


def cuda_source(func, arch="sm_90a"):
    """CUDA source of `func` lowered by tile_nb and compiled by TVM for `arch` (an arch name or a Target)."""
    tg = target(arch) if isinstance(arch, str) else arch
    mod = lower(func, tg)
    with tg:
        exe = tvm.compile(mod, target=tg, tir_pipeline="tirx")
    return exe.mod.imports[0].inspect_source("cuda")


def ptxas_report(src, arch, tmp_path, fast_math=True):
    """nvcc -cubin's `ptxas -v` report (stderr) of the CUDA source `src` for `arch`; the build must
    succeed."""
    if NVCC is None:
        pytest.skip("nvcc is not installed on this machine")
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    gen = "-gencode=arch=compute_90a,code=sm_90a" if arch == "sm_90a" else f"-arch={arch}"
    flags = ["-O3", "--use_fast_math"] if fast_math else ["-O3"]
    cmd = [NVCC, "-cubin", gen, *flags, "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr


def spills(report: str) -> int:
    """Total spill bytes in a ptxas -v report."""
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report))


def plan(func, arch="sm_90a"):
    """The lowering plan tile_nb decides for `func` on `arch`."""
    return lower_with_plan(func, target(arch))[1]


def pipeline_note(func, arch="sm_90a"):
    return plan(func, arch).pipeline_note


def lowered(func, arch="sm_90a") -> str:
    """The lowered IR's text without the helpers' CUDA source."""
    return re.sub(r', source_code="(?:[^"\\]|\\.)*"', "", lower(func, target(arch)).script())
