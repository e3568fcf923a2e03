/* emu_runtime.c — the emulated CUDA runtime's core (see emu_cuda.h): knobs, error state, devices, streams as worker
 * threads with FIFO queues, events, the counters; device memory and copies are emu_memasync.c's. */
#include "emu_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ knobs, errors */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static long g_ndev, g_jitter_us, g_fail_driver, g_fail_stream_at, g_streams_made, g_fail_malloc_async_at,
    g_mallocs_async_made;
static unsigned long g_seed;

long ddp_emu_env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end ? dflt : x;
}

static ddp_emu_counters g_stats;
static void print_stats(void)
{
    fprintf(stderr,
            "cuda-emu: pid %d: %lld kernel launches, %lld host synchronisations, %lld H2D copies (%lld bytes), %lld "
            "D2H copies (%lld bytes)\n",
            (int)getpid(), g_stats.launches, g_stats.host_syncs, g_stats.memcpy_h2d, g_stats.bytes_h2d,
            g_stats.memcpy_d2h, g_stats.bytes_d2h);
}

static void init_knobs(void)
{
    if (ddp_emu_env_long("MPIDDP_EMU_STATS", 0) > 0) atexit(print_stats);
    g_ndev = ddp_emu_env_long("MPIDDP_EMU_DEVICES", 1);
    g_jitter_us = ddp_emu_env_long("MPIDDP_EMU_JITTER_US", 0);
    g_seed = (unsigned long)ddp_emu_env_long("MPIDDP_EMU_SEED", (long)time(NULL));
    const char *f = getenv("MPIDDP_EMU_FAIL");
    g_fail_driver = f && !strcmp(f, "driver");
    if (f && !strncmp(f, "stream_create:", 14)) g_fail_stream_at = strtol(f + 14, NULL, 10);
    if (f && !strncmp(f, "malloc_async:", 13)) g_fail_malloc_async_at = strtol(f + 13, NULL, 10);
}

static __thread cudaError_t t_last;
static __thread int t_dev;
/* one mutex and one condition variable guard all stream state: the emulator is for correctness, not speed */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static cudaError_t g_sticky;
static char g_fault[512];

static cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess) t_last = e;
    return e;
}
#define ENTER()                                                      \
    do {                                                             \
        pthread_once(&g_once, init_knobs);                           \
        if (g_fail_driver) return fail(cudaErrorInsufficientDriver); \
    } while (0)

static void fault(const char *fmt, const char *name)
{
    pthread_mutex_lock(&g_mu);
    if (g_sticky == cudaSuccess) {
        g_sticky = cudaErrorLaunchFailure;
        snprintf(g_fault, sizeof g_fault, fmt, name);
    }
    pthread_mutex_unlock(&g_mu);
}

const char *ddp_emu_last_fault(void) { return g_fault; }
int ddp_emu_is_emulated(void) { return 1; }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last; }

