"""Data-parallel training: each process (rank) runs the same model on its own
part of the batch, and :class:`DataParallel` replaces every parameter's
gradient by its average over the ranks, all-reducing buckets of gradients
while backward is still running.

Over MPI (mpi4py, ``pip install "xgrad[mpi]"``) on ``native`` devices, or over
NCCL (``cupy.cuda.nccl``) on ``cuda:N`` devices. Neither is imported before a
communicator of its kind is given, so ``import xgrad.distributed`` needs
neither. Semantics, errors and an example: docs/distributed.md.
"""

from xgrad._errors import DistributedError
from xgrad.distributed._data_parallel import DataParallel

__all__ = ['DataParallel', 'DistributedError']
