#!/usr/bin/env bash
# The GPU check: one script for a machine with an NVIDIA GPU (e.g. the lent
# H200: Python 3.12 with CuPy, Cython and NumPy preinstalled, no package
# index). It fits in 8 minutes: every step has its own time limit, and all
# of them together at most $BUDGET seconds (default 470), so a slow step
# cannot starve the others and a partial run still reports. Where $OUT names
# a folder (the lent machine's), the results files written by this run are
# copied there at the end.
#
#   bash bench/gpu_check.sh                       # on a GPU
#   XGRAD_GPU_DRY_RUN=1 bash bench/gpu_check.sh   # on a CPU: the stand-in
#
# Steps (each appends its command, exit status, seconds and output to ONE
# results file, bench/results/gpu-check.txt, or gpu-check-dry-run.txt):
#   build   setup.py build_ext --inplace -j NPROC, then pip install
#           --no-build-isolation --no-deps -e . (which reuses those builds);
#           the in-place build alone where pip cannot, and on the dry run (it
#           must not install into the machine's Python)
#   info    python -m xgrad info: versions, GPUs, NVRTC compiles our kernels
#   tests   only the tests that need a real GPU (pytest -m cuda: the real-GPU
#           half of tests/backend/cuda, cuDNN's against the fallback paths included;
#           the emulated half runs in CPU CI and takes longer than 420 s); on
#           the dry run they all skip
#   check   python -m xgrad check --device cuda:0 --jobs min(nproc, 8) for
#           the ops cuDNN runs (pooling, batch norm, conv): first and second
#           derivatives on the GPU (the whole registry passed on the H200 on
#           2026-12-04 in 95 s, too long for this window next to the rest)
#   nccl    bench/nccl_smoke.py: xgrad.distributed on a single-rank
#           NcclCommunicator, a tiny MLP: averaged == local gradients
#   bench   bench/gpu.py: elementwise bandwidth as a fraction of the HBM copy
#           bandwidth, the MLP step on the GPU vs the CPU, the CuPy-only
#           floor and PyTorch where present
#   train   bench/gpu_training_steps.py: training_steps.py's four steps and
#           ResNet-18 CIFAR (float32, float16) on cuda:0 against torch CUDA,
#           paired, with cuDNN, the bench-local cuDNN conv and XGRAD_CUDNN=0;
#           bench/results/gpu_training_steps_<gpu>_<date>.json
#   launch  bench/gpu_training_steps.py --overhead: CPU microseconds per op of
#           small graphs on cuda:0 against torch CUDA
#           (bench/results/gpu_overhead_<gpu>_<date>.json)
#   cpu     the machine's CPU cores: training_steps.py's steps and a few conv
#           points, each framework with its default threads
#           (bench/results/cpu_training_steps_<cores>cores_<date>.json,
#           cpu_conv_points_<cores>cores_<date>.json)
# The dry run (XGRAD_GPU_DRY_RUN=1) runs every step with the CPU stand-in for
# CuPy (tests/backend/cuda/fake_cupy.py) through bench/_dry_run.py: a test of the
# script, not a measurement.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DRY=${XGRAD_GPU_DRY_RUN:-0}
BUDGET=${BUDGET:-470}
LOGS=${LOGS:-}     # a folder to keep each step's whole output in
[ -n "$LOGS" ] && mkdir -p "$LOGS"
mkdir -p bench/results
if [ "$DRY" = 1 ]; then
    RESULT=${RESULT:-bench/results/gpu-check-dry-run.txt}
    RUN=("$PY" bench/_dry_run.py)     # python with the stand-in as CuPy
    CHECK_ONLY=(--dtype float32)  # emulated: slow
    export XGRAD_GPU_DRY_RUN=1
else
    RESULT=${RESULT:-bench/results/gpu-check.txt}
    RUN=("$PY")
    CHECK_ONLY=()
fi
export PYTHONUNBUFFERED=1   # a step cut at its limit still shows how far it got
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
touch "$TMP/start-stamp"
START=$(date +%s)
status=0

