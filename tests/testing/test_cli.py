"""``python -m xgrad check``: finds deliberately broken ops and says which op,
input and error; writes reports CI servers read; records and compares
golden gradients; refuses bad arguments."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy
import pytest

import xgrad
from xgrad._ops import _args, registry
from xgrad._ops._op import PyOp
from xgrad._ops.registry import OpInfo, Sample
from xgrad.testing import _cli


# ---------------------------------------------------------------------------
# Deliberately broken ops, registered for one test at a time

class WrongFirst(PyOp):
    """y = x**2 with gradient 3x (wrong)."""
    op_name = 'broken_wrong_first'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] ** 2,)

    def grads(self, xp, targets, gys, xs, ys):
        return (gys[0] * xs[0] * 3,)


class WrongSecond(PyOp):
    """y = x**3 with the right first derivative 3x**2, but computed from a
    constant copy of x, so the second derivative is lost (0 instead of 6x)."""
    op_name = 'broken_wrong_second'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] ** 3,)

    def grads(self, xp, targets, gys, xs, ys):
        x = xs[0]
        if isinstance(x, xgrad.ndarray):
            x = x.as_grad_stopped()
        return (gys[0] * x * x * 3,)


class MissingGradient(PyOp):
    """y = a * b with no gradient for b."""
    op_name = 'broken_missing_gradient'

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return (inputs[0] * inputs[1],)

    def grads(self, xp, targets, gys, xs, ys):
        return tuple(gys[0] * xs[1] if t == 0 else None for t in targets)


class WrongShape(PyOp):
    """y = sum(x, axis=1) whose gradient forgets to broadcast back."""
    op_name = 'broken_wrong_shape'

    def forward(self, inputs):
        return (inputs[0].sum(axis=1),)

    def grads(self, xp, targets, gys, xs, ys):
        return (gys[0],)


def _apply(cls):
    def op(*xs):
        return _args.apply(cls(), *[_args.as_array(x, 'x') for x in xs])
    op.__name__ = cls.op_name
    return op


BROKEN = {
    'broken_wrong_first': (WrongFirst, [Sample((2, 3))], 'input 0'),
    'broken_wrong_second': (WrongSecond, [Sample((2, 3))], 'input 0'),
    'broken_missing_gradient': (MissingGradient, [Sample((2, 3), (2, 3))], 'input 1'),
    'broken_wrong_shape': (WrongShape, [Sample((2, 3))], 'input 0'),
}


@pytest.fixture
def broken_op(request):
    """Register the broken op ``request.param`` for the test, then remove it."""
    name = request.param
    cls, samples, _ = BROKEN[name]
    info = OpInfo(name, _apply(cls), samples=samples, dtypes=(numpy.float64, numpy.float32))
    registry.register(info)
    yield name
    del registry._REGISTRY[name]


def _run(argv, capsys):
    code = _cli.main(argv + ['--no-progress'])
    out = capsys.readouterr().out
    return code, out


@pytest.mark.parametrize('broken_op, order', [
    ('broken_wrong_first', '1'), ('broken_wrong_second', '2'),
    ('broken_missing_gradient', '1'), ('broken_wrong_shape', '1')],
    indirect=['broken_op'])
def test_check_fails_on_broken_op_naming_op_and_input(broken_op, order, capsys, tmp_path):
    report = tmp_path / 'report.json'
    code, out = _run(['--ops', broken_op, '--order', order, '--json', str(report)], capsys)
    assert code == 1
    assert broken_op in out
    failed = [c for c in json.loads(report.read_text())['cases'] if c['status'] != 'passed']
    assert failed and all(c['op'] == broken_op for c in failed)
    assert any(BROKEN[broken_op][2] in c['message'] for c in failed), failed[0]['message']


@pytest.mark.parametrize('broken_op', ['broken_wrong_second'], indirect=True)
def test_wrong_second_derivative_passes_first_order(broken_op, capsys):
    code, out = _run(['--ops', broken_op, '--order', '1'], capsys)
    assert code == 0, out


def test_correct_ops_pass_and_reports_are_what_ci_reads(capsys, tmp_path):
    report, junit = tmp_path / 'r.json', tmp_path / 'r.xml'
    code, out = _run(['--ops', 'sin,tanh,matmul', '--json', str(report),
                      '--junit', str(junit)], capsys)
    assert code == 0, out
    data = json.loads(report.read_text())
    assert data['summary']['failed'] == 0
    case = data['cases'][0]
    for field in ('op', 'sample', 'dtype', 'device', 'order', 'seed', 'status',
                  'worst_abs', 'worst_rel'):
        assert field in case
    assert {c['op'] for c in data['cases']} == {'sin', 'tanh', 'matmul'}
    suite = ET.parse(junit).getroot().find('testsuite')
    cases = suite.findall('testcase')
    # One test case per op, dtype, device and order.
    assert len(cases) == 3 * 3 * 2 == int(suite.get('tests'))
    assert {c.get('classname') for c in cases} == {
        'xgrad.check.sin', 'xgrad.check.tanh', 'xgrad.check.matmul'}
    assert not suite.findall('.//failure')


@pytest.mark.parametrize('broken_op', ['broken_wrong_first'], indirect=True)
def test_junit_failure_names_the_case(broken_op, capsys, tmp_path):
    junit = tmp_path / 'r.xml'
    _run(['--ops', broken_op, '--order', '1', '--junit', str(junit)], capsys)
    failures = ET.parse(junit).getroot().findall('.//failure')
    assert len(failures) == 2  # float64 and float32
    assert 'input 0' in failures[0].text


def test_repeat_runs_each_case_with_new_seeds(capsys, tmp_path):
    report = tmp_path / 'r.json'
    code, _ = _run(['--ops', 'exp', '--dtype', 'float32', '--order', '1', '--repeat', '3',
                    '--seed', '7', '--json', str(report)], capsys)
    assert code == 0
    seeds = {c['seed'] for c in json.loads(report.read_text())['cases']}
    assert seeds == {7, 8, 9}


def test_snapshot_records_then_compares(capsys, tmp_path):
    snap = tmp_path / 'golden'
    report = tmp_path / 'r.json'
    code, out = _run(['--ops', 'tanh', '--snapshot', str(snap), '--json', str(report)],
                     capsys)
    assert code == 0, out
    statuses = [c['snapshot'] for c in json.loads(report.read_text())['cases']]
    assert 'recorded' in statuses and 'matched' in statuses
    code, out = _run(['--ops', 'tanh', '--snapshot', str(snap), '--json', str(report)],
                     capsys)
    assert code == 0, out
    statuses = {c['snapshot'] for c in json.loads(report.read_text())['cases']}
    assert statuses == {'matched'}


def test_snapshot_catches_a_changed_gradient(capsys, tmp_path):
    """Golden gradients recorded from a correct op catch the op after its
    gradient breaks, in every dtype, float16 included."""
    snap = str(tmp_path / 'golden')
    info = OpInfo('snap_square', _apply(_Square), samples=[Sample((2, 3))])
    registry.register(info)
    try:
        assert _run(['--ops', 'snap_square', '--snapshot', snap], capsys)[0] == 0
        _Square.factor = 2.2  # now 10% off
        code, out = _run(['--ops', 'snap_square', '--snapshot', snap], capsys)
        assert code == 1
        assert 'golden' in out and 'snap_square' in out and 'float16' in out
    finally:
        _Square.factor = 2.0
        del registry._REGISTRY['snap_square']


class _Square(PyOp):
    op_name = 'snap_square'
    factor = 2.0

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] * inputs[0],)

    def grads(self, xp, targets, gys, xs, ys):
        return (gys[0] * xs[0] * type(self).factor,)


@pytest.mark.parametrize('argv, what', [
    (['--ops', 'no_such_op'], 'no_such_op'),
    (['--dtype', 'int32'], 'int32'),
    (['--order', '3'], 'order'),
    (['--device', 'native:99'], 'native:99'),
    (['--repeat', '0'], 'repeat'),
    (['--update-snapshot'], 'snapshot'),
])
def test_bad_arguments_exit_2_naming_them(argv, what, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(argv)
    assert e.value.code == 2
    assert what in capsys.readouterr().err


def test_module_entry_point():
    result = subprocess.run([sys.executable, '-m', 'xgrad', 'check', '--ops', 'square',
                             '--dtype', 'float64', '--order', '1', '--no-progress'],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'passed' in result.stdout
    result = subprocess.run([sys.executable, '-m', 'xgrad', 'nothing'],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and 'check' in result.stderr
