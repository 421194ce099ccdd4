"""Build the Cython extensions (the engine in xgrad/_core.pyx and the ops)."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

MODULES = [
    'xgrad._backend.native_kernels',
    'xgrad._backend.norm_kernels',
    'xgrad._dtypes',
    'xgrad._core',
    'xgrad._ops._xp',
    'xgrad._ops._op',
    'xgrad._ops.elementwise',
    'xgrad._ops.reduction',
    'xgrad._ops.linalg',
    'xgrad._ops.manipulation',
]

# The engine uses C++ containers (a heap of ops) from Cython.
CPP_MODULES = {'xgrad._core'}
# Kernels whose long sums may be reordered (vectorized); NaN and inf still
# propagate.
REASSOCIATING_MODULES = {'xgrad._backend.norm_kernels'}
REASSOCIATE_FLAGS = ['-fassociative-math', '-fno-signed-zeros', '-fno-trapping-math']

extensions = [
    Extension(name, [name.replace('.', '/') + '.pyx'],
              language='c++' if name in CPP_MODULES else 'c',
              include_dirs=[numpy.get_include(), 'xgrad/_backend'],
              define_macros=[('NPY_NO_DEPRECATED_API', 'NPY_1_7_API_VERSION')],
              extra_compile_args=['-O3'] + (
                  REASSOCIATE_FLAGS if name in REASSOCIATING_MODULES else []))
    for name in MODULES
]

setup(ext_modules=cythonize(
    extensions,
    compiler_directives={'language_level': 3, 'embedsignature': True},
    nthreads=2,
))