{
    echo "# bench/gpu_check.sh $(date -u +%FT%TZ) on $(hostname)"
    echo "# git $(git rev-parse --short HEAD 2> /dev/null || echo '?')" \
         "$(git status --porcelain 2> /dev/null | grep -q . && echo '(with local changes)')"
    echo "# dry run: $DRY; budget ${BUDGET}s"
} > "$RESULT"

# step NAME LIMIT CMD...: runs CMD with at most LIMIT seconds (less when the
# budget has less left), appending its output to the results file.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - ($(date +%s) - START)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        printf '\n== %s: skipped, the %ss budget is spent\n' "$name" "$BUDGET" | tee -a "$RESULT"
        status=1
        return 1
    fi
    local t0 rc
    t0=$(date +%s%N)
    timeout --kill-after=5 "$limit" "$@" > "$TMP/$name.log" 2>&1
    rc=$?
    local tenths=$((($(date +%s%N) - t0) / 100000000))  # shell arithmetic: no bc there
    local secs=$((tenths / 10)).$((tenths % 10))
    [ $rc -eq 124 ] && note=" (TIMED OUT at ${limit}s)" || note=""
    {
        printf '\n== %s: exit %s in %ss%s (limit %ss)\n$ %s\n' "$name" "$rc" "$secs" "$note" \
            "$limit" "$*"
        tail -c 6000 "$TMP/$name.log"
    } >> "$RESULT"
    [ -n "$LOGS" ] && cp "$TMP/$name.log" "$LOGS/"
    printf '== %-6s exit %-3s %6ss%s\n' "$name" "$rc" "$secs" "$note"
    [ $rc -ne 0 ] && status=1
    return $rc
}

# Build in place first, on every core (pip's editable build compiles one
# module at a time: minutes), then pip's editable install, which copies those
# builds (setup.py's ReusingBuildExt); in place only where pip cannot (an
# old setuptools without `wheel`) and on the dry run. A setuptools older than
# 77 (no build isolation here, so the machine's own) cannot read the SPDX
# `license = "MIT"`: this throwaway checkout then gets the older table form
# (not on the dry run).
if [ "$DRY" != 1 ] && ! "$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)'; then
    sed -i -e 's/^license = "MIT"$/license = {text = "MIT"}/' -e '/^license-files/d' pyproject.toml
fi
BUILD='"$1" setup.py build_ext --inplace -j "$(nproc)" || exit
[ "$0" = 1 ] && exit 0
"$1" -m pip install --no-build-isolation --no-deps -e . ||
    echo "pip could not install: the in-place build is used (PYTHONPATH)"; exit 0'
