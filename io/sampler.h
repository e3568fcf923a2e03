/* sampler.h — which samples each rank reads in each step: the global permutation (from seed and epoch
 * only, independent of world size), shard-wise sampling, padding to equal length with flagged duplicates,
 * and the step count every rank agrees on before an epoch. Position = (epoch, step). */
#ifndef DDP_SAMPLER_H
#define DDP_SAMPLER_H

#include "mpiddp.h"
#include "io/permute.h"

#include <stdint.h>

typedef enum { DDP_SAMPLE_GLOBAL = 0, DDP_SAMPLE_SHARD = 1, DDP_SAMPLE_SEQUENTIAL = 2 } ddp_sample_mode;

typedef struct {
    ddp_sample_mode mode;
    int64_t n; /* samples in the dataset */
    int world, rank;
    uint64_t seed;
    int drop_last;
    int cli_names; /* its lines name the CLI's options (--sampling shard), else ddp_train_config's fields (optname.h) */
    int64_t batch; /* sample-count batches: samples per rank per step (0 with token budgets) */
    int64_t max_samples; /* the most samples one rank's micro-batch holds (the loader's and models' buffers): batch,
                            at most per_rank (a batch past the set's size sizes no more) */
    /* per epoch */
    int64_t epoch;
    int64_t per_rank; /* samples per rank this epoch, padding included */
    int64_t steps;    /* ceil(per_rank / batch) */
    /* shard mode: this rank's shards */
    int64_t nmine;
    int64_t *mine_first; /* global index of each owned shard's first sample */
    int64_t *mine_cum;   /* [nmine+1] prefix sums of owned shard sizes */
    int64_t my_count;    /* real samples owned */
    /* token-budget batches (--batch-rows, ddp_sampler_set_budget); budget 0: sample-count batches */
    int64_t budget;      /* global rows per optimizer step: rows per rank x world x accumulate */
    int acc;             /* micro-batches per optimizer step */
    const int32_t *lens; /* [n] rows of each sample (borrowed) */
    double cost_sq;      /* a sample's cost: rows + cost_sq x rows^2 */
    int64_t max_rows;    /* largest micro-batch of one rank, in rows (loader buffers), at most the set's rows; 0: batch
                            x longest sample */
    int64_t nplan, cap_plan;
    int64_t *plan; /* per epoch: [nplan+1] first position of each optimizer step in the epoch's order */
    /* --shuffle block (ddp_sampler_set_blocks): the epoch's order permutes blocks of consecutive samples and
     * shuffles samples within windows of consecutive permuted blocks; nblocks 0: --shuffle full */
    int64_t nblocks, window;
    int64_t *blk_first; /* [nblocks+1] first global index of each block (a run of consecutive samples) */
    int64_t *bperm;     /* per epoch: [nblocks] the blocks in the epoch's order */
    int64_t *bcum;      /* per epoch: [nblocks+1] positions where each permuted block starts */
    int64_t blk_epoch;  /* epoch bperm/bcum were built for (-1 none) */
} ddp_sampler;

/* shard_sizes: samples per shard (shard mode only; may be NULL otherwise). Pure and local: every rank
 * computes the same plan from the broadcast metadata. cli: the caller's ddp_ctx.cli_names, kept in cli_names for
 * this sampler's lines (and the shard cache's batch check). */
ddp_status ddp_sampler_init(ddp_sampler *s, ddp_sample_mode mode, int64_t n, int world, int rank, uint64_t seed,
                            int drop_last, int64_t batch, const int64_t *shard_sizes, int64_t nshards, int cli);
void ddp_sampler_free(ddp_sampler *s);
/* Prepares epoch e (local, no communication). */
ddp_status ddp_sampler_set_epoch(ddp_sampler *s, int64_t epoch);
/* Fills indices/is_pad for step (count <= batch samples). */
ddp_status ddp_sampler_batch(const ddp_sampler *s, int64_t step, int64_t *indices, uint8_t *is_pad, int64_t *count);
/* Token-budget batches (docs/distributed.md): after ddp_sampler_init in global or sequential mode, an optimizer
 * step takes the next samples of the epoch's order whose rows fit rows_per_rank x world x accumulate (at
 * least one sample); they are split over world x accumulate (rank, micro-batch) bins by longest-processing-
 * time-first on cost = rows + cost_sq x rows^2. `steps` becomes (optimizer steps of the epoch) x accumulate
 * and is known after ddp_sampler_set_epoch. No padding: a bin may be empty. lens must outlive the sampler.
 * rows_per_rank below the longest sample (max_len) is an error. */
ddp_status ddp_sampler_set_budget(ddp_sampler *s, int64_t rows_per_rank, int accumulate, const int32_t *lens,
                                  int64_t max_len, double cost_sq);
/* Token budgets: the most rows and samples of this rank's share of any micro-batch of optimizer step os (a running
 * max into *rows and *samples), from one split of the step (ddp_sampler_batch splits it once per micro-batch). */
ddp_status ddp_sampler_budget_step_max(const ddp_sampler *s, int64_t os, int64_t *rows, int64_t *samples);
/* --shuffle block: blocks of consecutive samples of about block_bytes of features each (never crossing a
 * shard: shard_first[k] is shard k's first global index, shard_first[nshards] = n), window blocks per window.
 * Call before ddp_sampler_set_budget. lens: every sample's rows; dim: floats per row. */
ddp_status ddp_sampler_set_blocks(ddp_sampler *s, const int32_t *lens, int64_t dim, const int64_t *shard_first,
                                  int64_t nshards, double block_bytes, int64_t window);
/* Block shuffle, for read-ahead: the blocks of the window `ahead` windows after the one holding position p, as
 * runs of global indices [runs[2i], runs[2i+1]); returns how many (0 past the last window). */
int64_t ddp_sampler_window_runs(const ddp_sampler *s, int64_t p, int64_t ahead, int64_t *runs, int64_t cap);
/* The global index at position p of the epoch's order (global or sequential modes). */
int64_t ddp_sampler_order(const ddp_sampler *s, int64_t p);
/* Sample at position j (< per_rank) of this rank (sample-count batches only). */
int64_t ddp_sampler_at(const ddp_sampler *s, int64_t j, uint8_t *is_pad);


#endif
