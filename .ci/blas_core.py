"""Print the core type NumPy's OpenBLAS runs (its kernels: OPENBLAS_CORETYPE
forces one); with ``--expect NAME``, exit 1 unless it is NAME (or an alias
OpenBLAS reports for it: Prescott's kernels are reported as Katmai)."""

import argparse
import ctypes
import glob
import os
import sys

import numpy

ALIASES = {'prescott': {'prescott', 'katmai'}}


def openblas():
    """The OpenBLAS library NumPy's wheel bundles (numpy.libs), or None."""
    here = os.path.dirname(numpy.__file__)
    for path in sorted(glob.glob(os.path.join(here, '..', 'numpy.libs', '*openblas*'))
                       + glob.glob(os.path.join(here, '.libs', '*openblas*'))):
        return ctypes.CDLL(path)
    return None


def core_name():
    lib = openblas()
    if lib is None:
        return None
    for symbol in ('scipy_openblas_get_corename64_', 'scipy_openblas_get_corename',
                   'openblas_get_corename64_', 'openblas_get_corename'):
        f = getattr(lib, symbol, None)
        if f is not None:
            f.restype = ctypes.c_char_p
            return f().decode()
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--expect')
    args = parser.parse_args()
    name = core_name()
    print('OpenBLAS core: {} (OPENBLAS_CORETYPE={})'.format(
        name, os.environ.get('OPENBLAS_CORETYPE', 'unset')))
    if args.expect:
        wanted = ALIASES.get(args.expect.lower(), {args.expect.lower()})
        if name is None or name.lower() not in wanted:
            print('expected the {} core: NumPy has no OpenBLAS with DYNAMIC_ARCH here, or '
                  'it did not take OPENBLAS_CORETYPE'.format(args.expect), file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