/* ------------------------------------------------------------------ devices */
cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 0;
    ENTER();
    if (g_ndev <= 0) return fail(cudaErrorNoDevice);
    *count = (int)g_ndev;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev)
{
    ENTER();
    if (dev < 0 || dev >= g_ndev) return fail(cudaErrorInvalidDevice);
    t_dev = dev;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev)
{
    ENTER();
    *dev = t_dev;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    ENTER();
    if (dev < 0 || dev >= g_ndev) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "mpiddp CUDA emulator (host CPU)");
    p->major = 9, p->minor = 0;
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->maxThreadsPerBlock = 1024;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v)
{
    pthread_once(&g_once, init_knobs);
    *v = g_fail_driver ? 12000 : 13000;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ streams and events */
typedef struct op {
    void (*fn)(void *);
    void *arg;
    void (*free_arg)(void *);
    int nwait;
    struct ddp_emu_stream *wait_s[8];
    long long wait_seq[8];
    struct op *next;
} op;

struct ddp_emu_stream {
    pthread_t th;
    unsigned flags;
    int legacy, stop;
    op *head, *tail;
    long long enq, done; /* operations queued so far, operations finished so far */
    unsigned rng;
    struct ddp_emu_stream *next_all;
};
struct ddp_emu_event {
    struct ddp_emu_stream *s; /* NULL: never recorded */
    long long seq;
    double t;    /* host clock (s) when the stream reached the last record (cudaEventElapsedTime) */
    int pending; /* record operations not yet run: the last frees a destroyed event */
    int dead;    /* destroyed while records were pending */
};

static struct ddp_emu_stream *g_streams; /* every live stream, for device synchronisation */
static struct ddp_emu_stream *g_legacy;
static pthread_once_t g_legacy_once = PTHREAD_ONCE_INIT;

static void jitter(struct ddp_emu_stream *s)
{
    if (g_jitter_us <= 0) return;
    long us = (long)(rand_r(&s->rng) % (unsigned)(g_jitter_us + 1));
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void *worker(void *arg)
{
    struct ddp_emu_stream *s = arg;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&g_cv, &g_mu);
        if (!s->head) break;
        op *o = s->head;
        for (int i = 0; i < o->nwait; i++) /* event waits and the legacy stream's implicit ordering */
            while (o->wait_s[i]->done < o->wait_seq[i]) pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
        jitter(s);
        if (o->fn) o->fn(o->arg);
        if (o->free_arg) o->free_arg(o->arg);
        pthread_mutex_lock(&g_mu);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        free(o);
        pthread_cond_broadcast(&g_cv);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static cudaError_t stream_new(struct ddp_emu_stream **out, unsigned flags, int legacy)
{
    struct ddp_emu_stream *s = calloc(1, sizeof *s);
    if (!s) return cudaErrorMemoryAllocation;
    s->flags = flags;
    s->legacy = legacy;
    s->rng = (unsigned)(g_seed ^ (uintptr_t)s);
    if (pthread_create(&s->th, NULL, worker, s) != 0) {
        free(s);
        return cudaErrorMemoryAllocation;
    }
    pthread_mutex_lock(&g_mu);
    s->next_all = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    *out = s;
    return cudaSuccess;
}

static void make_legacy(void)
{
    if (stream_new(&g_legacy, 0, 1) != cudaSuccess) g_legacy = NULL;
}

static struct ddp_emu_stream *resolve(cudaStream_t s)
{
    if (s == NULL || s == cudaStreamLegacy) {
        pthread_once(&g_legacy_once, make_legacy);
        return g_legacy;
    }
    return s;
}

/* Queues an operation; returns its sequence number (done >= seq once it ran). Called with g_mu held. */
static long long push(struct ddp_emu_stream *s, op *o)
{
    /* the legacy stream and blocking streams are ordered with each other (not with non-blocking ones) */
    for (struct ddp_emu_stream *t = g_streams; t && o->nwait < 8; t = t->next_all) {
        int order = s->legacy ? (!t->legacy && !(t->flags & cudaStreamNonBlocking))
                              : (!(s->flags & cudaStreamNonBlocking) && t->legacy);
        if (order && t != s && t->enq > t->done) {
            o->wait_s[o->nwait] = t;
            o->wait_seq[o->nwait++] = t->enq;
        }
    }
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&g_cv);
    return ++s->enq;
}

static cudaError_t wait_seq(struct ddp_emu_stream *s, long long seq)
{
    pthread_mutex_lock(&g_mu);
    while (s->done < seq) pthread_cond_wait(&g_cv, &g_mu);
    g_stats.host_syncs++;
    cudaError_t e = g_sticky;
    pthread_mutex_unlock(&g_mu);
    return fail(e);
}

/* Queues fn(arg) on stream (free_arg(arg) after it ran); with wait, the host then waits for it (a host
 * synchronisation, as cudaMemcpy's). */
static cudaError_t enqueue(cudaStream_t stream, void (*fn)(void *), void *arg, void (*free_arg)(void *), int wait)
{
    struct ddp_emu_stream *s = resolve(stream);
    op *o = calloc(1, sizeof *o);
    if (!s || !o) {
        free(o);
        if (free_arg) free_arg(arg);
        return fail(cudaErrorMemoryAllocation);
    }
    o->fn = fn, o->arg = arg, o->free_arg = free_arg;
    pthread_mutex_lock(&g_mu);
    long long seq = push(s, o);
    pthread_mutex_unlock(&g_mu);
    return wait ? wait_seq(s, seq) : cudaSuccess;
}
cudaError_t ddp_emu_enqueue(cudaStream_t stream, void (*fn)(void *), void *arg, void (*free_arg)(void *))
{
    return enqueue(stream, fn, arg, free_arg, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    ENTER();
    if (g_fail_stream_at > 0 && __atomic_add_fetch(&g_streams_made, 1, __ATOMIC_SEQ_CST) == g_fail_stream_at)
        return fail(cudaErrorMemoryAllocation); /* MPIDDP_EMU_FAIL=stream_create:K: the K-th stream creation */
    return fail(stream_new(s, flags, 0));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER();
    struct ddp_emu_stream *s = resolve(stream);
    pthread_mutex_lock(&g_mu);
    long long seq = s->enq;
    pthread_mutex_unlock(&g_mu);
    return wait_seq(s, seq);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER();
    struct ddp_emu_stream *s = resolve(stream);
    pthread_mutex_lock(&g_mu);
    cudaError_t e = g_sticky != cudaSuccess ? g_sticky : s->done < s->enq ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&g_mu);
    return e == cudaErrorNotReady ? e : fail(e);
}

cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    pthread_mutex_lock(&g_mu);
    for (struct ddp_emu_stream *t = g_streams; t; t = t->next_all)
        while (t->done < t->enq) pthread_cond_wait(&g_cv, &g_mu);
    g_stats.host_syncs++;
    cudaError_t e = g_sticky;
    pthread_mutex_unlock(&g_mu);
    return fail(e);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER();
    struct ddp_emu_stream *s = stream;
    if (!s || s == cudaStreamLegacy) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&g_mu);
    while (s->done < s->enq) pthread_cond_wait(&g_cv, &g_mu);
    s->stop = 1;
    pthread_cond_broadcast(&g_cv);
    for (struct ddp_emu_stream **pp = &g_streams; *pp; pp = &(*pp)->next_all)
        if (*pp == s) {
            *pp = s->next_all;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    pthread_join(s->th, NULL);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    ENTER();
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e) return cudaSuccess;
    pthread_mutex_lock(&g_mu);
    int later = e->pending > 0; /* as on a GPU, destroying never waits: the last pending record frees it */
    e->dead = later;
    pthread_mutex_unlock(&g_mu);
    if (!later) free(e);
    return cudaSuccess;
}
/* A record is an operation of its stream that stamps the host clock into the event when the stream reaches it
 * (the last record's stamp wins, as on a GPU); the event is complete once that operation ran. */
