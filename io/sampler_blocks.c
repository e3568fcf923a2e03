/* sampler_blocks.c — --shuffle block: blocks of consecutive samples (never crossing a shard) permuted per
 * epoch, samples shuffled within windows of consecutive permuted blocks, and the runs the loader reads ahead.
 * A pure function of seed and epoch, like the full shuffle. */
#include "io/sampler_priv.h"

#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <stdlib.h>

ddp_status ddp_sampler_set_blocks(ddp_sampler *s, const int32_t *lens, int64_t dim, const int64_t *shard_first,
                                  int64_t nshards, double block_bytes, int64_t window)
{
    int cli = s->cli_names; /* the lines name --shuffle block or cfg.shuffle_block = 1 (optname.h) */
    char o[96], g[96];
    if (s->mode != DDP_SAMPLE_GLOBAL)
        return ddp_set_error(DDP_ERR_ARG, "%s needs %s (shard sampling shuffles within each rank's shards)",
                             ddp_opt_set(o, sizeof o, cli, DDP_OPT_SHUFFLE, "block"),
                             ddp_opt_set(g, sizeof g, cli, DDP_OPT_SAMPLING, "global"));
    if (!(block_bytes > 0) || window < 1)
        return ddp_set_error(DDP_ERR_ARG, "%s must be > 0 and %s >= 1", ddp_opt_name(cli, DDP_OPT_SHUFFLE_BLOCK_MB),
                             ddp_opt_name(cli, DDP_OPT_SHUFFLE_WINDOW));
    int64_t cap = 1024, nb = 0;
    int64_t *bf = ddp_calloc((size_t)cap * sizeof *bf, 1);
    if (!bf) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < nshards; k++) {
        double bytes = 0;
        for (int64_t i = shard_first[k]; i < shard_first[k + 1]; i++) {
            if (i == shard_first[k] || bytes >= block_bytes) { /* a block starts here */
                if (nb + 2 > cap) {
                    int64_t *nbf = ddp_realloc(bf, (size_t)(cap *= 2) * sizeof *nbf, 1);
                    if (!nbf) {
                        free(bf);
                        return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
                    }
                    bf = nbf;
                }
                bf[nb++] = i;
                bytes = 0;
            }
            bytes += (double)lens[i] * (double)dim * sizeof(float);
        }
    }
    bf[nb] = s->n;
    free(s->blk_first);
    s->blk_first = bf;
    s->nblocks = nb;
    s->window = window;
    s->bperm = ddp_calloc((size_t)nb * sizeof *s->bperm, 1);
    s->bcum = ddp_calloc((size_t)(nb + 1) * sizeof *s->bcum, 1);
    s->blk_epoch = -1;
    if (!s->bperm || !s->bcum) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    return DDP_OK;
}

/* the epoch's block order and where each permuted block starts (pure: seed, epoch, blocks) */
void ddp_sampler_make_block_order(ddp_sampler *s)
{
    uint64_t key = ddp_mix64(ddp_epoch_key(s->seed, s->epoch) ^ 0xb10c);
    s->bcum[0] = 0;
    for (int64_t b = 0; b < s->nblocks; b++) {
        s->bperm[b] = ddp_permute(b, s->nblocks, key);
        s->bcum[b + 1] = s->bcum[b] + (s->blk_first[s->bperm[b] + 1] - s->blk_first[s->bperm[b]]);
    }
    s->blk_epoch = s->epoch;
}

/* last b in [lo, hi) with bcum[b] <= p */
static int64_t find_block(const ddp_sampler *s, int64_t p, int64_t lo, int64_t hi)
{
    hi--;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (s->bcum[mid] <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* position p of a block-shuffled epoch: its window (window consecutive permuted blocks), a permutation of the
 * window's positions keyed by (seed, epoch, window), then the block and the sample inside it */
int64_t ddp_sampler_block_order_at(const ddp_sampler *s, int64_t p)
{
    int64_t w = find_block(s, p, 0, s->nblocks) / s->window;
    int64_t b0 = w * s->window, b1 = b0 + s->window < s->nblocks ? b0 + s->window : s->nblocks;
    int64_t base = s->bcum[b0], m = s->bcum[b1] - base;
    int64_t r = base +
                ddp_permute(p - base, m, ddp_mix64(ddp_epoch_key(s->seed, s->epoch) ^ ddp_mix64((uint64_t)w + 0x77)));
    int64_t b = find_block(s, r, b0, b1);
    return s->blk_first[s->bperm[b]] + (r - s->bcum[b]);
}

int64_t ddp_sampler_window_runs(const ddp_sampler *s, int64_t p, int64_t ahead, int64_t *runs, int64_t cap)
{
    if (s->nblocks == 0 || p < 0 || p >= s->n) return 0;
    int64_t w = find_block(s, p, 0, s->nblocks) / s->window + ahead, k = 0;
    for (int64_t b = w * s->window; b < (w + 1) * s->window && b < s->nblocks && k < cap; b++, k++) {
        runs[2 * k] = s->blk_first[s->bperm[b]];
        runs[2 * k + 1] = s->blk_first[s->bperm[b] + 1];
    }
    return k;
}

/* sample at position p of the epoch's global order */
int64_t ddp_sampler_order(const ddp_sampler *s, int64_t p)
{
    if (s->mode == DDP_SAMPLE_SEQUENTIAL) return p;
    if (s->nblocks > 0) return ddp_sampler_block_order_at(s, p);
    return ddp_permute(p, s->n, ddp_epoch_key(s->seed, s->epoch));
}
