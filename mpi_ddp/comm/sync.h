/* sync.h — gradient synchronisation: one flat buffer (parameters, then the step's control floats: sample count, stop
 * flag, each rank's rows) in buckets summed across ranks as backward marks them ready: on CPU with MPI_Allreduce
 * (MPI_Iallreduce polled against the collective timeout when one is set), on GPU with NCCL (below). */
#ifndef DDP_SYNC_H
#define DDP_SYNC_H

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"

typedef struct ddp_sync ddp_sync;

/* grads: n_params + n_ctl floats in backend memory. bucket_bytes: bucket size (>= 4). Waits are bounded by
 * the context's collective timeout (watchdog.h). */
ddp_status ddp_sync_create(ddp_ctx *ctx, ddp_backend *be, float *grads, int64_t n_params, int64_t n_ctl,
                           int64_t bucket_bytes, ddp_sync **out);
void ddp_sync_destroy(ddp_sync *s);
/* Begins a step: nothing is launched; the control floats count as ready. */
void ddp_sync_begin(ddp_sync *s);
/* ddp_grad_ready_fn: [lo, hi) of the gradient buffer is final. Launches the buckets now complete. */
void ddp_sync_ready(void *s, int64_t lo, int64_t hi);
/* Launches what is left and waits for every bucket (polled against the collective timeout). where names
 * the step in a timeout report. */
ddp_status ddp_sync_finish(ddp_sync *s, const char *where);
int ddp_sync_num_buckets(const ddp_sync *s);
/* Cumulative seconds spent in blocking allreduce calls (made from ddp_sync_ready during backward on CPU)
 * and in ddp_sync_finish's wait, including waiting for slower ranks: benchmarks subtract it from backward. */
double ddp_sync_comm_seconds(const ddp_sync *s);

/* The NCCL half (sync_nccl.c): a communication stream ordered after the backend's stream by an event,
 * in-place ncclAllReduce per bucket, and waits that poll the stream and the communicator's asynchronous
 * error against the collective timeout, aborting the communicator when it expires. */
typedef struct ddp_sync_nccl ddp_sync_nccl;
ddp_status ddp_sync_nccl_create(ddp_ctx *ctx, ddp_backend *be, ddp_sync_nccl **out);
void ddp_sync_nccl_destroy(ddp_sync_nccl *n);
ddp_status ddp_sync_nccl_launch(ddp_sync_nccl *n, float *buf, int64_t count, const char *where);
ddp_status ddp_sync_nccl_finish(ddp_sync_nccl *n, const char *where);

#endif
