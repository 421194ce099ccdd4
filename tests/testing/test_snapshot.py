"""The golden-gradient store (xgrad.testing._snapshot): its files, writes
that an interruption cannot corrupt, comparisons that name what is wrong,
and GradSnapshot.check catching deliberately broken gradients."""

import json
import os
import re
import threading
import zlib

import numpy
import pytest

import xgrad
from xgrad.testing import _snapshot
from xgrad.testing._snapshot import (GradSnapshot, MissingSnapshotError, SnapshotError,
                                     file_name)

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# a golden file stores arrays and gives them back (bits copied); the expected
# values are the same NumPy expressions on the same inputs as those recorded.


F16 = numpy.dtype('float16')
F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')


@pytest.fixture
def store(tmp_path):
    return GradSnapshot(tmp_path / 'golden')


def _record_simple(store, key='op/sample', order=1, scale=1.0):
    """Inputs (2, 3) and (), the second without a gradient; grad_outputs
    (2, 3) and None."""
    x = numpy.arange(6.0).reshape(2, 3) / 7
    store.record(key, [x, numpy.array(2.0)], [numpy.ones((2, 3)), None],
                 [scale * 3 * x ** 2, None], order=order, meta={'op': 'cube'})
    return x


def _index(store):
    with open(os.path.join(store.directory, 'index.json'), encoding='utf-8') as f:
        return json.load(f)


def _leftovers(store):
    return [n for n in os.listdir(store.directory) if n.endswith('.tmp')]


# ---------------------------------------------------------------------------
# Round trip and the files

def test_round_trip(store):
    x = _record_simple(store)
    assert store.has('op/sample') and not store.has('op/sample', order=2)
    assert not store.has('other')
    golden = store.load('op/sample')
    numpy.testing.assert_array_equal(golden.inputs[0], x)
    assert golden.inputs[1].shape == () and golden.inputs[1] == 2.0
    numpy.testing.assert_array_equal(golden.grad_outputs[0], numpy.ones((2, 3)))
    assert golden.grad_outputs[1] is None and golden.grads[1] is None
    numpy.testing.assert_array_equal(golden.grads[0], 3 * x ** 2)
    assert all(a.dtype == F64 for a in golden.inputs + golden.grads[:1])
    assert golden.meta == {'op': 'cube'}
    assert store.keys() == [('op/sample', 1)]


def test_record_stores_float64_of_any_array(store):
    x = xgrad.array(numpy.array([0.5, 1.25], F16))
    store.record('k', [x], [numpy.ones(2, F32)], [x * 2])
    golden = store.load('k')
    assert golden.inputs[0].dtype == F64 and golden.grads[0].dtype == F64
    numpy.testing.assert_array_equal(golden.grads[0], [1.0, 2.5])


def test_index_is_human_readable_and_stable(store):
    _record_simple(store, 'b')
    _record_simple(store, 'a', order=2)
    _record_simple(store, 'a')
    entries = _index(store)['entries']
    assert [(e['key'], e['order']) for e in entries] == [('a', 1), ('a', 2), ('b', 1)]
    entry = entries[0]
    assert entry['file'] == file_name('a', 1) and os.sep not in entry['file']
    assert entry['inputs'] == [[2, 3], []]
    assert entry['grad_outputs'] == [[2, 3], None]
    assert entry['grads'] == [[2, 3], None]
    assert entry['dtype'] == 'float64' and entry['xgrad_version'] == xgrad.__version__
    assert entry['meta'] == {'op': 'cube'} and entry['recorded'].endswith('+00:00')
    text = open(os.path.join(store.directory, 'index.json'), encoding='utf-8').read()
    assert '"inputs": [\n        [2, 3],\n        []\n      ]' in text  # one line a shape
    assert text == _snapshot._index_text(store._read_index())  # sorted, reproducible
    # None is absent from the .npz, and listed as null in the index.
    with numpy.load(os.path.join(store.directory, entry['file'])) as data:
        assert sorted(data.files) == ['grad_outputs_0', 'grads_0', 'inputs_0', 'inputs_1']


