"""A CPU stand-in for ``cupy.RawModule``, for testing xgrad's CUDA kernels.

``RawModule(code=..., options=..., name_expressions=[...])`` compiles the CUDA
source as host C++ with g++ (``-include emulate.h``, which defines the CUDA
built-ins and a block scheduler running a block's threads as coroutines that
switch at ``__syncthreads()``), plus a trampoline table generated from the
name expressions: one entry per kernel, unpacking ``void** args`` into the
kernel's parameters like cuLaunchKernel's kernelParams. The shared library is
cached by the sha256 of everything that goes into it, in
``$XGRAD_EMULATOR_CACHE`` or ``~/.cache/xgrad-emulator`` (the compiler is
``$XGRAD_EMULATOR_CXX`` or g++).

``module.get_function(expr)`` returns a callable ``f(grid, block, args)`` like
``cupy.RawKernel``: NumPy arrays are passed as data pointers (C-contiguous,
with the dtype the kernel's parameter has), NumPy scalars by value (their own
dtype must match the parameter), None as a null pointer; anything else, Python
ints and floats included, is a TypeError. ``launches`` lists the name
expressions launched, in order.

``numpy_cupy`` is the array module the tests pass as ``cp``: NumPy's functions
plus ``RawModule`` and ``cuda.Device().id == 0``; its ``empty`` fills new
arrays with NaN so that elements a kernel fails to write show up.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import types

import numpy

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'emulate.h')
CXX = os.environ.get('XGRAD_EMULATOR_CXX', 'g++')
FLAGS = ('-O1', '-std=c++17', '-shared', '-fPIC')

launches = []          # name expressions launched, in order (tests clear it)

_STATUS = {1: 'unknown kernel', 2: 'threads of one block wait at different __syncthreads()',
           3: 'bad launch configuration (or a launch from inside a kernel)',
           4: 'misaligned address (a vector access not aligned to its size)'}
_launch_lock = threading.Lock()
_libraries = {}


class CompileError(RuntimeError):
    """g++ rejected a kernel source."""


class LaunchError(RuntimeError):
    """A launch the device would not run correctly."""


def available():
    """Whether the C++ compiler is on PATH."""
    return shutil.which(CXX) is not None


def cache_dir():
    path = os.environ.get('XGRAD_EMULATOR_CACHE') or os.path.join(
        os.path.expanduser('~'), '.cache', 'xgrad-emulator')
    os.makedirs(path, exist_ok=True)
    return path


_compiler_id = None


def _compiler():
    global _compiler_id
    if _compiler_id is None:
        path = shutil.which(CXX)
        if path is None:
            raise CompileError('{} is not on PATH'.format(CXX))
        version = subprocess.run([path, '--version'], capture_output=True, text=True).stdout
        _compiler_id = (path, version)
    return _compiler_id


def trampoline(name_expressions):
    """C++ for the launch table of ``name_expressions`` and its C entry points."""
    lines = ['', '// ---- emulator trampolines, generated from the name expressions',
             'static const xg_emu::Entry xg_emu_entries[] = {']
    for e in name_expressions:
        lines.append('    {{"{0}", &xg_emu::launch<&{0}>, &xg_emu::signature<&{0}>}},'.format(e))
    lines += [
        '};',
        'static const xg_emu::Entry* xg_emu_find(const char* name) {',
        '    for (const xg_emu::Entry& e : xg_emu_entries)',
        '        if (std::strcmp(e.name, name) == 0) return &e;',
        '    return nullptr;',
        '}',
        'extern "C" int xg_launch(const char* name, unsigned grid, unsigned block, void** args) {',
        '    const xg_emu::Entry* e = xg_emu_find(name);',
        '    return e ? e->launch(grid, block, args) : xg_emu::UNKNOWN_KERNEL;',
        '}',
        '// float32 kernels under NVRTC -ftz=true: denormal inputs read as zero and',
        '// denormal results are flushed (the SSE control bits FTZ and DAZ)',
        'extern "C" int xg_launch_ftz(const char* name, unsigned grid, unsigned block,',
        '                             void** args) {',
        '#if defined(__SSE__)',
        '    const unsigned saved = __builtin_ia32_stmxcsr();',
        '    __builtin_ia32_ldmxcsr(saved | 0x8040u);',
        '    const int status = xg_launch(name, grid, block, args);',
        '    __builtin_ia32_ldmxcsr(saved);',
        '    return status;',
        '#else',
        '    return xg_launch(name, grid, block, args);',
        '#endif',
        '}',
        'extern "C" const char* xg_signature(const char* name) {',
        '    const xg_emu::Entry* e = xg_emu_find(name);',
        '    return e ? e->signature() : nullptr;',
        '}', '']
    return '\n'.join(lines)


def _flags(options):
    """g++ flags for cupy-style options: -D/-U/-I pass, -std is honoured,
    NVRTC-only options are dropped."""
    flags = list(FLAGS)
    for opt in options:
        if opt.startswith(('-D', '-U', '-I')):
            flags.append(opt)
        elif opt.startswith(('-std=', '--std=')):
            flags = [f for f in flags if not f.startswith('-std=')]
            flags.append('-std=' + opt.split('=', 1)[1])
    return flags


class _Build:
    """One shared library: its source text, flags and cached path."""

    def __init__(self, code, options, name_expressions):
        with open(HEADER, encoding='utf-8') as f:
            header = f.read()
        self.text = code + '\n' + trampoline(name_expressions)
        self.flags = _flags(options)
        h = hashlib.sha256()
        for part in (header, self.text, repr(self.flags), repr(_compiler())):
            h.update(part.encode())
            h.update(b'\0')
        self.key = h.hexdigest()[:32]
        self.path = os.path.join(cache_dir(), self.key + '.so')

    def start(self):
        """Starts g++ (None when the library is cached already)."""
        if os.path.exists(self.path):
            return None
        # per-process names: concurrent sessions may build the same key
        self.src = os.path.join(cache_dir(), '{}.{}.cpp'.format(self.key, os.getpid()))
        with open(self.src, 'w', encoding='utf-8') as f:
            f.write(self.text)
        self.tmp = '{}.{}.tmp'.format(self.path, os.getpid())
        cmd = [_compiler()[0]] + self.flags + ['-include', HEADER, '-x', 'c++', self.src,
                                               '-o', self.tmp]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def finish(self, proc):
        if proc is None:
            return
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise CompileError('g++ failed on the kernel source ({}):\n{}'.format(
                self.src, out[-6000:]))
        os.replace(self.tmp, self.path)
        os.remove(self.src)

    def load(self):
        lib = _libraries.get(self.path)
        if lib is None:
            self.finish(self.start())
            lib = ctypes.CDLL(self.path)
            lib.xg_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint,
                                      ctypes.POINTER(ctypes.c_void_p)]
            lib.xg_launch.restype = ctypes.c_int
            lib.xg_launch_ftz.argtypes = lib.xg_launch.argtypes
            lib.xg_launch_ftz.restype = ctypes.c_int
            lib.xg_signature.argtypes = [ctypes.c_char_p]
            lib.xg_signature.restype = ctypes.c_char_p
            _libraries[self.path] = lib
        return lib


def prebuild(modules):
    """Compiles (code, options, name_expressions) triples that are not cached
    yet, in parallel (one g++ per CPU)."""
    builds = [_Build(*m) for m in modules]
    # The CPUs this process may run on (taskset, cgroups), not the machine's:
    # os.cpu_count() would start 64 compilers at once under `taskset -c 0` on
    # a 64-core machine. Only the build's speed depends on it, never a result.
    try:
        width = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        width = max(1, os.cpu_count() or 1)
    for i in range(0, len(builds), width):
        batch = builds[i:i + width]
        procs = [b.start() for b in batch]
        for b, p in zip(batch, procs):
            b.finish(p)


class RawModule:
    """``cupy.RawModule``'s constructor and ``get_function``, on the CPU."""

    def __init__(self, code=None, *, path=None, options=(), backend='nvrtc',
                 translate_cucomplex=False, enable_cooperative_groups=False,
                 name_expressions=None, jitify=False):
        if code is None or path is not None:
            raise NotImplementedError('the emulator compiles source code only')
        self.code = code
        self.options = tuple(options)
        self.name_expressions = tuple(name_expressions or ())
        self._lib = None
        self._functions = {}

    def _library(self):
        if self._lib is None:      # compiled on first use, like CuPy
            self._lib = _Build(self.code, self.options, self.name_expressions).load()
        return self._lib

    def get_function(self, name):
        f = self._functions.get(name)
        if f is None:
            if name not in self.name_expressions:
                raise KeyError('{} is not one of the module\'s name expressions'.format(name))
            lib = self._library()
            signature = lib.xg_signature(name.encode()).decode()
            f = self._functions[name] = Function(lib, name, signature)
        return f


