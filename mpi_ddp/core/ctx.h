/* ctx.h — the launch context shared by the library's modules: communicators, topology, device. */
#ifndef DDP_CTX_H
#define DDP_CTX_H

#include "mpiddp.h"

#include <mpi.h>

/* What the launcher says about this process (filled by slurm/env.c from PMIx, SLURM_* and OMPI_*). */
typedef struct {
    char source[16];         /* "pmix", "slurm", "ompi", "none" */
    char job_id[64];
    char array_job_id[32], array_task_id[32];
    int rank, size;          /* -1 when unknown */
    int local_rank, node_id, num_nodes;
    int cpus_per_task;       /* -1 when unknown */
    int restart_count;       /* SLURM_RESTART_COUNT, 0 when absent */
} ddp_jobfacts;

struct ddp_ctx {
    MPI_Comm world;   /* dup of MPI_COMM_WORLD, errors return */
    MPI_Comm local;   /* ranks sharing this node */
    ddp_topology topo;
    ddp_jobfacts facts;
    int owns_mpi;     /* ddp_init called MPI_Init */
    ddp_device device;
    int cuda_device;
    void *nccl;       /* ncclComm_t on CUDA builds once bootstrapped; NULL again after an abort */
    double nccl_init_timeout; /* seconds (the trainer sets --collective-timeout); 0: 300 */
    struct ddp_backend *backends[3]; /* by ddp_device, created on first use */
    /* watchdog (watchdog.c) */
    double coll_timeout;
    int watch_fd;
    char watch_dir[4200];
    int64_t watch_step;
    char watch_phase[48];
};

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
