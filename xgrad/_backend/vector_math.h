/* Vectorised elementwise kernels: transcendental functions, activations and
 * their gradients, and softmax rows, for float and double.
 *
 * Why C and not Cython loops: the loops must be vectorised, and a loop that
 * calls expf/tanhf/log1pf/erff only vectorises when the compiler knows a vector
 * variant of the function exists. glibc's libmvec has them (_ZGVdN8v_expf
 * and so on, glibc >= 2.35 for tanh/log1p/expm1/erf); glibc's math.h only
 * declares them under -ffast-math, which we do not want (it would drop NaN
 * and inf handling), so they are declared here with the same attribute
 * glibc uses, when setup.py found libmvec (XGRAD_LIBMVEC). Without it the
 * same loops run scalar and give the same results within the ULP bounds of
 * tests/test_vector_math.py.
 *
 * Dispatch paths: each kernel is compiled three times, for AVX-512
 * (target "avx512f"), AVX2 (target "avx2") and the baseline x86-64 the
 * compiler's flags give (SSE2 without -march), and the name without suffix
 * calls the one xgrad_vector_path selects. native_kernels.pyx sets it once,
 * at import: the widest path the CPU supports (__builtin_cpu_supports, which
 * checks that the OS saves the wide registers too), or the one the
 * environment variable XGRAD_CPU_PATH=sse2|avx2|avx512 asks for, so that
 * tests run every path this CPU has (a path wider than the CPU's is an
 * error there). A switch on one static int per call rather than GCC's
 * target_clones ifunc, which picks at load time and cannot be overridden;
 * a call does a whole array, so the branch costs nothing measurable.
 * Without x86-64 GCC (or with XGRAD_NO_CLONES) there is one path, "generic".
 *
 * Every kernel reads and writes contiguous arrays of n elements; out may
 * alias an input. The `p` argument is the op's parameter (beta, slope,
 * alpha), ignored by kernels that have none.
 */
#ifndef XGRAD_VECTOR_MATH_H
#define XGRAD_VECTOR_MATH_H

#include <math.h>
#include <stddef.h>

#if defined(XGRAD_LIBMVEC) && defined(__GNUC__)
#define XGRAD_VEC_DECL __attribute__((__simd__("notinbranch"))) extern
XGRAD_VEC_DECL float expf(float);
XGRAD_VEC_DECL double exp(double);
XGRAD_VEC_DECL float logf(float);
XGRAD_VEC_DECL double log(double);
XGRAD_VEC_DECL float tanhf(float);
XGRAD_VEC_DECL double tanh(double);
XGRAD_VEC_DECL float log1pf(float);
XGRAD_VEC_DECL double log1p(double);
XGRAD_VEC_DECL float expm1f(float);
XGRAD_VEC_DECL double expm1(double);
XGRAD_VEC_DECL float erff(float);
XGRAD_VEC_DECL double erf(double);
#endif

#include "cpu_paths.h"

#if defined(_OPENMP) || defined(XGRAD_OPENMP_SIMD)
#define XGRAD_PRAGMA(text) _Pragma(#text)
#define XGRAD_SIMD _Pragma("omp simd")
#define XGRAD_SIMD_SUM(v) XGRAD_PRAGMA(omp simd reduction(+:v))
#define XGRAD_SIMD_MAX(v) XGRAD_PRAGMA(omp simd reduction(max:v))
#define XGRAD_SIMD_MIN_OR(v, w) XGRAD_PRAGMA(omp simd reduction(min:v) reduction(|:w))
#define XGRAD_SIMD_MAX_OR(v, w) XGRAD_PRAGMA(omp simd reduction(max:v) reduction(|:w))
#else
#define XGRAD_SIMD
#define XGRAD_SIMD_SUM(v)
#define XGRAD_SIMD_MAX(v)
#define XGRAD_SIMD_MIN_OR(v, w)
#define XGRAD_SIMD_MAX_OR(v, w)
#endif

typedef void (*xgrad_unary_f32)(const float*, float*, ptrdiff_t, double);
typedef void (*xgrad_unary_f64)(const double*, double*, ptrdiff_t, double);
/* out = f(gy, x, y): backward formulas (x or y may be NULL when unused) */
typedef void (*xgrad_grad_f32)(const float*, const float*, const float*, float*,
                               ptrdiff_t, double);
typedef void (*xgrad_grad_f64)(const double*, const double*, const double*, double*,
                               ptrdiff_t, double);

/* One loop per kernel and type. T: the type, S: the libm suffix (f or none). */
#define XGRAD_UNARY_AT(isa, ATTR, name, T, sfx, EXPR)                            \
    ATTR static void xgrad_##name##_##sfx##_##isa(                               \
            const T* restrict xs, T* restrict ys, ptrdiff_t n, double param) {   \
        const T p = (T)param;                                                    \
        (void)p;                                                                 \
        XGRAD_EXP_LO_DECL(T)                                                     \
        XGRAD_SIMD                                                               \
        for (ptrdiff_t i = 0; i < n; i++) {                                      \
            const T x = xs[i];                                                   \
            ys[i] = (EXPR);                                                      \
        }                                                                        \
    }
