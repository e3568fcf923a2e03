/* comm_nccl.c — NCCL bootstrap (ncclUniqueId broadcast over MPI) and the NCCL allreduce used by
 * gradient sync on CUDA builds; without CUDA these report that NCCL is not built. */
#include "ctx.h"
#include "status.h"

#ifdef DDP_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return ddp_set_error(DDP_ERR_NCCL, "NCCL error in %s (%s:%d): %s", #call, __FILE__,     \
                                 __LINE__, ncclGetErrorString(r_));                                \
    } while (0)

ddp_status ddp_nccl_init(ddp_ctx *c)
{
    if (c->nccl) return DDP_OK;
    ncclUniqueId id;
    if (c->topo.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->world));
    cudaError_t e = cudaSetDevice(c->cuda_device);
    if (e != cudaSuccess)
        return ddp_set_error(DDP_ERR_CUDA, "cudaSetDevice(%d): %s", c->cuda_device, cudaGetErrorString(e));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, c->topo.size, id, c->topo.rank));
    c->nccl = comm;
    return DDP_OK;
}

void ddp_nccl_destroy(ddp_ctx *c)
{
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
}

ddp_status ddp_nccl_allreduce_sum(ddp_ctx *c, float *buf, int64_t count, void *stream)
{
    NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, (ncclComm_t)c->nccl,
                             (cudaStream_t)stream));
    return DDP_OK;
}
#else
ddp_status ddp_nccl_init(ddp_ctx *c)
{
    (void)c;
    return ddp_set_error(DDP_ERR_NCCL, "NCCL: this mpiddp was built without CUDA");
}
void ddp_nccl_destroy(ddp_ctx *c) { (void)c; }
ddp_status ddp_nccl_allreduce_sum(ddp_ctx *c, float *buf, int64_t count, void *stream)
{
    (void)c; (void)buf; (void)count; (void)stream;
    return ddp_set_error(DDP_ERR_NCCL, "NCCL: this mpiddp was built without CUDA");
}
#endif
