/* comm_nccl.c — the NCCL communicator over the world communicator: rank 0 makes the ncclUniqueId, MPI
 * broadcasts it, every rank joins on its GPU (local rank). Calls go through the CUDA plugin. */
#include "ctx.h"
#include "cuda_api.h"
#include "status.h"

ddp_status ddp_nccl_init(ddp_ctx *c)
{
    if (c->nccl) return DDP_OK;
    const ddp_cuda_api *cu = ddp_cuda();
    if (!cu) return ddp_set_error(DDP_ERR_NCCL, "NCCL: CUDA plugin unavailable: %s", ddp_cuda_why());
    unsigned char id[DDP_NCCL_ID_BYTES] = {0};
    ddp_status st = c->topo.rank == 0 ? cu->nccl_unique_id(id) : DDP_OK;
    DDP_CHECK(ddp_agree_status(c, st));
    MPI_CHECK(MPI_Bcast(id, DDP_NCCL_ID_BYTES, MPI_BYTE, 0, c->world));
    return cu->nccl_init(&c->nccl, c->topo.size, id, c->topo.rank, c->cuda_device);
}

void ddp_nccl_destroy(ddp_ctx *c)
{
    if (c->nccl && ddp_cuda()) ddp_cuda()->nccl_destroy(c->nccl);
    c->nccl = NULL;
}

ddp_status ddp_nccl_allreduce_sum(ddp_ctx *c, float *buf, int64_t count, void *stream)
{
    return ddp_cuda()->nccl_allreduce_sum(c->nccl, buf, count, stream);
}
