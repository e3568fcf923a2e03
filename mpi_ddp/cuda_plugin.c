/* cuda_plugin.c — the entry point of libmpiddp_cuda.so: device facts, versions, NCCL (unique id,
 * communicator, allreduce) and the stream/event calls gradient sync needs, each CUDA/NCCL call checked.
 * The backend itself (cuBLAS + kernels) is backend_cuda.cu. */
#include "backend.h"
#include "cuda_api.h"
#include "status.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

ddp_status (*ddp_plugin_set_error)(ddp_status st, const char *fmt, ...);

ddp_status ddp_cuda_backend_create_impl(int device, ddp_backend **out);
void *ddp_cuda_backend_stream_impl(ddp_backend *b);

#define CUDA_OK(call, what)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return ddp_set_error(DDP_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e_)); \
    } while (0)
#define NCCL_OK(call)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return ddp_set_error(DDP_ERR_NCCL, "NCCL error in %s: %s", #call, ncclGetErrorString(r_)); \
    } while (0)

static int device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver / no device: clear the sticky error */
        return 0;
    }
    return n;
}

static void device_name(int dev, char *buf, size_t n)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        if (n) buf[0] = 0;
        return;
    }
    snprintf(buf, n, "%s (cc %d.%d)", p.name, p.major, p.minor);
}

static void version_string(char *buf, size_t n)
{
    int rt = 0, drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cudaGetLastError();
    snprintf(buf, n, "runtime %d.%d driver %d.%d", rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
}

static void nccl_version_string(char *buf, size_t n)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    snprintf(buf, n, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}

static ddp_status nccl_unique_id(void *id)
{
    _Static_assert(sizeof(ncclUniqueId) <= DDP_NCCL_ID_BYTES, "ncclUniqueId larger than expected");
    ncclUniqueId u;
    NCCL_OK(ncclGetUniqueId(&u));
    memset(id, 0, DDP_NCCL_ID_BYTES);
    memcpy(id, &u, sizeof u);
    return DDP_OK;
}

static ddp_status nccl_init(void **comm, int nranks, const void *id, int rank, int dev)
{
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    CUDA_OK(cudaSetDevice(dev), "cudaSetDevice");
    ncclComm_t c;
    NCCL_OK(ncclCommInitRank(&c, nranks, u, rank));
    *comm = c;
    return DDP_OK;
}

static void nccl_destroy(void *comm)
{
    if (comm) ncclCommDestroy((ncclComm_t)comm);
}

static ddp_status nccl_allreduce_sum(void *comm, float *buf, int64_t count, void *stream)
{
    NCCL_OK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, (ncclComm_t)comm, (cudaStream_t)stream));
    return DDP_OK;
}

static ddp_status stream_create(void **s)
{
    cudaStream_t st;
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    *s = st;
    return DDP_OK;
}

static void stream_destroy(void *s)
{
    if (s) cudaStreamDestroy((cudaStream_t)s);
}

static ddp_status event_create(void **e)
{
    cudaEvent_t ev;
    CUDA_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    *e = ev;
    return DDP_OK;
}

static void event_destroy(void *e)
{
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static ddp_status stream_wait(void *event, void *from, void *to)
{
    CUDA_OK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)from), "cudaEventRecord");
    CUDA_OK(cudaStreamWaitEvent((cudaStream_t)to, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
    return DDP_OK;
}

static ddp_status stream_sync(void *s)
{
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
    return DDP_OK;
}

static const ddp_cuda_api g_api = {
    .version = DDP_CUDA_API_VERSION,
    .device_count = device_count,
    .device_name = device_name,
    .version_string = version_string,
    .nccl_version_string = nccl_version_string,
    .backend_create = ddp_cuda_backend_create_impl,
    .backend_stream = ddp_cuda_backend_stream_impl,
    .nccl_unique_id = nccl_unique_id,
    .nccl_init = nccl_init,
    .nccl_destroy = nccl_destroy,
    .nccl_allreduce_sum = nccl_allreduce_sum,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .stream_wait = stream_wait,
    .stream_sync = stream_sync,
};

const ddp_cuda_api *ddp_cuda_plugin_api(ddp_set_error_fn set_error)
{
    ddp_plugin_set_error = set_error;
    return &g_api;
}
