/* One instantiation of the depthwise kernels (depthwise.h): included once
 * per element type (DW_T, DW_SFX, DW_LANES) and dispatch path
 * (DW_ISA, DW_ATTR).
 *
 * Every function works on whole planes of one channel. An input plane is
 * copied, padded, into its stride's phases (dw_split; for the planes after
 * a thread's first at column strides 1 and 2, only its values, by
 * dw_split_next: the zeros are the same for every plane): then tap t of
 * output position p (rows wq apart) reads the phases at p + offsets[t],
 * so each tap is one contiguous loop over the plane that the compiler
 * vectorizes, whatever the stride and dilation (positions past ow in a
 * row are computed and dropped). Each output element is one sum over its
 * taps in order (its M planes too, for the input gradient). */

#define DW_CAT3(a, b, c) a##_##b##_##c
#define DW_NAME3(a, b, c) DW_CAT3(a, b, c)
#define DW_FN(name) DW_NAME3(name, DW_SFX, DW_ISA)
#define DW_CAT2(a, b) a##_##b
#define DW_NAME2(a, b) DW_CAT2(a, b)
#define DW_BLOCK_T DW_NAME2(dw_block, DW_SFX)

/* The plane x (h, w) padded and split into the phases of the stride:
 * phase (a, b) holds rows r and columns q of the padded plane's row
 * r sh + a and column q sw + b (zeros outside x), hq x wq of them. */
DW_ATTR static void DW_FN(dw_split)(const DW_T* x, DW_T* ph, const dw_geometry* g) {
    const ptrdiff_t hq = g->hq, wq = g->wq, sw = g->sw;
    for (ptrdiff_t a = 0; a < g->sh; a++)
        for (ptrdiff_t b = 0; b < sw; b++) {
            DW_T* dst = ph + (a * sw + b) * hq * wq;
            /* columns q with 0 <= q sw + b - pw < w */
            ptrdiff_t lo = 0, hi;
            while (lo < wq && lo * sw + b - g->pw < 0) lo++;
            hi = lo;
            while (hi < wq && hi * sw + b - g->pw < g->w) hi++;
            for (ptrdiff_t r = 0; r < hq; r++, dst += wq) {
                const ptrdiff_t iy = r * g->sh + a - g->ph;
                if (iy < 0 || iy >= g->h) {
                    for (ptrdiff_t q = 0; q < wq; q++) dst[q] = 0;
                    continue;
                }
                const DW_T* src = x + iy * g->w + b - g->pw;
                for (ptrdiff_t q = 0; q < lo; q++) dst[q] = 0;
                if (sw == 1)
                    for (ptrdiff_t q = lo; q < hi; q++) dst[q] = src[q];
                else
                    for (ptrdiff_t q = lo; q < hi; q++) dst[q] = src[q * sw];
                for (ptrdiff_t q = hi; q < wq; q++) dst[q] = 0;
            }
        }
}

/* dw_split at stride 1 over phases that already hold a previous plane's
 * split: only x's values are written (the zeros around them are the same
 * for every plane; rewriting them took a quarter of the forward's time
 * on 8x8 planes, three library calls a row). */
DW_ATTR static void DW_FN(dw_split_values)(const DW_T* x, DW_T* ph, const dw_geometry* g) {
    const ptrdiff_t wq = g->wq;
    const ptrdiff_t rows = g->h < g->hq - g->ph ? g->h : g->hq - g->ph;
    const ptrdiff_t cols = g->w < wq - g->pw ? g->w : wq - g->pw;
    DW_T* dst = ph + g->ph * wq + g->pw;
    for (ptrdiff_t iy = 0; iy < rows; iy++, dst += wq, x += g->w)
        for (ptrdiff_t q = 0; q < cols; q++) dst[q] = x[q];
}

/* Between x's first `cols` columns (one row) and their rows of the two
 * column phases at column stride 2 (`even`: phase 0, `odd`: phase 1),
 * in pairs: into the phases with `into_phases`, else back into x. Inlined
 * with a constant direction (one plain loop each way: the strided copy
 * loops of dw_split and dw_merge cost more than the values on small
 * planes). */
