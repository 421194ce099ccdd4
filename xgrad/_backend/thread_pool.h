/* The worker threads that xgrad's CPU kernels split large arrays over.
 *
 * Why our own pool and not OpenMP: a process that also has PyTorch loaded
 * shares one GNU OpenMP runtime with it (PyTorch ships libgomp.so.1), whose
 * threads spin for milliseconds after every parallel loop; on 2 cores they
 * then kept a core from NumPy's BLAS threads and a WGAN-GP step with default
 * threads took 14x its one-thread time. These workers poll for 50 us after
 * a job (long enough for the next op of a step, not to stand in a BLAS
 * call's way for long) and then sleep on a condition variable.
 *
 * xgrad_pool_run(task, ctx, chunks) runs task(ctx, c) for c = 0..chunks-1 on
 * the calling thread and the workers, and returns when all are done. The
 * chunk counter carries the job's generation in its high bits, so a worker
 * that wakes late for a finished job can never take a chunk of the next one.
 * Callers from several threads at once (kernels run without the GIL) do not
 * wait for each other: one gets the pool, the others run their chunks alone.
 *
 * The thread count is OMP_NUM_THREADS when it is set (the first number of
 * the list), else the CPUs this process may run on; xgrad_pool_set_limit
 * lowers it. After fork the child starts its own workers when it needs them.
 * Without pthreads (Windows) everything runs on the calling thread.
 */
#ifndef XGRAD_THREAD_POOL_H
#define XGRAD_THREAD_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef void (*xgrad_task)(void* ctx, ptrdiff_t chunk);

#if defined(__unix__) || defined(__APPLE__)
#define XGRAD_HAS_POOL 1
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define XGRAD_POOL_MAX 256
#define XGRAD_SPIN_NS 50000 /* a worker polls this long for the next job, then sleeps */

static pthread_mutex_t xgrad_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t xgrad_pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t xgrad_pool_done = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t xgrad_pool_busy = PTHREAD_MUTEX_INITIALIZER;
static int xgrad_pool_workers = 0;   /* started */
static int xgrad_pool_configured = 0; /* threads in all, the caller included; 0: not read yet */
static int xgrad_pool_limit = 0;      /* 0: none */
/* the job: written under xgrad_pool_mu, read under it by workers */
static xgrad_task xgrad_job_task;
static void* xgrad_job_ctx;
static uint32_t xgrad_job_chunks;
static _Atomic uint64_t xgrad_job_next; /* generation << 32 | next chunk */
static _Atomic uint32_t xgrad_job_generation;
static _Atomic int64_t xgrad_job_pending; /* chunks not finished */

static inline void xgrad_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline int64_t xgrad_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Poll `*word` until it differs from `value` or about XGRAD_SPIN_NS passed;
 * whether it changed. */
static int xgrad_spin_u32(_Atomic uint32_t* word, uint32_t value) {
    int64_t end = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != value) return 1;
        xgrad_pause();
        if ((i & 255) == 0) {
            int64_t now = xgrad_now_ns();
            if (end == 0) end = now + XGRAD_SPIN_NS;
            else if (now > end) return 0;
        }
    }
}

static int xgrad_spin_until_zero(_Atomic int64_t* word) {
    int64_t end = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) == 0) return 1;
        xgrad_pause();
        if ((i & 255) == 0) {
            int64_t now = xgrad_now_ns();
            if (end == 0) end = now + XGRAD_SPIN_NS;
            else if (now > end) return 0;
        }
    }
}

static int xgrad_pool_count_cpus(void) {
    const char* env = getenv("OMP_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n >= 1) return n > XGRAD_POOL_MAX ? XGRAD_POOL_MAX : (int)n;
    }
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n > XGRAD_POOL_MAX ? XGRAD_POOL_MAX : n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > XGRAD_POOL_MAX ? XGRAD_POOL_MAX : (int)n);
}

/* Threads a split op may use now. */
static int xgrad_pool_threads(void) {
    if (xgrad_pool_configured == 0) xgrad_pool_configured = xgrad_pool_count_cpus();
    int n = xgrad_pool_configured;
    if (xgrad_pool_limit > 0 && xgrad_pool_limit < n) n = xgrad_pool_limit;
    return n;
}

static void xgrad_pool_set_limit(int n) { xgrad_pool_limit = n; }

