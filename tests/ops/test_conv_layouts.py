"""Every convolution algorithm on every memory layout.

Each algorithm of conv, conv_transpose and the weight gradient is forced
through xgrad.testing.force_conv_algorithm (the shapes are small, where the
thresholds would choose im2col), and its operands x, w, b and the output
gradient gy are handed over in one awkward layout each time, wrapped without
a copy (``from_numpy``): transposed, channels-last, a strided slice, at an
odd address, reversed (negative strides), Fortran order, read-only,
broadcast (zero strides), big-endian. The forward, the first-order
gradients and the second-order gradients must match closed forms written
with NumPy (sliding windows and einsum, in float64), and the algorithm must
have run (the block's record of what each kernel took).

Native kernels once refused unaligned operands on the Winograd, phases and
tap-group routes, so a user's convolution ran or raised depending on its
shape; xgrad/_backend/operands.py is where every operand is made plain.
"""

import numpy
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import xgrad
from xgrad._backend import gemm_kernels
from xgrad.testing import force_conv_algorithm

from ._layouts import LAYOUTS, in_layout


# -- the closed forms (float64) ---------------------------------------------------

def ref_conv(x, w, s, p):
    """y[n, o, i, j] = sum over c, a, b of w[o, c, a, b] x_pad[n, c, s i + a, s j + b]."""
    xpad = numpy.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    windows = sliding_window_view(xpad, w.shape[2:], axis=(2, 3))[:, :, ::s, ::s]
    return numpy.einsum('ncijab,ocab->noij', windows, w)


