/* trainer_setup.c — the trainer's set-up (buffers, initial parameters, gradient sync, decider, resume, watch) and
 * teardown; the loop that runs between them is trainer.c's. */
#include "mpi_ddp/train/trainer_loop.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/evaluate.h"
#include "mpi_ddp/train/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set-up's rank-local part: buffers, the model's initial parameters; no collective, so that a rank that fails
 * here (out of host or device memory) is agreed before anything waits for it. */
static ddp_status setup_local(ddp_trainer *tr, ddp_dataset *train, ddp_dataset *val)
{
    ddp_train_state *ts = &tr->state;
    ddp_ctx *ctx = ts->ctx;
    const ddp_train_config *c = ts->cfg;
    DDP_CHECK(ddp_ctx_backend(ctx, ts->model->device, &ts->be));
    ddp_backend *be = ts->be;
    DDP_CHECK(ddp_backend_set_precision(be, c->precision)); /* the GEMMs of training and validation */
    ts->n = ddp_model_num_params(ts->model);
    DDP_ALLOC(tr->toff, ts->model->ntensors + 1);
    DDP_ALLOC(tr->sumsq, ts->model->ntensors);
    for (int k = 0; k < ts->model->ntensors; k++) {
        int64_t e = 1;
        for (int d = 0; d < ts->model->tensors[k].ndim; d++) e *= ts->model->tensors[k].shape[d];
        tr->toff[k + 1] = tr->toff[k] + e;
    }
    size_t bytes = (size_t)ts->n * sizeof(float);
    void *p;
    DDP_CHECK(DDP_BE_ALLOC(be, &p, bytes));
    ts->params = p;
    tr->nctl = CTL_ROWS + ctx->topo.size;
    DDP_ALLOC(tr->ctl, tr->nctl);
    DDP_ALLOC(tr->ctl_back, tr->nctl);
    DDP_ALLOC(tr->val_stop, 2);
    DDP_CHECK(DDP_BE_ALLOC(be, &p, bytes + (size_t)tr->nctl * sizeof(float)));
    tr->grads = p;
    DDP_CHECK(DDP_BE_ALLOC(be, &p, bytes));
    ts->m = p;
    DDP_CHECK(DDP_BE_ALLOC(be, &p, bytes));
    ts->v = p;
    DDP_ALLOC(ts->h_params, ts->n);
    DDP_ALLOC(ts->h_m, ts->n);
    DDP_ALLOC(ts->h_v, ts->n);
    int64_t C = ts->model->num_classes;
    if (C != ddp_dataset_get_info(train)->num_classes || C != ddp_dataset_get_info(val)->num_classes)
        return ddp_set_error(DDP_ERR_ARG, "model has %lld classes but the datasets have %lld (train) and %lld (val)",
                             (long long)C, (long long)ddp_dataset_get_info(train)->num_classes,
                             (long long)ddp_dataset_get_info(val)->num_classes);
    /* a validation batch holds at most a rank's share of the set (as the sampler's max_samples): a batch past it
     * sizes no more */
    int64_t nval = ddp_dataset_get_info(val)->num_samples, vb = c->batch_rows > 0 ? 2 * c->batch_rows : c->batch_size;
    int64_t share = c->batch_rows > 0 ? nval : (nval + ctx->topo.size - 1) / ctx->topo.size;
    DDP_CHECK(ddp_eval_acc_init(&tr->eval, C, vb < share ? vb : share, 0));
    DDP_CHECK(ddp_metrics_create(ctx, &tr->metrics));
    ddp_metrics_reserve_builtin(tr->metrics);
    ts->model->metrics = tr->metrics;
    DDP_CHECK(ddp_test_hooks_open(&tr->hooks, ts->ctx->topo.rank));
    /* identical start on every rank: init, then rank 0's parameters are broadcast (as PyTorch DDP does) */
    unsigned long seq = ddp_error_seq();
    ddp_status ist = ts->model->init(ts->model->self, ts->params, c->seed);
    if (ist != DDP_OK) return ddp_model_callback_status(ts->model, "init", ist, seq, "at the start");
    return be->download(be, ts->h_params, ts->params, bytes);
}