__attribute__((always_inline)) DW_ATTR static inline void DW_FN(dw_row_pairs)(
        DW_T* x, DW_T* even, DW_T* odd, ptrdiff_t cols, ptrdiff_t pw, const int into_phases) {
#define DW_MOVE(xv, pv) do { if (into_phases) (pv) = (xv); else (xv) = (pv); } while (0)
    ptrdiff_t ix = 0;
    if (pw & 1 && cols > 0) {  /* x's first column is in the odd phase */
        DW_MOVE(x[0], odd[pw >> 1]);
        ix = 1;
    }
    for (ptrdiff_t q = (ix + pw) >> 1; ix + 1 < cols; ix += 2, q++) {
        DW_MOVE(x[ix], even[q]);
        DW_MOVE(x[ix + 1], odd[q]);
    }
    if (ix < cols)
        DW_MOVE(x[ix], even[(ix + pw) >> 1]);
#undef DW_MOVE
}

/* The columns of x (w of them) that the phases hold at column stride 2. */
static ptrdiff_t DW_FN(dw_pair_columns)(const dw_geometry* g) {
    return g->w < 2 * g->wq - g->pw ? g->w : 2 * g->wq - g->pw;
}

/* dw_split_values at column stride 2: each of x's rows into its rows of
 * the two column phases (dw_row_pairs). */
DW_ATTR static void DW_FN(dw_split_values_2)(const DW_T* x, DW_T* ph, const dw_geometry* g) {
    const ptrdiff_t hq = g->hq, wq = g->wq, plane = hq * wq, cols = DW_FN(dw_pair_columns)(g);
    for (ptrdiff_t iy = 0; iy < g->h; iy++, x += g->w) {
        const ptrdiff_t py = iy + g->ph, r = py / g->sh;
        if (r >= hq)
            continue;
        DW_T* even = ph + (py % g->sh) * 2 * plane + r * wq;
        /* (x is only read: into_phases) */
        DW_FN(dw_row_pairs)((DW_T*)x, even, even + plane, cols, g->pw, 1);
    }
}

/* The next plane x into the phases ph: dw_split, or after a thread's
 * first plane (not `first`) at column strides 1 and 2 only its values,
 * over the previous plane's split (other strides rewrite the zeros too). */
DW_ATTR static void DW_FN(dw_split_next)(const DW_T* x, DW_T* ph, const dw_geometry* g,
                                         int first) {
    if (!first && g->sw == 1 && g->sh == 1)
        DW_FN(dw_split_values)(x, ph, g);
    else if (!first && g->sw == 2)
        DW_FN(dw_split_values_2)(x, ph, g);
    else
        DW_FN(dw_split)(x, ph, g);
}

/* dw_merge at stride 1: x's rows from the one phase (zeros past it). */
DW_ATTR static void DW_FN(dw_merge_unit)(const DW_T* ph, DW_T* x, const dw_geometry* g) {
    const ptrdiff_t w = g->w, wq = g->wq;
    const ptrdiff_t cols = w < wq - g->pw ? w : wq - g->pw;
    for (ptrdiff_t iy = 0; iy < g->h; iy++, x += w) {
        const ptrdiff_t r = iy + g->ph;
        ptrdiff_t ix = 0;
        if (r < g->hq) {
            const DW_T* src = ph + r * wq + g->pw;
            for (; ix < cols; ix++) x[ix] = src[ix];
        }
        for (; ix < w; ix++) x[ix] = 0;
    }
}

/* dw_merge at column stride 2: each of x's rows from its rows of the two
 * column phases (dw_row_pairs); zeros past the phases. */
DW_ATTR static void DW_FN(dw_merge_2)(const DW_T* ph, DW_T* x, const dw_geometry* g) {
    const ptrdiff_t hq = g->hq, wq = g->wq, plane = hq * wq, w = g->w;
    const ptrdiff_t cols = DW_FN(dw_pair_columns)(g);
    for (ptrdiff_t iy = 0; iy < g->h; iy++, x += w) {
        const ptrdiff_t py = iy + g->ph, r = py / g->sh;
        ptrdiff_t ix = 0;
        if (r < hq) {
            /* (the phases are only read: not into_phases) */
            DW_T* even = (DW_T*)ph + (py % g->sh) * 2 * plane + r * wq;
            DW_FN(dw_row_pairs)(x, even, even + plane, cols, g->pw, 0);
            ix = cols > 0 ? cols : 0;
        }
        for (; ix < w; ix++) x[ix] = 0;
    }
}

