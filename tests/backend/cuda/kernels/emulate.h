// emulate.h: host stand-ins for the CUDA built-ins xgrad's kernels use, so the
// kernel sources compile with g++ (-include emulate.h) and run on the CPU.
// Test-only code.
//
// A launch runs the grid's blocks one after another; the threads of a block
// run as cooperative coroutines (ucontext) that switch only at
// __syncthreads(): shared memory (__shared__ = static) and barriers work as on
// the device, and thread 0 runs ahead to the next barrier before thread 1
// starts, so a missing barrier usually shows as a wrong value (a race the
// in-order schedule happens to satisfy does not). A thread that returns
// counts as arrived at every later barrier. Threads waiting at different __syncthreads() call sites in
// one phase are reported (divergent barriers hang or misbehave on a GPU), and
// so is a vector access (common.cuh's read and write) at an address not
// aligned to its size (the device's misaligned address error).
// Math: <math.h>'s C functions (expf, exp, log1pf, ...), which common.cuh's
// xgrad::math overloads call, as they call CUDA's on the device.

#ifndef XGRAD_EMULATE_H
#define XGRAD_EMULATE_H

#include <math.h>
#include <ucontext.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define XGRAD_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct xg_emu_dim3 {
    unsigned x, y, z;
};
static xg_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// ------------------------------------------------------------------ float16

static inline float xg_emu_half_to_float(unsigned short bits) {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof h);
    return (float)h;
}

static inline unsigned short xg_emu_float_to_half(float f) {
    _Float16 h = (_Float16)f;  // round to nearest even, like cvt.rn.f16.f32
    unsigned short bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
}

// ------------------------------------------------------- device intrinsics

static inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

static inline double __longlong_as_double(long long i) {
    double d;
    std::memcpy(&d, &i, sizeof d);
    return d;
}

namespace xgrad {
struct half;  // common.cuh defines it; the signature strings below name it
}

// -------------------------------------------------------------- scheduler

