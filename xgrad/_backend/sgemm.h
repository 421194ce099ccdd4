/* xgrad's own single-precision GEMM, C (+)= A B, for the convolution
 * products the BLAS runs well below this machine's peak.
 *
 * Why: OpenBLAS's sgemm reaches 0.8-0.9 of a core's peak on large squares,
 * but a convolution's products are skinny: the input gradient W^T gy has K
 * = the output channels (16-64), the forward W cols M = the output
 * channels. There OpenBLAS ran at 41-79 GFLOP/s on one Zen 4 core (peak
 * about 116), while this blocked loop, the classic one of BLIS (Van Zee and
 * van de Geijn, 2015), runs at 95-109.
 *
 * Layout: the loops go over blocks of NC columns of B and C (NC_COLUMNS),
 * within them KC steps of K (KC_DEPTH), within those MC rows of A
 * (MC_ROWS); A's block is packed into panels of MR rows (each k's MR values
 * side by side) and B's into panels of NR columns, so that the micro-kernel
 * reads both as consecutive vectors: MR x NR results kept in registers, one
 * vector FMA per (row, vector of columns) per k. Where A has few rows (at
 * most DIRECT_B_ROWS) and B's rows are contiguous, B is read in place
 * (each panel reused for too few rows to pay for a copy); likewise A where
 * C has few columns: at most DIRECT_A_COLUMNS with A's rows contiguous,
 * at most DIRECT_COLUMN_MAJOR_A_COLUMNS with its columns contiguous (the
 * transposed weights W^T of conv's input gradient on small images, the
 * tap groups' columns^T in the weight gradient). Column-major A read in
 * place, not packed, one thread, Zen 3, steps over torch's (5-7 paired
 * processes): 256->256 3x3 on 8x8 at batch 1 0.93x the packed one's time,
 * 64->64 3x3 stride 2 on 4x4 at batch 8 0.95x, 16->32 5x5 stride 2 on
 * 16x16 at batch 64 0.94x, conv_transpose 64->64 5x5 stride 2 on 16x16 at
 * batch 64 0.93x; at 64 columns 0.98-1.06x, and the product (1152 x 128)
 * (128 x 128) alone 1.05x: the limit is 64 (measured on AVX2 only).
 *
 * Two micro-kernels: 8 x 32 for AVX-512 (16 zmm accumulators) and 6 x 16
 * for AVX2 (12 ymm of its 16 registers). Without either (the SSE2 path,
 * other compilers or CPUs) xgrad_sgemm_available() is 0 and callers use
 * the BLAS.
 *
 * Rounding: each result is a sum of K products in k order, blocked by
 * KC_DEPTH, with FMA; not bit for bit the BLAS's.
 */
#ifndef XGRAD_SGEMM_H
#define XGRAD_SGEMM_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_paths.h"

#define XGRAD_SGEMM_KC_DEPTH 256
#define XGRAD_SGEMM_NC_COLUMNS 1024  /* a packed B block of KC x NC: 1 MiB, an L2 */
#define XGRAD_SGEMM_MAX_MR 8
#define XGRAD_SGEMM_AVX512_MR 8  /* the micro-kernels' tile rows */
#define XGRAD_SGEMM_AVX2_MR 6
#define XGRAD_SGEMM_MAX_NR 32
#define XGRAD_SGEMM_DIRECT_B_ROWS 64
#define XGRAD_SGEMM_DIRECT_A_COLUMNS 256
#define XGRAD_SGEMM_DIRECT_COLUMN_MAJOR_A_COLUMNS 64

typedef ptrdiff_t xgrad_idx;

/* A strided matrix operand: element (i, j) at data[i * rs + j * cs]. */
typedef struct {
    const float* data;
    xgrad_idx rs, cs;
} xgrad_matrix;

/* c[MR x NR] (rows ldc apart) = (or += when acc) the product of MR rows of
 * A, row i's value k at a[i * ars + k * acs] (a packed panel: ars 1, acs
 * MR; A in place: ars its row stride, acs 1), and the B panel b (k rows of
 * NR, ldb apart). */
