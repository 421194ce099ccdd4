"""xgrad.testing: what a gradient regression suite is built from.

- ``numerical_grad``: central differences computed in float64 (one
  evaluation pair per element, or per random direction);
- ``check_backward`` / ``check_double_backward`` (the very functions that
  are ``xgrad.check_backward`` / ``xgrad.check_double_backward``): ChainerX's
  signatures, the dtype's default tolerance (ChainerX's for a ChainerX-style
  call), optional random-direction mode, detection of inputs on
  non-differentiable points, leak and two-thread checks;
- ``assert_allclose`` / ``assert_array_equal`` for xgrad arrays;
- ChainerX's ``chainerx.testing`` helpers, so ChainerX's and Chainer's
  tests run on xgrad: ``assert_allclose_ex``, ``assert_array_equal_ex``,
  the ``numpy_chainerx_*`` decorators, ``ignore`` and the dtype-name lists
  (also as ``xgrad.testing.dtypes``);
- ``GradSnapshot``: golden float64 gradients recorded once, compared later
  in every dtype and device;
- ``python -m xgrad check`` runs all of it over the op registry, and the
  pytest plugin (``xgrad.testing.pytest_plugin``) brings fixtures;
- ``OpInfo`` (with ``Sample``, ``Arg`` and ``domains``) and ``register``:
  a package declares its own ops, and ``check`` sweeps them as it sweeps
  xgrad's (``--import``, the ``xgrad.ops`` entry point; docs/user_ops.md);
  ``gradient_cases`` / ``check_case`` run the same sweep in pytest.
"""

from xgrad._errors import GradientCheckArgumentError  # NOQA
from xgrad.testing._assertions import assert_allclose, assert_array_equal  # NOQA
from xgrad.testing._checks import (  # NOQA
    GradientCheckResult, check_backward, check_double_backward)
from xgrad.testing._numerical import NondifferentiablePointError, numerical_grad  # NOQA
from xgrad.testing._snapshot import (  # NOQA
    GradSnapshot, Golden, MissingSnapshotError, SnapshotComparison, SnapshotError)
from xgrad._ops.registry import Arg, OpDeclarationError, OpInfo, Sample  # NOQA
from xgrad.testing import domains  # NOQA
from xgrad.testing._user_ops import OpSourceError, register  # NOQA
from xgrad.testing._sweep import check_case, gradient_cases  # NOQA
from xgrad.testing._tolerances import default_eps, default_tolerance, least_precise  # NOQA
from xgrad.testing import dtypes  # NOQA
from xgrad.testing.dtypes import (  # NOQA
    all_dtypes, float_dtypes, integral_dtypes, nonfloat_dtypes, numeric_dtypes,
    parametrize_dtype_specifier, signed_dtypes, signed_integral_dtypes, unsigned_dtypes)
from xgrad.testing._numpy_comparison import (  # NOQA
    _DeviceBuffer, _fromnumpy, assert_allclose_ex, assert_array_equal_ex, ignore,
    numpy_chainerx_allclose, numpy_chainerx_array_equal)
from xgrad._ops.convolution import force_algorithm as force_conv_algorithm  # NOQA