namespace xg_emu {

enum Status { OK = 0, UNKNOWN_KERNEL = 1, DIVERGENT_BARRIER = 2, BAD_LAUNCH = 3, MISALIGNED = 4 };

constexpr std::size_t kStackSize = 64 * 1024;
constexpr unsigned kMaxThreads = 1024;

struct Thread {
    ucontext_t context;
    bool done;
    void* barrier_site;
};

struct Scheduler {
    ucontext_t main;
    std::vector<Thread> threads;
    std::vector<char> stacks;
    unsigned current = 0;
    bool running = false;
    void (*body)(void*) = nullptr;
    void* arg = nullptr;
};

static Scheduler sched;

// Set by a vector access at an address not aligned to its size (the device
// faults: misaligned address); the launch then reports MISALIGNED.
static bool misaligned = false;

static void thread_entry() {
    sched.body(sched.arg);
    sched.threads[sched.current].done = true;
    // returning resumes uc_link: the scheduler
}

__attribute__((noinline)) static void barrier(void* site) {
    Thread& self = sched.threads[sched.current];
    self.barrier_site = site;
    __asm__ __volatile__("" ::: "memory");
    swapcontext(&self.context, &sched.main);
    __asm__ __volatile__("" ::: "memory");
}

// Runs one block of n threads to completion; returns a Status.
static int run_block(unsigned n) {
    for (unsigned t = 0; t < n; ++t) {
        Thread& th = sched.threads[t];
        getcontext(&th.context);
        th.context.uc_stack.ss_sp = sched.stacks.data() + t * kStackSize;
        th.context.uc_stack.ss_size = kStackSize;
        th.context.uc_link = &sched.main;
        makecontext(&th.context, thread_entry, 0);
        th.done = false;
    }
    unsigned live = n;
    while (live) {  // one barrier phase per pass
        void* site = nullptr;
        bool first = true;
        for (unsigned t = 0; t < n; ++t) {
            Thread& th = sched.threads[t];
            if (th.done) continue;
            sched.current = t;
            threadIdx.x = t;
            th.barrier_site = nullptr;
            swapcontext(&sched.main, &th.context);
            if (th.done) {
                --live;
            } else if (first) {
                site = th.barrier_site;
                first = false;
            } else if (th.barrier_site != site) {
                return DIVERGENT_BARRIER;
            }
        }
    }
    return OK;
}

static int run_grid(unsigned grid, unsigned block, void (*body)(void*), void* arg) {
    if (block == 0 || block > kMaxThreads || grid == 0 || sched.running) return BAD_LAUNCH;
    if (sched.threads.size() < block) {
        sched.threads.resize(block);
        sched.stacks.resize(std::size_t(block) * kStackSize);
    }
    sched.running = true;
    misaligned = false;
    sched.body = body;
    sched.arg = arg;
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    threadIdx = {0, 0, 0};
    int status = OK;
    for (unsigned b = 0; b < grid && status == OK; ++b) {
        blockIdx = {b, 0, 0};
        status = run_block(block);
    }
    sched.running = false;
    return status == OK && misaligned ? MISALIGNED : status;
}

// A kernel's parameters, unpacked from void** like cuLaunchKernel's
// kernelParams (each entry points at one argument's value).
template <class... P, std::size_t... I>
static int launch_with(void (*kernel)(P...), unsigned grid, unsigned block, void** args,
                       std::index_sequence<I...>) {
    typedef std::tuple<std::decay_t<P>...> Params;
    Params params(*static_cast<std::decay_t<P>*>(args[I])...);
    struct Call {
        void (*kernel)(P...);
        Params* params;
        static void run(void* self) {
            Call* c = static_cast<Call*>(self);
            std::apply(c->kernel, *c->params);
        }
    };
    Call call{kernel, &params};
    return run_grid(grid, block, &Call::run, &call);
}

template <class... P>
static int launch_kernel(void (*kernel)(P...), unsigned grid, unsigned block, void** args) {
    return launch_with(kernel, grid, block, args, std::index_sequence_for<P...>{});
}

template <auto K>
static int launch(unsigned grid, unsigned block, void** args) {
    return launch_kernel(K, grid, block, args);
}

// Parameter kinds, for the Python side to check its arguments: "*f4" a
// pointer to 4-byte floats, "i8" a 64-bit integer by value, ...
template <class T>
struct kind {
    static std::string of() {
        const char k = std::is_floating_point<T>::value ? 'f'
                       : std::is_integral<T>::value     ? (std::is_signed<T>::value ? 'i' : 'u')
                                                        : 'V';
        return k + std::to_string(sizeof(T));
    }
};
template <>
struct kind<xgrad::half> {
    static std::string of() { return "f2"; }
};
template <class T>
struct kind<T*> {
    static std::string of() { return "*" + kind<std::remove_cv_t<T>>::of(); }
};

template <class... P>
static std::string signature_of(void (*)(P...)) {
    std::string s;
    ((s += (s.empty() ? "" : ","), s += kind<std::decay_t<P>>::of()), ...);
    return s;
}

template <auto K>
static const char* signature() {
    static const std::string s = signature_of(K);
    return s.c_str();
}

struct Entry {
    const char* name;
    int (*launch)(unsigned, unsigned, void**);
    const char* (*signature)();
};

}  // namespace xg_emu

// common.cuh's 16-byte loads and stores (memcpy: an aligned host copy could
// fault where the device would report the error).
static inline void xg_emu_copy_aligned(void* dst, const void* src, std::size_t bytes,
                                       const void* device_address) {
    if (reinterpret_cast<std::size_t>(device_address) % bytes != 0) xg_emu::misaligned = true;
    std::memcpy(dst, src, bytes);
}

// Each call site has its own marker, so that divergent barriers are detected.
#define __syncthreads()                            \
    do {                                           \
        static const char xg_emu_barrier_site = 0; \
        ::xg_emu::barrier((void*)&xg_emu_barrier_site); \
    } while (0)

#endif  // XGRAD_EMULATE_H
