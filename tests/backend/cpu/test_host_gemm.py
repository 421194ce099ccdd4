"""xgrad/_backend/host_gemm.py: the choice between NumPy's BLAS and xgrad's
sgemm, and its matmul against NumPy's on stacks, broadcasts and layouts."""

import numpy
import pytest

from xgrad._backend import gemm_kernels, host_gemm


@pytest.mark.parametrize('path, core, has_kernel, threads, own', [
    ('avx512', 'Haswell', True, 1, True),       # Zen 4 under OpenBLAS 0.3.2x
    ('avx512', 'Zen', True, 1, True),
    ('avx512', 'SkylakeX', True, 1, False),     # the BLAS's kernels are AVX-512 too
    ('avx512', 'COOPERLAKE', True, 1, False),
    ('avx512', None, True, 1, False),           # another BLAS, or one that cannot say
    ('avx2', 'Haswell', True, 1, False),        # as wide as ours: measured faster on wide products
    ('avx512', 'SkylakeX', True, 2, True),      # more threads: one pool, whatever the kernels
    ('avx2', 'Haswell', True, 16, True),
    ('sse2', 'Prescott', False, 1, False),      # no micro-kernel
    ('sse2', 'Prescott', False, 8, False),
])
def test_decision_table(path, core, has_kernel, threads, own):
    choice = host_gemm.decide(path, core, has_kernel, threads)
    assert choice.own is own
    assert choice.reason and (str(core) in choice.reason or path in choice.reason
                              or 'names' in choice.reason)


@pytest.mark.parametrize('path, core, has_kernel, threads, own, said', [
    ('avx2', 'Haswell', True, 1, True, 'measured faster'),   # the BLAS's default, overridden
    ('avx512', 'Haswell', True, 1, True, 'AVX-512'),         # own anyway: its own reason
    ('avx512', 'SkylakeX', True, 2, True, 'one worker pool'),
    ('sse2', 'Prescott', False, 1, False, 'no kernel'),      # nothing to prefer
])
def test_decision_table_with_the_callers_preference(path, core, has_kernel, threads, own, said):
    choice = host_gemm.decide(path, core, has_kernel, threads, prefer_own=True)
    assert choice.own is own
    assert said in choice.reason


def _blas_calls(monkeypatch):
    """The shapes of the left operands host_gemm hands to NumPy, recorded."""
    reached = []
    numpy_matmul = host_gemm._numpy_matmul

    def recorded(a, b, out, acc):
        reached.append(a.shape)
        return numpy_matmul(a, b, out, acc)
    monkeypatch.setattr(host_gemm, '_numpy_matmul', recorded)
    return reached


def test_a_preferred_product_runs_on_sgemm_where_the_blas_is_the_default(monkeypatch):
    """One thread on the AVX2 path: the BLAS by default, xgrad's sgemm for a
    product its caller measured faster there (conv's im2col plans)."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    monkeypatch.setattr(host_gemm, 'choice', lambda prefer_own=False: host_gemm.decide(
        'avx2', 'Haswell', True, 1, prefer_own))
    reached = _blas_calls(monkeypatch)
    rng = numpy.random.default_rng(4)
    a = rng.standard_normal((1, 64, 288)).astype(numpy.float32)
    b = rng.standard_normal((1, 288, 400)).astype(numpy.float32)
    expected = a.astype(numpy.float64) @ b
    tol = dict(rtol=1e-5, atol=1e-5 * abs(expected).max())
    numpy.testing.assert_allclose(host_gemm.matmul(a, b, prefer_own=True), expected, **tol)
    assert reached == []
    numpy.testing.assert_allclose(host_gemm.matmul(a, b), expected, **tol)
    assert reached == [a.shape]


def test_a_stack_into_an_out_with_padded_rows_runs_on_sgemm(monkeypatch):
    """col2im's columns: a (1, rows, cols) view of rows padded apart, not
    C-contiguous, written in place by sgemm (not copied, not the BLAS)."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    reached = _blas_calls(monkeypatch)
    rng = numpy.random.default_rng(5)
    a = rng.standard_normal((2, 96, 40)).astype(numpy.float32)
    b = rng.standard_normal((2, 40, 150)).astype(numpy.float32)
    buffer = numpy.full((2, 96, 160), numpy.nan, numpy.float32)
    out = buffer[:, :, :150]
    with host_gemm.forced(True):
        assert host_gemm.matmul(a, b, out=out) is out
    assert reached == []
    expected = a.astype(numpy.float64) @ b
    numpy.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * abs(expected).max())
    assert numpy.isnan(buffer[:, :, 150:]).all()  # (the padding untouched)


