"""The dispatch paths of the vector kernels (xgrad/_backend/vector_math.h).

Each kernel is compiled for SSE2, AVX2 and AVX-512; the path is selected
once, at import: the widest the CPU supports, or the one the environment
variable XGRAD_CPU_PATH names. CI runs tests/backend/cpu/test_vector_math.py, this file
and the activation tests once per path this CPU supports (.ci/run,
``vector_paths``); ``test_the_environment_selects_the_path`` is what proves
that each of those runs really ran the path it names.

Here, in any run: ``python -m xgrad info`` shows the path for every path
this CPU has, a path the CPU lacks or an unknown name is an ImportError that
says what the CPU supports, and every path computes the same values within
the kernels' ULP bounds (paths call different libmvec variants, so the
values are not required to be bit-identical), at every start offset within a
cache line and odd lengths.
"""

import os
import subprocess
import sys

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels as K

# Where this xgrad comes from, for the subprocesses (a checkout or an install).
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(xgrad.__file__)))


def _run(args, path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    env.pop(K.CPU_PATH_VARIABLE, None)
    if path is not None:
        env[K.CPU_PATH_VARIABLE] = path
    return subprocess.run([sys.executable] + args, env=env, capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def restore_path():
    before = K.cpu_path()
    yield
    K._select_cpu_path(before)


def test_the_paths_this_cpu_supports():
    paths = K.cpu_paths()
    assert paths[0] == K.CPU_PATH_NAMES[0]  # the baseline always runs
    assert list(paths) == [p for p in K.CPU_PATH_NAMES if p in paths]
    assert K.cpu_path() in paths


def test_the_environment_selects_the_path():
    """In a run with XGRAD_CPU_PATH set (CI's per-path steps), the kernels
    run that path; without it (or with auto), the widest."""
    wanted = os.environ.get(K.CPU_PATH_VARIABLE, '').strip().lower()
    if wanted in ('', 'auto'):
        assert K.cpu_path() == K.cpu_paths()[-1]
    else:
        assert K.cpu_path() == wanted


@pytest.mark.parametrize('path', K.CPU_PATH_NAMES + ('auto',))
def test_info_shows_the_path_or_the_error(path):
    result = _run(['-m', 'xgrad', 'info'], path)
    if path == 'auto' or path in K.cpu_paths():
        shown = K.cpu_paths()[-1] if path == 'auto' else path
        lines = [l for l in result.stdout.splitlines() if l.startswith('CPU path:')]
        assert lines and lines[0].split()[2] == shown, result.stdout + result.stderr
    else:
        # A wider path than this CPU has: an ImportError naming what it has.
        assert result.returncode != 0
        assert 'ImportError' in result.stderr
        assert 'does not support' in result.stderr
        assert ', '.join(K.cpu_paths()) in result.stderr


def test_an_unknown_path_is_an_error():
    result = _run(['-c', 'import xgrad'], 'avx1024')
    assert result.returncode != 0
    assert "XGRAD_CPU_PATH='avx1024' is not a dispatch path" in result.stderr


def test_auto_and_case():
    result = _run(['-c', 'from xgrad._backend import native_kernels as K; print(K.cpu_path())'],
                  ' AUTO ')
    assert result.stdout.split() == [K.cpu_paths()[-1]], result.stderr
    result = _run(['-c', 'from xgrad._backend import native_kernels as K; print(K.cpu_path())'],
                  'SSE2')
    assert result.stdout.split() == ['sse2'], result.stderr


# The kernels compared across paths: (name, function of a 1-d x)
KERNELS = [
    ('exp', K.exp_forward),
    ('log', lambda x: K.log_forward(numpy.abs(x) + x.dtype.type(1e-3))),
    ('tanh', K.tanh_forward),
    ('sigmoid', K.sigmoid_forward),
    ('erf', K.erf_forward),
    ('softplus', lambda x: K.softplus_forward(x, 1.0)),
    ('elu', lambda x: K.elu_forward(x, 1.0)),
    # (y from NumPy, the same on every path: the paths' tanh differ by a few
    # ulp, and 1 - y^2 amplifies that ~100x where tanh saturates)
    ('tanh_grad', lambda x: K.tanh_grad(x, numpy.tanh(x))),
    ('log_softmax', lambda x: K.softmax_last_axis(x.reshape(1, -1), True)),
    ('softmax_grad', lambda x: K.softmax_last_axis_grad(
        x.reshape(1, -1), K.softmax_last_axis(x.reshape(1, -1), False), False)),
    ('sum_all', lambda x: numpy.array(K.sum_all(x))),
]
# Paths call different libmvec variants (4 ULP each in float32, see
# tests/backend/cpu/test_vector_math.py), so two paths may differ by twice that. The
# kernels that sum (softmax's row sums, sum_all) add in a different order on
# each vector width: their results may differ by about n ulp of the terms'
# magnitude (|x| <= 8 here, softmax gradients below 16: 2 ulp of 8 is 16 eps
# per term), which is large relative to a result that cancels.
SUMMING = {'log_softmax', 'softmax_grad', 'sum_all'}
RTOL = {numpy.float32: 8 * numpy.finfo(numpy.float32).eps,
        numpy.float64: 12 * numpy.finfo(numpy.float64).eps}


@pytest.mark.parametrize('dtype', (numpy.float32, numpy.float64), ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, f', KERNELS, ids=[k[0] for k in KERNELS])
def test_every_path_computes_the_same_values(name, f, dtype, restore_path):
    """Lengths around every vector width and start offsets across a 64-byte
    line (the head and tail loops of each path), on every path this CPU
    has."""
    rng = numpy.random.default_rng(0)
    line = 64 // numpy.dtype(dtype).itemsize
    base = rng.uniform(-8, 8, 4 * line + 200).astype(dtype)
    results = {}
    for path in K.cpu_paths():
        K._select_cpu_path(path)
        assert K.cpu_path() == path
        results[path] = [(n, f(base[start:start + n]))
                         for start in range(line) for n in (1, 3, 7, 15, 31, 33, 63, 65, 129)]
    first = K.cpu_paths()[0]
    for path, values in results.items():
        for (n, got), (_, expected) in zip(values, results[first]):
            # (n terms summed: n + 1 roundings of up to 16 eps each)
            atol = (n + 1) * 16 * numpy.finfo(dtype).eps if name in SUMMING else 0
            numpy.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=atol,
                                          err_msg='{} on {} vs {}'.format(name, path, first))


def test_unaligned_data_reaches_every_path(restore_path):
    """float32 data at an address that is not a multiple of 4 (the kernels
    get a copy) gives the values aligned data gives, on every path."""
    buf = numpy.zeros(4 * 101 + 1, numpy.uint8)
    x = buf[1:].view(numpy.float32)
    x[...] = numpy.linspace(-5, 5, 101, dtype=numpy.float32)
    assert not x.flags.aligned
    for path in K.cpu_paths():
        K._select_cpu_path(path)
        numpy.testing.assert_array_equal(K.tanh_forward(x), K.tanh_forward(x.copy()))


@pytest.mark.parametrize('dtype', (numpy.float32, numpy.float64), ids=lambda d: d.__name__)
def test_the_winograd_transforms_follow_the_path_and_agree(dtype, restore_path):
    """winograd_kernels compiles its block transforms per path too
    (winograd_block.h) and runs the path native_kernels selected, also
    after a change; every path gives the same tiles within rounding (FMA
    contraction differs by path). Block sizes around 64 tiles: full and
    partial blocks."""
    from xgrad._backend import winograd_kernels as W
    from xgrad._ops._winograd import F2X2_5X5 as t
    results = {}
    for path in K.cpu_paths():
        K._select_cpu_path(path)
        assert W.cpu_path() == path
        rng = numpy.random.default_rng(1)  # the same data on every path
        outs = []
        for n, size in ((1, 4), (16, 4), (17, 5), (3, 15)):
            x = rng.uniform(-1, 1, (n, 3, size, size)).astype(dtype)
            th, tw = t.tile_counts((size, size))
            v = numpy.empty((36, 3, n * th * tw), dtype)
            assert W.input_tiles(x, v, t.b_t, 2, 2, 2)
            y = numpy.empty_like(x)
            assert W.output_tiles(v, y, t.a_t)
            g = numpy.empty_like(v)
            assert W.gradient_tiles(x, g, t.a_t)
            outs += [v, y, g]
        results[path] = outs
    first = K.cpu_paths()[0]
    for path, outs in results.items():
        for got, expected in zip(outs, results[first]):
            scale = numpy.abs(expected).max()
            numpy.testing.assert_allclose(got, expected, rtol=0,
                                          atol=64 * numpy.finfo(dtype).eps * scale,
                                          err_msg='{} vs {}'.format(path, first))
