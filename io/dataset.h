/* dataset.h — a dataset directory: its shards in lexicographic order, the global sample index, and the metadata
 * every rank holds after start-up (validated spread over the ranks, or taken from a fresh manifest). */
#ifndef DDP_DATASET_H
#define DDP_DATASET_H

#include "io/manifest.h"
#include "io/shard.h"

struct ddp_dataset {
    ddp_ctx *ctx; /* it was opened on: a failed ddp_dataset_sample is pending there (ddp_ctx_local_failure) */
    char dir[4096];
    ddp_dataset_info info;
    int64_t nshards;
    ddp_shard *shards;         /* meta filled on every rank; opened lazily */
    int all_mappable;          /* every shard's arrays are memory-mapped (no HDF5 reads after start-up) */
    int access_hint;           /* DDP_ACCESS_*: advice for shards opened from now on (set by the loader) */
    struct ddp_shard_lru *lru; /* which shards are open: the bounded LRU of io/shard_cache.c */
    char notice[16384];     /* rank 0: one line about the manifest (stale, corrupt: ignored) for app/ to print, or "" */
    int64_t manifest_fresh; /* shards whose metadata came from the manifest unvalidated */
    int32_t *row_counts;    /* every sample's rows, handed back by ddp_dataset_keep_row_counts for the next reader */
};

/* The *.h5 shard names of dir, sorted (strcmp); each strdup'ed. Serial, no MPI (rank 0 of ddp_dataset_survey). */
ddp_status ddp_dataset_list(const char *dir, char ***names, int64_t *n);
/* What start-up learns about a dataset directory (io/dataset_scan.c). */
enum { DDP_SURVEY_STATS = 1, DDP_SURVEY_FINITE = 2 };
typedef struct {
    char dir[4096];
    char manifest[4200]; /* the manifest looked at ("" with "none") */
    int64_t nshards;
    ddp_shard_meta *metas; /* [nshards], every rank, `first` set */
    ddp_manifest_entry
        *entries;           /* [nshards], every rank: the metas plus size, mtime and (DDP_SURVEY_STATS) statistics */
    int64_t *pairs, npairs; /* rank 0, DDP_SURVEY_STATS: (class, count) pairs, entries[k].cc_first indexes them */
    int manifest_used;      /* a manifest passed every check */
    int64_t fresh, changed, added, removed, validated; /* shards: unchanged (trusted), re-validated..., dropped */
    char notice[16384]; /* rank 0: one line for app/ (manifest stale or ignored), or "" */
} ddp_survey;

/* Collective. Rank 0 lists the *.h5 of dir (sorted) and shares the names; rank r stats shards r, r + W, ..., takes
 * those unchanged since the manifest (manifest: NULL = DIR/mpiddp-manifest.bin when present, "none" = no manifest,
 * else that file) and validates the others in a forked child (MPIDDP_VALIDATE_FORK=0: in process) that turns HDF5
 * crashing or hanging on a corrupt file into a one-line error. The first problem in shard order (a shard's own, or
 * a D / num_classes differing from shard 0's) is every rank's error, the line serial validation would give.
 * DDP_SURVEY_STATS: row statistics and class counts per shard; DDP_SURVEY_FINITE: also counts each shard's NaN/Inf. */
ddp_status ddp_dataset_survey(ddp_ctx *ctx, const char *dir, const char *manifest, int flags, ddp_survey *out);
void ddp_survey_free(ddp_survey *s);
/* Collective: rank 0 writes s (a DDP_SURVEY_STATS | DDP_SURVEY_FINITE survey) as the manifest (NULL: in its dir). */
ddp_status ddp_survey_write_manifest(ddp_ctx *ctx, const ddp_survey *s, const char *manifest);
/* Not collective: DDP_ERR_FORMAT naming the first NaN/Inf feature (file, row, column, sample) and the dataset's totals
 * when a DDP_SURVEY_FINITE survey counted any (that shard is read again for the position). */
ddp_status ddp_survey_check_finite(const ddp_survey *s);
/* ddp_dataset_open with a manifest choice as for ddp_dataset_survey; ds->notice holds its notice line. */
ddp_status ddp_dataset_open_with(ddp_ctx *ctx, const char *dir, const char *manifest, ddp_dataset **out);
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
 * the offsets of shards r, r + W, ... and the counts are allgathered. Allocated; the caller frees. Where an earlier
 * caller handed its counts back (ddp_dataset_keep_row_counts, on every rank), they are returned without reading. */
ddp_status ddp_dataset_row_counts(ddp_ctx *ctx, ddp_dataset *ds, int32_t **out);
/* Takes lens (from ddp_dataset_row_counts, or NULL) for the next ddp_dataset_row_counts of ds; call on every rank
 * alike. Start-up reads them once though the plan's walk and the trainer's samplers both need them. */
void ddp_dataset_keep_row_counts(ddp_dataset *ds, int32_t *lens);
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
