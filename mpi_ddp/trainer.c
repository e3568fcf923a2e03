/* trainer.c — the training loop: epochs of optimizer steps (micro-batches, bucketed gradient sync,
 * clipping, AdamW), exact validation after each epoch, metric sync points, metrics CSV files, run.json,
 * last.h5, and the progress line. Every collective is reached by every rank on every path. */
#include "../io/dataset.h"
#include "../io/loader.h"
#include "backend.h"
#include "checkpoint.h"
#include "evaluate.h"
#include "ctx.h"
#include "metrics.h"
#include "runinfo.h"
#include "status.h"
#include "sync.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { CTL_COUNT, CTL_STOP, N_CTL };

void ddp_train_config_default(ddp_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->out_dir = "run";
    c->epochs = 3;
    c->batch_size = 32;
    c->accumulate = 1;
    c->lr = 1e-3;
    c->weight_decay = 0.01;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->seed = 0;
    c->log_every = 50;
    c->bucket_mb = 25.0;
    c->device = DDP_DEVICE_CPU;
    c->progress = 1;
    c->hidden = 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    ddp_ctx *ctx;
    const ddp_train_config *cfg;
    ddp_model *model;
    ddp_backend *be;
    int64_t n;                 /* parameters */
    float *params, *grads, *m, *v;
    float *h_params, *h_m, *h_v;
    int64_t *toff;             /* tensor offsets [ntensors+1] */
    ddp_sync *sync;
    ddp_metrics *metrics;
    ddp_csv *csv, *csv_rank;
    int64_t global_step, optim_step;
    ddp_metric_row row, lrow;
    int tty;
    char ckpt_dir[4200];
    ddp_eval_acc eval;
} trainer;

static ddp_status check_config(const ddp_train_config *c)
{
    if (!c->out_dir || !*c->out_dir) return ddp_set_error(DDP_ERR_ARG, "--out: a run directory is required");
    if (c->epochs < 1) return ddp_set_error(DDP_ERR_ARG, "--epochs %d: must be >= 1", c->epochs);
    if (c->batch_size < 1) return ddp_set_error(DDP_ERR_ARG, "--batch-size %d: must be >= 1", c->batch_size);
    if (c->accumulate < 1) return ddp_set_error(DDP_ERR_ARG, "--accumulate %d: must be >= 1", c->accumulate);
    if (!(c->lr > 0) || !isfinite(c->lr)) return ddp_set_error(DDP_ERR_ARG, "--lr %g: must be a positive number", c->lr);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return ddp_set_error(DDP_ERR_ARG, "--weight-decay %g: must be >= 0", c->weight_decay);
    if (!(c->grad_clip >= 0)) return ddp_set_error(DDP_ERR_ARG, "--grad-clip %g: must be >= 0", c->grad_clip);
    if (c->log_every < 1) return ddp_set_error(DDP_ERR_ARG, "--log-every %d: must be >= 1", c->log_every);
    if (!(c->bucket_mb > 0)) return ddp_set_error(DDP_ERR_ARG, "--bucket-mb %g: must be > 0", c->bucket_mb);
    return DDP_OK;
}

static ddp_status mkdir_p(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return ddp_set_error(DDP_ERR_IO, "%s: mkdir: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return ddp_set_error(DDP_ERR_IO, "%s: mkdir: %s", p, strerror(errno));
    if (access(p, W_OK) != 0) return ddp_set_error(DDP_ERR_IO, "%s: not writable: %s", p, strerror(errno));
    return DDP_OK;
}

/* Steps every rank will run: computed locally, then checked collectively. */
static ddp_status agree_steps(ddp_ctx *ctx, int64_t mine, const char *what)
{
    int64_t v[2] = {mine, -mine};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MIN, ctx->world));
    ddp_status st = DDP_OK;
    if (v[0] != -v[1])
        st = ddp_set_error(DDP_ERR_MISMATCH, "%s: ranks disagree on the number of steps (%lld..%lld)", what,
                           (long long)v[0], (long long)-v[1]);
    else if (v[0] < 1)
        st = ddp_set_error(DDP_ERR_ARG, "%s: no steps to run", what);
    if (st != DDP_OK) ddp_mark_error_shared();
    return st;
}

