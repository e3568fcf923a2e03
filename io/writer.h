/* writer.h — producing shards: the atomic shard writer (contiguous, early-allocated, 4096-aligned
 * datasets, tmp name + fsync + rename), `synth` (a deterministic learnable dataset) and `pack` (one
 * 2-D dataset per sample under /samples plus /labels, into balanced shards). */
#ifndef DDP_WRITER_H
#define DDP_WRITER_H

#include "mpiddp.h"

#include <stdint.h>

/* Fills rows [nrows, dim] of sample i (0-based within the shard). */
typedef ddp_status (*ddp_rows_fn)(void *arg, int64_t i, float *rows, int64_t nrows);

ddp_status ddp_shard_write(const char *path, int64_t dim, int64_t classes, int64_t n, const int64_t *offsets,
                           const int64_t *labels, const int64_t *sample_ids, ddp_rows_fn fill, void *arg);

typedef struct {
    const char *out;
    int64_t samples, dim, classes, min_rows, max_rows, shards;
    uint64_t seed;
    int64_t first_id; /* sample ids start here; a sample's content depends only on (seed, id) */
    int task;         /* 0 class, 1 order */
} ddp_synth_opts;

/* Collective over ctx: shards are written round-robin by the ranks. */
ddp_status ddp_synth(ddp_ctx *ctx, const ddp_synth_opts *o);
/* The option checks ddp_synth starts with (local): DDP_ERR_ARG with one line naming the option. */
ddp_status ddp_synth_check(const ddp_synth_opts *o);
/* Collective over ctx. */
/* want_classes > 0 sets num_classes (at least the largest label + 1); 0: the largest label + 1. */
ddp_status ddp_pack(ddp_ctx *ctx, const char *input, const char *out, int64_t shards, int64_t want_classes);

/* Creates dir (and parents); fails if it already holds *.h5 files, else removes the temporaries a killed writer left
 * there (.shard-N.h5.tmp.PID, mpiddp-manifest.bin.tmp.PID). *created: whether this call created dir. */
ddp_status ddp_prepare_out_dir(const char *dir, int *created);
/* Collective, after a failed synth or pack whose status the ranks agreed: each rank removes the first `written` of
 * the shards it writes (k = rank, rank + size, ...), then, once every rank has, rank 0 removes dir if its
 * ddp_prepare_out_dir created it (created) and it is now empty. Nothing the run did not create is touched;
 * ddp_last_error() keeps the run's error. */
void ddp_out_discard(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written, int created);
/* The n-th shard file name for a dataset of total shards: shard-00000.h5 ... */
void ddp_shard_name(char *buf, size_t len, int64_t k, int64_t total);

#endif