@pytest.mark.parametrize('sa, sb', [((2, 3, 0, 5), (2, 3, 5, 4)), ((2, 3, 4, 5), (2, 3, 5, 0)),
                                     ((2, 0, 4, 5), (2, 0, 5, 6)), ((0, 4, 5), (0, 5, 6)),
                                     ((2, 3, 64, 50), (2, 3, 50, 70))])
def test_stacks_of_four_axes_and_empty_stacks_match_numpy(sa, sb):
    rng = numpy.random.default_rng(6)
    a = rng.standard_normal(sa).astype(numpy.float32)
    b = rng.standard_normal(sb).astype(numpy.float32)
    expected = numpy.matmul(a.astype(numpy.float64), b.astype(numpy.float64))
    with host_gemm.forced(True):
        fresh = host_gemm.matmul(a, b)
        out = numpy.ones(expected.shape, numpy.float32)
        host_gemm.matmul(a, b, out=out, accumulate=True)
    numpy.testing.assert_allclose(fresh, expected, rtol=1e-5, atol=1e-4)
    numpy.testing.assert_allclose(out, expected + 1, rtol=1e-5, atol=1e-4)


def test_blas_core_names_numpys_openblas():
    core = host_gemm.blas_core()
    assert core is None or (isinstance(core, str) and core)


def test_choice_follows_the_forced_setting():
    with host_gemm.forced(True):
        assert host_gemm.choice().own
        with host_gemm.forced(False):
            assert not host_gemm.choice().own
        assert host_gemm.choice().own
    assert host_gemm.choice() == host_gemm.decide(
        host_gemm.native_kernels.cpu_path(), host_gemm.blas_core(), gemm_kernels.available(),
        host_gemm.native_kernels.max_threads())


def _layout(a, kind):
    if kind == 'c':
        return a
    if kind == 'transposed':  # same values, the last two axes' strides swapped
        return numpy.ascontiguousarray(numpy.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if kind == 'strided':
        big = numpy.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    raise ValueError(kind)


SHAPES = [
    ((1, 256, 96), (8, 1, 96, 49)),      # conv's pointwise product: one weight, a batch
    ((36, 64, 32), (36, 32, 196)),       # Winograd's 36 products
    ((64, 48), (48, 100)),               # a plain matrix product
    ((8, 1, 40, 300), (8, 1, 300, 64)),  # the weight gradient's per-sample products
    ((3, 1, 64, 17), (1, 4, 17, 130)),  # broadcast on both sides
    ((5, 96, 20), (20, 160)),            # a 2-D right operand under a stack
    ((3, 1, 16, 17), (1, 4, 17, 33)),    # small: NumPy's (see SMALL_PRODUCT)
]


@pytest.mark.parametrize('own', [True, False])
@pytest.mark.parametrize('layout', ['c', 'transposed', 'strided'])
@pytest.mark.parametrize('sa, sb', SHAPES)
def test_matmul_matches_numpy(sa, sb, layout, own):
    rng = numpy.random.default_rng(1)
    a = _layout(rng.standard_normal(sa).astype(numpy.float32), layout)
    b = _layout(rng.standard_normal(sb).astype(numpy.float32), layout)
    expected = numpy.matmul(a.astype(numpy.float64), b.astype(numpy.float64))
    out = numpy.full(expected.shape, numpy.nan, numpy.float32)
    with host_gemm.forced(own):
        result = host_gemm.matmul(a, b, out=out)
    assert result is out
    numpy.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * abs(expected).max())


def test_matmul_without_out_and_other_dtypes_is_numpys():
    a = numpy.arange(12.).reshape(3, 4)
    b = numpy.arange(8.).reshape(4, 2)
    with host_gemm.forced(True):
        numpy.testing.assert_array_equal(host_gemm.matmul(a, b), a @ b)
        out = numpy.empty((3, 2))
        assert host_gemm.matmul(a, b, out=out) is out
    numpy.testing.assert_array_equal(out, a @ b)


def test_matmul_reports_mismatched_shapes_as_numpy_does():
    a = numpy.ones((2, 3, 20), numpy.float32)
    b = numpy.ones((2, 21, 5), numpy.float32)
    with host_gemm.forced(True), pytest.raises(ValueError):
        host_gemm.matmul(a, b, out=numpy.empty((2, 3, 5), numpy.float32))