static void progress(trainer *t, int epoch, int64_t step, int64_t steps, double loss, double sps, double eta)
{
    if (!t->cfg->progress || t->ctx->topo.rank != 0) return;
    int m = (int)(eta / 60), s = (int)eta % 60;
    if (t->tty)
        fprintf(stderr, "\r\033[Kepoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %d:%02d", epoch + 1, t->cfg->epochs,
                (long long)step, (long long)steps, loss, sps, m, s);
    else
        fprintf(stderr, "epoch %d/%d step %lld/%lld loss %.4f samples/s %.0f eta %d:%02d\n", epoch + 1, t->cfg->epochs,
                (long long)step, (long long)steps, loss, sps, m, s);
}

static ddp_status write_rows(trainer *t, int64_t epoch)
{
    ddp_status st = DDP_OK;
    if (t->csv && t->row.n) st = ddp_csv_write(t->csv, epoch, t->global_step, &t->row);
    if (st == DDP_OK && t->csv_rank && t->lrow.n) st = ddp_csv_write(t->csv_rank, epoch, t->global_step, &t->lrow);
    return st;
}

/* One optimizer step over up to `accumulate` micro-batches starting at *mb. */
static ddp_status train_step(trainer *t, ddp_loader *ld, int64_t *mb, int64_t nmb, double *samples)
{
    const ddp_train_config *c = t->cfg;
    ddp_backend *be = t->be;
    DDP_CHECK(be->zero(be, t->grads, (size_t)(t->n + N_CTL) * sizeof(float)));
    int64_t last = *mb + c->accumulate < nmb ? *mb + c->accumulate : nmb;
    float ctl[N_CTL] = {0};
    for (int64_t k = *mb; k < last; k++) {
        const ddp_batch *b;
        DDP_CHECK(ddp_loader_next(ld, k, &b));
        ctl[CTL_COUNT] += (float)b->nsamples;
        ddp_forward_out out = {0};
        int is_last = k == last - 1;
        if (is_last) {
            DDP_CHECK(be->upload(be, t->grads + t->n, ctl, sizeof ctl));
            ddp_sync_begin(t->sync);
        }
        DDP_CHECK(t->model->train_step(t->model->self, b, t->params, t->grads, &out, is_last ? ddp_sync_ready : NULL,
                                       is_last ? t->sync : NULL));
        DDP_CHECK(ddp_log(t->metrics, "train/loss", out.loss_sum, (double)out.count));
    }
    *mb = last;
    char where[64];
    snprintf(where, sizeof where, "step %lld", (long long)t->global_step + 1);
    DDP_CHECK(ddp_sync_finish(t->sync, where));
    float g[N_CTL];
    DDP_CHECK(be->download(be, g, t->grads + t->n, sizeof g));
    double count = g[CTL_COUNT];
    *samples = count;
    double gscale = 1.0 / count, norm2 = 0.0;
    for (int k = 0; k < t->model->ntensors; k++) {
        double s;
        DDP_CHECK(be->sumsq(be, t->grads + t->toff[k], t->toff[k + 1] - t->toff[k], &s));
        if (!isfinite(s))
            return ddp_set_error(DDP_ERR_NUMERIC, "non-finite gradient at step %lld in parameter '%s' (check the data and --lr)",
                                 (long long)t->global_step + 1, t->model->tensors[k].name);
        norm2 += s;
    }
    double norm = sqrt(norm2) * gscale, coef = 1.0;
    if (c->grad_clip > 0 && norm > c->grad_clip) coef = c->grad_clip / (norm + 1e-6);
    t->optim_step++;
    ddp_adamw_args a = {.lr = (float)c->lr,
                        .beta1 = (float)c->beta1,
                        .beta2 = (float)c->beta2,
                        .eps = (float)c->eps,
                        .weight_decay = (float)c->weight_decay,
                        .bc1 = (float)(1.0 - pow(c->beta1, (double)t->optim_step)),
                        .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t->optim_step)),
                        .gscale = (float)(gscale * coef)};
    DDP_CHECK(be->adamw(be, t->params, t->grads, t->m, t->v, t->n, &a));
    t->global_step++;
    return DDP_OK;
}

