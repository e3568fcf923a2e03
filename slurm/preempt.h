/* preempt.h — what a stopped run does under SLURM: after every rank has saved last.h5, rank 0 requeues the job
 * with scontrol (array-aware) when the stop was the time-limit warning and the job is a batch job; the requeued job
 * resumes with --resume auto. A stop that asked to end the job (SIGTERM: scancel, preemption; SIGINT) is not
 * requeued. */
#ifndef DDP_SLURM_PREEMPT_H
#define DDP_SLURM_PREEMPT_H

#include "mpiddp.h"

typedef enum {
    DDP_REQUEUE_NOT_SLURM = 0,
    DDP_REQUEUE_DONE,
    DDP_REQUEUE_DISABLED,
    DDP_REQUEUE_FAILED,
    DDP_REQUEUE_NO_SCONTROL,
    DDP_REQUEUE_NOT_WANTED, /* the stop asked to end the job (DDP_STOP_END among its kinds) */
    DDP_REQUEUE_NOT_BATCH,  /* an interactive job (srun or salloc, not sbatch): Slurm cannot requeue it */
    DDP_REQUEUE_DECLINED    /* the requeued attempt would be refused (requeued NULL): not requeued, an error */
} ddp_requeue;

/* The size of ddp_slurm_requeue's msg. */
#define DDP_REQUEUE_MSG 1024

/* Collective, after a stop whose agreed kinds (DDP_STOP_* bits) are `kinds`: rank 0 runs `scontrol requeue <job>`
 * when the stop asked only for a requeue (DDP_STOP_REQUEUE) inside a SLURM batch job (ENVIRONMENT=BATCH, or else
 * `scontrol show job`'s BatchFlag=1; MPIDDP_REQUEUE=0 disables); every rank returns the same outcome; msg
 * (DDP_REQUEUE_MSG bytes) says what happened, ending with rank 0's phrase for what the requeued job starts from
 * (requeued: "it resumes from last.h5") or, when the requeue failed or the job is interactive, what to do instead
 * (resubmit: "resubmit it, it resumes from last.h5"; said "run it again, ..." of an interactive job); the caller knows
 * the job's arguments, which decide both. requeued NULL (on rank 0): the requeued attempt would be refused, so a
 * requeue that would run is not made (DDP_REQUEUE_DECLINED; msg ends with resubmit). */
ddp_status ddp_slurm_requeue(ddp_ctx *ctx, int kinds, const char *requeued, const char *resubmit, ddp_requeue *out,
                             char *msg);

#endif
