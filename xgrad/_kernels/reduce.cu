// Broadcast reduction (the gradient of broadcasting, sum_to): x viewed as
// (A, B, C), C-contiguous;  y[b] = sum over a < A, c < C of x[(a*B + b)*C + c].
// Sums run in the compute type (float for half). The wrapper picks the kernel.

namespace xgrad {

// One block per b (grid-stride over b); the block's threads stride over the
// A*C summands and combine them with a shared-memory tree. For few b.
template <class T>
__global__ void sum_abc_blocks(const T* x, T* y, long long A, long long B, long long C) {
    typedef compute_t<T> S;
    __shared__ S shared[XGRAD_BLOCK];
    const long long m = A * C;
    XGRAD_FOR_EACH_ROW(b, B) {
        S sum = S(0);
        if (C >= (long long)blockDim.x) {  // rows of C: coalesced, no division
            for (long long a = 0; a < A; ++a) {
                const T* p = x + (a * B + b) * C;
                for (long long c = threadIdx.x; c < C; c += blockDim.x) sum += to_compute(p[c]);
            }
        } else {
            for (long long j = threadIdx.x; j < m; j += blockDim.x) {
                const long long a = j / C, c = j - a * C;
                sum += to_compute(x[(a * B + b) * C + c]);
            }
        }
        sum = block_reduce(sum, shared, SumOp());
        if (threadIdx.x == 0) y[b] = from_compute<T>(sum);
    }
}

// Few b with many summands each, pass 1 of 2: block r = b * parts + part
// sums one contiguous chunk of b's A*C summands into partial[r], kept in the
// compute type (float for half) so that pass 2 rounds once.
template <class T>
__global__ void sum_abc_split(const T* x, compute_t<T>* partial, long long A, long long B,
                              long long C, long long parts) {
    typedef compute_t<T> S;
    __shared__ S shared[XGRAD_BLOCK];
    const long long m = A * C;
    const long long chunk = (m + parts - 1) / parts;
    XGRAD_FOR_EACH_ROW(r, B * parts) {
        const long long b = r / parts, first = (r - b * parts) * chunk;
        const long long last = first + chunk < m ? first + chunk : m;
        S sum = S(0);
        for (long long j = first + threadIdx.x; j < last; j += blockDim.x) {
            const long long a = j / C, c = j - a * C;
            sum += to_compute(x[(a * B + b) * C + c]);
        }
        sum = block_reduce(sum, shared, SumOp());
        if (threadIdx.x == 0) partial[r] = sum;
    }
}

// Many b but too few of them to fill the GPU with one thread each, and long
// columns (C == 1), pass 1 of 2: thread i = part * B + b (coalesced over b)
// sums rows [part * chunk, (part + 1) * chunk) of column b into
// partial[b * parts + part], in the compute type; sum_partials adds them.
template <class T>
__global__ void sum_abc_columns_split(const T* x, compute_t<T>* partial, long long A,
                                      long long B, long long parts) {
    typedef compute_t<T> S;
    const long long chunk = (A + parts - 1) / parts;
    XGRAD_FOR_EACH(i, B * parts) {
        const long long part = i / B, b = i - part * B;
        const long long first = part * chunk;
        const long long last = first + chunk < A ? first + chunk : A;
        S sum = S(0);
        for (long long a = first; a < last; ++a) sum += to_compute(x[a * B + b]);
        partial[b * parts + part] = sum;
    }
}

// Pass 2: y[b] = the sum of partial[b * parts : (b + 1) * parts], one block per b.
template <class T>
__global__ void sum_partials(const compute_t<T>* partial, T* y, long long B, long long parts) {
    typedef compute_t<T> S;
    __shared__ S shared[XGRAD_BLOCK];
    XGRAD_FOR_EACH_ROW(b, B) {
        S sum = S(0);
        for (long long p = threadIdx.x; p < parts; p += blockDim.x) sum += partial[b * parts + p];
        sum = block_reduce(sum, shared, SumOp());
        if (threadIdx.x == 0) y[b] = from_compute<T>(sum);
    }
}

// One thread per b (grid-stride over b), looping over a (and c). Coalesced
// when C == 1, the case it is meant for: many b, each a column of x (A, B).
template <class T>
__global__ void sum_abc_columns(const T* x, T* y, long long A, long long B, long long C) {
    typedef compute_t<T> S;
    XGRAD_FOR_EACH(b, B) {
        S sum = S(0);
        for (long long a = 0; a < A; ++a) {
            const T* p = x + (a * B + b) * C;
            for (long long c = 0; c < C; ++c) sum += to_compute(p[c]);
        }
        y[b] = from_compute<T>(sum);
    }
}

}  // namespace xgrad
