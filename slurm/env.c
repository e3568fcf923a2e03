/* env.c — job facts from PMIx and the SLURM / Open MPI environment. */
#include "slurm/env.h"

#include "mpi_ddp/core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDP_HAVE_PMIX
#include <pmix.h>
#endif


static void copy_env(char *dst, size_t n, const char *name)
{
    const char *v = getenv(name);
    snprintf(dst, n, "%s", v ? v : "");
}

#ifdef DDP_HAVE_PMIX
/* One job (proc: the wildcard rank) or process fact: *dst when PMIx has it with the type given (PMIX_UINT16
 * or PMIX_UINT32), else left as it was. */
static void get_pmix_int(const pmix_proc_t *proc, const char *key, pmix_data_type_t type, int *dst)
{
    pmix_value_t *val = NULL;
    if (PMIx_Get(proc, key, NULL, 0, &val) != PMIX_SUCCESS || !val) return;
    if (val->type == type) *dst = type == PMIX_UINT16 ? (int)val->data.uint16 : (int)val->data.uint32;
    PMIX_VALUE_RELEASE(val);
}

/* PMIx_Init is reference counted, so this is safe beside Open MPI's own client. */
static int read_pmix(ddp_jobfacts *f)
{
    if (!getenv("PMIX_RANK") && !getenv("PMIX_NAMESPACE")) return 0;
    pmix_proc_t me, wild;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) return 0;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    f->rank = (int)me.rank;
    get_pmix_int(&wild, PMIX_JOB_SIZE, PMIX_UINT32, &f->size);
    get_pmix_int(&wild, PMIX_NUM_NODES, PMIX_UINT32, &f->num_nodes);
    get_pmix_int(&me, PMIX_LOCAL_RANK, PMIX_UINT16, &f->local_rank);
    get_pmix_int(&me, PMIX_NODEID, PMIX_UINT32, &f->node_id);
    PMIx_Finalize(NULL, 0);
    snprintf(f->source, sizeof f->source, "pmix");
    return 1;
}
#endif

void ddp_jobfacts_read(ddp_jobfacts *f)
{
    memset(f, 0, sizeof *f);
    f->rank = f->size = f->local_rank = f->node_id = f->num_nodes = f->cpus_per_task = -1;
    snprintf(f->source, sizeof f->source, "none");
    copy_env(f->job_id, sizeof f->job_id, "SLURM_JOB_ID");
    copy_env(f->array_job_id, sizeof f->array_job_id, "SLURM_ARRAY_JOB_ID");
    copy_env(f->array_task_id, sizeof f->array_task_id, "SLURM_ARRAY_TASK_ID");
    f->cpus_per_task = ddp_env_plain_int("SLURM_CPUS_PER_TASK", -1);
    f->restart_count = ddp_env_plain_int("SLURM_RESTART_COUNT", 0);
    const char *env = getenv("ENVIRONMENT");
    f->batch = env && !strcmp(env, "BATCH");
    int have = 0;
#ifdef DDP_HAVE_PMIX
    have = read_pmix(f);
#endif
    if (!have && getenv("SLURM_PROCID")) {
        snprintf(f->source, sizeof f->source, "slurm");
        f->rank = ddp_env_plain_int("SLURM_PROCID", -1);
        f->size = ddp_env_plain_int("SLURM_NTASKS", -1);
        f->local_rank = ddp_env_plain_int("SLURM_LOCALID", -1);
        f->node_id = ddp_env_plain_int("SLURM_NODEID", -1);
        f->num_nodes = ddp_env_plain_int("SLURM_JOB_NUM_NODES", ddp_env_plain_int("SLURM_NNODES", -1));
    } else if (!have && getenv("OMPI_COMM_WORLD_RANK")) {
        snprintf(f->source, sizeof f->source, "ompi");
        f->rank = ddp_env_plain_int("OMPI_COMM_WORLD_RANK", -1);
        f->size = ddp_env_plain_int("OMPI_COMM_WORLD_SIZE", -1);
        f->local_rank = ddp_env_plain_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    }
    if (!f->job_id[0]) copy_env(f->job_id, sizeof f->job_id, "OMPI_MCA_ess_base_jobid");
}

static ddp_status mismatch(const char *who, int rank, int size, int mpi_rank, int mpi_size)
{
    return ddp_set_error(DDP_ERR_MISMATCH,
                         "%s started this process as rank %d of %d but MPI says rank %d of %d: launch with `srun "
                         "--mpi=pmix` (or mpirun), "
                         "not plain srun",
                         who, rank, size, mpi_rank, mpi_size);
}

ddp_status ddp_jobfacts_check(const ddp_jobfacts *f, int mpi_rank, int mpi_size)
{
    if (!strcmp(f->source, "pmix") && f->rank >= 0 && f->size >= 1 && (f->rank != mpi_rank || f->size != mpi_size))
        return mismatch("PMIx", f->rank, f->size, mpi_rank, mpi_size);
    /* a task started by srun (not by mpirun inside it) must be the MPI rank srun says it is */
    if (getenv("SLURM_STEP_NUM_TASKS") && getenv("SLURM_PROCID") && !getenv("OMPI_COMM_WORLD_SIZE")) {
        int rank = ddp_env_plain_int("SLURM_PROCID", -1), size = ddp_env_plain_int("SLURM_STEP_NUM_TASKS", -1);
        if (rank >= 0 && size >= 1 && (rank != mpi_rank || size != mpi_size))
            return mismatch("srun", rank, size, mpi_rank, mpi_size);
    }
    return DDP_OK;
}