@pytest.mark.parametrize('own', [True, False])
@pytest.mark.parametrize('sa, sb', SHAPES)
def test_matmul_accumulates_and_allocates(sa, sb, own):
    rng = numpy.random.default_rng(2)
    a = rng.standard_normal(sa).astype(numpy.float32)
    b = rng.standard_normal(sb).astype(numpy.float32)
    expected = numpy.matmul(a.astype(numpy.float64), b.astype(numpy.float64))
    start = rng.standard_normal(expected.shape).astype(numpy.float32)
    out = start.copy()
    with host_gemm.forced(own):
        fresh = host_gemm.matmul(a, b)
        assert host_gemm.matmul(a, b, out=out, accumulate=True) is out
    tol = dict(rtol=1e-5, atol=1e-5 * abs(expected).max())
    numpy.testing.assert_allclose(fresh, expected, **tol)
    numpy.testing.assert_allclose(out, expected + start, **tol)


def test_info_says_which_gemm_runs_and_why():
    import io
    from xgrad import _info
    out = io.StringIO()
    _info.report(out)
    lines = [line for line in out.getvalue().splitlines() if line.startswith('host GEMM:')]
    assert lines == ['host GEMM:      ' + host_gemm.choice().reason]


@pytest.mark.parametrize('m, n, k', [(1000, 2048, 8), (36, 4096, 9), (4096, 9, 36), (5, 7, 3),
                                     (9, 33, 1), (17, 100, 15)])
def test_sgemm_any_shape_computes_what_it_declines_for_speed(m, n, k):
    """The one-pool rule runs products sgemm declines for speed (a short sum,
    tiles mostly padding) on it anyway: they must be right."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    rng = numpy.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(numpy.float32)
    b = rng.standard_normal((k, n)).astype(numpy.float32)
    expected = a.astype(numpy.float64) @ b
    for acc in (False, True):
        out = numpy.ones((m, n), numpy.float32)
        assert gemm_kernels.sgemm(a, b, out, acc, True)
        numpy.testing.assert_allclose(out, expected + acc, rtol=1e-5,
                                      atol=1e-5 * abs(expected).max())


def test_with_more_threads_large_products_never_reach_the_blas(monkeypatch):
    """One worker pool: under the one-pool rule a product NumPy's BLAS would
    thread (over SMALL_PRODUCT multiply-adds) runs on xgrad's sgemm even
    where sgemm would decline it for speed; smaller ones may go to NumPy."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    reached = []
    monkeypatch.setattr(host_gemm, '_numpy_matmul',
                        lambda a, b, out, acc: reached.append(a.shape) or numpy.matmul(a, b))
    monkeypatch.setattr(host_gemm, '_forced', host_gemm.decide('avx512', 'SkylakeX', True, 2))
    a = numpy.ones((1000, 8), numpy.float32)
    b = numpy.ones((8, 2048), numpy.float32)   # k = 8: declined for speed alone
    numpy.testing.assert_array_equal(host_gemm.matmul(a, b), 8)
    assert reached == []


def _heads(rng, batch, heads, rows, cols):
    """Attention's (batch, heads, rows, cols) view of a (batch * rows, heads
    * cols) projection: its batch axes do not merge into one stride."""
    flat = rng.standard_normal((batch, rows, heads * cols)).astype(numpy.float32)
    return flat.reshape(batch, rows, heads, cols).transpose(0, 2, 1, 3)


