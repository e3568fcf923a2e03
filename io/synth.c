/* synth.c — `mpiddp synth` (docs/cli.md): a deterministic variable-length dataset with a learnable class signal. Sample
 * `id` is a pure function of (seed, id): its row count (uniform in [min, max]), its label and its rows (task "class":
 * fill_rows, task "order": fill_order). Shards are written round-robin by the ranks. */
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "io/sampler.h"
#include "io/writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL 0.4       /* prototype scale: classes are ~3 noise-sigmas apart per row */
#define ORDER_MARKER 2.0 /* order task: marker scale */
#define ORDER_NOISE 0.3  /* order task: per-feature noise sigma */

static double unif(uint64_t key, uint64_t ctr) { return ((ddp_mix64(key ^ ddp_mix64(ctr)) >> 11) + 0.5) * 0x1.0p-53; }

static double gauss(uint64_t key, uint64_t ctr)
{
    double u1 = unif(key, 2 * ctr), u2 = unif(key, 2 * ctr + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct {
    const ddp_synth_opts *o;
    int64_t first; /* id of the shard's first sample */
    const int64_t *labels;
    float *proto;     /* [classes, dim]: class prototypes, or the order task's markers */
    int64_t *scratch; /* order task: marker positions, grown to the longest sample */
    int64_t scratch_n;
} synth_shard;

static uint64_t sample_key(uint64_t seed, int64_t id)
{
    return ddp_mix64(seed * 0x9e3779b97f4a7c15ULL ^ ddp_mix64((uint64_t)id));
}

static int64_t sample_rows(const ddp_synth_opts *o, int64_t id)
{
    int64_t span = o->max_rows - o->min_rows + 1;
    return o->min_rows + (int64_t)(ddp_mix64(sample_key(o->seed, id) ^ 0x11) % (uint64_t)span);
}

/* Grows *buf to at least n elements (contents not kept). */
static ddp_status scratch_reserve(int64_t **buf, int64_t *cap, int64_t n)
{
    if (*cap >= n) return DDP_OK;
    free(*buf);
    *buf = ddp_calloc((size_t)n, sizeof **buf);
    *cap = *buf ? n : 0;
    return *buf ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory (%lld marker positions)", (long long)n);
}

/* Order task: a partial Fisher-Yates shuffle of the n row positions, keyed by the sample, leaves marker j
 * at row perm[j] (j < classes, distinct positions). Returns the label: the marker with the lowest row.
 * Needs perm[n] and n >= classes. Both the label and fill_rows use this, so they always agree. */
static int64_t order_layout(const ddp_synth_opts *o, int64_t id, int64_t n, int64_t *perm)
{
    uint64_t k = sample_key(o->seed, id) ^ 0x44;
    for (int64_t r = 0; r < n; r++) perm[r] = r;
    int64_t label = 0;
    for (int64_t j = 0; j < o->classes; j++) {
        int64_t pick = j + (int64_t)(ddp_mix64(k ^ ddp_mix64((uint64_t)j)) % (uint64_t)(n - j));
        int64_t t = perm[j];
        perm[j] = perm[pick];
        perm[pick] = t;
        if (perm[j] < perm[label]) label = j;
    }
    return label;
}

static ddp_status sample_meta(synth_shard *s, int64_t id, int64_t *rows, int64_t *label)
{
    const ddp_synth_opts *o = s->o;
    *rows = sample_rows(o, id);
    if (o->task == 1) {
        DDP_CHECK(scratch_reserve(&s->scratch, &s->scratch_n, *rows));
        *label = order_layout(o, id, *rows, s->scratch);
    } else {
        *label = (int64_t)(ddp_mix64(sample_key(o->seed, id) ^ 0x22) % (uint64_t)o->classes);
    }
    return DDP_OK;
}

/* Task "order": each of the C marker vectors appears exactly once at a random position, every other row is a zero
 * filler, all rows get N(0, 0.3^2) noise; the label is the marker that comes first. The multiset of rows has the same
 * distribution for every label, so only the row order carries the class. */
static ddp_status fill_order(synth_shard *s, int64_t i, float *rows, int64_t nrows)
{
    const ddp_synth_opts *o = s->o;
    int64_t id = s->first + i;
    uint64_t k = sample_key(o->seed, id) ^ 0x33;
    DDP_CHECK(scratch_reserve(&s->scratch, &s->scratch_n, nrows));
    int64_t label = order_layout(o, id, nrows, s->scratch);
    if (label != s->labels[i])
        return ddp_set_error(DDP_ERR_INTERNAL, "synth: sample %lld: order label %lld != %lld", (long long)id,
                             (long long)label, (long long)s->labels[i]);
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t d = 0; d < o->dim; d++)
            rows[r * o->dim + d] = (float)(ORDER_NOISE * gauss(k, (uint64_t)(r * o->dim + d)));
    for (int64_t j = 0; j < o->classes; j++) {
        float *row = rows + s->scratch[j] * o->dim;
        const float *m = s->proto + j * o->dim;
        for (int64_t d = 0; d < o->dim; d++) row[d] += m[d];
    }
    return DDP_OK;
}

/* Task "class": label uniform (sample_meta), rows = the class prototype + unit Gaussian noise, learnable from the row
 * mean. */
static ddp_status fill_rows(void *arg, int64_t i, float *rows, int64_t nrows)
{
    synth_shard *s = arg;
    const ddp_synth_opts *o = s->o;
    if (o->task == 1) return fill_order(s, i, rows, nrows);
    int64_t id = s->first + i;
    uint64_t k = sample_key(o->seed, id) ^ 0x33;
    const float *mu = s->proto + s->labels[i] * o->dim;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t d = 0; d < o->dim; d++) rows[r * o->dim + d] = mu[d] + (float)gauss(k, (uint64_t)(r * o->dim + d));
    return DDP_OK;
}

