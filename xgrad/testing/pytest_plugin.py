"""The xgrad pytest plugin: device and dtype fixtures, a ``cuda`` marker and
golden gradients for a project's own functions.

Installed xgrad registers it through the ``pytest11`` entry point; without
that, load it with ``-p xgrad.testing.pytest_plugin`` or
``pytest_plugins = ['xgrad.testing.pytest_plugin']`` in a conftest.

Fixtures (ChainerX's conftest names):

``device``
    The test runs once per device chosen with ``--xgrad-device`` (default
    ``native:0``), inside ``xgrad.using_device(device)``. A CUDA device that
    this machine lacks skips the test.
``float_dtype``
    float16, float32 and float64 (NumPy dtypes).
``grad_snapshot``
    ``grad_snapshot.check(func, inputs)`` records the float64 gradients of
    ``func`` at ``inputs`` the first time (after ``check_backward`` passed on
    them) and afterwards compares the analytic gradients in the inputs' dtype
    with them; see :class:`SnapshotFixture`.

Marker ``@pytest.mark.cuda(num=1)``: the test needs ``num`` CUDA devices and
is skipped, saying so, where there are fewer.

Options: ``--xgrad-device``, ``--xgrad-snapshot-dir`` (default: the ini value
``xgrad_snapshot_dir``, else ``<rootdir>/tests/grad_snapshots``),
``--xgrad-snapshot-update`` (re-record every golden gradient the run
reaches) and ``--xgrad-snapshot-strict`` (fail instead of recording when a
test has no golden gradients: for CI, so that goldens never go missing
silently).
"""

import dataclasses
import functools
import os
import re

import numpy
import pytest

import xgrad
from xgrad.testing._snapshot import GradSnapshot, SnapshotError

FLOAT_DTYPES = (numpy.dtype('float16'), numpy.dtype('float32'), numpy.dtype('float64'))
_BACKENDS = ('native', 'cuda')


@dataclasses.dataclass
class _State:
    """What the options decided, for the whole session."""
    devices: list
    store: GradSnapshot
    update: bool
    strict: bool
    recorded: int = 0
    compared: int = 0


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser):
    group = parser.getgroup('xgrad')
    group.addoption('--xgrad-device', action='append', metavar='NAMES',
                    help='devices the `device` fixture runs tests on, comma-separated '
                         '(repeatable), e.g. native:0,native:1,cuda:0 (default: native:0)')
    group.addoption('--xgrad-snapshot-dir', metavar='DIR',
                    help='directory of golden gradients for the `grad_snapshot` fixture '
                         '(default: ini xgrad_snapshot_dir, else <rootdir>/tests/'
                         'grad_snapshots)')
    group.addoption('--xgrad-snapshot-update', action='store_true',
                    help='re-record the golden gradients of every grad_snapshot check run')
    group.addoption('--xgrad-snapshot-strict', action='store_true',
                    help='fail grad_snapshot checks that have no golden gradients '
                         'instead of recording them')
    parser.addini('xgrad_snapshot_dir', 'golden-gradient directory, relative to the '
                  'rootdir (default: tests/grad_snapshots)', default='')


def pytest_configure(config):
    config.addinivalue_line('markers', 'cuda(num=1): the test needs `num` CUDA devices; '
                                       'skipped where xgrad has fewer')
    directory = config.getoption('xgrad_snapshot_dir')
    if directory is None:
        directory = os.path.join(str(config.rootpath), config.getini('xgrad_snapshot_dir')
                                 or os.path.join('tests', 'grad_snapshots'))
    config.stash[_STATE] = _State(
        devices=_parse_devices(config.getoption('xgrad_device') or ['native:0']),
        store=GradSnapshot(directory),
        update=config.getoption('xgrad_snapshot_update'),
        strict=config.getoption('xgrad_snapshot_strict'))


def _parse_devices(values):
    """Canonical device names from the --xgrad-device values; UsageError for
    names that are not ``native:N`` / ``cuda:N`` or name a native device
    that does not exist. CUDA devices are checked when a test uses them."""
    names = []
    for value in values:
        for name in value.split(','):
            name = name.strip()
            match = re.fullmatch(r'([a-z]+):(\d+)', name)
            if match is None or match.group(1) not in _BACKENDS:
                raise pytest.UsageError(
                    '--xgrad-device: {!r} is not a device name; expected native:N or '
                    'cuda:N, comma-separated'.format(name))
            name = '{}:{}'.format(match.group(1), int(match.group(2)))
            if match.group(1) == 'native':
                try:
                    xgrad.get_device(name)
                except xgrad.DeviceError as e:
                    raise pytest.UsageError('--xgrad-device: {}'.format(e)) from None
            if name not in names:
                names.append(name)
    return names


