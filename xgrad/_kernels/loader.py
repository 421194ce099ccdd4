"""Kernel sources and their compiled modules, cached per device.

Each ``.cu`` file is compiled as one ``RawModule`` with every template
instantiation its wrappers may ask for (its ``name_expressions``), the first
time one of its kernels is asked for on a device. ``common.cuh`` is prepended
to each file's text (the sources have no ``#include``: the same text compiles
under NVRTC, nvcc and, for the tests, g++). CuPy is never imported here; the
caller passes its array module ``cp`` (CuPy, or a stand-in with
``cp.RawModule`` and ``cp.cuda.Device``).
"""

import hashlib
import threading
from importlib import resources

XGRAD_BLOCK = 256          # threads per block; common.cuh's XGRAD_BLOCK
OPTIONS = ('-std=c++17',)
SOURCES = ('elementwise.cu', 'reduce.cu', 'softmax.cu')
COMMON = 'common.cuh'

STORAGE_TYPES = ('xgrad::half', 'float', 'double')
LABEL_TYPES = ('int', 'long long')       # int32 and int64 labels

UNARY = (
    'negative', 'absolute', 'exp', 'log', 'sqrt', 'square', 'tanh', 'sigmoid', 'relu',
    'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'arcsinh',
    'arccosh', 'arctanh', 'expm1', 'log1p', 'log2', 'log10', 'exp2', 'reciprocal',
    'softplus', 'erf')
BINARY = ('add', 'subtract', 'multiply', 'divide', 'maximum', 'minimum')


def functor(name):
    """The C++ functor of an op name: 'log1p' -> 'xgrad::Log1p'."""
    return 'xgrad::' + name.capitalize()


def template(kernel, *args):
    """A name expression: template('unary_forward', 'float', 'xgrad::Tanh')."""
    return 'xgrad::{}<{}>'.format(kernel, ', '.join(args))


def _elementwise():
    for t in STORAGE_TYPES:
        for name in UNARY:
            yield template('unary_forward', t, functor(name))
            yield template('unary_backward', t, functor(name))
        for name in BINARY:
            yield template('binary_forward', t, functor(name))
            yield template('binary_backward', t, functor(name))
        yield template('accumulate', t)
        yield template('add3', t)


def _reduce():
    for t in STORAGE_TYPES:
        for kernel in ('sum_abc_blocks', 'sum_abc_columns', 'sum_abc_split',
                       'sum_abc_columns_split', 'sum_partials'):
            yield template(kernel, t)


def _softmax():
    for t in STORAGE_TYPES:
        for kernel in ('softmax_forward', 'log_softmax_forward',
                       'softmax_backward', 'log_softmax_backward'):
            yield template(kernel, t)
        for label in LABEL_TYPES:
            yield template('softmax_cross_entropy_forward', t, label)
            yield template('softmax_cross_entropy_backward', t, label)


_EXPRESSIONS = {'elementwise.cu': _elementwise, 'reduce.cu': _reduce,
                'softmax.cu': _softmax}
_texts = {}
_digests = {}
_expressions = {}


def _read(name):
    text = _texts.get(name)
    if text is None:
        text = resources.files(__package__).joinpath(name).read_text(encoding='utf-8')
        _texts[name] = text
    return text


def _check_source(name):
    if name not in SOURCES:
        raise ValueError('unknown kernel source {!r}; one of {}'.format(name, SOURCES))


def source(name):
    """common.cuh's text followed by the text of source file ``name``."""
    _check_source(name)
    return '#line 1 "{}"\n{}\n#line 1 "{}"\n{}'.format(
        COMMON, _read(COMMON), name, _read(name))


def name_expressions(name):
    """Every template instantiation of file ``name`` the wrappers may launch."""
    exprs = _expressions.get(name)
    if exprs is None:
        _check_source(name)
        exprs = _expressions[name] = tuple(_EXPRESSIONS[name]())
    return exprs


def instantiation_source(name):
    """The source plus a table taking the address of every name expression.

    Taking a kernel's address instantiates it, so nvcc (which has no
    name_expressions) emits an ``.entry`` for each one.
    """
    lines = [source(name), '', '// every kernel the wrappers may launch',
             'void* xgrad_instantiations[] = {']
    lines += ['    (void*)&{},'.format(e) for e in name_expressions(name)]
    lines += ['};', '']
    return '\n'.join(lines)


def digest(name):
    """sha256 of the code and options that build source ``name``."""
    d = _digests.get(name)
    if d is None:
        h = hashlib.sha256(source(name).encode())
        h.update(repr(OPTIONS).encode())
        d = _digests[name] = h.hexdigest()
    return d


_lock = threading.Lock()
_modules = {}      # (RawModule class, device id, digest) -> module
_functions = {}    # (RawModule class, device id, source, expression) -> kernel


def get_function(cp, source_name, name_expression):
    """The compiled kernel ``name_expression`` of ``source_name`` on the current device.

    The module is built once per (device, code and options) with all of the
    file's name expressions; kernels are cached too. Keys include
    ``cp.RawModule`` so that CuPy and a stand-in never share an entry.
    """
    device = cp.cuda.Device().id
    key = (cp.RawModule, device, source_name, name_expression)
    kernel = _functions.get(key)
    if kernel is not None:
        return kernel
    if name_expression not in name_expressions(source_name):
        raise ValueError('{} is not a kernel of {}'.format(name_expression, source_name))
    with _lock:
        kernel = _functions.get(key)
        if kernel is None:
            mkey = (cp.RawModule, device, digest(source_name))
            module = _modules.get(mkey)
            if module is None:
                module = cp.RawModule(code=source(source_name), options=OPTIONS,
                                      name_expressions=list(name_expressions(source_name)))
                _modules[mkey] = module
            kernel = _functions[key] = module.get_function(name_expression)
    return kernel


def clear_cache():
    """Forget every compiled module (tests; a new stand-in)."""
    with _lock:
        _modules.clear()
        _functions.clear()
