"""bench/gpu.py runs end to end (tiny sizes on the CPU stand-in; the real
figures come from bench/gpu_check.sh on a GPU)."""

import importlib.util
import json
import os
import re

import pytest

BENCH = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'bench')


@pytest.fixture
def gpu_bench():
    """bench/gpu.py as a module (its own name: tests/backend/cuda is the package `backend.cuda`)."""
    spec = importlib.util.spec_from_file_location(
        'xgrad_bench_gpu', os.path.join(BENCH, 'gpu.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_writes_its_report(fake, gpu_bench, tmp_path):
    out = tmp_path / 'gpu.json'
    gpu_bench.main(['--quick', '--elements', '5000', '--mlp-batch', '8', '--mlp-width', '16',
                    '--out', str(out)])
    report = json.loads(out.read_text())
    e = report['elementwise']
    assert e['tanh_forward']['our_kernel_launches'] == 1
    assert e['tanh_backward']['our_kernel_launches'] == 1
    assert e['tanh_backward']['max_abs_error_first_1000'] < 1e-6
    assert e['copy']['bandwidth_GBps'] > 0
    assert report['mlp_step']['xgrad']['seconds'] > 0
    assert report['mlp_step']['cupy_floor']['seconds'] > 0
    assert report['mlp_step']['xgrad_cpu']['seconds'] > 0   # the GPU step against the CPU


SCRIPT = os.path.join(BENCH, 'gpu_check.sh')


def _steps():
    """(name, limit) of each ``step NAME LIMIT ...`` line of gpu_check.sh."""
    return [(m.group(1), int(m.group(2))) for m in
            re.finditer(r'^step (\w+) (\d+) ', open(SCRIPT).read(), re.M)]


def test_gpu_check_fits_in_eight_minutes_with_a_limit_per_step():
    text = open(SCRIPT).read()
    steps = _steps()
    assert [name for name, _ in steps] == ['build', 'info', 'tests', 'check', 'nccl', 'bench']
    budget = int(re.search(r'BUDGET=\$\{BUDGET:-(\d+)\}', text).group(1))
    assert sum(limit for _, limit in steps) <= budget <= 8 * 60
    assert 'timeout' in text


def test_gpu_check_builds_in_place_and_runs_only_real_gpu_tests():
    text = open(SCRIPT).read()
    assert 'pip install --no-build-isolation --no-deps -e .' in text
    # the emulated tests (CPU CI's, > 420 s) are not run on the GPU machine
    assert re.search(r'pytest tests/backend/cuda -m cuda ', text)
    # the check over one process per core (up to 8): in one it ran past 95 s
    assert '-m xgrad check --device cuda:0' in text and 'CHECK_JOBS=(--jobs "$n")' in text
    # only the shell's own arithmetic times the steps: the H200 machine has no bc
    assert not re.search(r'\|\s*(bc|awk)\b', text)
    assert 'bench/gpu.py' in text
    # one results file
    assert len(set(re.findall(r'bench/results/[\w.-]+', text))) == 2  # GPU and dry run


def test_gpu_check_dry_run_uses_the_stand_in():
    text = open(SCRIPT).read()
    assert 'XGRAD_GPU_DRY_RUN' in text and 'bench/_dry_run.py' in text
    dry = open(os.path.join(BENCH, '_dry_run.py')).read()
    assert 'fake_cupy' in dry and 'use_cupy' in dry