/* dw_split's adjoint where each position of x is one of the phases': x
 * (h, w) written from them (0 where no phase holds it: past the taps). */
DW_ATTR static void DW_FN(dw_merge)(const DW_T* ph, DW_T* x, const dw_geometry* g) {
    const ptrdiff_t hq = g->hq, wq = g->wq, sw = g->sw;
    for (ptrdiff_t iy = 0; iy < g->h; iy++) {
        const ptrdiff_t py = iy + g->ph, a = py % g->sh, r = py / g->sh;
        DW_T* row = x + iy * g->w;
        if (r >= hq) {
            for (ptrdiff_t ix = 0; ix < g->w; ix++) row[ix] = 0;
            continue;
        }
        for (ptrdiff_t b = 0; b < sw; b++) {
            const DW_T* src = ph + ((a * sw + b) * hq + r) * wq;
            ptrdiff_t q = 0;
            while (q * sw + b - g->pw < 0) q++;
            DW_T* dst = row + b - g->pw;
            if (sw == 1)
                for (; q < wq && q + b - g->pw < g->w; q++) dst[q] = src[q];
            else
                for (; q < wq && q * sw + b - g->pw < g->w; q++) dst[q * sw] = src[q];
            for (ptrdiff_t ix = q * sw + b - g->pw; ix < g->w; ix += sw) row[ix] = 0;
        }
    }
}

/* A plane of gx from its phases: dw_merge, or at stride 1 (dw_merge_unit)
 * and column stride 2 (dw_merge_2) their plain loops (dw_split_next's
 * counterpart). */
DW_ATTR static void DW_FN(dw_merge_next)(const DW_T* ph, DW_T* x, const dw_geometry* g) {
    if (g->sw == 1 && g->sh == 1)
        DW_FN(dw_merge_unit)(ph, x, g);
    else if (g->sw == 2)
        DW_FN(dw_merge_2)(ph, x, g);
    else
        DW_FN(dw_merge)(ph, x, g);
}

/* out[p] = sum over taps t of w[t] src[p + direction offsets[t]] for p <
 * len, the taps in order: direction 1 is conv's stencil; -1 its adjoint at
 * stride 1 (dw_backward_gather). A block of DW_BLOCK positions at a time,
 * its sums kept in registers over all the taps and stored once: one pass
 * over out a tap loaded and stored out's partial sums again for each tap
 * (half the forward's time on 8x8 planes). len is rounded up to whole
 * blocks: the slack past src and past out holds the rest, computed and
 * dropped. */
DW_ATTR static void DW_FN(dw_stencil)(const DW_T* src, const ptrdiff_t* offsets,
                                      ptrdiff_t direction, ptrdiff_t taps, const DW_T* w,
                                      DW_T* out, ptrdiff_t len) {
    const ptrdiff_t whole = dw_blocks(len);
    ptrdiff_t p = 0;
    /* DW_GROUP blocks at once: each tap's adds to one block wait for the
     * previous tap's (a chain of taps x the add's latency); the group's
     * blocks are independent chains (the same bits; forward 3x3, one
     * thread: (32, 64, 16, 16) 0.40 -> 0.31 ms, (16, 144, 56, 56) 4.66 ->
     * 4.12). AVX-512 only: on the AVX2 and SSE2 paths GCC moved these
     * vectors through the stack element by element (7x slower). */
    for (; DW_MANY_REGISTERS && p + DW_GROUP * DW_BLOCK <= whole; p += DW_GROUP * DW_BLOCK) {
        DW_BLOCK_T acc[DW_GROUP];
        const DW_T* s = src + direction * offsets[0] + p;
        const DW_T w0 = w[0];
        for (int i = 0; i < DW_GROUP; i++)
            acc[i] = (DW_T)0 + w0 * *(const DW_BLOCK_T*)(s + i * DW_BLOCK);
        for (ptrdiff_t t = 1; t < taps; t++) {
            const DW_T* st = src + direction * offsets[t] + p;
            const DW_T wt = w[t];
            for (int i = 0; i < DW_GROUP; i++)
                acc[i] += wt * *(const DW_BLOCK_T*)(st + i * DW_BLOCK);
        }
        for (int i = 0; i < DW_GROUP; i++) *(DW_BLOCK_T*)(out + p + i * DW_BLOCK) = acc[i];
    }
    for (; p < whole; p += DW_BLOCK) {
        DW_T acc[DW_BLOCK];
        const DW_T* s = src + direction * offsets[0] + p;
        const DW_T w0 = w[0];
        for (int l = 0; l < DW_BLOCK; l++) acc[l] = (DW_T)0 + w0 * s[l];
        for (ptrdiff_t t = 1; t < taps; t++) {
            const DW_T* st = src + direction * offsets[t] + p;
            const DW_T wt = w[t];
            for (int l = 0; l < DW_BLOCK; l++) acc[l] += wt * st[l];
        }
        for (int l = 0; l < DW_BLOCK; l++) out[p + l] = acc[l];
    }
}

