/* Batch normalization's column loops, compiled per CPU path (cpu_paths.h):
 * x of (N, W) rows (W = C * L columns, L < 16), each column its own running
 * sum in double, so a result is the same on every path and at every thread
 * count (no sum is split across vector lanes). A call covers rows [r0, r1)
 * and columns [c0, c1) of one pass (norm_kernels.pyx's ColumnPass):
 *   0 (sum):           p0 += x
 *   1 (squares):       p0 += (x - center)^2
 *   2 (gradient sums): p0 += gy, p1 += gy * (x - center)
 *   3 (affine):        out = x * scale + shift
 *   4 (gradient):      out = gy * scale + x * coef + shift
 * with per-column doubles center, scale, coef, shift.
 */
#ifndef XGRAD_BATCH_NORM_COLUMNS_H
#define XGRAD_BATCH_NORM_COLUMNS_H

#include <stddef.h>

#include "cpu_paths.h"

#define XGRAD_BN_COLUMNS_AT(isa, ATTR, T, sfx)                                    \
    ATTR static void bn_columns_##sfx##_##isa(                                    \
            int step, const T* restrict x0, const T* restrict gy0,                 \
            T* restrict out0, double* restrict p0, double* restrict p1,            \
            const double* restrict center, const double* restrict scale,           \
            const double* restrict coef, const double* restrict shift,             \
            ptrdiff_t w, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t c0, ptrdiff_t c1) { \
        for (ptrdiff_t i = r0; i < r1; i++) {                                      \
            const T* restrict x = x0 + i * w;                                      \
            const T* restrict gy = gy0 ? gy0 + i * w : NULL;                       \
            T* restrict out = out0 ? out0 + i * w : NULL;                          \
            switch (step) {                                                        \
            case 0:                                                                \
                for (ptrdiff_t c = c0; c < c1; c++) p0[c] += (double)x[c];         \
                break;                                                             \
            case 1:                                                                \
                for (ptrdiff_t c = c0; c < c1; c++) {                              \
                    const double d = (double)x[c] - center[c];                     \
                    p0[c] += d * d;                                                \
                }                                                                  \
                break;                                                             \
            case 2:                                                                \
                for (ptrdiff_t c = c0; c < c1; c++) {                              \
                    const double g = (double)gy[c];                                \
                    p0[c] += g;                                                    \
                    p1[c] += g * ((double)x[c] - center[c]);                       \
                }                                                                  \
                break;                                                             \
            case 3:                                                                \
                for (ptrdiff_t c = c0; c < c1; c++)                                \
                    out[c] = (T)((double)x[c] * scale[c] + shift[c]);              \
                break;                                                             \
            default:                                                               \
                for (ptrdiff_t c = c0; c < c1; c++)                                \
                    out[c] = (T)((double)gy[c] * scale[c] + (double)x[c] * coef[c] \
                                 + shift[c]);                                      \
            }                                                                      \
        }                                                                          \
    }

XGRAD_EACH_PATH(XGRAD_BN_COLUMNS_AT, float, f32)
XGRAD_EACH_PATH(XGRAD_BN_COLUMNS_AT, double, f64)

#define XGRAD_BN_COLUMNS_DISPATCH(T, sfx)                                         \
    static void bn_columns_##sfx(int step, const T* x0, const T* gy0, T* out0,     \
                                 double* p0, double* p1, const double* center,     \
                                 const double* scale, const double* coef,          \
                                 const double* shift, ptrdiff_t w, ptrdiff_t r0,   \
                                 ptrdiff_t r1, ptrdiff_t c0, ptrdiff_t c1) {       \
        XGRAD_CALL(bn_columns_##sfx, (step, x0, gy0, out0, p0, p1, center, scale,  \
                                      coef, shift, w, r0, r1, c0, c1));            \
    }

XGRAD_BN_COLUMNS_DISPATCH(float, f32)
XGRAD_BN_COLUMNS_DISPATCH(double, f64)

#endif
