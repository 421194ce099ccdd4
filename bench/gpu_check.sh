#!/usr/bin/env bash
# The GPU check: one script for a machine with an NVIDIA GPU and CuPy (e.g. the
# lent H200: Python 3.12 with CuPy, Cython and NumPy, no package registry).
#
#   bash bench/gpu_check.sh            # results under $OUT (default bench/results)
#
# 1. builds xgrad in place (pip install --no-build-isolation -e .);
# 2. runs the GPU tests (tests/gpu: every registry op forward and to second
#    order on cuda:0, transfers, devices; tests/kernels: nvcc + emulator) with
#    the real GPU, then the rest of the suite;
# 3. runs bench/gpu.py, writing gpu-h200.json (copy bandwidth, tanh forward and
#    backward bandwidth and launches, MLP step vs the CuPy floor and PyTorch).
# Each phase has its own time limit so that a slow one cannot starve the next;
# logs go to $OUT. pytest comes from the machine, or from wheels in
# bench/wheels/ (pip download -d bench/wheels pytest) when it has no registry.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
status=0

phase() { echo "== $1 ($(date +%T))"; }

phase build
if ! $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/gpu-build.log" 2>&1; then
    # e.g. a setuptools too old to build wheels without `wheel`: build in place
    echo "pip install failed (see $OUT/gpu-build.log); building in place"
    if ! $PY setup.py build_ext --inplace -j "$(nproc)" >> "$OUT/gpu-build.log" 2>&1; then
        tail -40 "$OUT/gpu-build.log"
        exit 1
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
$PY -c "import xgrad, cupy; d = xgrad.get_device('cuda:0'); print(d, cupy.__version__, \
cupy.cuda.runtime.getDeviceProperties(0)['name'])" || exit 1

if ! $PY -c "import pytest" 2> /dev/null; then
    $PY -m pip install --no-index --find-links bench/wheels pytest > /dev/null 2>&1 \
        || echo "pytest is missing and bench/wheels has none: tests skipped"
fi

if $PY -c "import pytest" 2> /dev/null; then
    phase "GPU tests"
    timeout 420 $PY -m pytest tests/gpu tests/kernels -q -x -p no:cacheprovider \
        --junitxml="$OUT/gpu-tests.xml" > "$OUT/gpu-tests.log" 2>&1 || status=1
    tail -5 "$OUT/gpu-tests.log"
fi

phase "GPU benchmark"
timeout 180 $PY bench/gpu.py --out "$OUT/gpu-h200.json" || status=1
[ "$OUT" != bench/results ] && cp "$OUT/gpu-h200.json" bench/results/ 2> /dev/null

if $PY -c "import pytest" 2> /dev/null; then
    phase "the rest of the suite"
    timeout 240 $PY -m pytest tests -q -p no:cacheprovider --ignore=tests/gpu \
        --ignore=tests/kernels > "$OUT/cpu-tests.log" 2>&1 || status=1
    tail -3 "$OUT/cpu-tests.log"
fi
phase done
exit $status
