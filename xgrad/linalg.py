"""``xgrad.linalg``: the linear-algebra namespace (``chainerx.linalg``)."""

from xgrad._ops.norms import norm

__all__ = ['norm']
