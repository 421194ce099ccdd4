"""The benchmarks run and xgrad's results agree with the hand-written NumPy
floor (bench/run.py checks loss and gradients before timing). No timing is
asserted here: speed is measured by bench/run.py itself."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
