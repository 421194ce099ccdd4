# The worker pool, for the other kernel modules: run ``task(ctx, k)`` for
# k in [0, chunks) on xgrad's threads (see thread_pool.h), and how many
# threads a split may use.
ctypedef void (*chunk_task)(void* ctx, Py_ssize_t chunk) noexcept nogil
cdef void run_chunks(chunk_task task, void* ctx, Py_ssize_t chunks) noexcept nogil
cdef int pool_threads() noexcept nogil
# The dispatch path the vector kernels run (cpu_paths.h's XGRAD_PATH_*), for
# the other kernel modules that compile their own per-path variants.
cdef int vector_path() noexcept nogil

cpdef object tanh_forward(object x)
cpdef object exp_forward(object x)
cpdef object sigmoid_forward(object x)
cpdef object relu_forward(object x)
cpdef object negative(object x)
cpdef object multiply(object a, object b)
cpdef object add(object a, object b)
cpdef object subtract(object a, object b)
cpdef object divide(object a, object b)
cpdef object tanh_grad(object gy, object y)
cpdef object sigmoid_grad(object gy, object y)
cpdef object relu_grad(object gy, object y)
cpdef object abs_grad(object gy, object x)
# compare_select's comparisons: the numbering of select_loops.h's loops.
cpdef enum CompareOp:
    COMPARE_GE = 0
    COMPARE_GT = 1
    COMPARE_LE = 2
    COMPARE_LT = 3

cpdef object compare_select(object gy, object a, object b, int op)
cpdef object sqrt_grad(object gy, object y)
cpdef object square_grad(object gy, object x)
cpdef bint add_into(object acc, object g)
cpdef object broadcast_view(object a, tuple shape)
cpdef object sum_to(object a, tuple shape)
cpdef object multiply_grad(object gy, object x)
cpdef object log_forward(object x)
cpdef object erf_forward(object x)
cpdef object erf_grad(object gy, object x)
cpdef object softplus_forward(object x, double beta)
cpdef object gelu_forward(object x, bint tanh_approximation)
cpdef object gelu_grad(object gy, object x, bint tanh_approximation)
cpdef object leaky_relu_forward(object x, double slope)
cpdef object elu_forward(object x, double alpha)
cpdef object softplus_grad(object gy, object x, double beta)
cpdef object leaky_relu_grad(object gy, object x, double slope)
cpdef object elu_grad(object gy, object x, object y, double alpha)
cpdef object softmax_last_axis(object x, bint log)
cpdef object softmax_last_axis_grad(object gy, object y, bint log)
cpdef object softmax_axis(object x, int axis, bint log)
cpdef object softmax_axis_grad(object gy, object y, int axis, bint log)
cpdef object sum_all(object x, double divisor=*)
cpdef object sum_channels(object x)
cpdef object sum_axes(object x, tuple axes, double divisor=*)
cpdef object cast_half(object x, object dtype)
cpdef bint copy_into(object dst, object src)
cpdef bint splits(Py_ssize_t n)
cpdef object select(object cond, object a, object b)
cpdef object extremum_trailing(object x, int kept, bint minimum)
cpdef object extremum_trailing_grad(object gy, object x, object y)
