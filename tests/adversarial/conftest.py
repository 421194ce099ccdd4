"""Hypothesis profiles of the adversarial suite.

The normal run (``pytest``) uses the ``adversarial`` profile: few examples,
no deadline, so the suite stays fast. The long run is one command::

    pytest tests/adversarial -m "adversarial_long or not adversarial_long" \\
        --hypothesis-profile=adversarial-long

(``adversarial-long``: 2,000 examples per property test; the tests marked
``adversarial_long`` only run when ``-m adversarial_long`` selects them or
``XGRAD_ADVERSARIAL_LONG=1`` is set.)
"""

import os

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, derandomize=False, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow,
                                      HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
settings.register_profile('adversarial', max_examples=60, **_COMMON)
settings.register_profile('adversarial-long', max_examples=2000, **_COMMON)
if settings._current_profile == 'default':
    settings.load_profile('adversarial')


def pytest_configure(config):
    config.addinivalue_line(
        'markers', 'adversarial_long: long adversarial runs (deselected unless '
        'selected with -m adversarial_long or XGRAD_ADVERSARIAL_LONG=1)')


def pytest_collection_modifyitems(config, items):
    if os.environ.get('XGRAD_ADVERSARIAL_LONG') or 'adversarial_long' in (
            config.getoption('-m') or ''):
        return
    skip = pytest.mark.skip(reason='long adversarial run: select with '
                            '-m adversarial_long or XGRAD_ADVERSARIAL_LONG=1')
    for item in items:
        if 'adversarial_long' in item.keywords:
            item.add_marker(skip)
