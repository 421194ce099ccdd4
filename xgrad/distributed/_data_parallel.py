"""DataParallel: the gradients of a set of parameters averaged over the ranks
of a communicator, bucket by bucket, overlapping the rest of backward.

A round is one backward pass on every rank. Each parameter's gradient hook
copies this pass's gradient into its bucket's buffer as soon as it is final;
a bucket whose parameters are all in starts its all-reduce, strictly in
bucket order (a ready bucket waits for the earlier ones), so every rank
issues the same collectives in the same order. The first post-accumulate
hook of the pass (the pass has committed) or :meth:`DataParallel.finish`
closes the round: the parameters that got no gradient count as zero, the
remaining buckets start, all are waited for (with a deadline), and each
parameter's gradient becomes its prior gradient (what it held before the
pass) plus the average of the ranks' contributions.
"""

import pickle
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy

from xgrad._core import ndarray, _raw_data, _array_of
from xgrad._errors import DistributedError, XgradError
from xgrad.distributed import _buckets
from xgrad.distributed._transport import transport_for


def _named(params):
    """(names, arrays) from a mapping name -> array or a sequence of arrays."""
    if isinstance(params, Mapping):
        return [str(k) for k in params], list(params.values())
    if isinstance(params, ndarray):
        raise DistributedError('DataParallel takes a sequence (or a dict) of parameters, '
                               'not one array')
    arrays = list(params)
    return ['params[{}]'.format(i) for i in range(len(arrays))], arrays


