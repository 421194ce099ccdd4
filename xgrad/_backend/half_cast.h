/* float32 <-> float16 conversion by the CPU's F16C instructions, eight
 * elements an instruction, rounding to nearest even as NumPy's conversion
 * does (NumPy converts element by element in software: (1024, 1024) float32
 * to float16 took 1.5 ms, F16C 0.1 ms). Used on the AVX2 and AVX-512 paths
 * where the CPU has F16C (every AVX2 CPU has; XGRAD_CPU_PATH=sse2 keeps
 * NumPy's conversion); xgrad_half_cast_supported says whether it may run.
 * Infinities, zeros, subnormals and rounding match NumPy's; a NaN stays a
 * NaN (its payload bits may differ).
 */
#ifndef XGRAD_HALF_CAST_H
#define XGRAD_HALF_CAST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_paths.h"

#if XGRAD_HAS_PATHS
#include <immintrin.h>

static int xgrad_half_cast_supported(void) {
    __builtin_cpu_init();
    return xgrad_vector_path != XGRAD_PATH_SSE2 && __builtin_cpu_supports("avx")
        && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx,f16c")))
static void xgrad_float_to_half(const float* x, uint16_t* y, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {  /* the tail through a zeroed block of eight */
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, x + i, (size_t)(n - i) * sizeof(float));
        _mm_storeu_si128((__m128i*)out,
                         _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
        memcpy(y + i, out, (size_t)(n - i) * sizeof(uint16_t));
    }
}

__attribute__((target("avx,f16c")))
static void xgrad_half_to_float(const uint16_t* x, float* y, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, x + i, (size_t)(n - i) * sizeof(uint16_t));
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)in)));
        memcpy(y + i, out, (size_t)(n - i) * sizeof(float));
    }
}
#else
static int xgrad_half_cast_supported(void) { return 0; }
static void xgrad_float_to_half(const float* x, uint16_t* y, ptrdiff_t n) {
    (void)x; (void)y; (void)n;
}
static void xgrad_half_to_float(const uint16_t* x, float* y, ptrdiff_t n) {
    (void)x; (void)y; (void)n;
}
#endif

#endif
