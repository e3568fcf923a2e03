/* cuda_plugin.c — the GPU plugin's entry point (ddp_cuda_plugin_api) and its api table: device facts, versions,
 * NCCL (unique id, non-blocking init, polling, abort, allreduce), the stream/event calls gradient sync needs, and
 * the backend's creation and counters. The plugin's top file: it calls backend_cuda.cu and backend_cuda_state.c. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/backend_cuda_state.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/backend/cuda/cudnn_sdpa.h"
#include "mpi_ddp/core/status.h"

#include "mpi_ddp/backend/cuda/cuda_compat.h"
#include "mpi_ddp/backend/cuda/cuda_checks.h"

#include <stdio.h>
#include <string.h>

/* backend_cuda.cu */
ddp_status ddp_cuda_backend_create_impl(int device, ddp_backend **out);
void *ddp_cuda_backend_stream_impl(ddp_backend *b);


static int device_count(char *err, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (n) err[0] = 0;
    if (e == cudaErrorNoDevice) { /* a machine without a GPU: no devices, not an error */
        cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess) { /* driver too old, driver not loaded, ...: keep CUDA's own words */
        snprintf(err, n, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();
        return -1;
    }
    return count;
}

static void device_name(int dev, char *buf, size_t n)
{
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, n, "unknown (%s)", cudaGetErrorString(e));
        return;
    }
    snprintf(buf, n, "%s (cc %d.%d)", p.name, p.major, p.minor);
}

static int compute_capability(int dev)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 10 * p.major + p.minor;
}

static void version_string(char *buf, size_t n)
{
    int rt = 0, drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cudaGetLastError();
    if (drv == 0) /* a plugin, but no driver on this node: the same word run.json uses */
        snprintf(buf, n, "not available (no driver; %sruntime %d.%d)", DDP_CUDA_EMULATED ? "emulated " : "", rt / 1000,
                 (rt % 1000) / 10);
    else
        snprintf(buf, n, "%sruntime %d.%d driver %d.%d", DDP_CUDA_EMULATED ? "emulated " : "", rt / 1000,
                 (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
}

static void nccl_version_string(char *buf, size_t n)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    snprintf(buf, n, "%s%d.%d.%d", DDP_CUDA_EMULATED ? "emulated " : "", v / 10000, (v / 100) % 100, v % 100);
}

static void cudnn_version_string(char *buf, size_t n)
{
#ifdef DDP_HAVE_CUDNN
    ddp_sdpa_describe(buf, n); /* cudnn_sdpa.c */
#else
    snprintf(buf, n, "unavailable: the plugin was built without cuDNN's headers");
#endif
}

static ddp_status nccl_unique_id(void *id)
{
    _Static_assert(sizeof(ncclUniqueId) <= DDP_NCCL_ID_BYTES, "ncclUniqueId larger than expected");
    ncclUniqueId u;
    NCCL_CHECK(ncclGetUniqueId(&u));
    memset(id, 0, DDP_NCCL_ID_BYTES);
    memcpy(id, &u, sizeof u);
    return DDP_OK;
}

/* Non-blocking init: a peer that never joins (its own init failed, it died) cannot hang this rank; the
 * caller polls nccl_poll against a deadline and aborts. */
static ddp_status nccl_init_start(void **comm, int nranks, const void *id, int rank, int dev)
{
    *comm = NULL;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    CUDA_CHECK(cudaSetDevice(dev));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, u, rank, &cfg);
    *comm = c;
    if (r != ncclSuccess && r != ncclInProgress)
        return ddp_set_error(DDP_ERR_NCCL, "NCCL error in ncclCommInitRankConfig (rank %d of %d, device %d): %s%s%s",
                             rank, nranks, dev, ncclGetErrorString(r), c ? ": " : "", c ? ncclGetLastError(c) : "");
    return DDP_OK;
}

static ddp_status nccl_poll(void *comm, int *busy)
{
    ncclResult_t a = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError((ncclComm_t)comm, &a));
    *busy = a == ncclInProgress;
    if (a != ncclSuccess && a != ncclInProgress)
        return ddp_set_error(DDP_ERR_NCCL, "NCCL asynchronous error: %s (%s)", ncclGetErrorString(a),
                             ncclGetLastError((ncclComm_t)comm));
    return DDP_OK;
}

static void nccl_abort(void *comm)
{
    if (comm) ncclCommAbort((ncclComm_t)comm);
}

static void nccl_destroy(void *comm)
{
    if (comm) ncclCommDestroy((ncclComm_t)comm);
}

static ddp_status nccl_allreduce_sum(void *comm, float *buf, int64_t count, void *stream)
{
    NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, (ncclComm_t)comm, (cudaStream_t)stream));
    return DDP_OK;
}

static ddp_status stream_create(void **s)
{
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *s = st;
    return DDP_OK;
}

static void stream_destroy(void *s)
{
    if (s) cudaStreamDestroy((cudaStream_t)s);
}

static ddp_status stream_query(void *s, int *done)
{
    cudaError_t e = cudaStreamQuery((cudaStream_t)s);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady)
        cudaGetLastError(); /* not an error: still running */
    else
        CUDA_CHECK(e);
    return DDP_OK;
}

static ddp_status event_create(void **e)
{
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *e = ev;
    return DDP_OK;
}

static void event_destroy(void *e)
{
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static ddp_status stream_wait(void *event, void *from, void *to)
{
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)from));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)to, (cudaEvent_t)event, 0));
    return DDP_OK;
}

long long ddp_cuda_backend_host_syncs_impl(void); /* backend_cuda.cu */
static long long host_syncs(void) { return ddp_cuda_backend_host_syncs_impl(); }
static long long launches(void) { return ddp_cuda_backend_launches_impl(); } /* backend_cuda_state.c */
static long long blocks(void) { return ddp_cuda_backend_blocks_impl(); }

#ifdef MPIDDP_COVERAGE /* test builds: counters of a process that ends in MPI_Abort are written first */
void __gcov_dump(void);
__attribute__((visibility("default"))) void ddp_plugin_coverage_flush(void) { __gcov_dump(); }
#endif

static const ddp_cuda_api g_api = {
    .version = DDP_CUDA_API_VERSION,
    .emulated = DDP_CUDA_EMULATED,
    .device_count = device_count,
    .device_name = device_name,
    .compute_capability = compute_capability,
    .version_string = version_string,
    .nccl_version_string = nccl_version_string,
    .cudnn_version_string = cudnn_version_string,
    .backend_create = ddp_cuda_backend_create_impl,
    .backend_stream = ddp_cuda_backend_stream_impl,
    .nccl_unique_id = nccl_unique_id,
    .nccl_init_start = nccl_init_start,
    .nccl_poll = nccl_poll,
    .nccl_abort = nccl_abort,
    .nccl_destroy = nccl_destroy,
    .nccl_allreduce_sum = nccl_allreduce_sum,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_query = stream_query,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .stream_wait = stream_wait,
    .host_syncs = host_syncs,
    .launches = launches,
    .blocks = blocks,
};

const ddp_cuda_api *ddp_cuda_plugin_api(ddp_set_error_fn set_error)
{
    ddp_plugin_set_error = set_error; /* the error slot, backend_cuda_state.c */
    return &g_api;
}
