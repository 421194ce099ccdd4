"""What every test gets."""

import pytest


@pytest.fixture(autouse=True)
def _no_kept_conv_choices():
    """conv keeps each shape's choice of algorithm (convolution._choice), and
    tests change the rules it reads (thresholds, plans, the GEMM's tile):
    each test starts and ends with none kept."""
    from xgrad._ops import convolution
    convolution.clear_choices()
    yield
    convolution.clear_choices()
