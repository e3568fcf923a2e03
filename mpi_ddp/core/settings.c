/* settings.c — environment knobs; see settings.h. */
#include "mpi_ddp/core/settings.h"

#include <stdio.h>
#include <stdlib.h>

int ddp_env_plain_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end && *end != '(') return dflt; /* SLURM_TASKS_PER_NODE style "2(x2)" keeps the first number */
    return (int)x;
}

int64_t ddp_env_int(const char *name, int64_t dflt)
{
    char key[128];
    snprintf(key, sizeof key, "MPIDDP_%s", name);
    const char *v = getenv(key);
    if (!v || !*v) return dflt;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end ? dflt : (int64_t)x;
}

int64_t ddp_env_max_open_shards(void)
{
    int64_t v = ddp_env_int("MAX_OPEN_SHARDS", 0);
    return v > 0 ? v : 0;
}

int64_t ddp_env_max_shard_maps(void)
{
    int64_t v = ddp_env_int("MAX_SHARD_MAPS", 0);
    return v > 0 ? v : 0;
}

int ddp_blas_threads_from_env(void)
{
    int n = ddp_env_plain_int("SLURM_CPUS_PER_TASK", -1);
    if (n < 1) n = ddp_env_plain_int("OMP_NUM_THREADS", -1);
    return n < 1 ? 1 : n;
}