def ref_grad_w(x, gy, k, s, p):
    """d<conv(x, w), gy>/dw."""
    xpad = numpy.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    windows = sliding_window_view(xpad, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    windows = windows[:, :, :gy.shape[2], :gy.shape[3]]
    return numpy.einsum('ncijab,noij->ocab', windows, gy)


def ref_grad_x(gy, w, xshape, s, p):
    """d<conv(x, w), gy>/dx, x of ``xshape``: also conv_transpose(gy, w)."""
    n, c, h, wd = xshape
    k = w.shape[2]
    oh, ow = gy.shape[2:]
    gxpad = numpy.zeros((n, c, h + 2 * p + s, wd + 2 * p + s))
    for a in range(k):
        for b in range(k):
            gxpad[:, :, a:a + s * oh:s, b:b + s * ow:s] += numpy.einsum(
                'noij,oc->ncij', gy, w[:, :, a, b])
    return gxpad[:, :, p:p + h, p:p + wd]


# -- the cases: (op, algorithm, x shape, w shape, k, stride, pad) -------------------

CASES = [
    ('conv', 'winograd', (2, 4, 9, 9), (5, 4, 3, 3), 3, 1, 1),
    ('conv', 'winograd', (2, 3, 10, 10), (4, 3, 5, 5), 5, 1, 2),
    ('conv', 'input_phases', (2, 4, 12, 12), (5, 4, 5, 5), 5, 2, 2),
    ('conv', 'taps', (2, 4, 7, 7), (5, 4, 3, 3), 3, 2, 1),
    ('conv', 'pointwise', (2, 4, 5, 6), (3, 4, 1, 1), 1, 1, 0),
    ('conv', 'im2col', (2, 4, 7, 7), (5, 4, 3, 3), 3, 2, 1),
    ('conv_transpose', 'output_phases', (2, 4, 6, 6), (4, 3, 5, 5), 5, 2, 2),
    ('conv_transpose', 'input_phases', (2, 4, 6, 6), (4, 3, 5, 5), 5, 2, 2),
    ('conv_transpose', 'taps', (2, 4, 4, 4), (4, 3, 3, 3), 3, 2, 1),
    ('conv_transpose', 'pointwise', (2, 4, 5, 6), (4, 3, 1, 1), 1, 1, 0),
    ('conv_transpose', 'flip', (2, 4, 6, 6), (4, 3, 3, 3), 3, 1, 1),
    ('conv_transpose', 'col2im', (2, 4, 4, 4), (4, 3, 3, 3), 3, 2, 1),
    ('conv_transpose', 'col2im_add', (2, 4, 4, 4), (4, 3, 3, 3), 3, 2, 1),
]
# (the tap groups run float32 only: the GEMM kernel they drive is sgemm's)
DTYPES = {'taps': ('float32',)}


# (and only on the CPU paths that have that kernel: AVX2, AVX-512)
NEEDS_SGEMM = pytest.mark.skipif(not gemm_kernels.available(),
                                 reason="the tap groups run on xgrad's sgemm kernel, which "
                                        "this CPU path (XGRAD_CPU_PATH) does not have")


def _params():
    for case in CASES:
        for dtype in DTYPES.get(case[1], ('float32', 'float64')):
            marks = [NEEDS_SGEMM] if case[1] == 'taps' else []
            yield pytest.param(case, dtype, marks=marks, id='{}-{}-{}x{}s{}-{}'.format(
                case[0], case[1], case[4], case[4], case[5], dtype))


def _closed_forms(op, x, w, b, gy, vx, vw, vb, s, p):
    """The forward, first-order (x, w, b) and second-order (x, w, gy) values
    of ``op`` in float64: second order of <gx, vx> + <gw, vw> + <gb, vb>."""
    k = w.shape[2]
    if op == 'conv':
        y = ref_conv(x, w, s, p) + b.reshape(1, -1, 1, 1)
        first = (ref_grad_x(gy, w, x.shape, s, p), ref_grad_w(x, gy, k, s, p),
                 gy.sum(axis=(0, 2, 3)))
        second = (ref_grad_x(gy, vw, x.shape, s, p), ref_grad_w(vx, gy, k, s, p),
                  ref_conv(vx, w, s, p) + ref_conv(x, vw, s, p) + vb.reshape(1, -1, 1, 1))
    else:  # conv_transpose: w (C, O, k, k), the adjoint of conv(., w) in its input
        y = ref_grad_x(x, w, gy.shape, s, p) + b.reshape(1, -1, 1, 1)
        first = (ref_conv(gy, w, s, p), ref_grad_w(gy, x, k, s, p), gy.sum(axis=(0, 2, 3)))
        second = (ref_conv(gy, vw, s, p), ref_grad_w(gy, vx, k, s, p),
                  ref_grad_x(vx, w, gy.shape, s, p) + ref_grad_x(x, vw, gy.shape, s, p)
                  + vb.reshape(1, -1, 1, 1))
    return y, first, second


def _close(actual, expected, dtype, what):
    expected = numpy.asarray(expected, float)
    tol = 2e-5 if dtype == 'float32' else 1e-11
    scale = max(1.0, float(numpy.abs(expected).max(initial=0)))
    assert actual.shape == expected.shape, what
    numpy.testing.assert_allclose(actual.astype(float), expected, rtol=tol, atol=tol * scale,
                                  err_msg=what)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('case, dtype', list(_params()))
def test_algorithm_on_layout(case, dtype, layout):
    op, algorithm, xshape, wshape, k, s, p = case
    rng = numpy.random.RandomState(7)
    out_channels = wshape[0] if op == 'conv' else wshape[1]
    x = rng.uniform(-1, 1, xshape).astype(dtype)
    w = rng.uniform(-1, 1, wshape).astype(dtype)
    b = rng.uniform(-1, 1, out_channels).astype(dtype)
    # each operand in the layout; the closed forms read the values they hold
    # (a broadcast layout repeats the first entry along the first axis)
    x, w, b = (in_layout(a, layout) for a in (x, w, b))
    fn = xgrad.conv if op == 'conv' else xgrad.conv_transpose
    args = dict(stride=s, pad=p)
    originals = [a.copy() for a in (x, w, b)]
    X, W, B = (xgrad.from_numpy(a).require_grad() for a in (x, w, b))
    with force_conv_algorithm(algorithm) as forced:
        y = fn(X, W, B, **args)
        gy = in_layout(rng.uniform(-1, 1, y.shape).astype(dtype), layout)
        vx, vw, vb = (rng.uniform(-1, 1, a.shape) for a in (x, w, b))
        GY = xgrad.from_numpy(gy).require_grad()
        gx, gw, gb = xgrad.grad([y], [X, W, B], grad_outputs=[GY], enable_double_backprop=True)
        raw = xgrad.grad([fn(X, W, B, **args)], [X, W, B], grad_outputs=[GY])
        second = xgrad.grad([(gx * xgrad.array(vx, dtype=dtype)).sum()
                             + (gw * xgrad.array(vw, dtype=dtype)).sum()
                             + (gb * xgrad.array(vb, dtype=dtype)).sum()], [X, W, GY])
    assert (op, algorithm) in forced.taken, forced.taken
    f64 = [numpy.asarray(a, float) for a in (x, w, b, gy)]
    y_ref, first_ref, second_ref = _closed_forms(op, *f64, vx, vw, vb, s, p)
    _close(y.to_numpy(), y_ref, dtype, 'forward')
    for name, got, raw_got, ref in zip('xwb', (gx, gw, gb), raw, first_ref):
        _close(got.to_numpy(), ref, dtype, 'first order in ' + name)
        _close(raw_got.to_numpy(), ref, dtype, 'first order in {} (raw pass)'.format(name))
    for name, got, ref in zip(('x', 'w', 'gy'), second, second_ref):
        _close(got.to_numpy(), ref, dtype, 'second order in ' + name)
    for before, after in zip(originals, (x, w, b)):  # exact: the inputs are left unchanged
        numpy.testing.assert_array_equal(before, after)


@pytest.mark.parametrize('algorithm', ['winograd', 'input_phases',
                                       pytest.param('taps', marks=NEEDS_SGEMM),
                                       'pointwise', 'im2col'])
def test_weight_gradient_takes_the_forced_algorithm(algorithm):
    """conv's weight gradient has the algorithms of conv itself."""
    case = next(c for c in CASES if c[:2] == ('conv', algorithm))
    _, _, xshape, wshape, k, s, p = case
    x = xgrad.from_numpy(in_layout(numpy.random.RandomState(1).rand(*xshape).astype('float32'),
                                   'unaligned'))
    w = xgrad.array(numpy.random.RandomState(2).rand(*wshape).astype('float32')).require_grad()
    with force_conv_algorithm(algorithm) as forced:
        y = xgrad.conv(x, w, stride=s, pad=p)
        gy = numpy.random.RandomState(3).rand(*y.shape).astype('float32')
        gw, = xgrad.grad([y], [w], grad_outputs=[xgrad.from_numpy(in_layout(gy, 'unaligned'))])
    assert ('grad_weight', algorithm) in forced.taken, forced.taken
    _close(gw.to_numpy(), ref_grad_w(x.to_numpy().astype(float), gy.astype(float), k, s, p),
           'float32', 'weight gradient')


def test_an_algorithm_that_cannot_compute_a_shape_is_not_taken():
    """Winograd has no strided transform: a strided conv keeps its own
    choice, and the record says so."""
    x = xgrad.array(numpy.ones((1, 2, 7, 7), 'float32'))
    w = xgrad.array(numpy.ones((3, 2, 3, 3), 'float32'))
    with force_conv_algorithm('winograd') as forced:
        y = xgrad.conv(x, w, stride=2, pad=1)
    assert forced.taken and all(how != 'winograd' for _, how in forced.taken)
    _close(y.to_numpy(), ref_conv(numpy.ones((1, 2, 7, 7)), numpy.ones((3, 2, 3, 3)), 2, 1),
           'float32', 'forward')


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown algorithm 'fft'"):
        with force_conv_algorithm('fft'):
            pass


@pytest.mark.parametrize('case, dtype', list(_params()))
def test_gradients_come_back_c_contiguous(case, dtype):
    """Each algorithm's gradients are laid out as their inputs (an
    optimizer's update of NIN's 1024x384x3x3 weights took 41 ms instead of 3
    on a transposed weight gradient); also the shapes where im2col's weight
    gradient is computed transposed (more windows than output channels)."""
    op, algorithm, xshape, wshape, k, s, p = case
    rng = numpy.random.RandomState(3)
    fn = xgrad.conv if op == 'conv' else xgrad.conv_transpose
    for channels in (1, 8):  # (8 * k * k windows > 1 output channel: transposed)
        x = xgrad.array(rng.rand(*xshape).astype(dtype)).require_grad()
        w = xgrad.array(rng.rand(*((channels,) + wshape[1:] if op == 'conv' else
                                   wshape[:1] + (channels,) + wshape[2:])).astype(dtype))
        w.require_grad()
        with force_conv_algorithm(algorithm):
            y = fn(x, w, stride=s, pad=p)
            grads = xgrad.grad([y], [x, w], grad_outputs=[xgrad.ones_like(y)])
        for g in grads:
            assert g.is_contiguous, (algorithm, g.shape)