class DataParallel:
    """Average the gradients of ``params`` over the ranks of ``comm``.

    ``params``: the parameters (leaf ``xgrad.ndarray``\\ s that require grad
    on ``backprop_id``), a sequence or a dict name -> array (the names appear
    in errors). ``comm``: an mpi4py intra-communicator (parameters on
    ``native``) or a ``cupy.cuda.nccl.NcclCommunicator`` (parameters on its
    ``cuda:N``). ``bucket_bytes``: the gradient bytes per all-reduce (25 MiB
    as PyTorch DDP). ``timeout``: seconds a collective may take before
    :class:`DistributedError` says which ranks' bucket did not complete.
    ``broadcast``: copy rank 0's parameter values to every rank now.

    Construction is collective (every rank must construct it, with
    parameters of the same shapes and dtypes, in the same order). One
    instance averages one backprop ID: for several graphs make one each.
    """

    def __init__(self, params: Union[Sequence[ndarray], Mapping[str, ndarray]], comm: Any, *,
                 backprop_id: Any = None, bucket_bytes: int = 25 << 20,
                 timeout: float = 300.0, broadcast: bool = True) -> None:
        if (isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, numpy.integer))
                or bucket_bytes <= 0):
            raise DistributedError('bucket_bytes must be a positive int, got {!r}'.format(
                bucket_bytes))
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise DistributedError('timeout must be a positive number of seconds, got '
                                   '{!r}'.format(timeout))
        self.names, self.params = _named(params)
        self._bp = backprop_id
        self.timeout = float(timeout)
        self._check_local()
        self._transport = transport_for(comm)
        self.rank: int = self._transport.rank
        self.size: int = self._transport.size
        self._broken: Optional[str] = None
        self._check_ranks_agree()
        self.buckets = _buckets.plan([(p.shape, p.dtype) for p in self.params],
                                     int(bucket_bytes))
        self._bucket_of = {}
        for bucket in self.buckets:
            for j, i in enumerate(bucket.params):
                self._bucket_of[i] = (bucket, j)
            bucket.send = self._transport.empty(bucket.length, bucket.dtype)
            bucket.recv = self._transport.empty(bucket.length, bucket.dtype)
        self._start_round()
        self._closed_by_hook = False
        if broadcast:
            self.broadcast_parameters()
        self._handles = []
        for i, p in enumerate(self.params):
            self._handles.append(p.register_hook(self._grad_hook(i), backprop_id))
            self._handles.append(p.register_post_accumulate_hook(self._post_hook, backprop_id))

    # -- construction checks ---------------------------------------------------

    def _check_local(self) -> None:
        """Every parameter a distinct leaf that requires grad on the backprop ID."""
        seen: Dict[int, str] = {}
        for name, p in zip(self.names, self.params):
            if not isinstance(p, ndarray):
                raise DistributedError('parameter {!r} is a {}, not an xgrad.ndarray'.format(
                    name, type(p).__name__))
            if id(p) in seen:
                raise DistributedError('parameter {!r} is the same array as {!r}'.format(
                    name, seen[id(p)]))
            seen[id(p)] = name
            try:
                computed = p._is_chained(self._bp)
            except XgradError:
                computed = False   # not on that graph at all
            if computed:
                raise DistributedError(
                    'parameter {!r} is not a leaf: it was computed by an op on {}; pass '
                    'the arrays the computation starts from'.format(name, self._bp_name()))
            if not p.is_grad_required(self._bp):
                raise DistributedError(
                    'parameter {!r} does not require grad on {}: call require_grad() on it '
                    'first'.format(name, self._bp_name()))

    def _bp_name(self):
        if self._bp is None:
            return 'the default backprop ID'
        return 'backprop ID {!r}'.format(getattr(self._bp, 'name', self._bp))

    def _check_ranks_agree(self) -> None:
        """Collectively compare the ranks' parameter lists (names, shapes,
        dtypes, devices' kinds); every rank raises the same error on a
        mismatch, naming the parameter and the ranks."""
        t = self._transport
        wrong = [n for n, p in zip(self.names, self.params) if str(p.device) != t.device]
        if wrong:
            # (not raised yet: the others would wait for this rank's signature)
            mine = ('device', wrong, t.device)
        else:
            mine = [(n, tuple(p.shape), p.dtype.str) for n, p in zip(self.names, self.params)]
        everyone = self._allgather_object(mine)
        for rank, theirs in enumerate(everyone):
            if isinstance(theirs, tuple) and theirs[0] == 'device':
                raise DistributedError(
                    'rank {} has parameters on a device its communicator does not serve '
                    '(which is {}): {}'.format(rank, theirs[2], ', '.join(theirs[1])))
        base = everyone[0]
        for rank, theirs in enumerate(everyone[1:], 1):
            if len(theirs) != len(base):
                raise DistributedError(
                    'ranks register different numbers of parameters: rank 0 has {}, rank {} '
                    'has {}'.format(len(base), rank, len(theirs)))
        for i, (name, shape, dtype) in enumerate(base):
            differ = [r for r in range(1, len(everyone)) if everyone[r][i][1:] != (shape, dtype)]
            if differ:
                have = '; '.join('rank {} has shape {} {}'.format(
                    r, everyone[r][i][1], numpy.dtype(everyone[r][i][2]).name)
                    for r in [0] + differ)
                raise DistributedError(
                    'parameter {} ({!r} on rank 0) differs across ranks {}: {}'.format(
                        i, name, ', '.join(str(r) for r in [0] + differ), have))

    def _allgather_object(self, obj):
        """A picklable object from every rank, through the transport's
        buffers (lengths first, then the bytes padded to the longest)."""
        t = self._transport
        data = numpy.frombuffer(pickle.dumps(obj), numpy.uint8)
        lengths = t.empty(t.size, numpy.int64)
        self._wait([t.allgather(t.from_host(numpy.array([data.size], numpy.int64)), lengths)],
                   'gathering the parameter lists (shapes and dtypes) at construction')
        lengths = [int(n) for n in t.to_host(lengths)]
        longest = max(lengths)
        padded = numpy.zeros(longest, numpy.uint8)
        padded[:data.size] = data
        recv = t.empty(t.size * longest, numpy.uint8)
        self._wait([t.allgather(t.from_host(padded), recv)],
                   'gathering the parameter lists (shapes and dtypes) at construction')
        recv = t.to_host(recv)
        return [pickle.loads(recv[r * longest:r * longest + n].tobytes())
                for r, n in enumerate(lengths)]

    # -- broadcast --------------------------------------------------------------

    def broadcast_parameters(self, root: int = 0) -> None:
        """Collectively copy rank ``root``'s parameter values to every rank,
        in place (done at construction unless ``broadcast=False``)."""
        self._check_usable()
        for bucket in self.buckets:
            buf = bucket.send
            for i, (offset, size) in zip(bucket.params, bucket.slices):
                buf[offset:offset + size] = _raw_data(self.params[i]).reshape(-1)
            self._wait([self._transport.broadcast(buf, root)],
                       'broadcasting bucket {} from rank {}'.format(self._describe(bucket),
                                                                    root))
            for i, (offset, size) in zip(bucket.params, bucket.slices):
                raw = _raw_data(self.params[i])
                raw[...] = buf[offset:offset + size].reshape(raw.shape)

    # -- a round ----------------------------------------------------------------

    def _start_round(self) -> None:
        n = len(self.params)
        self._contributed = [False] * n
        self._prior: List[Any] = [None] * n
        self._missing = [len(b.params) for b in self.buckets]
        self._requests: List[Any] = []
        self._open = False

    def _grad_hook(self, i):
        def hook(g):
            self._check_usable()
            if self._contributed[i]:
                self._broken = (
                    'the gradient of parameter {!r} arrived twice in one round: a backward '
                    'pass ended (failed?) after handing gradients to the all-reduce and '
                    'before its round closed; the ranks are out of step'.format(
                        self.names[i]))
                raise DistributedError(self._broken)
            self._open = True
            self._closed_by_hook = False
            self._contributed[i] = True
            self._prior[i] = self.params[i].get_grad(self._bp)   # not yet committed
            bucket, j = self._bucket_of[i]
            offset, size = bucket.slices[j]
            bucket.send[offset:offset + size] = _raw_data(g).reshape(-1)
            bucket.send[bucket.size + j] = 1
            self._missing[bucket.index] -= 1
            self._launch_ready()
            if self._requests:
                self._transport.done(self._requests)   # lets MPI progress them
            return None
        return hook

    def _launch_ready(self) -> None:
        """Start the all-reduce of each complete bucket, in bucket order."""
        while len(self._requests) < len(self.buckets):
            bucket = self.buckets[len(self._requests)]
            if self._missing[bucket.index]:
                return
            self._requests.append(self._transport.allreduce(bucket.send, bucket.recv))

    def _post_hook(self, param) -> None:
        if self._open:
            self._close()
            self._closed_by_hook = True

    def finish(self) -> None:
        """Close this rank's round. Needed only when a backward pass may give
        none of the parameters a gradient on some rank (no post-accumulate
        hook closes the round there); then call it after every backward, on
        every rank: where a post hook already closed the round it does nothing."""
        self._check_usable()
        if not self._open and self._closed_by_hook:
            self._closed_by_hook = False
            return
        self._close()

    def _close(self) -> None:
        """Zero-fill, start the remaining buckets, wait, write the averages."""
        for bucket in self.buckets:
            if self._missing[bucket.index]:
                for j, i in enumerate(bucket.params):
                    if not self._contributed[i]:
                        offset, size = bucket.slices[j]
                        bucket.send[offset:offset + size] = 0
                        bucket.send[bucket.size + j] = 0
                self._missing[bucket.index] = 0
        self._launch_ready()
        self._wait(self._requests, None)
        for bucket in self.buckets:
            recv = bucket.recv
            counts = self._transport.to_host(recv[bucket.size:])
            for j, i in enumerate(bucket.params):
                if not counts[j]:
                    continue   # no rank had a gradient: left as it was
                offset, size = bucket.slices[j]
                p = self.params[i]
                average = _array_of((recv[offset:offset + size] / self.size).reshape(p.shape),
                                    p.device)
                prior = self._prior[i] if self._contributed[i] else p.get_grad(self._bp)
                p.set_grad(average if prior is None else prior + average, self._bp)
        self._start_round()

    # -- waiting ----------------------------------------------------------------

    def _wait(self, requests, what: Optional[str]) -> None:
        """Poll until ``requests`` complete; past the deadline, a
        DistributedError naming what did not complete (the instance is
        unusable afterwards: the collective cannot be taken back)."""
        deadline = time.monotonic() + self.timeout
        pause = 1e-5
        while not self._transport.done(requests):
            if time.monotonic() > deadline:
                if what is None:
                    what = self._first_incomplete()
                self._broken = (
                    '{} did not complete within the timeout of {:g} s on rank {} of {}: '
                    'another rank died, did not call backward, or is still computing'
                    .format(what, self.timeout, self.rank, self.size))
                raise DistributedError(self._broken)
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _first_incomplete(self) -> str:
        for k, request in enumerate(self._requests):
            if not self._transport.done([request]):
                return 'the all-reduce of bucket {}'.format(self._describe(self.buckets[k]))
        return 'the all-reduce'

    def _describe(self, bucket) -> str:
        names = [self.names[i] for i in bucket.params]
        shown = ', '.join(repr(n) for n in names[:6]) + (', ...' if len(names) > 6 else '')
        return '{} of {} (parameters {}; {} bytes)'.format(
            bucket.index, len(self.buckets), shown, bucket.nbytes)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise DistributedError('this DataParallel cannot be used any more: ' + self._broken)

    def remove(self) -> None:
        """Take the hooks off the parameters (gradients are then local)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
