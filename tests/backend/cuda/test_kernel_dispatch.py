"""What runs on the device: our kernels, one launch per elementwise forward
and one per backward, and no host reads while recording or backpropagating
(a classifier's step, and every differentiable op's backward and double
backward).

Counted in the CPU stand-in for CuPy (fake_cupy.py): ``emulator.launches``
lists our kernels, ``cupy_calls`` CuPy's routines, ``host_reads`` every read
of device data on the host (each a synchronisation on a real GPU).
"""

import numpy
import pytest

import xgrad
from backend.cuda.kernels import emulator
from xgrad._kernels import loader

# The xgrad ops that have a kernel of ours (every one of the kernels'
# unary functors but arctanh, which xgrad has no op for).
UNARY = ['negative', 'absolute', 'exp', 'log', 'sqrt', 'square', 'tanh', 'sigmoid', 'relu',
         'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'arcsinh',
         'arccosh', 'expm1', 'log1p', 'log2', 'log10', 'exp2', 'reciprocal', 'erf']
DOMAIN = {'arcsin': (0.1, 0.9), 'arccos': (0.1, 0.9), 'arccosh': (1.5, 3.0), 'tan': (0.1, 1.2)}
CTYPES = {'float16': 'xgrad::half', 'float32': 'float', 'float64': 'double'}
FUNCTORS = {'multiply': 'Multiply', 'divide': 'Divide', 'add': 'Add',
            'subtract': 'Subtract', 'maximum': 'Maximum', 'minimum': 'Minimum'}


def _array(shape, dtype, low=0.5, high=2.0, seed=0):
    rs = numpy.random.RandomState(seed)
    return xgrad.array(rs.uniform(low, high, shape).astype(dtype), device='cuda:0')


def test_every_op_with_a_kernel_is_listed():
    from xgrad import _kernels
    assert set(UNARY) == set(_kernels.UNARY) - {'arctanh', 'softplus'}


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
@pytest.mark.parametrize('name', UNARY)
def test_unary_forward_and_backward_are_one_kernel_each(fake, name, dtype):
    x = _array((3, 700), dtype, *DOMAIN.get(name, (0.5, 2.0))).require_grad()
    gy = _array((3, 700), dtype, seed=1)
    fake.reset_counters()
    y = getattr(xgrad, name)(x)
    assert emulator.launches == ['xgrad::unary_forward<{}, {}>'.format(
        CTYPES[dtype], loader.functor(name))]
    assert fake.cupy_calls == [] and fake.host_reads == []
    fake.reset_counters()
    gx, = xgrad.grad([y], [x], grad_outputs=[gy])
    assert emulator.launches == ['xgrad::unary_backward<{}, {}>'.format(
        CTYPES[dtype], loader.functor(name))]
    assert fake.cupy_calls == [] and fake.host_reads == []
    assert gx.device.name == 'cuda:0'
    # the same values as on the host
    xh = x.to_device('native:0')
    gh, = xgrad.grad([getattr(xgrad, name)(xh)], [xh], grad_outputs=[gy.to_device('native:0')])
    tol = 2e-3 if dtype == 'float16' else 1e-5
    numpy.testing.assert_allclose(y.to_numpy().astype('float64'),
                                  getattr(xgrad, name)(xh).to_numpy().astype('float64'),
                                  rtol=tol, atol=tol)
    numpy.testing.assert_allclose(gx.to_numpy().astype('float64'),
                                  gh.to_numpy().astype('float64'), rtol=tol, atol=tol)


@pytest.mark.parametrize('name', ['multiply', 'divide', 'maximum', 'minimum'])
def test_binary_forward_and_both_gradients_are_one_kernel_each(fake, name):
    a = _array((5, 300), 'float32').require_grad()
    b = _array((5, 300), 'float32', seed=2).require_grad()
    gy = _array((5, 300), 'float32', seed=3)
    fake.reset_counters()
    y = getattr(xgrad, name)(a, b)
    assert emulator.launches == ['xgrad::binary_forward<float, xgrad::{}>'.format(FUNCTORS[name])]
    fake.reset_counters()
    ga, gb = xgrad.grad([y], [a, b], grad_outputs=[gy])
    assert emulator.launches == ['xgrad::binary_backward<float, xgrad::{}>'.format(
        FUNCTORS[name])]
    assert fake.cupy_calls == [] and fake.host_reads == []


def test_broadcast_gradients_are_reduced_by_our_kernel(fake):
    x = _array((64, 32), 'float32').require_grad()
    bias = _array((32,), 'float32', seed=4).require_grad()
    gy = _array((64, 32), 'float32', seed=5)
    y = x + bias
    fake.reset_counters()
    gx, gb = xgrad.grad([y], [x, bias], grad_outputs=[gy])
    assert [k.split('<')[0] for k in emulator.launches] == ['xgrad::sum_abc_columns'] or \
        [k.split('<')[0] for k in emulator.launches] == ['xgrad::sum_abc_blocks']
    assert fake.cupy_calls == []
    numpy.testing.assert_allclose(gb.to_numpy(), gy.to_numpy().sum(axis=0), rtol=1e-5)


