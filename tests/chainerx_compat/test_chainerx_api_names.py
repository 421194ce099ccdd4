"""Every name of ChainerX's Python API exists in xgrad, and the names added
last behave as ChainerX's do.

The names are checked in (tests/chainerx_compat/chainerx_binding_names.json, written by
tools/chainerx_binding_names.py from a Chainer snapshot), so the check always
runs; where a snapshot is at hand ($XGRAD_CHAINER_SOURCE, a source tree or a
bare git repository, else /work/.mirror/chainer+chainer/repo) the list is
re-extracted and must equal the checked-in one.
"""

import builtins
import importlib.util
import json
import os
import pathlib
import pickle
import threading

import numpy
import pytest

import xgrad

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = ROOT / 'tests' / 'chainerx_compat' / 'chainerx_binding_names.json'


def _tool():
    spec = importlib.util.spec_from_file_location(
        'chainerx_binding_names', ROOT / 'tools' / 'chainerx_binding_names.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _names():
    return json.loads(NAMES.read_text())


def _instances(cls_name):
    """Objects of ChainerX class ``cls_name`` in xgrad, whose attributes set
    in ``__init__`` (Device.name, Backend.context) the class alone lacks."""
    device = xgrad.get_device('native:0')
    return {
        'ndarray': [xgrad.ones((2,), xgrad.float32)],
        'Context': [xgrad.get_default_context()],
        'Device': [device],
        'Backend': [device.backend],
        'BackpropId': [xgrad.get_default_context().make_backprop_id('names')],
        'AnyGraph': [xgrad.anygraph],
        'ContextScope': [xgrad.context_scope(xgrad.get_default_context())],
        'DeviceScope': [xgrad.using_device(device)],
        'BackpropScope': [xgrad.backprop_scope('names')],
        'NoBackpropMode': [xgrad.no_backprop_mode()],
        'ForceBackpropMode': [xgrad.force_backprop_mode()],
    }.get(cls_name, [])


def test_every_chainerx_name_exists():
    names = _names()
    missing = ['chainerx.' + n for n in names['module'] if not hasattr(xgrad, n)]
    for cls_name, members in names['classes'].items():
        cls = getattr(xgrad, cls_name, None)
        if cls is None:
            missing.append('chainerx.{} (the class)'.format(cls_name))
            continue
        objects = [cls] + _instances(cls_name)
        missing += ['chainerx.{}.{}'.format(cls_name, m) for m in members
                    if not any(hasattr(o, m) for o in objects)]
    for sub, members in names['submodules'].items():
        module = getattr(xgrad, sub, None)
        missing += ['chainerx.{}.{}'.format(sub, m) for m in members
                    if module is None or not hasattr(module, m)]
    assert not missing, 'missing in xgrad: ' + ', '.join(missing)


def test_checked_in_names_are_current():
    tool = _tool()
    source = tool.default_source()
    if source is None:
        pytest.skip('no Chainer snapshot: set XGRAD_CHAINER_SOURCE to a Chainer source '
                    'tree or bare git repository (default {} is absent)'.format(
                        tool.DEFAULT_SOURCE))
    checked_in, fresh = _names(), tool.extract(source)
    if fresh['commit'] != checked_in['commit']:
        checked_in = dict(checked_in, commit=fresh['commit'])  # names must still agree
    assert fresh == checked_in, ('tests/chainerx_compat/chainerx_binding_names.json is stale: run '
                                 'python tools/chainerx_binding_names.py')


def test_the_extraction_finds_what_chainerx_binds():
    names = _names()
    assert names['commit'] and len(names['commit']) == 40
    # from the bindings: a helper's string arguments, class members, submodules
    for n in ('NoBackpropMode', 'no_backprop_mode', 'get_global_default_context',
              '_is_debug', 'bool', 'float32', 'clip', 'fix'):
        assert n in names['module'], n
    assert names['classes']['Device'] == ['__reduce__', '__repr__', 'backend', 'context',
                                          'index', 'name', 'synchronize']
    assert '__array_priority__' in names['classes']['ndarray']
    assert 'tolist' in names['classes']['ndarray']  # set by _fallback_workarounds
    assert 'inv' in names['submodules']['linalg']
    assert names['submodules']['random'] == ['normal', 'uniform']


# ---------------------------------------------------------------------------
# Default contexts: global and per thread

@pytest.fixture
def fresh_thread():
    """Run a function in a new thread (no default context or device of its
    own) and return what it returned, re-raising what it raised."""
    def run(fn):
        out = {}

        def target():
            try:
                out['value'] = fn()
            except BaseException as e:  # handed to the test's thread
                out['error'] = e
        t = threading.Thread(target=target)
        t.start()
        t.join()
        if 'error' in out:
            raise out['error']
        return out['value']
    return run


@pytest.fixture
def global_context():
    saved = xgrad.get_global_default_context()
    yield saved
    xgrad.set_global_default_context(saved)


def test_global_default_context_is_the_default_of_threads_without_one(
        global_context, fresh_thread):
    assert isinstance(global_context, xgrad.Context)
    other = xgrad.Context()
    xgrad.set_global_default_context(other)
    assert xgrad.get_global_default_context() is other
    assert fresh_thread(xgrad.get_default_context) is other
    assert fresh_thread(lambda: xgrad.zeros((1,)).device.context) is other
    # a thread's own default context wins; None returns to the global one
    mine = xgrad.Context()

    def own():
        xgrad.set_default_context(mine)
        got = xgrad.get_default_context()
        xgrad.set_default_context(None)
        return got, xgrad.get_default_context()
    assert fresh_thread(own) == (mine, other)


def test_unset_global_default_context_raises_context_error(global_context, fresh_thread):
    xgrad.set_global_default_context(None)
    for call in (xgrad.get_global_default_context, xgrad.get_default_context):
        with pytest.raises(xgrad.ContextError, match='Global default context is not set'):
            fresh_thread(call)
    with pytest.raises(TypeError):
        xgrad.set_global_default_context('native')


def test_set_default_context_resets_the_default_device(fresh_thread):
    def run():
        xgrad.set_default_device('native:3')
        context = xgrad.Context()
        xgrad.set_default_context(context)
        device = xgrad.get_default_device()
        return device.name, device.context is context
    assert fresh_thread(run) == ('native:0', True)


# ---------------------------------------------------------------------------
# The with-forms: ContextScope, DeviceScope, BackpropScope, backprop modes

def test_context_scope_enters_to_none_and_restores_context_and_device(fresh_thread):
    def run():
        outer = xgrad.get_default_context()
        xgrad.set_default_device('native:2')
        a, b = xgrad.Context(), xgrad.Context()
        scope = xgrad.context_scope(a)
        assert isinstance(scope, xgrad.ContextScope)
        with scope as entered:
            assert entered is None
            assert xgrad.get_default_context() is a
            assert xgrad.get_default_device().context is a  # the device was reset
            with xgrad.context_scope(b):
                assert xgrad.get_default_context() is b
            assert xgrad.get_default_context() is a
            with pytest.raises(RuntimeError):
                with xgrad.context_scope(b):
                    raise RuntimeError('inside')
            assert xgrad.get_default_context() is a
        assert xgrad.get_default_context() is outer
        return xgrad.get_default_device().name
    assert fresh_thread(run) == 'native:2'


def test_device_scope_enters_to_itself_and_restores_the_device(fresh_thread):
    def run():
        scope = xgrad.using_device('native:1')
        assert isinstance(scope, xgrad.DeviceScope)
        assert scope.device is xgrad.get_device('native:1')
        with scope as entered:
            assert entered is scope
            assert xgrad.get_default_device().name == 'native:1'
            with xgrad.using_device('native', 2) as inner:
                assert inner.device.name == 'native:2'
                assert xgrad.zeros((1,)).device.name == 'native:2'
            assert xgrad.get_default_device().name == 'native:1'
            with pytest.raises(KeyError):
                with xgrad.using_device('native:3'):
                    raise KeyError('inside')
            assert xgrad.get_default_device().name == 'native:1'
        return xgrad.get_default_device().name
    assert fresh_thread(run) == 'native:0'


def test_backprop_scope_gives_an_id_once_and_releases_it():
    scope = xgrad.backprop_scope('scoped')
    assert isinstance(scope, xgrad.BackpropScope)
    with pytest.raises(ValueError):
        with scope as bp:
            assert isinstance(bp, xgrad.BackpropId) and bp.name == 'scoped'
            x = xgrad.ones((2,)).require_grad(bp)
            with xgrad.backprop_scope('inner') as inner:
                assert inner > bp
            raise ValueError('inside')
    assert bp.name == '<expired>'
    with pytest.raises(xgrad.ChainerxError, match='cannot be reused'):
        scope.__enter__()
    again = xgrad.backprop_scope('again')
    with again:
        with pytest.raises(xgrad.ChainerxError, match='cannot be nested'):
            again.__enter__()
    del x


def test_backprop_scope_takes_the_context_when_called():
    context = xgrad.Context()
    with xgrad.context_scope(context):
        scope = xgrad.backprop_scope('later')
    with scope as bp:
        assert bp.context is context


@pytest.mark.parametrize('mode, cls, enabled', [
    (xgrad.no_backprop_mode, 'NoBackpropMode', False),
    (xgrad.force_backprop_mode, 'ForceBackpropMode', True)])
def test_backprop_mode_scopes_enter_to_none_and_restore(mode, cls, enabled):
    with xgrad.backprop_scope('mode') as bp:
        scope = mode(bp)
        assert type(scope) is getattr(xgrad, cls)
        with xgrad.no_backprop_mode() if enabled else xgrad.force_backprop_mode():
            before = xgrad.is_backprop_required(bp)
            with pytest.raises(ZeroDivisionError):
                with scope as entered:
                    assert entered is None
                    assert xgrad.is_backprop_required(bp) is enabled
                    with mode(bp):
                        assert xgrad.is_backprop_required(bp) is enabled
                    1 / 0
            assert xgrad.is_backprop_required(bp) is before is (not enabled)


@pytest.mark.parametrize('name', ['ContextScope', 'DeviceScope', 'BackpropScope',
                                  'NoBackpropMode', 'ForceBackpropMode'])
def test_scope_classes_are_made_by_their_functions_only(name):
    with pytest.raises(TypeError, match='No constructor defined'):
        getattr(xgrad, name)()


# ---------------------------------------------------------------------------
# Backends and devices

def test_get_backend():
    native = xgrad.get_backend('native')
    assert native is xgrad.get_default_context().get_backend('native')
    assert native.name == 'native' and native.context is xgrad.get_default_context()
    assert native.get_device(0) is xgrad.get_device('native:0')
    with pytest.raises(xgrad.BackendError, match="Backend not found: 'nonexistent'"):
        xgrad.get_backend('nonexistent')
    context = xgrad.Context()
    with xgrad.context_scope(context):
        assert xgrad.get_backend('native').context is context


def test_device_synchronize_on_the_native_device():
    device = xgrad.get_device('native:0')
    a = xgrad.arange(6, dtype=xgrad.float32) * 2
    assert device.synchronize() is None
    assert a.device.synchronize() is None
    numpy.testing.assert_array_equal(xgrad.to_numpy(a), numpy.arange(6) * 2)  # exact


def test_device_pickles_as_in_chainerx():
    device = xgrad.get_device('native:1')
    assert pickle.loads(pickle.dumps(device)) is device


# ---------------------------------------------------------------------------
# ndarray

def test_array_priority_is_chainerx_value_and_read_only():
    a = xgrad.ones((3,), xgrad.float32)
    assert a.__array_priority__ == 100.0
    assert a.__array_priority__ > numpy.ones(3).__array_priority__
    with pytest.raises(AttributeError):
        a.__array_priority__ = 1.0


class _PriorityOnly:
    """A NumPy-like operand without ``__array_ufunc__``: NumPy decides by
    ``__array_priority__`` alone whether to defer to its reflected operator."""

    def __init__(self, array):
        self.array = array
        self.__array_priority__ = array.__array_priority__

    def __array__(self, dtype=None, copy=None):
        return numpy.asarray(self.array)

    def __radd__(self, other):
        return ('radd', other)


def test_array_priority_makes_numpy_defer_to_the_reflected_operator():
    a = xgrad.arange(3, dtype=xgrad.float32)
    n = numpy.ones(3, numpy.float32)
    # With xgrad's priority NumPy's operator returns NotImplemented, so
    # Python calls the reflected one, as for ChainerX's arrays ...
    assert numpy.ndarray.__add__(n, _PriorityOnly(a)) is NotImplemented
    result = n + _PriorityOnly(a)
    assert result[0] == 'radd' and result[1] is n
    # ... and numpy_array + xgrad_array is an xgrad array, graph kept.
    a.require_grad()
    y = n + a
    assert isinstance(y, xgrad.ndarray) and y.is_backprop_required()
    numpy.testing.assert_array_equal(xgrad.to_numpy(y), [1, 2, 3])  # exact


def test_remainder_aliases():
    a = xgrad.array([5, 7], xgrad.int32)
    numpy.testing.assert_array_equal(xgrad.to_numpy(a.__remainder__(3)), [2, 1])
    numpy.testing.assert_array_equal(xgrad.to_numpy(a.__rremainder__(9)), [4, 2])
    b = a.copy()
    assert b.__iremainder__(4) is b
    numpy.testing.assert_array_equal(xgrad.to_numpy(b), [1, 3])


# ---------------------------------------------------------------------------
# Top-level names: dtypes, _is_debug, _fromrawpointer

@pytest.mark.parametrize('name', ['bool_', 'int8', 'int16', 'int32', 'int64', 'uint8',
                                  'float16', 'float32', 'float64', 'dtype'])
def test_dtype_names_are_numpys(name):
    assert getattr(xgrad, name) is getattr(numpy, name)


@pytest.mark.parametrize('name', ['bool', 'int', 'float'])
def test_python_type_names_are_builtins(name):
    assert getattr(xgrad, name) is getattr(builtins, name)


def test_dtype_names_make_arrays_of_chainerx_dtypes():
    assert xgrad.all_dtypes == (numpy.bool_, numpy.int8, numpy.int16, numpy.int32,
                                numpy.int64, numpy.uint8, numpy.float16, numpy.float32,
                                numpy.float64)
    for t in xgrad.all_dtypes:
        assert xgrad.zeros((1,), t).dtype == numpy.dtype(t)
    assert xgrad.zeros((1,), xgrad.bool).dtype == numpy.bool_
    assert xgrad.zeros((1,), xgrad.int).dtype == numpy.int64
    assert xgrad.zeros((1,), xgrad.float).dtype == numpy.float64
    assert xgrad.ones((2,), xgrad.float32).dtype == xgrad.float32


def test_is_debug_and_fromrawpointer():
    assert xgrad._is_debug() is False
    assert xgrad._fromrawpointer is xgrad._core._fromrawpointer


def test_tool_reads_a_source_tree(tmp_path):
    """The tool reads a checkout as it reads a bare repository."""
    tool = _tool()
    source = tool.default_source()
    if source is None or not os.path.isdir(os.path.join(source, 'refs')):
        pytest.skip('needs the bare snapshot to lay out a tree from')
    git = tool.Source(source)
    for folder in (tool.BINDINGS, 'chainerx'):
        for name in git.files(folder):
            if name.endswith(('.cc', '.py')):
                path = tmp_path / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(git.read(name))
    tree = tool.extract(str(tmp_path))
    bare = tool.extract(source)
    assert tree['commit'] is None or tree['commit'] == bare['commit']
    assert dict(tree, commit=None) == dict(bare, commit=None)
