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

/* The matrices with kernels of their own (XGRAD_WINOGRAD_ROWS): B^T of the
 * six points (F(4x4, 3x3) and F(2x2, 5x5)) and of the eight (F(4x4, 5x5)),
 * A^T of F(4x4, 3x3), F(2x2, 5x5) and F(4x4, 5x5), and their transposes A
 * (the gradient tiles' left matrix).
 * Why: the matrix-driven combination below reads and writes its output row
 * once per nonzero coefficient, through memory; these hold a lane's inputs
 * and outputs in registers (F(4x4, 3x3)'s input tiles took 60-70 ns a tile
 * on Zen 3's AVX2 with the matrix-driven one). Each output is the same sum
 * in the same order as the matrix-driven combination (the first nonzero
 * term, then the others in column order; times 1 and -1 are exact), so
 * both give the same bits. The caller names the kind (winograd_kernels.pyx
 * matches the matrix); XGRAD_WINOGRAD_ANY is the matrix-driven path. */
enum {
    XGRAD_WINOGRAD_ANY = 0,
    XGRAD_WINOGRAD_B6 = 1,  /* B^T, 6 x 6 */
    XGRAD_WINOGRAD_A4 = 2,  /* A^T of F(4x4, 3x3), 4 x 6 */
    XGRAD_WINOGRAD_A4_T = 3,  /* its transpose, 6 x 4 */
    XGRAD_WINOGRAD_A2 = 4,  /* A^T of F(2x2, 5x5), 2 x 6 */
    XGRAD_WINOGRAD_A2_T = 5,  /* its transpose, 6 x 2 */
    XGRAD_WINOGRAD_B8 = 6,  /* B^T of F(4x4, 5x5), 8 x 8 */
    XGRAD_WINOGRAD_A48 = 7,  /* A^T of F(4x4, 5x5), 4 x 8 */
    XGRAD_WINOGRAD_A48_T = 8  /* its transpose, 8 x 4 */
};

/* The rows of one call never overlap (the caller's strides are whole
 * rows), which GCC cannot prove from the runtime strides: without this it
 * vectorizes the loops behind an overlap check that fails and runs them a
 * lane at a time. */
#if defined(__GNUC__) && !defined(__clang__)
#define XGRAD_IVDEP _Pragma("GCC ivdep")
#else
#define XGRAD_IVDEP
#endif

/* The rows' inputs, lane p: d0..d5 (or d7) of the six (eight) input rows,
 * q0..q3 of the four; and the first five rows of A (A^T transposed), the
 * same for F(4x4, 3x3) and F(4x4, 5x5), whose points 0, 1, -1, 2, -2 come
 * first. */
#define XGRAD_WINOGRAD_IN6(T)                                                      \
    const T d0 = in[p], d1 = in[is + p], d2 = in[2 * is + p];                      \
    const T d3 = in[3 * is + p], d4 = in[4 * is + p], d5 = in[5 * is + p];
#define XGRAD_WINOGRAD_IN8(T)                                                      \
    XGRAD_WINOGRAD_IN6(T)                                                          \
    const T d6 = in[6 * is + p], d7 = in[7 * is + p];
#define XGRAD_WINOGRAD_A_T_FIRST5(T)                                               \
    const T q0 = in[p], q1 = in[is + p], q2 = in[2 * is + p], q3 = in[3 * is + p]; \
    out[p] = q0;                                                                   \
    out[os + p] = q0 + q1 + q2 + q3;                                               \
    out[2 * os + p] = q0 - q1 + q2 - q3;                                           \
    out[3 * os + p] = q0 + (T)2 * q1 + (T)4 * q2 + (T)8 * q3;                      \
    out[4 * os + p] = q0 - (T)2 * q1 + (T)4 * q2 - (T)8 * q3;

/* out row i (out_stride apart) = row i of the kind's matrix times the
 * input rows (in_stride apart), each row BLOCK lanes. */