def test_gradients_accumulate_in_place_on_the_device(fake):
    x = _array((4, 100), 'float32').require_grad()
    y = xgrad.tanh(x) + xgrad.exp(x) + xgrad.sigmoid(x)
    gy = _array((4, 100), 'float32', seed=6)
    fake.reset_counters()
    gx, = xgrad.grad([y], [x], grad_outputs=[gy])
    names = [k.split('<')[0] for k in emulator.launches]
    # three fused backwards, one new sum buffer, then one in-place accumulation
    assert names.count('xgrad::unary_backward') == 3
    assert names.count('xgrad::binary_forward') + names.count('xgrad::add3') == 1
    assert names.count('xgrad::accumulate') == 1
    assert fake.cupy_calls == [] and fake.host_reads == []
    xv, g = x.to_numpy().astype(numpy.float64), gy.to_numpy().astype(numpy.float64)
    t, s = numpy.tanh(xv), 1 / (1 + numpy.exp(-xv))
    numpy.testing.assert_allclose(gx.to_numpy(), g * (1 - t * t + numpy.exp(xv) + s * (1 - s)),
                                  rtol=1e-5)


def _classifier():
    """Data and parameters of a small classifier on cuda:0."""
    rs = numpy.random.RandomState(0)
    x = xgrad.array(rs.standard_normal((32, 20)).astype('float32'), device='cuda:0')
    labels = xgrad.array(rs.randint(-1, 10, 32), device='cuda:0')
    w1 = xgrad.array(rs.standard_normal((20, 16)).astype('float32'), device='cuda:0')
    b1 = xgrad.zeros((16,), device='cuda:0')
    w2 = xgrad.array(rs.standard_normal((16, 10)).astype('float32'), device='cuda:0')
    return x, labels, [w.require_grad() for w in (w1, b1, w2)]


def _step(x, labels, params, double_backprop):
    w1, b1, w2 = params
    h = xgrad.tanh(xgrad.relu(x @ w1 + b1))
    logits = xgrad.log_softmax(h @ w2, axis=1) * 2.0
    loss = xgrad.mean(xgrad.softmax_cross_entropy(logits, labels))
    if not double_backprop:
        xgrad.backward(loss)
        return [w1.grad, b1.grad, w2.grad]
    gw1, = xgrad.grad([loss], [w1], enable_double_backprop=True)
    penalty = xgrad.sum(gw1 * gw1)
    return xgrad.grad([penalty], [w1, b1, w2])


@pytest.mark.parametrize('double_backprop', [False, True], ids=['backward', 'double'])
def test_recording_and_backward_never_read_the_device(fake, double_backprop):
    x, labels, params = _classifier()
    fake.reset_counters()
    grads = _step(x, labels, params, double_backprop)
    assert fake.host_reads == [], fake.host_reads
    # Host-made constants moved to the device: Python scalars only, no arrays.
    assert all(len(shape) == 0 for shape in fake.uploads), fake.uploads
    assert len(emulator.launches) > 0
    assert all(g.device.name == 'cuda:0' for g in grads)


def test_labels_out_of_range_give_nan_rows_without_a_host_read(fake):
    rs = numpy.random.RandomState(0)
    x = xgrad.array(rs.standard_normal((4, 3)), device='cuda:0').require_grad()
    t = xgrad.array(numpy.array([0, 3, -1, -2]), device='cuda:0')
    fake.reset_counters()
    loss = xgrad.softmax_cross_entropy(x, t)
    gx, = xgrad.grad([loss], [x], grad_outputs=[xgrad.ones_like(loss)])
    margin = xgrad.hinge(x, t)
    labels = numpy.array([[0, 1, -1], [2, 0, 1], [1, 1, 1], [0, 0, 0]])
    binary = xgrad.sigmoid_cross_entropy(x, xgrad.array(labels, device='cuda:0'))
    assert fake.host_reads == []
    # Any label but -1 enters linearly (ChainerX), on the GPU as on the host.
    xv = x.to_numpy()
    numpy.testing.assert_allclose(binary.to_numpy(), numpy.where(
        labels == -1, 0, numpy.logaddexp(0, xv) - xv * labels), rtol=1e-12)
    lv, gv, mv = loss.to_numpy(), gx.to_numpy(), margin.to_numpy()
    assert numpy.isfinite(lv[0]) and lv[2] == 0 and numpy.isnan(lv[[1, 3]]).all()
    assert numpy.isfinite(gv[0]).all() and (gv[2] == 0).all() and numpy.isnan(gv[[1, 3]]).all()
    assert numpy.isfinite(mv[0]).all() and numpy.isnan(mv[1:]).all()
    # The recorded gradient (double backprop) agrees.
    gx2, = xgrad.grad([xgrad.softmax_cross_entropy(x, t)], [x],
                      grad_outputs=[xgrad.ones((4,), 'float64', device='cuda:0')],
                      enable_double_backprop=True)
    g2 = gx2.to_numpy()
    numpy.testing.assert_allclose(g2[[0, 2]], gv[[0, 2]], rtol=1e-12)
    assert numpy.isnan(g2[[1, 3]]).all()
    # On the host the same labels are refused, naming the label.
    with pytest.raises(xgrad.IndexError, match='label 3'):
        xgrad.softmax_cross_entropy(x.to_device('native:0'), t.to_device('native:0'))


