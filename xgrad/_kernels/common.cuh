// Shared device code for xgrad's kernels. The loader prepends this text to
// every .cu file (there are no #includes: the same text compiles under NVRTC,
// under nvcc and, with tests/kernels/emulate.h force-included, as host C++).
//
// - xgrad::half: float16 storage, converted by PTX cvt on the device (the
//   emulator supplies host conversions when XGRAD_EMULATE is defined);
// - compute_t<T>: the type arithmetic runs in (float for half, T otherwise),
//   with to_compute / from_compute<T> for loads and stores;
// - math:: overloads for float and double (the C names: expf / exp, ...);
// - grid-stride loops over elements (in 16-byte packs) and over rows;
// - block_reduce: a shared-memory tree over XGRAD_BLOCK threads with
//   __syncthreads() only (no shuffles, no atomics: the emulator runs it exactly).

#define XGRAD_BLOCK 256

namespace xgrad {

static_assert((XGRAD_BLOCK & (XGRAD_BLOCK - 1)) == 0, "XGRAD_BLOCK must be a power of two");

// ---------------------------------------------------------------- float16

struct half {
    unsigned short bits;
};

#ifdef XGRAD_EMULATE
__device__ __forceinline__ float half_to_float(half h) { return xg_emu_half_to_float(h.bits); }
__device__ __forceinline__ half float_to_half(float f) {
    half h;
    h.bits = xg_emu_float_to_half(f);
    return h;
}
#else
__device__ __forceinline__ float half_to_float(half h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
__device__ __forceinline__ half float_to_half(float f) {
    half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
#endif

// ---------------------------------------------------------- compute types

template <class T> struct compute_type { typedef T type; };
template <> struct compute_type<half> { typedef float type; };
template <class T> using compute_t = typename compute_type<T>::type;

__device__ __forceinline__ float to_compute(half x) { return half_to_float(x); }
__device__ __forceinline__ float to_compute(float x) { return x; }
__device__ __forceinline__ double to_compute(double x) { return x; }

template <class T> __device__ __forceinline__ T from_compute(compute_t<T> c) { return c; }
template <> __device__ __forceinline__ half from_compute<half>(float c) {
    return float_to_half(c);
}

// ------------------------------------------------------------------- math
// One name per function for both compute types, forwarding to the C names
// that NVRTC, nvcc and <math.h> all provide.

namespace math {
#define XGRAD_MATH1(name)                                                          \
    __device__ __forceinline__ float name(float x) { return ::name##f(x); }       \
    __device__ __forceinline__ double name(double x) { return ::name(x); }
XGRAD_MATH1(fabs)
XGRAD_MATH1(exp)
XGRAD_MATH1(exp2)
XGRAD_MATH1(expm1)
XGRAD_MATH1(log)
XGRAD_MATH1(log2)
XGRAD_MATH1(log10)
XGRAD_MATH1(log1p)
XGRAD_MATH1(sqrt)
XGRAD_MATH1(sin)
XGRAD_MATH1(cos)
XGRAD_MATH1(tan)
XGRAD_MATH1(asin)
XGRAD_MATH1(acos)
XGRAD_MATH1(atan)
XGRAD_MATH1(sinh)
XGRAD_MATH1(cosh)
XGRAD_MATH1(tanh)
XGRAD_MATH1(asinh)
XGRAD_MATH1(acosh)
XGRAD_MATH1(atanh)
XGRAD_MATH1(erf)
#undef XGRAD_MATH1

template <class C> __device__ __forceinline__ C neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() {
    return __int_as_float((int)0xff800000);
}
template <> __device__ __forceinline__ double neg_inf<double>() {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
}

template <class C> __device__ __forceinline__ C quiet_nan();
template <> __device__ __forceinline__ float quiet_nan<float>() {
    return __int_as_float((int)0x7fc00000);
}
template <> __device__ __forceinline__ double quiet_nan<double>() {
    return __longlong_as_double((long long)0x7ff8000000000000ULL);
}
}  // namespace math

// ------------------------------------------------------------ grid strides

// for (long long i = first_index(); i < n; i += index_stride()): every
// element once, whatever the grid size.
__device__ __forceinline__ long long first_index() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long index_stride() { return (long long)gridDim.x * blockDim.x; }

#define XGRAD_FOR_EACH(i, n) \
    for (long long i = ::xgrad::first_index(); i < (n); i += ::xgrad::index_stride())

// ------------------------------------------------------ elementwise packs
// The elementwise kernels move 16 bytes per load and store (4 floats, 8
// halves, 2 doubles): a memory-bound kernel needs many bytes in flight per
// thread, and one 128-bit access carries four times what a 4-byte one does.

// W consecutive elements, aligned to their size (a pack: 16 bytes).
template <class T, int W = 16 / sizeof(T)>
struct alignas(W * sizeof(T)) lanes {
    T v[W];
};

template <int W> struct width {
    static constexpr int size = W;
};

// Whether every pointer is 16-byte aligned (a null pointer is).
template <class... P> __device__ __forceinline__ bool aligned16(const P*... p) {
    return ((((unsigned long long)(const void*)p) | ... | 0ULL) & 15) == 0;
}

// The W elements at p as one access (the emulator checks the alignment).
template <class T, int W> __device__ __forceinline__ lanes<T, W> read(const T* p) {
#ifdef XGRAD_EMULATE
    lanes<T, W> s;
    xg_emu_copy_aligned(&s, p, sizeof s, p);
    return s;
#else
    return *reinterpret_cast<const lanes<T, W>*>(p);
#endif
}

template <class T, int W> __device__ __forceinline__ void write(T* p, const lanes<T, W>& s) {
#ifdef XGRAD_EMULATE
    xg_emu_copy_aligned(p, &s, sizeof s, p);
#else
    *reinterpret_cast<lanes<T, W>*>(p) = s;
#endif
}

// c[k] = p[i + k] for k < W, in the compute type.
template <int W, class T, class I>
__device__ __forceinline__ void load(width<W>, const T* p, I i, compute_t<T> (&c)[W]) {
    const lanes<T, W> s = read<T, W>(p + i);
    for (int k = 0; k < W; ++k) c[k] = to_compute(s.v[k]);
}

// load's, or zeros for a null p (an operand a gradient does not read).
template <int W, class T, class I>
__device__ __forceinline__ void load_or_zero(width<W> w, const T* p, I i,
                                             compute_t<T> (&c)[W]) {
    if (p) {
        load(w, p, i, c);
    } else {
        for (int k = 0; k < W; ++k) c[k] = compute_t<T>(0);
    }
}

// p[i + k] = c[k] for k < W, rounded to T.
template <int W, class T, class I>
__device__ __forceinline__ void store(width<W>, T* p, I i, const compute_t<T> (&c)[W]) {
    lanes<T, W> s;
    for (int k = 0; k < W; ++k) s.v[k] = from_compute<T>(c[k]);
    write<T, W>(p + i, s);
}

// body(width<P>(), i) for each pack [i, i + P) when `aligned` (every pointer
// 16-byte aligned: decided once per launch, so the branch is uniform), then
// body(width<1>(), i) for each element left (the n % P tail, or all n when
// not aligned); grid-stride, 64-bit indices. (int indices were tried: they
// narrow only the counter's add and compare, and doubled the code.)
template <class T, class Body>
__device__ __forceinline__ void for_each_pack(long long n, bool aligned, const Body& body) {
    constexpr int P = 16 / sizeof(T);
    static_assert(P * sizeof(T) == 16, "a pack is 16 bytes");
    const long long first = first_index(), stride = index_stride();
    long long tail = 0;
    if (aligned) {
        const long long packs = n / P;
        for (long long p = first; p < packs; p += stride) body(width<P>(), p * P);
        tail = packs * P;
    }
#pragma unroll 1
    for (long long i = tail + first; i < n; i += stride) body(width<1>(), i);
}

// One block per row: the loop is uniform across a block, so the body may
// call block_reduce (and __syncthreads).
#define XGRAD_FOR_EACH_ROW(r, rows) \
    for (long long r = (long long)blockIdx.x; r < (rows); r += (long long)gridDim.x)

// -------------------------------------------------------- block reduction

struct SumOp {
    template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; }
};

// NaN wins, so a row with a NaN stays NaN after the max shift.
struct MaxOp {
    template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
        return (a > b || a != a) ? a : b;
    }
};

// Combines every thread's value with op; all threads of the block must call
// it (blockDim.x == XGRAD_BLOCK) and all get the result. `shared` holds
// XGRAD_BLOCK values; it may be reused right after the call returns.
template <class C, class Op>
__device__ C block_reduce(C value, C* shared, Op op) {
    const unsigned t = threadIdx.x;
    shared[t] = value;
    __syncthreads();
    for (unsigned s = XGRAD_BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) shared[t] = op(shared[t], shared[t + s]);
        __syncthreads();
    }
    C result = shared[0];
    __syncthreads();
    return result;
}

}  // namespace xgrad
