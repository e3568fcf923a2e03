/* emu_nccl.c — the emulated NCCL subset (see emu_cuda.h) over POSIX shared memory between the processes
 * of one machine. The unique id names a segment (/dev/shm/mpiddp-emu-<hex>): every rank maps it, writes its
 * host and device into its slot and meets the others at a barrier; two ranks on one device of one host are
 * refused as real NCCL refuses them. ncclAllReduce runs on its stream: each rank copies its chunk into its
 * slot, a barrier, every rank sums the slots in rank order (identical bits everywhere), a barrier. Every
 * wait checks this rank's abort flag and the segment's "a rank aborted" flag, so ncclCommAbort always ends
 * a pending init or allreduce. Non-blocking init runs in a thread; fault injection: MPIDDP_EMU_NCCL_FAULT. */
#include "emu_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SLOT (1 << 20) /* bytes per rank per chunk */

typedef struct {
    char host[64];
    int dev, present;
} rank_info;

typedef struct {
    atomic_int count, gen, aborted;
    rank_info info[];
} shm_head;

struct ddp_emu_comm {
    int nranks, rank, dev, blocking;
    char name[64];
    shm_head *h;
    size_t bytes;
    char *slots;
    atomic_int abort_flag;
    _Atomic ncclResult_t async;
    pthread_t init_th;
    int init_th_live;
    long long nops; /* allreduces executed (fault injection) */
    char err[256];
};

static __thread char t_err[256];

ncclResult_t ncclGetVersion(int *v)
{
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) { return comm && comm->err[0] ? comm->err : t_err; }

static ncclResult_t set_err(ncclComm_t c, ncclResult_t r, const char *msg)
{
    snprintf(c ? c->err : t_err, sizeof t_err, "%s", msg);
    if (c) snprintf(t_err, sizeof t_err, "%s", msg);
    return r;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return set_err(NULL, ncclSystemError, "getrandom failed");
    char *p = id->internal;
    p += snprintf(p, 12, "mpiddp-emu-");
    for (int i = 0; i < 16; i++) p += snprintf(p, 3, "%02x", r[i]);
    return ncclSuccess;
}

/* injected faults: kind 'i' (init fails on rank), 'l' (rank never joins the init), 'h' (allreduce number k hangs
 * on rank) or 'e' (allreduce number k fails on rank, as a lost peer or network error would) */
static int fault_is(char kind, int rank, long long k)
{
    const char *f = getenv("MPIDDP_EMU_NCCL_FAULT");
    int r = -1;
    long long at = 1;
    if (!f) return 0;
    if (kind == 'i' && sscanf(f, "init:%d", &r) == 1) return r == rank;
    if (kind == 'l' && sscanf(f, "initlate:%d", &r) == 1) return r == rank;
    if (kind == 'h' && sscanf(f, "hang:%d:%lld", &r, &at) >= 1) return r == rank && k == at;
    if (kind == 'e' && sscanf(f, "error:%d:%lld", &r, &at) >= 1) return r == rank && k == at;
    return 0;
}

/* 0 when every rank arrived; else the reason this rank stopped waiting */
static ncclResult_t barrier(ncclComm_t c)
{
    shm_head *h = c->h;
    int gen = atomic_load(&h->gen);
    if (atomic_fetch_add(&h->count, 1) == c->nranks - 1) {
        atomic_store(&h->count, 0);
        atomic_fetch_add(&h->gen, 1);
        return ncclSuccess;
    }
    struct timespec ts = {0, 20000};
    while (atomic_load(&h->gen) == gen) {
        if (atomic_load(&c->abort_flag)) return set_err(c, ncclInvalidUsage, "communicator aborted");
        if (atomic_load(&h->aborted)) return set_err(c, ncclRemoteError, "a peer rank aborted the communicator");
        nanosleep(&ts, NULL);
    }
    return ncclSuccess;
}