/* Exact validation: padding duplicates excluded, confusion matrix reduced across ranks. */
static ddp_status validate(trainer *t, ddp_loader *ld, ddp_sampler *sm, int64_t epoch)
{
    int64_t steps = sm->steps;
    if (t->cfg->fast_dev_run > 0 && steps > t->cfg->fast_dev_run) steps = t->cfg->fast_dev_run;
    DDP_CHECK(agree_steps(t->ctx, steps, "validation"));
    DDP_CHECK(ddp_loader_start_epoch(ld, 0, 0));
    ddp_eval_acc *a = &t->eval;
    ddp_eval_acc_reset(a);
    DDP_CHECK(ddp_eval_run(t->model, t->params, ld, steps, a));
    double lacc, lf1, acc, f1;
    ddp_confusion_metrics(a->conf, a->C, &lacc, &lf1);
    DDP_CHECK(ddp_eval_reduce_confusion(t->ctx, a));
    ddp_confusion_metrics(a->conf, a->C, &acc, &f1);
    DDP_CHECK(ddp_log(t->metrics, "val/loss", a->loss_sum, (double)a->count));
    DDP_CHECK(ddp_log_rank0(t->metrics, "val/acc", acc));
    DDP_CHECK(ddp_log_rank0(t->metrics, "val/macro_f1", f1));
    DDP_CHECK(ddp_metrics_sync(t->metrics, &t->row, &t->lrow));
    ddp_row_set(&t->lrow, "val/acc", lacc);
    ddp_row_set(&t->lrow, "val/macro_f1", lf1);
    ddp_row_set(&t->lrow, "val/count", (double)a->count);
    DDP_CHECK(write_rows(t, epoch));
    if (t->ctx->topo.rank == 0 && t->cfg->progress) {
        if (t->tty) fputc('\n', stderr);
        fprintf(stderr, "epoch %lld: val/loss=%.6g val/acc=%.6g val/macro_f1=%.6g\n", (long long)epoch + 1,
                t->row.vals[ddp_row_find(&t->row, "val/loss")], acc, f1);
    }
    return DDP_OK;
}

static ddp_status save_last(trainer *t, int64_t epoch_next)
{
    ddp_status st = DDP_OK;
    if (t->ctx->topo.rank == 0) {
        size_t bytes = (size_t)t->n * sizeof(float);
        st = t->be->download(t->be, t->h_params, t->params, bytes);
        if (st == DDP_OK) st = t->be->download(t->be, t->h_m, t->m, bytes);
        if (st == DDP_OK) st = t->be->download(t->be, t->h_v, t->v, bytes);
        ddp_ckpt_state cs = {.epoch = epoch_next,
                             .step_in_epoch = 0,
                             .global_step = t->global_step,
                             .optim_step = t->optim_step,
                             .seed = t->cfg->seed,
                             .world_size = t->ctx->topo.size,
                             .best_score = NAN,
                             .config_json = t->cfg->config_json};
        char path[4300];
        snprintf(path, sizeof path, "%s/last.h5", t->ckpt_dir);
        if (st == DDP_OK) st = ddp_ckpt_write(path, t->model, t->h_params, t->h_m, t->h_v, &cs);
    }
    return ddp_agree_status(t->ctx, st); /* the other ranks wait for the file */
}

