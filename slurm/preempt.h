/* preempt.h — what a preempted (stopped) run does under SLURM: rank 0 requeues the job with scontrol
 * (array-aware) after every rank has saved last.h5; the requeued job resumes with --resume auto. */
#ifndef DDP_SLURM_PREEMPT_H
#define DDP_SLURM_PREEMPT_H

#include "mpiddp.h"

typedef enum {
    DDP_REQUEUE_NOT_SLURM = 0,
    DDP_REQUEUE_DONE,
    DDP_REQUEUE_DISABLED,
    DDP_REQUEUE_FAILED,
    DDP_REQUEUE_NO_SCONTROL
} ddp_requeue;

/* Collective: rank 0 runs `scontrol requeue <job>` when inside a SLURM job (MPIDDP_REQUEUE=0 disables);
 * every rank returns the same outcome; msg (256 bytes) says what happened. */
ddp_status ddp_slurm_requeue(ddp_ctx *ctx, ddp_requeue *out, char *msg);

#endif
