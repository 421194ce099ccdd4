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
    assert [name for name, _ in steps] == ['build', 'info', 'tests', 'check', 'nccl', 'bench',
                                           'train', 'launch', 'cpu']
    budget = int(re.search(r'BUDGET=\$\{BUDGET:-(\d+)\}', text).group(1))
    assert sum(limit for _, limit in steps) <= budget <= 8 * 60
    assert 'timeout' in text


def test_gpu_check_builds_in_place_and_runs_only_real_gpu_tests():
    text = open(SCRIPT).read()
    assert 'pip install --no-build-isolation --no-deps -e .' in text
    # the emulated tests (CPU CI's, > 420 s) are not run on the GPU machine
    assert re.search(r'pytest tests/backend/cuda -m cuda ', text)
    # the check over one process per core (up to 8), for the ops cuDNN runs
    assert '-m xgrad check --device cuda:0 --ops "$CUDNN_OPS"' in text
    assert 'CHECK_JOBS=(--jobs "$n")' in text
    # only the shell's own arithmetic times the steps: the H200 machine has no bc
    assert not re.search(r'\|\s*(bc|awk)\b', text)
    assert 'bench/gpu.py' in text
    # one results text file (GPU and dry run), the JSONs of this run appended
    # to it and, where $OUT is a folder, copied there
    assert len(set(re.findall(r'bench/results/[\w.-]+\.txt', text))) == 2
    assert '-newer "$TMP/start-stamp"' in text and 'cp "$RESULT" "$OUT"/' in text
    assert 'JSON_DIR=$TMP/results' in text   # (the dry run's JSONs are not results)
    assert 'bench/gpu_training_steps.py --budget' in text
    assert 'bench/gpu_training_steps.py --overhead' in text
    assert 'bench/training_steps.py --threads 0' in text and 'bench/conv_sweep.py --threads 0' in text


def test_gpu_check_dry_run_uses_the_stand_in():
    text = open(SCRIPT).read()
    assert 'XGRAD_GPU_DRY_RUN' in text and 'bench/_dry_run.py' in text
    dry = open(os.path.join(BENCH, '_dry_run.py')).read()
    assert 'fake_cupy' in dry and 'use_cupy' in dry


@pytest.fixture
def training_bench():
    spec = importlib.util.spec_from_file_location(
        'xgrad_bench_gpu_training_steps', os.path.join(BENCH, 'gpu_training_steps.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_training_steps_dry_run_writes_every_field(fake, training_bench, tmp_path):
    pytest.importorskip('torch')
    from xgrad._backend import cudnn
    original = cudnn.convolution_forward
    out = tmp_path / 'train.json'
    training_bench.main(['--dry-run', '--only', 'lstm,resnet18', '--rounds', '1',
                         '--out', str(out)])
    assert cudnn.convolution_forward is original   # (the dry run's emulation is undone)
    report = json.loads(out.read_text())
    assert report['dry_run'] is True
    lstm, resnet = report['steps']['lstm'], report['steps']['resnet18']
    for step in (lstm, resnet):
        assert 'error' not in step, step
        assert step['xgrad_over_torch'] > 0
        assert set(step['peak_gpu_bytes']) == {'xgrad', 'torch'}
        assert all(c['ok'] for c in step['gradients_vs_torch'].values()), step
        assert step['im2col_over_cudnn_paired'] > 0
    assert lstm['conv_path']['xgrad'] is None
    assert resnet['conv_path'] == {'xgrad': 'im2col', 'xgrad_cudnn_conv': 'cudnn (bench-local op)',
                                   'xgrad_no_cudnn': 'im2col'}
    assert set(resnet['variants']) == {'xgrad', 'xgrad_cudnn_conv', 'xgrad_no_cudnn', 'torch'}


def test_gpu_overhead_dry_run_reports_cpu_time_per_op(fake, training_bench, tmp_path):
    pytest.importorskip('torch')
    out = tmp_path / 'overhead.json'
    training_bench.main(['--dry-run', '--overhead', '--out', str(out)])
    overhead = json.loads(out.read_text())['overhead']
    chain = overhead['elementwise_chain']
    assert chain['ops_per_iteration'] == 1500
    assert chain['xgrad']['cpu_us_per_op'] > 0 and chain['torch']['cpu_us_per_op'] > 0
    assert overhead['mlp_step']['xgrad_over_torch_cpu'] > 0


def test_gpu_result_names_carry_the_gpu_and_date(training_bench):
    path = training_bench.default_out('gpu_training_steps', 'NVIDIA H100 80GB HBM3', False)
    assert re.search(r'results/gpu_training_steps_h100_\d{4}-\d\d-\d\d\.json$', path)
    assert training_bench._gpu_slug('Some New GPU') == 'some-new-gpu'
