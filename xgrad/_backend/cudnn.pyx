# cython: boundscheck=False, wraparound=False
"""cuDNN for convolution, pooling and batch normalization on ``cuda:N``.

Our own binding of cuDNN's C API (the "legacy" descriptor API, present in
cuDNN 8 and 9): the library is opened at run time with dlopen and its
functions are looked up with dlsym, so building and importing xgrad needs
neither cudnn.h nor the library. The library is looked for, in this order:
the file named by ``XGRAD_CUDNN_LIBRARY``; ``nvidia/cudnn/lib/libcudnn.so.9``
in a ``sys.path`` folder (the ``nvidia-cudnn-cu12`` / ``-cu13`` wheels,
which the ``[cuda]`` extra and PyTorch's CUDA wheels install);
``torch/lib/libcudnn.so.9`` (PyTorch wheels that bundle it); the system's
``libcudnn.so.9``. ``XGRAD_CUDNN=0`` turns cuDNN off.

What runs through it (each behind a ``*_reason`` function that says why a
call cannot, or None when it can):

* convolution: ``convolution_forward``, ``convolution_backward_data``,
  ``convolution_backward_filter`` and ``convolution_transpose`` (backward
  data with the roles of x and y swapped), cross-correlation with stride,
  symmetric pad, dilation and groups over 1-3 spatial axes. The algorithm
  of each (direction, shapes, geometry, dtype, mode) is chosen once: by
  cuDNN's heuristics (``cudnnGet*Algorithm_v7``), or, in benchmark mode, by
  timing the candidates (``cudnnFind*AlgorithmEx``) as
  ``torch.backends.cudnn.benchmark`` and Chainer's ``autotune`` do.
  Deterministic mode keeps only deterministic algorithms. float32 runs in
  float32 (FMA math) unless TF32 is allowed.
* pooling: ``pooling_forward`` / ``pooling_backward`` (max, and average with
  or without the padding counted).
* batch normalization: ``batch_norm_forward_training`` (saved mean and
  inverse standard deviation), ``batch_norm_forward_inference``,
  ``batch_norm_backward``.

Workspaces come from CuPy's memory pool; one cuDNN handle per device and
thread, set to CuPy's current stream before each call.
"""

import contextlib
import os
import sys
import threading

import numpy

from libc.stdint cimport uintptr_t

cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char* filename, int flag)
    void* dlsym(void* handle, const char* symbol)
    char* dlerror()
    int RTLD_NOW
    int RTLD_GLOBAL


# ---------------------------------------------------------------------------
# cuDNN's types and enums (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h of 9.x;
# the same values since cuDNN 7)

ctypedef struct Perf:            # cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t
    int algo
    int status
    float time
    size_t memory
    int determinism
    int mathType
    int reserved[3]

DEF MAX_DIMS = 8

# cudnnDataType_t
DATA_FLOAT, DATA_DOUBLE, DATA_HALF = 0, 1, 2
# cudnnTensorFormat_t, cudnnConvolutionMode_t
FORMAT_NCHW = 0
CROSS_CORRELATION = 1
# cudnnMathType_t
DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, FMA_MATH = 0, 1, 2, 3
# cudnnPoolingMode_t, cudnnNanPropagation_t
POOLING_MAX, POOLING_AVERAGE_INCLUDE_PADDING, POOLING_AVERAGE_EXCLUDE_PADDING = 0, 1, 2
POOLING_MAX_DETERMINISTIC = 3
PROPAGATE_NAN = 1
# cudnnBatchNormMode_t
BATCHNORM_PER_ACTIVATION, BATCHNORM_SPATIAL = 0, 1
BN_MIN_EPSILON = 1e-5            # CUDNN_BN_MIN_EPSILON
# cudnnDeterminism_t
DETERMINISTIC = 1

_DATA_TYPES = {numpy.dtype('float16'): DATA_HALF, numpy.dtype('float32'): DATA_FLOAT,
               numpy.dtype('float64'): DATA_DOUBLE}

ctypedef size_t (*f_version)() nogil
ctypedef const char* (*f_error_string)(int) nogil
ctypedef int (*f_create)(void**) nogil
ctypedef int (*f_destroy)(void*) nogil
ctypedef int (*f_set_stream)(void*, void*) nogil
ctypedef int (*f_set_tensor)(void*, int, int, const int*, const int*) nogil
ctypedef int (*f_get_tensor)(void*, int, int*, int*, int*, int*) nogil
ctypedef int (*f_set_filter)(void*, int, int, int, const int*) nogil
ctypedef int (*f_set_conv)(void*, int, const int*, const int*, const int*, int, int) nogil
ctypedef int (*f_set_int)(void*, int) nogil
ctypedef int (*f_conv_out_dim)(void*, void*, void*, int, int*) nogil
ctypedef int (*f_get_algo)(void*, void*, void*, void*, void*, int, int*, Perf*) nogil
ctypedef int (*f_find_algo)(void*, void*, void*, void*, void*, void*, void*, void*,
                            int, int*, Perf*, void*, size_t) nogil
ctypedef int (*f_ws_size)(void*, void*, void*, void*, void*, int, size_t*) nogil
ctypedef int (*f_conv_run)(void*, const void*, void*, void*, void*, void*, void*, int,
                           void*, size_t, const void*, void*, void*) nogil
ctypedef int (*f_set_pool)(void*, int, int, int, const int*, const int*, const int*) nogil
ctypedef int (*f_pool_out_dim)(void*, void*, int, int*) nogil
ctypedef int (*f_pool_fwd)(void*, void*, const void*, void*, void*, const void*,
                           void*, void*) nogil
ctypedef int (*f_pool_bwd)(void*, void*, const void*, void*, void*, void*, void*,
                           void*, void*, const void*, void*, void*) nogil
ctypedef int (*f_derive_bn)(void*, void*, int) nogil
ctypedef int (*f_bn_train)(void*, int, const void*, const void*, void*, void*, void*,
                           void*, void*, void*, void*, double, void*, void*, double,
                           void*, void*) nogil
ctypedef int (*f_bn_infer)(void*, int, const void*, const void*, void*, void*, void*,
                           void*, void*, void*, void*, void*, void*, double) nogil
