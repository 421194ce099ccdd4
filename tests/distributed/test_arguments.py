"""DataParallel's checks that need no other rank (each a DistributedError
raised before any collective), the bucket plan, and that xgrad.distributed
imports without mpi4py or CuPy."""

import subprocess
import sys

import numpy
import pytest

import xgrad
from xgrad.distributed import DataParallel, DistributedError
from xgrad.distributed import _buckets, _mpi


def param(shape=(3,), dtype='float32'):
    return xgrad.zeros(shape, dtype=dtype).require_grad()


def test_distributed_error_is_an_xgrad_error_exported_at_the_top():
    assert xgrad.DistributedError is DistributedError
    assert issubclass(DistributedError, xgrad.XgradError)


def test_a_communicator_of_another_kind_is_refused():
    with pytest.raises(DistributedError, match='mpi4py communicator.*NcclCommunicator, '
                       'not builtins.object'):
        DataParallel([param()], object())


@pytest.mark.parametrize('bucket_bytes', [0, -1, 1.5, True, '1'])
def test_a_bad_bucket_size_is_refused(bucket_bytes):
    with pytest.raises(DistributedError, match='bucket_bytes must be a positive int'):
        DataParallel([param()], object(), bucket_bytes=bucket_bytes)


def test_a_bad_timeout_is_refused():
    with pytest.raises(DistributedError, match='timeout must be a positive number'):
        DataParallel([param()], object(), timeout=0)


def test_a_computed_array_is_not_a_parameter():
    w = param()
    with pytest.raises(DistributedError, match=r"parameter 'h' is not a leaf"):
        DataParallel({'w': w, 'h': w * 2}, object())


def test_a_parameter_without_grad_on_the_backprop_id_is_refused():
    with xgrad.backprop_scope('other') as other:
        with pytest.raises(DistributedError, match=r"'params\[0\]' does not require grad on "
                           r"backprop ID 'other'"):
            DataParallel([param()], object(), backprop_id=other)
    with pytest.raises(DistributedError, match='does not require grad'):
        DataParallel([xgrad.zeros(3)], object())


def test_the_same_array_twice_and_one_array_alone_are_refused():
    w = param()
    with pytest.raises(DistributedError, match=r"'params\[1\]' is the same array as "
                       r"'params\[0\]'"):
        DataParallel([w, w], object())
    with pytest.raises(DistributedError, match='a sequence'):
        DataParallel(w, object())


def _plan(shapes, bucket_bytes, dtype='float32'):
    return _buckets.plan([(s, numpy.dtype(dtype)) for s in shapes], bucket_bytes)


def test_buckets_take_the_parameters_in_reverse_order_up_to_the_size():
    buckets = _plan([(4,), (2,), (2,), (8,)], 16)
    assert [b.params for b in buckets] == [[3], [2, 1], [0]]
    assert [b.slices for b in buckets][1] == [(0, 2), (2, 2)]
    assert [b.length for b in buckets] == [9, 6, 5]   # gradients, then a count each


def test_one_parameter_per_bucket_and_all_in_one():
    assert [b.params for b in _plan([(2,), (3,)], 1)] == [[1], [0]]
    assert [b.params for b in _plan([(2,), (3,)], 1 << 20)] == [[1, 0]]


def test_a_bucket_holds_one_dtype():
    plan = _buckets.plan([((2,), numpy.dtype('float32')), ((2,), numpy.dtype('float64')),
                          ((2,), numpy.dtype('float64'))], 1 << 20)
    assert [(b.params, b.dtype.name) for b in plan] == [([2, 1], 'float64'), ([0], 'float32')]


def test_without_mpi4py_the_error_names_the_mpi_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'mpi4py', None)
    with pytest.raises(ImportError, match=r'needs mpi4py: pip install "xgrad\[mpi\]"'):
        _mpi._mpi()


def test_importing_xgrad_distributed_imports_neither_mpi4py_nor_cupy():
    code = ('import sys, xgrad.distributed; '
            'print(sorted(m for m in ("mpi4py", "cupy") if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == '[]'