static ddp_status setup(trainer *t, ddp_dataset *train, ddp_dataset *val)
{
    ddp_ctx *ctx = t->ctx;
    const ddp_train_config *c = t->cfg;
    DDP_CHECK(ddp_ctx_backend(ctx, t->model->device, &t->be));
    ddp_backend *be = t->be;
    t->n = ddp_model_num_params(t->model);
    DDP_ALLOC(t->toff, t->model->ntensors + 1);
    for (int k = 0; k < t->model->ntensors; k++) {
        int64_t e = 1;
        for (int d = 0; d < t->model->tensors[k].ndim; d++) e *= t->model->tensors[k].shape[d];
        t->toff[k + 1] = t->toff[k] + e;
    }
    size_t bytes = (size_t)t->n * sizeof(float);
    void *p;
    DDP_CHECK(be->alloc(be, &p, bytes));
    t->params = p;
    DDP_CHECK(be->alloc(be, &p, bytes + N_CTL * sizeof(float)));
    t->grads = p;
    DDP_CHECK(be->alloc(be, &p, bytes));
    t->m = p;
    DDP_CHECK(be->alloc(be, &p, bytes));
    t->v = p;
    DDP_ALLOC(t->h_params, t->n);
    DDP_ALLOC(t->h_m, t->n);
    DDP_ALLOC(t->h_v, t->n);
    int64_t C = t->model->num_classes;
    if (C != ddp_dataset_get_info(train)->num_classes || C != ddp_dataset_get_info(val)->num_classes)
        return ddp_set_error(DDP_ERR_ARG, "model has %lld classes but the datasets have %lld (train) and %lld (val)", (long long)C,
                             (long long)ddp_dataset_get_info(train)->num_classes, (long long)ddp_dataset_get_info(val)->num_classes);
    DDP_CHECK(ddp_eval_acc_init(&t->eval, C, c->batch_size, 0));
    /* identical start on every rank: init, then rank 0's parameters are broadcast (as PyTorch DDP does) */
    DDP_CHECK(t->model->init(t->model->self, t->params, c->seed));
    DDP_CHECK(be->download(be, t->h_params, t->params, bytes));
    for (int64_t lo = 0; lo < t->n; lo += INT32_MAX / 2) {
        int64_t cnt = t->n - lo < INT32_MAX / 2 ? t->n - lo : INT32_MAX / 2;
        MPI_CHECK(MPI_Bcast(t->h_params + lo, (int)cnt, MPI_FLOAT, 0, ctx->world));
    }
    DDP_CHECK(be->upload(be, t->params, t->h_params, bytes));
    DDP_CHECK(ddp_sync_create(ctx, be, t->grads, t->n, N_CTL, (int64_t)(c->bucket_mb * 1048576.0), c->collective_timeout, &t->sync));
    DDP_CHECK(ddp_metrics_create(ctx, &t->metrics));
    t->model->metrics = t->metrics;
    /* run directory */
    ddp_status st = DDP_OK;
    snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s/checkpoints", c->out_dir);
    if (ctx->topo.rank == 0) st = mkdir_p(t->ckpt_dir);
    DDP_CHECK(ddp_agree_status(ctx, st));
    static const char *cols[] = {"train/loss", "train/samples_per_s", "lr", "val/loss", "val/acc", "val/macro_f1"};
    char path[4300];
    if (ctx->topo.rank == 0) {
        snprintf(path, sizeof path, "%s/metrics.csv", c->out_dir);
        st = ddp_csv_open(path, -1, cols, 6, &t->csv);
    }
    DDP_CHECK(ddp_agree_status(ctx, st));
    if (c->log_per_rank) {
        snprintf(path, sizeof path, "%s/metrics_rank%d.csv", c->out_dir, ctx->topo.rank);
        st = ddp_csv_open(path, ctx->topo.rank, cols, 6, &t->csv_rank);
        DDP_CHECK(ddp_agree_status(ctx, st));
    }
    char note[160];
    snprintf(note, sizeof note, "%s", be->name);
    snprintf(path, sizeof path, "%s/run.json", c->out_dir);
    DDP_CHECK(ddp_write_run_json(ctx, path, c, c->config_json, ddp_dataset_get_info(train), ddp_dataset_get_info(val), note));
    t->tty = isatty(2);
    return DDP_OK;
}

static void teardown(trainer *t)
{
    ddp_backend *be = t->be;
    if (be) {
        if (t->params) be->release(be, t->params);
        if (t->grads) be->release(be, t->grads);
        if (t->m) be->release(be, t->m);
        if (t->v) be->release(be, t->v);
    }
    ddp_sync_destroy(t->sync);
    ddp_metrics_destroy(t->metrics);
    ddp_csv_close(t->csv);
    ddp_csv_close(t->csv_rank);
    ddp_row_free(&t->row);
    ddp_row_free(&t->lrow);
    free(t->h_params);
    free(t->h_m);
    free(t->h_v);
    free(t->toff);
    ddp_eval_acc_free(&t->eval);
}

