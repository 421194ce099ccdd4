/* Select loops (relu and its gradient, maximum's and minimum's gradients, a
 * max-pooling tap) written in C: with restrict pointers
 * and a plain ?: the compiler turns them into vector blends, which it would
 * not do for the equivalent Cython (it kept a branch per element). */
#ifndef XGRAD_SELECT_LOOPS_H
#define XGRAD_SELECT_LOOPS_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define XGRAD_SELECT_LOOPS(T, SUFFIX)                                          \
static inline void xgrad_relu_##SUFFIX(const T *restrict x, T *restrict out,   \
                                       ptrdiff_t n) {                          \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        T v = x[i];                                                            \
        out[i] = (v > 0 || v != v) ? v : (T)0;  /* NaN stays NaN */          \
    }                                                                          \
}                                                                              \
static inline void xgrad_relu_grad_##SUFFIX(const T *restrict gy,              \
                                            const T *restrict y,               \
                                            T *restrict out, ptrdiff_t n) {    \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        T g = gy[i], v = y[i];  /* both loads unconditional: no branch */      \
        out[i] = v > 0 ? g : (T)0;                                             \
    }                                                                          \
}                                                                              \
static inline void xgrad_abs_grad_##SUFFIX(const T *restrict gy,               \
                                           const T *restrict x,                \
                                           T *restrict out, ptrdiff_t n) {     \
    for (ptrdiff_t i = 0; i < n; ++i) {  /* gy * sign(x): NumPy's sign */      \
        T g = gy[i], v = x[i];                                                 \
        T s = (T)(v > 0) - (T)(v < 0);  /* comparisons as numbers: no branch */ \
        out[i] = g * (v != v ? v : s);                                         \
    }                                                                          \
}                                                                              \
static inline void xgrad_abs_grad_scalar_##SUFFIX(T g, const T *restrict x,    \
                                                  T *restrict out,            \
                                                  ptrdiff_t n) {              \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        T v = x[i];                                                            \
        T s = (T)(v > 0) - (T)(v < 0);                                         \
        out[i] = g * (v != v ? v : s);                                         \
    }                                                                          \
}                                                                              \
static inline void xgrad_relu_grad_scalar_##SUFFIX(T g, const T *restrict y,  \
                                                   T *restrict out,           \
                                                   ptrdiff_t n) {             \
    for (ptrdiff_t i = 0; i < n; ++i)  /* one gy for all: a broadcast one */  \
        out[i] = y[i] > 0 ? g : (T)0;                                          \
}

XGRAD_SELECT_LOOPS(float, f32)
XGRAD_SELECT_LOOPS(double, f64)

/* The gradient of maximum and minimum: out = (a OP b) ? gy : 0, with b an
 * array or one scalar value; one loop per comparison, chosen outside it. */
enum { XGRAD_GE = 0, XGRAD_GT = 1, XGRAD_LE = 2, XGRAD_LT = 3 };

#define XGRAD_COMPARE_SELECT_LOOP(T, OP)                                       \
    if (b_scalar) {                                                            \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            T g = gy[i];  /* loaded unconditionally: a blend, not a branch */  \
            out[i] = (a[i] OP s) ? g : (T)0;                                   \
        }                                                                      \
    } else {                                                                   \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            T g = gy[i];                                                       \
            out[i] = (a[i] OP b[i]) ? g : (T)0;                                \
        }                                                                      \
    }

#define XGRAD_COMPARE_SELECT(T, SUFFIX)                                        \
static inline void xgrad_compare_select_##SUFFIX(                              \
        const T *restrict gy, const T *restrict a, const T *restrict b,       \
        int b_scalar, T s, int op, T *restrict out, ptrdiff_t n) {             \
    switch (op) {                                                              \
    case XGRAD_GE: XGRAD_COMPARE_SELECT_LOOP(T, >=) break;                     \
    case XGRAD_GT: XGRAD_COMPARE_SELECT_LOOP(T, >) break;                      \
    case XGRAD_LE: XGRAD_COMPARE_SELECT_LOOP(T, <=) break;                     \
    default: XGRAD_COMPARE_SELECT_LOOP(T, <) break;                            \
    }                                                                          \
}

