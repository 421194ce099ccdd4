"""pytest plugin for scripts/chainerx_tests.py: runs ChainerX's own tests
(chainer/chainer's tests/chainerx_tests) against xgrad, unmodified.

Loaded with ``-p chainerx_tests_plugin`` before any conftest, it

- serves xgrad as ``chainerx`` (``xgrad.chainerx_compat.install()``), so
  ChainerX's conftest, helpers and tests import xgrad;
- tells ChainerX's conftest how many GPUs xgrad sees
  (``CHAINERX_TEST_CUDA_DEVICE_LIMIT``), so its device fixtures map
  'native:N' / 'cuda:N' to xgrad's devices and skip cuda cases without a GPU;
- records each case's outcome and, for failures, the exception's first line,
  per test file, as JSON in ``$XGRAD_CHAINERX_REPORT``.

Nothing the tests assert is changed: ChainerX's conftest, fixtures and
helpers run as they are.
"""

import json
import os

import xgrad
import xgrad.chainerx_compat

xgrad.chainerx_compat.install()


def _gpu_count():
    try:
        return xgrad.get_default_context().get_backend('cuda').get_device_count()
    except Exception:  # no CuPy, no driver: no GPU
        return 0


os.environ.setdefault('CHAINERX_TEST_CUDA_DEVICE_LIMIT', str(_gpu_count()))

_outcomes = {}   # nodeid -> 'passed' | 'failed' | 'skipped' | 'error'
_reasons = {}    # nodeid -> first line of the failure
_RANK = {'passed': 0, 'skipped': 1, 'failed': 2, 'error': 3}


def _file_of(nodeid):
    return nodeid.split('::')[0]


def _reason(report):
    crash = getattr(report.longrepr, 'reprcrash', None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else '(no message)'


def _record(nodeid, outcome, report=None):
    if _RANK[outcome] >= _RANK[_outcomes.get(nodeid, 'passed')]:
        _outcomes[nodeid] = outcome
        if report is not None and outcome in ('failed', 'error'):
            _reasons[nodeid] = _reason(report)


def pytest_runtest_logreport(report):
    if report.when == 'call':
        _record(report.nodeid, 'skipped' if report.skipped else report.outcome, report)
    elif report.skipped:
        _record(report.nodeid, 'skipped')
    elif report.failed:  # setup or teardown failed
        _record(report.nodeid, 'error', report)


def pytest_collectreport(report):
    if report.failed:  # a file that cannot be imported: one error for the file
        _record(report.nodeid or 'collection', 'error', report)


def pytest_sessionfinish(session):
    path = os.environ.get('XGRAD_CHAINERX_REPORT')
    if not path:
        return
    files = {}
    for nodeid, outcome in _outcomes.items():
        counts = files.setdefault(_file_of(nodeid), {
            'passed': 0, 'failed': 0, 'skipped': 0, 'error': 0})
        counts[outcome] += 1
    with open(path, 'w') as f:
        json.dump({'files': files, 'failures': _reasons}, f, indent=1, sort_keys=True)
