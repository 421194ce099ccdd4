"""bench/functional.py, bench/checkpoint.py and bench/graph_variants.py run
(issues 25 and 27): each checks its results before timing (functional and
graph_variants against torch, checkpoint against the plain step), so a
quick run is a correctness test too. No timing is asserted."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(script, *args):
    path = ROOT / 'bench' / script
    if not path.exists():
        pytest.skip('bench/ is not part of this checkout')
    return subprocess.run([sys.executable, str(path), '--quick'] + list(args),
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))


def test_checkpoint_bench_runs():
    proc = _run('checkpoint.py', '--blocks', '3', '--rounds', '1', '--mem-rounds', '1')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'checkpoint / plain: memory' in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec('torch') is None,
                    reason='torch is not installed (bench/functional.py compares with it)')
def test_functional_bench_agrees_with_torch_func():
    proc = _run('functional.py', '--rounds', '1', '--min-time', '0.001')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ('jacobian_mlp', 'hvp_mlp_loss', 'hvp_mlp_loss_reverse', 'jvp_mlp'):
        assert name in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec('torch') is None,
                    reason='torch is not installed (bench/graph_variants.py compares with it)')
def test_graph_variants_bench_agrees_with_torch():
    proc = _run('graph_variants.py', '--rounds', '1', '--min-time', '0.001')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ('chain_scalars', 'mlp_maximum', 'mlp_methods', 'gp_tanh_dots'):
        assert name in proc.stdout
