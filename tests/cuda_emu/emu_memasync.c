/* emu_memasync.c — the emulated runtime's memory (see emu_cuda.h): tracked device allocations, NaN-filled, pinned
 * host memory, the stream-ordered allocator, and copies and memsets as operations of their streams (emu_runtime.c). */
#include "emu_cuda.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* emu_runtime.c's */
cudaError_t ddp_emu__fail(cudaError_t e);
void ddp_emu__fault(const char *fmt, const char *name);
int ddp_emu__enter(void);
int ddp_emu__fail_malloc_async(void);
void ddp_emu__count_copy(int dd, int sd, size_t n);
cudaError_t ddp_emu__enqueue_wait(void (*fn)(void *), void *arg, void (*free_arg)(void *));

#define ENTER()                                                                   \
    do {                                                                          \
        if (!ddp_emu__enter()) return ddp_emu__fail(cudaErrorInsufficientDriver); \
    } while (0)

/* ------------------------------------------------------------------ device memory */
typedef struct {
    char *p;
    size_t n;
} alloc_rec;
static pthread_mutex_t g_alloc_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the table of live allocations */
static alloc_rec *g_allocs;
static size_t g_nallocs, g_capallocs;

int ddp_emu_is_device_ptr(const void *p, size_t bytes)
{
    const char *c = p;
    int ok = 0;
    pthread_mutex_lock(&g_alloc_mu);
    for (size_t i = 0; i < g_nallocs && !ok; i++) ok = c >= g_allocs[i].p && c + bytes <= g_allocs[i].p + g_allocs[i].n;
    pthread_mutex_unlock(&g_alloc_mu);
    return ok;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    ENTER();
    size_t n = bytes ? bytes : 1;
    void *m = NULL;
    if (posix_memalign(&m, 256, (n + 255) & ~(size_t)255) != 0) return ddp_emu__fail(cudaErrorMemoryAllocation);
    memset(m, 0xff, n); /* uninitialised device memory: NaN until written */
    pthread_mutex_lock(&g_alloc_mu);
    if (g_nallocs == g_capallocs) {
        size_t cap = g_capallocs ? 2 * g_capallocs : 64;
        alloc_rec *r = realloc(g_allocs, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&g_alloc_mu);
            free(m);
            return ddp_emu__fail(cudaErrorMemoryAllocation);
        }
        g_allocs = r, g_capallocs = cap;
    }
    g_allocs[g_nallocs++] = (alloc_rec){m, n};
    pthread_mutex_unlock(&g_alloc_mu);
    *p = m;
    return cudaSuccess;
}

/* Forgets and frees the allocation that starts at p, at once (cudaFree after its wait; cudaFreeAsync's stream
 * operation). */
static cudaError_t free_now(void *p)
{
    pthread_mutex_lock(&g_alloc_mu);
    size_t i = 0;
    while (i < g_nallocs && g_allocs[i].p != p) i++;
    if (i == g_nallocs) {
        pthread_mutex_unlock(&g_alloc_mu);
        return ddp_emu__fail(cudaErrorInvalidDevicePointer);
    }
    g_allocs[i] = g_allocs[--g_nallocs];
    pthread_mutex_unlock(&g_alloc_mu);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    ENTER();
    if (!p) return cudaSuccess;
    cudaDeviceSynchronize(); /* as on a GPU: cudaFree waits for the device */
    return free_now(p);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    ENTER();
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return ddp_emu__fail(cudaErrorMemoryAllocation);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

/* The stream-ordered allocator (cudaMallocAsync, cudaFreeAsync): an allocation is usable at once (host memory is), and
 * a free is an operation of its stream, run after the work queued before it, so it neither waits for the device nor
 * frees memory a queued kernel reads. */
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
    (void)s;                            /* memory usable at once is usable in stream order */
    if (ddp_emu__fail_malloc_async()) { /* MPIDDP_EMU_FAIL=malloc_async:K */
        *p = NULL;
        return ddp_emu__fail(cudaErrorMemoryAllocation);
    }
    return cudaMalloc(p, bytes);
}

static void free_op(void *p)
{
    if (free_now(p) != cudaSuccess) ddp_emu__fault("%s: not the start of a device allocation", "cudaFreeAsync");
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    if (!p) return cudaSuccess;
    if (!ddp_emu_is_device_ptr(p, 1)) return cudaErrorInvalidDevicePointer;
    return ddp_emu_enqueue(s, free_op, p, NULL);
}

/* ------------------------------------------------------------------ copies */
typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int value, set;
} copy_args;
static void run_copy(void *a)
{
    copy_args *c = a;
    if (c->set)
        memset(c->dst, c->value, c->n);
    else
        memmove(c->dst, c->src, c->n);
}

static cudaError_t check_kind(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    int dd = ddp_emu_is_device_ptr(dst, n), sd = ddp_emu_is_device_ptr(src, n);
    switch (kind) {
    case cudaMemcpyHostToDevice: return dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return sd && !dd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return dd && sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost: return !dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    }
    return cudaErrorInvalidMemcpyDirection;
}

/* A copy (or, with set, a memset) queued on stream s; with wait (cudaMemcpy: s is the legacy stream) the host waits
 * for it. */
static cudaError_t enqueue_copy(cudaStream_t s, void *dst, const void *src, size_t n, int value, int set, int wait)
{
    copy_args *c = malloc(sizeof *c);
    if (!c) return ddp_emu__fail(cudaErrorMemoryAllocation);
    *c = (copy_args){dst, src, n, value, set};
    return wait ? ddp_emu__enqueue_wait(run_copy, c, free) : ddp_emu_enqueue(s, run_copy, c, free);
}

static void count_copy(const void *dst, const void *src, size_t n)
{
    ddp_emu__count_copy(ddp_emu_is_device_ptr(dst, n), ddp_emu_is_device_ptr(src, n), n);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    ENTER();
    if (!n) return cudaSuccess;
    cudaError_t e = check_kind(dst, src, n, kind);
    if (e != cudaSuccess) return ddp_emu__fail(e);
    count_copy(dst, src, n);
    return enqueue_copy(s, dst, src, n, 0, 0, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    ENTER();
    if (!n) return cudaSuccess;
    cudaError_t e = check_kind(dst, src, n, kind);
    if (e != cudaSuccess) return ddp_emu__fail(e);
    count_copy(dst, src, n);
    return enqueue_copy(NULL, dst, src, n, 0, 0, 1);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    ENTER();
    if (!n) return cudaSuccess;
    if (!ddp_emu_is_device_ptr(p, n)) return ddp_emu__fail(cudaErrorInvalidValue);
    return enqueue_copy(s, p, NULL, n, value, 1, 0);
}

cudaError_t cudaMemset(void *p, int value, size_t n) /* on the legacy stream, and it does not wait */
{
    return cudaMemsetAsync(p, value, n, NULL);
}