static ddp_status run(trainer *t, ddp_dataset *train, ddp_dataset *val)
{
    ddp_ctx *ctx = t->ctx;
    const ddp_train_config *c = t->cfg;
    ddp_sampler tsm = {0}, vsm = {0};
    ddp_loader *tl = NULL, *vl = NULL;
    ddp_status st = DDP_OK;
    int64_t *sizes = ddp_calloc((size_t)train->nshards, sizeof *sizes);
    if (!sizes) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < train->nshards; i++) sizes[i] = train->shards[i].meta.n;
    st = ddp_sampler_init(&tsm, c->sampling_shard ? DDP_SAMPLE_SHARD : DDP_SAMPLE_GLOBAL, train->info.num_samples,
                          ctx->topo.size, ctx->topo.rank, c->seed, c->drop_last, c->batch_size, sizes, train->nshards);
    free(sizes);
    st = ddp_agree_status(ctx, st);
    if (st != DDP_OK) return st;
    DDP_TRY(ddp_agree_status(ctx, ddp_sampler_init(&vsm, DDP_SAMPLE_SEQUENTIAL, val->info.num_samples, ctx->topo.size,
                                                   ctx->topo.rank, c->seed, 0, c->batch_size, NULL, 0)));
    DDP_TRY(ddp_agree_status(ctx, ddp_loader_create(train, &tsm, 1, &tl)));
    DDP_TRY(ddp_agree_status(ctx, ddp_loader_create(val, &vsm, 1, &vl)));
    int64_t nmb = tsm.steps;
    if (c->fast_dev_run > 0 && nmb > c->fast_dev_run) nmb = c->fast_dev_run;
    DDP_TRY(agree_steps(ctx, nmb, "training epoch"));
    int64_t opt_steps = (nmb + c->accumulate - 1) / c->accumulate;
    int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
    double t0 = now_s();
    int64_t total_steps = opt_steps * epochs;
    for (int64_t e = 0; e < epochs; e++) {
        DDP_TRY(ddp_agree_status(ctx, ddp_loader_start_epoch(tl, e, 0)));
        int64_t mb = 0;
        double win_t = now_s(), win_samples = 0;
        for (int64_t s = 0; s < opt_steps; s++) {
            double samples = 0;
            st = train_step(t, tl, &mb, nmb, &samples);
            if (st != DDP_OK) goto done; /* a local failure here: the CLI aborts the job */
            win_samples += samples;
            if ((s + 1) % c->log_every == 0 || s + 1 == opt_steps) {
                double dt = now_s() - win_t;
                double sps = dt > 0 ? win_samples / dt : 0;
                DDP_TRY(ddp_log_rank0(t->metrics, "train/samples_per_s", sps));
                DDP_TRY(ddp_log_rank0(t->metrics, "lr", c->lr));
                DDP_TRY(ddp_metrics_sync(t->metrics, &t->row, &t->lrow));
                DDP_TRY(write_rows(t, e));
                int li = ddp_row_find(&t->row, "train/loss");
                double done_steps = (double)(e * opt_steps + s + 1);
                double eta = (now_s() - t0) / done_steps * (double)(total_steps - done_steps);
                progress(t, (int)e, s + 1, opt_steps, li >= 0 ? t->row.vals[li] : NAN, sps, eta);
                win_t = now_s();
                win_samples = 0;
            }
        }
        DDP_TRY(validate(t, vl, &vsm, e));
        if (c->fast_dev_run <= 0) DDP_TRY(save_last(t, e + 1));
    }
done:
    ddp_loader_destroy(tl);
    ddp_loader_destroy(vl);
    ddp_sampler_free(&tsm);
    ddp_sampler_free(&vsm);
    return st;
}

ddp_status ddp_train(ddp_ctx *ctx, const ddp_train_config *cfg, ddp_model *model, ddp_dataset *train, ddp_dataset *val)
{
    DDP_CHECK(ddp_agree_status(ctx, check_config(cfg)));
    trainer t = {.ctx = ctx, .cfg = cfg, .model = model};
    ddp_status st = ddp_agree_status(ctx, setup(&t, train, val));
    if (st == DDP_OK) st = run(&t, train, val);
    teardown(&t);
    return st;
}
