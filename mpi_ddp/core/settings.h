/* settings.h — the knobs mpiddp reads from the environment (NCCL_PARAM style): MPIDDP_<name> integers,
 * and the CPU GEMMs' thread count. Used by every layer; uses nothing above core/. */
#ifndef DDP_SETTINGS_H
#define DDP_SETTINGS_H

#include <stdint.h>

/* Integer environment knob: MPIDDP_<name>, default when unset or malformed. */
int64_t ddp_env_int(const char *name, int64_t dflt);
/* A launcher's integer variable (SLURM_CPUS_PER_TASK, OMPI_...): its leading number ("2(x2)" gives 2), default
 * when unset or malformed. */
int ddp_env_plain_int(const char *name, int dflt);
/* The shard cache's budgets (io/shard_cache.c, docs/sizing.md), read once: MPIDDP_MAX_OPEN_SHARDS caps the shards a
 * rank keeps open, MPIDDP_MAX_SHARD_MAPS the memory maps they hold; 0 (unset): only RLIMIT_NOFILE and
 * vm.max_map_count bound them. Values can only lower the budgets derived from those limits. */
int64_t ddp_env_max_open_shards(void);
int64_t ddp_env_max_shard_maps(void);
/* Threads for the CPU GEMMs: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else 1. */
int ddp_blas_threads_from_env(void);

#endif