typedef void (*xgrad_micro_kernel)(xgrad_idx k, const float* a, xgrad_idx ars, xgrad_idx acs,
                                   const float* b, xgrad_idx ldb, float* c, xgrad_idx ldc,
                                   int acc);

#if XGRAD_HAS_PATHS
#include <immintrin.h>

__attribute__((target("avx512f"), always_inline)) static inline void xgrad_sgemm_body_avx512(
        xgrad_idx k, const float* a, xgrad_idx ars, xgrad_idx acs, const float* b,
        xgrad_idx ldb, float* c, xgrad_idx ldc, int acc) {
    __m512 r[8][2];
    for (int i = 0; i < 8; i++)
        r[i][0] = r[i][1] = _mm512_setzero_ps();
    for (xgrad_idx p = 0; p < k; p++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        for (int i = 0; i < 8; i++) {
            __m512 x = _mm512_set1_ps(a[i * ars]);
            r[i][0] = _mm512_fmadd_ps(x, b0, r[i][0]);
            r[i][1] = _mm512_fmadd_ps(x, b1, r[i][1]);
        }
        a += acs;
        b += ldb;
    }
    for (int i = 0; i < 8; i++) {
        float* row = c + i * ldc;
        if (acc) {
            r[i][0] = _mm512_add_ps(r[i][0], _mm512_loadu_ps(row));
            r[i][1] = _mm512_add_ps(r[i][1], _mm512_loadu_ps(row + 16));
        }
        _mm512_storeu_ps(row, r[i][0]);
        _mm512_storeu_ps(row + 16, r[i][1]);
    }
}

/* The AVX2 body names its 12 accumulators one by one: with 16 ymm registers
 * (12 sums, two B vectors, one broadcast) GCC 12 kept an array of them in
 * memory too, storing 10 of them on every k (30 GFLOP/s on a Zen 3 core,
 * against OpenBLAS's 60-88). */
#define XGRAD_SGEMM_AVX2_ROW(i, c0, c1)                          \
    do {                                                        \
        __m256 x = _mm256_broadcast_ss(a + (i) * ars);          \
        c0 = _mm256_fmadd_ps(x, b0, c0);                        \
        c1 = _mm256_fmadd_ps(x, b1, c1);                        \
    } while (0)
#define XGRAD_SGEMM_AVX2_STORE(i, c0, c1)                        \
    do {                                                        \
        float* row = c + (i) * ldc;                             \
        if (acc) {                                              \
            c0 = _mm256_add_ps(c0, _mm256_loadu_ps(row));       \
            c1 = _mm256_add_ps(c1, _mm256_loadu_ps(row + 8));   \
        }                                                       \
        _mm256_storeu_ps(row, c0);                              \
        _mm256_storeu_ps(row + 8, c1);                          \
    } while (0)

/* step(i, sum of columns 0-7, sum of columns 8-15) for each of the 6 rows */
#define XGRAD_SGEMM_AVX2_EACH_ROW(step)                                          \
    do {                                                                        \
        step(0, r00, r01); step(1, r10, r11); step(2, r20, r21);                \
        step(3, r30, r31); step(4, r40, r41); step(5, r50, r51);                \
    } while (0)

__attribute__((target("avx2,fma"), always_inline)) static inline void xgrad_sgemm_body_avx2(
        xgrad_idx k, const float* a, xgrad_idx ars, xgrad_idx acs, const float* b,
        xgrad_idx ldb, float* c, xgrad_idx ldc, int acc) {
    __m256 r00 = _mm256_setzero_ps(), r01 = r00, r10 = r00, r11 = r00, r20 = r00, r21 = r00,
           r30 = r00, r31 = r00, r40 = r00, r41 = r00, r50 = r00, r51 = r00;
    for (xgrad_idx p = 0; p < k; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        XGRAD_SGEMM_AVX2_EACH_ROW(XGRAD_SGEMM_AVX2_ROW);
        a += acs;
        b += ldb;
    }
    XGRAD_SGEMM_AVX2_EACH_ROW(XGRAD_SGEMM_AVX2_STORE);
}

/* Each micro-kernel twice: for packed panels of A (its addressing known at
 * compile time) and for A read in place. */
