"""``import xgrad`` changes nothing process-wide: NumPy's error and print
state, signal handlers and mask, environment variables (Python's and the C
library's), the BLAS's thread count, interpreter settings, warning filters.
Each is read in a fresh process before and after the import. (glibc's heap
settings: tests/backend/cpu/test_heap.py, which counts the page faults they cause;
NumPy's data allocator in the importing thread, which xgrad does set:
tests/backend/cpu/test_host_cache.py.)"""

import json
import os
import subprocess
import sys

import pytest

import xgrad

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'),
                                reason='reads /proc/self and the C library')

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(xgrad.__file__)))

THREAD_VARIABLES = ['OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS',
                    'VECLIB_MAXIMUM_THREADS', 'NUMEXPR_NUM_THREADS', 'BLIS_NUM_THREADS',
                    'OMP_PROC_BIND', 'OMP_WAIT_POLICY', 'KMP_BLOCKTIME', 'KMP_AFFINITY',
                    'GOTO_NUM_THREADS', 'MALLOC_ARENA_MAX', 'MALLOC_TOP_PAD_',
                    'MALLOC_MMAP_THRESHOLD_', 'MALLOC_TRIM_THRESHOLD_', 'GLIBC_TUNABLES',
                    'XGRAD_NUM_THREADS', 'CUDA_VISIBLE_DEVICES', 'PYTHONHASHSEED']

SNAPSHOT = r'''
import ctypes, ctypes.util, decimal, faulthandler, gc, json, locale, os, signal, sys
import threading, warnings
import numpy

NAMES = json.loads(sys.argv[1])
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
libc.getenv.argtypes = (ctypes.c_char_p,)


def blas_threads():
    """The thread counts of the OpenBLAS libraries mapped into the process."""
    out = {}
    with open('/proc/self/maps') as maps:
        paths = sorted({line.split()[-1] for line in maps if line.rstrip().endswith(
            tuple('.so.' + str(i) for i in range(10)) + ('.so',))
            and 'openblas' in os.path.basename(line.split()[-1]).lower()})
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ('openblas_get_num_threads', 'openblas_get_num_threads64_',
                     'scipy_openblas_get_num_threads', 'scipy_openblas_get_num_threads64_'):
            fn = getattr(lib, name, None)
            if fn is not None:
                out[path + ':' + name] = fn()
    return out


def snapshot():
    signals = {}
    for sg in signal.valid_signals():
        try:
            handler = signal.getsignal(sg)
        except (OSError, ValueError):
            continue
        signals[str(int(sg))] = repr(handler)
    state = numpy.random.get_state()
    return {
        'numpy.geterr': numpy.geterr(),
        'numpy.geterrcall': repr(numpy.geterrcall()),
        'numpy.get_printoptions': {k: repr(v) for k, v in numpy.get_printoptions().items()},
        'numpy.random state': [int(state[2]), state[1][:8].tolist()],
        'signal.getsignal': signals,
        'signal mask': sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        'os.environ': dict(os.environ),
        'getenv': {n: (lambda v: None if v is None else v.decode())(libc.getenv(n.encode()))
                   for n in NAMES},
        'blas threads': blas_threads(),
        'recursion limit': sys.getrecursionlimit(),
        'switch interval': sys.getswitchinterval(),
        'float repr': repr(0.1 + 0.2),
        'hooks': [repr(h) for h in (sys.excepthook, sys.displayhook, sys.unraisablehook,
                                    sys.breakpointhook, threading.excepthook)],
        'faulthandler': faulthandler.is_enabled(),
        'gc': [gc.isenabled(), list(gc.get_threshold())],
        'warnings.filters': [repr(f) for f in warnings.filters],
        'locale': locale.setlocale(locale.LC_ALL),
        'decimal': str(decimal.getcontext()),
        'cwd': os.getcwd(),
        'umask': (lambda m: (os.umask(m), m)[1])(os.umask(0o22)),
        'threads': threading.active_count(),
        'os threads': len(os.listdir('/proc/self/task')),
        'denormals': float(numpy.float32(1e-38) * numpy.float32(1e-3)) > 0,
    }


before = snapshot()
import xgrad
after = snapshot()
print(json.dumps({k: [before[k], after[k]] for k in before if before[k] != after[k]}))
'''


def _changes(env):
    env = dict(env, PYTHONPATH=os.pathsep.join(
        [PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    env.pop('XGRAD_HEAP_TOP_PAD', None)
    proc = subprocess.run([sys.executable, '-c', SNAPSHOT, json.dumps(THREAD_VARIABLES)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize('thread_variables', ['as they are', 'unset', 'set'])
def test_import_changes_no_process_state(thread_variables):
    """Unset, the thread variables stay unset (in the C library's
    environment too, which os.environ does not see); set, they keep their
    values."""
    env = dict(os.environ)
    if thread_variables != 'as they are':
        env = {k: v for k, v in env.items() if k not in THREAD_VARIABLES}
    if thread_variables == 'set':
        env.update({k: '1' for k in THREAD_VARIABLES if k.endswith('_THREADS')})
    changed = _changes(env)
    assert changed == {}, 'import xgrad changed: {}'.format(changed)