ctypedef int (*f_bn_bwd)(void*, int, const void*, const void*, const void*, const void*,
                         void*, void*, void*, void*, void*, void*, void*, void*, void*,
                         void*, double, void*, void*) nogil

cdef struct Api:
    f_version getVersion
    f_error_string getErrorString
    f_create create
    f_destroy destroy
    f_set_stream setStream
    f_create createTensor
    f_destroy destroyTensor
    f_set_tensor setTensor
    f_get_tensor getTensor
    f_create createFilter
    f_destroy destroyFilter
    f_set_filter setFilter
    f_create createConv
    f_destroy destroyConv
    f_set_conv setConv
    f_set_int setGroupCount
    f_set_int setMathType
    f_conv_out_dim convOutDim
    f_get_algo getFwdAlgo
    f_get_algo getBwdDataAlgo
    f_get_algo getBwdFilterAlgo
    f_find_algo findFwdAlgo
    f_find_algo findBwdDataAlgo
    f_find_algo findBwdFilterAlgo
    f_ws_size fwdWorkspace
    f_ws_size bwdDataWorkspace
    f_ws_size bwdFilterWorkspace
    f_conv_run convFwd
    f_conv_run convBwdData
    f_conv_run convBwdFilter
    f_create createPool
    f_destroy destroyPool
    f_set_pool setPool
    f_pool_out_dim poolOutDim
    f_pool_fwd poolFwd
    f_pool_bwd poolBwd
    f_derive_bn deriveBN
    f_bn_train bnTrain
    f_bn_infer bnInfer
    f_bn_bwd bnBwd

cdef Api api
cdef bint _loaded = False
_load_state = {'tried': False, 'path': None, 'version': None, 'reason': None}

# (field of Api, symbol): every function the binding calls
_SYMBOLS = [
    'cudnnGetVersion', 'cudnnGetErrorString', 'cudnnCreate', 'cudnnDestroy',
    'cudnnSetStream', 'cudnnCreateTensorDescriptor', 'cudnnDestroyTensorDescriptor',
    'cudnnSetTensorNdDescriptor', 'cudnnGetTensorNdDescriptor',
    'cudnnCreateFilterDescriptor', 'cudnnDestroyFilterDescriptor',
    'cudnnSetFilterNdDescriptor', 'cudnnCreateConvolutionDescriptor',
    'cudnnDestroyConvolutionDescriptor', 'cudnnSetConvolutionNdDescriptor',
    'cudnnSetConvolutionGroupCount', 'cudnnSetConvolutionMathType',
    'cudnnGetConvolutionNdForwardOutputDim',
    'cudnnGetConvolutionForwardAlgorithm_v7', 'cudnnGetConvolutionBackwardDataAlgorithm_v7',
    'cudnnGetConvolutionBackwardFilterAlgorithm_v7',
    'cudnnFindConvolutionForwardAlgorithmEx', 'cudnnFindConvolutionBackwardDataAlgorithmEx',
    'cudnnFindConvolutionBackwardFilterAlgorithmEx',
    'cudnnGetConvolutionForwardWorkspaceSize', 'cudnnGetConvolutionBackwardDataWorkspaceSize',
    'cudnnGetConvolutionBackwardFilterWorkspaceSize',
    'cudnnConvolutionForward', 'cudnnConvolutionBackwardData',
    'cudnnConvolutionBackwardFilter',
    'cudnnCreatePoolingDescriptor', 'cudnnDestroyPoolingDescriptor',
    'cudnnSetPoolingNdDescriptor', 'cudnnGetPoolingNdForwardOutputDim',
    'cudnnPoolingForward', 'cudnnPoolingBackward',
    'cudnnDeriveBNTensorDescriptor', 'cudnnBatchNormalizationForwardTraining',
    'cudnnBatchNormalizationForwardInference', 'cudnnBatchNormalizationBackward',
]


class CudnnError(RuntimeError):
    """A cuDNN call returned an error status."""

    def __init__(self, call, status):
        self.call = call
        self.status = status
        text = ''
        if _loaded:
            text = (<bytes>api.getErrorString(status)).decode('ascii', 'replace')
        super().__init__('{} failed: {} (status {})'.format(call, text, status))


cdef inline void check(int status, str call) except *:
    if status != 0:
        raise CudnnError(call, status)


def candidate_paths():
    """The library files to try, in order (existing files first by rule,
    then the bare name for the system's loader)."""
    paths = []
    explicit = os.environ.get('XGRAD_CUDNN_LIBRARY')
    if explicit:
        paths.append(explicit)
    for folder in sys.path:
        folder = folder or os.getcwd()
        for sub in (('nvidia', 'cudnn', 'lib'), ('torch', 'lib')):
            path = os.path.join(folder, *sub, 'libcudnn.so.9')
            if os.path.isfile(path) and path not in paths:
                paths.append(path)
    paths.append('libcudnn.so.9')
    return paths


@contextlib.contextmanager
def turned_off():
    """``XGRAD_CUDNN=0`` inside the block, as set before it after: the
    fallback paths, for reference values and for benchmarks of both."""
    previous = os.environ.get('XGRAD_CUDNN')
    os.environ['XGRAD_CUDNN'] = '0'
    try:
        yield
    finally:
        if previous is None:
            del os.environ['XGRAD_CUDNN']
        else:
            os.environ['XGRAD_CUDNN'] = previous


