/* comm.h — what comm/ keeps for the context: the compute backends, created on first use, and the NCCL
 * communicator over ctx->world. */
#ifndef DDP_COMM_H
#define DDP_COMM_H

#include "mpi_ddp/core/ctx.h"

/* The shared compute backend for dev (CPU or CUDA), created on first use. */
ddp_status ddp_ctx_backend(ddp_ctx *ctx, ddp_device dev, struct ddp_backend **out);

/* NCCL communicator over ctx->world on ctx->cuda_device; the ncclUniqueId travels by MPI_Bcast. */
ddp_status ddp_nccl_init(ddp_ctx *ctx);
void ddp_nccl_destroy(ddp_ctx *ctx);
/* ncclCommAbort: pending NCCL work returns; the communicator is gone (ctx->nccl = NULL). */
void ddp_nccl_abort(ddp_ctx *ctx);
/* In-place float sum over ctx->nccl on the given cudaStream_t. */
ddp_status ddp_nccl_allreduce_sum(ddp_ctx *ctx, float *buf, int64_t count, void *stream);

#endif
