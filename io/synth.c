/* synth.c — `mpiddp synth`: a deterministic variable-length dataset with a learnable class signal.
 * Sample `id` is a pure function of (seed, id): its label, its row count (uniform in [min, max]) and its
 * rows = class prototype + unit Gaussian noise. Shards are written round-robin by the ranks. */
#include "../mpi_ddp/ctx.h"
#include "../mpi_ddp/status.h"
#include "sampler.h"
#include "writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL 0.4 /* prototype scale: classes are ~3 noise-sigmas apart per row */

static double unif(uint64_t key, uint64_t ctr) { return ((ddp_mix64(key ^ ddp_mix64(ctr)) >> 11) + 0.5) * 0x1.0p-53; }

static double gauss(uint64_t key, uint64_t ctr)
{
    double u1 = unif(key, 2 * ctr), u2 = unif(key, 2 * ctr + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct {
    const ddp_synth_opts *o;
    int64_t first;       /* id of the shard's first sample */
    const int64_t *labels;
    float *proto;        /* [classes, dim] */
} synth_shard;

static uint64_t sample_key(uint64_t seed, int64_t id) { return ddp_mix64(seed * 0x9e3779b97f4a7c15ULL ^ ddp_mix64((uint64_t)id)); }

static void sample_meta(const ddp_synth_opts *o, int64_t id, int64_t *rows, int64_t *label)
{
    uint64_t k = sample_key(o->seed, id);
    int64_t span = o->max_rows - o->min_rows + 1;
    *rows = o->min_rows + (int64_t)(ddp_mix64(k ^ 0x11) % (uint64_t)span);
    *label = (int64_t)(ddp_mix64(k ^ 0x22) % (uint64_t)o->classes);
}

static ddp_status fill_rows(void *arg, int64_t i, float *rows, int64_t nrows)
{
    synth_shard *s = arg;
    const ddp_synth_opts *o = s->o;
    int64_t id = s->first + i;
    uint64_t k = sample_key(o->seed, id) ^ 0x33;
    const float *mu = s->proto + s->labels[i] * o->dim;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t d = 0; d < o->dim; d++)
            rows[r * o->dim + d] = mu[d] + (float)gauss(k, (uint64_t)(r * o->dim + d));
    return DDP_OK;
}

ddp_status ddp_synth(ddp_ctx *ctx, const ddp_synth_opts *o)
{
    if (o->samples < 1) return ddp_set_error(DDP_ERR_ARG, "--samples %lld: must be >= 1", (long long)o->samples);
    if (o->dim < 1) return ddp_set_error(DDP_ERR_ARG, "--dim %lld: must be >= 1", (long long)o->dim);
    if (o->classes < 2) return ddp_set_error(DDP_ERR_ARG, "--classes %lld: must be >= 2", (long long)o->classes);
    if (o->min_rows < 1 || o->max_rows < o->min_rows)
        return ddp_set_error(DDP_ERR_ARG, "--min-rows %lld --max-rows %lld: need 1 <= min <= max", (long long)o->min_rows,
                             (long long)o->max_rows);
    if (o->shards < 1 || o->shards > o->samples)
        return ddp_set_error(DDP_ERR_ARG, "--shards %lld: must be in [1, samples=%lld]", (long long)o->shards,
                             (long long)o->samples);
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_prepare_out_dir(o->out);
    DDP_CHECK(ddp_agree_status(ctx, st));

    float *proto = ddp_calloc((size_t)(o->classes * o->dim), sizeof *proto);
    if (!proto) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int64_t c = 0; c < o->classes && proto; c++)
        for (int64_t d = 0; d < o->dim; d++)
            proto[c * o->dim + d] = (float)(SIGNAL * gauss(ddp_mix64(o->seed ^ 0x5eed), (uint64_t)(c * o->dim + d)));
    for (int64_t k = ctx->topo.rank; k < o->shards && st == DDP_OK; k += ctx->topo.size) {
        int64_t lo = k * o->samples / o->shards, hi = (k + 1) * o->samples / o->shards, n = hi - lo;
        int64_t *off = ddp_calloc((size_t)n + 1, sizeof *off), *lab = ddp_calloc((size_t)n, sizeof *lab),
                *ids = ddp_calloc((size_t)n, sizeof *ids);
        if (!off || !lab || !ids) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < n && st == DDP_OK; i++) {
            int64_t rows;
            ids[i] = o->first_id + lo + i;
            sample_meta(o, ids[i], &rows, &lab[i]);
            off[i + 1] = off[i] + rows;
        }
        char name[64], path[4200];
        ddp_shard_name(name, sizeof name, k, o->shards);
        snprintf(path, sizeof path, "%s/%s", o->out, name);
        synth_shard ss = {.o = o, .first = o->first_id + lo, .labels = lab, .proto = proto};
        if (st == DDP_OK) st = ddp_shard_write(path, o->dim, o->classes, n, off, lab, ids, fill_rows, &ss);
        free(off);
        free(lab);
        free(ids);
    }
    free(proto);
    return ddp_agree_status(ctx, st);
}
