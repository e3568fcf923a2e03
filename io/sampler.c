/* sampler.c — which samples each rank reads in each step: the epoch's global order (a keyed permutation,
 * permute.c; or the block shuffle, sampler_blocks.c), shard-wise sampling with whole shards per rank, padding
 * to equal length with flagged duplicates, and each rank's batches (token budgets: sampler_budget.c). */
#include "io/sampler_priv.h"

#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t size, id;
} shard_sz;

static int cmp_shard(const void *a, const void *b)
{
    const shard_sz *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

ddp_status ddp_sampler_init(ddp_sampler *s, ddp_sample_mode mode, int64_t n, int world, int rank, uint64_t seed,
                            int drop_last, int64_t batch, const int64_t *shard_sizes, int64_t nshards, int cli)
{
    memset(s, 0, sizeof *s);
    s->cli_names = cli;
    s->mode = mode;
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->seed = seed;
    s->drop_last = drop_last;
    s->batch = s->max_samples = batch;
    s->epoch = -1;
    char o[2][96]; /* "--sampling shard" | "cfg.sampling_shard = 1" (optname.h) */
    if (batch < 1)
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1",
                             ddp_opt_fmt(o[0], sizeof o[0], cli, DDP_OPT_BATCH_SIZE, "%lld", (long long)batch));
    if (n < 1) return ddp_set_error(DDP_ERR_ARG, "sampler: dataset has no samples");
    if (mode != DDP_SAMPLE_SHARD) {
        s->per_rank = drop_last ? n / world : (n + world - 1) / world;
        if (s->per_rank == 0)
            return ddp_set_error(DDP_ERR_ARG, "sampler: %s leaves rank %d with no samples (%lld samples for %d ranks)",
                                 ddp_opt_set(o[0], sizeof o[0], cli, DDP_OPT_DROP_LAST, NULL), rank, (long long)n,
                                 world);
    } else {
        /* whole shards to ranks, largest first, each to the least-loaded rank (ties: lower rank) */
        shard_sz *v = ddp_calloc((size_t)nshards, sizeof *v);
        int64_t *load = ddp_calloc((size_t)world, sizeof *load);
        int64_t *owner = ddp_calloc((size_t)nshards, sizeof *owner);
        if (!v || !load || !owner) {
            free(v);
            free(load);
            free(owner);
            return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        }
        for (int64_t i = 0; i < nshards; i++) v[i] = (shard_sz){shard_sizes[i], i};
        qsort(v, (size_t)nshards, sizeof *v, cmp_shard);
        for (int64_t i = 0; i < nshards; i++) {
            int best = 0;
            for (int r = 1; r < world; r++)
                if (load[r] < load[best]) best = r;
            load[best] += v[i].size;
            owner[v[i].id] = best;
        }
        int64_t mn = load[0], mx = load[0];
        int empty = -1;
        for (int r = 0; r < world; r++) {
            if (load[r] < mn) mn = load[r];
            if (load[r] > mx) mx = load[r];
            if (load[r] == 0 && empty < 0) empty = r;
        }
        ddp_status st = DDP_OK;
        if (empty >= 0)
            st = ddp_set_error(
                DDP_ERR_ARG, "%s: rank %d gets no samples (%lld shards for %d ranks); use %s or more shards",
                ddp_opt_set(o[0], sizeof o[0], cli, DDP_OPT_SAMPLING, "shard"), empty, (long long)nshards, world,
                ddp_opt_set(o[1], sizeof o[1], cli, DDP_OPT_SAMPLING, "global"));
        s->per_rank = drop_last ? mn : mx;
        s->my_count = load[rank];
        for (int64_t i = 0; i < nshards && st == DDP_OK; i++) s->nmine += owner[i] == rank;
        s->mine_first = ddp_calloc((size_t)s->nmine + 1, sizeof(int64_t));
        s->mine_cum = ddp_calloc((size_t)s->nmine + 1, sizeof(int64_t));
        if (st == DDP_OK && (!s->mine_first || !s->mine_cum)) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        int64_t first = 0, k = 0;
        for (int64_t i = 0; i < nshards && st == DDP_OK; i++) {
            if (owner[i] == rank) {
                s->mine_first[k] = first;
                s->mine_cum[k + 1] = s->mine_cum[k] + shard_sizes[i];
                k++;
            }
            first += shard_sizes[i];
        }
        free(v);
        free(load);
        free(owner);
        if (st != DDP_OK) {
            ddp_sampler_free(s);
            return st;
        }
    }
    s->steps = (s->per_rank + batch - 1) / batch;
    if (s->max_samples > s->per_rank)
        s->max_samples = s->per_rank; /* a batch past the set: buffers for what it holds */
    return DDP_OK;
}

void ddp_sampler_free(ddp_sampler *s)
{
    free(s->mine_first);
    free(s->mine_cum);
    free(s->plan);
    free(s->blk_first);
    free(s->bperm);
    free(s->bcum);
    s->mine_first = s->mine_cum = NULL;
    s->plan = NULL;
    s->blk_first = s->bperm = s->bcum = NULL;
}

ddp_status ddp_sampler_set_epoch(ddp_sampler *s, int64_t epoch)
{
    int changed = s->epoch != epoch;
    s->epoch = epoch;
    if (s->nblocks > 0 && s->blk_epoch != epoch) ddp_sampler_make_block_order(s);
    if (s->budget > 0 && s->mode != DDP_SAMPLE_SEQUENTIAL && (changed || !s->plan)) return ddp_sampler_make_plan(s);
    return DDP_OK;
}

int64_t ddp_sampler_at(const ddp_sampler *s, int64_t j, uint8_t *is_pad)
{
    if (s->mode == DDP_SAMPLE_SHARD) {
        int64_t q = j % s->my_count;
        *is_pad = j >= s->my_count;
        int64_t l = ddp_permute(q, s->my_count, ddp_epoch_key(s->seed, s->epoch));
        int64_t lo = 0, hi = s->nmine - 1; /* owned shard holding local index l */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (s->mine_cum[mid] <= l)
                lo = mid;
            else
                hi = mid - 1;
        }
        return s->mine_first[lo] + (l - s->mine_cum[lo]);
    }
    int64_t p = j * s->world + s->rank;
    *is_pad = p >= s->n;
    p %= s->n;
    return ddp_sampler_order(s, p);
}

ddp_status ddp_sampler_batch(const ddp_sampler *s, int64_t step, int64_t *indices, uint8_t *is_pad, int64_t *count)
{
    if (s->epoch < 0) return ddp_set_error(DDP_ERR_INTERNAL, "sampler: no epoch set");
    if (step < 0 || step >= s->steps)
        return ddp_set_error(DDP_ERR_ARG, "sampler: step %lld out of range [0, %lld)", (long long)step,
                             (long long)s->steps);
    if (s->budget > 0) return ddp_sampler_budget_batch(s, step / s->acc, step % s->acc, indices, is_pad, count);
    int64_t lo = step * s->batch, hi = lo + s->batch < s->per_rank ? lo + s->batch : s->per_rank;
    for (int64_t j = lo; j < hi; j++) indices[j - lo] = ddp_sampler_at(s, j, &is_pad[j - lo]);
    *count = hi - lo;
    return DDP_OK;
}