/* Every step that can fail on one rank alone is agreed before the next collective (docs/faults.md). */
ddp_status ddp_trainer_setup(ddp_trainer *tr, ddp_dataset *train, ddp_dataset *val)
{
    ddp_train_state *ts = &tr->state;
    ddp_ctx *ctx = ts->ctx;
    const ddp_train_config *c = ts->cfg;
    DDP_CHECK(ddp_agree_status(ctx, setup_local(tr, train, val)));
    ddp_backend *be = ts->be;
    size_t bytes = (size_t)ts->n * sizeof(float);
    for (int64_t lo = 0; lo < ts->n; lo += INT32_MAX / 2) {
        int64_t cnt = ts->n - lo < INT32_MAX / 2 ? ts->n - lo : INT32_MAX / 2;
        MPI_CHECK(MPI_Bcast(ts->h_params + lo, (int)cnt, MPI_FLOAT, 0, ctx->world));
    }
    DDP_CHECK(ddp_agree_status(ctx, be->upload(be, ts->params, ts->h_params, bytes)));
    ctx->nccl_init_timeout = c->collective_timeout;
    DDP_CHECK(ddp_sync_create(ctx, be, tr->grads, ts->n, tr->nctl, (int64_t)(c->bucket_mb * 1048576.0), &tr->sync));
    ddp_decider_init(&ts->dec, (ddp_policy)c->ckpt_policy, c->monitor, c->mode_max,
                     c->fast_dev_run > 0 ? 0 : c->save_top_k, c->early_stop_patience, c->early_stop_min_delta);
    /* resume: an explicit file must exist; `auto` resumes when RUNDIR/checkpoints/last.h5 exists */
    snprintf(ts->ckpt_dir, sizeof ts->ckpt_dir, "%s/checkpoints", c->out_dir);
    char path[4400];
    int resuming = 0;
    if (c->resume && strcmp(c->resume, "auto") == 0) {
        snprintf(path, sizeof path, "%s/last.h5", ts->ckpt_dir);
        resuming = ctx->topo.rank == 0 && access(path, F_OK) == 0;
        MPI_CHECK(MPI_Bcast(&resuming, 1, MPI_INT, 0, ctx->world));
    } else if (c->resume) {
        snprintf(path, sizeof path, "%s", c->resume);
        resuming = 1;
    }
    if (resuming) DDP_CHECK(ddp_train_state_resume(ts, path, ddp_dataset_get_info(train)->num_samples));
    tr->resuming = resuming; /* the run directory's files are written once the resume's position is checked (run) */
    /* the progress board and --collective-timeout's watch from here, so that a rank stalled in the start of run()
     * (loaders, the first epoch's plan, the resume's position) is reported, not waited on: the board's files are the
     * only ones a resume refused there writes */
    DDP_CHECK(ddp_watch_init(ctx, c->out_dir, c->collective_timeout));
    ddp_progress_init(&tr->prog, ctx->topo.rank == 0 && c->progress);
    return DDP_OK;
}

void ddp_trainer_teardown(ddp_trainer *tr)
{
    ddp_train_state *ts = &tr->state;
    ddp_progress_end_line(&tr->prog); /* an error's line starts on a line of its own */
    ddp_watch_close(ts->ctx);
    if (ts->model->prefetch) (void)ts->model->prefetch(ts->model->self, NULL, NULL); /* drops a batch moved early */
    ddp_backend *be = ts->be;
    if (be) {
        (void)ddp_backend_set_precision(be, DDP_PRECISION_FP32); /* the context's shared backend back to the default */
        if (ts->params) be->release(be, ts->params);
        if (tr->grads && ts->ctx->comm_broken) /* a gradient allreduce the timeout left pending may still write */
            ddp_ctx_keep(tr->grads);
        else if (tr->grads)
            be->release(be, tr->grads);
        if (ts->m) be->release(be, ts->m);
        if (ts->v) be->release(be, ts->v);
    }
    ddp_sync_destroy(tr->sync);
    if (tr->metrics && ts->model->metrics == tr->metrics) ts->model->metrics = NULL; /* valid during ddp_train only */
    ddp_metrics_destroy(tr->metrics);
    ddp_csv_close(tr->csv);
    ddp_csv_close(tr->csv_rank);
    ddp_metric_row_free(&tr->row);
    ddp_metric_row_free(&tr->lrow);
    free(ts->h_params);
    free(ts->h_m);
    free(ts->h_v);
    free(ts->topk_drop);
    free(tr->toff);
    free(tr->sumsq);
    ddp_test_hooks_close(&tr->hooks);
    free(tr->lens_train);
    free(tr->lens_val);
    free(tr->ctl);
    free(tr->ctl_back);
    ddp_ctx_release(ts->ctx, tr->val_stop); /* kept after a timeout: the stop check's request may still write */
    ddp_eval_acc_free(&tr->eval);
}
