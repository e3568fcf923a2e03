/* env.h — job facts from the launcher: PMIx (srun --mpi=pmix, Open MPI's mpirun), SLURM_* and
 * OMPI_* variables; BLAS thread count from cpus-per-task. */
#ifndef DDP_SLURM_ENV_H
#define DDP_SLURM_ENV_H

#include "mpiddp.h"

typedef struct {
    char source[16];         /* "pmix", "slurm", "ompi", "none" */
    char job_id[64];
    char array_job_id[32], array_task_id[32];
    int rank, size;          /* -1 when unknown */
    int local_rank, node_id, num_nodes;
    int cpus_per_task;       /* -1 when unknown */
    int restart_count;       /* SLURM_RESTART_COUNT, 0 when absent */
} ddp_jobfacts;

/* Reads what the environment says about this process; never fails (unknown fields are -1 or ""). */
void ddp_jobfacts_read(ddp_jobfacts *f);
/* Cross-checks what the launcher says (PMIx, or srun's SLURM_PROCID / SLURM_STEP_NUM_TASKS) against MPI's
 * rank and size; a mismatch (typically `srun` without --mpi=pmix: every task an MPI singleton) is an error. */
ddp_status ddp_jobfacts_check(const ddp_jobfacts *f, int mpi_rank, int mpi_size);
/* Threads for the CPU GEMMs: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else 1. */
int ddp_blas_threads_from_env(void);
/* Integer environment knob (NCCL_PARAM style): MPIDDP_<name>, default when unset or malformed. */
int64_t ddp_env_int(const char *name, int64_t dflt);

#endif
