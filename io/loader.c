/* loader.c — double-buffered packed batches: a worker thread assembles the next batch from the mapped shards
 * while a step computes (what to read ahead beyond it: readahead.c); see loader.h. */
#include "io/loader.h"
#include "io/readahead.h"
#include "io/shard_cache.h"
#include "io/thread.h"

#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ddp_batch b;
    float *x;
    int64_t *offsets, *labels, *ids, *idx;
    uint8_t *pad;
    ddp_shard **held; /* each sample's shard, pinned while the batch is assembled (io/shard_cache.c) */
    int64_t *local;   /* each sample's index in its shard */
    int64_t step;     /* step held (or being assembled), -1 none */
    int ready;
    ddp_status st;
    char err[1024];
} slot;

struct ddp_loader {
    ddp_dataset *ds;
    ddp_sampler *sm;
    int64_t max_rows, max_samples, dim;
    slot slots[2];
    int threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int job;           /* slot index to assemble, -1 none */
    ddp_readahead *ra; /* the read-ahead policy of this loader's order (readahead.c) */
    int quit;
};

int64_t ddp_loader_max_rows(const ddp_loader *ld) { return ld->max_rows; }

/* Copies the batch's rows out of its shards, all pinned (kept open) until the whole batch is copied. */
static ddp_status copy_batch(ddp_loader *ld, slot *s, int64_t count)
{
    int64_t rows = 0;
    s->offsets[0] = 0;
    for (int64_t i = 0; i < count; i++) {
        const float *src;
        ddp_shard *sh = s->held[i];
        int64_t li = s->local[i];
        int64_t lo = 0, hi = 0;
        DDP_CHECK(ddp_shard_rows(sh, li, &lo, &hi)); /* a shard changed in place since validation stops here */
        int64_t nr = hi - lo;
        if (rows + nr > ld->max_rows) /* checked before the sample is read into the buffer */
            return ddp_set_error(
                DDP_ERR_INTERNAL,
                "batch of step %lld: sample %lld (%d of %lld) brings it to %lld rows, more than the loader's %lld",
                (long long)s->step, (long long)s->idx[i], (int)i + 1, (long long)count, (long long)(rows + nr),
                (long long)ld->max_rows);
        float *dst = s->x + rows * ld->dim;
        DDP_CHECK(ddp_shard_sample(sh, li, dst, &src, &nr, &s->labels[i], &s->ids[i]));
        if (src != dst) memcpy(dst, src, (size_t)(nr * ld->dim) * sizeof(float));
        rows += nr;
        s->offsets[i + 1] = rows;
    }
    s->b = (ddp_batch){.nsamples = count,
                       .nrows = rows,
                       .dim = ld->dim,
                       .offsets = s->offsets,
                       .labels = s->labels,
                       .sample_ids = s->ids,
                       .indices = s->idx,
                       .is_pad = s->pad,
                       .x = s->x};
    return DDP_OK;
}

static ddp_status assemble(ddp_loader *ld, slot *s)
{
    int64_t count = 0;
    DDP_CHECK(ddp_sampler_batch(ld->sm, s->step, s->idx, s->pad, &count));
    if (count > ld->max_samples)
        return ddp_set_error(DDP_ERR_INTERNAL, "batch of step %lld: %lld samples, more than the loader's %lld",
                             (long long)s->step, (long long)count, (long long)ld->max_samples);
    DDP_CHECK(ddp_dataset_acquire_batch(ld->ds, s->idx, count, s->held, s->local));
    ddp_status st = copy_batch(ld, s, count);
    ddp_dataset_release_batch(ld->ds, s->held, count);      /* the batch holds copies */
    if (st == DDP_OK) ddp_readahead_after(ld->ra, s->step); /* hint or populate what the next batches read */
    return st;
}

static void run_job(ddp_loader *ld, slot *s)
{
    s->st = assemble(ld, s);
    if (s->st != DDP_OK) snprintf(s->err, sizeof s->err, "%s", ddp_last_error());
}

static void *worker(void *arg)
{
    ddp_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (ld->job < 0 && !ld->quit) pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->quit) break;
        slot *s = &ld->slots[ld->job];
        ld->job = -1;
        pthread_mutex_unlock(&ld->mu);
        run_job(ld, s);
        pthread_mutex_lock(&ld->mu);
        s->ready = 1;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

