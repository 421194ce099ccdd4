# cython: language_level=3
"""The host memory of large arrays, kept from step to step.

A training step allocates and frees the same large arrays every time: a
layer's output, the temporaries of a composed op (layer norm from means,
differences and quotients), the gradients, a convolution's columns. Each is
over glibc's mmap threshold or lands at the top of its heap, so when freed
it goes back to the system, and the next step faults it in again, each page
zeroed by the kernel: a layer norm written from primitives over (2048, 768)
float32 spent 3/4 of its forward pass (4.8 of 6.5 ms) in those faults.
Changing the C allocator for the whole process (``mallopt``, which xgrad did
until 0.2) turns glibc's dynamic mmap threshold off and made other code,
Chainer's own NumPy path included, 1.5-2.7x slower.

So xgrad keeps those blocks itself (host_cache.h), for two clients:

- NumPy's data allocator: ``install()`` makes this cache NumPy's memory
  handler (NEP 49) in the current context; ``import xgrad`` does so in the
  importing thread's (``xgrad.cache_numpy_memory``, ``XGRAD_CACHE_NUMPY=0``),
  so every array NumPy allocates there (xgrad's kernels' outputs, NumPy's
  ufuncs' outputs in the ops, the user's) takes a kept block of its size
  when there is one. Other threads' contexts keep NumPy's default handler
  unless they install it; an array is always freed by the handler that
  allocated it.
- xgrad/_backend/workspace.py's arrays (the kernels' temporaries, in any
  thread), through ``allocate`` and ``release``.

Blocks of at least ``MIN_BYTES`` are kept when freed, up to the workspace
limit (``xgrad.set_workspace_limit``) and while the system has at least a
tenth of its memory available; smaller ones pass straight to NumPy's
default handler.
"""

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
cimport numpy as cnp

cnp.import_array()

cdef extern from "host_cache.h" nogil:
    size_t HC_MIN_BYTES
    void *hc_malloc(void *ctx, size_t size)
    void hc_free(void *ctx, void *data, size_t size)
    size_t hc_set_limit(size_t limit)
    void hc_clear()
    void hc_after_fork_in_child()
    int hc_under_pressure(size_t growing_by)
    int hc_pressure_override

cdef extern from *:
    """
    #include "host_cache.h"
    static PyDataMem_Handler hc_handler = {
        "xgrad_host_cache", 1, {NULL, hc_malloc, hc_calloc, hc_realloc, hc_free}};

    /* NumPy's default handler becomes the allocator underneath. */
    static int hc_wrap_default(void) {
        PyDataMem_Handler *d = (PyDataMem_Handler *)PyCapsule_GetPointer(
            PyDataMem_DefaultHandler, "mem_handler");
        if (!d) return -1;
        hc.ctx = d->allocator.ctx;
        hc.malloc_ = d->allocator.malloc;
        hc.calloc_ = d->allocator.calloc;
        hc.free_ = d->allocator.free;
        return 0;
    }
    static void *hc_handler_address(void) { return &hc_handler; }
    static void hc_stats(size_t *free_bytes, size_t *limit, unsigned long long *hits,
                         unsigned long long *misses, unsigned long long *dropped) {
        pthread_mutex_lock(&hc.lock);
        *free_bytes = hc.free_bytes; *limit = hc.limit;
        *hits = hc.hits; *misses = hc.misses; *dropped = hc.dropped;
        pthread_mutex_unlock(&hc.lock);
    }
    """
    int hc_wrap_default() except -1
    void *hc_handler_address()
    void hc_stats(size_t *free_bytes, size_t *limit, unsigned long long *hits,
                  unsigned long long *misses, unsigned long long *dropped) nogil
    object PyDataMem_SetHandler(PyObject *handler)
    object PyDataMem_GetHandler()

cdef extern from "<pthread.h>" nogil:
    int pthread_atfork(void (*prepare)(), void (*parent)(), void (*child)())

MIN_BYTES = HC_MIN_BYTES
NAME = 'xgrad_host_cache'

hc_wrap_default()
pthread_atfork(NULL, NULL, hc_after_fork_in_child)
_handler = PyCapsule_New(hc_handler_address(), b'mem_handler', NULL)


def install(flag=True):
    """Make the cache NumPy's data allocator in the current context (False:
    NumPy's default handler again); returns whether it was."""
    previous = PyDataMem_SetHandler(<PyObject *>_handler if flag else NULL)
    return previous is _handler


def installed():
    """Whether NumPy allocates through the cache in the current context."""
    return PyDataMem_GetHandler() is _handler


def allocate(size_t nbytes):
    """The address of a block of at least ``nbytes`` (64-byte aligned when
    large), for workspace.py; ``release`` gives it back."""
    cdef void *data = hc_malloc(NULL, nbytes)
    if data == NULL:
        raise MemoryError('cannot allocate {} bytes'.format(nbytes))
    return <size_t>data


def release(size_t address):
    """Give back a block from ``allocate``."""
    hc_free(NULL, <void *>address, 0)


def set_limit(size_t nbytes):
    """Keep at most ``nbytes`` of free blocks; returns the previous limit."""
    return hc_set_limit(nbytes)


def clear():
    """Free every kept block."""
    hc_clear()


def stats():
    """free_bytes, limit, hits, misses, dropped."""
    cdef size_t free_bytes, limit
    cdef unsigned long long hits, misses, dropped
    hc_stats(&free_bytes, &limit, &hits, &misses, &dropped)
    return {'free_bytes': free_bytes, 'limit': limit, 'hits': hits, 'misses': misses,
            'dropped': dropped}


def under_pressure(size_t growing_by):
    """Whether keeping ``growing_by`` more bytes would leave the system less
    than a tenth of its memory."""
    return bool(hc_under_pressure(growing_by))


def _override_pressure(value):
    """Tests: None reads the system again; True or False replaces it."""
    global hc_pressure_override
    hc_pressure_override = -1 if value is None else int(bool(value))
