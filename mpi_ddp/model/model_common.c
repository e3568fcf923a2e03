/* model_common.c — the pieces the built-in models share (see model_common.h), and ddp_model_num_params. */
#include "mpi_ddp/model/model_common.h"
#include "mpi_ddp/core/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ parameter table */
ddp_status ddp_param_table_alloc(ddp_param_table *t, int cap)
{
    *t = (ddp_param_table){0};
    t->spec = ddp_calloc((size_t)cap, sizeof *t->spec);
    t->names = ddp_calloc((size_t)cap, sizeof *t->names);
    t->off = ddp_calloc((size_t)cap + 1, sizeof *t->off);
    if (!t->spec || !t->names || !t->off) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    return DDP_OK;
}

int ddp_param_table_add(ddp_param_table *t, const char *name, int64_t d0, int64_t d1)
{
    int k = t->n++;
    snprintf(t->names[k], sizeof t->names[k], "%s", name);
    t->spec[k] = (ddp_tensor_spec){.name = t->names[k], .ndim = d1 ? 2 : 1, .shape = {d0, d1}};
    t->off[k + 1] = t->off[k] + d0 * (d1 ? d1 : 1);
    return k;
}

void ddp_param_table_free(ddp_param_table *t)
{
    free(t->spec);
    free(t->names);
    free(t->off);
    *t = (ddp_param_table){0};
}

int64_t ddp_model_num_params(const ddp_model *m)
{
    if (!m || !m->tensors) return 0;
    int64_t n = 0;
    for (int t = 0; t < m->ntensors; t++) {
        int64_t k = 1;
        for (int d = 0; d < m->tensors[t].ndim; d++) k *= m->tensors[t].shape[d];
        n += k;
    }
    return n;
}

ddp_status ddp_model_init_params(ddp_backend *be, const ddp_param_table *t, float *params, uint64_t seed,
                                 ddp_param_fill_fn fill, const void *self)
{
    int64_t n = t->off[t->n];
    float *host = be->host_memory ? params : ddp_calloc((size_t)n, sizeof(float));
    if (!host) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < t->n; k++) fill(self, k, host + t->off[k], seed);
    ddp_status st = DDP_OK;
    if (!be->host_memory) {
        st = be->upload(be, params, host, (size_t)n * sizeof(float));
        free(host);
    }
    return st;
}

/* ------------------------------------------------------------------ a step's I/O */
ddp_status ddp_model_io_alloc(ddp_backend *be, ddp_model_io *io, int64_t D, int64_t maxR, int64_t maxB, int packing)
{
    ddp_status st = DDP_OK;
    io->D = D;
    io->maxR = maxR;
    io->maxB = maxB;
    io->packing = packing;
    io->cur = io->pf = -1;
    DDP_TRY(DDP_BE_ALLOC(be, &io->out, (size_t)maxB * (2 * sizeof(float) + sizeof(int64_t))));
    io->loss = io->out;
    io->prob = io->loss + maxB;
    io->pred = (int64_t *)(io->prob + maxB); /* 8 * maxB bytes in: aligned */
    if (packing) {
        io->seg_h = ddp_calloc((size_t)(maxR + DDP_ATT_TILES_MAX(maxR, maxB)), sizeof *io->seg_h);
        if (!io->seg_h) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    }
    if (be->host_memory) return DDP_OK;
    io->h_out = ddp_calloc((size_t)maxB, 2 * sizeof(float) + sizeof(int64_t));
    if (!io->h_out) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    /* MPIDDP_CUDA_PREFETCH=0: batches uploaded on the compute stream, one at a time (no copy stream, no overlap) */
    io->staged = be->stage && ddp_knob_int(DDP_KNOB_CUDA_PREFETCH) != 0;
    for (int k = 0; k < 1 + io->staged; k++) {
        ddp_io_set *t = &io->set[k];
        DDP_MODEL_ALLOC(be, t->x, maxR * D);
        DDP_MODEL_ALLOC(be, t->off, maxB + 1);
        DDP_MODEL_ALLOC(be, t->lab, maxB);
        if (packing) {
            DDP_MODEL_ALLOC(be, t->sid, maxB);
            DDP_MODEL_ALLOC(be, t->seg, maxR + DDP_ATT_TILES_MAX(maxR, maxB));
        }
    }
    if (io->staged) { /* the pinned slots: every region of the largest batch, each 256-byte aligned */
        size_t bytes = (size_t)(maxR * D) * sizeof(float) + (size_t)(2 * maxB + 1) * sizeof(int64_t) + 5 * 256;
        if (packing) bytes += (size_t)(maxB + maxR + DDP_ATT_TILES_MAX(maxR, maxB)) * sizeof(int64_t);
        DDP_TRY(be->stage_reserve(be, bytes));
        io->pf_meta = ddp_calloc((size_t)(3 * maxB + 1), sizeof *io->pf_meta);
        if (!io->pf_meta) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    }
done:
    return st;
}

