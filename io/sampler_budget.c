/* sampler_budget.c — token-budget batches (--batch-rows): the epoch's plan of optimizer steps within the
 * global budget, and each step's split over ranks and micro-batches by cost, within what a rank's buffers
 * hold. Pure functions of seed, epoch and the global budget: every rank computes the same. */
#include "io/sampler_priv.h"

#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <stdlib.h>

/* The epoch's optimizer steps: greedy runs of the order within the global budget (pure: seed, epoch, budget). */
ddp_status ddp_sampler_make_plan(ddp_sampler *s)
{
    s->nplan = 0;
    int64_t rows = 0;
    for (int64_t p = 0; p < s->n; p++) {
        int64_t len = s->lens[ddp_sampler_order(s, p)];
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
    int cli = s->cli_names; /* the lines name --batch-rows or cfg.batch_rows (optname.h) */
    char o[96], g[96];
    if (s->mode == DDP_SAMPLE_SHARD)
        return ddp_set_error(DDP_ERR_ARG, "%s needs %s (shard sampling keeps sample-count batches)",
                             ddp_opt_name(cli, DDP_OPT_BATCH_ROWS),
                             ddp_opt_set(g, sizeof g, cli, DDP_OPT_SAMPLING, "global"));
    if (rows_per_rank < 1)
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1",
                             ddp_opt_fmt(o, sizeof o, cli, DDP_OPT_BATCH_ROWS, "%lld", (long long)rows_per_rank));
    if (rows_per_rank < max_len)
        return ddp_set_error(DDP_ERR_ARG, "%s is smaller than the longest sample (%lld rows)",
                             ddp_opt_fmt(o, sizeof o, cli, DDP_OPT_BATCH_ROWS, "%lld", (long long)rows_per_rank),
                             (long long)max_len);
    s->budget = rows_per_rank * s->world * (accumulate < 1 ? 1 : accumulate);
    s->acc = accumulate < 1 ? 1 : accumulate;
    s->lens = lens;
    s->cost_sq = cost_sq;
    /* a bin gets at most the mean load plus one sample (LPT): rows_per_rank + max_len */
    s->max_rows = rows_per_rank + max_len;
    int64_t total = 0; /* a micro-batch never holds more than the whole set: a budget past it sizes no more */
    for (int64_t i = 0; i < s->n; i++) total += lens[i];
    if (s->max_rows > total) s->max_rows = total;
    s->batch = 0;
    s->max_samples = s->max_rows < s->n ? s->max_rows : s->n; /* a sample has at least one row */
    s->per_rank = 0;
    s->epoch = 0;
    if (s->nblocks > 0 && s->blk_epoch != s->epoch) ddp_sampler_make_block_order(s);
    return ddp_sampler_make_plan(s); /* sequential order: the plan of every epoch */
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

/* The split of optimizer step os over its world x acc bins: longest-processing-time-first over the step's
 * samples (cost descending, position ascending), each to the cheapest bin that still has room for its rows
 * (lowest bin on ties). Every rank computes the same assignment; this rank's share of micro-batch m is bin
 * m x world + rank, in order of position. Room: a bin holds at most max_rows rows (the loader's and the model's
 * buffers; a sample has at least one row, so at most max_rows samples too). The bin with the fewest rows always has
 * room: the step's rows fit the global budget, so that bin holds at most budget / bins = rows_per_rank rows, and a
 * sample adds at most max_len (max_rows = rows_per_rank + max_len). Balancing by cost alone could give a bin of short
 * samples far more rows than that, next to a bin with one long sample. The step's k samples come back as items sorted
 * by cost (*items) with each one's bin (*bins), both allocated (the caller frees them). */
static ddp_status lpt_split(const ddp_sampler *s, int64_t os, lpt_item **items, int64_t **bins, int64_t *k)
{
    int64_t lo = s->plan[os], hi = s->plan[os + 1], nb = (int64_t)s->world * s->acc;
    *k = hi - lo;
    lpt_item *it = *items = ddp_calloc((size_t)(*k > 0 ? *k : 1), sizeof *it);
    int64_t *bin = *bins = ddp_calloc((size_t)(*k > 0 ? *k : 1), sizeof *bin);
    double *load = ddp_calloc((size_t)nb, sizeof *load);
    int64_t *rows = ddp_calloc((size_t)nb, sizeof *rows);
    ddp_status st = DDP_OK;
    if (!it || !bin || !load || !rows)
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory splitting a batch of %lld samples over %lld bins",
                           (long long)*k, (long long)nb);
    for (int64_t i = 0; st == DDP_OK && i < *k; i++) {
        int64_t len = s->lens[ddp_sampler_order(s, lo + i)];
        it[i] = (lpt_item){(double)len + s->cost_sq * (double)len * (double)len, lo + i, len};
    }
    if (st == DDP_OK) qsort(it, (size_t)*k, sizeof *it, cmp_lpt);
    for (int64_t i = 0; st == DDP_OK && i < *k; i++) {
        int64_t len = it[i].len, best = -1, fewest = 0;
        for (int64_t b = 0; b < nb; b++) {
            if (rows[b] < rows[fewest]) fewest = b;
            if (rows[b] + len <= s->max_rows && (best < 0 || load[b] < load[best])) best = b;
        }
        if (best < 0) best = fewest; /* cannot happen (see above); the loader's check would name it */
        load[best] += it[i].cost;
        rows[best] += len;
        bin[i] = best;
    }
    free(load), free(rows);
    return st;
}

ddp_status ddp_sampler_budget_batch(const ddp_sampler *s, int64_t os, int64_t m, int64_t *indices, uint8_t *is_pad,
                                    int64_t *count)
{
    lpt_item *it = NULL;
    int64_t *bin = NULL, k = 0, n = 0, mine = m * s->world + s->rank;
    ddp_status st = lpt_split(s, os, &it, &bin, &k);
    int64_t *pos = st == DDP_OK ? ddp_calloc((size_t)(k > 0 ? k : 1), sizeof *pos) : NULL;
    if (st == DDP_OK && !pos)
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for a batch of %lld samples", (long long)k);
    for (int64_t i = 0; st == DDP_OK && i < k; i++)
        if (bin[i] == mine) pos[n++] = it[i].pos;
    if (st == DDP_OK) {
        qsort(pos, (size_t)n, sizeof *pos, cmp_i64);
        for (int64_t i = 0; i < n; i++) {
            indices[i] = ddp_sampler_order(s, pos[i]);
            is_pad[i] = 0;
        }
        *count = n;
    }
    free(it), free(bin), free(pos);
    return st;
}

ddp_status ddp_sampler_budget_step_max(const ddp_sampler *s, int64_t os, int64_t *rows, int64_t *samples)
{
    lpt_item *it = NULL;
    int64_t *bin = NULL, k = 0;
    ddp_status st = lpt_split(s, os, &it, &bin, &k);
    for (int64_t m = 0; st == DDP_OK && m < s->acc; m++) { /* this rank's bin of each micro-batch */
        int64_t mine = m * s->world + s->rank, r = 0, n = 0;
        for (int64_t i = 0; i < k; i++)
            if (bin[i] == mine) r += it[i].len, n++;
        if (r > *rows) *rows = r;
        if (n > *samples) *samples = n;
    }
    free(it), free(bin);
    return st;
}