def disabled_reason():
    """Why cuDNN is off by configuration (``XGRAD_CUDNN=0``), else None."""
    if os.environ.get('XGRAD_CUDNN', '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return 'XGRAD_CUDNN=0'
    return None


def _load():
    """Open the library and resolve every function once; sets the state's
    path/version or its reason."""
    global _loaded
    if _load_state['tried']:
        return
    _load_state['tried'] = True
    cdef void* lib = NULL
    cdef void* sym
    errors = []
    for path in candidate_paths():
        lib = dlopen(path.encode(), RTLD_NOW | RTLD_GLOBAL)
        if lib != NULL:
            break
        err = dlerror()
        errors.append(err.decode('utf-8', 'replace') if err != NULL else path)
    if lib == NULL:
        _load_state['reason'] = 'libcudnn.so.9 not found (pip install nvidia-cudnn-cu13 ' \
            'or -cu12, as the [cuda] extra does; tried: {})'.format(
            '; '.join(errors[max(0, len(errors) - 2):]))  # (wraparound is off)
        return
    cdef void** slots = <void**>&api
    assert len(_SYMBOLS) * sizeof(void*) == sizeof(Api)
    for i, name in enumerate(_SYMBOLS):
        sym = dlsym(lib, name.encode())
        if sym == NULL:
            _load_state['reason'] = '{} lacks {}'.format(path, name)
            return
        slots[i] = sym
    version = api.getVersion()
    if version < 8000:
        _load_state['reason'] = 'cuDNN {} is too old (8.0 or newer needed)'.format(version)
        return
    _load_state['path'] = path
    _load_state['version'] = version
    _loaded = True


def available():
    """Whether the cuDNN library is loaded (not whether a GPU is usable)."""
    if disabled_reason():
        return False
    _load()
    return _loaded


def reason():
    """Why cuDNN is not used (None when the library is loaded)."""
    off = disabled_reason()
    if off:
        return off
    _load()
    return _load_state['reason']


def version():
    """cuDNN's version number (e.g. 92801), or None when not loaded."""
    return _load_state['version'] if available() else None


def version_string():
    """'9.28.1' or None."""
    v = version()
    if v is None:
        return None
    major = v // 10000 if v >= 90000 else v // 1000
    rest = v % 10000 if v >= 90000 else v % 1000
    return '{}.{}.{}'.format(major, rest // 100, rest % 100)


def library_path():
    return _load_state['path'] if available() else None


# ---------------------------------------------------------------------------
# Configuration: benchmark (autotune), deterministic, TF32, workspace limit

def _env_flag(name):
    return os.environ.get(name, '').strip().lower() in ('1', 'true', 'yes', 'on')


config = {
    'benchmark': _env_flag('XGRAD_CUDNN_BENCHMARK'),
    'deterministic': _env_flag('XGRAD_CUDNN_DETERMINISTIC'),
    'allow_tf32': _env_flag('XGRAD_CUDNN_TF32'),
    'workspace_limit': int(os.environ.get('XGRAD_CUDNN_WORKSPACE_MB', '1024')) << 20,
}


def set_benchmark(flag=True):
    """Benchmark mode: time cuDNN's candidate convolution algorithms once per
    shape and keep the fastest (``XGRAD_CUDNN_BENCHMARK=1``); off: cuDNN's
    heuristics choose. Returns the previous setting."""
    previous = config['benchmark']
    config['benchmark'] = bool(flag)
    return previous


def set_deterministic(flag=True):
    """Only deterministic algorithms (``XGRAD_CUDNN_DETERMINISTIC=1``);
    returns the previous setting."""
    previous = config['deterministic']
    config['deterministic'] = bool(flag)
    return previous


def set_allow_tf32(flag=True):
    """Let float32 convolutions use TF32 tensor cores (``XGRAD_CUDNN_TF32=1``;
    off by default: float32 is computed in float32, as on the CPU)."""
    previous = config['allow_tf32']
    config['allow_tf32'] = bool(flag)
    return previous


# ---------------------------------------------------------------------------
# Descriptors (need the library, not a GPU)

cdef int _fill(list values, int* out) except -1:
    if len(values) > MAX_DIMS:
        raise ValueError('cuDNN descriptors take at most {} dimensions'.format(MAX_DIMS))
    for i, v in enumerate(values):
        out[i] = v
    return len(values)


def packed_strides(shape):
    """C-contiguous strides in elements."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


cdef class Descriptor:
    """An owned cuDNN descriptor, destroyed with the object."""
    cdef void* ptr
    cdef f_destroy destroy
    cdef readonly str kind

    def __dealloc__(self):
        if self.ptr != NULL:
            self.destroy(self.ptr)

    @property
    def address(self):
        return <uintptr_t>self.ptr


cdef Descriptor _new(str kind, f_create create, f_destroy destroy):
    cdef Descriptor d = Descriptor.__new__(Descriptor)
    d.kind = kind
    d.destroy = destroy
    check(create(&d.ptr), 'cudnnCreate{}Descriptor'.format(kind))
    return d


def _require():
    if not available():
        raise RuntimeError('cuDNN is not available: {}'.format(reason()))


def tensor_descriptor(shape, dtype):
    """A packed NCHW-order tensor descriptor of ``shape`` (4 to 8 axes)."""
    _require()
    cdef int dims[MAX_DIMS]
    cdef int strides[MAX_DIMS]
    cdef Descriptor d = _new('Tensor', api.createTensor, api.destroyTensor)
    n = _fill([int(s) for s in shape], dims)
    _fill(list(packed_strides(shape)), strides)
    check(api.setTensor(d.ptr, _DATA_TYPES[numpy.dtype(dtype)], n, dims, strides),
          'cudnnSetTensorNdDescriptor')
    return d


def tensor_shape(Descriptor d):
    """(data type, shape, strides) read back from a tensor descriptor."""
    cdef int dtype, n
    cdef int dims[MAX_DIMS]
    cdef int strides[MAX_DIMS]
    check(api.getTensor(d.ptr, MAX_DIMS, &dtype, &n, dims, strides),
          'cudnnGetTensorNdDescriptor')
    return dtype, tuple(dims[i] for i in range(n)), tuple(strides[i] for i in range(n))


def filter_descriptor(shape, dtype):
    _require()
    cdef int dims[MAX_DIMS]
    cdef Descriptor d = _new('Filter', api.createFilter, api.destroyFilter)
    n = _fill([int(s) for s in shape], dims)
    check(api.setFilter(d.ptr, _DATA_TYPES[numpy.dtype(dtype)], FORMAT_NCHW, n, dims),
          'cudnnSetFilterNdDescriptor')
    return d


def compute_type(dtype):
    """The accumulation type of a convolution on ``dtype`` data: float for
    float16 (cuDNN's pseudo-half configuration) and float32, double for
    float64."""
    return DATA_DOUBLE if numpy.dtype(dtype) == numpy.float64 else DATA_FLOAT


def convolution_descriptor(pad, stride, dilation, groups, dtype):
    _require()
    cdef int p[MAX_DIMS]
    cdef int s[MAX_DIMS]
    cdef int dl[MAX_DIMS]
    cdef Descriptor d = _new('Convolution', api.createConv, api.destroyConv)
    n = _fill(list(pad), p)
    _fill(list(stride), s)
    _fill(list(dilation), dl)
    check(api.setConv(d.ptr, n, p, s, dl, CROSS_CORRELATION, compute_type(dtype)),
          'cudnnSetConvolutionNdDescriptor')
    check(api.setGroupCount(d.ptr, groups), 'cudnnSetConvolutionGroupCount')
    return d


def convolution_output_shape(Descriptor conv, Descriptor x, Descriptor w, int ndim):
    """cuDNN's output shape of a forward convolution (no GPU needed)."""
    cdef int dims[MAX_DIMS]
    check(api.convOutDim(conv.ptr, x.ptr, w.ptr, ndim, dims),
          'cudnnGetConvolutionNdForwardOutputDim')
    return tuple(dims[i] for i in range(ndim))


def pooling_descriptor(mode, ksize, stride, pad):
    _require()
    cdef int k[MAX_DIMS]
    cdef int s[MAX_DIMS]
    cdef int p[MAX_DIMS]
    cdef Descriptor d = _new('Pooling', api.createPool, api.destroyPool)
    n = _fill(list(ksize), k)
    _fill(list(pad), p)
    _fill(list(stride), s)
    check(api.setPool(d.ptr, mode, PROPAGATE_NAN, n, k, p, s), 'cudnnSetPoolingNdDescriptor')
    return d


def pooling_output_shape(Descriptor pool, Descriptor x, int ndim):
    cdef int dims[MAX_DIMS]
    check(api.poolOutDim(pool.ptr, x.ptr, ndim, dims), 'cudnnGetPoolingNdForwardOutputDim')
    return tuple(dims[i] for i in range(ndim))


def batch_norm_descriptor(Descriptor x, mode):
    """The per-channel parameter descriptor cuDNN derives from x's."""
    _require()
    cdef Descriptor d = _new('Tensor', api.createTensor, api.destroyTensor)
    check(api.deriveBN(d.ptr, x.ptr, mode), 'cudnnDeriveBNTensorDescriptor')
    return d


# ---------------------------------------------------------------------------
# Handles: one per (thread, device), on CuPy's current stream

_handles = threading.local()


cdef bint _exiting = False


def _at_exit():
    global _exiting
    _exiting = True  # (CUDA may be torn down before the handles: leave them)


import atexit
atexit.register(_at_exit)


cdef class Handle:
    cdef void* ptr
    cdef uintptr_t stream
    cdef readonly int device

    def __dealloc__(self):
        if self.ptr != NULL and not _exiting:
            api.destroy(self.ptr)


def _cupy():
    from xgrad._backend import cuda
    return cuda.cupy()


def device_reason(cp=None):
    """Why cuDNN cannot run on the current device: off, not loaded, CuPy a
    stand-in, or cudnnCreate's error; None when it can."""
    why = reason()
    if why:
        return why
    cp = _cupy() if cp is None else cp
    if getattr(cp, '__name__', '') != 'cupy':
        return 'CuPy is a stand-in ({})'.format(getattr(cp, '__name__', '?'))
    try:
        handle(cp)
    except Exception as e:  # no GPU, a driver too old for this cuDNN...
        return '{}: {}'.format(type(e).__name__, e)
    return None


cdef Handle handle(cp):
    """The current device's handle, set to CuPy's current stream."""
    cdef dict table
    cdef Handle h
    device = cp.cuda.runtime.getDevice()
    table = getattr(_handles, 'table', None)
    if table is None:
        table = _handles.table = {}
    h = table.get(device)
    if h is None:
        if device in _failed_devices:
            raise _failed_devices[device]
        h = Handle.__new__(Handle)
        h.device = device
        try:
            check(api.create(&h.ptr), 'cudnnCreate')
        except CudnnError as e:
            _failed_devices[device] = e
            raise
        h.stream = <uintptr_t>-1
        table[device] = h
    cdef uintptr_t stream = cp.cuda.get_current_stream().ptr
    if stream != h.stream:
        check(api.setStream(h.ptr, <void*>stream), 'cudnnSetStream')
        h.stream = stream
    return h


_failed_devices = {}


# ---------------------------------------------------------------------------
# Shared helpers

cdef inline void* ptr(a):
    return <void*><uintptr_t>a.data.ptr


cdef class _Scalars:
    """alpha = 1 and beta = 0 (or 1) in the precision cuDNN reads them:
    double for double data, float otherwise."""
    cdef double d[3]
    cdef float f[3]

    def __cinit__(self):
        self.d[0], self.d[1], self.d[2] = 1.0, 0.0, 1.0
        self.f[0], self.f[1], self.f[2] = 1.0, 0.0, 1.0


cdef _Scalars _scalars = _Scalars()


cdef inline const void* one(bint double):
    return <const void*>&_scalars.d[0] if double else <const void*>&_scalars.f[0]


cdef inline const void* zero(bint double):
    return <const void*>&_scalars.d[1] if double else <const void*>&_scalars.f[1]


_INT_MAX = 2 ** 31 - 1


def _shape_reason(*shapes):
    for shape in shapes:
        if any(int(n) == 0 for n in shape):
            return 'an empty array'
        if numpy.prod(shape, dtype=numpy.int64) > _INT_MAX:
            return 'an array of 2**31 elements or more'
    return None


def _as_2d_spatial(shape):
    """(N, C, w) as (N, C, 1, w): cuDNN takes 2 or 3 spatial axes."""
    shape = tuple(int(n) for n in shape)
    return shape if len(shape) > 3 else shape[:2] + (1,) + shape[2:]


def _lift(values, fill):
    """Per-axis values of one spatial axis lifted to two."""
    values = tuple(int(v) for v in values)
    return values if len(values) > 1 else (fill,) + values


class _Cache:
    """Plans by key, the least recently used dropped past ``size``."""

    def __init__(self, size=512):
        self.size = size
        self.table = {}

    def get(self, key, make):
        plan = self.table.pop(key, None)
        if plan is None:
            plan = make()
            if len(self.table) >= self.size:
                del self.table[next(iter(self.table))]
        self.table[key] = plan
        return plan

    def clear(self):
        self.table.clear()

    def __len__(self):
        return len(self.table)


_plans = _Cache()


def clear_plans():
    """Forget every plan and chosen algorithm (e.g. after changing modes)."""
    _plans.clear()


def plan_count():
    return len(_plans)


# ---------------------------------------------------------------------------
# Convolution

def convolution_reason(x_shape, w_shape, dtype, stride, pad, dilation, groups):
    """None when cuDNN can run this convolution (x (N, C, *spatial), w
    (K, C / groups, *ksize)); else why not."""
    if not available():
        return reason()
    n = len(x_shape) - 2
    if n < 1 or n > 3:
        return '{} spatial axes (cuDNN takes 1 to 3)'.format(n)
    if numpy.dtype(dtype) not in _DATA_TYPES:
        return 'dtype {}'.format(numpy.dtype(dtype))
    if any(len(t) != n for t in (stride, pad, dilation)) or len(w_shape) != n + 2:
        return 'geometry of another rank than x'
    if any(int(p) < 0 for p in pad):
        return 'negative pad'
    return _shape_reason(x_shape, w_shape)


def _conv_key(kind, x_shape, w_shape, y_shape, dtype, stride, pad, dilation, groups, device):
    return (kind, device, numpy.dtype(dtype).char, tuple(x_shape), tuple(w_shape),
            tuple(y_shape), tuple(stride), tuple(pad), tuple(dilation), int(groups),
            config['benchmark'], config['deterministic'], config['allow_tf32'])


class ConvPlan:
    """The descriptors of one convolution (x, w, y as the forward sees them)
    and, per direction, the algorithm chosen for it: (algo, math type,
    workspace bytes)."""

    def __init__(self, x_shape, w_shape, y_shape, dtype, stride, pad, dilation, groups):
        self.dtype = numpy.dtype(dtype)
        self.double = self.dtype == numpy.float64
        self.x_shape = _as_2d_spatial(x_shape)
        self.w_shape = _as_2d_spatial(w_shape)
        self.y_shape = _as_2d_spatial(y_shape)
        self.x = tensor_descriptor(self.x_shape, dtype)
        self.w = filter_descriptor(self.w_shape, dtype)
        self.y = tensor_descriptor(self.y_shape, dtype)
        self.conv = convolution_descriptor(_lift(pad, 0), _lift(stride, 1),
                                           _lift(dilation, 1), int(groups), dtype)
        self.algos = {}

    def output_shape(self):
        """cuDNN's forward output shape for x and w (no GPU needed)."""
        return convolution_output_shape(self.conv, self.x, self.w, len(self.x_shape))


def _plan(kind, x_shape, w_shape, y_shape, dtype, stride, pad, dilation, groups, device):
    key = _conv_key(kind, x_shape, w_shape, y_shape, dtype, stride, pad, dilation, groups,
                    device)
    return _plans.get(key, lambda: ConvPlan(x_shape, w_shape, y_shape, dtype, stride, pad,
                                            dilation, groups))


DIRECTIONS = ('forward', 'backward_data', 'backward_filter')


def _math_type(plan, int perf_math):
    """The math type to run an algorithm in: no TF32 for float32 unless
    allowed (FMA), cuDNN's choice otherwise."""
    if plan.dtype == numpy.float32 and not config['allow_tf32']:
        return FMA_MATH
    return perf_math


def _workspace_size(Handle h, plan, str direction, int algo):
    """The workspace bytes of ``algo`` for ``direction``, or -1 where cuDNN
    says it cannot run here."""
    cdef size_t size = 0
    cdef Descriptor x = plan.x, w = plan.w, y = plan.y, conv = plan.conv
    cdef int status
    if direction == 'forward':
        status = api.fwdWorkspace(h.ptr, x.ptr, w.ptr, conv.ptr, y.ptr, algo, &size)
    elif direction == 'backward_data':
        status = api.bwdDataWorkspace(h.ptr, w.ptr, y.ptr, conv.ptr, x.ptr, algo, &size)
    else:
        status = api.bwdFilterWorkspace(h.ptr, x.ptr, y.ptr, conv.ptr, w.ptr, algo, &size)
    return -1 if status != 0 else size


def _candidates(Handle h, plan, str direction):
    """cuDNN's heuristic ranking: [(algo, math type, deterministic)] of the
    algorithms it reports as runnable."""
    cdef Perf perf[16]
    cdef int count = 0
    cdef Descriptor x = plan.x, w = plan.w, y = plan.y, conv = plan.conv
    check(api.setMathType(conv.ptr, _math_type(plan, DEFAULT_MATH)),
          'cudnnSetConvolutionMathType')
    if direction == 'forward':
        check(api.getFwdAlgo(h.ptr, x.ptr, w.ptr, conv.ptr, y.ptr, 16, &count, perf),
              'cudnnGetConvolutionForwardAlgorithm_v7')
    elif direction == 'backward_data':
        check(api.getBwdDataAlgo(h.ptr, w.ptr, y.ptr, conv.ptr, x.ptr, 16, &count, perf),
              'cudnnGetConvolutionBackwardDataAlgorithm_v7')
    else:
        check(api.getBwdFilterAlgo(h.ptr, x.ptr, y.ptr, conv.ptr, w.ptr, 16, &count, perf),
              'cudnnGetConvolutionBackwardFilterAlgorithm_v7')
    return [(perf[i].algo, perf[i].mathType, perf[i].determinism == DETERMINISTIC)
            for i in range(count) if perf[i].status == 0]


def _benchmark(Handle h, plan, str direction, a, b, out, cp):
    """cuDNN's timing of every algorithm on these buffers (``out`` is
    overwritten): [(algo, math type, deterministic)], fastest first."""
    cdef Perf perf[16]
    cdef int count = 0
    cdef Descriptor x = plan.x, w = plan.w, y = plan.y, conv = plan.conv
    cdef int status
    limit = config['workspace_limit']
    ws = None
    while ws is None and limit >= (1 << 20):
        try:
            ws = cp.empty((limit,), dtype=cp.uint8)
        except Exception:  # (out of memory: a smaller limit)
            limit //= 2
    if ws is None:
        ws, limit = cp.empty((0,), dtype=cp.uint8), 0
    cdef void* wsp = ptr(ws) if limit else NULL
    cdef size_t wsize = limit
    check(api.setMathType(conv.ptr, _math_type(plan, DEFAULT_MATH)),
          'cudnnSetConvolutionMathType')
    if direction == 'forward':
        status = api.findFwdAlgo(h.ptr, x.ptr, ptr(a), w.ptr, ptr(b), conv.ptr, y.ptr,
                                 ptr(out), 16, &count, perf, wsp, wsize)
    elif direction == 'backward_data':
        status = api.findBwdDataAlgo(h.ptr, w.ptr, ptr(a), y.ptr, ptr(b), conv.ptr, x.ptr,
                                     ptr(out), 16, &count, perf, wsp, wsize)
    else:
        status = api.findBwdFilterAlgo(h.ptr, x.ptr, ptr(a), y.ptr, ptr(b), conv.ptr, w.ptr,
                                       ptr(out), 16, &count, perf, wsp, wsize)
    check(status, 'cudnnFind{}AlgorithmEx'.format(direction))
    del ws
    return [(perf[i].algo, perf[i].mathType, perf[i].determinism == DETERMINISTIC)
            for i in range(count) if perf[i].status == 0 and perf[i].memory <= limit]


def _choose(Handle h, plan, str direction, a, b, out, cp):
    """(algo, math type, workspace bytes) for ``direction``, chosen once per
    plan: the first candidate (heuristic or timed order) that is
    deterministic where required and fits the workspace limit."""
    chosen = plan.algos.get(direction)
    if chosen is not None:
        return chosen
    if config['benchmark']:
        candidates = _benchmark(h, plan, direction, a, b, out, cp)
    else:
        candidates = _candidates(h, plan, direction)
    for algo, math, deterministic in candidates:
        if config['deterministic'] and not deterministic:
            continue
        math = _math_type(plan, math)
        check(api.setMathType((<Descriptor>plan.conv).ptr, math),
              'cudnnSetConvolutionMathType')
        size = _workspace_size(h, plan, direction, algo)
        if size < 0 or size > config['workspace_limit']:
            continue
        chosen = plan.algos[direction] = (algo, math, size)
        return chosen
    raise CudnnError('choosing a {} algorithm ({} candidates{})'.format(
        direction, len(candidates), ', deterministic only' if config['deterministic'] else ''),
        9)


def chosen_algorithms():
    """{plan key: {direction: (algo, math type, workspace bytes)}}."""
    return {k: dict(p.algos) for k, p in _plans.table.items() if isinstance(p, ConvPlan)}


def _run(str direction, plan, a, b, out, cp):
    """One convolution call of ``direction`` writing ``out``; a, b are
    (x, w) forward, (w, gy) backward data, (x, gy) backward filter."""
    cdef Handle h = handle(cp)
    algo, math, size = _choose(h, plan, direction, a, b, out, cp)
    cdef Descriptor x = plan.x, w = plan.w, y = plan.y, conv = plan.conv
    check(api.setMathType(conv.ptr, math), 'cudnnSetConvolutionMathType')
    ws = cp.empty((size,), dtype=cp.uint8) if size else None
    cdef void* wsp = ptr(ws) if size else NULL
    cdef size_t wsize = size
    cdef bint dbl = plan.double
    cdef int status
    if direction == 'forward':
        status = api.convFwd(h.ptr, one(dbl), x.ptr, ptr(a), w.ptr, ptr(b), conv.ptr, algo,
                             wsp, wsize, zero(dbl), y.ptr, ptr(out))
    elif direction == 'backward_data':
        status = api.convBwdData(h.ptr, one(dbl), w.ptr, ptr(a), y.ptr, ptr(b), conv.ptr,
                                 algo, wsp, wsize, zero(dbl), x.ptr, ptr(out))
    else:
        status = api.convBwdFilter(h.ptr, one(dbl), x.ptr, ptr(a), y.ptr, ptr(b), conv.ptr,
                                   algo, wsp, wsize, zero(dbl), w.ptr, ptr(out))
    check(status, 'cudnnConvolution{}'.format(''.join(
        p.capitalize() for p in direction.split('_'))))
    return out


def conv_out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _contiguous(cp, a):
    return a if a.flags.c_contiguous else cp.ascontiguousarray(a)


def _convolve(direction, a, b, x_shape, w_shape, y_shape, stride, pad, dilation, groups):
    """One convolution call of ``direction`` ('forward': a, b = x, w;
    'backward_data': w, gy; 'backward_filter': x, gy) into a new array of
    x's, w's or y's shape; operands made C-contiguous, dilation 1 by
    default."""
    cp = _cupy()
    dilation = (1,) * (len(x_shape) - 2) if dilation is None else tuple(dilation)
    a, b = _contiguous(cp, a), _contiguous(cp, b)
    x_shape, w_shape, y_shape = tuple(x_shape), tuple(w_shape), tuple(y_shape)
    plan = _plan('conv', x_shape, w_shape, y_shape, a.dtype, stride, pad, dilation, groups,
                 a.device.id)
    out_shape = {'forward': y_shape, 'backward_data': x_shape,
                 'backward_filter': w_shape}[direction]
    return _run(direction, plan, a, b, cp.empty(out_shape, dtype=a.dtype), cp)


def convolution_forward(x, w, stride, pad, dilation=None, groups=1):
    """y = x (*) w: x (N, C, *spatial), w (K, C / groups, *ksize), CuPy
    arrays of one float dtype; no bias (add it to y)."""
    dilation = (1,) * (x.ndim - 2) if dilation is None else tuple(dilation)
    ysp = tuple(conv_out_size(d, k, s, p, dl) for d, k, s, p, dl in zip(
        x.shape[2:], w.shape[2:], stride, pad, dilation))
    return _convolve('forward', x, w, x.shape, w.shape, (x.shape[0], w.shape[0]) + ysp, stride,
                     pad, dilation, groups)


def convolution_backward_data(w, gy, x_shape, stride, pad, dilation=None, groups=1):
    """gx of ``convolution_forward`` (x of ``x_shape``) for gy."""
    return _convolve('backward_data', w, gy, x_shape, w.shape, gy.shape, stride, pad, dilation,
                     groups)


def convolution_backward_filter(x, gy, w_shape, stride, pad, dilation=None, groups=1):
    """gw of ``convolution_forward`` (w of ``w_shape``) for x and gy."""
    return _convolve('backward_filter', x, gy, x.shape, w_shape, gy.shape, stride, pad,
                     dilation, groups)


def convolution_transpose(x, w, outsize, stride, pad, dilation=None, groups=1):
    """The transposed convolution (Chainer's deconvolution): x (N, C_in,
    *spatial), w (C_in, C_out / groups, *ksize), y (N, C_out, *outsize); the
    backward data of the convolution from y to x. Its gradients:
    gx = convolution_forward(gy, w), gw = convolution_backward_filter(gy, x)."""
    return convolution_backward_data(
        w, x, (x.shape[0], w.shape[1] * groups) + tuple(outsize), stride, pad, dilation,
        groups)


# ---------------------------------------------------------------------------
# Pooling

def pooling_reason(x_shape, dtype, ksize, stride, pad, mode):
    """None when cuDNN pools like xgrad here; else why not."""
    if not available():
        return reason()
    n = len(x_shape) - 2
    if n < 1 or n > 3:
        return '{} spatial axes (cuDNN pools 1 to 3)'.format(n)
    if numpy.dtype(dtype) not in _DATA_TYPES:
        return 'dtype {}'.format(numpy.dtype(dtype))
    if any(p >= k for p, k in zip(pad, ksize)):
        # (xgrad's windows wholly in the padding: 0 or nan; cuDNN refuses)
        return 'pad >= ksize'
    return _shape_reason(x_shape)


class PoolPlan:
    def __init__(self, x_shape, y_shape, dtype, mode, ksize, stride, pad):
        self.double = numpy.dtype(dtype) == numpy.float64
        self.x = tensor_descriptor(_as_2d_spatial(x_shape), dtype)
        self.y = tensor_descriptor(_as_2d_spatial(y_shape), dtype)
        self.pool = pooling_descriptor(mode, _lift(ksize, 1), _lift(stride, 1), _lift(pad, 0))

    def output_shape(self):
        return pooling_output_shape(self.pool, self.x, len(_as_2d_spatial(
            tensor_shape(self.x)[1])))


def pooling_mode(kind, pad_mode=None):
    """cuDNN's mode for xgrad's max pooling, or average pooling with
    pad_mode 'ignore' (padding not counted) / 'zero' (counted)."""
    if kind == 'max':
        return POOLING_MAX_DETERMINISTIC if config['deterministic'] else POOLING_MAX
    return POOLING_AVERAGE_EXCLUDE_PADDING if pad_mode == 'ignore' \
        else POOLING_AVERAGE_INCLUDE_PADDING


def _pool_plan(x_shape, y_shape, dtype, mode, ksize, stride, pad, device):
    key = ('pool', device, numpy.dtype(dtype).char, tuple(x_shape), tuple(y_shape), mode,
           tuple(ksize), tuple(stride), tuple(pad))
    return _plans.get(key, lambda: PoolPlan(x_shape, y_shape, dtype, mode, ksize, stride, pad))


def pooling_forward(x, y_spatial, mode, ksize, stride, pad):
    """y (N, C, *y_spatial) pooled from CuPy x."""
    cp = _cupy()
    x = _contiguous(cp, x)
    y = cp.empty(x.shape[:2] + tuple(y_spatial), dtype=x.dtype)
    plan = _pool_plan(x.shape, y.shape, x.dtype, mode, ksize, stride, pad, x.device.id)
    cdef Handle h = handle(cp)
    cdef Descriptor pool = plan.pool, xd = plan.x, yd = plan.y
    cdef bint dbl = plan.double
    check(api.poolFwd(h.ptr, pool.ptr, one(dbl), xd.ptr, ptr(x), zero(dbl), yd.ptr, ptr(y)),
          'cudnnPoolingForward')
    return y


def pooling_backward(x_shape, x, y, gy, mode, ksize, stride, pad):
    """gx (of ``x_shape``) of the pooling for gy. x and y (the forward's) may
    be None for average pooling, whose gradient depends on gy alone: buffers
    of their shapes stand in, gy for y and an unwritten buffer from CuPy's
    pool for x (not gx: cuDNN's inputs and its output must not alias)."""
    cp = _cupy()
    gy = _contiguous(cp, gy)
    gx = cp.empty(tuple(x_shape), dtype=gy.dtype)
    x = cp.empty_like(gx) if x is None else _contiguous(cp, x)
    y = gy if y is None else _contiguous(cp, y)
    plan = _pool_plan(gx.shape, gy.shape, gy.dtype, mode, ksize, stride, pad, gy.device.id)
    cdef Handle h = handle(cp)
    cdef Descriptor pool = plan.pool, xd = plan.x, yd = plan.y
    cdef bint dbl = plan.double
    check(api.poolBwd(h.ptr, pool.ptr, one(dbl), yd.ptr, ptr(y), yd.ptr, ptr(gy), xd.ptr,
                      ptr(x), zero(dbl), xd.ptr, ptr(gx)), 'cudnnPoolingBackward')
    return gx


# ---------------------------------------------------------------------------
# Batch normalization

def batch_norm_mode(merged_reduced):
    """cuDNN's mode for x merged to (N, C, L) reduced over N and L
    (spatial) or (N, D) reduced over N (per activation); None otherwise."""
    pattern = tuple(bool(r) for r in merged_reduced)
    if pattern == (True, False, True):
        return BATCHNORM_SPATIAL
    if pattern == (True, False):
        return BATCHNORM_PER_ACTIVATION
    return None


def batch_norm_reason(merged, merged_reduced, dtype, eps, count):
    if not available():
        return reason()
    if batch_norm_mode(merged_reduced) is None:
        return 'statistics over axes cuDNN does not reduce'
    if numpy.dtype(dtype) not in _DATA_TYPES:
        return 'dtype {}'.format(numpy.dtype(dtype))
    if eps < BN_MIN_EPSILON:
        return 'eps {} < CUDNN_BN_MIN_EPSILON (1e-5)'.format(eps)
    if count < 2:
        return 'statistics over fewer than 2 elements'
    return _shape_reason(merged)


class BatchNormPlan:
    def __init__(self, merged, mode, dtype):
        shape = tuple(merged) + (1,) * (4 - len(merged))
        self.shape = shape
        self.mode = mode
        self.double = numpy.dtype(dtype) == numpy.float64
        self.x = tensor_descriptor(shape, dtype)
        self.params = batch_norm_descriptor(self.x, mode)
        # float32 parameters for float16 x, x's dtype otherwise
        self.param_dtype = numpy.dtype(numpy.float64 if self.double else numpy.float32)


def _bn_plan(merged, mode, dtype, device):
    key = ('bn', device, numpy.dtype(dtype).char, tuple(merged), mode)
    return _plans.get(key, lambda: BatchNormPlan(merged, mode, dtype))


def batch_norm_forward_training(x, gamma, beta, merged, mode, eps):
    """(y, saved mean, saved inverse std) of x viewed as ``merged``; gamma,
    beta (one per channel) in the parameter dtype. Running averages are not
    touched (xgrad updates them from the saved statistics)."""
    cp = _cupy()
    x = _contiguous(cp, x)
    plan = _bn_plan(merged, mode, x.dtype, x.device.id)
    y = cp.empty(x.shape, dtype=x.dtype)
    channels = plan.shape[1] * (plan.shape[2] * plan.shape[3] if mode == 0 else 1)
    mean = cp.empty((channels,), dtype=plan.param_dtype)
    inv_std = cp.empty((channels,), dtype=plan.param_dtype)
    gamma = _contiguous(cp, gamma.astype(plan.param_dtype, copy=False))
    beta = _contiguous(cp, beta.astype(plan.param_dtype, copy=False))
    cdef Handle h = handle(cp)
    cdef Descriptor xd = plan.x, pd = plan.params
    cdef bint dbl = plan.double
    check(api.bnTrain(h.ptr, mode, one(dbl), zero(dbl), xd.ptr, ptr(x), xd.ptr, ptr(y),
                      pd.ptr, ptr(gamma), ptr(beta), 1.0, NULL, NULL, eps, ptr(mean),
                      ptr(inv_std)), 'cudnnBatchNormalizationForwardTraining')
    return y, mean, inv_std


def batch_norm_forward_inference(x, gamma, beta, mean, var, merged, mode, eps):
    """y of x normalized by the given statistics (x viewed as ``merged``)."""
    cp = _cupy()
    x = _contiguous(cp, x)
    plan = _bn_plan(merged, mode, x.dtype, x.device.id)
    y = cp.empty(x.shape, dtype=x.dtype)
    gamma, beta, mean, var = [_contiguous(cp, a.astype(plan.param_dtype, copy=False))
                              for a in (gamma, beta, mean, var)]
    cdef Handle h = handle(cp)
    cdef Descriptor xd = plan.x, pd = plan.params
    cdef bint dbl = plan.double
    check(api.bnInfer(h.ptr, mode, one(dbl), zero(dbl), xd.ptr, ptr(x), xd.ptr, ptr(y),
                      pd.ptr, ptr(gamma), ptr(beta), ptr(mean), ptr(var), eps),
          'cudnnBatchNormalizationForwardInference')
    return y


def batch_norm_backward(x, gy, gamma, mean, inv_std, merged, mode, eps):
    """(gx, ggamma, gbeta) from the saved statistics of the training forward."""
    cp = _cupy()
    x, gy = _contiguous(cp, x), _contiguous(cp, gy)
    plan = _bn_plan(merged, mode, x.dtype, x.device.id)
    gx = cp.empty(x.shape, dtype=x.dtype)
    gamma = _contiguous(cp, gamma.astype(plan.param_dtype, copy=False))
    ggamma = cp.empty(gamma.shape, dtype=plan.param_dtype)
    gbeta = cp.empty(gamma.shape, dtype=plan.param_dtype)
    cdef Handle h = handle(cp)
    cdef Descriptor xd = plan.x, pd = plan.params
    cdef bint dbl = plan.double
    check(api.bnBwd(h.ptr, mode, one(dbl), zero(dbl), one(dbl), zero(dbl), xd.ptr, ptr(x),
                    xd.ptr, ptr(gy), xd.ptr, ptr(gx), pd.ptr, ptr(gamma), ptr(ggamma),
                    ptr(gbeta), eps, ptr(mean), ptr(inv_std)),
          'cudnnBatchNormalizationBackward')
    return gx, ggamma, gbeta


# ---------------------------------------------------------------------------
# Failures at run time: the op falls back, the failure is kept for tests
# and `xgrad info`

failures = {}


def record_failure(kind, error):
    """Turn cuDNN off for ``kind`` ('conv', 'pool', 'batch_norm') after an
    error, keeping the first one; the caller runs its fallback."""
    if kind not in failures:
        import warnings
        warnings.warn('cuDNN {} failed, falling back: {}'.format(kind, error), RuntimeWarning)
        failures[kind] = '{}: {}'.format(type(error).__name__, error)


def use_for(kind, cp, data):
    """Whether ``kind`` runs through cuDNN for the CuPy array ``data``:
    cuDNN loaded and working on its device, not failed for ``kind``."""
    if kind in failures or not available():
        return False
    return device_reason(cp) is None


# Which xgrad ops call cuDNN on cuda devices (convolution: the conv
# dispatcher's 'cudnn' entries, xgrad/_ops/_conv/dispatch.py).
WIRED = {'conv': 'conv, conv_transpose and their gradients', 'pool': 'max_pool, average_pool',
         'batch_norm': 'batch_norm, fixed_batch_norm'}
_FALLBACK = {'conv': 'im2col', 'pool': 'strided windows', 'batch_norm': 'CuPy routines'}


def path(kind):
    """What runs ``kind`` ('conv', 'pool', 'batch_norm') on cuda devices:
    'cudnn 9.28.1' or '<fallback>: <why not cuDNN>' (for `xgrad info`)."""
    if kind in failures:
        why = 'cuDNN failed: ' + failures[kind]
    else:
        why = reason()
    if why is None:
        return 'cudnn {}'.format(version_string())
    return '{}: {}'.format(_FALLBACK[kind], why)