#define XGRAD_UNARY(name, T, sfx, EXPR)                                          \
    XGRAD_EACH_PATH(XGRAD_UNARY_AT, name, T, sfx, EXPR)                          \
    static void xgrad_##name##_##sfx(const T* xs, T* ys, ptrdiff_t n,            \
                                     double param) {                             \
        XGRAD_CALL(xgrad_##name##_##sfx, (xs, ys, n, param));                    \
    }

#define XGRAD_GRAD_AT(isa, ATTR, name, T, sfx, EXPR)                             \
    ATTR static void xgrad_##name##_##sfx##_##isa(                               \
            const T* restrict gys, const T* restrict xs, const T* restrict ys,   \
            T* restrict out, ptrdiff_t n, double param) {                        \
        const T p = (T)param;                                                    \
        (void)p; (void)xs; (void)ys;                                             \
        XGRAD_EXP_LO_DECL(T)                                                     \
        XGRAD_SIMD                                                               \
        for (ptrdiff_t i = 0; i < n; i++) {                                      \
            const T gy = gys[i];                                                 \
            out[i] = (EXPR);                                                     \
        }                                                                        \
    }
#define XGRAD_GRAD(name, T, sfx, EXPR)                                           \
    XGRAD_EACH_PATH(XGRAD_GRAD_AT, name, T, sfx, EXPR)                           \
    static void xgrad_##name##_##sfx(const T* gys, const T* xs, const T* ys,     \
                                     T* out, ptrdiff_t n, double param) {        \
        XGRAD_CALL(xgrad_##name##_##sfx, (gys, xs, ys, out, n, param));          \
    }

/* exp(v) with every lane in the vector libraries' fast range and no
 * arithmetic that underflows where the result is not tiny: libmvec (and
 * SVML) take a scalar slow path for a whole vector when a lane underflows
 * (v < -87.3 in float, -708.4 in double), and an underflowing multiply
 * costs a microcode assist; a softmax over attention scores masked with
 * -1e9 or -inf ran 7x slower. Under XGRAD_EXP_LO the result is a denormal
 * or 0, computed as exp(v + 64) * exp(-64) (rounded twice: within a unit of
 * the denormal's last place); under XGRAD_EXP_ZERO it is exp(lo) * 0. NaN
 * and +inf pass through EXP as before.
 *
 * ``lo`` is XGRAD_EXP_LO hidden from the optimiser (XGRAD_EXP_LO_DECL, once
 * per kernel, outside its loops): with a known constant GCC rewrites
 * exp(a < LO ? LO : a) as a < LO ? exp(LO) : exp(a), and the slow lanes
 * are back. */
#define XGRAD_EXP_LO(T) ((T)(sizeof(T) == 4 ? -87.0 : -708.0))
#define XGRAD_EXP_ZERO(T) ((T)(sizeof(T) == 4 ? -151.0 : -772.0))
#define XGRAD_EXP_LO_DECL(T)                                                     \
    T xgrad_exp_lo_ = XGRAD_EXP_LO(T);                                           \
    __asm__("" : "+m"(xgrad_exp_lo_));                                           \
    (void)xgrad_exp_lo_;
#define XGRAD_SAFE_EXP(T, EXP, v) ({                                              \
        const T v_ = (v);                                                        \
        const int low_ = v_ < XGRAD_EXP_LO(T);                                   \
        const int zero_ = v_ < XGRAD_EXP_ZERO(T);                                \
        T a_ = v_ + (low_ ? (T)64 : (T)0);                                       \
        a_ = a_ < xgrad_exp_lo_ ? xgrad_exp_lo_ : a_;                            \
        EXP(a_) * (zero_ ? (T)0 : low_ ? (T)1.6038108905486378e-28 : (T)1); })

/* sigmoid: exp of -|x| never overflows, and each side keeps full relative
 * accuracy (e / (1 + e) for x < 0 is exact in the far tail, where
 * 1 - 1/(1 + e) would round to 0). */
#define XGRAD_FAMILY(T, sfx, EXP, LOG, TANH, LOG1P, EXPM1, FABS, ERF)                  \
    XGRAD_UNARY(exp, T, sfx, XGRAD_SAFE_EXP(T, EXP, x))                                             \
    XGRAD_UNARY(erf, T, sfx, ERF(x))                                             \
    /* gy * 2/sqrt(pi) * exp(-x^2) */                                            \
    XGRAD_GRAD(erf_grad, T, sfx,                                                 \
        gy * ((T)1.1283791670955126 * XGRAD_SAFE_EXP(T, EXP, -(xs[i] * xs[i]))))                    \
    XGRAD_UNARY(log, T, sfx, LOG(x))                                             \
    XGRAD_UNARY(tanh, T, sfx, TANH(x))                                           \
    XGRAD_UNARY(sigmoid, T, sfx, ({                                              \
        const T e = XGRAD_SAFE_EXP(T, EXP, -FABS(x));                                               \
        const T r = (T)1 / ((T)1 + e);                                           \
        x >= 0 ? r : e * r; }))                                                  \
    /* log(1 + exp(p x)) / p = (max(p x, 0) + log1p(exp(-|p x|))) / p */         \
    XGRAD_UNARY(softplus, T, sfx,                                                \
        ((p * x > 0 ? p * x : (T)0)                                              \
         + LOG1P(XGRAD_SAFE_EXP(T, EXP, -FABS(p * x)))) / p)                        \
    XGRAD_UNARY(leaky_relu, T, sfx, x >= 0 ? x : x * p)                          \
    /* expm1 of min(x, 0), taken unconditionally so the loop vectorises;   \
     * NaN stays NaN */                                                        \
    XGRAD_UNARY(elu, T, sfx, ({                                                  \
        const T e = p * EXPM1(x > 0 ? (T)0 : x);                                 \
        x >= 0 ? x : e; }))                                                      \
    /* gy * sigmoid(p x) */                                                      \
    XGRAD_GRAD(softplus_grad, T, sfx, ({                                         \
        const T z = p * xs[i];                                                   \
        const T e = XGRAD_SAFE_EXP(T, EXP, -FABS(z));                                               \
        const T r = (T)1 / ((T)1 + e);                                           \
        gy * (z >= 0 ? r : e * r); }))                                           \
    XGRAD_GRAD(leaky_relu_grad, T, sfx, xs[i] >= 0 ? gy : gy * p)                \
    XGRAD_GRAD(elu_grad, T, sfx, xs[i] >= 0 ? gy : gy * (ys[i] + p))             \
    XGRAD_GRAD(tanh_grad, T, sfx, gy * ((T)1 - ys[i] * ys[i]))                   \
    /* GELU, x Phi(x): exact (erf), and torch's tanh approximation with     \
     * u = sqrt(2/pi) (x + 0.044715 x^3) */                                     \
    XGRAD_UNARY(gelu, T, sfx,                                                    \
        (T)0.5 * x * ((T)1 + ERF(x * (T)0.70710678118654752)))                   \
    XGRAD_GRAD(gelu_grad, T, sfx, ({                                             \
        const T x = xs[i];                                                       \
        gy * ((T)0.5 * ((T)1 + ERF(x * (T)0.70710678118654752))                  \
              + x * (T)0.39894228040143268 * XGRAD_SAFE_EXP(T, EXP, (T)-0.5 * x * x)); }))          \
    XGRAD_UNARY(gelu_tanh, T, sfx, ({                                            \
        const T u = (T)0.79788456080286536 * (x + (T)0.044715 * x * x * x);      \
        (T)0.5 * x * ((T)1 + TANH(u)); }))                                       \
    XGRAD_GRAD(gelu_tanh_grad, T, sfx, ({                                        \
        const T x = xs[i];                                                       \
        const T t = TANH((T)0.79788456080286536 * (x + (T)0.044715 * x * x * x)); \
        gy * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t)                  \
              * (T)0.79788456080286536 * ((T)1 + (T)0.134145 * x * x)); }))      \
    XGRAD_GRAD(sigmoid_grad, T, sfx, gy * ys[i] * ((T)1 - ys[i]))                \
    XGRAD_SOFTMAX(T, sfx, EXP, LOG)