def test_rerecord_replaces_one_entry(store):
    _record_simple(store, 'a')
    _record_simple(store, 'b')
    _record_simple(store, 'a', scale=2.0)
    assert store.keys() == [('a', 1), ('b', 1)]
    x = store.load('a').inputs[0]
    numpy.testing.assert_array_equal(store.load('a').grads[0], 6 * x ** 2)
    numpy.testing.assert_array_equal(store.load('b').grads[0], 3 * x ** 2)
    assert len(os.listdir(store.directory)) == 3


ODD_KEYS = ['tests/test_x.py::TestA::test_f[native:0-float16]', 'a b', 'a/b', 'a_b',
            'a\\b', '../../escape', '.hidden', '/', 'ключ [1,2]', 'x' * 500,
            'tests/test_x.py::test_f[native:0-float16]::second']


def test_odd_keys_map_to_safe_unique_stable_files(store):
    for i, key in enumerate(ODD_KEYS):
        store.record(key, [numpy.full(2, float(i))], [None], [None])
    names = [file_name(k, 1) for k in ODD_KEYS]
    assert len(set(names)) == len(ODD_KEYS)
    assert sorted(os.listdir(store.directory)) == sorted(names + ['index.json'])
    for name in names:
        assert all(c.isalnum() or c in '._-' for c in name) and not name.startswith('.')
        assert len(name) < 100
    for i, key in enumerate(ODD_KEYS):
        numpy.testing.assert_array_equal(store.load(key).inputs[0], [i, i])
    assert store.keys() == sorted((k, 1) for k in ODD_KEYS)
    # Stable across runs and versions: the name depends on the key and order only.
    assert file_name('op/sample', 1) == 'op_sample-e7d015ad3cb0.order1.npz'
    assert file_name('op/sample', 2) == 'op_sample-e7d015ad3cb0.order2.npz'


# ---------------------------------------------------------------------------
# Interrupted writes, damaged files, other versions

def test_interrupted_array_write_keeps_the_old_golden(store, monkeypatch):
    _record_simple(store, 'a')
    before = store.load('a')

    def half_written(f, **arrays):
        f.write(b'PK\x03\x04 half a zip')
        raise KeyboardInterrupt

    monkeypatch.setattr(numpy, 'savez_compressed', half_written)
    with pytest.raises(KeyboardInterrupt):
        _record_simple(store, 'a', scale=5.0)
    monkeypatch.undo()
    numpy.testing.assert_array_equal(store.load('a').grads[0], before.grads[0])
    assert _leftovers(store) == []


def test_interrupted_index_write_keeps_the_old_index(store, monkeypatch):
    _record_simple(store, 'a')
    replace = os.replace

    def fail_on_index(src, dst):
        if dst.endswith('index.json'):
            raise OSError('disk full')
        replace(src, dst)

    monkeypatch.setattr(os, 'replace', fail_on_index)
    with pytest.raises(OSError, match='disk full'):
        _record_simple(store, 'b')
    monkeypatch.undo()
    assert store.keys() == [('a', 1)]  # b's .npz is an orphan nobody reads
    store.load('a')
    assert _leftovers(store) == []
    _record_simple(store, 'b')  # and the next run records it
    assert store.keys() == [('a', 1), ('b', 1)]


def test_corrupt_index_is_reported_and_never_overwritten(store):
    _record_simple(store, 'a')
    path = os.path.join(store.directory, 'index.json')
    with open(path, 'w') as f:
        f.write('{"format": 1, "entries": [')
    for call in (store.keys, lambda: store.load('a'), lambda: _record_simple(store, 'b')):
        with pytest.raises(SnapshotError, match='index.json'):
            call()
    assert open(path).read() == '{"format": 1, "entries": ['
    with open(path, 'w') as f:
        f.write('[1, 2]')
    with pytest.raises(SnapshotError, match='not a golden-gradient index'):
        store.has('a')


def test_corrupt_or_missing_array_file_is_reported(store):
    _record_simple(store, 'a')
    path = os.path.join(store.directory, file_name('a', 1))
    with open(path, 'r+b') as f:
        f.truncate(40)
    with pytest.raises(SnapshotError, match="cannot read the golden gradients of 'a'"):
        store.load('a')
    os.remove(path)
    with pytest.raises(SnapshotError, match=file_name('a', 1)):
        store.load('a')