/* conv: planes (n, c) lo..hi of x, each feeding outputs c M .. c M + M - 1.
 * work: dw_split's phases, then one output plane (rows wq apart). */
DW_ATTR static void DW_FN(dw_forward)(const DW_T* x, const DW_T* w, const DW_T* b, DW_T* y,
                                      const dw_geometry* g, ptrdiff_t lo, ptrdiff_t hi,
                                      DW_T* work) {
    const ptrdiff_t kk = g->kh * g->kw, oh = g->oh, ow = g->ow, wq = g->wq;
    const ptrdiff_t len = (oh - 1) * wq + ow;
    DW_T* ph = work;
    DW_T* ext = work + dw_phases_size(g) + DW_SLACK;
    for (ptrdiff_t plane = lo; plane < hi; plane++) {
        const ptrdiff_t c = plane % g->c;
        DW_FN(dw_split_next)(x + plane * g->h * g->w, ph, g, plane == lo);
        for (ptrdiff_t m = 0; m < g->m; m++) {
            const ptrdiff_t o = c * g->m + m;
            DW_FN(dw_stencil)(ph, g->offsets, 1, kk, w + o * kk, ext, len);
            DW_T* dst = y + (plane * g->m + m) * oh * ow;
            const DW_T bias = b ? b[o] : 0;
            for (ptrdiff_t r = 0; r < oh; r++, dst += ow) {
                const DW_T* src = ext + r * wq;
                if (b)
                    for (ptrdiff_t q = 0; q < ow; q++) dst[q] = src[q] + bias;
                else
                    for (ptrdiff_t q = 0; q < ow; q++) dst[q] = src[q];
            }
        }
    }
}

/* One output plane gy (oh, ow) copied into rows wq apart, zeros past ow
 * and from len on for `tail` elements. The zeros are the same for every
 * plane: with `zeros` 0 only gy's values are written (over a previous
 * call's with the same tail). */
DW_ATTR static void DW_FN(dw_widen)(const DW_T* gy, DW_T* ext, const dw_geometry* g,
                                    ptrdiff_t tail, int zeros) {
    for (ptrdiff_t r = 0; r < g->oh; r++) {
        for (ptrdiff_t q = 0; q < g->ow; q++) ext[r * g->wq + q] = gy[r * g->ow + q];
        if (zeros && r + 1 < g->oh)
            for (ptrdiff_t q = g->ow; q < g->wq; q++) ext[r * g->wq + q] = 0;
    }
    DW_T* end = ext + (g->oh - 1) * g->wq + g->ow;
    if (zeros)
        for (ptrdiff_t i = 0; i < tail; i++) end[i] = 0;
}

/* dw_backward at stride 1 with M = 1: planes lo..hi of gx. Each plane of
 * gy is widened with dw_max_offset zeros before it and zeros past it, and
 * the padded plane of gx is dw_stencil backwards over it: position q gets
 * the sum over taps t in order of w[t] ext[q - offsets[t]]. Where a tap
 * does not reach q it adds a product with one of the zeros, which changes
 * no bits of a sum that starts at +0: this is dw_backward's scatter sum,
 * bit for bit, where the weights are finite. (Its own function: inlined
 * into dw_backward, it slowed the scatter loop there by 10-15%.) */
