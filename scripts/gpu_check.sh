#!/usr/bin/env bash
# One GPU session's worth of checks, in as few device calls as the 10-minute limit allows (docs/GPU.md).
# On the lent H200: source .devkit/prelude.sh && bash scripts/gpu_check.sh "$OUT" [PART]
#   PART=main (default): every test marked `gpu` (sm_90a, GPU_WORKERS=14), then the tutorials' code cells
#                        (scripts/gpu_cells.py on NOTEBOOKS, default notebooks/*.ipynb)
#   PART=older:          the `gpu` tests with the code of older GPUs loaded as PTX (TILE_NB_ARCH=compute_80, cut at
#                        230 s, then compute_75, cut at 200 s; issue 35), then the tutorials' cells as compute_75 (a T4)
#   PART=bench:          the benchmarks in GPU_BENCHMARKS (default: host_cost, torch_op_cost, backward and rowwise's
#                        GELU lines; `name:arg,arg` passes arguments), a JSON each and
#                        one bench.log, each cut at BENCH_LIMIT (140) s
#   PART=conformance:    tilelang's examples and LazyJIT tests on the GPU (python -m tile_nb.conformance --backend
#                        cuda) from a tilelang checkout at TILELANG (default .gl/tilelang: examples/ and
#                        testing/python/language, carried in an ignored folder), the examples' reference packages
#                        (einops, flash-linear-attention 0.3.2: scripts/conformance_deps.sh) at PYDEPS (default
#                        .gl/gpudeps, made absolute: the cases
#                        run in their own folders); the gdn examples take flash-linear-attention of 2025-06 from
#                        .gl/fla-2025-06 where it is there (their calls need its API: conformance_deps.sh, FLA_GIT),
#                        the others flash_attn's torch stand-in (benchmarks/stand_ins);
#                        CONF_ALONE: globs of cases run last, one at a time (default: the Mamba chunk-state example,
#                        which asks for 40 GiB, and gdn's chunk_delta_h, whose reference autotunes); the whole run cut at
#                        CONF_BUDGET (540) s with the cases left reported as not run
#   PART=vs_tilelang:    benchmarks/vs_tilelang.py on tilelang's performance suite (VS_GLOBS: the regression files),
#                        the real tilelang from .tl (scripts/tilelang_kit.sh) and tile_nb with TVM already unpacked
#                        in /tmp/devkit by an earlier call of this lease (the two kits together exceed a call's
#                        64 MiB: carry .tl and .gl/tilelang/examples here, not .devkit); both warm up side by side,
#                        then each is timed alone (VS_BUDGET, 130 s each); .gl/gpudeps (PYDEPS) on the path of both
#                        where carried (the linear-attention examples import fla)
# Each part fits one 10-minute call and writes at most 8 files to $OUT (the limit on what comes back); the machine's
# name, driver and the time head the first log. Exits non-zero if the part's tests failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu}
part=${2:-main}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
notebooks=(${NOTEBOOKS:-notebooks/*.ipynb})
# $1: a JUnit XML file, so that every failure's reason comes back whole (the short summary is cut to the
# terminal's width, and a run stopped by its time limit prints none); COLUMNS widens that summary too.
gpu_tests() {
  COLUMNS=400 python3 -m pytest -p no:nbval -p no:cacheprovider -m gpu -q -rfEs -n "${GPU_WORKERS:-14}" \
    --junitxml "$1" -o junit_logging=no tests
}
device() { nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader; date -u +%FT%TZ; }
case "$part" in
  main)
    { device; timeout -s INT -k 30 "${MAIN_LIMIT:-330}" bash -c "$(declare -f gpu_tests); gpu_tests $out/gpu_tests.xml"; } 2>&1 | tee "$out/gpu_tests.log"
    rc=${PIPESTATUS[0]}
    timeout "${CELLS_LIMIT:-240}" python3 scripts/gpu_cells.py "${notebooks[@]}" > "$out/tutorial_cells.log" 2>&1
    echo "tutorial cells exit $?" >> "$out/tutorial_cells.log"
    exit "$rc" ;;
  older)
    for arch_limit in compute_80:230 compute_75:200; do
      arch=${arch_limit%:*}
      { device; TILE_NB_ARCH=$arch timeout -s INT -k 20 "${arch_limit#*:}" bash -c "$(declare -f gpu_tests); gpu_tests $out/gpu_tests_$arch.xml"; } 2>&1 \
        | tee "$out/gpu_tests_$arch.log"
    done
    TILE_NB_ARCH=compute_75 timeout 150 python3 scripts/gpu_cells.py "${notebooks[@]}" > "$out/tutorial_cells_compute_75.log" 2>&1
    echo "tutorial cells exit $?" >> "$out/tutorial_cells_compute_75.log" ;;
  bench)
    for spec in ${GPU_BENCHMARKS:-host_cost torch_op_cost backward rowwise:--ops,gelu,gelu_approx,gelu_precise}; do
      bench=${spec%%:*}; args=(); [[ "$spec" == *:* ]] && IFS=, read -ra args <<< "${spec#*:}"
      { device; timeout "${BENCH_LIMIT:-140}" python3 "benchmarks/$bench.py" "${args[@]}" --json "$out/$bench.json"
        echo "$bench exit $?"; } >> "$out/bench.log" 2>&1
    done ;;
  conformance)
    deps=(--deps); [[ -d .gl/fla-2025-06 ]] && deps+=("examples/gdn/*=.gl/fla-2025-06")
    deps+=("*=benchmarks/stand_ins")   # flash_attn's torch stand-in for the cases the rule above does not take
    python3 -c "import tvm" 2>/dev/null || { echo "gpu_check conformance: TVM is not importable; source .devkit/prelude.sh first" >&2; exit 2; }
    { device; PYTHONPATH="$(realpath "${PYDEPS:-.gl/gpudeps}")${PYTHONPATH:+:$PYTHONPATH}" python3 -m tile_nb.conformance "${TILELANG:-.gl/tilelang}" \
        --backend cuda --jobs "${CONF_JOBS:-12}" --timeout "${CONF_TIMEOUT:-180}" --budget "${CONF_BUDGET:-540}" \
        --alone ${CONF_ALONE:-examples/gdn/example_chunk_delta_h.py examples/linear_attention/example_mamba_chunk_state.py} \
        "${deps[@]}" \
        --commit "${TILELANG_COMMIT:-a35008a42531c62b976ae4cec3855d4383db0f3c}" \
        --json "$out/conformance.json" --markdown "$out/conformance.md"; } > "$out/conformance.log" 2>&1
    rc=$?; tail -40 "$out/conformance.log"; exit "$rc" ;;
  vs_tilelang)
    [[ -d /tmp/devkit/site ]] || { echo "vs_tilelang: no TVM in /tmp/devkit: run a part carrying .devkit first" >&2; exit 2; }
    [[ -f .tl/site.tar.xz ]] || { echo "vs_tilelang: no .tl/site.tar.xz: bash scripts/tilelang_kit.sh make, carry .tl" >&2; exit 2; }
    [[ -f benchmarks/vs_tilelang.py ]] || { echo "vs_tilelang: benchmarks/vs_tilelang.py is set aside (scripts/gpu_tree.sh): add vs_tilelang to KEEP_BENCHMARKS" >&2; exit 2; }
    set -f
    globs=(${VS_GLOBS:-examples/gemm/* examples/gemm_fp8/* examples/flash_attention/* examples/gemm_splitk/*
           examples/flash_decoding/* examples/deepseek_mla/* examples/dequantize_gemm/* examples/linear_attention/*
           examples/blocksparse_attention/* examples/elementwise/* examples/cast/* examples/convolution/*
           examples/warp_specialize/*})
    # the examples' references' packages (fla, einops: scripts/conformance_deps.sh), where carried
    deps=$(realpath "${PYDEPS:-.gl/gpudeps}" 2>/dev/null || true)
    nb() { PYTHONPATH=/tmp/devkit/site:$PWD${deps:+:$deps} python3 benchmarks/vs_tilelang.py "${TILELANG:-.gl/tilelang}" \
             --impl tile_nb --only "${globs[@]}" "$@"; }
    tl() { (source scripts/tilelang_kit.sh use && PYTHONPATH=$PYTHONPATH${deps:+:$deps} \
             python3 benchmarks/vs_tilelang.py "${TILELANG:-.gl/tilelang}" --impl tilelang --only "${globs[@]}" "$@"); }
    device > "$out/vs_tilelang.log"
    nb --warm-only --warm-jobs 6 --timeout 150 > "$out/warm_tile_nb.log" 2>&1 &
    tl --warm-only --warm-jobs 6 --timeout 150 > "$out/warm_tilelang.log" 2>&1 &
    wait
    nb --warm-jobs 0 --timeout 60 --budget "${VS_BUDGET:-130}" --json "$out/vs_tile_nb.json" >> "$out/vs_tilelang.log" 2>&1
    tl --warm-jobs 0 --timeout 60 --budget "${VS_BUDGET:-130}" --json "$out/vs_tilelang.json" >> "$out/vs_tilelang.log" 2>&1
    python3 benchmarks/vs_tilelang.py --compare "$out/vs_tilelang.json" "$out/vs_tile_nb.json" | tee -a "$out/vs_tilelang.log" ;;
  *) echo "unknown part '$part': main, older, bench, conformance or vs_tilelang" >&2; exit 2 ;;
esac
