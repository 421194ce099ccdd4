"""The xgrad pytest plugin, run on small test files through pytester: the
device/float_dtype fixtures and their option, the cuda marker on a machine
without CUDA, and grad_snapshot recording, comparing and catching a
gradient that went wrong."""

import json
import os
import zlib

import numpy
import pytest

# Imported here, before pytester snapshots sys.modules: the inner in-process
# runs then share NumPy and xgrad (NumPy cannot be imported twice).
import xgrad.testing.pytest_plugin  # NOQA: F401

pytest_plugins = ['pytester']


@pytest.fixture(autouse=True)
def no_autoload(monkeypatch):
    """Inner runs load no installed plugins (an installed xgrad entry point
    would load this plugin twice; others only slow the runs down)."""
    monkeypatch.setenv('PYTEST_DISABLE_PLUGIN_AUTOLOAD', '1')


def run(pytester, *args):
    """Inner pytest with the plugin loaded from its module."""
    return pytester.runpytest('-p', 'xgrad.testing.pytest_plugin', '-p', 'no:cacheprovider',
                              *args)


# ---------------------------------------------------------------------------
# device, float_dtype, cuda

DEVICE_TEST = """
import xgrad

def test_device(device):
    assert isinstance(device, xgrad.Device)
    assert xgrad.get_default_device() is device
    assert xgrad.zeros((2,)).device is device
"""


def test_device_defaults_to_native_0(pytester):
    pytester.makepyfile(DEVICE_TEST)
    result = run(pytester, '-v')
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(['*test_device?native:0? PASSED*'])


def test_device_option_chooses_devices(pytester):
    pytester.makepyfile(DEVICE_TEST)
    result = run(pytester, '-v', '--xgrad-device=native:0, native:1',
                 '--xgrad-device', 'native:3,native:1')
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(['*test_device?native:0? PASSED*',
                                 '*test_device?native:1? PASSED*',
                                 '*test_device?native:3? PASSED*'])


@pytest.mark.parametrize('value, message', [
    ('gpu:0', "'gpu:0' is not a device name; expected native:N or cuda:N"),
    ('native', "'native' is not a device name"),
    ('native:0,', "'' is not a device name"),
    ('native:99', 'Device native:99 does not exist'),
])
def test_bad_device_option_is_a_usage_error(pytester, value, message):
    pytester.makepyfile(DEVICE_TEST)
    result = run(pytester, '--xgrad-device=' + value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['*--xgrad-device: ' + message + '*'])


def test_device_parametrized_by_the_test_or_overridden_is_left_alone(pytester):
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def device():
            return 'mine'
    """)
    pytester.makepyfile(test_own="""
        import pytest
        import xgrad

        @pytest.mark.parametrize('device', ['native:2'])
        def test_direct(device):
            assert device == 'native:2'

        def test_overridden(device):
            assert device == 'mine'
    """)
    run(pytester, '--xgrad-device=native:0,native:1').assert_outcomes(passed=2)


def test_float_dtype(pytester):
    pytester.makepyfile("""
        import numpy
        import xgrad

        def test_dtype(float_dtype):
            assert isinstance(float_dtype, numpy.dtype) and float_dtype.kind == 'f'
            assert xgrad.ones((2,), float_dtype).dtype == float_dtype

        def test_both(device, float_dtype):
            pass
    """)
    result = run(pytester, '-v', '--xgrad-device=native:0,native:1')
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(['*test_dtype?float16? PASSED*',
                                 '*test_dtype?float32? PASSED*',
                                 '*test_dtype?float64? PASSED*',
                                 '*test_both?float16-native:1? PASSED*'])


@pytest.mark.skipif(xgrad.get_default_context().get_backend('cuda').get_device_count() > 0,
                    reason='a CUDA device is present')
def test_cuda_marker_skips_without_cuda(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.cuda
        def test_one_gpu():
            raise AssertionError('must not run')

        @pytest.mark.cuda(2)
        def test_two_gpus():
            raise AssertionError('must not run')

        def test_cpu():
            pass
    """)
    result = run(pytester, '-rs', '--strict-markers')
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        # At the tests' own lines (3 and 7), not the plugin's.
        'SKIPPED * test_cuda_marker_skips_without_cuda.py:3: needs 1 CUDA device; '
        'cuda devices need *',
        'SKIPPED * test_cuda_marker_skips_without_cuda.py:7: needs 2 CUDA devices; *'])
    # The reason says once what is missing.
    assert 'is not available' not in result.stdout.str()


def test_cuda_marker_is_registered(pytester):
    result = run(pytester, '--markers')
    result.stdout.fnmatch_lines(['@pytest.mark.cuda(num=1): the test needs `num` CUDA '
                                 'devices*'])


