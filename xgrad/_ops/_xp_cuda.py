"""The raw-array namespace of gradient formulas on cuda devices (the native
one, ``numpy_ns``, is in ``_xp``): CuPy's functions and our kernels, looked
up from CuPy's module only when a cuda device computes."""

from xgrad import _device
from xgrad._backend.cuda import add_at, binary, cupy, device_key, is_device_array, kernels, unary
from xgrad._device import transfer
from xgrad._ops._xp import cast


class CudaNamespace:
    """The raw-array namespace gradient formulas see on cuda devices: CuPy's
    functions under their own names (never NumPy's, which would reach CuPy
    arrays only through NumPy's dispatch), the helpers of the native
    namespace (``sum_to``, ``scatter``, ``cast``, ``constant``, ...), and our
    kernels for ``sum_to``, ``sigmoid``, ``relu``, ``negative``, ``add`` and
    the fused gradients (``unary_grad``, ``binary_grads``, ``accumulate``)."""

    raw = True  # computes on raw arrays: nothing is recorded

    def __getattr__(self, name):
        try:
            return getattr(cupy(), name)
        except AttributeError:
            raise AttributeError('CuPy has no {!r} for a gradient formula on a cuda '
                                 'device'.format(name)) from None

    cast = staticmethod(cast)

    @staticmethod
    def getitem(a, key):
        return a[device_key(key)]

    to_device = staticmethod(transfer)

    @staticmethod
    def sum_to(a, shape):
        return kernels().sum_to(cupy(), a, tuple(shape))

    @staticmethod
    def scatter(gy, key, shape):
        out = cupy().zeros(shape, dtype=gy.dtype)
        add_at(out, device_key(key), gy)
        return out

    @staticmethod
    def constant(raw, like):
        return raw if is_device_array(raw) else cupy().asarray(raw)

    @staticmethod
    def sigmoid(x):
        return unary('sigmoid', x)

    @staticmethod
    def relu(x):
        return unary('relu', x)

    @staticmethod
    def negative(x):
        return unary('negative', x)

    @staticmethod
    def unary_grad(name, gy, x, y):
        """gx of elementwise op ``name`` in one kernel."""
        return kernels().unary_backward(cupy(), name, gy, x, y)

    @staticmethod
    def binary_grads(name, gy, a, b, need_a, need_b):
        """(ga, gb) of a same-shape binary op in one kernel."""
        return kernels().binary_backward(cupy(), name, gy, a, b, need_a, need_b)

    @staticmethod
    def accumulate(acc, g):
        """acc += g in place (same shape and dtype, acc contiguous)."""
        kernels().accumulate(cupy(), acc, g)

    @staticmethod
    def add(a, b):
        return binary('add', a, b)


cuda_ns = CudaNamespace()
_device.register_raw_namespace('cuda', cuda_ns)
