// Elementwise kernels: unary and binary ops forward and (fused) backward,
// gradient accumulation. All arrays are C-contiguous with n elements; the
// loops are grid-stride, so any grid size is correct, and move 16-byte packs
// where every pointer is 16-byte aligned (common.cuh's for_each_pack). The
// pointers are __restrict__: no array written overlaps another operand (two
// inputs may be one array, x * x; accumulate reads and writes acc in place,
// and its g is never acc).

namespace xgrad {

// ------------------------------------------------------------------ unary
// forward(x) -> y;  backward(gy, x, y) -> gx, with y == forward(x).
// Each backward reads x, y or neither (the comment on each functor; the
// wrappers' UNARY_BACKWARD_READS); an operand it does not read may be passed
// as a null pointer and arrives as 0.

struct Negative {  // reads neither
    template <class C> __device__ static C forward(C x) { return -x; }
    template <class C> __device__ static C backward(C gy, C, C) { return -gy; }
};

struct Absolute {  // reads x; gy * sign(x) as on the host: 0 at 0, NaN at NaN
    template <class C> __device__ static C forward(C x) { return math::fabs(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy * (x > C(0) ? C(1) : (x < C(0) ? C(-1) : (x == C(0) ? C(0) : x)));
    }
};

struct Exp {  // reads y
    template <class C> __device__ static C forward(C x) { return math::exp(x); }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy * y; }
};

struct Log {  // reads x
    template <class C> __device__ static C forward(C x) { return math::log(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy / x; }
};

struct Sqrt {  // reads y
    template <class C> __device__ static C forward(C x) { return math::sqrt(x); }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy / (y + y); }
};

struct Square {  // reads x
    template <class C> __device__ static C forward(C x) { return x * x; }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy * (x + x); }
};

struct Tanh {  // reads y
    template <class C> __device__ static C forward(C x) { return math::tanh(x); }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy * (C(1) - y * y); }
};

struct Sigmoid {  // reads y
    template <class C> __device__ static C forward(C x) {
        return C(0.5) * math::tanh(C(0.5) * x) + C(0.5);
    }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy * y * (C(1) - y); }
};

struct Relu {  // reads y; gradient 0 at 0; NaN stays NaN
    template <class C> __device__ static C forward(C x) { return x < C(0) ? C(0) : x; }
    template <class C> __device__ static C backward(C gy, C, C y) { return y > C(0) ? gy : C(0); }
};