ddp_status ddp_model_io_check(const ddp_model_io *io, const ddp_batch *b)
{
    if (b->nrows > io->maxR || b->nsamples > io->maxB)
        return ddp_set_error(DDP_ERR_ARG,
                             "batch of %lld samples / %lld rows exceeds the model's workspace (%lld / %lld)",
                             (long long)b->nsamples, (long long)b->nrows, (long long)io->maxB, (long long)io->maxR);
    if (b->dim != io->D)
        return ddp_set_error(DDP_ERR_ARG, "batch has D=%lld, model expects D=%lld", (long long)b->dim,
                             (long long)io->D);
    return DDP_OK;
}

/* The row -> sample map of b into seg_h (packing), its attention tiles after it; returns their count. */
static int64_t fill_seg(ddp_model_io *io, const ddp_batch *b)
{
    for (int64_t s = 0; s < b->nsamples; s++)
        for (int64_t r = b->offsets[s]; r < b->offsets[s + 1]; r++) io->seg_h[r] = s;
    return ddp_packing_tiles(b->offsets, b->nsamples, io->seg_h + b->nrows);
}

static ddp_staged staged_of(const ddp_model_io *io, int k, const ddp_batch *b, int64_t tiles)
{
    const ddp_io_set *t = &io->set[k];
    return (ddp_staged){.x = t->x,
                        .off = t->off,
                        .lab = t->lab,
                        .sid = t->sid,
                        .seg = t->seg,
                        .tile = t->seg ? t->seg + b->nrows : NULL,
                        .tiles = tiles};
}

/* Uploads b (its row -> sample map and its `tiles` tiles already in seg_h) into set k through the copy stream. */
static ddp_status stage_into(ddp_backend *be, ddp_model_io *io, const ddp_batch *b, int k, int64_t tiles)
{
    const ddp_io_set *t = &io->set[k];
    int64_t B = b->nsamples, R = b->nrows;
    ddp_copy cp[5] = {{t->x, b->x, (size_t)(R * io->D) * sizeof(float)},
                      {t->off, b->offsets, (size_t)(B + 1) * sizeof(int64_t)},
                      {t->lab, b->labels, (size_t)B * sizeof(int64_t)},
                      {t->sid, b->sample_ids, (size_t)B * sizeof(int64_t)},
                      {t->seg, io->seg_h, (size_t)(R + tiles) * sizeof(int64_t)}};
    return be->stage(be, k, cp, io->packing ? 5 : 3);
}

/* 1 when b is the batch prefetched (the same buffers, sizes, offsets, labels and sample ids). */
static int is_prefetched(const ddp_model_io *io, const ddp_batch *b)
{
    int64_t B = b->nsamples;
    if (io->pf < 0 || b->x != io->pf_x || b->offsets != io->pf_ptr[0] || b->labels != io->pf_ptr[1] ||
        b->sample_ids != io->pf_ptr[2] || B != io->pf_B || b->nrows != io->pf_R)
        return 0;
    return !memcmp(io->pf_meta, b->offsets, (size_t)(B + 1) * sizeof(int64_t)) &&
           !memcmp(io->pf_meta + B + 1, b->labels, (size_t)B * sizeof(int64_t)) &&
           !memcmp(io->pf_meta + 2 * B + 1, b->sample_ids, (size_t)B * sizeof(int64_t));
}

ddp_status ddp_model_io_stage(ddp_backend *be, ddp_model_io *io, const ddp_batch *b, ddp_staged *s)
{
    /* the row -> sample map on the host: built here unless this batch was prefetched (ddp_model_io_done built and
     * staged it then) */
    int pre = io->staged && is_prefetched(io, b);
    int64_t T = !io->packing ? 0 : pre ? ddp_packing_tiles(b->offsets, b->nsamples, NULL) : fill_seg(io, b);
    if (be->host_memory) {
        *s = (ddp_staged){.x = b->x,
                          .off = b->offsets,
                          .lab = b->labels,
                          .sid = b->sample_ids,
                          .seg = io->seg_h,
                          .tile = io->seg_h ? io->seg_h + b->nrows : NULL,
                          .tiles = T};
        return DDP_OK;
    }
    if (!io->staged) {
        const ddp_io_set *t = &io->set[0];
        DDP_CHECK(be->upload_async(be, t->x, b->x, (size_t)(b->nrows * io->D) * sizeof(float)));
        DDP_CHECK(be->upload_async(be, t->off, b->offsets, (size_t)(b->nsamples + 1) * sizeof(int64_t)));
        DDP_CHECK(be->upload_async(be, t->lab, b->labels, (size_t)b->nsamples * sizeof(int64_t)));
        if (io->packing) {
            DDP_CHECK(be->upload_async(be, t->sid, b->sample_ids, (size_t)b->nsamples * sizeof(int64_t)));
            DDP_CHECK(be->upload_async(be, t->seg, io->seg_h, (size_t)(b->nrows + T) * sizeof(int64_t)));
        }
        *s = staged_of(io, 0, b, T);
        return DDP_OK;
    }
    int k = io->cur < 0 ? 0 : 1 - io->cur; /* the sets in turn: the prefetch went to the next one too */
    if (!pre) DDP_CHECK(stage_into(be, io, b, k, T));
    io->pf = -1;
    DDP_CHECK(be->stage_acquire(be, k));
    io->cur = k;
    *s = staged_of(io, k, b, T);
    return DDP_OK;
}

