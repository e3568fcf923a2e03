/* env.h — job facts from the launcher: PMIx (srun --mpi=pmix, Open MPI's mpirun), SLURM_* and
 * OMPI_* variables; the cross-check of launcher and MPI. */
#ifndef DDP_SLURM_ENV_H
#define DDP_SLURM_ENV_H

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/settings.h" /* ddp_env_plain_int, ddp_blas_threads_from_env */

/* What the launcher says about this process (filled by slurm/env.c from PMIx, SLURM_* and OMPI_*). */
typedef struct ddp_jobfacts {
    char source[16]; /* "pmix", "slurm", "ompi", "none" */
    char job_id[64];
    char array_job_id[32], array_task_id[32];
    int rank, size; /* -1 when unknown */
    int local_rank, node_id, num_nodes;
    int cpus_per_task; /* -1 when unknown */
    int restart_count; /* SLURM_RESTART_COUNT, 0 when absent */
    int batch;         /* ENVIRONMENT=BATCH: Slurm set it for a batch job's script and the steps it starts (where
                        * srun --export=NONE hid it, preempt.c asks scontrol) */
} ddp_jobfacts;

/* Reads what the environment says about this process; never fails (unknown fields are -1 or ""). */
void ddp_jobfacts_read(ddp_jobfacts *f);
/* Cross-checks what the launcher says (PMIx, or srun's SLURM_PROCID / SLURM_STEP_NUM_TASKS) against MPI's
 * rank and size; a mismatch (typically `srun` without --mpi=pmix: every task an MPI singleton) is an error. */
ddp_status ddp_jobfacts_check(const ddp_jobfacts *f, int mpi_rank, int mpi_size);

#endif