__attribute__((noinline)) DW_ATTR static void DW_FN(dw_backward_gather)(
        const DW_T* gy, const DW_T* w, DW_T* gx, const dw_geometry* g, ptrdiff_t lo,
        ptrdiff_t hi, DW_T* work) {
    const ptrdiff_t kk = g->kh * g->kw, total = dw_phases_size(g);
    const ptrdiff_t len = (g->oh - 1) * g->wq + g->ow;
    DW_T* ph = work;
    /* (the zeros before ext are never written) */
    DW_T* ext = work + total + DW_SLACK + dw_max_offset(g);
    for (ptrdiff_t plane = lo; plane < hi; plane++) {
        DW_FN(dw_widen)(gy + plane * g->oh * g->ow, ext, g, dw_blocks(total) - len, plane == lo);
        DW_FN(dw_stencil)(ext, g->offsets, -1, kk, w + plane % g->c * kk, ph, total);
        DW_FN(dw_merge_next)(ph, gx + plane * g->h * g->w, g);
    }
}

/* conv_transpose with the same grouping (conv's input gradient): planes
 * (n, c) lo..hi of gx. For each of its M planes of gy (widened, zeros
 * past each row) and each tap t in order, w[c M + m, t] gy added to the
 * phases at offsets[t] (where the tap read x), then dw_merge. With one
 * plane of gy a plane of gx (M = 1), stride 1 and finite weights, by
 * dw_backward_gather instead (one thread: (32, 128, 8, 8) 3x3 0.46 -> 0.34 ms,
 * (64, 96, 28, 28) 5.0 -> 4.0; at stride 2 the phases' two or so taps a
 * position made a gather slower, (16, 144, 56, 56) 4.5 -> 6.9). work: the
 * phases, one widened plane (for dw_backward_gather, after its zeros). */
DW_ATTR static void DW_FN(dw_backward)(const DW_T* gy, const DW_T* w, DW_T* gx,
                                       const dw_geometry* g, ptrdiff_t lo, ptrdiff_t hi,
                                       DW_T* work) {
    const ptrdiff_t kk = g->kh * g->kw, wq = g->wq, m_count = g->m;
    const ptrdiff_t len = (g->oh - 1) * wq + g->ow, total = dw_phases_size(g);
    DW_T* ph = work;
    int gather = m_count == 1 && g->sh == 1 && g->sw == 1;
    if (gather) {
        DW_T finite = 0;  /* (NaN where a weight is inf or NaN) */
        for (ptrdiff_t i = 0; i < g->c * kk; i++) finite += w[i] - w[i];
        gather = finite == 0;
    }
    if (gather) {
        DW_FN(dw_backward_gather)(gy, w, gx, g, lo, hi, work);
        return;
    }
    DW_T* ext = work + total + DW_SLACK;
    for (ptrdiff_t plane = lo; plane < hi; plane++) {
        const ptrdiff_t c = plane % g->c;
        for (ptrdiff_t i = 0; i < total; i++) ph[i] = 0;
        for (ptrdiff_t m = 0; m < m_count; m++) {
            const DW_T* wm = w + (c * m_count + m) * kk;
            DW_FN(dw_widen)(gy + (plane * m_count + m) * g->oh * g->ow, ext, g, 0,
                            plane == lo && m == 0);
            for (ptrdiff_t t = 0; t < kk; t++) {
                DW_T* dst = ph + g->offsets[t];
                const DW_T wt = wm[t];
                if (wt - wt == 0) {
                    for (ptrdiff_t p = 0; p < len; p++) dst[p] += wt * ext[p];
                } else {
                    /* inf or NaN: its products with the widened plane's
                     * zeros would be NaN where this tap reaches nothing */
                    for (ptrdiff_t r = 0; r < g->oh; r++)
                        for (ptrdiff_t q = 0; q < g->ow; q++)
                            dst[r * wq + q] += wt * ext[r * wq + q];
                }
            }
        }
        DW_FN(dw_merge_next)(ph, gx + plane * g->h * g->w, g);
    }
}