void ddp_model_io_set_next(ddp_model_io *io, ddp_next_batch_fn next, void *arg)
{
    io->next = next;
    io->next_arg = arg;
    if (!next) io->pf = -1;
}

ddp_status ddp_model_io_done(ddp_backend *be, ddp_model_io *io, int prefetch)
{
    ddp_next_batch_fn next = io->next;
    io->next = NULL; /* one batch per ddp_model.prefetch call */
    if (!io->staged || io->cur < 0) return DDP_OK;
    DDP_CHECK(be->stage_release(be, io->cur));
    const ddp_batch *nb = prefetch && next ? next(io->next_arg) : NULL;
    if (!nb || nb->nrows > io->maxR || nb->nsamples > io->maxB || nb->dim != io->D)
        return DDP_OK; /* none ready, or one its step will reject */
    int k = 1 - io->cur;
    int64_t B = nb->nsamples;
    int64_t T = io->packing ? fill_seg(io, nb) : 0;
    DDP_CHECK(stage_into(be, io, nb, k, T));
    io->pf = k;
    io->pf_x = nb->x;
    io->pf_ptr[0] = nb->offsets, io->pf_ptr[1] = nb->labels, io->pf_ptr[2] = nb->sample_ids;
    io->pf_B = B, io->pf_R = nb->nrows;
    memcpy(io->pf_meta, nb->offsets, (size_t)(B + 1) * sizeof(int64_t));
    memcpy(io->pf_meta + B + 1, nb->labels, (size_t)B * sizeof(int64_t));
    memcpy(io->pf_meta + 2 * B + 1, nb->sample_ids, (size_t)B * sizeof(int64_t));
    return DDP_OK;
}

ddp_status ddp_model_elapsed(ddp_backend *be, int k0, int k1, double *acc)
{
    double s = 0.0;
    if (be->elapsed) DDP_CHECK(be->elapsed(be, k0, k1, &s));
    *acc += s;
    return DDP_OK;
}

/* A step's per-sample results into out: `dev_out` is one block on the backend holding loss [maxB], prob [maxB]
 * and pred [maxB] (int64); device backends download it once into h_out (same layout). */
static ddp_status collect(ddp_backend *be, const void *dev_out, void *h_out, int64_t maxB, int64_t B,
                          ddp_forward_out *out)
{
    const float *loss = dev_out;
    if (!be->host_memory && B > 0) { /* loss, prob and pred in one download (one host synchronisation) */
        DDP_CHECK(be->download(be, h_out, dev_out, (size_t)maxB * 8 + (size_t)B * sizeof(int64_t)));
        loss = h_out;
    }
    const float *prob = loss + maxB;
    const int64_t *pred = (const int64_t *)(prob + maxB);
    double s = 0.0;
    for (int64_t i = 0; i < B; i++) s += loss[i];
    out->loss_sum = s;
    out->count = B;
    if (B > 0 && out->loss) memcpy(out->loss, loss, (size_t)B * sizeof(float));
    if (B > 0 && out->prob) memcpy(out->prob, prob, (size_t)B * sizeof(float));
    if (B > 0 && out->pred) memcpy(out->pred, pred, (size_t)B * sizeof(int64_t));
    return DDP_OK;
}

ddp_status ddp_model_io_collect(ddp_backend *be, const ddp_model_io *io, int64_t B, ddp_forward_out *out)
{
    return collect(be, io->out, io->h_out, io->maxB, B, out);
}

void ddp_model_io_release(ddp_backend *be, ddp_model_io *io)
{
    void *bufs[] = {io->out};
    ddp_model_release_all(be, bufs, 1);
    for (int k = 0; k < 2; k++) {
        ddp_io_set *t = &io->set[k];
        void *set[] = {t->x, t->off, t->lab, t->sid, t->seg};
        ddp_model_release_all(be, set, sizeof set / sizeof set[0]);
    }
    free(io->h_out);
    free(io->seg_h);
    free(io->pf_meta);
    *io = (ddp_model_io){0};
}

/* ------------------------------------------------------------------ buffers and timing */
void ddp_model_release_all(ddp_backend *be, void *const *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bufs[i]) be->release(be, bufs[i]);
}

double ddp_model_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
