/* Depthwise 2-D convolution (groups == input channels, M outputs per
 * channel): conv, its input gradient (conv_transpose with the same
 * grouping) and its weight gradient, as direct per-channel stencils
 * (depthwise_body.h), compiled per element type and dispatch path
 * (cpu_paths.h). depthwise_kernels.pyx splits the planes over the pool. */
#ifndef XGRAD_DEPTHWISE_H
#define XGRAD_DEPTHWISE_H

#include <stddef.h>
#include <string.h>

#include "cpu_paths.h"

#define XGRAD_DW_MAX_TAPS 1024

/* x (n, c, h, w), y (n, c m, oh, ow); the phases of a padded input plane
 * hq x wq each (sh sw of them); offsets[t]: where tap t's input starts in
 * them, relative to output position 0 (rows wq apart). */
typedef struct {
    ptrdiff_t n, c, m, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, hq, wq;
    ptrdiff_t offsets[XGRAD_DW_MAX_TAPS];
} dw_geometry;

/* Fill hq, wq and offsets from the rest; 0 where the window has too many taps. */
static int dw_plan(dw_geometry* g) {
    if (g->kh * g->kw > XGRAD_DW_MAX_TAPS) return 0;
    g->hq = g->oh + ((g->kh - 1) * g->dh) / g->sh;
    g->wq = g->ow + ((g->kw - 1) * g->dw) / g->sw;
    for (ptrdiff_t i = 0; i < g->kh; i++)
        for (ptrdiff_t j = 0; j < g->kw; j++) {
            const ptrdiff_t a = i * g->dh, b = j * g->dw;
            g->offsets[i * g->kw + j] = ((a % g->sh) * g->sw + b % g->sw) * g->hq * g->wq
                                        + (a / g->sh) * g->wq + b / g->sw;
        }
    return 1;
}

/* Elements of the phases of a padded input plane. */
static ptrdiff_t dw_phases_size(const dw_geometry* g) {
    return g->sh * g->sw * g->hq * g->wq;
}

/* Elements left free past each buffer of the work space (zeros: the work
 * space is calloc'ed, and what the kernels write there is finite). */
#define DW_SLACK 64

/* The weight gradient's partial sums (DW_LANES of a dot product) are
 * added into double sums after at most this many terms each. */
#define DW_FLUSH_TERMS 256

/* The stencils go in blocks of this many elements (64 bytes of float: one
 * AVX-512 vector, two AVX2, four SSE2), past the end of a plane into the
 * slack; at most DW_SLACK. */
#define DW_BLOCK 16
#define DW_GROUP 4  /* blocks a step of dw_stencil where there are as many */
/* One block as a vector (GCC's vector extension: one AVX-512 register, two
 * AVX2, four SSE2), at any element alignment. */
typedef float dw_block_f32 __attribute__((vector_size(DW_BLOCK * sizeof(float)), aligned(4),
                                          may_alias));
typedef double dw_block_f64 __attribute__((vector_size(DW_BLOCK * sizeof(double)),
                                           aligned(8), may_alias));
static ptrdiff_t dw_blocks(ptrdiff_t len) {
    return (len + DW_BLOCK - 1) / DW_BLOCK * DW_BLOCK;
}

/* The largest of the taps' offsets. */
static ptrdiff_t dw_max_offset(const dw_geometry* g) {
    ptrdiff_t most = 0;
    for (ptrdiff_t t = 0; t < g->kh * g->kw; t++)
        if (g->offsets[t] > most) most = g->offsets[t];
    return most;
}

/* Elements of work space a thread needs: the phases, then one output
 * plane (rows wq apart); for the input gradient's gather at stride 1
 * (dw_backward_gather), the output plane with dw_max_offset zeros before
 * it and zeros after it up to the phases' size in whole blocks. */
static ptrdiff_t dw_work_size(const dw_geometry* g) {
    const ptrdiff_t plane = g->oh * g->wq, gather = dw_blocks(dw_phases_size(g));
    if (g->sh != 1 || g->sw != 1)  /* (no gather; with its space the strided input
                                    * gradient ran 15% slower, (16, 144, 56, 56)) */
        return dw_phases_size(g) + DW_SLACK + plane + DW_SLACK;
    return dw_phases_size(g) + DW_SLACK + dw_max_offset(g) + (plane > gather ? plane : gather)
           + DW_SLACK;
}

#define DW_T float
#define DW_SFX f32
#define DW_LANES 32
#include "depthwise_paths.h"
#undef DW_T
#undef DW_SFX
#undef DW_LANES

#define DW_T double
#define DW_SFX f64
#define DW_LANES 16
#include "depthwise_paths.h"
#undef DW_T
#undef DW_SFX
#undef DW_LANES

#define DW_DISPATCH(sfx, T)                                                          \
    static void dw_forward_##sfx(const T* x, const T* w, const T* b, T* y,            \
                                 const dw_geometry* g, ptrdiff_t lo, ptrdiff_t hi,    \
                                 T* work) {                                           \
        XGRAD_CALL(dw_forward_##sfx, (x, w, b, y, g, lo, hi, work));                  \
    }                                                                                 \
    static void dw_backward_##sfx(const T* gy, const T* w, T* gx, const dw_geometry* g, \
                                  ptrdiff_t lo, ptrdiff_t hi, T* work) {              \
        XGRAD_CALL(dw_backward_##sfx, (gy, w, gx, g, lo, hi, work));                  \
    }                                                                                 \
    static void dw_grad_weight_##sfx(const T* x, const T* gy, T* gw,                  \
                                     const dw_geometry* g, ptrdiff_t lo, ptrdiff_t hi, \
                                     T* work, double* acc) {                          \
        XGRAD_CALL(dw_grad_weight_##sfx, (x, gy, gw, g, lo, hi, work, acc));          \
    }

DW_DISPATCH(f32, float)
DW_DISPATCH(f64, double)

#endif
