"""The MPI transport: non-blocking collectives of mpi4py on NumPy buffers,
for parameters on ``native`` devices. The communicator is duplicated, so
DataParallel's collectives never match the user's own (or another
DataParallel's) on the same communicator."""

import numpy

from xgrad._errors import DistributedError


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError('xgrad.distributed over MPI needs mpi4py: pip install '
                          '"xgrad[mpi]" (importing mpi4py said: {})'.format(e)) from None
    return MPI


class MPITransport:
    device = 'native:0'

    def __init__(self, comm):
        MPI = _mpi()
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise DistributedError('DataParallel needs an MPI intra-communicator '
                                   '(e.g. MPI.COMM_WORLD), not {!r}'.format(comm))
        self._MPI = MPI
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def empty(self, n, dtype):
        return numpy.empty(n, dtype)

    def from_host(self, a):
        return numpy.ascontiguousarray(a)

    def to_host(self, buf):
        return buf

    def allreduce(self, send, recv):
        return self.comm.Iallreduce(send, recv, op=self._MPI.SUM)

    def allgather(self, send, recv):
        return self.comm.Iallgather(send, recv)

    def broadcast(self, buf, root):
        return self.comm.Ibcast(buf, root=root)

    def done(self, requests):
        return self._MPI.Request.Testall(requests)