/* te = the exponentials of row[j] - shift for the row's last `rest`
 * (m % ROW_TAIL) elements, in one vector pass: over the row's last
 * ROW_TAIL elements (a whole vector's load; the first ROW_TAIL - rest give
 * what the body loop gave them), or on rows shorter than that over a copy
 * padded with -inf (exp 0). The rows loops run their vector loops to m -
 * rest: their scalar remainder called the scalar exp once an element
 * (softmax over rows of 100 float32: 1.7x the time an element of rows of
 * 96). The caller adds te to a row's sum in order, as that remainder did. */
#define XGRAD_ROW_TAIL 16
#define XGRAD_ROW_TAIL_EXP(T, EXP, tail, te, row, shift)                         \
    if (m >= XGRAD_ROW_TAIL) {                                                   \
        const T* last_ = (row) + m - XGRAD_ROW_TAIL;                             \
        XGRAD_SIMD                                                               \
        for (int l = 0; l < XGRAD_ROW_TAIL; l++)                                 \
            tail[l] = XGRAD_SAFE_EXP(T, EXP, last_[l] - (shift));                \
        te = tail + XGRAD_ROW_TAIL - rest;                                       \
    } else {                                                                     \
        for (int l = 0; l < XGRAD_ROW_TAIL; l++)                                 \
            tail[l] = l < m ? (row)[l] - (shift) : (T)-INFINITY;                 \
        XGRAD_SIMD                                                               \
        for (int l = 0; l < XGRAD_ROW_TAIL; l++)                                 \
            tail[l] = XGRAD_SAFE_EXP(T, EXP, tail[l]);                           \
        te = tail;                                                               \
    }

/* STMT for each j of a row's last elements, after a loop to `body`: on a
 * row of ROW_TAIL or more, for the last ROW_TAIL of them in one vector
 * pass (PRAGMA: XGRAD_SIMD, or a reduction's), the first ROW_TAIL - rest
 * done again (STMT must give them what the loop gave); on a shorter row,
 * for all m. rest_from is the first j. */
#define XGRAD_ROW_REST(j, PRAGMA, STMT)                                          \
    if (rest) {                                                                  \
        const ptrdiff_t rest_from = m >= XGRAD_ROW_TAIL ? m - XGRAD_ROW_TAIL : 0; \
        (void)rest_from;                                                         \
        if (m >= XGRAD_ROW_TAIL) {                                               \
            PRAGMA                                                               \
            for (ptrdiff_t j = rest_from; j < rest_from + XGRAD_ROW_TAIL; j++) { STMT } \
        } else {                                                                 \
            for (ptrdiff_t j = 0; j < m; j++) { STMT }                           \
        }                                                                        \
    }

/* Softmax over the last axis: `rows` rows of m contiguous elements.
 * The shift is the row's max, or 0 when that is not finite (as NumPy's
 * path does), so rows of -inf give NaN/0 the same way. */
