"""What machine a benchmark ran on, and how many threads NumPy's BLAS uses.

The thread count matters because run.py gives torch the same number of
intra-op threads as NumPy has, so that neither side wins by using more cores.
"""

import ctypes
import os
import platform
import sys

# The variables that set NumPy's BLAS and xgrad's pool (and torch's OpenMP)
# threads: a benchmark's child process runs "one thread" with all three at 1.
THREAD_VARS = ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')


def thread_environment(threads, environ=os.environ):
    """A copy of ``environ`` for a child running with ``threads`` threads: 1
    sets THREAD_VARS to 1; anything else (0: default) unsets them."""
    env = dict(environ)
    for name in THREAD_VARS:
        env.pop(name, None)
        if threads == 1:
            env[name] = '1'
    return env


_BLAS_THREAD_GETTERS = (
    'scipy_openblas_get_num_threads64_',  # numpy>=2 wheels (scipy-openblas, ILP64)
    'scipy_openblas_get_num_threads',
    'openblas_get_num_threads64_',
    'openblas_get_num_threads',
    'MKL_Get_Max_Threads',
    'mkl_get_max_threads',
)


def _loaded_libraries():
    """Paths of the shared libraries mapped into this process (Linux only)."""
    try:
        with open('/proc/self/maps') as maps:
            paths = {line.split()[-1] for line in maps if '.so' in line}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith('/'))


def _threadpoolctl_blas_threads():
    try:
        import threadpoolctl
    except ImportError:
        return None
    counts = [info['num_threads'] for info in threadpoolctl.threadpool_info()
              if info.get('user_api') == 'blas']
    return max(counts) if counts else None


def _ctypes_blas_threads():
    for path in _loaded_libraries():
        name = os.path.basename(path).lower()
        if 'blas' not in name and 'mkl' not in name:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _BLAS_THREAD_GETTERS:
            getter = getattr(lib, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_int
                return int(getter())
    return None


def numpy_blas_threads():
    """Threads NumPy's BLAS uses by default; NumPy must already be imported.

    Asks threadpoolctl when it is installed, else the BLAS library itself via
    ctypes, else the usual environment variables, else the usable CPU count.
    """
    import numpy  # noqa: F401  (loads the BLAS library we are about to ask)

    for probe in (_threadpoolctl_blas_threads, _ctypes_blas_threads):
        n = probe()
        if n:
            return n
    for var in ('OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS'):
        value = os.environ.get(var, '').split(',')[0]
        if value.isdigit() and int(value) > 0:
            return int(value)
    return usable_cpus()


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _cpu_model():
    try:
        with open('/proc/cpuinfo') as cpuinfo:
            for line in cpuinfo:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _vector_extensions():
    """The x86 vector extensions the CPU reports that xgrad's kernels use
    (results differ by them: xgrad's GEMM has an AVX-512 and an AVX2
    micro-kernel, and torch's oneDNN likewise)."""
    try:
        with open('/proc/cpuinfo') as cpuinfo:
            for line in cpuinfo:
                if line.startswith('flags'):
                    flags = set(line.split(':', 1)[1].split())
                    return [f for f in ('avx2', 'fma', 'avx512f') if f in flags]
    except OSError:
        pass
    return None


def _xgrad_cpu_path():
    """The dispatch path xgrad's vector kernels run here (None without xgrad):
    the installed xgrad's, else the one of this checkout (bench/'s parent,
    where the benchmarks' children import it from)."""
    try:
        from xgrad._backend import native_kernels
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.append(root)
        try:
            from xgrad._backend import native_kernels
        except ImportError:
            return None
        finally:
            sys.path.remove(root)
    return native_kernels.cpu_path()


def _memory_gib():
    try:
        with open('/proc/meminfo') as meminfo:
            for line in meminfo:
                if line.startswith('MemTotal:'):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def load_average():
    """1-minute load average, or None where the OS does not report one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def machine_info():
    """A JSON-ready description of this machine."""
    return {
        'platform': platform.platform(),
        'machine': platform.machine(),
        'cpu_model': _cpu_model(),
        'vector_extensions': _vector_extensions(),
        'xgrad_cpu_path': _xgrad_cpu_path(),
        'cpu_count': os.cpu_count(),
        'usable_cpus': usable_cpus(),
        'memory_gib': _memory_gib(),
        'load_average_1min': load_average(),
        'python': platform.python_version(),
        'python_implementation': platform.python_implementation(),
    }