#define XGRAD_WINOGRAD_ROWS(isa, ATTR, T, sfx)                                     \
    ATTR static void xgrad_winograd_rows_##sfx##_##isa(                            \
            int kind, T* restrict out, ptrdiff_t os, const T* restrict in,         \
            ptrdiff_t is) {                                                        \
        const ptrdiff_t B = XGRAD_WINOGRAD_BLOCK;                                  \
        if (kind == XGRAD_WINOGRAD_B6) {                                           \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_IN6(T)                                              \
                out[p] = (T)4 * d0 - (T)5 * d2 + d4;                               \
                out[os + p] = (T)4 * d1 + (T)4 * d2 - d3 - d4;                     \
                out[2 * os + p] = (T)-4 * d1 + (T)4 * d2 + d3 - d4;                \
                out[3 * os + p] = (T)-2 * d1 - d2 + (T)2 * d3 + d4;                \
                out[4 * os + p] = (T)2 * d1 - d2 - (T)2 * d3 + d4;                 \
                out[5 * os + p] = (T)4 * d1 - (T)5 * d3 + d5;                      \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_A4) {                                    \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_IN6(T)                                              \
                out[p] = d0 + d1 + d2 + d3 + d4;                                   \
                out[os + p] = d1 - d2 + (T)2 * d3 - (T)2 * d4;                     \
                out[2 * os + p] = d1 + d2 + (T)4 * d3 + (T)4 * d4;                 \
                out[3 * os + p] = d1 - d2 + (T)8 * d3 - (T)8 * d4 + d5;            \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_A4_T) {                                  \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_A_T_FIRST5(T)                                       \
                out[5 * os + p] = q3;                                              \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_A2) {                                    \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_IN6(T)                                              \
                out[p] = d0 + d1 + d2 + d3 + d4;                                   \
                out[os + p] = d1 - d2 + (T)2 * d3 - (T)2 * d4 + d5;                \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_B8) {                                    \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_IN8(T)                                              \
                out[p] = d0 - (T)5.25 * d2 + (T)5.25 * d4 - d6;                    \
                out[os + p] = d1 + d2 - (T)4.25 * d3 - (T)4.25 * d4 + d5 + d6;     \
                out[2 * os + p] = -d1 + d2 + (T)4.25 * d3 - (T)4.25 * d4 - d5 + d6; \
                out[3 * os + p] = (T)0.5 * d1 + (T)0.25 * d2 - (T)2.5 * d3        \
                                  - (T)1.25 * d4 + (T)2 * d5 + d6;                 \
                out[4 * os + p] = (T)-0.5 * d1 + (T)0.25 * d2 + (T)2.5 * d3       \
                                  - (T)1.25 * d4 - (T)2 * d5 + d6;                 \
                out[5 * os + p] = (T)2 * d1 + (T)4 * d2 - (T)2.5 * d3             \
                                  - (T)5 * d4 + (T)0.5 * d5 + d6;                  \
                out[6 * os + p] = (T)-2 * d1 + (T)4 * d2 + (T)2.5 * d3            \
                                  - (T)5 * d4 - (T)0.5 * d5 + d6;                  \
                out[7 * os + p] = -d1 + (T)5.25 * d3 - (T)5.25 * d5 + d7;          \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_A48) {                                   \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_IN8(T)                                              \
                out[p] = d0 + d1 + d2 + d3 + d4 + d5 + d6;                         \
                out[os + p] = d1 - d2 + (T)2 * d3 - (T)2 * d4 + (T)0.5 * d5        \
                              - (T)0.5 * d6;                                       \
                out[2 * os + p] = d1 + d2 + (T)4 * d3 + (T)4 * d4 + (T)0.25 * d5   \
                                  + (T)0.25 * d6;                                  \
                out[3 * os + p] = d1 - d2 + (T)8 * d3 - (T)8 * d4 + (T)0.125 * d5  \
                                  - (T)0.125 * d6 + d7;                            \
            }                                                                      \
        } else if (kind == XGRAD_WINOGRAD_A48_T) {                                 \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                XGRAD_WINOGRAD_A_T_FIRST5(T)                                       \
                out[5 * os + p] = q0 + (T)0.5 * q1 + (T)0.25 * q2 + (T)0.125 * q3; \
                out[6 * os + p] = q0 - (T)0.5 * q1 + (T)0.25 * q2 - (T)0.125 * q3; \
                out[7 * os + p] = q3;                                              \
            }                                                                      \
        } else { /* XGRAD_WINOGRAD_A2_T */                                         \
            XGRAD_IVDEP for (ptrdiff_t p = 0; p < B; p++) {                        \
                const T q0 = in[p], q1 = in[is + p];                               \
                out[p] = q0;                                                       \
                out[os + p] = q0 + q1;                                             \
                out[2 * os + p] = q0 - q1;                                         \
                out[3 * os + p] = q0 + (T)2 * q1;                                  \
                out[4 * os + p] = q0 - (T)2 * q1;                                  \
                out[5 * os + p] = q1;                                              \
            }                                                                      \
        }                                                                          \
    }