def _dims(value, what):
    dims = (value,) if isinstance(value, (int, numpy.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims) or \
            any(int(d) != 1 for d in dims[1:]):
        raise LaunchError('{} must be 1-D and positive here, not {!r}'.format(what, value))
    return int(dims[0])


def _kind(dtype):
    return dtype.kind + str(dtype.itemsize)


class Function:
    """One kernel: ``f(grid, block, args)`` runs it on the CPU."""

    def __init__(self, lib, name, signature):
        self.lib = lib
        self.name = name
        self.signature = tuple(signature.split(',')) if signature else ()

    def _pack(self, args):
        if len(args) != len(self.signature):
            raise TypeError('{} takes {} arguments, got {}'.format(
                self.name, len(self.signature), len(args)))
        keep, pointers = [], []
        for i, (value, kind) in enumerate(zip(args, self.signature)):
            where = '{} argument {}'.format(self.name, i)
            if value is None:
                if not kind.startswith('*'):
                    raise TypeError('{}: None for a {} parameter'.format(where, kind))
                holder = ctypes.c_void_p(None)
                pointers.append(ctypes.addressof(holder))
            elif isinstance(value, numpy.generic):
                if kind != _kind(value.dtype):
                    raise TypeError('{}: a {} scalar for a {} parameter'.format(
                        where, value.dtype, kind))
                holder = numpy.array(value)
                pointers.append(holder.ctypes.data)
            elif isinstance(value, numpy.ndarray) or hasattr(value, '__array_interface__'):
                arr = numpy.asarray(value)
                if kind != '*' + _kind(arr.dtype):
                    raise TypeError('{}: a {} array for a {} parameter'.format(
                        where, arr.dtype, kind))
                if not arr.flags.c_contiguous:
                    raise ValueError('{}: the array is not C-contiguous'.format(where))
                holder = ctypes.c_void_p(arr.ctypes.data)
                keep.append(arr)
                pointers.append(ctypes.addressof(holder))
            else:
                raise TypeError('{}: pass NumPy scalars, not {}'.format(
                    where, type(value).__name__))
            keep.append(holder)
        return keep, (ctypes.c_void_p * max(1, len(pointers)))(*pointers)

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None,
                 enable_cooperative_groups=False, ftz=False):
        """Runs the kernel; ``ftz``: with denormals flushed to zero (as
        NVRTC's -ftz=true, which CuPy passes, does for float32)."""
        if shared_mem:
            raise LaunchError('the kernels use no dynamic shared memory')
        gx, bx = _dims(grid, 'grid'), _dims(block, 'block')
        keep, argv = self._pack(tuple(args))
        with _launch_lock:
            launches.append(self.name)
            launch = self.lib.xg_launch_ftz if ftz else self.lib.xg_launch
            status = launch(self.name.encode(), gx, bx, argv)
        del keep
        if status:
            raise LaunchError('{}: {}'.format(self.name, _STATUS.get(status, status)))


class _Device:
    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _poisoned_empty(shape, dtype=float, order='C'):
    a = numpy.empty(shape, dtype, order)
    a.fill(numpy.nan if a.dtype.kind in 'fc' else 0x5A)
    return a


def _poisoned_empty_like(a, dtype=None, order='K', shape=None):
    out = numpy.empty_like(a, dtype, order, shape=shape)
    out.fill(numpy.nan if out.dtype.kind in 'fc' else 0x5A)
    return out


class _NumpyCupy(types.ModuleType):
    """NumPy, plus what the kernel wrappers need from CuPy."""

    def __getattr__(self, name):
        return getattr(numpy, name)


numpy_cupy = _NumpyCupy('numpy_cupy', __doc__)
numpy_cupy.RawModule = RawModule
numpy_cupy.cuda = types.SimpleNamespace(Device=_Device)
numpy_cupy.empty = _poisoned_empty
numpy_cupy.empty_like = _poisoned_empty_like
