"""The benchmarks run and xgrad's results agree with the hand-written NumPy
floor (bench/run.py checks loss and gradients before timing). No timing is
asserted here: speed is measured by bench/run.py itself."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_benchmark_agrees_with_the_numpy_floor():
    run = ROOT / 'bench' / 'run.py'
    if not run.exists():  # e.g. tests run from an sdist without bench/
        import pytest
        pytest.skip('bench/ is not part of this checkout')
    result = subprocess.run(
        [sys.executable, str(run), '--quick', '--frameworks', 'xgrad,numpy',
         '--rounds', '1', '--min-time', '0.001'],
        capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ('elementwise_chain', 'mlp_step', 'gradient_penalty',
                 'large_elementwise', 'large_mlp', 'conv', 'batch_norm'):
        assert name in result.stdout
    assert 'ERROR' not in result.stdout


def _bench_command(args):
    script = ROOT / 'bench' / args[0]
    if not script.exists():
        import pytest
        pytest.skip('bench/ is not part of this checkout')
    pytest = __import__('pytest')
    pytest.importorskip('torch')
    return subprocess.run([sys.executable, str(script)] + args[1:], capture_output=True,
                          text=True, timeout=300, cwd=str(ROOT))


def test_conv_sweep_runs_one_point_and_a_pool_point_against_torch():
    # --limit: one conv point (its gradients are checked against torch's
    # first), then the pooling points of --quick; writes nothing.
    result = _bench_command(['conv_sweep.py', '--quick', '--limit', '1', '--rounds', '1',
                             '--min-time', '0.001'])
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"at_or_below_torch"' in result.stdout and 'max_pool' in result.stderr


def test_conv_sweep_reruns_the_points_an_earlier_sweep_lost(tmp_path):
    row = {'batch': 2, 'in_channels': 3, 'out_channels': 4, 'size': 6, 'kernel': 3,
           'stride': 1}
    earlier = {'conv': [dict(row, op='conv_transpose', paired_ratio=1.4),
                        dict(row, op='conv', size=5, paired_ratio=0.7)],
               'pool': [{'op': 'max_pool', 'batch': 2, 'channels': 3, 'size': 6, 'kernel': 2,
                         'stride': 2, 'pad': 0, 'paired_ratio': 1.2}]}
    path = tmp_path / 'earlier.json'
    path.write_text(json.dumps(earlier))
    result = _bench_command(['conv_sweep.py', '--rerun', str(path), '--rounds', '1',
                             '--min-time', '0.001'])
    assert result.returncode == 0, result.stdout + result.stderr
    timed = [line.split()[0] for line in result.stderr.splitlines() if 'xgrad' in line]
    assert timed == ['conv_transpose', 'max_pool'], result.stderr  # not the conv at 0.7
    assert 'wrote' not in result.stderr


def test_op_overhead_times_registered_ops_against_torch_and_numpy():
    result = _bench_command(['op_overhead.py', '--only', 'tanh,conv,max_pool', '--rounds', '1',
                             '--min-time', '0.001'])
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ('| tanh |', '| conv |', '| max_pool |'):
        assert name in result.stdout
    assert 'ERROR' not in result.stderr


def test_conv_sweep_times_the_points_it_is_given(tmp_path):
    out = tmp_path / 'points.json'
    result = _bench_command(['conv_sweep.py', '--points', 'conv_transpose:2,3,4,6,3,2',
                             'conv:1,2,4,5,1,1', '--rounds', '1', '--min-time', '0.001',
                             '--out', str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(out.read_text())['conv']
    assert [(r['op'], r['batch'], r['in_channels'], r['out_channels'], r['size'], r['kernel'],
             r['stride']) for r in rows] == [('conv_transpose', 2, 3, 4, 6, 3, 2),
                                             ('conv', 1, 2, 4, 5, 1, 1)]
    assert 'max_pool' not in result.stderr


def test_conv_sweep_refuses_a_malformed_point():
    result = _bench_command(['conv_sweep.py', '--points', 'conv:2,3,4'])
    assert result.returncode == 2
    assert 'conv:N,C,O,SIZE,K,S' in result.stderr


def test_ab_builds_compares_conv_points_over_torch(tmp_path):
    # the same tree on both sides: one pair, the two named points reported
    out = tmp_path / 'ab.json'
    result = _bench_command(['ab_builds.py', str(ROOT), str(ROOT), '--suite', 'conv_points',
                             '--only', 'conv:1,2,4,5,3,1,conv_transpose:2,3,4,6,3,2',
                             '--pairs', '1', '--rounds', '1', '--out', str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(out.read_text())['summary']
    assert sorted(summary) == ['conv 1,2,4,5,3,1', 'conv_transpose 2,3,4,6,3,2']
    assert all(s['median_pair_ratio_over_floor'] > 0 for s in summary.values())


def test_ab_builds_runs_conv_points_with_default_threads(tmp_path):
    out = tmp_path / 'ab.json'
    result = _bench_command(['ab_builds.py', str(ROOT), str(ROOT), '--suite', 'conv_points',
                             '--only', 'conv:1,2,4,5,3,1', '--threads', '0', '--pairs', '1',
                             '--rounds', '1', '--out', str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text())['threads'] == 'default'
    # the other suites run one thread only
    refused = _bench_command(['ab_builds.py', str(ROOT), str(ROOT), '--threads', '0'])
    assert refused.returncode == 2 and '--threads 0 is for --suite conv_points' in refused.stderr