def test_array_file_that_disagrees_with_the_index_is_reported(store):
    _record_simple(store, 'a')
    path = os.path.join(store.directory, file_name('a', 1))
    numpy.savez_compressed(path, inputs_0=numpy.ones(3), inputs_1=numpy.ones(()),
                           grad_outputs_0=numpy.ones((2, 3)), grads_0=numpy.ones(3))
    with pytest.raises(SnapshotError, match=r'inputs_0 is an array of shape \(3,\) '
                                            r'and dtype float64 there and \(2, 3\) in the '
                                            r"index; re-record key 'a'"):
        store.load('a')
    arrays = dict(inputs_0=numpy.ones((2, 3)), inputs_1=numpy.ones(()),
                  grad_outputs_0=numpy.ones((2, 3)), grads_0=numpy.ones((2, 3)))
    numpy.savez_compressed(path, grads_1=numpy.ones(()), **arrays)
    with pytest.raises(SnapshotError, match='grads_1 is an array of shape .* absent in '):
        store.load('a')
    numpy.savez_compressed(path, bogus=numpy.ones(()), **arrays)
    with pytest.raises(SnapshotError, match=r"arrays the index does not list: \['bogus'\]"):
        store.load('a')
    numpy.savez_compressed(path, **arrays)
    store.load('a')


def test_store_of_another_xgrad_version_is_read(store):
    _record_simple(store, 'a')
    index = _index(store)
    index['entries'][0]['xgrad_version'] = '0.0.1-very-old'
    with open(os.path.join(store.directory, 'index.json'), 'w') as f:
        json.dump(index, f)
    numpy.testing.assert_array_equal(store.load('a').grads[0].shape, (2, 3))
    _record_simple(store, 'b')  # and it takes new entries
    assert _index(store)['entries'][0]['xgrad_version'] == '0.0.1-very-old'


def test_newer_format_is_refused_clearly(store):
    _record_simple(store, 'a')
    index = _index(store)
    index['format'] = 99
    with open(os.path.join(store.directory, 'index.json'), 'w') as f:
        json.dump(index, f)
    with pytest.raises(SnapshotError, match='format 99, written by a newer xgrad'):
        store.load('a')


def test_missing_golden(store):
    assert store.keys() == [] and not store.has('a')
    assert not os.path.exists(store.directory)  # created on the first record only
    _record_simple(store, 'a')
    with pytest.raises(MissingSnapshotError) as info:
        store.load('a', order=2)
    assert isinstance(info.value, KeyError) and isinstance(info.value, xgrad.XgradError)
    assert "'a' (order 2)" in str(info.value) and store.directory in str(info.value)
    with pytest.raises(MissingSnapshotError, match="'b'"):
        store.compare('b', [None], F32)