ddp_status ddp_synth_check(const ddp_synth_opts *o)
{
    if (o->samples < 1) return ddp_set_error(DDP_ERR_ARG, "--samples %lld: must be >= 1", (long long)o->samples);
    if (o->dim < 1) return ddp_set_error(DDP_ERR_ARG, "--dim %lld: must be >= 1", (long long)o->dim);
    if (o->classes < 2) return ddp_set_error(DDP_ERR_ARG, "--classes %lld: must be >= 2", (long long)o->classes);
    if (o->min_rows < 1 || o->max_rows < o->min_rows)
        return ddp_set_error(DDP_ERR_ARG, "--min-rows %lld --max-rows %lld: need 1 <= min <= max",
                             (long long)o->min_rows, (long long)o->max_rows);
    if (o->task != 0 && o->task != 1)
        return ddp_set_error(DDP_ERR_ARG, "--task %d: must be class (0) or order (1)", o->task);
    if (o->task == 1 && o->min_rows < o->classes)
        return ddp_set_error(DDP_ERR_ARG, "--task order needs --min-rows >= --classes (%lld < %lld)",
                             (long long)o->min_rows, (long long)o->classes);
    if (o->shards < 1 || o->shards > o->samples)
        return ddp_set_error(DDP_ERR_ARG, "--shards %lld: must be in [1, samples=%lld]", (long long)o->shards,
                             (long long)o->samples);
    return DDP_OK;
}

ddp_status ddp_synth(ddp_ctx *ctx, const ddp_synth_opts *o)
{
    ddp_status st = ddp_synth_check(o);
    if (st != DDP_OK) { /* every rank checked the same options */
        ddp_mark_error_shared();
        return st;
    }
    int64_t written = 0;
    if (ctx->topo.rank == 0) st = ddp_prepare_out_dir(o->out);
    st = ddp_agree_status(ctx, st);
    if (st != DDP_OK) return st;

    float *proto = ddp_calloc((size_t)(o->classes * o->dim), sizeof *proto);
    if (!proto) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int64_t c = 0; c < o->classes && proto; c++)
        for (int64_t d = 0; d < o->dim; d++)
            proto[c * o->dim + d] =
                o->task == 1 ? (float)(ORDER_MARKER * gauss(ddp_mix64(o->seed ^ 0x0de7), (uint64_t)(c * o->dim + d)))
                             : (float)(SIGNAL * gauss(ddp_mix64(o->seed ^ 0x5eed), (uint64_t)(c * o->dim + d)));
    for (int64_t k = ctx->topo.rank; k < o->shards && st == DDP_OK; k += ctx->topo.size) {
        int64_t lo = k * o->samples / o->shards, hi = (k + 1) * o->samples / o->shards, n = hi - lo;
        int64_t *off = ddp_calloc((size_t)n + 1, sizeof *off), *lab = ddp_calloc((size_t)n, sizeof *lab),
                *ids = ddp_calloc((size_t)n, sizeof *ids);
        if (!off || !lab || !ids) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        synth_shard ss = {.o = o, .first = o->first_id + lo, .labels = lab, .proto = proto};
        for (int64_t i = 0; i < n && st == DDP_OK; i++) {
            int64_t rows;
            ids[i] = o->first_id + lo + i;
            st = sample_meta(&ss, ids[i], &rows, &lab[i]);
            off[i + 1] = off[i] + rows;
        }
        char name[64], path[4200];
        ddp_shard_name(name, sizeof name, k, o->shards);
        snprintf(path, sizeof path, "%s/%s", o->out, name);
        if (st == DDP_OK) st = ddp_shard_write(path, o->dim, o->classes, n, off, lab, ids, fill_rows, &ss);
        if (st == DDP_OK) written++;
        free(ss.scratch);
        free(off);
        free(lab);
        free(ids);
    }
    free(proto);
    return ddp_out_finish(ctx, o->out, o->shards, written, st); /* all shards, or none (no partial dataset) */
}
