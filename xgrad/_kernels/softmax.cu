// Softmax family over one axis. x is viewed as (outer, cols, inner),
// C-contiguous: row r = (o, i) holds the cols elements (o*cols + k)*inner + i.
// One block per row (grid-stride over rows); the block's threads stride over
// k and combine maxima and sums with block_reduce. Computed in compute_t<T>.

namespace xgrad {

// Offset of row r's first element; its k-th element is inner further per k.
__device__ __forceinline__ long long row_start(long long r, long long cols, long long inner) {
    const long long o = r / inner;
    return o * cols * inner + (r - o * inner);
}

// max over the row, for the shift that keeps exp from overflowing.
template <class C, class T>
__device__ C row_max(const T* xr, long long cols, long long step, C* shared) {
    C m = math::neg_inf<C>();
    for (long long k = threadIdx.x; k < cols; k += blockDim.x)
        m = MaxOp()(m, to_compute(xr[k * step]));
    return block_reduce(m, shared, MaxOp());
}

// sum over the row of exp(x - m).
template <class C, class T>
__device__ C row_sum_exp(const T* xr, long long cols, long long step, C m, C* shared) {
    C s = C(0);
    for (long long k = threadIdx.x; k < cols; k += blockDim.x)
        s += math::exp(to_compute(xr[k * step]) - m);
    return block_reduce(s, shared, SumOp());
}

// Each row of x (outer, cols, inner) to its softmax, or with Log its
// log_softmax: y = exp(x - max) / sum(exp(x - max)) or x - max - log(sum(...)).
template <bool Log, class T>
__device__ void softmax_rows(const T* x, T* y, long long outer, long long cols, long long inner) {
    typedef compute_t<T> C;
    __shared__ C shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(r, outer * inner) {
        const long long s0 = row_start(r, cols, inner);
        const C m = row_max<C>(x + s0, cols, inner, shared);
        const C s = row_sum_exp<C>(x + s0, cols, inner, m, shared);
        const C log_s = Log ? math::log(s) : C(0);
        for (long long k = threadIdx.x; k < cols; k += blockDim.x) {
            const long long j = s0 + k * inner;
            const C z = to_compute(x[j]) - m;
            y[j] = from_compute<T>(Log ? z - log_s : math::exp(z) / s);
        }
    }
}

template <class T>
__global__ void softmax_forward(const T* x, T* y, long long outer, long long cols,
                                long long inner) {
    softmax_rows<false>(x, y, outer, cols, inner);
}

template <class T>
__global__ void log_softmax_forward(const T* x, T* y, long long outer, long long cols,
                                    long long inner) {
    softmax_rows<true>(x, y, outer, cols, inner);
}

// gx = y * (gy - sum(gy * y)), y = softmax(x)
template <class T>
__global__ void softmax_backward(const T* gy, const T* y, T* gx, long long outer, long long cols,
                                 long long inner) {
    typedef compute_t<T> C;
    __shared__ C shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(r, outer * inner) {
        const long long s0 = row_start(r, cols, inner);
        C dot = C(0);
        for (long long k = threadIdx.x; k < cols; k += blockDim.x) {
            const long long j = s0 + k * inner;
            dot += to_compute(gy[j]) * to_compute(y[j]);
        }
        dot = block_reduce(dot, shared, SumOp());
        for (long long k = threadIdx.x; k < cols; k += blockDim.x) {
            const long long j = s0 + k * inner;
            gx[j] = from_compute<T>(to_compute(y[j]) * (to_compute(gy[j]) - dot));
        }
    }
}

// gx = gy - exp(y) * sum(gy), y = log_softmax(x)
template <class T>
__global__ void log_softmax_backward(const T* gy, const T* y, T* gx, long long outer,
                                     long long cols, long long inner) {
    typedef compute_t<T> C;
    __shared__ C shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(r, outer * inner) {
        const long long s0 = row_start(r, cols, inner);
        C sum = C(0);
        for (long long k = threadIdx.x; k < cols; k += blockDim.x)
            sum += to_compute(gy[s0 + k * inner]);
        sum = block_reduce(sum, shared, SumOp());
        for (long long k = threadIdx.x; k < cols; k += blockDim.x) {
            const long long j = s0 + k * inner;
            gx[j] = from_compute<T>(to_compute(gy[j]) - math::exp(to_compute(y[j])) * sum);
        }
    }
}

// ------------------------------------------------- softmax cross entropy
// x (n, c), labels t (n,) of type L (int or long long), -1 = ignored row.
// Labels are validated by the caller.

// loss[r] = logsumexp(x[r, :]) - x[r, t[r]];  0 where t[r] == -1.
template <class T, class L>
__global__ void softmax_cross_entropy_forward(const T* x, const L* t, T* loss, long long n,
                                              long long c) {
    typedef compute_t<T> C;
    __shared__ C shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(r, n) {
        const long long label = (long long)t[r];
        if (label == -1) {  // the whole block takes this branch
            if (threadIdx.x == 0) loss[r] = from_compute<T>(C(0));
            continue;
        }
        if (label < -1 || label >= c) {  // out of range (not checked on the host): NaN
            if (threadIdx.x == 0) loss[r] = from_compute<T>(math::quiet_nan<C>());
            continue;
        }
        const T* xr = x + r * c;
        const C m = row_max<C>(xr, c, 1, shared);
        const C s = row_sum_exp<C>(xr, c, 1, m, shared);
        if (threadIdx.x == 0)
            loss[r] = from_compute<T>(math::log(s) - (to_compute(xr[label]) - m));
    }
}

// gx[r, k] = gloss[r] * (softmax(x[r])[k] - (k == t[r])); rows with t == -1
// are 0. The softmax is recomputed from x here (one launch, no saved y).
template <class T, class L>
__global__ void softmax_cross_entropy_backward(const T* gloss, const T* x, const L* t, T* gx,
                                               long long n, long long c) {
    typedef compute_t<T> C;
    __shared__ C shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(r, n) {
        const long long label = (long long)t[r];
        const T* xr = x + r * c;
        T* gr = gx + r * c;
        if (label == -1 || label < -1 || label >= c) {  // ignored: 0; out of range: NaN
            const C fill = label == -1 ? C(0) : math::quiet_nan<C>();
            for (long long k = threadIdx.x; k < c; k += blockDim.x) gr[k] = from_compute<T>(fill);
            continue;
        }
        const C m = row_max<C>(xr, c, 1, shared);
        const C s = row_sum_exp<C>(xr, c, 1, m, shared);
        const C g = to_compute(gloss[r]);
        for (long long k = threadIdx.x; k < c; k += blockDim.x) {
            const C p = math::exp(to_compute(xr[k]) - m) / s;
            gr[k] = from_compute<T>(g * (k == label ? p - C(1) : p));
        }
    }
}

}  // namespace xgrad
