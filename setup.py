"""Build the Cython extensions (the engine, xgrad/_context.pyx ... _backward.pyx,
and the ops)."""

import ctypes
import os
import platform

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
try:
    from setuptools.modified import newer_group
except ImportError:  # setuptools < 69
    from setuptools.dep_util import newer_group

MODULES = [
    'xgrad._backend.native_kernels',
    'xgrad._backend.norm_kernels',
    'xgrad._dtypes',
    'xgrad._backend.window_kernels',
    'xgrad._backend.depthwise_kernels',
    'xgrad._backend.cudnn',
    'xgrad._backend.tap_columns',
    'xgrad._backend.winograd_kernels',
    'xgrad._backend.gemm_kernels',
    'xgrad._backend.operands',
    'xgrad._backend.scatter_kernels',
    'xgrad._backend.scan_kernels',
    'xgrad._backend.host_cache',
    'xgrad._debug',
    'xgrad._device_cache',
    'xgrad._context',
    'xgrad._graph',
    'xgrad._array',
    'xgrad._op_hooks',
    'xgrad._function_node',
    'xgrad._grad_table',
    'xgrad._backward',
    'xgrad._graph_walk',
    'xgrad._ops._xp',
    'xgrad._ops._op',
    'xgrad._ops.elementwise',
    'xgrad._ops.reduction',
    'xgrad._ops.linalg',
    'xgrad._ops.manipulation',
    'xgrad._ops._args',
]

# Every module: -O3, and -ffp-contract=off: no a * b + c fused into one FMA
# (GCC's default where the target has FMA: aarch64, and the AVX-512 path of
# every kernel that cpu_paths.h compiles per path), so that each kernel
# rounds each operation as written, as NumPy's ufuncs do, on every machine
# and path alike (the Winograd transforms' written-out and matrix-driven
# kernels differed in the last bits on AVX-512 only). Explicit FMA
# intrinsics (sgemm.h) still fuse.
COMMON_FLAGS = ['-O3', '-ffp-contract=off']
# x86-64: no MMX registers. GCC 12 moved the SSE2 path's extremum lanes
# through %mm0 without an EMMS after them, which leaves the x87 unit in MMX
# state: x87 code that ran next in the process (OpenBLAS's LAPACK SVD) then
# failed to converge on finite matrices. The kernels use no MMX intrinsics.
if platform.machine().lower() in ('x86_64', 'amd64'):
    COMMON_FLAGS.append('-mno-mmx')

# The backward pass uses C++ containers (a heap of ops) from Cython.
CPP_MODULES = {'xgrad._backward'}
# Kernels whose long sums may be reordered (vectorized); NaN and inf still
# propagate.
REASSOCIATING_MODULES = {'xgrad._backend.norm_kernels'}
REASSOCIATE_FLAGS = ['-fassociative-math', '-fno-signed-zeros', '-fno-trapping-math']



def _has_libmvec():
    """Whether glibc's vector math library (>= 2.35: tanh, log1p, expm1 too) is
    here to link against; without it the vector kernels run scalar."""
    if platform.system() != 'Linux' or platform.machine() != 'x86_64':
        return False
    try:
        return hasattr(ctypes.CDLL('libmvec.so.1'), '_ZGVbN4v_tanhf')
    except OSError:
        return False


# The vector kernels of xgrad/_backend/vector_math.h: `#pragma omp simd` loops
# (-fopenmp-simd: the pragmas only, no OpenMP runtime) calling libmvec's
# vector exp/log/tanh; -fno-math-errno lets those calls vectorise (errno is
# never read), -fno-trapping-math lets both sides of a select be computed
# (FP exception flags are never read; NaN and inf are unchanged). No -march: the header
# compiles each kernel for AVX-512, AVX2 and SSE2 and picks one at import (XGRAD_CPU_PATH).
VECTOR_MODULES = {'xgrad._backend.native_kernels', 'xgrad._backend.norm_kernels'}
VECTOR_FLAGS = ['-fopenmp-simd', '-fno-math-errno', '-fno-trapping-math']
VECTOR_MACROS = [('XGRAD_OPENMP_SIMD', '1')] + ([('XGRAD_LIBMVEC', '1')] if _has_libmvec() else [])
VECTOR_LIBS = ['mvec', 'm'] if _has_libmvec() else ['m']

# The window kernels' dispatcher (_column_range) calls each of the six
# im2col/col2im loops from one place; GCC inlined them all into it, and then
# how it allocated registers in one loop depended on the others: adding a
# loop moved a stride of col2im's inner loop to the stack (1.35x its time)
# and slowed the tabulated 4x4 loops 1.8x. Each loop is compiled as its own
# function instead (one call per chunk of channels).
SEPARATE_LOOP_MODULES = {'xgrad._backend.window_kernels'}
SEPARATE_LOOP_FLAGS = ['-fno-inline-functions-called-once']

extensions = [
    Extension(name, [name.replace('.', '/') + '.pyx'],
              language='c++' if name in CPP_MODULES else 'c',
              include_dirs=[numpy.get_include(), 'xgrad/_backend'],
              define_macros=[('NPY_NO_DEPRECATED_API', 'NPY_1_7_API_VERSION'),
                             # the oldest NumPy xgrad runs on (pyproject.toml): its
                             # API table has PyDataMem_SetHandler (1.22+), which
                             # host_cache needs and NumPy 2.2's default target lacks
                             ('NPY_TARGET_VERSION', 'NPY_1_23_API_VERSION')] + (
                  VECTOR_MACROS if name in VECTOR_MODULES else []),
              libraries=VECTOR_LIBS if name in VECTOR_MODULES else [],
              extra_compile_args=COMMON_FLAGS + (
                  REASSOCIATE_FLAGS if name in REASSOCIATING_MODULES else []) + (
                  VECTOR_FLAGS if name in VECTOR_MODULES else []) + (
                  SEPARATE_LOOP_FLAGS if name in SEPARATE_LOOP_MODULES else []))
    for name in MODULES
]



class ReusingBuildExt(build_ext):
    """Reuse an extension module already built in the source tree when it is
    newer than everything it is built from: its .pyx, xgrad's .pxd and .h
    files, and this file.

    pip builds every install in fresh temporary directories with a freshly
    installed NumPy, whose .pxd files are then newer than our generated C:
    cythonize regenerates it all, and without this a second ``pip install -e
    .`` with unchanged sources compiled everything again (minutes). The
    generated C is not a criterion for the same reason."""

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        built = os.path.join(*ext.name.split('.')[:-1],
                             os.path.basename(self.get_ext_filename(ext.name)))
        if (os.path.abspath(built) != os.path.abspath(target) and os.path.exists(built)
                and not newer_group(_inputs(ext.name), built)):
            self.mkpath(os.path.dirname(target))
            self.copy_file(built, target)
            return
        super().build_extension(ext)


def _inputs(name):
    shared = [os.path.join(d, f) for d, _, files in os.walk('xgrad') for f in files
              if f.endswith(('.pxd', '.pxi', '.h'))]
    return [name.replace('.', '/') + '.pyx', __file__] + shared


setup(cmdclass={'build_ext': ReusingBuildExt}, ext_modules=cythonize(
    extensions,
    # binding=True (Cython 3's default, stated so that it stays): functions
    # are real function objects, so inspect.signature and help() show their
    # parameters. The generated C is the same as with the default.
    compiler_directives={'language_level': 3, 'embedsignature': True, 'binding': True},
    nthreads=os.cpu_count() or 1,
))