XGRAD_COMPARE_SELECT(float, f32)
XGRAD_COMPARE_SELECT(double, f64)

/* One tap of max pooling over a row of n windows (window_kernels.pyx's
 * _max_pool): y[i] and tap[i] take x[i * stride] and t where it is greater
 * (ties keep the earlier tap) or NaN (NaN sticks: nothing is greater). The
 * choices are bit masks: with ?: (or in Cython) the compiler kept a branch
 * per element, which random data mispredicts half the time (3.2-3.7 ns a
 * tap, 4x the masked loop). */
#define XGRAD_MAX_TAP(T, BITS, TAP, SUFFIX)                                    \
static inline void xgrad_max_tap_##SUFFIX(const T *restrict x, ptrdiff_t stride, \
                                          T *restrict y, TAP *restrict tap,    \
                                          TAP t, ptrdiff_t n) {                \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        union { T f; BITS u; } v, cur;                                         \
        v.f = x[i * stride];                                                   \
        cur.f = y[i];                                                          \
        BITS wins = (BITS)(v.f > cur.f);                                       \
        BITS take = (BITS)0 - (wins | (BITS)(v.f != v.f));                     \
        cur.u = (v.u & take) | (cur.u & ~take);                                \
        y[i] = cur.f;                                                          \
        tap[i] = (TAP)(tap[i] ^ ((tap[i] ^ t) & (TAP)((BITS)0 - wins)));       \
    }                                                                          \
}

XGRAD_MAX_TAP(float, uint32_t, unsigned char, f32_u8)
XGRAD_MAX_TAP(float, uint32_t, unsigned short, f32_u16)
XGRAD_MAX_TAP(double, uint64_t, unsigned char, f64_u8)
XGRAD_MAX_TAP(double, uint64_t, unsigned short, f64_u16)

/* where(c, a, b) over one row (native_kernels.select): a and b each an array
 * of the row's length (NULL: the one value va / vb). The choice is a bit
 * mask built from the condition's byte: Cython's ?: kept a branch per
 * element, which a random mask (a clip's or dropout's gradient) mispredicts
 * half the time (2.5 ns an element, 8x this loop). Exact: bits are copied. */
#define XGRAD_SELECT(T, BITS, SUFFIX)                                          \
static inline void xgrad_select_##SUFFIX(const unsigned char *restrict c,     \
                                         const T *restrict a,                 \
                                         const T *restrict b, T va, T vb,     \
                                         T *restrict out, ptrdiff_t n) {      \
    union { T f; BITS u; } ua, ub;                                             \
    ua.f = va;                                                                 \
    ub.f = vb;                                                                 \
    const BITS *restrict pa = (const BITS *)a, *restrict pb = (const BITS *)b; \
    BITS *restrict po = (BITS *)out;                                           \
    BITS sa = ua.u, sb = ub.u;                                                 \
    if (pa && pb) {                                                            \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            BITS m = (BITS)0 - (BITS)(c[i] != 0);                              \
            po[i] = (pa[i] & m) | (pb[i] & ~m);                                \
        }                                                                      \
    } else if (pa) {                                                           \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            BITS m = (BITS)0 - (BITS)(c[i] != 0);                              \
            po[i] = (pa[i] & m) | (sb & ~m);                                   \
        }                                                                      \
    } else if (pb) {                                                           \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            BITS m = (BITS)0 - (BITS)(c[i] != 0);                              \
            po[i] = (sa & m) | (pb[i] & ~m);                                   \
        }                                                                      \
    } else {                                                                   \
        for (ptrdiff_t i = 0; i < n; ++i) {                                    \
            BITS m = (BITS)0 - (BITS)(c[i] != 0);                              \
            po[i] = (sa & m) | (sb & ~m);                                      \
        }                                                                      \
    }                                                                          \
}

XGRAD_SELECT(float, uint32_t, f32)
XGRAD_SELECT(double, uint64_t, f64)

#endif