#define XGRAD_SGEMM_KERNELS(isa, features, mr)                                         \
    __attribute__((target(features))) static void xgrad_sgemm_packed_##isa(            \
            xgrad_idx k, const float* a, xgrad_idx ars, xgrad_idx acs, const float* b,  \
            xgrad_idx ldb, float* c, xgrad_idx ldc, int acc) {                        \
        (void)ars; (void)acs;                                                          \
        xgrad_sgemm_body_##isa(k, a, 1, mr, b, ldb, c, ldc, acc);                      \
    }                                                                                  \
    __attribute__((target(features))) static void xgrad_sgemm_direct_##isa(            \
            xgrad_idx k, const float* a, xgrad_idx ars, xgrad_idx acs, const float* b,  \
            xgrad_idx ldb, float* c, xgrad_idx ldc, int acc) {                        \
        xgrad_sgemm_body_##isa(k, a, ars, acs, b, ldb, c, ldc, acc);                   \
    }
XGRAD_SGEMM_KERNELS(avx512, "avx512f", XGRAD_SGEMM_AVX512_MR)
XGRAD_SGEMM_KERNELS(avx2, "avx2,fma", XGRAD_SGEMM_AVX2_MR)
#endif

/* The micro-kernels of a dispatch path and their tile. */
typedef struct {
    xgrad_micro_kernel kernel;  /* packed A */
    xgrad_micro_kernel direct;  /* A in place */
    int mr, nr, mc;
} xgrad_sgemm_shape;

/* The shape for `path`; kernel NULL where there is none. */
static xgrad_sgemm_shape xgrad_sgemm_shape_for(int path) {
    xgrad_sgemm_shape s = {NULL, NULL, 0, 0, 0};
#if XGRAD_HAS_PATHS
    if (path == XGRAD_PATH_AVX512) {
        s.kernel = xgrad_sgemm_packed_avx512; s.direct = xgrad_sgemm_direct_avx512;
        s.mr = XGRAD_SGEMM_AVX512_MR; s.nr = 32; s.mc = 128;
    } else if (path == XGRAD_PATH_AVX2) {
        s.kernel = xgrad_sgemm_packed_avx2; s.direct = xgrad_sgemm_direct_avx2;
        s.mr = XGRAD_SGEMM_AVX2_MR; s.nr = 16; s.mc = 72;
    }
#else
    (void)path;
#endif
    return s;
}

#if XGRAD_HAS_PATHS  /* (GCC on x86-64: the only builds with a micro-kernel) */

#include "transpose.h"

/* One whole panel (nr columns, a multiple of 8) of a column-major B (each
 * column contiguous, cs apart) packed by 8 x 8 tiles transposed in AVX
 * registers: a linear layer's x W^T reads W's rows as B's columns, and
 * with a batch of 16-64 rows each packed element serves 16-64 multiply-adds
 * only; packed an element at a time, the copy took 0.44 ns an element, as
 * long as the product itself (16 x 1024 times 1024 x 1024: 602 us against
 * 161 with B's rows contiguous). Both paths with a micro-kernel have AVX2. */
__attribute__((target("avx2"))) static void xgrad_sgemm_pack_columns(
        const float* src, xgrad_idx cs, xgrad_idx kc, int nr, float* p) {
    xgrad_idx k0 = 0;
    for (; k0 + 8 <= kc; k0 += 8)
        for (int j0 = 0; j0 < nr; j0 += 8)
            xgrad_transpose_tile8(src + j0 * cs + k0, cs, p + k0 * nr + j0, nr);
    for (int j = 0; j < nr; j++)
        for (xgrad_idx k = k0; k < kc; k++)
            p[k * nr + j] = src[j * cs + k];
}

/* A[0:mc, 0:kc] packed into panels of mr rows (zeros past mc). */
static void xgrad_sgemm_pack_a(xgrad_matrix a, xgrad_idx mc, xgrad_idx kc, int mr, float* p) {
    for (xgrad_idx i0 = 0; i0 < mc; i0 += mr, p += kc * mr) {
        xgrad_idx m = mc - i0 < mr ? mc - i0 : mr;
        const float* src = a.data + i0 * a.rs;
        for (xgrad_idx k = 0; k < kc; k++) {
            xgrad_idx i = 0;
            for (; i < m; i++)
                p[k * mr + i] = src[i * a.rs + k * a.cs];
            for (; i < mr; i++)
                p[k * mr + i] = 0.0f;
        }
    }
}