struct Sin {  // reads x
    template <class C> __device__ static C forward(C x) { return math::sin(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy * math::cos(x); }
};

struct Cos {  // reads x
    template <class C> __device__ static C forward(C x) { return math::cos(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return -gy * math::sin(x); }
};

struct Tan {  // reads y
    template <class C> __device__ static C forward(C x) { return math::tan(x); }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy * (C(1) + y * y); }
};

struct Arcsin {  // reads x
    template <class C> __device__ static C forward(C x) { return math::asin(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / math::sqrt((C(1) - x) * (C(1) + x));
    }
};

struct Arccos {  // reads x
    template <class C> __device__ static C forward(C x) { return math::acos(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return -gy / math::sqrt((C(1) - x) * (C(1) + x));
    }
};

struct Arctan {  // reads x
    template <class C> __device__ static C forward(C x) { return math::atan(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy / (C(1) + x * x); }
};

struct Sinh {  // reads x
    template <class C> __device__ static C forward(C x) { return math::sinh(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy * math::cosh(x); }
};

struct Cosh {  // reads x
    template <class C> __device__ static C forward(C x) { return math::cosh(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy * math::sinh(x); }
};

struct Arcsinh {  // reads x
    template <class C> __device__ static C forward(C x) { return math::asinh(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / math::sqrt(x * x + C(1));
    }
};

struct Arccosh {  // reads x
    template <class C> __device__ static C forward(C x) { return math::acosh(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / math::sqrt((x - C(1)) * (x + C(1)));
    }
};

struct Arctanh {  // reads x
    template <class C> __device__ static C forward(C x) { return math::atanh(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / ((C(1) - x) * (C(1) + x));
    }
};

struct Expm1 {  // reads y
    template <class C> __device__ static C forward(C x) { return math::expm1(x); }
    template <class C> __device__ static C backward(C gy, C, C y) { return gy * (y + C(1)); }
};

struct Log1p {  // reads x
    template <class C> __device__ static C forward(C x) { return math::log1p(x); }
    template <class C> __device__ static C backward(C gy, C x, C) { return gy / (C(1) + x); }
};

struct Log2 {  // reads x
    template <class C> __device__ static C forward(C x) { return math::log2(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / (x * C(0.693147180559945309417232121458176568));
    }
};

struct Log10 {  // reads x
    template <class C> __device__ static C forward(C x) { return math::log10(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy / (x * C(2.302585092994045684017991454684364208));
    }
};

struct Exp2 {  // reads y
    template <class C> __device__ static C forward(C x) { return math::exp2(x); }
    template <class C> __device__ static C backward(C gy, C, C y) {
        return gy * y * C(0.693147180559945309417232121458176568);
    }
};

struct Reciprocal {  // reads y
    template <class C> __device__ static C forward(C x) { return C(1) / x; }
    template <class C> __device__ static C backward(C gy, C, C y) { return -gy * y * y; }
};

struct Softplus {  // reads x; log(1 + exp(x)) without overflow
    template <class C> __device__ static C forward(C x) {
        return math::log1p(math::exp(-math::fabs(x))) + (x > C(0) ? x : C(0));
    }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy * (C(0.5) * math::tanh(C(0.5) * x) + C(0.5));
    }
};

struct Erf {  // reads x
    template <class C> __device__ static C forward(C x) { return math::erf(x); }
    template <class C> __device__ static C backward(C gy, C x, C) {
        return gy * (C(1.1283791670955126) * math::exp(-(x * x)));  // 2/sqrt(pi)
    }
};

// Each kernel's body on W consecutive elements from i (W: 1, or a pack), for
// for_each_pack; the pointers are the kernel's.
template <class T, class F> struct UnaryForward {
    const T* __restrict__ x;
    T* __restrict__ y;
    template <int W, class I> __device__ __forceinline__ void operator()(width<W> w, I i) const {
        compute_t<T> c[W];
        load(w, x, i, c);
        for (int k = 0; k < W; ++k) c[k] = F::forward(c[k]);
        store(w, y, i, c);
    }
};

template <class T, class F>
__global__ void unary_forward(const T* __restrict__ x, T* __restrict__ y, long long n) {
    for_each_pack<T>(n, aligned16(x, y), UnaryForward<T, F>{x, y});
}

template <class T, class F> struct UnaryBackward {
    const T* __restrict__ gy;
    const T* __restrict__ x;
    const T* __restrict__ y;
    T* __restrict__ gx;
    template <int W, class I> __device__ __forceinline__ void operator()(width<W> w, I i) const {
        compute_t<T> g[W], xi[W], yi[W];
        load(w, gy, i, g);
        load_or_zero(w, x, i, xi);
        load_or_zero(w, y, i, yi);
        for (int k = 0; k < W; ++k) g[k] = F::backward(g[k], xi[k], yi[k]);
        store(w, gx, i, g);
    }
};

// One pass: gx = F::backward(gy, x, y); x or y may be null when F does not read it.
template <class T, class F>
__global__ void unary_backward(const T* __restrict__ gy, const T* __restrict__ x,
                               const T* __restrict__ y, T* __restrict__ gx, long long n) {
    for_each_pack<T>(n, aligned16(gy, x, y, gx), UnaryBackward<T, F>{gy, x, y, gx});
}

// ----------------------------------------------------------------- binary
// forward(a, b) -> y; grad_a / grad_b(gy, a, b) -> the gradients.

struct Add {
    template <class C> __device__ static C forward(C a, C b) { return a + b; }
    template <class C> __device__ static C grad_a(C gy, C, C) { return gy; }
    template <class C> __device__ static C grad_b(C gy, C, C) { return gy; }
};

struct Subtract {
    template <class C> __device__ static C forward(C a, C b) { return a - b; }
    template <class C> __device__ static C grad_a(C gy, C, C) { return gy; }
    template <class C> __device__ static C grad_b(C gy, C, C) { return -gy; }
};

struct Multiply {
    template <class C> __device__ static C forward(C a, C b) { return a * b; }
    template <class C> __device__ static C grad_a(C gy, C, C b) { return gy * b; }
    template <class C> __device__ static C grad_b(C gy, C a, C) { return gy * a; }
};

struct Divide {
    template <class C> __device__ static C forward(C a, C b) { return a / b; }
    template <class C> __device__ static C grad_a(C gy, C, C b) { return gy / b; }
    template <class C> __device__ static C grad_b(C gy, C a, C b) { return -(gy / b) * (a / b); }
};

// Ties give the gradient to a; NaN propagates like NumPy's maximum/minimum.
struct Maximum {
    template <class C> __device__ static bool picks_a(C a, C b) { return a >= b || a != a; }
    template <class C> __device__ static C forward(C a, C b) { return picks_a(a, b) ? a : b; }
    template <class C> __device__ static C grad_a(C gy, C a, C b) {
        return picks_a(a, b) ? gy : C(0);
    }
    template <class C> __device__ static C grad_b(C gy, C a, C b) {
        return picks_a(a, b) ? C(0) : gy;
    }
};

struct Minimum {
    template <class C> __device__ static bool picks_a(C a, C b) { return a <= b || a != a; }
    template <class C> __device__ static C forward(C a, C b) { return picks_a(a, b) ? a : b; }
    template <class C> __device__ static C grad_a(C gy, C a, C b) {
        return picks_a(a, b) ? gy : C(0);
    }
    template <class C> __device__ static C grad_b(C gy, C a, C b) {
        return picks_a(a, b) ? C(0) : gy;
    }
};

template <class T, class F> struct BinaryForward {
    const T* __restrict__ a;
    const T* __restrict__ b;
    T* __restrict__ y;
    template <int W, class I> __device__ __forceinline__ void operator()(width<W> w, I i) const {
        compute_t<T> ai[W], bi[W];
        load(w, a, i, ai);
        load(w, b, i, bi);
        for (int k = 0; k < W; ++k) ai[k] = F::forward(ai[k], bi[k]);
        store(w, y, i, ai);
    }
};

// a and b may be the same array (x * x): only outputs must not alias inputs.
template <class T, class F>
__global__ void binary_forward(const T* __restrict__ a, const T* __restrict__ b,
                               T* __restrict__ y, long long n) {
    for_each_pack<T>(n, aligned16(a, b, y), BinaryForward<T, F>{a, b, y});
}

template <class T, class F> struct BinaryBackward {
    const T* __restrict__ gy;
    const T* __restrict__ a;
    const T* __restrict__ b;
    T* __restrict__ ga;
    T* __restrict__ gb;
    template <int W, class I> __device__ __forceinline__ void operator()(width<W> w, I i) const {
        compute_t<T> g[W], ai[W], bi[W], out[W];
        load(w, gy, i, g);
        load_or_zero(w, a, i, ai);
        load_or_zero(w, b, i, bi);
        if (ga) {
            for (int k = 0; k < W; ++k) out[k] = F::grad_a(g[k], ai[k], bi[k]);
            store(w, ga, i, out);
        }
        if (gb) {
            for (int k = 0; k < W; ++k) out[k] = F::grad_b(g[k], ai[k], bi[k]);
            store(w, gb, i, out);
        }
    }
};

// Both gradients in one pass; a null ga or gb is skipped, a null a or b
// (not read by the gradients asked for) arrives as 0.
template <class T, class F>
__global__ void binary_backward(const T* __restrict__ gy, const T* __restrict__ a,
                                const T* __restrict__ b, T* __restrict__ ga,
                                T* __restrict__ gb, long long n) {
    for_each_pack<T>(n, aligned16(gy, a, b, ga, gb), BinaryBackward<T, F>{gy, a, b, ga, gb});
}

// ------------------------------------------------------------- accumulate

template <class T> struct Accumulate {
    T* __restrict__ acc;
    const T* __restrict__ g;
    template <int W, class I> __device__ __forceinline__ void operator()(width<W> w, I i) const {
        compute_t<T> s[W], gi[W];
        load(w, (const T*)acc, i, s);
        load(w, g, i, gi);
        for (int k = 0; k < W; ++k) s[k] = s[k] + gi[k];
        store(w, acc, i, s);
    }
};

// acc += g, in place (g never overlaps acc: see the wrapper).
template <class T>
__global__ void accumulate(T* __restrict__ acc, const T* __restrict__ g, long long n) {
    for_each_pack<T>(n, aligned16(acc, g), Accumulate<T>{acc, g});
}

// out = a + b (a gradient sum into a new array).
template <class T>
__global__ void add3(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                     long long n) {
    for_each_pack<T>(n, aligned16(a, b, out), BinaryForward<T, Add>{a, b, out});
}

}  // namespace xgrad
