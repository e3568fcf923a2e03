/* writer.h — producing shards: the atomic shard writer (contiguous, early-allocated, 4096-aligned
 * datasets, tmp name + fsync + rename), `synth` (a deterministic learnable dataset) and `pack` (one
 * 2-D dataset per sample under /samples plus /labels, into balanced shards). */
#ifndef DDP_WRITER_H
#define DDP_WRITER_H

#include "mpiddp.h"

#include <stdint.h>

/* Fills rows [nrows, dim] of sample i (0-based within the shard). */
typedef ddp_status (*ddp_rows_fn)(void *arg, int64_t i, float *rows, int64_t nrows);

/* Writes the shard at path through its temporary DIR/.NAME.tmp.PID (created, filled, flushed, fsynced). Outside a
 * writer's run it is then renamed to path and the directory fsynced. Inside the run of this process's writer lock
 * (ddp_out_lock_take, write = 1), where path is DIR/shard-K.h5 of that lock's DIR and K the next of this rank's shards
 * (rank, rank + size, ...; another K is DDP_ERR_INTERNAL), the complete shard stays under its temporary name, which
 * no reader counts as a shard, until ddp_out_finish renames every rank's once all have written theirs. */
ddp_status ddp_shard_write(const char *path, int64_t dim, int64_t classes, int64_t n, const int64_t *offsets,
                           const int64_t *labels, const int64_t *sample_ids, ddp_rows_fn fill, void *arg);

typedef struct {
    const char *out;
    int64_t samples, dim, classes, min_rows, max_rows, shards;
    uint64_t seed;
    int64_t first_id; /* sample ids start here; a sample's content depends only on (seed, id) */
    int task;         /* 0 class, 1 order */
} ddp_synth_opts;

/* Collective over ctx, under the writer's ddp_out_lock_take of o->out: shards are written round-robin by the ranks. */
ddp_status ddp_synth(ddp_ctx *ctx, const ddp_synth_opts *o);
/* The option checks ddp_synth starts with (local): DDP_ERR_ARG with one line naming the option. */
ddp_status ddp_synth_check(const ddp_synth_opts *o);
/* Collective over ctx, under the writer's ddp_out_lock_take of out. */
/* want_classes > 0 sets num_classes (at least the largest label + 1); 0: the largest label + 1. notice: "" or, on
 * every rank, how many NaN/Inf values the shards hold (as float32) and the first input sample holding one. */
ddp_status ddp_pack(ddp_ctx *ctx, const char *input, const char *out, int64_t shards, int64_t want_classes,
                    char *notice, size_t notice_len);

/* The dataset lock, DIR/mpiddp-dataset.lock (docs/dataset-format.md#one-writer-per-directory). */
#define DDP_DATASET_LOCK "mpiddp-dataset.lock"
typedef struct {
    int fd;             /* rank 0's while it holds the lock; -1 elsewhere */
    char path[4200];    /* DIR/mpiddp-dataset.lock */
    char created[4200]; /* the first directory ddp_out_lock_take made for a writer ("" when none) */
    int writer;         /* 1 on every rank of a writer's run (write = 1, taken) */
} ddp_out_lock;
/* Collective: rank 0 locks dir for the whole run (fcntl, so a killed run's lock goes with it; a leftover file alone
 * never refuses): exclusive for a writer (write = 1: synth, pack, what names it in the lock file; dir and its parents
 * are made first), shared for a reader (write = 0: index, which rewrites only the manifest; dir must exist, and where
 * the lock file cannot be made, read-only data, it goes on without one). Held by another run: DDP_ERR_BUSY on every
 * rank, one line naming dir and the holder, and nothing in dir touched. Release with ddp_out_lock_release.
 * A writer's lock, taken, starts the run's undo on a fatal signal (ddp_register_signal_cleanup: app/stop_signals.c):
 * until ddp_out_finish has every shard in place, SIGTERM and the like remove the shards the run wrote (its
 * temporaries, and while they are renamed, on rank 0 every shard), rank 0's lock file and the directories the run
 * made once they are empty, before the process dies; after it, and until ddp_out_lock_release, only rank 0's lock
 * file (the dataset is complete). */
ddp_status ddp_out_lock_take(ddp_ctx *ctx, const char *dir, int write, const char *what, ddp_out_lock *lk);
/* Collective: the shared lock (as index's) of each of the n dataset directories a run reads, in lks[n] (what: "train",
 * "eval", which a refused writer names); a directory given twice (the same device and inode however named, or a lock
 * file that is a hard link of one already held) is locked once. Held by a writer: DDP_ERR_BUSY as ddp_out_lock_take,
 * none of the locks kept. Release with ddp_read_locks_release. */
ddp_status ddp_read_locks_take(ddp_ctx *ctx, const char *const *dirs, int n, const char *what, ddp_out_lock *lks);
void ddp_read_locks_release(ddp_out_lock *lks, int n);
/* Local (on ranks other than 0 it only ends a writer's undo): removes the lock file (unless another reader shares it)
 * and unlocks, then removes the directories ddp_out_lock_take made if they are empty (a failed writer's), then ends
 * the run's undo on a fatal signal. After ddp_out_finish's failure: every rank's shards are gone then. */
void ddp_out_lock_release(ddp_out_lock *lk);
/* Rank 0, under the writer's lock: fails if dir already holds *.h5 files, else removes the temporaries a killed
 * writer left there (.shard-N.h5.tmp.PID, mpiddp-manifest.bin.tmp.*). */
ddp_status ddp_prepare_out_dir(const char *dir);
/* Collective, the end of a synth's or pack's shard writing, st this rank's status: the ranks agree on it; all OK,
 * each rank renames the shards it left under their temporary names (ddp_shard_write) to their final names, fsyncs
 * the directory, and they agree again; during the renames rank 0 answers for every shard (a fatal signal there
 * removes them all), the other ranks, once their own are renamed, for none; after the agreement the dataset is
 * complete and a fatal signal leaves it. Any failure: ddp_out_discard, and the agreed error. */
ddp_status ddp_out_finish(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written, ddp_status st);
/* Collective, after a failed synth or pack whose status the ranks agreed: each rank removes the first `written` of
 * the shards it writes (k = rank, rank + size, ...), under their temporary or their final names, and returns once
 * every rank has (ddp_out_lock_release then removes the directory if it made it). Nothing the run did not create is
 * touched; ddp_last_error() keeps the run's error. */
void ddp_out_discard(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written);
/* The n-th shard file name for a dataset of total shards: shard-00000.h5 ... */
void ddp_shard_name(char *buf, size_t len, int64_t k, int64_t total);

#endif
