"""The NCCL transport: ``cupy.cuda.nccl`` collectives on a side stream, for
parameters on the communicator's ``cuda:N`` device. Each collective first
waits (on the GPU) for the work queued so far on the current stream (the
gradient copies into the buffer), runs on the side stream, and records an
event there; a request is that event, done when the GPU finished it. CuPy
comes through xgrad's cuda backend (the CPU stand-in in the tests)."""

import importlib

import numpy

from xgrad._backend.cuda import cupy


class NCCLTransport:

    def __init__(self, comm):
        self._cp = cupy()
        # (a submodule CuPy may not have imported yet; the stand-in sets it)
        self._nccl = getattr(self._cp.cuda, 'nccl', None) or importlib.import_module(
            self._cp.__name__ + '.cuda.nccl')
        self.comm = comm
        self.rank = comm.rank_id()
        self.size = comm.size()
        self._device_id = comm.device_id()
        self.device = 'cuda:{}'.format(self._device_id)
        with self._cp.cuda.Device(self._device_id):
            self._stream = self._cp.cuda.Stream(non_blocking=True)
        self._types = {numpy.dtype(name): getattr(self._nccl, 'NCCL_' + name.upper())
                       for name in ('float16', 'float32', 'float64', 'int64', 'uint8')}

    def empty(self, n, dtype):
        with self._cp.cuda.Device(self._device_id):
            return self._cp.empty(n, dtype)

    def from_host(self, a):
        with self._cp.cuda.Device(self._device_id):
            return self._cp.asarray(numpy.ascontiguousarray(a))

    def to_host(self, buf):
        return self._cp.asnumpy(buf)

    def _launch(self, call, *args):
        """``call(*args, stream.ptr)`` on the side stream once the current
        stream's work so far is done; the event that marks its end."""
        cuda = self._cp.cuda
        with cuda.Device(self._device_id):
            ready = cuda.Event(disable_timing=True)
            ready.record(cuda.get_current_stream())
            self._stream.wait_event(ready)
            call(*args, self._stream.ptr)
            end = cuda.Event(disable_timing=True)
            end.record(self._stream)
        return end

    def allreduce(self, send, recv):
        return self._launch(self.comm.allReduce, send.data.ptr, recv.data.ptr, send.size,
                            self._types[send.dtype], self._nccl.NCCL_SUM)

    def allgather(self, send, recv):
        return self._launch(self.comm.allGather, send.data.ptr, recv.data.ptr, send.size,
                            self._types[send.dtype])

    def broadcast(self, buf, root):
        return self._launch(self.comm.broadcast, buf.data.ptr, buf.data.ptr, buf.size,
                            self._types[buf.dtype], root)

    def done(self, requests):
        return all(event.done for event in requests)