# Ops whose forward reads device data on the host by design (docs/gpu.md, "No hidden
# synchronisation"): the read is what the result needs.
READS_THE_DATA = {
    'take': "mode='raise' checks indices on the GPU against the bounds",
}
# Ops whose backward reads booleans on the host by design: xgrad decides
# whether a factor is singular (xgrad._ops._singular, one bool per check) so
# that a singular one raises LinAlgError on every machine and device.
DECIDES_RANK = {'linalg.cholesky', 'linalg.eigh', 'linalg.eigvalsh', 'linalg.inv',
                'linalg.pinv', 'linalg.qr', 'linalg.solve', 'linalg.svd'}
DIFFERENTIABLE = [info for info in xgrad.registered_ops() if info.differentiable]


def _unexpected_reads(fake, info):
    """The host reads that ``info``'s backward should not have made."""
    if info.name in DECIDES_RANK:
        return [r for r in fake.host_reads if r != 'bool']
    return fake.host_reads


@pytest.mark.parametrize('info', DIFFERENTIABLE, ids=[i.name for i in DIFFERENTIABLE])
def test_no_op_reads_the_device_in_backward_or_double_backward(fake, info):
    """Every differentiable op's first sample: forward, backward recorded for
    double backprop, and the second-order pass make no host read (a
    synchronisation on a real GPU), apart from the forwards listed above."""
    sample = info.samples[0]
    dtype = numpy.float32 if numpy.dtype(numpy.float32) in info.dtypes else info.dtypes[0]
    data = info.sample_data(sample, dtype, numpy.random.RandomState(0))
    xs = [xgrad.array(a, device='cuda:0') for a in data]
    xs = [x.require_grad() if x.dtype.kind == 'f' else x for x in xs]
    fake.reset_counters()
    with numpy.errstate(all='ignore'):
        ys = info(xs, sample)
    if info.name not in READS_THE_DATA:
        assert fake.host_reads == [], 'forward: {}'.format(fake.host_reads)
    ys = ys if isinstance(ys, (tuple, list)) else (ys,)
    ys = [y for y in ys if y is not None and y.dtype.kind == 'f' and y.is_backprop_required()]
    if not ys:
        pytest.skip('{}: its first sample has no differentiable output'.format(info.name))
    leaves = [x for x in xs if x.is_grad_required()]
    fake.reset_counters()
    with numpy.errstate(all='ignore'):
        grads = xgrad.grad(ys, leaves, grad_outputs=[xgrad.ones_like(y) for y in ys],
                           enable_double_backprop=True)
    assert _unexpected_reads(fake, info) == [], 'backward: {}'.format(fake.host_reads)
    grads = [g for g in grads if g is not None and g.is_backprop_required()]
    if grads:
        with numpy.errstate(all='ignore'):
            xgrad.grad([xgrad.sum(g * g) for g in grads], leaves)
        assert _unexpected_reads(fake, info) == [], 'double backward: {}'.format(
            fake.host_reads)


# NaN and the infinities as the data of each op's kernels (half of them also
# in gy): the forward and the gradient must be the host's, NaN where the
# host has NaN. (absolute's kernel once gave a zero gradient at NaN.)
NON_FINITE = [numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0, 1.5, -1.5, 0.25]


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('name', UNARY)
def test_unary_kernels_give_the_host_s_values_on_non_finite_data(cuda_runtime, name, dtype):
    xs = numpy.array(NON_FINITE * 2, dtype)
    gys = numpy.array([1.0] * len(NON_FINITE) + [numpy.nan, numpy.inf] * (len(NON_FINITE) // 2),
                      dtype)
    got, want = [], []
    with numpy.errstate(all='ignore'):
        for device, out in (('cuda:0', got), ('native:0', want)):
            x = xgrad.array(xs, device=device).require_grad()
            y = getattr(xgrad, name)(x)
            gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.array(gys, device=device)])
            out.extend([y.to_numpy(), gx.to_numpy()])
    for what, a, b in zip(('forward', 'gradient'), got, want):
        numpy.testing.assert_array_equal(numpy.isnan(a), numpy.isnan(b),
                                         err_msg='{} {}: NaN where'.format(name, what))
        ok = ~numpy.isnan(b)
        numpy.testing.assert_allclose(a[ok], b[ok], rtol=1e-5, atol=1e-6,
                                      err_msg='{} {}'.format(name, what))