static ncclResult_t do_init(ncclComm_t c)
{
    char msg[256];
    int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
        snprintf(msg, sizeof msg, "shm_open %s: %s", c->name, strerror(errno));
        return set_err(c, ncclSystemError, msg);
    }
    c->bytes = sizeof(shm_head) + (size_t)c->nranks * sizeof(rank_info) + 64 + (size_t)c->nranks * SLOT;
    if (ftruncate(fd, (off_t)c->bytes) != 0) {
        close(fd);
        return set_err(c, ncclSystemError, "ftruncate of the shared segment failed");
    }
    void *m = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return set_err(c, ncclSystemError, "mmap of the shared segment failed");
    c->h = m;
    c->slots = (char *)m + ((sizeof(shm_head) + (size_t)c->nranks * sizeof(rank_info) + 63) & ~(size_t)63);
    rank_info *me = &c->h->info[c->rank];
    gethostname(me->host, sizeof me->host - 1);
    me->dev = c->dev;
    me->present = 1;
    struct timespec ts = {0, 1000000};
    while (fault_is('l', c->rank, 0)) { /* never joins: every rank's init waits until it is aborted */
        if (atomic_load(&c->abort_flag)) return set_err(c, ncclInvalidUsage, "communicator aborted");
        nanosleep(&ts, NULL);
    }
    ncclResult_t r = barrier(c);
    if (r != ncclSuccess) return r;
    if (c->rank == 0) shm_unlink(c->name); /* everybody has it mapped */
    for (int a = 0; a < c->nranks; a++)
        for (int b = a + 1; b < c->nranks; b++)
            if (c->h->info[a].dev == c->h->info[b].dev && !strcmp(c->h->info[a].host, c->h->info[b].host)) {
                snprintf(msg, sizeof msg,
                         "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d of host %s", a, b,
                         c->h->info[a].dev, c->h->info[a].host);
                return set_err(c, ncclInvalidUsage, msg);
            }
    return ncclSuccess;
}

static void *init_thread(void *p)
{
    ncclComm_t c = p;
    atomic_store(&c->async, do_init(c));
    return NULL;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return set_err(NULL, ncclInvalidArgument, "invalid rank or rank count");
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return set_err(NULL, ncclSystemError, "out of memory");
    c->nranks = nranks, c->rank = rank, c->blocking = config ? config->blocking : 1;
    if (cudaGetDevice(&c->dev) != cudaSuccess) c->dev = 0;
    snprintf(c->name, sizeof c->name, "/%.60s", id.internal);
    *comm = c;
    if (fault_is('i', rank, 0)) {
        char msg[96];
        snprintf(msg, sizeof msg, "injected fault: init fails on rank %d (MPIDDP_EMU_NCCL_FAULT)", rank);
        atomic_store(&c->async, ncclSystemError);
        return set_err(c, ncclSystemError, msg);
    }
    if (c->blocking) {
        ncclResult_t r = do_init(c);
        atomic_store(&c->async, r);
        return r;
    }
    atomic_store(&c->async, ncclInProgress);
    if (pthread_create(&c->init_th, NULL, init_thread, c) != 0) {
        atomic_store(&c->async, ncclSystemError);
        return set_err(c, ncclSystemError, "pthread_create failed");
    }
    c->init_th_live = 1;
    return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    return ncclCommInitRankConfig(comm, nranks, id, rank, &cfg);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async)
{
    if (!c) return ncclInvalidArgument;
    ncclResult_t r = atomic_load(&c->async);
    if (r == ncclSuccess && c->h && atomic_load(&c->h->aborted)) r = ncclRemoteError;
    *async = r;
    return ncclSuccess;
}

static void join_init(ncclComm_t c)
{
    if (c->init_th_live) pthread_join(c->init_th, NULL);
    c->init_th_live = 0;
}

