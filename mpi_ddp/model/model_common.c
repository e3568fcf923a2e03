/* model_common.c — the pieces the built-in models share (model_common.h): the parameter table of named
 * tensors over one flat buffer and ddp_model_num_params, parameter init on the host then one upload, a
 * step's I/O on the backend (checking and staging a batch, collecting loss/prob/pred with one download),
 * releasing backend buffers, and the clock of the models' step timings. */
#include "mpi_ddp/model/model_common.h"

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
ddp_status ddp_model_io_alloc(ddp_backend *be, ddp_model_io *io, int64_t D, int64_t maxR, int64_t maxB)
{
    ddp_status st = DDP_OK;
    io->D = D;
    io->maxR = maxR;
    io->maxB = maxB;
    DDP_TRY(DDP_BE_ALLOC(be, &io->out, (size_t)maxB * (2 * sizeof(float) + sizeof(int64_t))));
    io->loss = io->out;
    io->prob = io->loss + maxB;
    io->pred = (int64_t *)(io->prob + maxB); /* 8 * maxB bytes in: aligned */
    if (!be->host_memory) {
        DDP_MODEL_ALLOC(be, io->x_dev, maxR * D);
        DDP_MODEL_ALLOC(be, io->off_dev, maxB + 1);
        DDP_MODEL_ALLOC(be, io->lab_dev, maxB);
        io->h_out = ddp_calloc((size_t)maxB, 2 * sizeof(float) + sizeof(int64_t));
        if (!io->h_out) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    }
done:
    return st;
}

ddp_status ddp_model_io_check(const ddp_model_io *io, const ddp_batch *b)
{
    if (b->nrows > io->maxR || b->nsamples > io->maxB)
        return ddp_set_error(DDP_ERR_ARG, "batch of %lld samples / %lld rows exceeds the model's workspace (%lld / %lld)",
                             (long long)b->nsamples, (long long)b->nrows, (long long)io->maxB, (long long)io->maxR);
    if (b->dim != io->D)
        return ddp_set_error(DDP_ERR_ARG, "batch has D=%lld, model expects D=%lld", (long long)b->dim, (long long)io->D);
    return DDP_OK;
}

ddp_status ddp_model_io_stage(ddp_backend *be, ddp_model_io *io, const ddp_batch *b, ddp_staged *s)
{
    if (be->host_memory) {
        *s = (ddp_staged){.x = b->x, .off = b->offsets, .lab = b->labels};
        return DDP_OK;
    }
    DDP_CHECK(be->upload_async(be, io->x_dev, b->x, (size_t)(b->nrows * io->D) * sizeof(float)));
    DDP_CHECK(be->upload_async(be, io->off_dev, b->offsets, (size_t)(b->nsamples + 1) * sizeof(int64_t)));
    DDP_CHECK(be->upload_async(be, io->lab_dev, b->labels, (size_t)b->nsamples * sizeof(int64_t)));
    *s = (ddp_staged){.x = io->x_dev, .off = io->off_dev, .lab = io->lab_dev};
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
    void *bufs[] = {io->out, io->x_dev, io->off_dev, io->lab_dev};
    ddp_model_release_all(be, bufs, sizeof bufs / sizeof bufs[0]);
    free(io->h_out);
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