#define XGRAD_SOFTMAX_AT(isa, ATTR, T, sfx, EXP, LOG)                            \
    ATTR static void xgrad_softmax_rows_##sfx##_##isa(                           \
            const T* restrict x, T* restrict y, ptrdiff_t rows, ptrdiff_t m,     \
            int log_space) {                                                     \
        XGRAD_EXP_LO_DECL(T)                                                     \
        const ptrdiff_t body = m - m % XGRAD_ROW_TAIL, rest = m - body;         \
        T tail[XGRAD_ROW_TAIL];                                                  \
        const T* te;                                                             \
        for (ptrdiff_t r = 0; r < rows; r++) {                                   \
            const T* xr = x + r * m;                                             \
            T* yr = y + r * m;                                                   \
            T mx = -INFINITY;                                                    \
            XGRAD_SIMD_MAX(mx)                                                   \
            for (ptrdiff_t j = 0; j < body; j++) mx = xr[j] > mx ? xr[j] : mx;   \
            XGRAD_ROW_REST(j, XGRAD_SIMD_MAX(mx), mx = xr[j] > mx ? xr[j] : mx;)  \
            if (!isfinite(mx)) mx = 0;                                           \
            T s = 0;                                                             \
            if (log_space) {                                                     \
                XGRAD_SIMD_SUM(s)                                                \
                for (ptrdiff_t j = 0; j < body; j++) s += XGRAD_SAFE_EXP(T, EXP, xr[j] - mx);       \
                if (rest) {                                                      \
                    XGRAD_ROW_TAIL_EXP(T, EXP, tail, te, xr, mx)                 \
                    for (ptrdiff_t l = 0; l < rest; l++) s += te[l];             \
                }                                                                \
                const T ls = LOG(s);                                             \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < body; j++) yr[j] = (xr[j] - mx) - ls;  \
                XGRAD_ROW_REST(j, XGRAD_SIMD, yr[j] = (xr[j] - mx) - ls;)         \
            } else {                                                             \
                XGRAD_SIMD_SUM(s)                                                \
                for (ptrdiff_t j = 0; j < body; j++) {                           \
                    const T e = XGRAD_SAFE_EXP(T, EXP, xr[j] - mx);                                 \
                    yr[j] = e;                                                   \
                    s += e;                                                      \
                }                                                                \
                if (rest) {                                                      \
                    XGRAD_ROW_TAIL_EXP(T, EXP, tail, te, xr, mx)                 \
                    for (ptrdiff_t l = 0; l < rest; l++) s += te[l];             \
                }                                                                \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < body; j++) yr[j] = yr[j] / s;          \
                /* (the last elements' exponentials are the tail's) */           \
                XGRAD_ROW_REST(j, XGRAD_SIMD, yr[j] = tail[j - rest_from] / s;)   \
            }                                                                    \
        }                                                                        \
    }                                                                            \
                                                                                 \
    /* log: gx = gy - exp(y) sum(gy); else gx = y (gy - sum(gy y)) */            \
    ATTR static void xgrad_softmax_grad_rows_##sfx##_##isa(                      \
            const T* restrict gy, const T* restrict y, T* restrict gx,           \
            ptrdiff_t rows, ptrdiff_t m, int log_space) {                        \
        XGRAD_EXP_LO_DECL(T)                                                     \
        const ptrdiff_t body = m - m % XGRAD_ROW_TAIL, rest = m - body;         \
        T tail[XGRAD_ROW_TAIL];                                                  \
        const T* te;                                                             \
        for (ptrdiff_t r = 0; r < rows; r++) {                                   \
            const T* g = gy + r * m;                                             \
            const T* yr = y + r * m;                                             \
            T* o = gx + r * m;                                                   \
            T s = 0;                                                             \
            if (log_space) {                                                     \
                XGRAD_SIMD_SUM(s)                                                \
                for (ptrdiff_t j = 0; j < m; j++) s += g[j];                     \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < body; j++) o[j] = g[j] - XGRAD_SAFE_EXP(T, EXP, yr[j]) * s;  \
                if (rest) {                                                      \
                    XGRAD_ROW_TAIL_EXP(T, EXP, tail, te, yr, (T)0)               \
                    for (ptrdiff_t l = 0; l < rest; l++)                         \
                        o[body + l] = g[body + l] - te[l] * s;                   \
                }                                                                \
            } else {                                                             \
                XGRAD_SIMD_SUM(s)                                                \
                for (ptrdiff_t j = 0; j < m; j++) s += g[j] * yr[j];             \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < m; j++) o[j] = yr[j] * (g[j] - s);     \
            }                                                                    \
        }                                                                        \
    }

/* Softmax over the middle axis of (outer, m, inner) blocks, inner > 1 (the
 * channels of (N, C, H, W)): one block's columns j0..j1 (at most
 * XGRAD_MID_TILE of them), each a softmax over its m elements strided by
 * inner, computed a row of the tile at a time (vectorised along the columns).
 * The shift and its rules are the rows kernel's; the sums run along m in
 * order, so a result does not depend on how the tiles are split. */
