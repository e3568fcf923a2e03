/* shard_cache.h — the bounded set of shards a rank keeps open (issue #33): one LRU over the shards of every open
 * dataset, budgeted from RLIMIT_NOFILE and vm.max_map_count (docs/sizing.md), shared by the caller's thread and
 * the loader's worker. A shard the LRU closes reopens on its next use, mapping the same bytes. */
#ifndef DDP_SHARD_CACHE_H
#define DDP_SHARD_CACHE_H

#include "io/dataset.h"
#include "io/sampler.h"

/* The process-wide budgets (fixed at the first ddp_shard_cache_attach) and what the open shards hold. */
typedef struct {
    int64_t max_open;   /* shards open at once: min(MPIDDP_MAX_OPEN_SHARDS, fd_budget) */
    int64_t fd_budget;  /* descriptors the shards may hold: RLIMIT_NOFILE less what is open and a reserve */
    int64_t map_budget; /* memory maps they may hold: vm.max_map_count less the maps in use and a reserve */
    int64_t nofile, nofile_was, nofile_hard; /* RLIMIT_NOFILE soft limit now and at start-up, and the hard limit */
    int64_t max_map_count;                   /* /proc/sys/vm/max_map_count (65530 when unreadable) */
    int64_t fds_at_start, maps_at_start;
    int64_t knob_open, knob_maps; /* MPIDDP_MAX_OPEN_SHARDS, MPIDDP_MAX_SHARD_MAPS (0: unset) */
    int64_t open, fds, maps;      /* held now by open shards */
    int64_t peak_open, peak_fds, peak_maps;
    int64_t opens, evictions; /* shard opens through the cache (first opens and reopens), LRU closes */
    int64_t ahead_opens;      /* of the opens, those made by read-ahead lookups */
    int64_t overshoots;       /* opens past the budget because every open shard was in use (docs/sizing.md) */
} ddp_shard_cache_info;

/* Joins ds to the cache (called by ddp_dataset_open; the first call raises RLIMIT_NOFILE's soft limit to the hard
 * one and fixes the budgets; world: ranks, for the descriptors MPI may open later). */
ddp_status ddp_shard_cache_attach(ddp_dataset *ds, int world);
/* Closes ds's shards and leaves the cache (ddp_dataset_close). */
void ddp_shard_cache_detach(ddp_dataset *ds);

/* Opens (or finds open) the shards of the n samples of a batch and pins them, under one lock: shards[i] (pinned
 * once per sample) and local[i], the index in the shard. The LRU does not close a pinned shard; on failure nothing
 * stays pinned. Thread-safe, like everything here. */
ddp_status ddp_dataset_acquire_batch(ddp_dataset *ds, const int64_t *index, int64_t n, ddp_shard **shards,
                                     int64_t *local);
void ddp_dataset_release_batch(ddp_dataset *ds, ddp_shard *const *shards, int64_t n);
/* Read-ahead: calls fn on the shard of sample index (opened if needed, counted as a read-ahead lookup) while the
 * cache's lock is held, so fn must be short (a madvise). 0 when the shard could not be opened. */
int ddp_dataset_with_shard(ddp_dataset *ds, int64_t index, void (*fn)(ddp_shard *s, int64_t local, void *arg),
                           void *arg);
/* Shard k opened and pinned as the calling thread's current shard: the pin moves with the thread's next call
 * (ddp_dataset_locate and ddp_dataset_sample, whose pointers stay valid until then) and is dropped when the thread
 * exits or the dataset is closed. Any number of threads: each has its own slot, made on its first call. */
ddp_status ddp_shard_cache_pin_current(ddp_dataset *ds, int64_t k, ddp_shard **shard);

/* Closes the unpinned shards that hold HDF5 handles (features read through HDF5) of the datasets the calling thread
 * opened: a worker thread about to assemble batches may not close them itself (HDF5 is not thread-safe), so it
 * could not make room in the budget. Called by the loader before its worker starts an epoch. */
void ddp_shard_cache_drop_hdf5(void);
/* Shards of ds that fit the budgets at once, and the budget that sets it, for messages:
 * "MPIDDP_MAX_OPEN_SHARDS", "RLIMIT_NOFILE", "vm.max_map_count" or "MPIDDP_MAX_SHARD_MAPS". */
int64_t ddp_shard_cache_capacity(const ddp_dataset *ds, const char **limit);
/* Every batch of the sampler's epoch from first_step on holds its shards open while it is assembled: fails with
 * one line naming the first batch that needs more shards than the budget allows, the limit and what to raise. */
ddp_status ddp_shard_cache_check_batches(ddp_dataset *ds, const ddp_sampler *sm, int64_t first_step);

void ddp_shard_cache_get(ddp_shard_cache_info *out);
/* The loader's lookups of ds's shards while assembling batches (not read-ahead, not ddp_dataset_locate/sample) that
 * found them open (hits) or opened them (misses), since ds was opened. */
void ddp_shard_cache_dataset_stats(const ddp_dataset *ds, int64_t *hits, int64_t *misses);

#endif