/* sum over p < len of a[p] b[p]: DW_LANES partial sums, added pairwise. */
DW_ATTR static double DW_FN(dw_dot)(const DW_T* a, const DW_T* b, ptrdiff_t len) {
    DW_T lanes[DW_LANES];
    for (int l = 0; l < DW_LANES; l++) lanes[l] = 0;
    ptrdiff_t p = 0;
    for (; p + DW_LANES <= len; p += DW_LANES)
        for (int l = 0; l < DW_LANES; l++) lanes[l] += a[p + l] * b[p + l];
    for (int l = 0; p + l < len; l++) lanes[l] += a[p + l] * b[p + l];
    for (int half = DW_LANES / 2; half >= 1; half /= 2)
        for (int l = 0; l < half; l++) lanes[l] += lanes[l + half];
    return (double)lanes[0];
}

/* Whether x[0..len) are all finite (lane sums of x - x: 0, else NaN). */
DW_ATTR static int DW_FN(dw_finite)(const DW_T* x, ptrdiff_t len) {
    DW_T lanes[DW_LANES];
    for (int l = 0; l < DW_LANES; l++) lanes[l] = 0;
    ptrdiff_t p = 0;
    for (; p + DW_LANES <= len; p += DW_LANES)
        for (int l = 0; l < DW_LANES; l++) lanes[l] += x[p + l] - x[p + l];
    for (int l = 0; p + l < len; l++) lanes[l] += x[p + l] - x[p + l];
    DW_T sum = 0;
    for (int l = 0; l < DW_LANES; l++) sum += lanes[l];
    return sum == 0;
}

/* dw_dot over an output plane's own positions only (rows wq apart, ow a
 * row): where x holds inf or NaN, whose products with the widened
 * plane's zeros would be NaN. */
DW_ATTR static double DW_FN(dw_dot_rows)(const DW_T* a, const DW_T* b, const dw_geometry* g) {
    double sum = 0;
    for (ptrdiff_t r = 0; r < g->oh; r++) sum += DW_FN(dw_dot)(a + r * g->wq, b + r * g->wq, g->ow);
    return sum;
}

/* lanes[l] += a[p] b[p] for p = l mod DW_LANES, p < len (a multiple of
 * DW_LANES): the partial sums of a dot product, added up by dw_flush. */
DW_ATTR static void DW_FN(dw_dot_lanes)(const DW_T* a, const DW_T* b, ptrdiff_t len,
                                        DW_T* lanes) {
    DW_T acc[DW_LANES];
    for (int l = 0; l < DW_LANES; l++) acc[l] = lanes[l];
    for (ptrdiff_t p = 0; p < len; p += DW_LANES)
        for (int l = 0; l < DW_LANES; l++) acc[l] += a[p + l] * b[p + l];
    for (int l = 0; l < DW_LANES; l++) lanes[l] = acc[l];
}

/* dw_dot_lanes for the nine taps of a 3x3 window at once: each lane set
 * of a read once for all taps, the 9 x DW_LANES partial sums kept in
 * registers over the plane (one tap at a time, they were loaded and
 * stored again for each tap: the weight gradient's main cost on 8x8
 * planes). The same sums in the same order as dw_dot_lanes tap by tap.
 * Where there are 32 vector registers only (DW_MANY_REGISTERS: AVX-512);
 * with AVX2's 16 the sums spilled, and on 28x28 planes and more it was
 * slower than tap by tap (1.7 -> 2.7 ms on (16, 144, 28, 28)). */
DW_ATTR static void DW_FN(dw_dot_lanes_3x3)(const DW_T* a, const DW_T* ph,
                                            const ptrdiff_t* offsets, ptrdiff_t len,
                                            DW_T* lanes) {
    enum { TAPS = 9, SETS = DW_LANES / DW_BLOCK };
    DW_BLOCK_T acc[TAPS][SETS];
    for (int t = 0; t < TAPS; t++)
        for (int j = 0; j < SETS; j++)
            acc[t][j] = *(const DW_BLOCK_T*)(lanes + t * DW_LANES + j * DW_BLOCK);
    for (ptrdiff_t p = 0; p < len; p += DW_LANES) {
        DW_BLOCK_T av[SETS];
        for (int j = 0; j < SETS; j++) av[j] = *(const DW_BLOCK_T*)(a + p + j * DW_BLOCK);
        for (int t = 0; t < TAPS; t++) {
            const DW_T* b = ph + offsets[t] + p;
            for (int j = 0; j < SETS; j++)
                acc[t][j] += av[j] * *(const DW_BLOCK_T*)(b + j * DW_BLOCK);
        }
    }
    for (int t = 0; t < TAPS; t++)
        for (int j = 0; j < SETS; j++)
            *(DW_BLOCK_T*)(lanes + t * DW_LANES + j * DW_BLOCK) = acc[t][j];
}

