/* sampler.h — which samples each rank reads in each step: the global permutation (from seed and epoch
 * only, independent of world size), shard-wise sampling, padding to equal length with flagged duplicates,
 * and the step count every rank agrees on before an epoch. Position = (epoch, step). */
#ifndef DDP_SAMPLER_H
#define DDP_SAMPLER_H

#include "mpiddp.h"

#include <stdint.h>

typedef enum { DDP_SAMPLE_GLOBAL = 0, DDP_SAMPLE_SHARD = 1, DDP_SAMPLE_SEQUENTIAL = 2 } ddp_sample_mode;

typedef struct {
    ddp_sample_mode mode;
    int64_t n;            /* samples in the dataset */
    int world, rank;
    uint64_t seed;
    int drop_last;
    int64_t batch;        /* samples per rank per step */
    /* per epoch */
    int64_t epoch;
    int64_t per_rank;     /* samples per rank this epoch, padding included */
    int64_t steps;        /* ceil(per_rank / batch) */
    /* shard mode: this rank's shards */
    int64_t nmine;
    int64_t *mine_first;  /* global index of each owned shard's first sample */
    int64_t *mine_cum;    /* [nmine+1] prefix sums of owned shard sizes */
    int64_t my_count;     /* real samples owned */
} ddp_sampler;

/* shard_sizes: samples per shard (shard mode only; may be NULL otherwise). Pure and local: every rank
 * computes the same plan from the broadcast metadata. */
ddp_status ddp_sampler_init(ddp_sampler *s, ddp_sample_mode mode, int64_t n, int world, int rank, uint64_t seed,
                            int drop_last, int64_t batch, const int64_t *shard_sizes, int64_t nshards);
void ddp_sampler_free(ddp_sampler *s);
/* Prepares epoch e (local, no communication). */
ddp_status ddp_sampler_set_epoch(ddp_sampler *s, int64_t epoch);
/* Fills indices/is_pad for step (count <= batch samples). */
ddp_status ddp_sampler_batch(const ddp_sampler *s, int64_t step, int64_t *indices, uint8_t *is_pad, int64_t *count);
/* Sample at position j (< per_rank) of this rank. */
int64_t ddp_sampler_at(const ddp_sampler *s, int64_t j, uint8_t *is_pad);

/* Bijection of [0, n) keyed by key: a Feistel network with cycle walking, O(1) memory. */
int64_t ddp_permute(int64_t x, int64_t n, uint64_t key);
uint64_t ddp_mix64(uint64_t x);

#endif