def test_concurrent_records_lose_nothing(store):
    def work(t):
        for i in range(5):
            _record_simple(store, 'thread{}/{}'.format(t, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.keys()) == 30 and _leftovers(store) == []


@pytest.mark.parametrize('call, error, match', [
    (lambda s: s.record('k', [numpy.ones(2)], [], [numpy.ones(2), None]), ValueError,
     '2 grads for 1 inputs'),
    (lambda s: s.record('k', [numpy.ones(2)], [], [numpy.ones(3)]), ValueError,
     r'grads\[0\] has shape \(3,\), inputs\[0\] has shape \(2,\)'),
    (lambda s: s.record('k', [numpy.ones(2)], [], [numpy.array([1, numpy.nan])]),
     ValueError, 'not finite'),
    (lambda s: s.record('k', [None], [], [None]), TypeError, r'inputs\[0\]'),
    (lambda s: s.record('k', [numpy.ones(2)], [], ['a']), TypeError,
     r'grads\[0\] must be a real NumPy or xgrad array or None, not a str'),
    (lambda s: s.record('k', numpy.ones(2), [], [None]), TypeError,
     'inputs must be a list or tuple'),
    (lambda s: s.record('k', [numpy.ones(2)], [], [None], meta={'a': object()}),
     TypeError, 'JSON'),
    (lambda s: s.record('k', [numpy.ones(2)], [], [None], meta=[1]), TypeError, 'dict'),
    (lambda s: s.record('', [numpy.ones(2)], [], [None]), TypeError, 'non-empty str'),
    (lambda s: s.record(('k',), [numpy.ones(2)], [], [None]), TypeError, 'non-empty str'),
    (lambda s: s.record('k', [numpy.ones(2)], [], [None], order=0), ValueError,
     'positive int'),
    (lambda s: s.has('k', order=1.0), ValueError, 'positive int'),
])
def test_bad_record_arguments(store, call, error, match):
    with pytest.raises(error, match=match):
        call(store)
    assert store.keys() == []


# ---------------------------------------------------------------------------
# compare

def test_compare_passes_within_the_dtype_tolerance(store):
    x = _record_simple(store)
    golden = 3 * x ** 2
    exact = store.compare('op/sample', [golden, None], F64)
    assert exact.ok and exact.worst_abs == 0 and exact.worst_input == 0
    assert 'match the golden ones' in exact.message
    # float16 gradients: default tolerance (1e-2, 1e-2), from _tolerances.
    half = xgrad.array(golden.astype(F16))
    result = store.compare('op/sample', [half, None], F16)
    assert result.ok and 0 < result.worst_abs < 1e-2 and 0 < result.worst_rel < 1e-3
    assert not store.compare('op/sample', [golden.astype(F16), None], F64).ok
    assert store.compare('op/sample', [golden * 1.05, None], F64, rtol=0.06).ok
    assert store.compare('op/sample', [golden + 0.1, None], F64, atol=0.11).ok


def test_compare_names_key_input_and_error_of_a_wrong_gradient(store):
    x = _record_simple(store)
    wrong = 3 * x ** 2
    wrong[1, 2] *= 1.1
    result = store.compare('op/sample', [wrong.astype(F32), None], F32)
    assert not result.ok and result.worst_input == 0
    assert result.worst_abs == pytest.approx(0.1 * 3 * x[1, 2] ** 2, rel=1e-5)
    assert result.worst_rel == pytest.approx(0.1, rel=1e-5)
    message = result.message
    assert "'op/sample' (order 1, float32)" in message
    assert 'atol=0.002, rtol=0.002' in message
    assert 'input 0: 1 of 6 elements off; worst element (1, 2): golden 1.53061, ' \
           'analytic 1.68367, abs error 0.153, rel error 0.1' in message
    assert file_name('op/sample', 1) in message and xgrad.__version__ in message


def test_compare_missing_extra_and_nan_gradients(store):
    x = _record_simple(store)
    golden = 3 * x ** 2
    missing = store.compare('op/sample', [None, None], F32)
    assert not missing.ok and missing.worst_input == 0
    assert 'input 0: no gradient (taken as zeros) but the golden gradient is nonzero; ' \
           '5 of 6 elements off' in missing.message
    extra = store.compare('op/sample', [golden, numpy.array(0.5)], F64)
    assert not extra.ok and extra.worst_input == 1
    assert 'input 1: a nonzero gradient where the golden one has none' in extra.message
    assert store.compare('op/sample', [golden, numpy.array(0.0)], F64).ok
    nan = golden.copy()
    nan[0, 1] = numpy.nan
    result = store.compare('op/sample', [nan, None], F64)
    assert not result.ok and result.worst_abs == numpy.inf
    assert 'worst element (0, 1): golden 0.0612245, analytic nan' in result.message


def test_missing_gradient_of_a_zero_golden_passes(store):
    store.record('z', [numpy.ones(3)], [numpy.ones(3)], [numpy.zeros(3)])
    assert store.compare('z', [None], F16).ok


def test_compare_shape_mismatch(store):
    _record_simple(store)
    result = store.compare('op/sample', [numpy.ones((3, 2)), None], F64)
    assert not result.ok and result.worst_input == 0 and result.worst_abs == numpy.inf
    assert 'input 0: gradient of shape (3, 2), the golden gradient has shape (2, 3)' \
        in result.message


def test_compare_bad_use(store):
    _record_simple(store)
    with pytest.raises(ValueError, match="compare.'op/sample'.: 1 gradients given, the "
                                         'golden gradients have 2'):
        store.compare('op/sample', [None], F32)
    with pytest.raises(xgrad.DtypeError, match='int32'):
        store.compare('op/sample', [None, None], numpy.int32, atol=0, rtol=0)
    with pytest.raises(TypeError, match=r'grads\[0\]'):
        store.compare('op/sample', ['x', None], F32)


def test_empty_gradients_compare_equal(store):
    store.record('e', [numpy.ones((0, 3))], [numpy.ones((0,))], [numpy.ones((0, 3))])
    result = store.compare('e', [numpy.ones((0, 3))], F16)
    assert result.ok and result.worst_abs == 0


# ---------------------------------------------------------------------------
# check: record after a numerical check, then compare; broken gradients

class Cube(xgrad.FunctionNode):
    """y = x ** 3 with a backward that can be wrong on purpose: scaled by
    ``factor`` (for float16 inputs only if ``float16_only``), or right to
    first order but wrong to second (``wrong_second``: d/dx of the gradient
    sees only one of the two factors x)."""

    def __init__(self, factor=1.0, float16_only=False, wrong_second=False):
        super().__init__()
        self.factor, self.float16_only, self.wrong_second = \
            factor, float16_only, wrong_second

    def forward(self, inputs):
        self.retain_inputs((0,))
        return inputs[0] ** 3,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        factor = 1.0 if self.float16_only and x.dtype != F16 else self.factor
        second = x.as_grad_stopped() if self.wrong_second else x
        return 3 * factor * x * second * grad_outputs[0],


def cube(**kwargs):
    def func(xs):
        return Cube(**kwargs).apply((xs[0],))[0] * xs[1]
    func.__name__ = 'cube'
    return func


def _seeds(key, *shapes):
    """The seeds ``check`` draws for ``key`` when it is given none, drawn
    here independently of _snapshot: one array per shape in order (each float
    output, then each input for order 2), uniform in [-1, 1] from
    RandomState(crc32(key)), rounded to float16."""
    rs = numpy.random.RandomState(zlib.crc32(key.encode()))
    return [rs.uniform(-1, 1, shape).astype(F16).astype(F64) for shape in shapes]


def _worst(golden):
    """The element of ``golden`` that a gradient off by the same relative
    error everywhere (or missing) fails worst at: the largest |golden|."""
    return tuple(int(k) for k in numpy.unravel_index(numpy.argmax(numpy.abs(golden)),
                                                     golden.shape))


def _inputs(dtype=F64, device=None):
    # Values exact in float16: every dtype sees the same point.
    x = numpy.array([[0.5, -1.25, 1.5], [0.75, -0.5, 2.0]])
    w = numpy.array([1.5, 0.25, -1.0])
    return [xgrad.array(x.astype(dtype), device=device),
            xgrad.array(w.astype(dtype), device=device)]


def test_check_records_then_compares_every_dtype(store):
    first = store.check('cube', cube(), _inputs())
    assert first.ok and first.message.startswith("recorded golden gradients of 'cube' "
                                                 '(order 1) in ')
    assert "; gradients of 'cube' (order 1, float64) match" in first.message
    golden = store.load('cube')
    x, w = _inputs()[0].to_numpy(), _inputs()[1].to_numpy()
    gy, = _seeds('cube', (2, 3))  # no grad_outputs given: drawn from the key
    numpy.testing.assert_array_equal(golden.grad_outputs[0], gy)
    numpy.testing.assert_allclose(golden.grads[0], 3 * x ** 2 * w * gy)
    numpy.testing.assert_allclose(golden.grads[1], (x ** 3 * gy).sum(axis=0))
    for dtype in (F16, F32, F64):
        result = store.check('cube', cube(), _inputs(dtype))
        assert result.ok and 'order 1, {}'.format(dtype.name) in result.message
    assert store.check('cube', cube(), _inputs(F32, 'native:1')).ok
    with xgrad.no_backprop_mode():
        assert store.check('cube', cube(), _inputs(F32)).ok


def test_check_never_records_a_wrong_gradient(store):
    with pytest.raises(xgrad.GradientCheckError):
        store.check('cube', cube(factor=1.1), _inputs())
    assert not store.has('cube')


def test_check_catches_a_gradient_that_went_wrong(store):
    store.check('cube', cube(), _inputs())
    with pytest.raises(xgrad.GradientCheckError) as info:
        store.check('cube', cube(factor=1.1), _inputs(F32))
    comparison = info.value.comparison
    assert not comparison.ok and comparison.worst_input == 0
    assert comparison.worst_rel == pytest.approx(0.1, rel=1e-5)
    assert "'cube' (order 1, float32)" in str(info.value)
    x, w = _inputs()[0].to_numpy(), _inputs()[1].to_numpy()
    golden = 3 * x ** 2 * w * _seeds('cube', (2, 3))[0]
    assert _worst(golden) == (0, 2) and golden[0, 2] == -6.064453125
    assert 'input 0: 6 of 6 elements off; worst element (0, 2): golden -6.06445, ' \
           'analytic -6.6709, abs error 0.606, rel error 0.1' in str(info.value)
    # The same message with ones for grad_outputs (given, so not drawn).
    ones = [numpy.ones((2, 3))]
    store.check('cube-ones', cube(), _inputs(), ones)
    with pytest.raises(xgrad.GradientCheckError) as info:
        store.check('cube-ones', cube(factor=1.1), _inputs(F32), ones)
    assert 'input 0: 6 of 6 elements off; worst element (1, 2): golden -12, ' \
           'analytic -13.2, abs error 1.2, rel error 0.1' in str(info.value)


def test_check_catches_a_gradient_wrong_only_in_float16(store):
    broken = cube(factor=1.1, float16_only=True)
    store.check('cube', broken, _inputs())  # float64: right, so it records
    assert store.check('cube', broken, _inputs(F32)).ok
    with pytest.raises(xgrad.GradientCheckError, match=r"(?s)'cube' \(order 1, float16\).*"
                                                       r'input 0: 6 of 6 elements off'):
        store.check('cube', broken, _inputs(F16))
    # Recording from float16 inputs compares them at once: the first run fails too.
    with pytest.raises(xgrad.GradientCheckError, match=r"(?s)^recorded golden gradients of "
                                                       r"'cube16'.*float16\) differ"):
        store.check('cube16', broken, _inputs(F16))
    assert store.has('cube16')  # the float64 gradients are right


def test_check_order_2_catches_a_wrong_second_derivative(store):
    store.check('cube', cube(), _inputs(), order=2)
    golden = store.load('cube', order=2)
    assert len(golden.inputs) == 2 and len(golden.grad_outputs) == 3  # gy, then ggx
    x, w = _inputs()[0].to_numpy(), _inputs()[1].to_numpy()
    # Drawn from the key in order: gy, then ggx and ggw (one per input).
    gy, ggx, ggw = _seeds('cube', (2, 3), (2, 3), (3,))
    for given, drawn in zip(golden.grad_outputs, (gy, ggx, ggw)):
        numpy.testing.assert_array_equal(given, drawn)
    # d/d(x, w) of sum(ggx * 3 x^2 w gy) + sum(ggw * sum_rows(x^3 gy)).
    numpy.testing.assert_allclose(golden.grads[0],
                                  6 * x * w * gy * ggx + 3 * x ** 2 * gy * ggw)
    numpy.testing.assert_allclose(golden.grads[1], (3 * x ** 2 * gy * ggx).sum(axis=0))
    broken = cube(wrong_second=True)
    assert store.check('cube', broken, _inputs()).message.startswith('recorded')
    assert store.check('cube', broken, _inputs(F32)).ok  # right to first order
    with pytest.raises(xgrad.GradientCheckError, match=r"(?s)'cube' \(order 2, float32\)"
                                                       r'.*input 0: '):
        store.check('cube', broken, _inputs(F32), order=2)
    with pytest.raises(xgrad.GradientCheckError):  # and it is never recorded
        store.check('cube2', broken, _inputs(), order=2)
    assert not store.has('cube2', order=2)


class Mul(xgrad.FunctionNode):
    """y = a * b, with a backward that can drop the gradient of b
    (``broken='missing'``) or give it the wrong shape (``'shape'``)."""

    def __init__(self, broken=None):
        super().__init__()
        self.broken = broken

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return inputs[0] * inputs[1],

    def backward(self, target_input_indexes, grad_outputs):
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        grads = {0: gy * b, 1: gy * a}
        if self.broken == 'missing':
            grads[1] = None
        elif self.broken == 'shape':
            grads[1] = xgrad.sum(gy * a, axis=0)
        return tuple(grads[i] for i in target_input_indexes)


def mul(broken=None):
    def func(xs):
        return Mul(broken).apply(xs)[0]
    return func


def test_check_catches_a_missing_gradient(store):
    store.check('mul', mul(), _inputs()[:1] * 2)
    with pytest.raises(xgrad.GradientCheckError) as info:
        store.check('mul', mul('missing'), _inputs(F32)[:1] * 2)
    assert info.value.comparison.worst_input == 1
    assert "'mul' (order 1, float32)" in str(info.value)
    golden = _inputs()[0].to_numpy() * _seeds('mul', (2, 3))[0]  # d(a b)/db = gy a
    assert _worst(golden) == (0, 2) and golden[0, 2] == 0.859130859375
    assert 'input 1: no gradient (taken as zeros) but the golden gradient is nonzero; ' \
           '6 of 6 elements off; worst element (0, 2): golden 0.859131, analytic 0, ' \
           'abs error 0.859, rel error 1' in str(info.value)


class Double(xgrad.FunctionNode):
    """y = 2 x, with a backward that can forget to multiply by the output
    gradient (``forgets_gy``): it returns dy/dx = 2 instead of 2 gy."""

    def __init__(self, forgets_gy=False):
        super().__init__()
        self.forgets_gy = forgets_gy

    def forward(self, inputs):
        return inputs[0] * 2,

    def backward(self, target_input_indexes, grad_outputs):
        gy, = grad_outputs
        return (2 * xgrad.ones_like(gy) if self.forgets_gy else 2 * gy),


def double(forgets_gy=False):
    def func(xs):
        return Double(forgets_gy).apply((xs[0],))[0]
    return func


def test_check_default_seeds_catch_a_backward_that_forgets_gy(store):
    x = _inputs()[0]
    right, forgetful = double(), double(forgets_gy=True)
    # With ones for grad_outputs the forgetful backward goes unnoticed...
    ones = [numpy.ones((2, 3))]
    store.check('ones', right, [x], ones)
    for dtype in (F16, F32, F64):
        assert store.check('ones', forgetful, [x.astype(dtype)], ones).ok
    # ...with the default seeds, drawn from the key, it is caught in every dtype.
    store.check('double', right, [x])
    numpy.testing.assert_array_equal(store.load('double').grads[0],
                                     2 * _seeds('double', (2, 3))[0])
    for dtype in (F16, F32, F64):
        with pytest.raises(xgrad.GradientCheckError,
                           match=r"(?s)'double' \(order 1, {}\).*input 0: 6 of 6 elements "
                                 r'off'.format(dtype.name)):
            store.check('double', forgetful, [x.astype(dtype)])
    assert store.check('double', right, [x.astype(F16)]).ok


def test_check_catches_a_gradient_of_the_wrong_shape(store):
    store.check('mul', mul(), _inputs()[:1] * 2)
    with pytest.raises(xgrad.GradientCheckError) as info:
        store.check('mul', mul('shape'), _inputs(F16)[:1] * 2)
    assert info.value.comparison.worst_input == 1
    assert str(info.value).startswith(
        "gradients of 'mul' (order 1, float16): the backward pass rejected a gradient for "
        'input 1: Gradient shapes do not match. Expected: (2, 3) Actual: (3,)')
    with pytest.raises(xgrad.GradientCheckError, match='input 1'):  # never recorded
        store.check('mul2', mul('shape'), _inputs()[:1] * 2)
    assert not store.has('mul2')


def test_check_refuses_golden_gradients_of_other_inputs(store):
    store.check('cube', cube(), _inputs())
    moved = _inputs()
    moved[1] = moved[1] + 1
    with pytest.raises(SnapshotError, match=r"check\('cube'\): input 1 differs from the "
                                            r'golden one at element \(0,\): 2.5, golden 1.5; '
                                            r'the golden gradients in .*golden were taken at '
                                            r'other values: re-record them'):
        store.check('cube', cube(), moved)
    golden_gy = float(_seeds('cube', (2, 3))[0][0, 0])
    with pytest.raises(SnapshotError, match=r'grad_output 0 differs .* 2.0, golden {}'.format(
            re.escape(repr(golden_gy)))):
        store.check('cube', cube(), _inputs(), [xgrad.full((2, 3), 2.0, F64)])
    with pytest.raises(SnapshotError, match=r'input 1 has shape \(1, 3\), the golden one'):
        store.check('cube', cube(), [moved[0], moved[1].reshape(1, 3)])
    with pytest.raises(SnapshotError, match='1 inputs given'):
        store.check('cube', lambda xs: xs[0] * 2, _inputs()[:1])
    assert store.check('cube', cube(), moved, update=True).ok  # re-recorded
    assert store.check('cube', cube(), moved).ok


def test_check_given_seeds_and_non_float_inputs(store):
    gy = xgrad.array(numpy.array([[1.0, -2.0, 0.5], [0.25, 1.0, 3.0]]))
    store.check('seeded', cube(), _inputs(), [gy])
    numpy.testing.assert_array_equal(store.load('seeded').grad_outputs[0], gy.to_numpy())
    x, w = _inputs()[0].to_numpy(), _inputs()[1].to_numpy()
    numpy.testing.assert_allclose(store.load('seeded').grads[0],
                                  3 * x ** 2 * w * gy.to_numpy())
    assert store.check('seeded', cube(), _inputs(F16), [gy]).ok

    def pick(xs):
        return xs[0][xs[1]] * 2, xs[1]  # an int input and an int output
    inputs = [_inputs()[0], xgrad.array(numpy.array([1, 0, 1]))]
    store.check('pick', pick, inputs)
    golden = store.load('pick')
    assert golden.grads[1] is None and golden.grad_outputs[1] is None
    gy, = _seeds('pick', (3, 3))  # one draw, for the float output only
    numpy.testing.assert_array_equal(golden.grad_outputs[0], gy)
    numpy.testing.assert_array_equal(golden.grads[0], [2 * gy[1], 2 * (gy[0] + gy[2])])
    assert store.check('pick', pick, [inputs[0].astype(F16), inputs[1]]).ok


def test_check_strict_mode_needs_a_golden(store):
    with pytest.raises(MissingSnapshotError, match="'cube'"):
        store.check('cube', cube(), _inputs(), record_missing=False)


@pytest.mark.parametrize('func, inputs, kwargs, error, match', [
    (lambda xs: 'y', None, {}, TypeError, "must return an xgrad array .* it returned 'y'"),
    (lambda xs: [xs[0], 1.0], None, {}, TypeError, 'it returned'),
    (lambda xs: (), None, {}, TypeError, r'it returned \(\)'),
    (cube(), [numpy.ones(2)], {}, TypeError, r'inputs\[0\] is a numpy.ndarray, not an xgrad'),
    (cube(), 'x', {}, TypeError, 'non-empty list of xgrad arrays'),
    (cube(), [], {}, TypeError, 'non-empty list of xgrad arrays'),
    (lambda xs: xs[0] * 2, [xgrad.array(numpy.array([1, 2]))], {}, ValueError,
     'no float input'),
    (cube(), None, {'grad_outputs': [None, None]}, ValueError, '2 grad_outputs for 1 outputs'),
    (cube(), None, {'grad_outputs': [numpy.ones(3)]}, ValueError,
     r'grad_outputs\[0\] has shape \(3,\), output 0 has \(2, 3\)'),
    (cube(), None, {'order': 3}, ValueError, 'order must be 1 or 2'),
    (cube(), None, {'order': 2, 'grad_grad_inputs': [numpy.ones((2, 3))]}, ValueError,
     '1 grad_grad_inputs for 2 inputs'),
    (lambda xs: (xs[0] * 2, None), None, {'order': 2}, ValueError,
     'order 2 needs a float output gradient for every output'),
])
def test_check_bad_use(store, func, inputs, kwargs, error, match):
    with pytest.raises(error, match=match):
        store.check('bad', func, _inputs() if inputs is None else inputs, **kwargs)
    assert not store.has('bad')
