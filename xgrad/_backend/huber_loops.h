/* The Huber loss and its gradient in one pass each (native_kernels.pyx's
 * huber_forward and huber_grad). */
#ifndef XGRAD_HUBER_LOOPS_H
#define XGRAD_HUBER_LOOPS_H
#include <stddef.h>

#include "cpu_paths.h"

/* Huber loss of a = x1 - x2 with delta d (half_d = d / 2 rounded to T):
 * a * a / 2 where |a| < d, else (|a| - d / 2) d, each branch rounded as
 * ChainerX's composition of ops does; its gradient gy * clip(a, -d, d) to x1
 * and the negation to x2 (the composition's bits; NaN stays NaN, and an
 * infinite a gives NaN, as the composition's square branch does). One pass
 * instead of eight forward and four backward, compiled for each CPU path
 * (about ten operations an element: on SSE2 alone the forward took 2.6x
 * a subtraction's time). The gradient has no branch: its NaN for an
 * infinite a is clip(a) + (a - a), which adds 0 to every finite a (a -0
 * clip becomes +0, which gy * c + 0 makes of it anyway); with the test
 * written as ?: the compiler kept a branch per element, which random data
 * mispredicts (6.3x a subtraction's time). */
#define XGRAD_HUBER_AT(isa, ATTR, T, SUFFIX)                                   \
ATTR static void xgrad_huber_##SUFFIX##_##isa(const T *restrict x1,            \
                                              const T *restrict x2, T d,       \
                                              T half_d, T *restrict out,       \
                                              ptrdiff_t n) {                   \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        const T a = x1[i] - x2[i];                                             \
        const T m = a < 0 ? -a : a;                                            \
        const T sq = a * a * (T)0.5, lin = (m - half_d) * d;                   \
        out[i] = m < d ? sq : lin;                                             \
    }                                                                          \
}                                                                              \
ATTR static void xgrad_huber_grad_##SUFFIX##_##isa(                            \
        const T *restrict gy, const T *restrict x1, const T *restrict x2, T d, \
        T *restrict g1, T *restrict g2, ptrdiff_t n) {                         \
    for (ptrdiff_t i = 0; i < n; ++i) {                                        \
        const T a = x1[i] - x2[i];                                             \
        T c = a > d ? d : a;                                                   \
        c = c < -d ? -d : c;  /* (NaN passes both tests) */                    \
        const T g = gy[i] * (c + (a - a)) + (T)0;  /* + 0: the composition's */ \
        g1[i] = g;                                 /* -0.0 + 0 */              \
        g2[i] = -g;                                                            \
    }                                                                          \
}
#define XGRAD_HUBER(T, SUFFIX)                                                 \
XGRAD_EACH_PATH(XGRAD_HUBER_AT, T, SUFFIX)                                     \
static inline void xgrad_huber_##SUFFIX(const T *x1, const T *x2, T d, T half_d, \
                                        T *out, ptrdiff_t n) {                 \
    XGRAD_CALL(xgrad_huber_##SUFFIX, (x1, x2, d, half_d, out, n));             \
}                                                                              \
static inline void xgrad_huber_grad_##SUFFIX(const T *gy, const T *x1,         \
                                             const T *x2, T d, T *g1, T *g2,   \
                                             ptrdiff_t n) {                    \
    XGRAD_CALL(xgrad_huber_grad_##SUFFIX, (gy, x1, x2, d, g1, g2, n));         \
}

XGRAD_HUBER(float, f32)
XGRAD_HUBER(double, f64)

#endif