step build 100 bash -c "$BUILD" "$DRY" "$PY" || { echo "build failed: see $RESULT"; exit 1; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
step info 15 "${RUN[@]}" -m xgrad info
# (the registry's gradients on the GPU are the next step's, not repeated here)
# The real-GPU tests over several processes (one GPU, a CUDA context each)
# where pytest-xdist is installed: 9,000 tests do not fit 120 s in one.
WORKERS=()
n=$(nproc); [ "$n" -gt 8 ] && n=8
if [ "$DRY" != 1 ] && "$PY" -c 'import xdist' 2> /dev/null; then
    WORKERS=(-n "$n")
fi
# The check's 5,000 GPU cases in as many processes: one took over 95 s on the
# H200 (2026-12-04). The dry run's stand-in lives in its one process.
CHECK_JOBS=()
[ "$DRY" != 1 ] && CHECK_JOBS=(--jobs "$n")
step tests 80 "$PY" -m pytest tests/backend/cuda -m cuda -q -p no:cacheprovider \
    ${WORKERS[@]+"${WORKERS[@]}"} \
    --maxfail=20 -o console_output_style=count -k 'not (test_registry_gpu and test_gradients)'
CUDNN_OPS=max_pool,average_pool,batch_norm,fixed_batch_norm,conv,conv_transpose
[ "$DRY" = 1 ] && CUDNN_OPS=max_pool,batch_norm
step check 40 "${RUN[@]}" -m xgrad check --device cuda:0 --ops "$CUDNN_OPS" \
    ${CHECK_ONLY[@]+"${CHECK_ONLY[@]}"} ${CHECK_JOBS[@]+"${CHECK_JOBS[@]}"}
step nccl 15 "${RUN[@]}" bench/nccl_smoke.py
step bench 30 "${RUN[@]}" bench/gpu.py --out "$TMP/gpu.json"
if [ -f "$TMP/gpu.json" ]; then
    printf '\n== bench/gpu.py results (JSON)\n' >> "$RESULT"
    cat "$TMP/gpu.json" >> "$RESULT"
fi
# Results: bench/results/ (the dry run's in $TMP: not measurements)
JSON_DIR=bench/results
[ "$DRY" = 1 ] && JSON_DIR=$TMP/results && mkdir -p "$JSON_DIR"
# The training steps: each step's results are written as it finishes, so a
# step cut at its limit keeps the earlier ones; --budget leaves time to write.
TRAIN_ONLY=()
[ "$DRY" = 1 ] && TRAIN_ONLY=(--dry-run --only lstm,resnet18,resnet18_fp16)
step train 130 "$PY" bench/gpu_training_steps.py --budget 105 --out-dir "$JSON_DIR" \
    ${TRAIN_ONLY[@]+"${TRAIN_ONLY[@]}"}
LAUNCH_DRY=()
[ "$DRY" = 1 ] && LAUNCH_DRY=(--dry-run)
step launch 20 "$PY" bench/gpu_training_steps.py --overhead --out-dir "$JSON_DIR" \
    ${LAUNCH_DRY[@]+"${LAUNCH_DRY[@]}"}
# The CPU cores, each framework with its default threads (torch's intra-op
# count; xgrad's pool): the steps in this process, then a few conv points.
CORES=$(nproc)
DAY=$(date -u +%F)
CPU_ARGS=(--rounds 5 --min-time 0.02)
CONV_ROUNDS=5
CONV_POINTS=(conv:8,64,64,32,3,1 conv:64,16,32,16,3,1 conv:8,128,128,16,3,2
             conv:32,3,64,32,3,1 conv_transpose:8,32,16,16,4,2)
if [ "$DRY" = 1 ]; then
    CPU_ARGS=(--quick --only wgan_gp --rounds 2)
    CONV_POINTS=(conv:2,4,4,8,3,1)
    CONV_ROUNDS=2
fi
export CONV_POINTS_LIST="${CONV_POINTS[*]}" CONV_ROUNDS
step cpu 40 bash -c '"$1" bench/training_steps.py --threads 0 --json-stdout "${@:4}" \
        > "$2.tmp" && mv "$2.tmp" "$2" && echo "wrote $2" || exit
    "$1" bench/conv_sweep.py --threads 0 --rounds $CONV_ROUNDS --min-time 0.02 --no-pool \
        --out "$3" --points $CONV_POINTS_LIST' cpu "$PY" \
    "$JSON_DIR/cpu_training_steps_${CORES}cores_${DAY}.json" \
    "$JSON_DIR/cpu_conv_points_${CORES}cores_${DAY}.json" \
    "${CPU_ARGS[@]}"
for f in $(find "$JSON_DIR" -newer "$TMP/start-stamp" -type f -name '*.json' | sort); do
    printf '\n== %s\n' "$f" >> "$RESULT"
    head -c 20000 "$f" >> "$RESULT"
done
total=$(($(date +%s) - START))
printf '\n== done: exit %s in %ss (budget %ss)\n' "$status" "$total" "$BUDGET" | tee -a "$RESULT"
echo "results: $RESULT"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$RESULT" "$OUT"/
    find "$JSON_DIR" -newer "$TMP/start-stamp" -type f -name '*.json' -exec cp {} "$OUT"/ \;
fi
exit $status