/* B[0:kc, 0:nc] packed into panels of nr columns (zeros past nc). */
static void xgrad_sgemm_pack_b(xgrad_matrix b, xgrad_idx kc, xgrad_idx nc, int nr, float* p) {
    for (xgrad_idx j0 = 0; j0 < nc; j0 += nr, p += kc * nr) {
        xgrad_idx n = nc - j0 < nr ? nc - j0 : nr;
        const float* src = b.data + j0 * b.cs;
        if (b.cs == 1 && n == nr) {
            for (xgrad_idx k = 0; k < kc; k++)
                memcpy(p + k * nr, src + k * b.rs, (size_t)nr * sizeof(float));
            continue;
        }
        if (b.rs == 1 && n == nr) {
            xgrad_sgemm_pack_columns(src, b.cs, kc, nr, p);
            continue;
        }
        if (b.rs == 1) {  /* column-major (conv's weight gradient, rows^T): read down
                           * each column, contiguous, not across the columns with
                           * the strides variables (that product 5-19% faster) */
            xgrad_idx j = 0;
            for (; j < n; j++) {
                const float* col = src + j * b.cs;
                for (xgrad_idx k = 0; k < kc; k++)
                    p[k * nr + j] = col[k];
            }
            for (; j < nr; j++)
                for (xgrad_idx k = 0; k < kc; k++)
                    p[k * nr + j] = 0.0f;
            continue;
        }
        for (xgrad_idx k = 0; k < kc; k++) {
            xgrad_idx j = 0;
            for (; j < n; j++)
                p[k * nr + j] = src[k * b.rs + j * b.cs];
            for (; j < nr; j++)
                p[k * nr + j] = 0.0f;
        }
    }
}

/* Scratch for one thread's packed panels: grown as needed, kept for the
 * next call (the pool's workers live as long as the process). */
static _Thread_local float* xgrad_sgemm_scratch = NULL;
static _Thread_local size_t xgrad_sgemm_scratch_floats = 0;

static float* xgrad_sgemm_buffer(size_t floats) {
    if (floats > xgrad_sgemm_scratch_floats) {
        free(xgrad_sgemm_scratch);
        xgrad_sgemm_scratch = (float*)aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        xgrad_sgemm_scratch_floats = xgrad_sgemm_scratch ? floats : 0;
    }
    return xgrad_sgemm_scratch;
}

/* C[m x n] (rows ldc apart) = A[m x k] B[k x n], plus C's values when acc,
 * on the calling thread with the kernel of `s`. 0 when the scratch cannot
 * be allocated (C is then unchanged). */
