"""xgrad.testing: what a gradient regression suite is built from.

- ``numerical_grad``: central differences computed in float64 (one
  evaluation pair per element, or per random direction);
- ``check_backward`` / ``check_double_backward``: ChainerX's signatures, the
  dtype's default tolerance, optional random-direction mode, detection of
  inputs on non-differentiable points, leak and two-thread checks;
- ``assert_allclose`` / ``assert_array_equal`` for xgrad arrays;
- ``GradSnapshot``: golden float64 gradients recorded once, compared later
  in every dtype and device;
- ``python -m xgrad check`` runs all of it over the op registry, and the
  pytest plugin (``xgrad.testing.pytest_plugin``) brings fixtures.
"""

from xgrad.testing._assertions import assert_allclose, assert_array_equal  # NOQA
from xgrad.testing._checks import (  # NOQA
    GradientCheckResult, check_backward, check_double_backward)
from xgrad.testing._numerical import NondifferentiablePointError, numerical_grad  # NOQA
from xgrad.testing._snapshot import (  # NOQA
    GradSnapshot, Golden, MissingSnapshotError, SnapshotComparison, SnapshotError)
from xgrad.testing._tolerances import default_eps, default_tolerance, least_precise  # NOQA