def test_cuda_device_option_skips_without_cuda(pytester):
    pytester.makepyfile(DEVICE_TEST)
    result = run(pytester, '-rs', '--xgrad-device=native:0,cuda:0')
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(['SKIPPED * test_cuda_device_option_skips_without_cuda.py*: '
                                 'needs cuda:0; cuda devices need *'])
    assert 'is not available' not in result.stdout.str()


# ---------------------------------------------------------------------------
# grad_snapshot

SNAPSHOT_TEST = """
import numpy
import xgrad

FACTOR = @FACTOR@          # 1.0: the right gradient
FLOAT16_ONLY = @FLOAT16_ONLY@  # the factor applies to float16 inputs only


class Cube(xgrad.FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return inputs[0] ** 3,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        factor = FACTOR if x.dtype == numpy.float16 or not FLOAT16_ONLY else 1.0
        return 3 * factor * x * x * grad_outputs[0],


def f(xs):
    return Cube().apply((xs[0],))[0] * xs[1]


def test_cube(grad_snapshot, float_dtype):
    x = xgrad.array(numpy.array([[0.5, -1.25, 1.5], [0.75, -0.5, 2.0]], float_dtype))
    w = xgrad.array(numpy.array([1.5, 0.25, -1.0], float_dtype))
    grad_snapshot.check(f, [x, w])
"""


def default_seed(key, shape):
    """The output gradient grad_snapshot.check draws for ``key`` when the
    test gives none (uniform in [-1, 1] from RandomState(crc32(key)),
    rounded to float16), drawn here independently of the plugin."""
    rs = numpy.random.RandomState(zlib.crc32(key.encode()))
    return rs.uniform(-1, 1, shape).astype(numpy.float16).astype(numpy.float64)


def snapshot_test(pytester, factor=1.0, float16_only=False):
    pytester.makepyfile(test_cube=SNAPSHOT_TEST.replace('@FACTOR@', repr(factor))
                        .replace('@FLOAT16_ONLY@', repr(float16_only)))


def golden_index(pytester, directory='tests/grad_snapshots'):
    with open(os.path.join(str(pytester.path), directory, 'index.json')) as f:
        return json.load(f)


def test_grad_snapshot_records_then_compares(pytester):
    snapshot_test(pytester)
    first = run(pytester)
    first.assert_outcomes(passed=3)
    first.stdout.fnmatch_lines(['xgrad grad_snapshot: 3 recorded, 0 compared in '
                                '*tests?grad_snapshots'])
    entries = golden_index(pytester)['entries']
    assert [e['key'] for e in entries] == ['test_cube.py::test_cube[float16]',
                                           'test_cube.py::test_cube[float32]',
                                           'test_cube.py::test_cube[float64]']
    assert entries[0]['meta'] == {'test': 'test_cube.py::test_cube[float16]'}
    second = run(pytester)
    second.assert_outcomes(passed=3)
    second.stdout.fnmatch_lines(['xgrad grad_snapshot: 0 recorded, 3 compared in *'])


def test_grad_snapshot_fails_when_the_gradient_goes_wrong(pytester):
    snapshot_test(pytester)
    run(pytester).assert_outcomes(passed=3)
    snapshot_test(pytester, factor=1.1)
    result = run(pytester)
    result.assert_outcomes(failed=3)
    # The golden gradient of x: 3 x^2 w gy, gy drawn from the test's key; the
    # worst element is the largest, (0, 2) here.
    x = numpy.array([[0.5, -1.25, 1.5], [0.75, -0.5, 2.0]])
    w = numpy.array([1.5, 0.25, -1.0])
    golden = 3 * x ** 2 * w * default_seed('test_cube.py::test_cube[float32]', (2, 3))
    assert numpy.argmax(numpy.abs(golden)) == 2 and golden[0, 2] == 1.670196533203125
    result.stdout.fnmatch_lines([
        "E * xgrad._errors.GradientCheckError: gradients of "
        "'test_cube.py::test_cube?float32?' (order 1, float32) differ from the golden "
        "float64 gradients (atol=0.002, rtol=0.002):",
        'E *  input 0: 6 of 6 elements off; worst element (0, 2): golden 1.6702, analytic '
        '1.83722, abs error 0.167, rel error 0.1',
        'E * golden: *tests?grad_snapshots?test_cube.py_test_cube_float32-*.order1.npz '
        '(recorded * with xgrad *)'])
    result.stdout.fnmatch_lines(['*grad_snapshot.check(f, ?x, w?)*'])  # the test's line
    assert '_snapshot.py:' not in result.stdout.str()  # not the store's internals
    # Re-recording cannot bless the wrong gradient: the float64 check catches it.
    update = run(pytester, '--xgrad-snapshot-update')
    update.assert_outcomes(failed=3)
    assert 'test_cube.py::test_cube[float64]' in update.stdout.str()
    snapshot_test(pytester)
    run(pytester).assert_outcomes(passed=3)  # the golden gradients are intact


