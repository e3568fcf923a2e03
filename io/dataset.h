/* dataset.h — a dataset directory: its shards in lexicographic order, the global sample index, and
 * the metadata that rank 0 reads once and broadcasts. */
#ifndef DDP_DATASET_H
#define DDP_DATASET_H

#include "io/shard.h"

struct ddp_dataset {
    char dir[4096];
    ddp_dataset_info info;
    int64_t nshards;
    ddp_shard *shards;      /* meta filled on every rank; opened lazily */
    int all_mappable;       /* every shard's arrays are memory-mapped (no HDF5 reads after start-up) */
    int access_hint;        /* DDP_ACCESS_*: advice for shards opened from now on (set by the loader) */
    struct ddp_shard_lru *lru; /* which shards are open: the bounded LRU of io/shard_cache.c */
};

/* Lists *.h5 in dir (sorted) and validates every shard; serial, no MPI. stats may be NULL, else
 * stats->class_counts is allocated here (free it). Used by rank 0 of ddp_dataset_open and by inspect.
 * Runs in a forked child (MPIDDP_VALIDATE_FORK=0: in process) so that HDF5 crashing or hanging on a
 * corrupt file becomes a one-line error naming the file and object. */
ddp_status ddp_dataset_scan(const char *dir, ddp_shard_meta **metas, int64_t *nshards, ddp_shard_stats *stats);
/* Reads now, in the calling thread, the index arrays of every shard that needs HDF5 for them and closes the shard
 * again, so that a worker thread afterwards only ever maps, also when it reopens a shard the LRU closed (HDF5 is
 * not thread-safe). *ok = 0 if features themselves need HDF5 (then no worker thread). */
ddp_status ddp_dataset_preopen_for_threads(ddp_dataset *ds, int *ok);
/* Shard holding global sample index, and the index inside it; opened if the LRU closed it, and pinned as the calling
 * thread's current shard until its next ddp_dataset_locate or ddp_dataset_sample (io/shard_cache.h). */
ddp_status ddp_dataset_locate(ddp_dataset *ds, int64_t index, ddp_shard **shard, int64_t *local);
/* Index of the shard holding global sample index (in range). */
int64_t ddp_dataset_shard_of(const ddp_dataset *ds, int64_t index);
/* Collective: DDP_ERR_ARG on every rank when a sample has more than limit rows, naming the first such sample
 * by file, /offsets index and id ("option" names the limit in the message). */
ddp_status ddp_dataset_check_max_rows(ddp_ctx *ctx, ddp_dataset *ds, int64_t limit, const char *option);
/* Collective: every sample's row count, [num_samples] by global index, for token-budget batches. Rank r reads
 * the offsets of shards r, r + W, ... and the counts are allgathered. Allocated; the caller frees. */
ddp_status ddp_dataset_row_counts(ddp_ctx *ctx, ddp_dataset *ds, int32_t **out);
/* madvise(WILLNEED) the rows of global samples [lo, hi), which lie in one shard. */
void ddp_dataset_prefetch_range(ddp_dataset *ds, int64_t lo, int64_t hi);
/* The mapped bytes of the rows of global samples [lo, hi) (one shard; opened if needed): 1, or 0 if unmapped. */
int ddp_dataset_range(ddp_dataset *ds, int64_t lo, int64_t hi, void **addr, size_t *len);
/* madvise(WILLNEED) the rows of a sample, opening its shard if needed. */
void ddp_dataset_prefetch(ddp_dataset *ds, int64_t index);

/* Collective (`train --check-finite`): every feature is finite. The shards are spread over the ranks (rank r scans
 * r, r + W, ...); the first non-finite value by shard order is every rank's error, naming the file, row, column
 * and sample (io/finite.h). Reads the mapped pages once; memory stays bounded. */
ddp_status ddp_dataset_check_finite(ddp_ctx *ctx, ddp_dataset *ds);

#endif
