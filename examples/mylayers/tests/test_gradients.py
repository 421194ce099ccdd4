"""mylayers' gradients: xgrad's sweep of every op, sample, dtype and order,
in pytest (one test per case), and the command CI runs.

rms_norm's backward has a deliberate bug (src/mylayers/layers.py): its
first-order cases are expected to fail, strictly, so that fixing the bug
(or the check missing it) turns the run red until this mark goes too.
"""

import json
import subprocess
import sys

import pytest

import xgrad
from xgrad.testing import check_case, gradient_cases

import mylayers.gradcheck  # NOQA: registers mylayers' ops

BROKEN = pytest.mark.xfail(raises=xgrad.GradientCheckError, strict=True,
                           reason='rms_norm leaves out the gradient through rms(x)')


def _param(case):
    broken = case.op == 'mylayers::rms_norm' and case.order == 1
    return pytest.param(case, id=str(case), marks=[BROKEN] if broken else [])


@pytest.mark.parametrize('case', [_param(c) for c in gradient_cases('mylayers')])
def test_gradient(case):
    check_case(case)


def test_log_cosh_has_no_second_order_cases():
    """Declared twice_differentiable=False: its backward takes tanh in NumPy."""
    orders = {c.order for c in gradient_cases('mylayers::log_cosh')}
    assert orders == {1}


def test_the_ci_command_names_the_wrong_gradient(tmp_path):
    """The command of .github/workflows/gradcheck.yml: the ops come from the
    installed package's xgrad.ops entry point."""
    report = tmp_path / 'gradcheck.json'
    proc = subprocess.run([sys.executable, '-m', 'xgrad', 'check', '--ops', 'mylayers',
                           '--no-progress', '--json', str(report)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = json.loads(report.read_text())['cases']
    assert {c['op'] for c in cases if c['status'] != 'passed'} == {'mylayers::rms_norm'}
    assert {c['op'] for c in cases} == {'mylayers::swish', 'mylayers::rms_norm',
                                        'mylayers::log_cosh'}
