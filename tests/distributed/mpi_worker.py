"""One rank of a data-parallel scenario, run by test_mpi.py as
``mpiexec -n 2 python -m mpi4py mpi_worker.py SCENARIO``. Each rank prints
``OK <scenario> rank <r>`` when its checks pass; an exception (a failed
check, a DistributedError) aborts the whole job through ``-m mpi4py``.

The model: a two-layer tanh MLP, each rank on its own batch of a union
batch that every rank can rebuild, loss the mean over the rank's batch (so
the ranks' average is the mean over the union). The expected gradients are
computed in-process on the union batch, without DataParallel.
"""

import sys
import time

import numpy
from mpi4py import MPI

import xgrad
from xgrad.distributed import DataParallel, DistributedError

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
N = 6  # samples per rank
SHAPES = {'W1': (4, 5), 'b1': (5,), 'W2': (5, 3), 'b2': (3,)}


def values(seed=0):
    rng = numpy.random.RandomState(seed)
    return {k: rng.standard_normal(s) * 0.5 for k, s in SHAPES.items()}


def batch(rank):
    return numpy.random.RandomState(100 + rank).standard_normal((N, 4))


def make_params(bp=None, seed=0, dtype='float64'):
    return {k: xgrad.array(v.astype(dtype)).require_grad(bp) for k, v in values(seed).items()}


def loss_of(p, x, bp=None, use=('W1', 'b1', 'W2', 'b2'), marker=None):
    w1 = p['W1'] if marker is None else marker.apply((p['W1'],))[0]
    h = xgrad.tanh(xgrad.matmul(x, w1) + p['b1'])
    y = xgrad.matmul(h, p['W2'])
    if 'b2' in use:
        y = y + p['b2']
    return xgrad.sum(y * y) / x.shape[0]


def union_grads(bp=None, dtype='float64', ranks=None):
    """Gradients of the mean loss over the batches of ``ranks`` (all ranks)."""
    ranks = range(SIZE) if ranks is None else ranks
    p = make_params(bp, dtype=dtype)
    x = xgrad.array(numpy.concatenate([batch(r) for r in ranks]).astype(dtype))
    loss_of(p, x).backward(bp)
    return {k: v.get_grad(bp).to_numpy() for k, v in p.items()}


def local_x(dtype='float64'):
    return xgrad.array(batch(RANK).astype(dtype))


def close(got, want, what, rtol=1e-10):
    numpy.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=what)


def check_grads(p, want, bp=None, rtol=1e-10, what=''):
    for k in p:
        close(p[k].get_grad(bp).to_numpy(), want[k], '{} {}'.format(what, k), rtol)


# -- scenarios ----------------------------------------------------------------------

def union():
    """Several bucket sizes: one parameter per bucket, two, all in one."""
    want = union_grads()
    for bucket_bytes in (1, 8 * 20, 8 * 40, 1 << 20):
        p = make_params()
        dp = DataParallel(p, COMM, bucket_bytes=bucket_bytes)
        for step in range(2):   # a second pass: the round state was reset
            for v in p.values():
                v.cleargrad()
            loss_of(p, local_x()).backward()
            check_grads(p, want, what='bucket_bytes={} step {}'.format(bucket_bytes, step))
        sizes = [len(b.params) for b in dp.buckets]
        if bucket_bytes == 1:
            assert sizes == [1, 1, 1, 1], sizes
        if bucket_bytes == 1 << 20:
            assert sizes == [4], sizes
        # reverse registration order: the last parameter leads the first bucket
        assert dp.buckets[0].params[0] == 3
        dp.remove()


def prior():
    """A stored gradient stays: grad = prior + average."""
    want = union_grads()
    p = make_params()
    DataParallel(p, COMM)
    for v in p.values():
        v.set_grad(xgrad.ones(v.shape, dtype=v.dtype))
    loss_of(p, local_x()).backward()
    check_grads(p, {k: w + 1 for k, w in want.items()})


def float32():
    want = union_grads(dtype='float32')
    p = make_params(dtype='float32')
    DataParallel(p, COMM, bucket_bytes=4 * 20)
    loss_of(p, local_x('float32')).backward()
    check_grads(p, want, rtol=1e-5)


