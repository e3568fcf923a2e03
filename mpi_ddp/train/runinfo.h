/* runinfo.h — version strings of the libraries mpiddp runs on, and run.json. */
#ifndef DDP_RUNINFO_H
#define DDP_RUNINFO_H

#include "mpi_ddp/core/ctx.h"

typedef struct {
    char mpi[256], hdf5[64], cuda[64], nccl[32], blas[128], onednn[160];
} ddp_versions;

void ddp_versions_get(ddp_versions *v);
/* Collective: gathers every rank's host and topology; rank 0 writes path. extra_config is a JSON object
 * text (may be NULL) merged under "config"; resumed_from (rank 0's; NULL or "": a fresh start) is the absolute path
 * of the checkpoint the run started from. */
ddp_status ddp_write_run_json(ddp_ctx *ctx, const char *path, const ddp_train_config *cfg, const char *extra_config,
                              const ddp_dataset_info *train, const ddp_dataset_info *val, const char *device_note,
                              const char *attention, const char *resumed_from);
/* Collective, at the end of a run: rewrites path's data_cache (through path.tmp and a rename) with what the
 * open-shard LRU did: peak open shards, descriptors and maps (largest over the ranks), opens and evictions, and
 * each dataset's hit rate (sums over the ranks). */
ddp_status ddp_run_json_data_cache(ddp_ctx *ctx, const char *path, ddp_dataset *train, ddp_dataset *val);
/* Collective, once the run's horizon is known: rewrites path's lr_schedule (through path.tmp and a rename) with the
 * schedule in effect: its name, lr, min_lr, warmup steps, the optimizer steps [start, total) it spans, and how a
 * resume settled the horizon ("run": the run's own; "checkpoint": the checkpoint's, unchanged or kept; "restart"). */
ddp_status ddp_run_json_lr_schedule(ddp_ctx *ctx, const char *path, const char *schedule, double lr, double min_lr,
                                    int64_t warmup, int64_t start, int64_t total, const char *horizon);

#endif