static void kick(ddp_loader *ld, int k, int64_t step)
{
    slot *s = &ld->slots[k];
    s->step = step;
    s->ready = 0;
    if (!ld->threaded) {
        run_job(ld, s);
        s->ready = 1;
        return;
    }
    pthread_mutex_lock(&ld->mu);
    ld->job = k;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

static void wait_ready(ddp_loader *ld, slot *s)
{
    if (!ld->threaded || s->step < 0) return;
    pthread_mutex_lock(&ld->mu);
    while (!s->ready) pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
}

ddp_status ddp_loader_create(ddp_dataset *ds, ddp_sampler *sm, int threaded, ddp_loader **out)
{
    *out = NULL;
    ddp_loader *ld = ddp_calloc(1, sizeof *ld);
    if (!ld) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the batch loader (%zu bytes)", sizeof *ld);
    ld->ds = ds;
    ld->sm = sm;
    ld->dim = ds->info.dim;
    ld->max_rows = sm->max_rows;
    size_t xbytes = 0; /* a batch's features: overflow-checked, as the loader's sizes come from the data */
    if ((sm->max_rows <= 0 && __builtin_mul_overflow(sm->max_samples, ds->info.max_sample_rows, &ld->max_rows)) ||
        ld->max_rows < 0 || ld->dim < 0 || __builtin_mul_overflow((size_t)ld->max_rows, (size_t)ld->dim, &xbytes) ||
        __builtin_mul_overflow(xbytes, sizeof(float), &xbytes)) {
        ddp_status st = ddp_set_error(DDP_ERR_NOMEM,
                                      "batch buffers of %lld samples of up to %lld rows x %lld floats: more than this "
                                      "machine can address",
                                      (long long)sm->max_samples, (long long)ds->info.max_sample_rows,
                                      (long long)ld->dim);
        free(ld);
        return st;
    }
    ld->max_samples = sm->max_samples;
    /* shuffled orders read randomly: no kernel readahead, the loader prefetches exactly what it needs;
     * the sequential order (validation) reads the file front to back: aggressive readahead */
    if (ddp_knob_int(DDP_KNOB_MADVISE) == 0)
        ds->access_hint = DDP_ACCESS_NORMAL;
    else if (sm->nblocks > 0)
        ds->access_hint = DDP_ACCESS_NORMAL; /* block shuffle: window read-ahead (below) */
    else
        ds->access_hint = sm->mode == DDP_SAMPLE_SEQUENTIAL ? DDP_ACCESS_SEQUENTIAL : DDP_ACCESS_RANDOM;
    ld->job = -1;
    /* the buffers first: a failure here leaves no thread, mutex or slot to undo but memory */
    for (int k = 0; k < 2; k++) {
        slot *s = &ld->slots[k];
        s->step = -1;
        s->x = ddp_calloc((size_t)ld->max_rows * (size_t)ld->dim, sizeof(float));
        s->offsets = ddp_calloc((size_t)sm->max_samples + 1, sizeof(int64_t));
        s->labels = ddp_calloc((size_t)sm->max_samples, sizeof(int64_t));
        s->ids = ddp_calloc((size_t)sm->max_samples, sizeof(int64_t));
        s->idx = ddp_calloc((size_t)sm->max_samples, sizeof(int64_t));
        s->pad = ddp_calloc((size_t)sm->max_samples, 1);
        s->held = ddp_calloc((size_t)sm->max_samples, sizeof *s->held);
        s->local = ddp_calloc((size_t)sm->max_samples, sizeof *s->local);
        if (!s->x || !s->offsets || !s->labels || !s->ids || !s->idx || !s->pad || !s->held || !s->local) {
            ddp_status st = ddp_set_error(DDP_ERR_NOMEM,
                                          "out of memory for the batch buffers (2 x %lld rows x %lld floats, %.1f MiB)",
                                          (long long)ld->max_rows, (long long)ld->dim,
                                          2.0 * (double)ld->max_rows * (double)ld->dim * sizeof(float) / 1048576.0);
            ddp_loader_destroy(ld);
            return st;
        }
    }
    /* the sequential order is the same every epoch: its batches are checked against the open-shard budget here,
     * where the caller agrees the result (the other orders: at each epoch's start) */
    ddp_status cst = DDP_OK;
    if (sm->mode == DDP_SAMPLE_SEQUENTIAL && sm->epoch < 0) cst = ddp_sampler_set_epoch(sm, 0);
    if (cst == DDP_OK && sm->mode == DDP_SAMPLE_SEQUENTIAL) cst = ddp_shard_cache_check_batches(ds, sm, 0);
    if (cst != DDP_OK) {
        ddp_loader_destroy(ld);
        return cst;
    }
    int can = 0;
    if (threaded) {
        ddp_status st = ddp_dataset_preopen_for_threads(ds, &can);
        if (st != DDP_OK) {
            ddp_loader_destroy(ld);
            return st;
        }
    }
    /* threads last; each is marked only once it exists, so destroy undoes exactly what was made */
    if (threaded && can) ld->threaded = ddp_io_thread_start(&ld->mu, &ld->cv, &ld->thread, worker, ld);
    ddp_status st = ddp_readahead_create(ds, sm, ld->threaded, &ld->ra);
    if (st != DDP_OK) {
        ddp_loader_destroy(ld);
        return st;
    }
    *out = ld;
    return DDP_OK;
}

void ddp_loader_destroy(ddp_loader *ld)
{
    if (!ld) return;
    /* the batch worker first: a job it is running may still queue runs for the read-ahead thread */
    if (ld->threaded) {
        pthread_mutex_lock(&ld->mu);
        for (int k = 0; k < 2; k++) /* let a running job finish */
            while (ld->slots[k].step >= 0 && !ld->slots[k].ready) pthread_cond_wait(&ld->cv, &ld->mu);
        ddp_io_thread_stop(&ld->mu, &ld->cv, ld->thread, &ld->quit);
    }
    ddp_readahead_destroy(ld->ra); /* after the worker, whose jobs queue runs for it */
    for (int k = 0; k < 2; k++) {
        slot *s = &ld->slots[k];
        free(s->x);
        free(s->offsets);
        free(s->labels);
        free(s->ids);
        free(s->idx);
        free(s->pad);
        free(s->held);
        free(s->local);
    }
    free(ld);
}

ddp_status ddp_loader_start_epoch(ddp_loader *ld, int64_t epoch, int64_t first_step)
{
    for (int k = 0; k < 2; k++) wait_ready(ld, &ld->slots[k]); /* drain the previous epoch's job */
    for (int k = 0; k < 2; k++) ld->slots[k].step = -1;
    DDP_CHECK(ddp_sampler_set_epoch(ld->sm, epoch));
    if (ld->sm->mode != DDP_SAMPLE_SEQUENTIAL) DDP_CHECK(ddp_shard_cache_check_batches(ld->ds, ld->sm, first_step));
    if (ld->threaded) ddp_shard_cache_drop_hdf5(); /* room the worker could not make: it must not call HDF5 */
    if (first_step < ld->sm->steps) kick(ld, (int)(first_step & 1), first_step);
    return DDP_OK;
}

ddp_status ddp_loader_next(ddp_loader *ld, int64_t step, const ddp_batch **out)
{
    slot *s = &ld->slots[step & 1];
    if (s->step != step)
        return ddp_set_error(DDP_ERR_INTERNAL, "loader: step %lld requested out of order", (long long)step);
    wait_ready(ld, s);
    if (s->st != DDP_OK) return ddp_set_error(s->st, "%s", s->err);
    slot *o = &ld->slots[(step + 1) & 1];
    wait_ready(ld, o);
    if (step + 1 < ld->sm->steps) kick(ld, (int)((step + 1) & 1), step + 1);
    *out = &s->b;
    return DDP_OK;
}

const ddp_batch *ddp_loader_peek_cursor(void *cursor)
{
    const ddp_loader_cursor *c = cursor;
    return c->step >= 0 ? ddp_loader_peek(c->ld, c->step) : NULL;
}

const ddp_batch *ddp_loader_peek(ddp_loader *ld, int64_t step)
{
    slot *s = &ld->slots[step & 1];
    if (ld->threaded) pthread_mutex_lock(&ld->mu);
    int ready = s->step == step && s->ready && s->st == DDP_OK;
    if (ld->threaded) pthread_mutex_unlock(&ld->mu);
    return ready ? &s->b : NULL;
}

ddp_dataset *ddp_loader_dataset(const ddp_loader *ld) { return ld ? ld->ds : NULL; }