class Marker(xgrad.FunctionNode):
    """Identity whose backward (the last op of backward here) writes to a log."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, inputs):
        return inputs[0].copy(),

    def backward(self, target_input_indexes, grad_outputs):
        self.log.append('last backward op')
        return grad_outputs[0],


def overlap():
    """The first bucket's all-reduce starts before backward's last op runs."""
    log = []
    p = make_params()
    dp = DataParallel(p, COMM, bucket_bytes=1)
    start = dp._transport.allreduce

    def recorded(send, recv):
        log.append('allreduce of bucket {}'.format(len(dp._requests)))
        return start(send, recv)
    dp._transport.allreduce = recorded
    loss_of(p, local_x(), marker=Marker(log)).backward()
    assert log.index('allreduce of bucket 0') < log.index('last backward op'), log
    assert log.index('allreduce of bucket 2') < log.index('last backward op'), log
    assert log[-1] == 'allreduce of bucket 3', log   # W1's, after its last consumer
    check_grads(p, union_grads())


def graphs():
    """Two backprop IDs, one DataParallel each, on the same parameters."""
    with xgrad.backprop_scope('a') as a, xgrad.backprop_scope('b') as b:
        want_a, want_b = union_grads(a), union_grads(b)
        p = make_params(a)
        for v in p.values():
            v.require_grad(b)
        DataParallel(p, COMM, backprop_id=a, bucket_bytes=8 * 20)
        DataParallel(p, COMM, backprop_id=b, broadcast=False)
        x = local_x()
        loss_of(p, x).backward(b)   # (ChainerX's rule: the later graph first)
        loss_of(p, x).backward(a)
        check_grads(p, want_a, a, what='graph a')
        check_grads(p, want_b, b, what='graph b')


def loss_scale():
    want = union_grads()
    p = make_params()
    DataParallel(p, COMM, bucket_bytes=8 * 20)
    loss_of(p, local_x()).backward(loss_scale=1024.0)
    check_grads(p, want, rtol=1e-9)


def missing():
    """b2 gets a gradient on rank 0 only: it counts as zero on rank 1; a
    parameter no rank uses keeps no gradient."""
    p = make_params()
    unused = xgrad.zeros((2,), dtype='float64').require_grad()
    DataParallel(dict(p, unused=unused), COMM, bucket_bytes=8 * 20)
    use = ('W1', 'b1', 'W2', 'b2') if RANK == 0 else ('W1', 'b1', 'W2')
    loss_of(p, local_x(), use=use).backward()
    g = {}
    for r in range(SIZE):
        q = make_params()
        x = xgrad.array(batch(r))
        loss_of(q, x, use=('W1', 'b1', 'W2', 'b2') if r == 0 else ('W1', 'b1', 'W2')).backward()
        for k, v in q.items():
            if v.grad is not None:
                g.setdefault(k, []).append(v.grad.to_numpy())
    check_grads(p, {k: sum(v) / SIZE for k, v in g.items()})
    assert unused.grad is None


def no_gradient():
    """Rank 1's pass gives no parameter a gradient: finish() on every rank."""
    p = make_params()
    dp = DataParallel(p, COMM)
    if RANK == 0:
        loss_of(p, local_x()).backward()
    else:
        xgrad.sum(xgrad.ones(3) * 2).backward()
    dp.finish()
    want = union_grads(ranks=[0])
    check_grads(p, {k: w / SIZE for k, w in want.items()})
    for v in p.values():   # the next round is in step on every rank
        v.cleargrad()
    loss_of(p, local_x()).backward()
    dp.finish()
    check_grads(p, union_grads())


def broadcast():
    p = make_params(seed=RANK)   # each rank starts elsewhere
    DataParallel(p, COMM)
    for k, v in values(0).items():
        close(p[k].to_numpy(), v, k, rtol=0)


def _expect_error(make, *needles):
    try:
        make()
    except DistributedError as e:
        text = str(e)
        print('rank {} raised: {}'.format(RANK, text), flush=True)
        for needle in needles:
            assert needle in text, (needle, text)
        return
    raise AssertionError('no DistributedError')


def mismatched_shape():
    p = make_params()
    if RANK == 1:
        p['W2'] = xgrad.zeros((6, 3)).require_grad()
    _expect_error(lambda: DataParallel(p, COMM), "'W2'", 'ranks 0, 1', '(5, 3)', '(6, 3)')


def mismatched_dtype():
    p = make_params()
    if RANK == 1:
        p['b1'] = xgrad.zeros((5,), dtype='float32').require_grad()
    _expect_error(lambda: DataParallel(p, COMM), "'b1'", 'ranks 0, 1', 'float32', 'float64')


def never_backward():
    """Rank 1 constructs, then leaves without backward: rank 0 times out."""
    p = make_params()
    DataParallel(p, COMM, bucket_bytes=8 * 20, timeout=2.0)
    if RANK == 1:
        print('rank 1 leaves without backward', flush=True)
        time.sleep(30)   # alive but silent; the job must end before this
        return
    t0 = time.monotonic()
    try:
        loss_of(p, local_x()).backward()
    except DistributedError as e:
        print('rank 0 raised after {:.1f} s: {}'.format(time.monotonic() - t0, e), flush=True)
        raise   # -m mpi4py aborts the job
    raise AssertionError('no timeout')


if __name__ == '__main__':
    name = sys.argv[1]
    globals()[name]()
    print('OK {} rank {}'.format(name, RANK), flush=True)
