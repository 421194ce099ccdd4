"""``python -m xgrad info``: what this install of xgrad can use, to check a
GPU setup in one command: the versions of xgrad, Python, NumPy, CuPy and
CUDA (runtime, driver, NVRTC), the CPU threads and the dispatch path of the
vector kernels (sse2, avx2 or avx512: ``XGRAD_CPU_PATH``), whether glibc's
heap was tuned through xgrad (only on request: ``xgrad.keep_heap_top``), the GPUs, and
whether xgrad's kernels compile with NVRTC (no GPU needed: they are
compiled for a virtual architecture, ``compute_90`` unless a GPU says
otherwise), and which path runs convolution, pooling and batch norm on cuda
devices: cuDNN (its version and library) or the fallback and why.

Exit status 0 when every part that is present works (no CuPy at all is
fine: xgrad then runs on the CPU), 1 when CuPy is installed but broken or a
kernel fails to compile."""

import argparse
import os
import platform
import sys


def _cupy():
    """(module, None) or (None, why): the CuPy xgrad's cuda devices use (a
    stand-in where tests or the dry run of bench/gpu_check.sh set one)."""
    from xgrad._backend import cuda
    from xgrad._errors import DeviceError
    try:
        return cuda.cupy(), None
    except DeviceError as e:
        text = str(e)
        return None, ('not installed (pip install "xgrad[cuda]")' if 'not installed' in text
                      else text)


