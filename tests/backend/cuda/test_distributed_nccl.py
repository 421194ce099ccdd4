"""DataParallel's NCCL transport on one rank: on the CPU stand-in for CuPy
with a fake single-rank ``NcclCommunicator`` (and streams and events) that
records each call, and on a real GPU with CuPy's own when one is present.
Checked: the pointers, counts, NCCL dtypes and side stream each collective
gets, and that a one-rank average is the gradient itself."""

import ctypes

import numpy
import pytest

import xgrad
from xgrad.distributed import DataParallel
from xgrad.testing import assert_allclose


class FakeNccl:
    """``cupy.cuda.nccl`` for one rank: a collective copies send to receive."""
    NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_INT64, NCCL_UINT8 = 6, 7, 8, 4, 1
    NCCL_SUM = 0
    SIZES = {6: 2, 7: 4, 8: 8, 4: 8, 1: 1}
    calls = []

    class NcclCommunicator:
        def rank_id(self):
            return 0

        def size(self):
            return 1

        def device_id(self):
            return 0

        def _copy(self, name, send, recv, count, dtype, stream, *extra):
            FakeNccl.calls.append((name, send, recv, count, dtype) + extra + (stream,))
            if send != recv:
                ctypes.memmove(recv, send, count * FakeNccl.SIZES[dtype])

        def allReduce(self, send, recv, count, dtype, op, stream):
            self._copy('allReduce', send, recv, count, dtype, stream, op)

        def allGather(self, send, recv, count, dtype, stream):
            self._copy('allGather', send, recv, count, dtype, stream)

        def broadcast(self, send, recv, count, dtype, root, stream):
            self._copy('broadcast', send, recv, count, dtype, stream, root)


class FakeStream:
    made = []

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.ptr = 1000 + len(FakeStream.made)
        self.non_blocking = non_blocking
        self.waited = []
        FakeStream.made.append(self)

    def wait_event(self, event):
        self.waited.append(event)


class FakeEvent:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.stream = None

    def record(self, stream=None):
        self.stream = stream

    @property
    def done(self):
        return True


@pytest.fixture
def nccl(fake, monkeypatch):
    FakeNccl.calls = []
    FakeStream.made = []
    current = FakeStream()
    monkeypatch.setattr(fake.cuda, 'nccl', FakeNccl, raising=False)
    monkeypatch.setattr(fake.cuda, 'Stream', FakeStream, raising=False)
    monkeypatch.setattr(fake.cuda, 'Event', FakeEvent, raising=False)
    monkeypatch.setattr(fake.cuda, 'get_current_stream', staticmethod(lambda: current),
                        raising=False)
    return FakeNccl


def _model(dtype='float32'):
    rng = numpy.random.RandomState(0)
    w = xgrad.array(rng.standard_normal((3, 4)).astype(dtype), device='cuda:0').require_grad()
    b = xgrad.array(rng.standard_normal(4).astype(dtype), device='cuda:0').require_grad()
    x = xgrad.array(rng.standard_normal((5, 3)).astype(dtype), device='cuda:0')
    return {'w': w, 'b': b}, x


def _loss(p, x):
    return xgrad.sum(xgrad.tanh(xgrad.matmul(x, p['w']) + p['b']) ** 2)


def test_a_one_rank_average_is_the_gradient_and_nccl_gets_pointers_counts_dtype_stream(nccl):
    p, x = _model()
    want = {}
    _loss(p, x).backward()
    for k, v in p.items():
        want[k] = v.grad.to_numpy().copy()
        v.cleargrad()
    dp = DataParallel(p, nccl.NcclCommunicator(), bucket_bytes=16)   # one per bucket
    nccl.calls = []
    _loss(p, x).backward()
    for k, v in p.items():
        assert v.grad.device.name == 'cuda:0'
        assert_allclose(v.grad.to_numpy(), want[k], rtol=1e-6, atol=1e-6)
    side = FakeStream.made[1]
    assert side.non_blocking
    assert [c[0] for c in nccl.calls] == ['allReduce', 'allReduce']
    for call, bucket in zip(nccl.calls, dp.buckets):   # b first: reverse order
        name, send, recv, count, dtype, op, stream = call
        assert send == bucket.send.data.ptr and recv == bucket.recv.data.ptr
        assert count == bucket.length == bucket.size + 1   # gradients, then a count
        assert dtype == nccl.NCCL_FLOAT32 and op == nccl.NCCL_SUM
        assert stream == side.ptr
    assert [len(b.params) for b in dp.buckets] == [1, 1] and dp.buckets[0].params == [1]
    # each collective waited on the GPU for the current stream's work first
    # (and before: construction's two gathers and a broadcast per bucket)
    assert len(side.waited) == len(nccl.calls) + 2 + len(dp.buckets)
    assert all(e.stream is FakeStream.made[0] for e in side.waited)


def test_construction_gathers_and_broadcasts_through_nccl(nccl):
    p, _ = _model('float64')
    DataParallel(p, nccl.NcclCommunicator())
    names = [c[0] for c in nccl.calls]
    assert names == ['allGather', 'allGather', 'broadcast']
    assert nccl.calls[0][3:5] == (1, nccl.NCCL_INT64)
    assert nccl.calls[1][4] == nccl.NCCL_UINT8
    assert nccl.calls[2][1] == nccl.calls[2][2] and nccl.calls[2][3] == 4 * 3 + 4 + 2
    assert nccl.calls[2][4] == nccl.NCCL_FLOAT64 and nccl.calls[2][5] == 0   # root 0


def test_parameters_on_another_device_than_the_communicators(nccl):
    w = xgrad.ones((2,)).require_grad()   # native
    with pytest.raises(xgrad.DistributedError, match=r'rank 0 has parameters on a device.*'
                       r'cuda:0.*params\[0\]'):
        DataParallel([w], nccl.NcclCommunicator())
