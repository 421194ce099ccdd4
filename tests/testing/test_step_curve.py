"""The error of the central difference against its step, measured for
failed cases (``xgrad.testing._step_curve``): the V of a right gradient,
the floor of a wrong one, the shelf of a kink, a check step on the wrong
arm of the V, in the JSON report only where a case failed."""

import json
import math

import numpy
import pytest

import xgrad
from xgrad.testing import OpInfo, Sample, domains, register
from xgrad.testing import _cli, _driver, _step_curve, _user_ops

from ._user_modules import clean_user_ops  # NOQA: F401 (fixture)


def _failed_curve(info, order=1, dtype='float64'):
    """The curve of ``info``'s first sample at ``order``, which must fail."""
    info, = register(info, package='curve')
    case = _driver.Case(info, info.samples[0], numpy.dtype(dtype), 'native:0', order)
    result = _driver.run_case(case, curves=True)
    assert not result.passed, result
    assert 'errors' in result.curve, result.curve
    return result.curve


def _slope(curve, big, small):
    """d log10(error) / d log10(step) between the steps ``big`` and ``small``."""
    e = dict(zip(curve['steps'], curve['errors']))
    return math.log10(e[big] / e[small]) / math.log10(big / small)


class _Scaled(xgrad.FunctionNode):
    """y = sin(2x) with its derivative times ``factor`` (1: right)."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, inputs):
        self.retain_inputs((0,))
        return numpy.sin(2 * inputs[0]),

    def backward(self, targets, gys):
        x, = self.get_retained_inputs()
        return gys[0] * xgrad.cos(x * 2) * (2 * self.factor),


def _scaled(factor):
    return lambda x: _Scaled(factor).apply([x])[0]


def test_right_gradient_with_a_large_step_draws_a_v(clean_user_ops):
    """The check's step 0.1 is on the truncation arm (slope 2); the V's
    bottom is far below the tolerance, round-off raises its left arm."""
    curve = _failed_curve(OpInfo('sin2x', _scaled(1.0), samples=[Sample((3,))],
                                 dtypes=['float64'], eps={'float64': 0.1}))
    assert curve['steps'][0] == 0.1 and curve['steps'][-1] == 1e-12
    assert curve['eps'] == 0.1 and curve['rtol'] == 1e-5
    assert _slope(curve, 1e-2, 1e-3) == pytest.approx(2, abs=0.1)
    errors = curve['errors']
    low = min(errors)
    assert low < 1e-9  # far below rtol 1e-5
    k = errors.index(low)
    assert 0 < k < len(errors) - 1 and errors[-1] > 100 * low  # a V, not a slope
    assert curve['diagnosis'].startswith('step too large')


def test_wrong_gradient_draws_a_floor_above_the_tolerance(clean_user_ops):
    curve = _failed_curve(OpInfo('sin2x', _scaled(1.05), samples=[Sample((3,))],
                                 dtypes=['float64']))
    finite = [e for e in curve['errors'] if e is not None]
    assert min(finite) > curve['rtol']
    assert min(finite) == pytest.approx(0.05 / 1.05, rel=0.2)  # the 5% the gradient is off
    assert curve['diagnosis'].startswith('wrong gradient')


def test_too_small_a_step_is_round_off(clean_user_ops):
    curve = _failed_curve(OpInfo('sin2x', _scaled(1.0), samples=[Sample((3,))],
                                 domain=domains.within(0.2, 0.6), dtypes=['float64'],
                                 eps={'float64': 1e-12}))
    assert min(curve['errors']) < curve['rtol'] < curve['errors'][-1]
    assert curve['diagnosis'].startswith('step too small')


def test_a_kink_within_the_step_is_a_shelf(clean_user_ops):
    """Inputs within 3e-7 of relu's kink, the check's step 1e-5: every draw
    is redrawn; the curve is level at large steps and drops below 1e-7."""
    curve = _failed_curve(OpInfo('kinked', lambda x: xgrad.relu(x - 0.3) * 3 + x,
                                 samples=[Sample((4,))], dtypes=['float64'],
                                 domain=domains.within(0.3 - 3e-7, 0.3 + 3e-7)))
    errors = dict(zip(curve['steps'], curve['errors']))
    assert errors[1e-1] == pytest.approx(errors[1e-4], rel=0.2) and errors[1e-1] > 0.1
    assert errors[1e-8] < curve['rtol']
    assert curve['diagnosis'].startswith('kink')


def test_second_order_curves(clean_user_ops):
    """A second derivative lost (the first computed from a constant copy of
    x): the order-2 curve is a floor."""
    class Cube(xgrad.FunctionNode):
        def forward(self, inputs):
            self.retain_inputs((0,))
            return inputs[0] ** 3,

        def backward(self, targets, gys):
            x, = self.get_retained_inputs()
            x = x.as_grad_stopped()
            return gys[0] * x * x * 3,

    curve = _failed_curve(OpInfo('cube', lambda x: Cube().apply([x])[0],
                                 samples=[Sample((3,))], dtypes=['float64']), order=2)
    assert min(e for e in curve['errors'] if e is not None) > 0.1
    assert curve['diagnosis'].startswith('wrong gradient')


def test_diagnose_reads_the_shape():
    steps = [10.0 ** -k for k in range(1, 13)]

    def curve(errors, eps=1e-5):
        return {'steps': steps, 'errors': errors, 'eps': eps, 'rtol': 1e-5, 'atol': 1e-6,
                'measure': 'relative'}

    v = [1e-2 * (h / 0.1) ** 2 + 1e-16 / h for h in steps]
    assert _step_curve.diagnose(curve(v, 1e-1)).startswith('step too large')
    assert _step_curve.diagnose(curve(v, 1e-12)).startswith('step too small')
    assert _step_curve.diagnose(curve(v, 1e-5)).startswith('passes at step')
    assert _step_curve.diagnose(curve([0.3] * 12)).startswith('wrong gradient')
    assert _step_curve.diagnose(curve([None] * 12)).startswith('no step')
    shelf = [0.5] * 5 + [1e-9, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5]
    assert _step_curve.diagnose(curve(shelf, 1e-4)).startswith('kink')


def test_reports_carry_curves_of_failed_cases_only(clean_user_ops, capsys, tmp_path):
    register(OpInfo('sin2x', _scaled(1.05), samples=[Sample((3,))], dtypes=['float64']),
             OpInfo('right', _scaled(1.0), samples=[Sample((3,))], dtypes=['float64']),
             package='curve')
    report = tmp_path / 'r.json'
    assert _cli.main(['--ops', 'curve', '--json', str(report), '--no-progress']) == 1
    capsys.readouterr()
    for c in json.loads(report.read_text())['cases']:
        assert ('step_curve' in c) == (c['status'] != 'passed'), c
    # Without a report that shows them, none is measured (no cost).
    info = _user_ops.select(['curve::sin2x'])[0]
    case = _driver.Case(info, info.samples[0], numpy.dtype('float64'), 'native:0', 1)
    assert _driver.run_case(case).curve is None


def test_xgrads_own_records_keep_their_fields(tmp_path, capsys):
    """A passing run of xgrad's ops writes the records it always wrote."""
    report = tmp_path / 'r.json'
    assert _cli.main(['--ops', 'tanh', '--json', str(report), '--no-progress']) == 0
    capsys.readouterr()
    data = json.loads(report.read_text())
    assert 'packages' not in data
    assert set(data['arguments']) == {'ops', 'dtype', 'device', 'order', 'seed', 'repeat',
                                      'snapshot'}
    for c in data['cases']:
        assert set(c) == {'op', 'sample', 'dtype', 'device', 'order', 'seed', 'status',
                          'worst_abs', 'worst_rel', 'message', 'seconds', 'draws',
                          'snapshot', 'index'}