#define XGRAD_MID_TILE 256
#define XGRAD_SOFTMAX_MID_AT(isa, ATTR, T, sfx, EXP, LOG)                        \
    ATTR static void xgrad_softmax_mid_##sfx##_##isa(                            \
            const T* restrict x, T* restrict y, ptrdiff_t m, ptrdiff_t inner,    \
            ptrdiff_t j0, ptrdiff_t j1, int log_space) {                         \
        XGRAD_EXP_LO_DECL(T)                                                     \
        T mx[XGRAD_MID_TILE], s[XGRAD_MID_TILE];                                 \
        const ptrdiff_t w = j1 - j0;                                             \
        x += j0;                                                                 \
        y += j0;                                                                 \
        for (ptrdiff_t j = 0; j < w; j++) { mx[j] = -INFINITY; s[j] = 0; }       \
        for (ptrdiff_t k = 0; k < m; k++) {                                      \
            const T* xr = x + k * inner;                                         \
            XGRAD_SIMD                                                           \
            for (ptrdiff_t j = 0; j < w; j++) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j]; \
        }                                                                        \
        for (ptrdiff_t j = 0; j < w; j++) if (!isfinite(mx[j])) mx[j] = 0;      \
        if (log_space) {                                                         \
            for (ptrdiff_t k = 0; k < m; k++) {                                  \
                const T* xr = x + k * inner;                                     \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) s[j] += XGRAD_SAFE_EXP(T, EXP, xr[j] - mx[j]); \
            }                                                                    \
            for (ptrdiff_t j = 0; j < w; j++) s[j] = LOG(s[j]);                  \
            for (ptrdiff_t k = 0; k < m; k++) {                                  \
                const T* xr = x + k * inner;                                     \
                T* yr = y + k * inner;                                           \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) yr[j] = (xr[j] - mx[j]) - s[j]; \
            }                                                                    \
        } else {                                                                 \
            for (ptrdiff_t k = 0; k < m; k++) {                                  \
                const T* xr = x + k * inner;                                     \
                T* yr = y + k * inner;                                           \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) {                              \
                    const T e = XGRAD_SAFE_EXP(T, EXP, xr[j] - mx[j]);           \
                    yr[j] = e;                                                   \
                    s[j] += e;                                                   \
                }                                                                \
            }                                                                    \
            for (ptrdiff_t k = 0; k < m; k++) {                                  \
                T* yr = y + k * inner;                                           \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) yr[j] = yr[j] / s[j];          \
            }                                                                    \
        }                                                                        \
    }                                                                            \
                                                                                 \
    ATTR static void xgrad_softmax_grad_mid_##sfx##_##isa(                       \
            const T* restrict gy, const T* restrict y, T* restrict gx,           \
            ptrdiff_t m, ptrdiff_t inner, ptrdiff_t j0, ptrdiff_t j1,            \
            int log_space) {                                                     \
        XGRAD_EXP_LO_DECL(T)                                                     \
        T s[XGRAD_MID_TILE];                                                     \
        const ptrdiff_t w = j1 - j0;                                             \
        gy += j0;                                                                \
        y += j0;                                                                 \
        gx += j0;                                                                \
        for (ptrdiff_t j = 0; j < w; j++) s[j] = 0;                              \
        for (ptrdiff_t k = 0; k < m; k++) {                                      \
            const T* g = gy + k * inner;                                         \
            const T* yr = y + k * inner;                                         \
            if (log_space) {                                                     \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) s[j] += g[j];                  \
            } else {                                                             \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) s[j] += g[j] * yr[j];          \
            }                                                                    \
        }                                                                        \
        for (ptrdiff_t k = 0; k < m; k++) {                                      \
            const T* g = gy + k * inner;                                         \
            const T* yr = y + k * inner;                                         \
            T* o = gx + k * inner;                                               \
            if (log_space) {                                                     \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++)                                \
                    o[j] = g[j] - XGRAD_SAFE_EXP(T, EXP, yr[j]) * s[j];          \
            } else {                                                             \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < w; j++) o[j] = yr[j] * (g[j] - s[j]);  \
            }                                                                    \
        }                                                                        \
    }

#define XGRAD_SOFTMAX(T, sfx, EXP, LOG)                                          \
    XGRAD_EACH_PATH(XGRAD_SOFTMAX_AT, T, sfx, EXP, LOG)                          \
    XGRAD_EACH_PATH(XGRAD_SOFTMAX_MID_AT, T, sfx, EXP, LOG)                      \
    static void xgrad_softmax_mid_##sfx(const T* x, T* y, ptrdiff_t m,           \
                                        ptrdiff_t inner, ptrdiff_t j0,           \
                                        ptrdiff_t j1, int log_space) {           \
        XGRAD_CALL(xgrad_softmax_mid_##sfx, (x, y, m, inner, j0, j1, log_space)); \
    }                                                                            \
    static void xgrad_softmax_grad_mid_##sfx(const T* gy, const T* y, T* gx,     \
                                             ptrdiff_t m, ptrdiff_t inner,       \
                                             ptrdiff_t j0, ptrdiff_t j1,         \
                                             int log_space) {                    \
        XGRAD_CALL(xgrad_softmax_grad_mid_##sfx,                                 \
                   (gy, y, gx, m, inner, j0, j1, log_space));                    \
    }                                                                            \
    static void xgrad_softmax_rows_##sfx(const T* x, T* y, ptrdiff_t rows,       \
                                         ptrdiff_t m, int log_space) {           \
        XGRAD_CALL(xgrad_softmax_rows_##sfx, (x, y, rows, m, log_space));        \
    }                                                                            \
    static void xgrad_softmax_grad_rows_##sfx(const T* gy, const T* y, T* gx,    \
                                              ptrdiff_t rows, ptrdiff_t m,       \
                                              int log_space) {                   \
        XGRAD_CALL(xgrad_softmax_grad_rows_##sfx, (gy, y, gx, rows, m, log_space)); \
    }

/* The sum of n elements, accumulated in double (a float32 input rounds once,
 * at the end, when the caller casts the result). */
#define XGRAD_SUM_AT(isa, ATTR, T, sfx)                                          \
    ATTR static double xgrad_sum_##sfx##_##isa(const T* restrict x, ptrdiff_t n) { \
        double s = 0;                                                            \
        XGRAD_SIMD_SUM(s)                                                        \
        for (ptrdiff_t i = 0; i < n; i++) s += (double)x[i];                     \
        return s;                                                                \
    }
#define XGRAD_SUM(T, sfx)                                                        \
    XGRAD_EACH_PATH(XGRAD_SUM_AT, T, sfx)                                        \
    static double xgrad_sum_##sfx(const T* x, ptrdiff_t n) {                     \
        return XGRAD_CALL(xgrad_sum_##sfx, (x, n));                              \
    }
XGRAD_SUM(float, f32)
XGRAD_SUM(double, f64)