/* Take chunks of generation `gen` and run them; returns when none is left. */
static void xgrad_pool_work(uint32_t gen, xgrad_task task, void* ctx, uint32_t chunks) {
    for (;;) {
        uint64_t v = atomic_load_explicit(&xgrad_job_next, memory_order_acquire);
        for (;;) {
            if ((uint32_t)(v >> 32) != gen || (uint32_t)v >= chunks) return;
            if (atomic_compare_exchange_weak_explicit(&xgrad_job_next, &v, v + 1,
                                                      memory_order_acq_rel,
                                                      memory_order_acquire))
                break;
        }
        task(ctx, (ptrdiff_t)(uint32_t)v);
        if (atomic_fetch_sub_explicit(&xgrad_job_pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&xgrad_pool_mu);
            pthread_cond_broadcast(&xgrad_pool_done);
            pthread_mutex_unlock(&xgrad_pool_mu);
        }
    }
}

static void* xgrad_pool_worker(void* arg) {
    uint32_t seen = (uint32_t)(uintptr_t)arg; /* the generation when it was started */
    for (;;) {
        if (!xgrad_spin_u32(&xgrad_job_generation, seen)) {
            pthread_mutex_lock(&xgrad_pool_mu);
            while (atomic_load_explicit(&xgrad_job_generation, memory_order_acquire) == seen)
                pthread_cond_wait(&xgrad_pool_wake, &xgrad_pool_mu);
            pthread_mutex_unlock(&xgrad_pool_mu);
        }
        pthread_mutex_lock(&xgrad_pool_mu);
        seen = atomic_load_explicit(&xgrad_job_generation, memory_order_acquire);
        xgrad_task task = xgrad_job_task;
        void* ctx = xgrad_job_ctx;
        uint32_t chunks = xgrad_job_chunks;
        pthread_mutex_unlock(&xgrad_pool_mu);
        xgrad_pool_work(seen, task, ctx, chunks);
    }
    return NULL;
}

/* Start workers up to `threads - 1`; returns how many there are. */
static int xgrad_pool_start(int threads) {
    while (xgrad_pool_workers < threads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        uintptr_t gen = atomic_load_explicit(&xgrad_job_generation, memory_order_relaxed);
        int failed = pthread_create(&t, &attr, xgrad_pool_worker, (void*)gen);
        pthread_attr_destroy(&attr);
        if (failed) break;
        xgrad_pool_workers++;
    }
    return xgrad_pool_workers;
}

static void xgrad_pool_after_fork_in_child(void) {
    /* The workers did not come along; the locks may have been held. */
    pthread_mutex_init(&xgrad_pool_mu, NULL);
    pthread_mutex_init(&xgrad_pool_busy, NULL);
    pthread_cond_init(&xgrad_pool_wake, NULL);
    pthread_cond_init(&xgrad_pool_done, NULL);
    xgrad_pool_workers = 0;
}

static void xgrad_pool_init(void) {
    pthread_atfork(NULL, NULL, xgrad_pool_after_fork_in_child);
}

static void xgrad_pool_run(xgrad_task task, void* ctx, ptrdiff_t chunks) {
    if (chunks <= 0) return;
    if (chunks == 1 || pthread_mutex_trylock(&xgrad_pool_busy) != 0) {
        for (ptrdiff_t c = 0; c < chunks; c++) task(ctx, c);
        return;
    }
    pthread_mutex_lock(&xgrad_pool_mu);
    xgrad_pool_start(xgrad_pool_threads());
    uint32_t gen = atomic_load_explicit(&xgrad_job_generation, memory_order_relaxed) + 1;
    xgrad_job_task = task;
    xgrad_job_ctx = ctx;
    xgrad_job_chunks = (uint32_t)chunks;
    atomic_store_explicit(&xgrad_job_pending, (int64_t)chunks, memory_order_relaxed);
    atomic_store_explicit(&xgrad_job_next, (uint64_t)gen << 32, memory_order_release);
    atomic_store_explicit(&xgrad_job_generation, gen, memory_order_release);
    pthread_cond_broadcast(&xgrad_pool_wake);
    pthread_mutex_unlock(&xgrad_pool_mu);
    xgrad_pool_work(gen, task, ctx, (uint32_t)chunks);
    if (!xgrad_spin_until_zero(&xgrad_job_pending)) {
        pthread_mutex_lock(&xgrad_pool_mu);
        while (atomic_load_explicit(&xgrad_job_pending, memory_order_acquire) != 0)
            pthread_cond_wait(&xgrad_pool_done, &xgrad_pool_mu);
        pthread_mutex_unlock(&xgrad_pool_mu);
    }
    pthread_mutex_unlock(&xgrad_pool_busy);
}

#else /* no pthreads: one thread */
#define XGRAD_HAS_POOL 0
static int xgrad_pool_threads(void) { return 1; }
static void xgrad_pool_set_limit(int n) { (void)n; }
static void xgrad_pool_init(void) {}
static void xgrad_pool_run(xgrad_task task, void* ctx, ptrdiff_t chunks) {
    for (ptrdiff_t c = 0; c < chunks; c++) task(ctx, c);
}
#endif

#endif
