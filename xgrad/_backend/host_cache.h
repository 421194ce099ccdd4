/* The host memory cache: free blocks of large arrays kept for the next
 * request of the same size (see host_cache.pyx for why and who asks).
 *
 * Every block this file hands out carries a header just before its data:
 * the pointer its allocator returned and the block's size. A small block
 * (under HC_MIN_BYTES) came from, and goes back to, NumPy's default handler
 * at once; a large block (HC_LARGE in its size word) has its byte size
 * rounded up to whole pages, its data 64-byte aligned, and when it is freed it is kept
 * here while the kept blocks stay within the limit and the system has
 * memory to spare. All state is behind one mutex: NumPy may allocate or
 * free without the GIL.
 */
#ifndef XGRAD_HOST_CACHE_H
#define XGRAD_HOST_CACHE_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_MIN_BYTES ((size_t)256 << 10) /* smaller blocks stay in malloc's heap anyway */
#define HC_PAGE ((size_t)4096)
#define HC_ALIGN ((size_t)64)
#define HC_HEADER ((size_t)16)
#define HC_SLOTS 512                     /* kept blocks at most, whatever their sizes */
#define HC_PRESSURE_FRACTION 0.1         /* of the system's memory left available */
#define HC_LARGE ((size_t)1 << (sizeof(size_t) * 8 - 1))

typedef void *(*hc_malloc_fn)(void *ctx, size_t size);
typedef void *(*hc_calloc_fn)(void *ctx, size_t nelem, size_t elsize);
typedef void (*hc_free_fn)(void *ctx, void *ptr, size_t size);

typedef struct {
    void *origin; /* what the underlying allocator returned */
    size_t size;  /* a small block's byte size, or HC_LARGE | a large block's capacity */
} hc_header;

typedef struct {
    size_t capacity;
    void *data;
} hc_slot;

static struct {
    pthread_mutex_t lock;
    hc_slot slots[HC_SLOTS];
    int used;
    size_t free_bytes, checked, limit;
    unsigned long long hits, misses, dropped;
    /* the underlying allocator: NumPy's default handler */
    void *ctx;
    hc_malloc_fn malloc_;
    hc_calloc_fn calloc_;
    hc_free_fn free_;
} hc = {PTHREAD_MUTEX_INITIALIZER};

static hc_header *hc_header_of(void *data) { return (hc_header *)((char *)data - HC_HEADER); }

static size_t hc_capacity(size_t size) { return (size + HC_PAGE - 1) / HC_PAGE * HC_PAGE; }

static size_t hc_span(size_t capacity) { return capacity + HC_HEADER + HC_ALIGN; }

/* Whether the system would have less than HC_PRESSURE_FRACTION of its
 * memory available after ``growing_by`` more bytes are kept (Linux's
 * /proc/meminfo; elsewhere never). */
static int hc_pressure_override = -1; /* tests: 0 or 1 replaces the reading */

static int hc_under_pressure(size_t growing_by) {
    if (hc_pressure_override >= 0) return hc_pressure_override;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long total = 0, available = 0, kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) total = kb << 10;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) available = kb << 10;
    }
    fclose(f);
    if (!total || !available) return 0;
    return (double)available - (double)growing_by < HC_PRESSURE_FRACTION * (double)total;
}

/* A new large block of ``capacity`` bytes (zeroed when ``zero``). */
static void *hc_new_large(size_t capacity, int zero) {
    size_t span = hc_span(capacity);
    char *origin = zero ? hc.calloc_(hc.ctx, 1, span) : hc.malloc_(hc.ctx, span);
    if (!origin) return NULL;
    uintptr_t start = (uintptr_t)origin + HC_HEADER;
    char *data = (char *)((start + HC_ALIGN - 1) & ~(uintptr_t)(HC_ALIGN - 1));
    hc_header *h = hc_header_of(data);
    h->origin = origin;
    h->size = HC_LARGE | capacity;
    return data;
}

static size_t hc_capacity_of(void *data) { return hc_header_of(data)->size & ~HC_LARGE; }

static void hc_release_large(void *data) {
    hc_header *h = hc_header_of(data);
    hc.free_(hc.ctx, h->origin, hc_span(hc_capacity_of(data)));
}

static void *hc_take(size_t capacity) {
    void *data = NULL;
    pthread_mutex_lock(&hc.lock);
    for (int i = hc.used - 1; i >= 0; --i) {
        if (hc.slots[i].capacity == capacity) {
            data = hc.slots[i].data;
            hc.slots[i] = hc.slots[--hc.used];
            hc.free_bytes -= capacity;
            break;
        }
    }
    if (data) ++hc.hits; else ++hc.misses;
    pthread_mutex_unlock(&hc.lock);
    return data;
}