/* The sum of `planes` planes of m elements, `stride` elements apart (a
 * channel's planes in a batch), in double: element i < m - m % 32 of a plane
 * goes to lane i % 32 of 32 running sums kept (in registers) across the
 * planes, the last m % 32 to lanes of a second set; both sets are added
 * lane by lane, then in a fixed tree at the end. One horizontal sum per
 * channel instead of one per plane (xgrad_sum's ordered 16-lane reduction
 * took most of a 14x14 plane's time), four vector chains on AVX-512 (one
 * waited on each add's latency), and the same bits on every CPU path: the
 * same lanes and tree on each. For one plane a channel (a row's sum)
 * xgrad_sum is quicker: _planes_sum_chunk picks. */
#define XGRAD_SUM_PLANES_AT(isa, ATTR, T, sfx)                                   \
    ATTR static double xgrad_sum_planes_##sfx##_##isa(                           \
            const T* restrict x, ptrdiff_t planes, ptrdiff_t stride, ptrdiff_t m) { \
        double lane[32] = {0}, tail[32] = {0};                                   \
        const ptrdiff_t body = m - m % 32;                                       \
        for (ptrdiff_t r = 0; r < planes; r++) {                                 \
            const T* restrict p = x + r * stride;                                \
            for (ptrdiff_t i = 0; i < body; i += 32)                             \
                for (int l = 0; l < 32; l++) lane[l] += (double)p[i + l];        \
            for (ptrdiff_t i = body; i < m; i++) tail[i - body] += (double)p[i]; \
        }                                                                        \
        for (int l = 0; l < 32; l++) lane[l] += tail[l];                         \
        for (int w = 16; w >= 1; w /= 2) /* a fixed tree: vector adds */         \
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];                  \
        return lane[0];                                                          \
    }
#define XGRAD_SUM_PLANES(T, sfx)                                                 \
    XGRAD_EACH_PATH(XGRAD_SUM_PLANES_AT, T, sfx)                                 \
    static double xgrad_sum_planes_##sfx(const T* x, ptrdiff_t planes,           \
                                         ptrdiff_t stride, ptrdiff_t m) {        \
        return XGRAD_CALL(xgrad_sum_planes_##sfx, (x, planes, stride, m));       \
    }
XGRAD_SUM_PLANES(float, f32)
XGRAD_SUM_PLANES(double, f64)

/* acc[j] += row_0[j] + ... in row order, for `rows` rows of n elements (ld
 * apart): the sum over a leading or middle axis as NumPy's reduce adds it
 * (whole rows in order; the same bits on every path). By tiles of
 * XGRAD_COLUMN_TILE columns kept in registers over XGRAD_COLUMN_ROWS rows
 * at a time: with acc loaded and stored once a row, and the generic loop
 * compiled for SSE2, 64 columns x 128 rows x 64 blocks took 2.5x the time. */
#define XGRAD_COLUMN_TILE 64
#define XGRAD_COLUMN_ROWS 32
/* Rows wider than this are streamed whole, acc[j] += row[j] (a tile's
 * walk down 32 rows of 4096 floats read 32 streams at once: 1.4x the time) */
#define XGRAD_COLUMN_WIDE 512
#define XGRAD_COLUMN_SUMS_AT(isa, ATTR, T, sfx)                                  \
    ATTR static void xgrad_column_sums_##sfx##_##isa(                            \
            const T* restrict a, T* restrict acc, ptrdiff_t rows, ptrdiff_t ld,  \
            ptrdiff_t n) {                                                       \
        if (n > XGRAD_COLUMN_WIDE) {  /* acc stays in cache: rows streamed */    \
            for (ptrdiff_t r = 0; r < rows; r++) {                               \
                const T* restrict row = a + r * ld;                              \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = 0; j < n; j++) acc[j] += row[j];              \
            }                                                                    \
            return;                                                              \
        }                                                                        \
        for (ptrdiff_t r0 = 0; r0 < rows; r0 += XGRAD_COLUMN_ROWS) {             \
            const ptrdiff_t r1 = rows - r0 < XGRAD_COLUMN_ROWS ? rows              \
                                                              : r0 + XGRAD_COLUMN_ROWS; \
            ptrdiff_t j0 = 0;                                                    \
            for (; j0 + XGRAD_COLUMN_TILE <= n; j0 += XGRAD_COLUMN_TILE) {       \
                T v[XGRAD_COLUMN_TILE];                                          \
                for (int l = 0; l < XGRAD_COLUMN_TILE; l++) v[l] = acc[j0 + l];  \
                for (ptrdiff_t r = r0; r < r1; r++) {                            \
                    const T* restrict row = a + r * ld + j0;                     \
                    XGRAD_SIMD                                                   \
                    for (int l = 0; l < XGRAD_COLUMN_TILE; l++) v[l] += row[l];  \
                }                                                                \
                for (int l = 0; l < XGRAD_COLUMN_TILE; l++) acc[j0 + l] = v[l];  \
            }                                                                    \
            for (ptrdiff_t r = r0; r < r1 && j0 < n; r++) {                      \
                const T* restrict row = a + r * ld;                              \
                XGRAD_SIMD                                                       \
                for (ptrdiff_t j = j0; j < n; j++) acc[j] += row[j];             \
            }                                                                    \
        }                                                                        \
    }
