"""The dtype groups ChainerX's tests parametrize over, as dtype names.

ChainerX's ``chainerx.testing`` lists dtypes by name (strings), not as
NumPy scalar types as ``xgrad.all_dtypes`` does; tests written for
ChainerX pass these names to ``pytest.mark.parametrize``.
"""

import numpy

float_dtypes = ('float16', 'float32', 'float64')
signed_integral_dtypes = ('int8', 'int16', 'int32', 'int64')
unsigned_dtypes = ('uint8',)
integral_dtypes = unsigned_dtypes + signed_integral_dtypes
signed_dtypes = signed_integral_dtypes + float_dtypes
numeric_dtypes = signed_dtypes + unsigned_dtypes
nonfloat_dtypes = ('bool_',) + signed_integral_dtypes + unsigned_dtypes
all_dtypes = ('bool_',) + numeric_dtypes


def parametrize_dtype_specifier(argname, dtypes=None, additional_args=None):
    """``pytest.mark.parametrize`` over every way of naming each of ``dtypes``
    (default: all): the name, the ``numpy.dtype`` and its character code,
    then ``additional_args``."""
    import pytest
    names = list(all_dtypes if dtypes is None else dtypes)
    if not all(isinstance(name, str) for name in names):
        raise TypeError('dtypes must be dtype names (str), got {!r}'.format(names))
    values = names + [numpy.dtype(n) for n in names] + [numpy.dtype(n).char for n in names]
    values += list(additional_args or ())
    return pytest.mark.parametrize(argname, values)