/* out = left . d . right^T for the block: left is (rows_out, rows_in),
 * right (cols_out, cols_in), row-major; value (r, s) of the block's tiles
 * is the row d + (r * cols_in + s) * d_stride (XGRAD_WINOGRAD_BLOCK for a
 * gathered block; the planes' distance when read in place), t is scratch
 * of rows_out * cols_in rows. With a kind other than XGRAD_WINOGRAD_ANY,
 * left and right are both that kind's matrix (every transform here
 * multiplies by one matrix on both sides) and its kernel computes each
 * pass; otherwise zero coefficients (half of B^T's and A^T's) are
 * skipped. */
#define XGRAD_WINOGRAD_AT(isa, ATTR, T, sfx)                                       \
    XGRAD_WINOGRAD_ROWS(isa, ATTR, T, sfx)                                         \
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
            int kind, const T* left, ptrdiff_t rows_out, const T* right,           \
            ptrdiff_t cols_out, ptrdiff_t rows_in, ptrdiff_t cols_in,              \
            const T* restrict d, ptrdiff_t d_stride, T* restrict t,                \
            T* restrict out) {                                                     \
        const ptrdiff_t B = XGRAD_WINOGRAD_BLOCK;                                  \
        if (kind != XGRAD_WINOGRAD_ANY) {                                          \
            for (ptrdiff_t s = 0; s < cols_in; s++)                                \
                xgrad_winograd_rows_##sfx##_##isa(kind, t + s * B, cols_in * B,    \
                                                  d + s * d_stride,                \
                                                  cols_in * d_stride);             \
            for (ptrdiff_t i = 0; i < rows_out; i++)                               \
                xgrad_winograd_rows_##sfx##_##isa(kind, out + i * cols_out * B, B, \
                                                  t + i * cols_in * B, B);         \
            return;                                                                \
        }                                                                          \
        for (ptrdiff_t i = 0; i < rows_out; i++)                                   \
            for (ptrdiff_t s = 0; s < cols_in; s++)                                \
                xgrad_winograd_combine_##sfx##_##isa(                              \
                    t + (i * cols_in + s) * B, d + s * d_stride, cols_in * d_stride, \
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
            int kind, const T* left, ptrdiff_t rows_out, const T* right,           \
            ptrdiff_t cols_out, ptrdiff_t rows_in, ptrdiff_t cols_in, const T* d,  \
            ptrdiff_t d_stride, T* t, T* out) {                                    \
        XGRAD_CALL(xgrad_winograd_transform_##sfx,                                 \
                   (kind, left, rows_out, right, cols_out, rows_in, cols_in, d,    \
                    d_stride, t, out));                                            \
    }

XGRAD_WINOGRAD(float, f32)
XGRAD_WINOGRAD(double, f64)