#define XGRAD_COLUMN_SUMS(T, sfx)                                                \
    XGRAD_EACH_PATH(XGRAD_COLUMN_SUMS_AT, T, sfx)                                \
    static void xgrad_column_sums_##sfx(const T* a, T* acc, ptrdiff_t rows,      \
                                        ptrdiff_t ld, ptrdiff_t n) {             \
        XGRAD_CALL(xgrad_column_sums_##sfx, (a, acc, rows, ld, n));              \
    }
XGRAD_COLUMN_SUMS(float, f32)
XGRAD_COLUMN_SUMS(double, f64)

/* out[r, j] = big[r, j] op row[j] (row op big[r, j] if `row_first`) for
 * `rows` rows of m contiguous elements, op 0-3: *, +, -, /: the bias or
 * scale row repeated along a batch, vectorised on the path's width (the
 * generic loops of native_kernels.pyx are compiled for SSE2 alone: a row
 * multiply over (512, 512) float32 took 1.8x torch's time). */
/* LOOP(T, B op S) for op 0-3 (*, +, -, /), S op B for - and / where
 * `s_first`: one plain loop per form, the test outside it. */
#define XGRAD_ARITHMETIC(LOOP, T, B, S, s_first)                                 \
    if (op == 0) { LOOP(T, B * S) }                                              \
    else if (op == 1) { LOOP(T, B + S) }                                         \
    else if (op == 2 && !(s_first)) { LOOP(T, B - S) }                           \
    else if (op == 2) { LOOP(T, S - B) }                                         \
    else if (!(s_first)) { LOOP(T, B / S) }                                      \
    else { LOOP(T, S / B) }
#define XGRAD_ROWS_LOOP(T, EXPR)                                                    \
    for (ptrdiff_t r = 0; r < rows; r++) {                                       \
        const T* restrict b_ = big + r * m;                                      \
        T* restrict o_ = out + r * m;                                            \
        XGRAD_SIMD                                                               \
        for (ptrdiff_t j = 0; j < m; j++) o_[j] = (EXPR);                        \
    }
#define XGRAD_BINARY_ROWS_AT(isa, ATTR, T, sfx)                                  \
    ATTR static void xgrad_binary_rows_##sfx##_##isa(                            \
            int op, int row_first, const T* restrict big, const T* restrict row, \
            T* restrict out, ptrdiff_t rows, ptrdiff_t m) {                      \
        XGRAD_ARITHMETIC(XGRAD_ROWS_LOOP, T, b_[j], row[j], row_first)           \
    }
#define XGRAD_BINARY_ROWS(T, sfx)                                                \
    XGRAD_EACH_PATH(XGRAD_BINARY_ROWS_AT, T, sfx)                                \
    static void xgrad_binary_rows_##sfx(int op, int row_first, const T* big,     \
                                        const T* row, T* out, ptrdiff_t rows,    \
                                        ptrdiff_t m) {                           \
        XGRAD_CALL(xgrad_binary_rows_##sfx, (op, row_first, big, row, out, rows, m)); \
    }
XGRAD_BINARY_ROWS(float, f32)
XGRAD_BINARY_ROWS(double, f64)

/* out[p, j] = big[p, j] op values[p % period] (values[..] op big[p, j] if
 * `value_first`) for planes p0 to p1 of m contiguous elements, op 0-3 as
 * above: a channel's bias or scale over its planes, a row's mean or std
 * over its row; per CPU path (native_kernels' generic loop is SSE2's). */
#define XGRAD_PLANES_LOOP(T, EXPR)                                                  \
    for (ptrdiff_t p = p0; p < p1; p++) {                                        \
        const T v_ = values[p % period];                                         \
        const T* restrict b_ = big + p * m;                                      \
        T* restrict o_ = out + p * m;                                            \
        XGRAD_SIMD                                                               \
        for (ptrdiff_t j = 0; j < m; j++) o_[j] = (EXPR);                        \
    }
#define XGRAD_BINARY_PLANES_AT(isa, ATTR, T, sfx)                                \
    ATTR static void xgrad_binary_planes_##sfx##_##isa(                          \
            int op, int value_first, const T* restrict big,                      \
            const T* restrict values, T* restrict out, ptrdiff_t p0,             \
            ptrdiff_t p1, ptrdiff_t m, ptrdiff_t period) {                       \
        XGRAD_ARITHMETIC(XGRAD_PLANES_LOOP, T, b_[j], v_, value_first)          \
    }
#define XGRAD_BINARY_PLANES(T, sfx)                                              \
    XGRAD_EACH_PATH(XGRAD_BINARY_PLANES_AT, T, sfx)                              \
    static void xgrad_binary_planes_##sfx(int op, int value_first, const T* big, \
                                          const T* values, T* out, ptrdiff_t p0, \
                                          ptrdiff_t p1, ptrdiff_t m,             \
                                          ptrdiff_t period) {                    \
        XGRAD_CALL(xgrad_binary_planes_##sfx,                                    \
                   (op, value_first, big, values, out, p0, p1, m, period));      \
    }
XGRAD_BINARY_PLANES(float, f32)
XGRAD_BINARY_PLANES(double, f64)

/* Rows shorter than this take scalar loops (the extrema, the row sums of
 * native_kernels' _planes_sum_chunk): a vector pass's horizontal reduction
 * cost more than the row (NumPy's reduce over (131072, 2): 1.3 ms, 3.7x
 * torch's). */
#define XGRAD_SHORT_ROW 16

/* The maximum (minimum if `minimum`) of each of `rows` rows of m >= 1
 * elements, NaN where a row holds one (NumPy's amax/amin). A max-reduction
 * across the lanes, NaN tracked beside it: exact in any order, so the
 * result is the same on every path and with any split of the rows. */

