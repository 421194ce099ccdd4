/* Transposing copy of a float32 matrix, dst = src^T, by 8 x 8 tiles
 * transposed in AVX registers (three rounds of shuffles), 16 rows of src
 * at a time so that each row of dst gets a whole 64-byte line.
 *
 * Why: the tap-group convolution moves the batch to the last axis and back
 * (tap_columns.pyx); a scalar tiled loop ran at 0.3-0.64 ns an element,
 * NumPy's transposing copy at 2.7 ns on a (64, 4096) matrix.
 *
 * Tall matrices (fewer columns than rows) go along dst's rows instead, 8
 * of them at a time, so that dst is written as runs.
 *
 * xgrad_transpose_rows(path, ...) does rows r_lo..r_hi of src (so callers
 * can split the rows over threads); the SSE2 path and the ragged edges are
 * scalar loops. The result is exact (a copy) on every path.
 */
#ifndef XGRAD_TRANSPOSE_H
#define XGRAD_TRANSPOSE_H

#include <stddef.h>

#include "cpu_paths.h"

typedef ptrdiff_t xgrad_tidx;

/* dst[c, r] = src[r, c] for r_lo <= r < r_hi, c_lo <= c < c_hi. */
static void xgrad_transpose_scalar(const float* src, xgrad_tidx src_ld, float* dst,
                                   xgrad_tidx dst_ld, xgrad_tidx r_lo, xgrad_tidx r_hi,
                                   xgrad_tidx c_lo, xgrad_tidx c_hi) {
    for (xgrad_tidx c = c_lo; c < c_hi; c++)
        for (xgrad_tidx r = r_lo; r < r_hi; r++)
            dst[c * dst_ld + r] = src[r * src_ld + c];
}

#if XGRAD_HAS_PATHS
#include <immintrin.h>

/* The 8 x 8 tile at src (rows src_ld apart) transposed into dst. */
__attribute__((target("avx2"), always_inline)) static inline void xgrad_transpose_tile8(
        const float* src, xgrad_tidx src_ld, float* dst, xgrad_tidx dst_ld) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * src_ld);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * dst_ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * dst_ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

__attribute__((target("avx2"))) static void xgrad_transpose_avx(
        const float* src, xgrad_tidx src_ld, float* dst, xgrad_tidx dst_ld, xgrad_tidx cols,
        xgrad_tidx r_lo, xgrad_tidx r_hi) {
    xgrad_tidx r = r_lo, full = cols - cols % 8;
    if (cols < r_hi - r_lo) {  /* tall: along dst's rows, 8 at a time */
        xgrad_tidx rows_full = r_lo + (r_hi - r_lo) / 8 * 8;
        for (xgrad_tidx c = 0; c < full; c += 8)
            for (xgrad_tidx i = r_lo; i < rows_full; i += 8)
                xgrad_transpose_tile8(src + i * src_ld + c, src_ld, dst + c * dst_ld + i, dst_ld);
        xgrad_transpose_scalar(src, src_ld, dst, dst_ld, r_lo, rows_full, full, cols);
        xgrad_transpose_scalar(src, src_ld, dst, dst_ld, rows_full, r_hi, 0, cols);
        return;
    }
    for (; r + 16 <= r_hi; r += 16) {
        for (xgrad_tidx c = 0; c < full; c += 8) {
            xgrad_transpose_tile8(src + r * src_ld + c, src_ld, dst + c * dst_ld + r, dst_ld);
            xgrad_transpose_tile8(src + (r + 8) * src_ld + c, src_ld, dst + c * dst_ld + r + 8,
                                  dst_ld);
        }
        xgrad_transpose_scalar(src, src_ld, dst, dst_ld, r, r + 16, full, cols);
    }
    for (; r + 8 <= r_hi; r += 8) {
        for (xgrad_tidx c = 0; c < full; c += 8)
            xgrad_transpose_tile8(src + r * src_ld + c, src_ld, dst + c * dst_ld + r, dst_ld);
        xgrad_transpose_scalar(src, src_ld, dst, dst_ld, r, r + 8, full, cols);
    }
    xgrad_transpose_scalar(src, src_ld, dst, dst_ld, r, r_hi, 0, cols);
}
#endif

/* Rows r_lo..r_hi of src (cols wide) into the columns r_lo..r_hi of dst. */
static void xgrad_transpose_rows(int path, const float* src, xgrad_tidx src_ld, float* dst,
                                 xgrad_tidx dst_ld, xgrad_tidx cols, xgrad_tidx r_lo,
                                 xgrad_tidx r_hi) {
#if XGRAD_HAS_PATHS
    if (path == XGRAD_PATH_AVX2 || path == XGRAD_PATH_AVX512) {
        xgrad_transpose_avx(src, src_ld, dst, dst_ld, cols, r_lo, r_hi);
        return;
    }
#else
    (void)path;
#endif
    for (xgrad_tidx r0 = r_lo; r0 < r_hi; r0 += 16)  /* 16 x 16 blocks */
        for (xgrad_tidx c0 = 0; c0 < cols; c0 += 16)
            xgrad_transpose_scalar(src, src_ld, dst, dst_ld, r0, r0 + 16 < r_hi ? r0 + 16 : r_hi,
                                   c0, c0 + 16 < cols ? c0 + 16 : cols);
}

#endif