/* Keep a large block for the next request of its size, or free it. */
static void hc_give_back(void *data) {
    size_t capacity = hc_capacity_of(data);
    pthread_mutex_lock(&hc.lock);
    size_t after = hc.free_bytes + capacity;
    int keep = after <= hc.limit && hc.used < HC_SLOTS;
    if (keep && after > hc.checked) { /* growing: ask the system, once a level */
        keep = !hc_under_pressure(capacity);
        hc.checked = keep ? after : 0;
    }
    if (keep) {
        hc.slots[hc.used].capacity = capacity;
        hc.slots[hc.used].data = data;
        ++hc.used;
        hc.free_bytes = after;
    } else {
        ++hc.dropped;
    }
    pthread_mutex_unlock(&hc.lock);
    if (!keep) hc_release_large(data);
}

/* Keep at most ``limit`` bytes of free blocks (the blocks past it are
 * freed now); returns the previous limit. */
static size_t hc_set_limit(size_t limit) {
    hc_slot dropped[HC_SLOTS];
    int n = 0;
    pthread_mutex_lock(&hc.lock);
    size_t previous = hc.limit;
    hc.limit = limit;
    while (hc.used && hc.free_bytes > limit) {
        /* the largest first: fewest blocks freed */
        int largest = 0;
        for (int i = 1; i < hc.used; ++i)
            if (hc.slots[i].capacity > hc.slots[largest].capacity) largest = i;
        dropped[n++] = hc.slots[largest];
        hc.free_bytes -= hc.slots[largest].capacity;
        hc.slots[largest] = hc.slots[--hc.used];
    }
    if (!hc.used) hc.checked = 0;
    pthread_mutex_unlock(&hc.lock);
    for (int i = 0; i < n; ++i) hc_release_large(dropped[i].data);
    return previous;
}

static void hc_clear(void) {
    size_t limit = hc.limit;
    hc_set_limit(0);
    pthread_mutex_lock(&hc.lock);
    hc.limit = limit;
    pthread_mutex_unlock(&hc.lock);
}

/* A child forked while another thread held the lock would wait on it
 * forever: it gets a new one (its kept blocks are its copies). */
static void hc_after_fork_in_child(void) { pthread_mutex_init(&hc.lock, NULL); }

/* The NumPy data allocator (PyDataMem_Handler's four functions). */

static void *hc_small(void *origin, size_t size) {
    if (!origin) return NULL;
    hc_header *h = (hc_header *)origin;
    h->origin = origin;
    h->size = size;
    return (char *)origin + HC_HEADER;
}

static void *hc_malloc(void *ctx, size_t size) {
    (void)ctx;
    if (size >= HC_MIN_BYTES) {
        size_t capacity = hc_capacity(size);
        void *data = hc_take(capacity);
        return data ? data : hc_new_large(capacity, 0);
    }
    return hc_small(hc.malloc_(hc.ctx, size + HC_HEADER), size);
}

static void *hc_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    if (elsize && nelem > SIZE_MAX / elsize) return NULL;
    size_t size = nelem * elsize;
    if (size >= HC_MIN_BYTES) {
        size_t capacity = hc_capacity(size);
        void *data = hc_take(capacity);
        if (data) {
            memset(data, 0, size);
            return data;
        }
        return hc_new_large(capacity, 1); /* the system's zero pages, faulted in lazily */
    }
    return hc_small(hc.calloc_(hc.ctx, 1, size + HC_HEADER), size);
}

static void hc_free(void *ctx, void *data, size_t size) {
    (void)ctx; (void)size; /* the header says what the block is */
    if (!data) return;
    hc_header *h = hc_header_of(data);
    if (h->size & HC_LARGE) hc_give_back(data);
    else hc.free_(hc.ctx, h->origin, h->size + HC_HEADER);
}

static void *hc_realloc(void *ctx, void *data, size_t new_size) {
    if (!data) return hc_malloc(ctx, new_size);
    hc_header *h = hc_header_of(data);
    size_t old_size = h->size & ~HC_LARGE;
    if ((h->size & HC_LARGE) && new_size <= old_size && new_size >= HC_MIN_BYTES / 2)
        return data; /* shrinking a large block in place, as realloc may */
    void *fresh = hc_malloc(ctx, new_size);
    if (!fresh) return NULL;
    memcpy(fresh, data, new_size < old_size ? new_size : old_size);
    hc_free(ctx, data, 0);
    return fresh;
}

#endif
