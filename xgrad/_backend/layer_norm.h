/* Layer normalization's row kernels, compiled per CPU path (cpu_paths.h):
 * rows of d contiguous elements, each normalized over itself. Sums run in
 * the data's type across the vector's lanes (-fopenmp-simd reductions), so
 * a result depends on the path (the lanes' count) but never on the thread
 * count: a thread runs whole blocks of rows, and ``sums`` (2, d) is one
 * block's sums of gy * x_hat and gy, which norm_kernels.pyx adds up over the
 * blocks in order.
 */
#ifndef XGRAD_LAYER_NORM_H
#define XGRAD_LAYER_NORM_H

#include <math.h>
#include <stddef.h>

#include "cpu_paths.h"

#if defined(_OPENMP) || defined(XGRAD_OPENMP_SIMD)
#define XGRAD_LN_PRAGMA(text) _Pragma(#text)
#else
#define XGRAD_LN_PRAGMA(text)
#endif

#define XGRAD_LN_AT(isa, ATTR, T, sfx)                                            \
    ATTR static void ln_forward_##sfx##_##isa(                                    \
            const T* restrict x, const T* restrict gamma, const T* restrict beta,  \
            T* restrict y, T* restrict mean_out, T* restrict inv_std_out,          \
            ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t d, double eps) {                 \
        for (ptrdiff_t i = r0; i < r1; i++) {                                      \
            const T* row = x + i * d;                                              \
            T* out = y + i * d;                                                    \
            T s = 0;                                                               \
            XGRAD_LN_PRAGMA(omp simd reduction(+:s))                               \
            for (ptrdiff_t j = 0; j < d; j++) s += row[j];                         \
            const T m = s / (T)d;                                                  \
            T v = 0;                                                               \
            XGRAD_LN_PRAGMA(omp simd reduction(+:v))                               \
            for (ptrdiff_t j = 0; j < d; j++) {                                    \
                const T t = row[j] - m;                                            \
                v += t * t;                                                        \
            }                                                                      \
            const T is = (T)(1 / sqrt((double)v / (double)d + eps));               \
            XGRAD_LN_PRAGMA(omp simd)                                              \
            for (ptrdiff_t j = 0; j < d; j++)                                      \
                out[j] = (row[j] - m) * is * gamma[j] + beta[j];                   \
            mean_out[i] = m;                                                       \
            inv_std_out[i] = is;                                                   \
        }                                                                          \
    }                                                                              \
                                                                                   \
    /* gx = is (g - mean(g) - x_hat mean(g x_hat)), g = gy gamma: per row     \
     * is g + c (x - m) + b (gx NULL: the parameters' sums only) */               \
    ATTR static void ln_backward_##sfx##_##isa(                                   \
            const T* restrict gy, const T* restrict x, const T* restrict mean,    \
            const T* restrict inv_std, const T* restrict gamma, T* restrict gx,   \
            T* restrict sums, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t d) {           \
        T* restrict sxh = sums;                                                    \
        T* restrict sgy = sums + d;                                                \
        for (ptrdiff_t i = r0; i < r1; i++) {                                      \
            const T* g = gy + i * d;                                               \
            const T* xr = x + i * d;                                               \
            const T m = mean[i], is = inv_std[i];                                  \
            T sg = 0, sgx = 0;                                                     \
            XGRAD_LN_PRAGMA(omp simd reduction(+:sg, sgx))                         \
            for (ptrdiff_t j = 0; j < d; j++) {                                    \
                const T xh = (xr[j] - m) * is;                                     \
                const T gg = g[j] * gamma[j];                                      \
                sg += gg;                                                          \
                sgx += gg * xh;                                                    \
                sxh[j] += g[j] * xh;                                               \
                sgy[j] += g[j];                                                    \
            }                                                                      \
            if (gx) { /* c (x - m), not c x - c m: no cancellation when |m| >> std */ \
                T* o = gx + i * d;                                                 \
                const T c = -is * is * sgx / (T)d;                                 \
                const T b = -is * sg / (T)d;                                       \
                XGRAD_LN_PRAGMA(omp simd)                                          \
                for (ptrdiff_t j = 0; j < d; j++)                                  \
                    o[j] = is * (g[j] * gamma[j]) + c * (xr[j] - m) + b;           \
            }                                                                      \
        }                                                                          \
    }

XGRAD_EACH_PATH(XGRAD_LN_AT, float, f32)
XGRAD_EACH_PATH(XGRAD_LN_AT, double, f64)

#define XGRAD_LN_DISPATCH(T, sfx)                                                 \
    static void ln_forward_##sfx(const T* x, const T* gamma, const T* beta, T* y,  \
                                 T* mean_out, T* inv_std_out, ptrdiff_t r0,        \
                                 ptrdiff_t r1, ptrdiff_t d, double eps) {          \
        XGRAD_CALL(ln_forward_##sfx, (x, gamma, beta, y, mean_out, inv_std_out,   \
                                      r0, r1, d, eps));                            \
    }                                                                              \
    static void ln_backward_##sfx(const T* gy, const T* x, const T* mean,          \
                                  const T* inv_std, const T* gamma, T* gx,         \
                                  T* sums, ptrdiff_t r0, ptrdiff_t r1,             \
                                  ptrdiff_t d) {                                   \
        XGRAD_CALL(ln_backward_##sfx, (gy, x, mean, inv_std, gamma, gx, sums,      \
                                       r0, r1, d));                                \
    }

XGRAD_LN_DISPATCH(float, f32)
XGRAD_LN_DISPATCH(double, f64)

#endif