/* The communicator is not freed: a stream may still be leaving a pending allreduce of it. */
ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c) return ncclSuccess;
    atomic_store(&c->abort_flag, 1);
    if (c->h) atomic_store(&c->h->aborted, 1);
    join_init(c);
    if (c->h) atomic_store(&c->h->aborted, 1); /* the init thread may have mapped it meanwhile */
    shm_unlink(c->name);
    if (atomic_load(&c->async) == ncclSuccess || atomic_load(&c->async) == ncclInProgress)
        atomic_store(&c->async, ncclInvalidUsage);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    if (!c) return ncclInvalidArgument;
    join_init(c);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c) return ncclSuccess;
    join_init(c);
    if (c->h) munmap(c->h, c->bytes);
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t c, int *n)
{
    *n = c->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(ncclComm_t c, int *r)
{
    *r = c->rank;
    return ncclSuccess;
}

typedef struct {
    ncclComm_t c;
    const char *send;
    char *recv;
    size_t count, esize;
    int dbl;
} ar_args;

static void run_allreduce(void *p)
{
    ar_args *a = p;
    ncclComm_t c = a->c;
    if (atomic_load(&c->async) != ncclSuccess) return;
    long long op = ++c->nops;
    if (fault_is('h', c->rank, op)) { /* never completes: waits for an abort */
        struct timespec ts = {0, 1000000};
        while (!atomic_load(&c->abort_flag)) nanosleep(&ts, NULL);
        return;
    }
    if (fault_is('e', c->rank, op)) { /* fails at once, an asynchronous error; the others wait in it */
        char msg[96];
        snprintf(msg, sizeof msg, "injected fault: allreduce %lld fails on rank %d (MPIDDP_EMU_NCCL_FAULT)", op,
                 c->rank);
        set_err(c, ncclSystemError, msg);
        atomic_store(&c->async, ncclSystemError);
        return;
    }
    size_t total = a->count * a->esize, per = SLOT - SLOT % a->esize;
    for (size_t off = 0; off < total; off += per) {
        size_t n = total - off < per ? total - off : per;
        memcpy(c->slots + (size_t)c->rank * SLOT, a->send + off, n);
        ncclResult_t r = barrier(c);
        if (r == ncclSuccess) {
            size_t k = n / a->esize;
            for (size_t i = 0; i < k; i++) {
                if (a->dbl) {
                    double s = 0;
                    for (int q = 0; q < c->nranks; q++) s += ((const double *)(c->slots + (size_t)q * SLOT))[i];
                    ((double *)(a->recv + off))[i] = s;
                } else {
                    float s = 0;
                    for (int q = 0; q < c->nranks; q++) s += ((const float *)(c->slots + (size_t)q * SLOT))[i];
                    ((float *)(a->recv + off))[i] = s;
                }
            }
            r = barrier(c);
        }
        if (r != ncclSuccess) {
            atomic_store(&c->async, r);
            return;
        }
    }
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s)
{
    if (!c) return set_err(NULL, ncclInvalidArgument, "null communicator");
    if (atomic_load(&c->async) != ncclSuccess)
        return set_err(c, ncclInvalidUsage, "communicator not ready (init pending or failed)");
    if (op != ncclSum || (type != ncclFloat && type != ncclDouble))
        return set_err(c, ncclInvalidArgument, "emulator: only float/double sums");
    size_t es = type == ncclDouble ? 8 : 4;
    if (!count) return ncclSuccess;
    if (!ddp_emu_is_device_ptr(send, count * es) || !ddp_emu_is_device_ptr(recv, count * es))
        return set_err(c, ncclInvalidArgument, "buffer is not device memory");
    ar_args *a = malloc(sizeof *a);
    if (!a) return set_err(c, ncclSystemError, "out of memory");
    *a = (ar_args){c, send, recv, count, es, type == ncclDouble};
    return ddp_emu_enqueue(s, run_allreduce, a, free) == cudaSuccess
               ? ncclSuccess
               : set_err(c, ncclUnhandledCudaError, "enqueue failed");
}