def _version(number):
    """CUDA's 12090 -> '12.9'."""
    return '{}.{}'.format(number // 1000, number % 1000 // 10)


def _try(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:
        return None, '{}: {}'.format(type(e).__name__, e)


def devices(cp):
    """[(index, name, memory GiB, compute capability)] of the GPUs CuPy sees;
    raises when CUDA reports none."""
    out = []
    for i in range(cp.cuda.runtime.getDeviceCount()):
        p = cp.cuda.runtime.getDeviceProperties(i)
        name = p['name'].decode() if isinstance(p['name'], bytes) else p['name']
        out.append((i, name, p['totalGlobalMem'] / 2 ** 30,
                    '{}.{}'.format(p['major'], p['minor'])))
    return out


def compile_kernels(nvrtc, arch):
    """{source file: None or the NVRTC log of its failure}: every kernel
    source of xgrad/_kernels with all its name expressions, as CuPy's
    RawModule compiles it (with CuPy's -ftz=true)."""
    from xgrad._kernels import loader
    results = {}
    for name in loader.SOURCES:
        prog = nvrtc.createProgram(loader.source(name), name, [], [])
        try:
            for expr in loader.name_expressions(name):
                nvrtc.addNameExpression(prog, expr)
            try:
                nvrtc.compileProgram(prog, list(loader.OPTIONS) + ['-ftz=true', '-arch=' + arch])
                results[name] = None
            except Exception as e:
                log = _try(nvrtc.getProgramLog, prog)[0] or ''
                results[name] = '{}: {}\n{}'.format(type(e).__name__, e, log[-2000:])
        finally:
            nvrtc.destroyProgram(prog)
    return results


def cpu_path_text(native_kernels):
    """'avx2 (auto: the widest of sse2, avx2)' or 'sse2 (XGRAD_CPU_PATH=sse2;
    this CPU has sse2, avx2)': the vector kernels' dispatch path in use."""
    forced = os.environ.get(native_kernels.CPU_PATH_VARIABLE, '').strip()
    paths = ', '.join(native_kernels.cpu_paths())
    if forced and forced.lower() != 'auto':
        return '{} ({}={}; this CPU has {})'.format(
            native_kernels.cpu_path(), native_kernels.CPU_PATH_VARIABLE, forced, paths)
    return '{} (auto: the widest of {})'.format(native_kernels.cpu_path(), paths)


def heap_text():
    """What xgrad did to the C heap: nothing unless asked
    (``xgrad.keep_heap_top``, ``XGRAD_HEAP_TOP_PAD``)."""
    from xgrad import _heap
    if not _heap.top_pad:
        return 'as the C library sets it (xgrad sets nothing; xgrad.keep_heap_top opts in)'
    return ('M_TOP_PAD {} bytes, set through xgrad (XGRAD_HEAP_TOP_PAD or '
            "xgrad.keep_heap_top): glibc's dynamic mmap threshold is off".format(_heap.top_pad))


def host_memory_text():
    """Whether NumPy allocates through xgrad's host cache here, and its limit."""
    from xgrad._backend import host_cache
    stats = host_cache.stats()
    where = ("NumPy's allocator in this thread" if host_cache.installed() else
             "the kernels' workspace only (XGRAD_CACHE_NUMPY=0 or xgrad.cache_numpy_memory(False))")
    return 'blocks of {} KiB+ kept up to {} MiB: {}'.format(
        host_cache.MIN_BYTES >> 10, stats['limit'] >> 20, where)


def report(out=sys.stdout):
    """Prints the report; returns the exit status."""
    import numpy
    import xgrad
    status = 0

    def line(key, value):
        print('{:<16}{}'.format(key + ':', value), file=out)

    line('xgrad', '{} ({})'.format(getattr(xgrad, '__version__', '?'), xgrad.__file__))
    line('Python', '{} ({})'.format(platform.python_version(), sys.executable))
    line('NumPy', numpy.__version__)
    from xgrad._backend import native_kernels
    threads = native_kernels.max_threads()
    line('CPU threads', '{} ({})'.format(threads, 'OMP_NUM_THREADS' if 'OMP_NUM_THREADS' in os.environ
                                           else 'the CPUs this process may use'))
    line('CPU path', cpu_path_text(native_kernels))
    from xgrad._backend import host_gemm
    line('host GEMM', host_gemm.choice().reason)
    line('C heap', heap_text())
    line('host memory', host_memory_text())
    cp, why = _cupy()
    if cp is None:
        line('CuPy', why)
        line('devices', 'native only')
        return 0 if why.startswith('not installed') else 1
    line('CuPy', '{} ({})'.format(cp.__version__, cp.__file__))
    runtime, why = _try(cp.cuda.runtime.runtimeGetVersion)
    line('CUDA runtime', _version(runtime) if why is None else why)
    driver, why = _try(cp.cuda.runtime.driverGetVersion)
    line('CUDA driver', _version(driver) if why is None and driver else 'none ({})'.format(
        why or 'no driver'))
    nvrtc, why = _try(_nvrtc_module, cp)
    version, why = (None, why) if nvrtc is None else _try(nvrtc.getVersion)
    line('NVRTC', '{}.{}'.format(*version) if why is None else why)
    gpus, gpu_why = _try(devices, cp)
    if gpus:
        for i, name, memory, cc in gpus:
            line('cuda:{}'.format(i), '{} ({:.0f} GiB, compute capability {})'.format(
                name, memory, cc))
    else:
        line('devices', 'native only: no GPU ({})'.format(gpu_why or 'CUDA reports none'))
    if why is None:
        arch = 'compute_{}'.format(gpus[0][3].replace('.', '')) if gpus else 'compute_90'
        results = compile_kernels(nvrtc, arch)
        for name, failure in results.items():
            line('kernels', '{} compiles for {}'.format(name, arch) if failure is None
                 else '{} FAILS for {}: {}'.format(name, arch, failure))
            status |= failure is not None
    else:
        line('kernels', 'not compiled: NVRTC is missing')
        status = 1
    cudnn_lines(line, cp)
    return int(status)


def cudnn_lines(line, cp):
    """cuDNN: its version and file or why not; per op kind, the path that
    runs on cuda devices."""
    from xgrad._backend import cudnn
    why = cudnn.reason()
    if why is None:
        line('cuDNN', '{} ({})'.format(cudnn.version_string(), cudnn.library_path()))
        device_why = cudnn.device_reason(cp)
        if device_why:
            line('cuDNN device', 'unusable: ' + device_why)
    else:
        line('cuDNN', 'not used: ' + why)
        device_why = None
    for kind, label in (('conv', 'conv path'), ('pool', 'pool path'),
                        ('batch_norm', 'BN path')):
        text = cudnn.path(kind)
        if why is not None:
            text = '{} (cuDNN not used)'.format(cudnn._FALLBACK[kind])
        elif device_why and text.startswith('cudnn'):
            text = '{} (cuDNN unusable on this device)'.format(cudnn._FALLBACK[kind])
        line(label, text)


def _nvrtc_module(cp):
    from cupy_backends.cuda.libs import nvrtc
    return nvrtc


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m xgrad info',
        description='Versions (xgrad, NumPy, CuPy, CUDA), GPUs, and whether '
                    "xgrad's kernels compile with NVRTC.")
    parser.parse_args(argv)
    return report()
