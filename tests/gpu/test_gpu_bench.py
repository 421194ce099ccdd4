"""bench/gpu.py runs end to end (tiny sizes on the CPU stand-in; the real
figures come from bench/gpu_check.sh on a GPU)."""

import importlib.util
import json
import os

import pytest

BENCH = os.path.join(os.path.dirname(__file__), '..', '..', 'bench')


@pytest.fixture
def gpu_bench():
    """bench/gpu.py as a module (its own name: tests/gpu is the package `gpu`)."""
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