#define XGRAD_EXTREMUM_AT(isa, ATTR, T, sfx)                                     \
    ATTR static void xgrad_extremum_rows_##sfx##_##isa(                          \
            const T* restrict x, T* restrict out, ptrdiff_t rows, ptrdiff_t m,   \
            int minimum) {                                                       \
        if (m < XGRAD_SHORT_ROW) {  /* scalar: rows overlap out of order */     \
            for (ptrdiff_t r = 0; r < rows; r++) {                               \
                const T* xr = x + r * m;                                         \
                T e = xr[0];                                                     \
                int nan = 0;                                                     \
                for (ptrdiff_t j = 0; j < m; j++) {                              \
                    e = (minimum ? xr[j] < e : xr[j] > e) ? xr[j] : e;           \
                    nan |= xr[j] != xr[j];                                       \
                }                                                                \
                out[r] = nan ? (T)NAN : e;                                       \
            }                                                                    \
            return;                                                              \
        }                                                                        \
        for (ptrdiff_t r = 0; r < rows; r++) {                                   \
            const T* xr = x + r * m;                                             \
            T e = xr[0];                                                         \
            int nan = 0;                                                         \
            if (minimum) {                                                       \
                XGRAD_SIMD_MIN_OR(e, nan)                                        \
                for (ptrdiff_t j = 0; j < m; j++) {                              \
                    e = xr[j] < e ? xr[j] : e;                                   \
                    nan |= xr[j] != xr[j];                                       \
                }                                                                \
            } else {                                                             \
                XGRAD_SIMD_MAX_OR(e, nan)                                        \
                for (ptrdiff_t j = 0; j < m; j++) {                              \
                    e = xr[j] > e ? xr[j] : e;                                   \
                    nan |= xr[j] != xr[j];                                       \
                }                                                                \
            }                                                                    \
            out[r] = nan ? (T)NAN : e;                                           \
        }                                                                        \
    }
#define XGRAD_EXTREMUM(T, sfx)                                                   \
    XGRAD_EACH_PATH(XGRAD_EXTREMUM_AT, T, sfx)                                   \
    static void xgrad_extremum_rows_##sfx(const T* x, T* out, ptrdiff_t rows,    \
                                          ptrdiff_t m, int minimum) {            \
        XGRAD_CALL(xgrad_extremum_rows_##sfx, (x, out, rows, m, minimum));       \
    }
XGRAD_EXTREMUM(float, f32)
XGRAD_EXTREMUM(double, f64)

XGRAD_FAMILY(float, f32, expf, logf, tanhf, log1pf, expm1f, fabsf, erff)
XGRAD_FAMILY(double, f64, exp, log, tanh, log1p, expm1, fabs, erf)

/* float16: each chunk is widened to float, computed by the float kernel and
 * rounded back (one rounding of a result within the float kernel's bound).
 * Needs the compiler's _Float16 (GCC >= 12, Clang >= 15 on x86-64); without
 * it XGRAD_HAS_FLOAT16 is 0, these are never called, and float16 takes
 * NumPy's path. */
#if defined(__FLT16_MAX__) && !defined(XGRAD_NO_FLOAT16)
#define XGRAD_HAS_FLOAT16 1
typedef _Float16 xgrad_f16;
#else
#define XGRAD_HAS_FLOAT16 0
typedef unsigned short xgrad_f16;  /* storage only: never converted */
#endif
#define XGRAD_F16_CHUNK 512

#if XGRAD_HAS_FLOAT16
static void xgrad_unary_f16(xgrad_unary_f32 f, const xgrad_f16* x, xgrad_f16* y,
                            ptrdiff_t n, double p) {
    float a[XGRAD_F16_CHUNK], b[XGRAD_F16_CHUNK];
    for (ptrdiff_t s = 0; s < n; s += XGRAD_F16_CHUNK) {
        ptrdiff_t k = n - s < XGRAD_F16_CHUNK ? n - s : XGRAD_F16_CHUNK;
        for (ptrdiff_t i = 0; i < k; i++) a[i] = (float)x[s + i];
        f(a, b, k, p);
        for (ptrdiff_t i = 0; i < k; i++) y[s + i] = (xgrad_f16)b[i];
    }
}

static void xgrad_grad_f16(xgrad_grad_f32 f, const xgrad_f16* gy, const xgrad_f16* x,
                           const xgrad_f16* y, xgrad_f16* out, ptrdiff_t n, double p) {
    float g[XGRAD_F16_CHUNK], a[XGRAD_F16_CHUNK], b[XGRAD_F16_CHUNK], o[XGRAD_F16_CHUNK];
    for (ptrdiff_t s = 0; s < n; s += XGRAD_F16_CHUNK) {
        ptrdiff_t k = n - s < XGRAD_F16_CHUNK ? n - s : XGRAD_F16_CHUNK;
        for (ptrdiff_t i = 0; i < k; i++) {
            g[i] = (float)gy[s + i];
            a[i] = x ? (float)x[s + i] : 0.0f;
            b[i] = y ? (float)y[s + i] : 0.0f;
        }
        f(g, x ? a : NULL, y ? b : NULL, o, k, p);
        for (ptrdiff_t i = 0; i < k; i++) out[s + i] = (xgrad_f16)o[i];
    }
}
#else
static void xgrad_unary_f16(xgrad_unary_f32 f, const xgrad_f16* x, xgrad_f16* y,
                            ptrdiff_t n, double p) {
    (void)f; (void)x; (void)y; (void)n; (void)p;
}
static void xgrad_grad_f16(xgrad_grad_f32 f, const xgrad_f16* gy, const xgrad_f16* x,
                           const xgrad_f16* y, xgrad_f16* out, ptrdiff_t n, double p) {
    (void)f; (void)gy; (void)x; (void)y; (void)out; (void)n; (void)p;
}
#endif

#endif
