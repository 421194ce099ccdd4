// Elementwise kernels: unary and binary ops forward and (fused) backward,
// gradient accumulation. All arrays are C-contiguous with n elements; the
// loops are grid-stride, so any grid size is correct.

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

template <class T, class F>
__global__ void unary_forward(const T* x, T* y, long long n) {
    XGRAD_FOR_EACH(i, n) y[i] = from_compute<T>(F::forward(to_compute(x[i])));
}

// One pass: gx = F::backward(gy, x, y); x or y may be null when F does not read it.
template <class T, class F>
__global__ void unary_backward(const T* gy, const T* x, const T* y, T* gx, long long n) {
    typedef compute_t<T> C;
    XGRAD_FOR_EACH(i, n) {
        const C xi = x ? to_compute(x[i]) : C(0);
        const C yi = y ? to_compute(y[i]) : C(0);
        gx[i] = from_compute<T>(F::backward(to_compute(gy[i]), xi, yi));
    }
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

template <class T, class F>
__global__ void binary_forward(const T* a, const T* b, T* y, long long n) {
    XGRAD_FOR_EACH(i, n) y[i] = from_compute<T>(F::forward(to_compute(a[i]), to_compute(b[i])));
}

// Both gradients in one pass; a null ga or gb is skipped, a null a or b
// (not read by the gradients asked for) arrives as 0.
template <class T, class F>
__global__ void binary_backward(const T* gy, const T* a, const T* b, T* ga, T* gb, long long n) {
    typedef compute_t<T> C;
    XGRAD_FOR_EACH(i, n) {
        const C g = to_compute(gy[i]);
        const C ai = a ? to_compute(a[i]) : C(0);
        const C bi = b ? to_compute(b[i]) : C(0);
        if (ga) ga[i] = from_compute<T>(F::grad_a(g, ai, bi));
        if (gb) gb[i] = from_compute<T>(F::grad_b(g, ai, bi));
    }
}

// ------------------------------------------------------------- accumulate

// acc += g, in place.
template <class T>
__global__ void accumulate(T* acc, const T* g, long long n) {
    XGRAD_FOR_EACH(i, n) acc[i] = from_compute<T>(to_compute(acc[i]) + to_compute(g[i]));
}

// out = a + b (a gradient sum into a new array).
template <class T>
__global__ void add3(const T* a, const T* b, T* out, long long n) {
    XGRAD_FOR_EACH(i, n) out[i] = from_compute<T>(to_compute(a[i]) + to_compute(b[i]));
}

}  // namespace xgrad
