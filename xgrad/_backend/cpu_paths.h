/* Dispatch paths for vectorised C kernels: each kernel is compiled for
 * AVX-512 (target "avx512f"), AVX2 (target "avx2") and the baseline x86-64
 * of the compiler's flags (SSE2 without -march), and XGRAD_CALL calls the
 * one xgrad_vector_path selects. Each extension module that includes this
 * has its own xgrad_vector_path (a static): native_kernels.pyx picks the
 * path at import (the widest the CPU supports, or XGRAD_CPU_PATH's), and
 * the other modules copy its choice. Without x86-64 GCC (or with
 * XGRAD_NO_CLONES) there is one path, "generic".
 */
#ifndef XGRAD_CPU_PATHS_H
#define XGRAD_CPU_PATHS_H

#define XGRAD_PATH_SSE2 0    /* the baseline ("generic" without XGRAD_HAS_PATHS) */
#define XGRAD_PATH_AVX2 1
#define XGRAD_PATH_AVX512 2

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(XGRAD_NO_CLONES)
#define XGRAD_HAS_PATHS 1
/* M(isa suffix, attribute, args...) once per path. */
#define XGRAD_EACH_PATH(M, ...)                                                  \
    M(sse2, , __VA_ARGS__)                                                       \
    M(avx2, __attribute__((target("avx2"))), __VA_ARGS__)                        \
    M(avx512, __attribute__((target("avx512f"))), __VA_ARGS__)
/* The selected variant of f called with args (an expression). */
#define XGRAD_CALL(f, args)                                                      \
    (xgrad_vector_path == XGRAD_PATH_AVX512 ? f##_avx512 args                    \
     : xgrad_vector_path == XGRAD_PATH_AVX2 ? f##_avx2 args : f##_sse2 args)
#else
#define XGRAD_HAS_PATHS 0
#define XGRAD_EACH_PATH(M, ...) M(sse2, , __VA_ARGS__)
#define XGRAD_CALL(f, args) (f##_sse2 args)
#endif

static int xgrad_vector_path = XGRAD_PATH_SSE2;

/* Whether this CPU (and OS) runs `path`; the baseline always. */
static int xgrad_vector_supported(int path) {
#if XGRAD_HAS_PATHS
    __builtin_cpu_init();
    if (path == XGRAD_PATH_AVX2) return __builtin_cpu_supports("avx2") != 0;
    if (path == XGRAD_PATH_AVX512) return __builtin_cpu_supports("avx512f") != 0;
#endif
    return path == XGRAD_PATH_SSE2;
}

/* Select `path` for every kernel; 0 when this CPU does not support it (the
 * selection is then unchanged). */
static int xgrad_vector_set_path(int path) {
    if (!xgrad_vector_supported(path)) return 0;
    xgrad_vector_path = path;
    return 1;
}

static int xgrad_vector_get_path(void) { return xgrad_vector_path; }

#endif