/* acc[i] += the pairwise sum of lanes i (DW_LANES each), count of them;
 * the lanes zeroed. */
DW_ATTR static void DW_FN(dw_flush)(DW_T* lanes, double* acc, ptrdiff_t count) {
    for (ptrdiff_t i = 0; i < count; i++) {
        DW_T* v = lanes + i * DW_LANES;
        for (int half = DW_LANES / 2; half >= 1; half /= 2)
            for (int l = 0; l < half; l++) v[l] += v[l + half];
        acc[i] += (double)v[0];
        for (int l = 0; l < DW_LANES; l++) v[l] = 0;
    }
}

/* The weight gradient: channels lo..hi, gw[o, t] = sum over n of the dot
 * product of gy's plane (n, o) with x's plane (n, c) shifted to tap t
 * (o = c M + m). Products are summed in DW_T in DW_LANES partial sums
 * over up to DW_FLUSH_TERMS terms each, then pairwise and into double
 * sums. work: phases, one widened gy; acc: M kk doubles, then M kk
 * DW_LANES elements for the partial sums. */
DW_ATTR static void DW_FN(dw_grad_weight)(const DW_T* x, const DW_T* gy, DW_T* gw,
                                          const dw_geometry* g, ptrdiff_t lo, ptrdiff_t hi,
                                          DW_T* work, double* acc) {
    const ptrdiff_t kk = g->kh * g->kw, wq = g->wq, hw = g->h * g->w, mk = g->m * kk;
    const ptrdiff_t len = (g->oh - 1) * wq + g->ow;
    const ptrdiff_t lanes = (len + DW_LANES - 1) / DW_LANES * DW_LANES;
    DW_T* ph = work;
    DW_T* ext = work + dw_phases_size(g) + DW_SLACK;
    DW_T* partial = (DW_T*)(acc + mk);
    for (ptrdiff_t c = lo; c < hi; c++) {
        ptrdiff_t terms = 0;  /* in each partial sum since the last flush */
        for (ptrdiff_t i = 0; i < mk; i++) acc[i] = 0;
        for (ptrdiff_t i = 0; i < mk * DW_LANES; i++) partial[i] = 0;
        for (ptrdiff_t n = 0; n < g->n; n++) {
            const ptrdiff_t plane = n * g->c + c;
            const DW_T* xp = x + plane * hw;
            const int finite = DW_FN(dw_finite)(xp, hw);
            if (terms > 0 && terms + lanes / DW_LANES > DW_FLUSH_TERMS) {
                DW_FN(dw_flush)(partial, acc, mk);
                terms = 0;
            }
            terms += lanes / DW_LANES;
            DW_FN(dw_split_next)(xp, ph, g, c == lo && n == 0);
            for (ptrdiff_t m = 0; m < g->m; m++) {
                /* zeros up to a whole number of lanes: no scalar tail (the
                 * phases' values past len, or the slack's zeros, times 0) */
                DW_FN(dw_widen)(gy + (plane * g->m + m) * g->oh * g->ow, ext, g, lanes - len,
                                c == lo && n == 0 && m == 0);
                if (DW_MANY_REGISTERS && finite && kk == 9) {
                    DW_FN(dw_dot_lanes_3x3)(ext, ph, g->offsets, lanes,
                                            partial + m * kk * DW_LANES);
                    continue;
                }
                for (ptrdiff_t t = 0; t < kk; t++) {
                    if (finite)
                        DW_FN(dw_dot_lanes)(ext, ph + g->offsets[t], lanes,
                                            partial + (m * kk + t) * DW_LANES);
                    else
                        acc[m * kk + t] += DW_FN(dw_dot_rows)(ext, ph + g->offsets[t], g);
                }
            }
        }
        DW_FN(dw_flush)(partial, acc, mk);
        for (ptrdiff_t i = 0; i < mk; i++) gw[c * mk + i] = (DW_T)acc[i];
    }
}

#undef DW_CAT3
#undef DW_NAME3
#undef DW_FN
#undef DW_CAT2
#undef DW_NAME2
#undef DW_BLOCK_T
