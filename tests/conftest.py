"""What every test gets, and the Hypothesis profiles of the property tests.

The property tests (tests/errors/test_registry_bad_arguments.py and
tests/ops/test_registry_layouts.py, once tests/adversarial) run under the
``adversarial`` profile: 60 examples per property test, derandomized (the
same examples on every run, so CI does not flake), no deadline, so the suite
stays fast. The long run is one command::

    pytest tests/errors/test_registry_bad_arguments.py tests/ops/test_registry_layouts.py \
        --hypothesis-profile=adversarial-long

(2,000 random examples per property test; add ``--hypothesis-show-statistics``
for the counts).
"""

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow,
                                      HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile('adversarial', max_examples=60, derandomize=True, **_COMMON)
settings.register_profile('adversarial-long', max_examples=2000, **_COMMON)
if settings._current_profile == 'default':
    settings.load_profile('adversarial')


@pytest.fixture(autouse=True)
def _no_kept_conv_choices():
    """conv keeps each shape's choice of algorithm (convolution._choice), and
    tests change the rules it reads (thresholds, plans, the GEMM's tile):
    each test starts and ends with none kept."""
    from xgrad._ops import convolution
    convolution.clear_choices()
    yield
    convolution.clear_choices()


@pytest.fixture
def on_cpu_path():
    """select(path): run the rest of the test on CPU path ``path`` (skipped
    where this CPU lacks it); the path before is selected again after."""
    from xgrad._backend import native_kernels
    before = native_kernels.cpu_path()

    def select(path):
        if path not in native_kernels.cpu_paths():
            pytest.skip('this CPU has no {} path'.format(path))
        native_kernels._select_cpu_path(path)
    yield select
    native_kernels._select_cpu_path(before)