static int xgrad_sgemm_run(xgrad_sgemm_shape s, xgrad_idx m, xgrad_idx n, xgrad_idx k,
                           xgrad_matrix a, xgrad_matrix b, float* c, xgrad_idx ldc, int acc) {
    const int mr = s.mr, nr = s.nr;
    const xgrad_idx kc_max = k < XGRAD_SGEMM_KC_DEPTH ? k : XGRAD_SGEMM_KC_DEPTH;
    const int direct = b.cs == 1 && m <= XGRAD_SGEMM_DIRECT_B_ROWS;
    const int direct_a = n <= (a.cs == 1   ? XGRAD_SGEMM_DIRECT_A_COLUMNS
                               : a.rs == 1 ? XGRAD_SGEMM_DIRECT_COLUMN_MAJOR_A_COLUMNS
                                           : 0);
    const xgrad_idx nc_max = direct ? nr : XGRAD_SGEMM_NC_COLUMNS;
    size_t a_floats = (size_t)(s.mc + mr) * kc_max, b_floats = (size_t)(nc_max + nr) * kc_max;
    float* pa = xgrad_sgemm_buffer(a_floats + b_floats + (size_t)mr * nr);
    if (pa == NULL)
        return 0;
    float* pb = pa + a_floats;
    float* edge = pb + b_floats;  /* one MR x NR tile for the edges */
    if (k == 0) {  /* an empty sum */
        if (!acc)
            for (xgrad_idx i = 0; i < m; i++)
                memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return 1;
    }
    for (xgrad_idx jc = 0; jc < n; jc += XGRAD_SGEMM_NC_COLUMNS) {
        xgrad_idx nc = n - jc < XGRAD_SGEMM_NC_COLUMNS ? n - jc : XGRAD_SGEMM_NC_COLUMNS;
        for (xgrad_idx pc = 0; pc < k; pc += XGRAD_SGEMM_KC_DEPTH) {
            xgrad_idx kc = k - pc < XGRAD_SGEMM_KC_DEPTH ? k - pc : XGRAD_SGEMM_KC_DEPTH;
            int add = acc || pc > 0;
            xgrad_matrix bk = {b.data + pc * b.rs + jc * b.cs, b.rs, b.cs};
            if (!direct)
                xgrad_sgemm_pack_b(bk, kc, nc, nr, pb);
            for (xgrad_idx ic = 0; ic < m; ic += s.mc) {
                xgrad_idx mc = m - ic < s.mc ? m - ic : s.mc;
                xgrad_matrix ak = {a.data + ic * a.rs + pc * a.cs, a.rs, a.cs};
                if (!direct_a)
                    xgrad_sgemm_pack_a(ak, mc, kc, mr, pa);
                for (xgrad_idx jr = 0; jr < nc; jr += nr) {
                    xgrad_idx nn = nc - jr < nr ? nc - jr : nr;
                    const float* panel = pb + jr * kc;
                    xgrad_idx ldb = nr;
                    if (direct && nn == nr) {  /* B's own rows */
                        panel = bk.data + jr;
                        ldb = b.rs;
                    } else if (direct) {  /* the last, partial panel */
                        xgrad_matrix tail = {bk.data + jr, b.rs, 1};
                        xgrad_sgemm_pack_b(tail, kc, nn, nr, pb);
                        panel = pb;
                    }
                    for (xgrad_idx ir = 0; ir < mc; ir += mr) {
                        xgrad_idx mm = mc - ir < mr ? mc - ir : mr;
                        float* tile = c + (ic + ir) * ldc + jc + jr;
                        const float* rows = pa + ir * kc;
                        if (direct_a && mm == mr) {
                            if (nn == nr) {
                                s.direct(kc, ak.data + ir * a.rs, a.rs, a.cs, panel, ldb, tile,
                                         ldc, add);
                                continue;
                            }
                            s.direct(kc, ak.data + ir * a.rs, a.rs, a.cs, panel, ldb, edge, nr, 0);
                        } else {
                            if (direct_a) {  /* the last, partial rows */
                                xgrad_matrix tail = {ak.data + ir * a.rs, a.rs, a.cs};
                                xgrad_sgemm_pack_a(tail, mm, kc, mr, pa);
                                rows = pa;
                            }
                            if (mm == mr && nn == nr) {
                                s.kernel(kc, rows, 1, mr, panel, ldb, tile, ldc, add);
                                continue;
                            }
                            s.kernel(kc, rows, 1, mr, panel, ldb, edge, nr, 0);
                        }
                        for (xgrad_idx i = 0; i < mm; i++)
                            for (xgrad_idx j = 0; j < nn; j++)
                                tile[i * ldc + j] = (add ? tile[i * ldc + j] : 0.0f)
                                                    + edge[i * nr + j];
                    }
                }
            }
        }
    }
    return 1;
}

#else

static int xgrad_sgemm_run(xgrad_sgemm_shape s, xgrad_idx m, xgrad_idx n, xgrad_idx k,
                           xgrad_matrix a, xgrad_matrix b, float* c, xgrad_idx ldc, int acc) {
    (void)s; (void)m; (void)n; (void)k; (void)a; (void)b; (void)c; (void)ldc; (void)acc;
    return 0;  /* never called: xgrad_sgemm_shape_for gives no kernel here */
}

#endif
#endif