def pytest_generate_tests(metafunc):
    """Run tests that use the ``device`` fixture once per chosen device
    (unless the test parametrizes ``device`` itself or a conftest overrides
    the fixture)."""
    if 'device' not in metafunc.fixturenames or _parametrizes(metafunc, 'device'):
        return
    # The winning definition of the fixture (pytest has no public accessor).
    definitions = getattr(metafunc, '_arg2fixturedefs', {}).get('device')
    if definitions and getattr(definitions[-1].func, '__module__', __name__) != __name__:
        return
    devices = metafunc.config.stash[_STATE].devices
    metafunc.parametrize('device', devices, indirect=True, ids=devices)


def _parametrizes(metafunc, name):
    for marker in metafunc.definition.iter_markers('parametrize'):
        names = marker.args[0] if marker.args else marker.kwargs.get('argnames', ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(',')]
        if name in names:
            return True
    return False


def pytest_collection_modifyitems(items):
    """Skip, at the test's own location, tests marked ``cuda(num)`` and tests
    parametrized with a device that this machine lacks."""
    for item in items:
        reason = None
        marker = item.get_closest_marker('cuda')
        if marker is not None:
            num = marker.args[0] if marker.args else marker.kwargs.get('num', 1)
            missing = _unavailable('cuda:{}'.format(num - 1))
            if missing:
                reason = 'needs {} CUDA device{}; {}'.format(num, 's' * (num > 1), missing)
        name = getattr(item, 'callspec', None) and item.callspec.params.get('device')
        if reason is None and isinstance(name, str) and _unavailable(name):
            reason = 'needs {}; {}'.format(name, _unavailable(name))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@functools.lru_cache(maxsize=None)
def _unavailable(name):
    """Why device ``name`` cannot be used here ('' if it can)."""
    try:
        xgrad.get_device(name)
    except xgrad.XgradError as e:
        # The error's own prefix ("Device cuda:0 is not available: cuda
        # devices need ...") would repeat what the skip reason says.
        return re.sub(r'^Device \S+ is not available: ', '', str(e))
    return ''


@pytest.fixture
def device(request):
    """The device the test runs on, also made the default device."""
    dev = xgrad.get_device(getattr(request, 'param', 'native:0'))
    with xgrad.using_device(dev):
        yield dev


@pytest.fixture(params=FLOAT_DTYPES, ids=[d.name for d in FLOAT_DTYPES])
def float_dtype(request):
    """Each float dtype in turn."""
    return request.param


@pytest.fixture
def grad_snapshot(request):
    """Golden gradients for the test's own functions (see SnapshotFixture)."""
    return SnapshotFixture(request.config.stash[_STATE], request.node.nodeid)


class SnapshotFixture:
    """The ``grad_snapshot`` fixture of one test.

    ``check(func, inputs, grad_outputs=None, *, key=None, order=1,
    grad_grad_inputs=None, atol=None, rtol=None)``: ``func`` maps a list of
    xgrad arrays to an array or a tuple of arrays; every float input is
    differentiated; ``grad_outputs`` / ``grad_grad_inputs`` (order 2) default
    to fixed pseudo-random values drawn from the key. The golden gradients
    are stored under the test's node id (plus
    ``'::' + key`` when given, to tell several checks of one test apart).

    Recording (no golden yet, or ``--xgrad-snapshot-update``): the float64
    version of the problem must pass ``check_backward`` (order 1) or
    ``check_double_backward`` (order 2), then its float64 gradients are
    stored. Comparing (otherwise): the gradients in the inputs' dtype must
    match the golden ones within that dtype's default tolerance (or
    atol/rtol); the failure names the key, the input, the worst element and
    the errors. Golden gradients taken at other inputs fail the test too
    (re-record after changing a test's inputs)."""

    def __init__(self, state, nodeid):
        self._state = state
        self._nodeid = nodeid
        self._keys = set()

    @property
    def directory(self):
        return self._state.store.directory

    def check(self, func, inputs, grad_outputs=None, *, key=None, order=1,
              grad_grad_inputs=None, atol=None, rtol=None):
        """Record or compare; returns the SnapshotComparison."""
        __tracebackhide__ = True
        full_key = self._nodeid if key is None else '{}::{}'.format(self._nodeid, key)
        if (full_key, order) in self._keys:
            raise ValueError('grad_snapshot.check ran twice with key {!r} (order {}) in '
                             'one test; pass key=... to tell the checks apart'.format(
                                 full_key, order))
        self._keys.add((full_key, order))
        state = self._state
        recording = state.update or (not state.strict and
                                     not state.store.has(full_key, order))
        try:
            comparison = state.store.check(
                full_key, func, inputs, grad_outputs, order=order,
                grad_grad_inputs=grad_grad_inputs, update=state.update,
                record_missing=not state.strict, atol=atol, rtol=rtol,
                meta={'test': self._nodeid})
        except (xgrad.GradientCheckError, SnapshotError) as e:
            raise e.with_traceback(None)  # the test's line, not the store's internals
        if recording:
            state.recorded += 1
        else:
            state.compared += 1
        return comparison


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(_STATE, None)
    if state is not None and (state.recorded or state.compared):
        terminalreporter.write_line('xgrad grad_snapshot: {} recorded, {} compared in {}'
                                    .format(state.recorded, state.compared,
                                            state.store.directory))
