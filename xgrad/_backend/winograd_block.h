/* The matrix part of Winograd's tile transforms, for a block of tiles at
 * once (xgrad/_backend/winograd_kernels.pyx gathers the tiles and writes
 * the results out).
 *
 * A block holds value (r, s) of tile p at d[(r * cols_in + s) * BLOCK + p]:
 * each value of all the block's tiles is one contiguous row, so that
 * out = left . d . right^T is a few dozen row combinations
 * out_row += c * in_row, each a vector loop of BLOCK lanes. Why C: these
 * loops are the transforms' arithmetic, and compiled for the baseline x86-64
 * alone they run 4 lanes (SSE2) where the CPU has 8 or 16; cpu_paths.h
 * compiles them for AVX2 and AVX-512 too. A partial block computes all
 * BLOCK lanes (a constant trip count, no remainder loop); the lanes past its
 * tiles hold values nobody reads.
 */
#ifndef XGRAD_WINOGRAD_BLOCK_H
#define XGRAD_WINOGRAD_BLOCK_H

#include <stddef.h>
#include <string.h>

#include "cpu_paths.h"

#define XGRAD_WINOGRAD_BLOCK 64
#define XGRAD_WINOGRAD_VALUES 64 /* up to 8x8 tiles */

/* A transform's block buffers: the gathered tiles d, the scratch t and the
 * result out, each XGRAD_WINOGRAD_VALUES rows of a block, sized for double.
 * 64-byte aligned (whole cache lines and AVX-512 vectors): unaligned, the
 * AVX-512 loops ran slower than the AVX2 ones (60 against 33 ns a tile). */
typedef struct {
    _Alignas(64) double d[XGRAD_WINOGRAD_VALUES * XGRAD_WINOGRAD_BLOCK];
    _Alignas(64) double t[XGRAD_WINOGRAD_VALUES * XGRAD_WINOGRAD_BLOCK];
    _Alignas(64) double out[XGRAD_WINOGRAD_VALUES * XGRAD_WINOGRAD_BLOCK];
} xgrad_winograd_buffers;

/* out = left . d . right^T for the block: left is (rows_out, rows_in),
 * right (cols_out, cols_in), row-major; t is scratch of rows_out * cols_in
 * rows. Zero coefficients (half of B^T's and A^T's) are skipped. */
#define XGRAD_WINOGRAD_AT(isa, ATTR, T, sfx)                                       \
    ATTR static void xgrad_winograd_combine_##sfx##_##isa(                         \
            T* restrict out, const T* restrict rows, ptrdiff_t row_stride,         \
            const T* coeff, ptrdiff_t count_in) {                                  \
        int first = 1;                                                             \
        for (ptrdiff_t k = 0; k < count_in; k++) {                                 \
            const T c = coeff[k];                                                  \
            if (c == 0) continue;                                                  \
            const T* restrict src = rows + k * row_stride;                         \
            if (first) {                                                           \
                for (ptrdiff_t p = 0; p < XGRAD_WINOGRAD_BLOCK; p++) out[p] = c * src[p]; \
                first = 0;                                                         \
            } else {                                                               \
                for (ptrdiff_t p = 0; p < XGRAD_WINOGRAD_BLOCK; p++) out[p] += c * src[p]; \
            }                                                                      \
        }                                                                          \
        if (first) memset(out, 0, XGRAD_WINOGRAD_BLOCK * sizeof(T));               \
    }                                                                              \
    ATTR static void xgrad_winograd_transform_##sfx##_##isa(                       \
            const T* left, ptrdiff_t rows_out, const T* right, ptrdiff_t cols_out,  \
            ptrdiff_t rows_in, ptrdiff_t cols_in, const T* restrict d,             \
            T* restrict t, T* restrict out) {                                      \
        const ptrdiff_t B = XGRAD_WINOGRAD_BLOCK;                                  \
        for (ptrdiff_t i = 0; i < rows_out; i++)                                   \
            for (ptrdiff_t s = 0; s < cols_in; s++)                                \
                xgrad_winograd_combine_##sfx##_##isa(                              \
                    t + (i * cols_in + s) * B, d + s * B, cols_in * B,             \
                    left + i * rows_in, rows_in);                                  \
        for (ptrdiff_t i = 0; i < rows_out; i++)                                   \
            for (ptrdiff_t j = 0; j < cols_out; j++)                               \
                xgrad_winograd_combine_##sfx##_##isa(                              \
                    out + (i * cols_out + j) * B, t + i * cols_in * B, B,          \
                    right + j * cols_in, cols_in);                                 \
    }

#define XGRAD_WINOGRAD(T, sfx)                                                     \
    XGRAD_EACH_PATH(XGRAD_WINOGRAD_AT, T, sfx)                                     \
    static void xgrad_winograd_transform_##sfx(                                    \
            const T* left, ptrdiff_t rows_out, const T* right, ptrdiff_t cols_out,  \
            ptrdiff_t rows_in, ptrdiff_t cols_in, const T* d, T* t, T* out) {       \
        XGRAD_CALL(xgrad_winograd_transform_##sfx,                                 \
                   (left, rows_out, right, cols_out, rows_in, cols_in, d, t, out)); \
    }

XGRAD_WINOGRAD(float, f32)
XGRAD_WINOGRAD(double, f64)

#endif
