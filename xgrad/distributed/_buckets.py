"""How gradients are grouped for the all-reduce: buckets of about
``bucket_bytes`` each, one dtype per bucket, filled with the parameters in
reverse registration order (as PyTorch DDP does), since backward produces the
last layers' gradients first and the first bucket can then leave early."""

from typing import List, Sequence, Tuple


class Bucket:
    """Parameters whose gradients travel in one all-reduce. Its flat buffer
    holds their gradients back to back, then one count per parameter (1
    where this rank contributed a gradient): after the sum, a count of 0
    means no rank had a gradient for that parameter."""

    def __init__(self, index: int, dtype) -> None:
        self.index = index
        self.dtype = dtype
        self.params: List[int] = []                 # indexes into the parameter list
        self.slices: List[Tuple[int, int]] = []     # (offset, size) in the buffer
        self.size = 0                               # gradient elements

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def length(self) -> int:
        """Elements of the flat buffer: the gradients and the counts."""
        return self.size + len(self.params)

    def add(self, param_index: int, size: int) -> None:
        self.params.append(param_index)
        self.slices.append((self.size, size))
        self.size += size


def plan(shapes_dtypes: Sequence[Tuple[tuple, object]], bucket_bytes: int) -> List[Bucket]:
    """Buckets for parameters of the given (shape, dtype), last parameter
    first: a parameter joins the open bucket while the dtype is the same and
    the bucket stays within ``bucket_bytes``; a parameter larger than that
    gets a bucket of its own."""
    buckets: List[Bucket] = []
    for i in reversed(range(len(shapes_dtypes))):
        shape, dtype = shapes_dtypes[i]
        size = 1
        for n in shape:
            size *= n
        last = buckets[-1] if buckets else None
        if (last is None or last.dtype != dtype
                or (last.params and last.nbytes + size * dtype.itemsize > bucket_bytes)):
            last = Bucket(len(buckets), dtype)
            buckets.append(last)
        last.add(i, size)
    return buckets