@pytest.mark.parametrize('case', ['q @ k.T', 'p @ v', 'five axes', 'broadcast', 'out view'])
def test_stacks_whose_batch_axes_do_not_merge_run_on_sgemm(monkeypatch, case):
    """Under the one-pool rule a stack of products whose batch axes have
    unrelated strides (attention's heads of a projection) runs on xgrad's
    sgemm too, two batch axes a call, further ones looped: with NumPy's
    BLAS, its threads spun beside xgrad's pool (a Transformer block's step
    at 2 threads took 1.8x its time)."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    reached = _blas_calls(monkeypatch)
    monkeypatch.setattr(host_gemm, '_forced', host_gemm.decide('avx512', 'SkylakeX', True, 2))
    rng = numpy.random.default_rng(7)
    q = _heads(rng, 3, 4, 40, 24)
    out = None
    if case == 'q @ k.T':
        a, b = q, _heads(rng, 3, 4, 36, 24).transpose(0, 1, 3, 2)
    elif case == 'p @ v':
        a, b = rng.standard_normal((3, 4, 40, 36)).astype(numpy.float32), _heads(rng, 3, 4, 36, 24)
    elif case == 'five axes':  # (2, 3, heads 4) batch axes, none merging
        x = rng.standard_normal((2, 40, 3, 4, 24)).astype(numpy.float32)
        a = x.transpose(0, 2, 3, 1, 4)
        b = rng.standard_normal((4, 24, 3, 2, 30)).astype(numpy.float32).transpose(3, 2, 0, 1, 4)
    elif case == 'broadcast':  # one weight under the heads' stack
        a, b = q, rng.standard_normal((1, 4, 24, 30)).astype(numpy.float32)
    else:  # into a view of a larger buffer, (batch, rows, heads, cols) order
        a, b = q, _heads(rng, 3, 4, 24, 48)
        buffer = numpy.full((3, 40, 4, 50), numpy.nan, numpy.float32)
        out = buffer[..., :48].transpose(0, 2, 1, 3)
    expected = numpy.matmul(a.astype(numpy.float64), b.astype(numpy.float64))
    tol = dict(rtol=1e-5, atol=1e-5 * abs(expected).max())
    result = host_gemm.matmul(a, b, out=out)
    numpy.testing.assert_allclose(result, expected, **tol)
    start = rng.standard_normal(expected.shape).astype(numpy.float32)
    acc = start.copy()
    assert host_gemm.matmul(a, b, out=acc, accumulate=True) is acc
    numpy.testing.assert_allclose(acc, expected + start, **tol)
    assert reached == []
    if out is not None:
        assert result is out and numpy.isnan(buffer[..., 48:]).all()


def test_sgemm_takes_two_batch_axes_and_refuses_an_out_that_repeats_a_product():
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    rng = numpy.random.default_rng(8)
    a = _heads(rng, 2, 3, 16, 32)
    b = rng.standard_normal((2, 3, 32, 48)).astype(numpy.float32)
    out = numpy.empty((2, 3, 16, 48), numpy.float32)
    assert gemm_kernels.sgemm(a, b, out)
    expected = numpy.matmul(a.astype(numpy.float64), b)
    numpy.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * abs(expected).max())
    repeated = numpy.broadcast_to(numpy.zeros((1, 3, 16, 48), numpy.float32), out.shape)
    repeated = numpy.lib.stride_tricks.as_strided(repeated, writeable=True)
    assert gemm_kernels.sgemm(a, b, repeated) is False
    assert not repeated.any()
    with pytest.raises(ValueError, match='do not match'):
        gemm_kernels.sgemm(a, b[:1], numpy.empty((2, 3, 16, 48), numpy.float32))


@pytest.mark.parametrize('own', [True, False])
@pytest.mark.parametrize('terms, m, k, n', [(32, 128, 64, 128), (4, 16, 8, 40), (7, 64, 49, 96)])
def test_matmul_sum_matches_numpy(terms, m, k, n, own):
    """The sum of a stack of products into one matrix (a pointwise
    convolution's weight gradient), by sgemm_sum or by NumPy."""
    rng = numpy.random.default_rng(terms + m)
    a = rng.standard_normal((terms, m, k)).astype(numpy.float32)
    b = rng.standard_normal((terms, n, k)).astype(numpy.float32).transpose(0, 2, 1)
    expected = numpy.matmul(a.astype(numpy.float64), b.astype(numpy.float64)).sum(axis=0)
    tol = dict(rtol=1e-5, atol=1e-5 * abs(expected).max())
    out = numpy.full((m, n), numpy.nan, numpy.float32)
    with host_gemm.forced(own):
        assert host_gemm.matmul_sum(a, b, out) is out
        numpy.testing.assert_allclose(out, expected, **tol)
        host_gemm.matmul_sum(a, b, out, accumulate=True)
    numpy.testing.assert_allclose(out, 2 * expected, **tol)


def test_matmul_sum_runs_on_sgemm_where_the_choice_is_own(monkeypatch):
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    monkeypatch.setattr(host_gemm.numpy, 'matmul', None)  # (any NumPy product would fail)
    a = numpy.ones((32, 128, 64), numpy.float32)
    out = numpy.empty((128, 128), numpy.float32)
    with host_gemm.forced(True):
        host_gemm.matmul_sum(a, a.transpose(0, 2, 1), out)
    numpy.testing.assert_array_equal(out, 32 * 64)