def test_grad_snapshot_catches_a_float16_only_error(pytester):
    snapshot_test(pytester, factor=1.1, float16_only=True)
    for _ in range(2):  # the run that records (right in float64) and the next
        result = run(pytester, '-v')
        result.assert_outcomes(passed=2, failed=1)
        result.stdout.fnmatch_lines(['*test_cube?float16? FAILED*',
                                     "*'test_cube.py::test_cube?float16?' (order 1, "
                                     'float16) differ*',
                                     '*input 0: 6 of 6 elements off*rel error 0.1*'])
    assert len(golden_index(pytester)['entries']) == 3


def test_grad_snapshot_update_rerecords(pytester):
    snapshot_test(pytester)
    run(pytester).assert_outcomes(passed=3)
    stamp = golden_index(pytester)['entries'][0]['recorded']
    result = run(pytester, '--xgrad-snapshot-update')
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(['xgrad grad_snapshot: 3 recorded, 0 compared*'])
    assert golden_index(pytester)['entries'][0]['recorded'] >= stamp


def test_grad_snapshot_inputs_changed(pytester):
    snapshot_test(pytester)
    run(pytester).assert_outcomes(passed=3)
    pytester.makepyfile(test_cube=SNAPSHOT_TEST.replace('@FACTOR@', '1.0')
                        .replace('@FLOAT16_ONLY@', 'False').replace('-1.0]', '-0.75]'))
    result = run(pytester)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*SnapshotError: check('test_cube.py::test_cube?float16?'): "
                                 'input 1 differs from the golden one at element (2,): '
                                 '-0.75, golden -1.0; *re-record them if the test changed'])
    run(pytester, '--xgrad-snapshot-update').assert_outcomes(passed=3)


def test_grad_snapshot_dir_option_and_ini(pytester):
    snapshot_test(pytester)
    run(pytester, '--xgrad-snapshot-dir', 'elsewhere').assert_outcomes(passed=3)
    assert len(golden_index(pytester, 'elsewhere')['entries']) == 3
    pytester.makeini('[pytest]\nxgrad_snapshot_dir = golden\n')
    run(pytester).assert_outcomes(passed=3)
    assert len(golden_index(pytester, 'golden')['entries']) == 3
    assert not os.path.exists(os.path.join(str(pytester.path), 'tests'))


def test_grad_snapshot_strict_fails_on_missing_golden(pytester):
    snapshot_test(pytester)
    result = run(pytester, '--xgrad-snapshot-strict')
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*MissingSnapshotError: no golden gradients for key "
                                 "'test_cube.py::test_cube?float16?' (order 1) in *"])
    run(pytester).assert_outcomes(passed=3)
    run(pytester, '--xgrad-snapshot-strict').assert_outcomes(passed=3)


def test_grad_snapshot_keys_order_2_and_misuse(pytester):
    pytester.makepyfile("""
        import numpy
        import pytest
        import xgrad

        def cube(xs):
            return xs[0] * xs[0] * xs[0]

        X = numpy.array([0.5, -1.25, 2.0])

        def test_two_keys(grad_snapshot):
            x = xgrad.array(X)
            grad_snapshot.check(cube, [x], key='ones')
            grad_snapshot.check(cube, [x], [xgrad.array(X)], key='x')
            grad_snapshot.check(cube, [x], key='ones', order=2)

        def test_same_key_twice(grad_snapshot):
            x = xgrad.array(X)
            grad_snapshot.check(cube, [x])
            with pytest.raises(ValueError, match='ran twice with key'):
                grad_snapshot.check(cube, [x])

        def test_float32(grad_snapshot):
            x = xgrad.array(X.astype(numpy.float32))
            result = grad_snapshot.check(cube, [x], order=2, atol=1e-3, rtol=1e-3)
            assert result.ok
    """)
    run(pytester).assert_outcomes(passed=3)
    keys = [(e['key'], e['order']) for e in golden_index(pytester)['entries']]
    test = 'test_grad_snapshot_keys_order_2_and_misuse.py::'
    assert keys == [(test + 'test_float32', 2), (test + 'test_same_key_twice', 1),
                    (test + 'test_two_keys::ones', 1), (test + 'test_two_keys::ones', 2),
                    (test + 'test_two_keys::x', 1)]
    result = run(pytester)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(['xgrad grad_snapshot: 0 recorded, 5 compared*'])
