"""Which transport carries the collectives for a communicator, and what a
transport offers :class:`~xgrad.distributed.DataParallel`.

A transport starts collectives without waiting for them and says whether
they are done; the waiting (with a deadline) is DataParallel's, so every
transport gets the same timeout errors. Its methods:

- ``rank``, ``size``; ``device``: the xgrad device its buffers live on;
- ``empty(n, dtype)``: a flat buffer; ``from_host(a)`` / ``to_host(buf)``;
- ``allreduce(send, recv)`` (sum), ``allgather(send, recv)`` (``recv`` holds
  ``size`` copies of ``send``'s length), ``broadcast(buf, root)`` in place:
  each starts the collective and returns a request;
- ``done(requests)``: whether all of them completed (it also lets them
  progress: MPI moves a non-blocking collective on when it is tested).
"""

from xgrad._errors import DistributedError


def transport_for(comm):
    """The transport for ``comm``: an mpi4py intra-communicator or a
    ``cupy.cuda.nccl.NcclCommunicator``, told apart by their types' modules
    so that neither library is imported for the other."""
    kind = type(comm)
    if kind.__module__.startswith('mpi4py'):
        from xgrad.distributed._mpi import MPITransport
        return MPITransport(comm)
    if kind.__name__ == 'NcclCommunicator':
        from xgrad.distributed._nccl import NCCLTransport
        return NCCLTransport(comm)
    raise DistributedError(
        'DataParallel takes an mpi4py communicator (e.g. mpi4py.MPI.COMM_WORLD) '
        'or a cupy.cuda.nccl.NcclCommunicator, not {}.{}'.format(kind.__module__,
                                                                 kind.__qualname__))