typedef struct {
    cudaEvent_t e;
    struct ddp_emu_stream *s;
    long long seq;
} stamp_args;
static void run_stamp(void *a)
{
    stamp_args *st = a;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&g_mu);
    if (st->e->s == st->s && st->e->seq == st->seq) st->e->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    int gone = !--st->e->pending && st->e->dead;
    pthread_mutex_unlock(&g_mu);
    if (gone) free(st->e);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
    ENTER();
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    struct ddp_emu_stream *s = resolve(stream);
    op *o = calloc(1, sizeof *o);
    stamp_args *a = calloc(1, sizeof *a);
    if (!o || !a) {
        free(o);
        free(a);
        return fail(cudaErrorMemoryAllocation);
    }
    o->fn = run_stamp, o->arg = a, o->free_arg = free;
    pthread_mutex_lock(&g_mu);
    e->s = s;
    e->seq = s->enq + 1; /* complete once everything queued on s so far, and the stamp, have run */
    e->pending++;
    *a = (stamp_args){.e = e, .s = s, .seq = e->seq};
    push(s, o);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER();
    if (!ms || !start || !end) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_mu);
    cudaError_t r = !start->s || !end->s                                     ? cudaErrorInvalidResourceHandle
                    : start->s->done < start->seq || end->s->done < end->seq ? cudaErrorNotReady
                                                                             : cudaSuccess;
    if (r == cudaSuccess) *ms = (float)((end->t - start->t) * 1e3);
    pthread_mutex_unlock(&g_mu);
    return r == cudaErrorNotReady ? r : fail(r);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags)
{
    (void)flags;
    ENTER();
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    struct ddp_emu_stream *s = resolve(stream);
    op *o = calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g_mu);
    if (e->s) { /* never recorded: nothing to wait for */
        o->wait_s[0] = e->s;
        o->wait_seq[0] = e->seq;
        o->nwait = 1;
    }
    push(s, o);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    ENTER();
    pthread_mutex_lock(&g_mu);
    int done = !e->s || e->s->done >= e->seq;
    pthread_mutex_unlock(&g_mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    ENTER();
    return e->s ? wait_seq(e->s, e->seq) : cudaSuccess;
}

void ddp_emu_stats(ddp_emu_counters *out)
{
    pthread_mutex_lock(&g_mu);
    *out = g_stats;
    pthread_mutex_unlock(&g_mu);
}
void ddp_emu_reset_stats(void)
{
    pthread_mutex_lock(&g_mu);
    memset(&g_stats, 0, sizeof g_stats);
    pthread_mutex_unlock(&g_mu);
}

/* for emu_launch.c and emu_memasync.c */
cudaError_t ddp_emu__fail(cudaError_t e) { return fail(e); }
void ddp_emu__fault(const char *fmt, const char *name) { fault(fmt, name); }
void ddp_emu__count_launch(void)
{
    pthread_mutex_lock(&g_mu);
    g_stats.launches++;
    pthread_mutex_unlock(&g_mu);
}
/* a copy of n bytes, by where its ends are (dd: the destination is device memory, sd: the source) */
void ddp_emu__count_copy(int dd, int sd, size_t n)
{
    pthread_mutex_lock(&g_mu);
    if (dd && !sd)
        g_stats.memcpy_h2d++, g_stats.bytes_h2d += (long long)n;
    else if (sd && !dd)
        g_stats.memcpy_d2h++, g_stats.bytes_d2h += (long long)n;
    else if (sd && dd)
        g_stats.memcpy_d2d++;
    pthread_mutex_unlock(&g_mu);
}
/* ddp_emu_enqueue on the legacy stream, then the host waits for the operation (cudaMemcpy) */
cudaError_t ddp_emu__enqueue_wait(void (*fn)(void *), void *arg, void (*free_arg)(void *))
{
    return enqueue(NULL, fn, arg, free_arg, 1);
}
int ddp_emu__enter(void)
{
    pthread_once(&g_once, init_knobs);
    return g_fail_driver ? 0 : 1;
}

/* MPIDDP_EMU_FAIL=malloc_async:K: 1 for the K-th cudaMallocAsync of the process (emu_memasync.c), which then fails */
int ddp_emu__fail_malloc_async(void)
{
    pthread_once(&g_once, init_knobs);
    return g_fail_malloc_async_at > 0 &&
           __atomic_add_fetch(&g_mallocs_async_made, 1, __ATOMIC_SEQ_CST) == g_fail_malloc_async_at;
}
