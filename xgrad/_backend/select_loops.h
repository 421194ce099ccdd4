/* Select loops (relu and its gradient) written in C: with restrict pointers
 * and a plain ?: the compiler turns them into vector blends, which it would
 * not do for the equivalent Cython (it kept a branch per element). */
#ifndef XGRAD_SELECT_LOOPS_H
#define XGRAD_SELECT_LOOPS_H
#include <stddef.h>

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
}

XGRAD_SELECT_LOOPS(float, f32)
XGRAD_SELECT_LOOPS(double, f64)

#endif
