/* sampler.c — counter-based sampling: the epoch permutation is a keyed Feistel bijection evaluated per
 * position (no O(N) array), so every rank derives the same order from (seed, epoch) alone. */
#include "sampler.h"

#include "../mpi_ddp/status.h"

#include <stdlib.h>
#include <string.h>

uint64_t ddp_mix64(uint64_t x)
{ /* splitmix64 finaliser */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int64_t ddp_permute(int64_t x, int64_t n, uint64_t key)
{
    if (n <= 1) return 0;
    int bits = 0;
    while (((int64_t)1 << bits) < n) bits++;
    int half = (bits + 1) / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t y = (uint64_t)x;
    do { /* cycle walking: re-encrypt until inside [0, n); domain < 4n so this ends fast */
        uint64_t l = y >> half, r = y & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = ddp_mix64(key ^ ((uint64_t)round << 56) ^ r) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        y = (l << half) | r;
    } while (y >= (uint64_t)n);
    return (int64_t)y;
}

static uint64_t epoch_key(uint64_t seed, int64_t epoch) { return ddp_mix64(ddp_mix64(seed) ^ (uint64_t)epoch * 0x632be59bd9b4e019ULL); }

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
                            int drop_last, int64_t batch, const int64_t *shard_sizes, int64_t nshards)
{
    memset(s, 0, sizeof *s);
    s->mode = mode;
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->seed = seed;
    s->drop_last = drop_last;
    s->batch = batch;
    s->epoch = -1;
    if (batch < 1) return ddp_set_error(DDP_ERR_ARG, "--batch-size %lld: must be >= 1", (long long)batch);
    if (n < 1) return ddp_set_error(DDP_ERR_ARG, "sampler: dataset has no samples");
    if (mode != DDP_SAMPLE_SHARD) {
        s->per_rank = drop_last ? n / world : (n + world - 1) / world;
        if (s->per_rank == 0)
            return ddp_set_error(DDP_ERR_ARG, "sampler: --drop-last leaves rank %d with no samples (%lld samples for %d ranks)",
                                 rank, (long long)n, world);
    } else {
        /* whole shards to ranks, largest first, each to the least-loaded rank (ties: lower rank) */
        shard_sz *v = ddp_calloc((size_t)nshards, sizeof *v);
        int64_t *load = ddp_calloc((size_t)world, sizeof *load);
        int64_t *owner = ddp_calloc((size_t)nshards, sizeof *owner);
        if (!v || !load || !owner) {
            free(v); free(load); free(owner);
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
            st = ddp_set_error(DDP_ERR_ARG, "--sampling shard: rank %d gets no samples (%lld shards for %d ranks); use --sampling global or more shards",
                               empty, (long long)nshards, world);
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

ddp_status ddp_sampler_set_blocks(ddp_sampler *s, const int32_t *lens, int64_t dim, const int64_t *shard_first,
                                  int64_t nshards, double block_bytes, int64_t window)
{
    if (s->mode != DDP_SAMPLE_GLOBAL)
        return ddp_set_error(DDP_ERR_ARG, "--shuffle block needs --sampling global (shard sampling shuffles within each rank's shards)");
    if (!(block_bytes > 0) || window < 1)
        return ddp_set_error(DDP_ERR_ARG, "--shuffle-block-mb must be > 0 and --shuffle-window >= 1");
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
static void make_block_order(ddp_sampler *s)
{
    uint64_t key = ddp_mix64(epoch_key(s->seed, s->epoch) ^ 0xb10c);
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
        if (s->bcum[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* position p of a block-shuffled epoch: its window (window consecutive permuted blocks), a permutation of the
 * window's positions keyed by (seed, epoch, window), then the block and the sample inside it */
static int64_t block_order_at(const ddp_sampler *s, int64_t p)
{
    int64_t w = find_block(s, p, 0, s->nblocks) / s->window;
    int64_t b0 = w * s->window, b1 = b0 + s->window < s->nblocks ? b0 + s->window : s->nblocks;
    int64_t base = s->bcum[b0], m = s->bcum[b1] - base;
    int64_t r = base + ddp_permute(p - base, m, ddp_mix64(epoch_key(s->seed, s->epoch) ^ ddp_mix64((uint64_t)w + 0x77)));
    int64_t b = find_block(s, r, b0, b1);
    return s->blk_first[s->bperm[b]] + (r - s->bcum[b]);
}

/* sample at position p of the epoch's global order */
static int64_t order_at(const ddp_sampler *s, int64_t p)
{
    if (s->mode == DDP_SAMPLE_SEQUENTIAL) return p;
    if (s->nblocks > 0) return block_order_at(s, p);
    return ddp_permute(p, s->n, epoch_key(s->seed, s->epoch));
}

int64_t ddp_sampler_order(const ddp_sampler *s, int64_t p) { return order_at(s, p); }

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

/* The epoch's optimizer steps: greedy runs of the order within the global budget (pure: seed, epoch, budget). */
static ddp_status make_plan(ddp_sampler *s)
{
    s->nplan = 0;
    int64_t rows = 0;
    for (int64_t p = 0; p < s->n; p++) {
        int64_t len = s->lens[order_at(s, p)];
        if (p == 0 || rows + len > s->budget) { /* a new step starts here */
            if (s->nplan + 2 > s->cap_plan) {
                int64_t cap = s->cap_plan ? 2 * s->cap_plan : 1024;
                int64_t *np = ddp_realloc(s->plan, (size_t)cap * sizeof *np, 1);
                if (!np) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the batch plan");
                s->plan = np;
                s->cap_plan = cap;
            }
            s->plan[s->nplan++] = p;
            rows = 0;
        }
        rows += len;
    }
    s->plan[s->nplan] = s->n;
    s->steps = s->nplan * s->acc;
    return DDP_OK;
}

ddp_status ddp_sampler_set_budget(ddp_sampler *s, int64_t rows_per_rank, int accumulate, const int32_t *lens,
                                  int64_t max_len, double cost_sq)
{
    if (s->mode == DDP_SAMPLE_SHARD)
        return ddp_set_error(DDP_ERR_ARG, "--batch-rows needs --sampling global (shard sampling keeps sample-count batches)");
    if (rows_per_rank < 1) return ddp_set_error(DDP_ERR_ARG, "--batch-rows %lld: must be >= 1", (long long)rows_per_rank);
    if (rows_per_rank < max_len)
        return ddp_set_error(DDP_ERR_ARG, "--batch-rows %lld is smaller than the longest sample (%lld rows)", (long long)rows_per_rank,
                             (long long)max_len);
    s->budget = rows_per_rank * s->world * (accumulate < 1 ? 1 : accumulate);
    s->acc = accumulate < 1 ? 1 : accumulate;
    s->lens = lens;
    s->cost_sq = cost_sq;
    /* a bin gets at most the mean load plus one sample (LPT): rows_per_rank + max_len */
    s->max_rows = rows_per_rank + max_len;
    s->batch = s->max_rows;
    s->per_rank = 0;
    s->epoch = 0;
    if (s->nblocks > 0 && s->blk_epoch != s->epoch) make_block_order(s);
    return make_plan(s); /* sequential order: the plan of every epoch */
}

ddp_status ddp_sampler_set_epoch(ddp_sampler *s, int64_t epoch)
{
    int changed = s->epoch != epoch;
    s->epoch = epoch;
    if (s->nblocks > 0 && s->blk_epoch != epoch) make_block_order(s);
    if (s->budget > 0 && s->mode != DDP_SAMPLE_SEQUENTIAL && (changed || !s->plan)) return make_plan(s);
    return DDP_OK;
}

typedef struct {
    double cost;
    int64_t pos, len;
} lpt_item;

static int cmp_lpt(const void *a, const void *b)
{
    const lpt_item *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : (x > y);
}

/* This rank's share of micro-batch m of optimizer step os: longest-processing-time-first over the step's
 * samples (cost descending, position ascending), each to the cheapest of the world x acc bins that still has
 * room for its rows (lowest bin on ties); bin m x world + rank, in order of position. Every rank computes the
 * same assignment. Room: a bin holds at most max_rows rows (the loader's and the model's buffers; a sample has
 * at least one row, so at most max_rows samples too). The bin with the fewest rows always has room: the step's
 * rows fit the global budget, so that bin holds at most budget / bins = rows_per_rank rows, and a sample adds at
 * most max_len (max_rows = rows_per_rank + max_len). Balancing by cost alone could give a bin of short samples
 * far more rows than that, next to a bin with one long sample. */
static ddp_status budget_batch(const ddp_sampler *s, int64_t os, int64_t m, int64_t *indices, uint8_t *is_pad, int64_t *count)
{
    int64_t lo = s->plan[os], hi = s->plan[os + 1], k = hi - lo, nb = (int64_t)s->world * s->acc, mine = m * s->world + s->rank;
    lpt_item *it = ddp_calloc((size_t)k, sizeof *it);
    double *load = ddp_calloc((size_t)nb, sizeof *load);
    int64_t *rows = ddp_calloc((size_t)nb, sizeof *rows);
    int64_t *pos = ddp_calloc((size_t)k, sizeof *pos);
    ddp_status st = DDP_OK;
    if (!it || !load || !rows || !pos) {
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory splitting a batch of %lld samples over %lld bins", (long long)k, (long long)nb);
        goto done;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t len = s->lens[order_at(s, lo + i)];
        it[i] = (lpt_item){(double)len + s->cost_sq * (double)len * (double)len, lo + i, len};
    }
    qsort(it, (size_t)k, sizeof *it, cmp_lpt);
    int64_t n = 0;
    for (int64_t i = 0; i < k; i++) {
        int64_t len = it[i].len, best = -1, fewest = 0;
        for (int64_t b = 0; b < nb; b++) {
            if (rows[b] < rows[fewest]) fewest = b;
            if (rows[b] + len <= s->max_rows && (best < 0 || load[b] < load[best])) best = b;
        }
        if (best < 0) best = fewest; /* cannot happen (see above); the loader's check would name it */
        load[best] += it[i].cost;
        rows[best] += len;
        if (best == mine) pos[n++] = it[i].pos;
    }
    qsort(pos, (size_t)n, sizeof *pos, cmp_i64);
    for (int64_t i = 0; i < n; i++) {
        indices[i] = order_at(s, pos[i]);
        is_pad[i] = 0;
    }
    *count = n;
done:
    free(it), free(load), free(rows), free(pos);
    return st;
}

int64_t ddp_sampler_at(const ddp_sampler *s, int64_t j, uint8_t *is_pad)
{
    if (s->mode == DDP_SAMPLE_SHARD) {
        int64_t q = j % s->my_count;
        *is_pad = j >= s->my_count;
        int64_t l = ddp_permute(q, s->my_count, epoch_key(s->seed, s->epoch));
        int64_t lo = 0, hi = s->nmine - 1; /* owned shard holding local index l */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (s->mine_cum[mid] <= l) lo = mid;
            else hi = mid - 1;
        }
        return s->mine_first[lo] + (l - s->mine_cum[lo]);
    }
    int64_t p = j * s->world + s->rank;
    *is_pad = p >= s->n;
    p %= s->n;
    return order_at(s, p);
}

ddp_status ddp_sampler_batch(const ddp_sampler *s, int64_t step, int64_t *indices, uint8_t *is_pad, int64_t *count)
{
    if (s->epoch < 0) return ddp_set_error(DDP_ERR_INTERNAL, "sampler: no epoch set");
    if (step < 0 || step >= s->steps)
        return ddp_set_error(DDP_ERR_ARG, "sampler: step %lld out of range [0, %lld)", (long long)step, (long long)s->steps);
    if (s->budget > 0) return budget_batch(s, step / s->acc, step % s->acc, indices, is_pad, count);
    int64_t lo = step * s->batch, hi = lo + s->batch < s->per_rank ? lo + s->batch : s->per_rank;
    for (int64_t j = lo; j < hi; j++) indices[j - lo] = ddp_sampler_at(s, j, &is_pad[j - lo]);
    *count = hi - lo;
    return DDP_OK;
}