/* Four float tiles of 4x4 blocks side by side (m = 4: tile t at column 4 t)
 * moved between a plane and a block's rows by 4x4 transposes, where one
 * tile at a time moves each value alone (the tiles' gather took 40% of the
 * input transform with F(4x4, 3x3) after its arithmetic was written out).
 * SSE2 is x86-64's baseline, so every dispatch path runs these; elsewhere
 * the plain loops. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define XGRAD_WINOGRAD_SSE2 1
#else
#define XGRAD_WINOGRAD_SSE2 0
#endif

/* d[(r * side + s) * BLOCK + t] = p[r * stride + 4 t + s] for the four
 * tiles t < 4 of side ``side`` (4, 6 or 8). Reads up to p[r * stride + 19]
 * (the caller's plane has room past its last row). */
static inline void xgrad_winograd_load4_f32(const float* p, ptrdiff_t stride, ptrdiff_t side,
                                            float* d) {
    const ptrdiff_t B = XGRAD_WINOGRAD_BLOCK;
    for (ptrdiff_t r = 0; r < side; r++) {
        const float* row = p + r * stride;
        float* dst = d + r * side * B;
#if XGRAD_WINOGRAD_SSE2
        __m128 v0 = _mm_loadu_ps(row), v1 = _mm_loadu_ps(row + 4);
        __m128 v2 = _mm_loadu_ps(row + 8), v3 = _mm_loadu_ps(row + 12);
        _MM_TRANSPOSE4_PS(v0, v1, v2, v3);  /* v_s: value s of the four tiles */
        _mm_storeu_ps(dst, v0);
        _mm_storeu_ps(dst + B, v1);
        _mm_storeu_ps(dst + 2 * B, v2);
        _mm_storeu_ps(dst + 3 * B, v3);
        if (side > 4) {  /* values 4.. are values 0.. of the tiles one further */
            __m128 w0 = _mm_loadu_ps(row + 4), w1 = _mm_loadu_ps(row + 8);
            __m128 w2 = _mm_loadu_ps(row + 12), w3 = _mm_loadu_ps(row + 16);
            _MM_TRANSPOSE4_PS(w0, w1, w2, w3);
            _mm_storeu_ps(dst + 4 * B, w0);
            _mm_storeu_ps(dst + 5 * B, w1);
            if (side > 6) {
                _mm_storeu_ps(dst + 6 * B, w2);
                _mm_storeu_ps(dst + 7 * B, w3);
            }
        }
#else
        for (ptrdiff_t s = 0; s < side; s++)
            for (ptrdiff_t t = 0; t < 4; t++) dst[s * B + t] = row[4 * t + s];
#endif
    }
}

/* dst[r * stride + 4 t + s] = out[(r * 4 + s) * BLOCK + t] + b0 for the four
 * whole 4x4 blocks t < 4 of a transformed block's rows. */
static inline void xgrad_winograd_store4_f32(const float* out, float* dst, ptrdiff_t stride,
                                             float b0) {
    const ptrdiff_t B = XGRAD_WINOGRAD_BLOCK;
    for (ptrdiff_t r = 0; r < 4; r++) {
        const float* src = out + r * 4 * B;
        float* row = dst + r * stride;
#if XGRAD_WINOGRAD_SSE2
        const __m128 bias = _mm_set1_ps(b0);
        __m128 v0 = _mm_loadu_ps(src), v1 = _mm_loadu_ps(src + B);
        __m128 v2 = _mm_loadu_ps(src + 2 * B), v3 = _mm_loadu_ps(src + 3 * B);
        _MM_TRANSPOSE4_PS(v0, v1, v2, v3);  /* v_t: row r of block t */
        _mm_storeu_ps(row, _mm_add_ps(v0, bias));
        _mm_storeu_ps(row + 4, _mm_add_ps(v1, bias));
        _mm_storeu_ps(row + 8, _mm_add_ps(v2, bias));
        _mm_storeu_ps(row + 12, _mm_add_ps(v3, bias));
#else
        for (ptrdiff_t t = 0; t < 4; t++)
            for (ptrdiff_t s = 0; s < 4; s++) row[4 * t + s] = src[s * B + t] + b0;
#endif
    }
}

#endif
