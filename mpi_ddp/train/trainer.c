/* trainer.c — the training loop: epochs of optimizer steps (micro-batches, bucketed gradient sync, clipping,
 * AdamW), exact validation after each epoch, metric rows and CSV files, and stop requests agreed through the step's
 * allreduce. Saves, decisions and resume are in trainer_ckpt.c, the progress line and summary in progress.c. */
#include "io/dataset.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "io/loader.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/train/evaluate.h"
#include "mpi_ddp/train/grad_diag.h"
#include "mpi_ddp/train/rundir.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/train/lr_schedule.h"
#include "mpi_ddp/train/metrics.h"
#include "mpi_ddp/train/plan.h"
#include "mpi_ddp/train/progress.h"
#include "mpi_ddp/train/runinfo.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/comm/sync.h"
#include "mpi_ddp/train/train_state.h"
#include "mpi_ddp/train/trainer_loop.h"
#include "mpi_ddp/train/test_hooks.h"
#include "mpi_ddp/comm/watchdog.h"

#include <signal.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>


/* Stop requests (DDP_STOP_* bits), from the CLI's signal thread, a signal handler or a model's callback. Each kind
 * counts its requests; a ddp_train that stops takes (g_stop_taken) the counts it saw up to the ranks' agreement, so
 * that a later ddp_train stops only for a newer request, and one made before it started that no run took still stops
 * it. g_stop_requested keeps every kind asked for so far (ddp_stop_requested; the CLI reads it before training). */
#define STOP_KINDS 2 /* DDP_STOP_END, DDP_STOP_REQUEUE */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop requests' atomics must be lock-free (async-signal-safe)");
static atomic_int g_stop_requested;
static atomic_uint g_stop_count[STOP_KINDS], g_stop_taken[STOP_KINDS];
void ddp_request_stop_kind(int kind)
{
    kind &= DDP_STOP_END | DDP_STOP_REQUEUE;
    for (int k = 0; k < STOP_KINDS; k++)
        if (kind & (1 << k)) atomic_fetch_add(&g_stop_count[k], 1u);
    atomic_fetch_or(&g_stop_requested, kind);
}
void ddp_request_stop(void) { ddp_request_stop_kind(DDP_STOP_END); }
int ddp_stop_requested(void) { return atomic_load(&g_stop_requested); }
/* The kinds of the requests no ddp_train has stopped for yet. */
static int stop_pending(void)
{
    int kinds = 0;
    for (int k = 0; k < STOP_KINDS; k++)
        if (atomic_load(&g_stop_count[k]) != atomic_load(&g_stop_taken[k])) kinds |= 1 << k;
    return kinds;
}
/* The ranks agreed to stop for `kinds` (DDP_STOP_* bits, OR-ed over the ranks): this run takes the requests of
 * those kinds made so far; one of another kind that arrived after the check stays for a later ddp_train. */
static void stop_take(int kinds)
{
    for (int k = 0; k < STOP_KINDS; k++)
        if (kinds & (1 << k)) atomic_store(&g_stop_taken[k], atomic_load(&g_stop_count[k]));
}
static atomic_int g_stop_agreed; /* set by the training thread once the ranks agreed to stop (app/stop_signals.c) */
int ddp_stop_agreed(void) { return atomic_load(&g_stop_agreed); }


static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* An epoch's micro-batches (the sampler's steps, capped by --fast-dev-run) and optimizer steps, for the epoch the
 * sampler is set to; checked collectively when `agreed` names what they are. */
static ddp_status epoch_steps(ddp_trainer *tr, const ddp_sampler *tsm, const char *agreed, int64_t *nmb,
                              int64_t *opt_steps);

/* Steps every rank will run: computed locally, then checked collectively. */
static ddp_status agree_steps(ddp_ctx *ctx, int64_t mine, const char *what)
{
    int64_t v[2] = {mine, -mine};
    DDP_CHECK(ddp_allreduce(ctx, v, 2, MPI_INT64_T, MPI_MIN, what));
    ddp_status st = DDP_OK;
    if (v[0] != -v[1])
        st = ddp_set_error(DDP_ERR_MISMATCH, "%s: ranks disagree on the number of steps (%lld..%lld)", what,
                           (long long)v[0], (long long)-v[1]);
    else if (v[0] < 1)
        st = ddp_set_error(DDP_ERR_ARG, "%s: no steps to run", what);
    if (st != DDP_OK) ddp_mark_error_shared();
    return st;
}

static ddp_status epoch_steps(ddp_trainer *tr, const ddp_sampler *tsm, const char *agreed, int64_t *nmb,
                              int64_t *opt_steps)
{
    const ddp_train_config *c = tr->state.cfg;
    int64_t n = c->fast_dev_run > 0 && tsm->steps > c->fast_dev_run ? c->fast_dev_run : tsm->steps;
    if (agreed) DDP_CHECK(agree_steps(tr->state.ctx, n, agreed));
    *nmb = n;
    *opt_steps = (n + c->accumulate - 1) / c->accumulate;
    return DDP_OK;
}

static ddp_status write_rows(ddp_trainer *tr, int64_t epoch)
{
    ddp_train_state *ts = &tr->state;
    ddp_status st = DDP_OK;
    if (tr->csv && tr->row.n) st = ddp_csv_write(tr->csv, epoch, ts->global_step, &tr->row);
    if (st != DDP_OK || !tr->csv_rank) return st;
    /* every collective metric has a column in every rank's file, blank on a rank that logged it with a count of 0
     * (its local row leaves it out), so the ranks' files have the same header and rows */
    int any = tr->lrow.n > 0;
    for (int i = 0; i < tr->row.n && st == DDP_OK; i++)
        if (ddp_metrics_count(tr->metrics, tr->row.names[i]) >= 0) {
            st = ddp_csv_add_column(tr->csv_rank, tr->row.names[i]);
            any = 1;
        }
    if (st == DDP_OK && any) st = ddp_csv_write(tr->csv_rank, epoch, ts->global_step, &tr->lrow);
    return st;
}

/* The stop requests of this rank (DDP_STOP_* bits): a signal's, or the test hook's, which plays the time-limit
 * warning (SIGUSR1) arriving during a given step. */
static int stop_wanted(const ddp_trainer *tr)
{
    return stop_pending() | (ddp_test_hooks_stop_at(&tr->hooks, tr->state.global_step + 1) ? DDP_STOP_REQUEUE : 0);
}

/* One optimizer step over up to `accumulate` micro-batches starting at *mb. */
static ddp_status train_step(ddp_trainer *tr, ddp_loader *ld, int64_t *mb, int64_t nmb, double *samples, double *rows,
                             int *stop)
{
    ddp_train_state *ts = &tr->state;
    const ddp_train_config *c = ts->cfg;
    ddp_backend *be = ts->be;
    DDP_CHECK(be->zero(be, tr->grads, (size_t)(ts->n + tr->nctl) * sizeof(float)));
    int64_t first = *mb, last = *mb + c->accumulate < nmb ? *mb + c->accumulate : nmb;
    ddp_test_hooks_delay(&tr->hooks, !tr->prog.warm);
    double loss_sum = 0, loss_count = 0; /* the step's train/loss, logged once the step is known to be applied */
    float *ctl = tr->ctl;                /* lives in the trainer: uploaded without a host synchronisation */
    memset(ctl, 0, (size_t)tr->nctl * sizeof(float));
    ddp_watch_mark(ts->ctx, ts->global_step + 1, "forward/backward");
    for (int64_t k = *mb; k < last; k++) {
        const ddp_batch *lb;
        DDP_CHECK(ddp_loader_next(ld, k, &lb));
        ddp_batch bs = *lb; /* dropout keys: the optimizer step, not the position in a (resumed) run */
        bs.step = ts->global_step;
        const ddp_batch *b = &bs;
        ddp_test_hooks_trace(&tr->hooks, ts->epoch, ts->global_step, b->sample_ids, b->nsamples);
        ctl[CTL_COUNT] += (float)b->nsamples;
        ctl[CTL_ROWS + ts->ctx->topo.rank] += (float)b->nrows;
        ddp_forward_out out = {0};
        int is_last = k == last - 1;
        if (ts->model->prefetch) { /* the next micro-batch may upload while this one computes */
            tr->peek = (ddp_loader_cursor){ld, k + 1 < nmb ? k + 1 : -1};
            unsigned long pseq = ddp_error_seq();
            ddp_status pst = ts->model->prefetch(ts->model->self, ddp_loader_peek_cursor, &tr->peek);
            if (pst != DDP_OK) {
                char where[96];
                snprintf(where, sizeof where, "at step %lld", (long long)ts->global_step + 1);
                return ddp_model_callback_status(ts->model, "prefetch", pst, pseq, where);
            }
        }
        if (is_last) { /* the stop flag as late as possible: agreed through this step's allreduce, no extra collective
                        */
            int want = stop_wanted(tr);
            for (int kb = 0; kb < CTL_STOP_KINDS; kb++) ctl[CTL_STOP + kb] = (float)((want >> kb) & 1);
            DDP_CHECK(be->upload_async(be, tr->grads + ts->n, ctl, (size_t)tr->nctl * sizeof(float)));
            ddp_sync_begin(tr->sync);
        }
        unsigned long seq = ddp_error_seq();
        ddp_status st = ts->model->train_step(ts->model->self, b, ts->params, tr->grads, &out,
                                              is_last ? ddp_sync_ready : NULL, is_last ? tr->sync : NULL);
        if (st != DDP_OK) { /* one line naming the model where it set none */
            char where[96];
            snprintf(where, sizeof where, "at step %lld (epoch %lld, batch %lld)", (long long)ts->global_step + 1,
                     (long long)ts->epoch, (long long)k + 1);
            return ddp_model_callback_status(ts->model, "train_step", st, seq, where);
        }
        loss_sum += out.loss_sum;
        loss_count += (double)out.count;
    }
    *mb = last;
    ddp_watch_mark(ts->ctx, ts->global_step + 1, "gradient allreduce");
    DDP_CHECK(ddp_sync_finish(tr->sync, "the gradient allreduce"));
    float *g = tr->ctl_back;
    DDP_CHECK(be->download(be, g, tr->grads + ts->n, (size_t)tr->nctl * sizeof(float)));
    double count = g[CTL_COUNT];
    *samples = count;
    *stop = 0; /* the kinds any rank asked for */
    for (int kb = 0; kb < CTL_STOP_KINDS; kb++) *stop |= (g[CTL_STOP + kb] > 0) << kb;
    if (*stop) {
        stop_take(*stop); /* this run stops for the requests made so far: a later ddp_train does not */
        atomic_store(&g_stop_agreed, 1);
    }
    /* load balance: the busiest rank's rows over the mean (1 = balanced); every rank computes the same */
    double rmax = 0.0, rsum = 0.0;
    for (int64_t r = CTL_ROWS; r < tr->nctl; r++) {
        rsum += g[r];
        rmax = g[r] > rmax ? g[r] : rmax;
    }
    *rows = rsum;
    if (rsum > 0)
        DDP_CHECK(ddp_log_own(tr->metrics, "train/rows_per_rank_max_over_mean",
                              rmax * (double)(tr->nctl - CTL_ROWS) / rsum, 1.0));
    double gscale = 1.0 / count, norm2 = 0.0;
    DDP_CHECK(be->sumsq_many(be, tr->grads, tr->toff, ts->model->ntensors, tr->sumsq));
    for (int k = 0; k < ts->model->ntensors; k++) {
        double s = tr->sumsq[k];
        if (!isfinite(s)) {         /* the reduced gradient is the same on every rank: all decide alike */
            if (!c->skip_nonfinite) /* names the first non-finite feature of the step's samples, or says there is none
                                     */
                return ddp_grad_nonfinite_error(ts->ctx, ts->tsm, ddp_loader_dataset(ld), first, last,
                                                ts->global_step + 1, ts->model->tensors[k].name);
            ts->skipped++;
            ts->global_step++;
            /* a skipped step trained on nothing: its loss (NaN, as a rule) stays out of train/loss; logged with a
             * count of 0 so that every rank keeps the name (a row of skipped steps only: nan) */
            return ddp_log_own(tr->metrics, "train/loss", 0.0, 0.0);
        }
        norm2 += s;
    }
    DDP_CHECK(ddp_log_own(tr->metrics, "train/loss", loss_sum, loss_count));
    double norm = sqrt(norm2) * gscale, coef = 1.0;
    if (c->grad_clip > 0 && norm > c->grad_clip) coef = c->grad_clip / (norm + 1e-6);
    ts->optim_step++;
    tr->lr_last = ddp_lr_at(c, ts->global_step, ts->lr_total);
    ddp_adamw_args a = {.lr = (float)tr->lr_last,
                        .beta1 = (float)c->beta1,
                        .beta2 = (float)c->beta2,
                        .eps = (float)c->eps,
                        .weight_decay = (float)c->weight_decay,
                        .bc1 = (float)(1.0 - pow(c->beta1, (double)ts->optim_step)),
                        .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)ts->optim_step)),
                        .gscale = (float)(gscale * coef)};
    DDP_CHECK(be->adamw(be, ts->params, tr->grads, ts->m, ts->v, ts->n, &a));
    ts->global_step++;
    return DDP_OK;
}

/* Stop requests during validation: each batch boundary completes the previous boundary's BOR-allreduce of
 * the request kinds (in flight during a whole batch, so it costs no wait) and starts the next, so every rank ends the
 * pass at the same batch, at most two batches after a request. MPIDDP_TEST_STOP_IN_VAL=B plays a request
 * arriving on rank 0 before validation batch B. */
typedef struct {
    ddp_trainer *tr;
    MPI_Request rq;
    int pending, stopped; /* the check's ints are tr->val_stop: memory that outlives validate() */
} val_poll;

static ddp_status val_poll_fn(void *arg, int64_t batch, int *stop)
{
    val_poll *p = arg;
    ddp_ctx *ctx = p->tr->state.ctx;
    if (p->pending) {
        DDP_CHECK(ddp_wait(ctx, 1, &p->rq, "the validation stop check"));
        p->pending = 0;
        if (p->tr->val_stop[1]) {
            p->stopped = p->tr->val_stop[1]; /* the kinds asked for */
            stop_take(p->stopped);
            atomic_store(&g_stop_agreed, 1);
            *stop = 1;
            return DDP_OK;
        }
    }
    int *io = p->tr->val_stop;
    io[0] = stop_pending() | (batch == p->tr->hooks.stop_in_val && ctx->topo.rank == 0 ? DDP_STOP_REQUEUE : 0);
    MPI_CHECK(MPI_Iallreduce(&io[0], &io[1], 1, MPI_INT, MPI_BOR, ctx->world, &p->rq));
    p->pending = 1;
    return DDP_OK;
}

/* Exact validation: padding duplicates excluded, confusion matrix reduced across ranks. *stopped: the kinds of the
 * stop request that ended the pass early (nothing logged), 0 when none did. */
static ddp_status validate(ddp_trainer *tr, ddp_loader *ld, ddp_sampler *sm, int64_t epoch, int *stopped)
{
    ddp_train_state *ts = &tr->state;
    int64_t steps = sm->steps;
    if (ts->cfg->fast_dev_run > 0 && steps > ts->cfg->fast_dev_run) steps = ts->cfg->fast_dev_run;
    ddp_watch_mark(ts->ctx, ts->global_step, "validation");
    DDP_CHECK(agree_steps(ts->ctx, steps, "validation"));
    DDP_CHECK(ddp_loader_start_epoch(ld, 0, 0));
    ddp_eval_acc *a = &tr->eval;
    ddp_eval_acc_reset(a);
    val_poll vp = {.tr = tr};
    DDP_CHECK(ddp_eval_run(ts->model, ts->params, ld, steps, a, val_poll_fn, &vp));
    if (vp.pending)
        DDP_CHECK(ddp_wait(ts->ctx, 1, &vp.rq, "the validation stop check")); /* a late request: the next step's */
    *stopped = vp.stopped;
    if (vp.stopped) return DDP_OK;
    double lacc, lf1, acc, f1;
    ddp_confusion_metrics(a->conf, a->C, &lacc, &lf1);
    DDP_CHECK(ddp_eval_reduce_confusion(ts->ctx, a));
    ddp_confusion_metrics(a->conf, a->C, &acc, &f1);
    DDP_CHECK(ddp_log_own(tr->metrics, "val/loss", a->loss_sum, (double)a->count));
    DDP_CHECK(ddp_log_rank0_own(tr->metrics, "val/acc", acc));
    DDP_CHECK(ddp_log_rank0_own(tr->metrics, "val/macro_f1", f1));
    DDP_CHECK(ddp_metrics_sync(tr->metrics, &tr->row, &tr->lrow));
    ddp_status st = DDP_OK;
    if (a->count > 0) { /* a rank with no validation sample (padding only) has no local value: it abstains */
        st = ddp_row_set(&tr->lrow, "val/acc", lacc);
        if (st == DDP_OK) st = ddp_row_set(&tr->lrow, "val/macro_f1", lf1);
    }
    if (st == DDP_OK) st = ddp_row_set(&tr->lrow, "val/count", (double)a->count);
    DDP_CHECK(ddp_agree_status(ts->ctx, st)); /* a rank out of memory here: agreed before the decision's collectives */
    int mon = ddp_row_find(&tr->lrow, ts->cfg->monitor); /* test hook: ranks' local votes made to disagree */
    if (mon >= 0 && tr->hooks.monitor_offset) tr->lrow.vals[mon] += ddp_test_hooks_monitor_offset(&tr->hooks, epoch);
    DDP_CHECK(write_rows(tr, epoch));
    if (ts->ctx->topo.rank == 0 && ts->cfg->progress) {
        ddp_progress_end_line(&tr->prog);
        fprintf(stderr, "epoch %lld: val/loss=%.6g val/acc=%.6g val/macro_f1=%.6g\n", (long long)epoch,
                tr->row.vals[ddp_row_find(&tr->row, "val/loss")], acc, f1);
    }
    return DDP_OK;
}

/* What a stopped run says of its checkpoint: "nothing saved (--fast-dev-run)" or "last.h5 saved, continue with
 * --resume auto", in the CLI's options or ddp_train_config's fields (optname.h). */
static const char *stopped_hint(const ddp_ctx *ctx, const ddp_train_config *c, char *buf, size_t len)
{
    char opt[64];
    if (c->fast_dev_run > 0)
        snprintf(buf, len, "nothing saved (%s)", ddp_opt_name(ctx->cli_names, DDP_OPT_FAST_DEV_RUN));
    else
        snprintf(buf, len, "last.h5 saved, continue with %s",
                 ddp_opt_set(opt, sizeof opt, ctx->cli_names, DDP_OPT_RESUME, "auto"));
    return buf;
}

static ddp_status run(ddp_trainer *tr, ddp_dataset *train, ddp_dataset *val)
{
    ddp_train_state *ts = &tr->state;
    ddp_ctx *ctx = ts->ctx;
    char hint[160];
    const ddp_train_config *c = ts->cfg;
    ddp_sampler tsm = {0}, vsm = {0};
    ddp_loader *tl = NULL, *vl = NULL;
    ddp_status st = DDP_OK;
    ddp_test_hooks_start(&tr->hooks); /* a rank stalled before the loaders: the watch must see it */
    DDP_TRY(ddp_plan_samplers(ctx, c, train, val, 0, &tsm, &vsm, &tr->lens_train, &tr->lens_val));
    DDP_TRY(ddp_agree_status(ctx, ddp_loader_create(train, &tsm, 1, &tl)));
    DDP_TRY(ddp_agree_status(ctx, ddp_loader_create(val, &vsm, 1, &vl)));
    DDP_TRY(ddp_agree_status(ctx, ddp_sampler_set_epoch(&tsm, ts->epoch)));
    int64_t nmb, opt_steps; /* of the first epoch (token budgets: they vary by epoch) */
    DDP_TRY(epoch_steps(tr, &tsm, "training epoch", &nmb, &opt_steps));
    ts->tsm = &tsm;
    ts->nmb = nmb;
    int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
    /* the schedule's horizon: with token budgets the first epoch's plan stands for every epoch's (a function of
     * seed and global budget, like the plan itself; the schedule holds min-lr past it) */
    int64_t steps0 = opt_steps, full0 = (tsm.steps + c->accumulate - 1) / c->accumulate; /* full0: no --fast-dev-run */
    if (c->batch_rows > 0 && ts->epoch != 0) { /* resumed in a later epoch: epoch 0's plan, as the first run saw it */
        int64_t nmb0;
        DDP_TRY(ddp_agree_status(ctx, ddp_sampler_set_epoch(&tsm, 0)));
        DDP_TRY(epoch_steps(tr, &tsm, NULL, &nmb0, &steps0));
        full0 = (tsm.steps + c->accumulate - 1) / c->accumulate;
        DDP_TRY(ddp_agree_status(ctx, ddp_sampler_set_epoch(&tsm, ts->epoch)));
    }
    DDP_TRY(ddp_train_state_resume_position(ts, opt_steps));     /* the last checks: nothing written before */
    DDP_TRY(ddp_train_state_settle_schedule(ts, steps0, full0)); /* sets ts->lr_total */
    tr->wrote = 1;
    DDP_TRY(ddp_agree_status(ctx, ddp_train_start_files(ts, tr->resuming, ddp_dataset_get_info(train),
                                                        ddp_dataset_get_info(val), &tr->csv, &tr->csv_rank)));
    DDP_TRY(ddp_train_state_record_schedule(ts, ts->lr_total));
    tr->lr_last = ddp_lr_at(c, ts->global_step, ts->lr_total);
    int64_t total_steps = ts->lr_total, first_epoch = ts->epoch; /* the steps done, then this run's (ETA) */
    int at_end = ts->nmb > 0 && ts->mb >= ts->nmb; /* resumed after the epoch's training: it validates next */
    /* the summary's epoch and its steps K of M, until this run trains a step: the epoch the checkpoint's run trained
     * last, with the steps it took there (another order has other steps: unknown, -1, when not recorded) */
    int64_t last_epoch = at_end ? ts->epoch : ts->epoch > 0 ? ts->epoch - 1 : -1;
    int64_t last_m = at_end ? ts->resume_end_steps : ts->epoch > 0 ? ts->prev_steps : opt_steps;
    if (last_m < 0) last_m = ts->order_changed ? -1 : opt_steps; /* an older checkpoint: this run's, if the same */
    int64_t last_k = at_end || ts->epoch > 0 ? last_m : 0;
    int early = 0;
    for (; ts->epoch < epochs; ts->epoch++, ts->mb = 0) {
        int64_t e = ts->epoch;
        DDP_TRY(ddp_agree_status(ctx, ddp_loader_start_epoch(tl, e, ts->mb)));
        if (c->batch_rows > 0 && e != first_epoch) { /* this epoch's plan (every rank computed the same; checked) */
            DDP_TRY(epoch_steps(tr, &tsm, "training epoch", &nmb, &opt_steps));
            ts->nmb = nmb;
        }
        /* samples/s: a window from the previous training row (or the epoch's start) to this one; the run's first step
         * is start-up and stays out of every figure (the first window starts when it ends) */
        double win_t = now_s(), win_samples = 0, loop_t = win_t;
        int64_t epoch_m = at_end && e == first_epoch ? last_m : opt_steps; /* the steps this epoch takes */
        int stop = 0;
        while (ts->mb < nmb) {
            double samples = 0, rows = 0, t_step = now_s();
            st = train_step(tr, tl, &ts->mb, nmb, &samples, &rows, &stop);
            if (st != DDP_OK) goto done; /* a local failure here: the CLI aborts the job */
            double t_end = now_s();
            if (ddp_progress_step(&tr->prog, t_step, t_end, samples, rows, ts->global_step))
                win_t = loop_t = t_end; /* start-up */
            else
                win_samples += samples;
            int64_t s = (ts->mb + c->accumulate - 1) / c->accumulate; /* optimizer steps done in this epoch */
            last_epoch = e;
            last_k = s;
            last_m = opt_steps;
            if (ts->global_step % c->log_every == 0 || ts->mb == nmb || stop) {
                double now = now_s(), dt = now - win_t;
                double sps = win_samples > 0 && dt > 0 ? win_samples / dt
                             : tr->prog.first_dt > 0
                                 ? tr->prog.first_samples / tr->prog.first_dt /* at the first step */
                                 : 0;
                DDP_TRY(ddp_log_rank0_own(tr->metrics, "train/samples_per_s", sps));
                DDP_TRY(ddp_log_rank0_own(tr->metrics, "lr", tr->lr_last));
                if (c->skip_nonfinite)
                    DDP_TRY(ddp_log_rank0_own(tr->metrics, "train/skipped_steps", (double)ts->skipped));
                DDP_TRY(ddp_metrics_sync(tr->metrics, &tr->row, &tr->lrow));
                DDP_TRY(write_rows(tr, e));
                int li = ddp_row_find(&tr->row, "train/loss");
                double eta = ddp_progress_eta(&tr->prog, now, ts->global_step, total_steps);
                ddp_progress_line(&tr->prog, ts, (int)e, s, opt_steps, li >= 0 ? tr->row.vals[li] : NAN, sps, eta);
                win_t = now_s();
                win_samples = 0;
            }
            if (stop) { /* every rank saw the flag in the same allreduce */
                tr->prog.loop_s += now_s() - loop_t;
                if (c->fast_dev_run <= 0) DDP_TRY(ddp_train_state_save_last(ts));
                if (ctx->topo.rank == 0) ddp_progress_end_line(&tr->prog);
                ddp_progress_summarize(&tr->prog, ts, tr->summary, last_epoch, last_k, last_m, epochs, 1, 0);
                if (tr->summary) tr->summary->stop_kinds = stop;
                st = ddp_set_error(DDP_STOPPED, "stopped on request at step %lld (epoch %lld, batch %lld of %lld); %s",
                                   (long long)ts->global_step, (long long)e, (long long)ts->mb, (long long)nmb,
                                   stopped_hint(ctx, c, hint, sizeof hint));
                ddp_mark_error_shared();
                goto done;
            }
            if (c->ckpt_every_steps > 0 && ts->global_step % c->ckpt_every_steps == 0 && ts->mb < nmb &&
                c->fast_dev_run <= 0)
                DDP_TRY(ddp_train_state_save_last(ts));
        }
        if (tr->prog.warm) tr->prog.loop_s += now_s() - loop_t;
        int vstop = 0;
        DDP_TRY(validate(tr, vl, &vsm, e, &vstop));
        if (vstop) { /* saved at the epoch's end: a resume validates again */
            if (c->fast_dev_run <= 0) DDP_TRY(ddp_train_state_save_last(ts));
            ddp_progress_summarize(&tr->prog, ts, tr->summary, last_epoch, last_k, last_m, epochs, 1, 0);
            if (tr->summary) tr->summary->stop_kinds = vstop;
            st = ddp_set_error(DDP_STOPPED, "stopped on request during validation after step %lld (epoch %lld); %s",
                               (long long)ts->global_step, (long long)e, stopped_hint(ctx, c, hint, sizeof hint));
            ddp_mark_error_shared();
            goto done;
        }
        ts->dec.monitor_count = ddp_metrics_count(tr->metrics, ts->dec.monitor); /* 0: nan for want of samples */
        if (c->fast_dev_run <= 0) DDP_TRY(ddp_train_state_decide(ts, &tr->row, &tr->lrow, e, &early));
        ts->epoch = e + 1; /* position: start of the next epoch */
        ts->mb = 0;
        ts->prev_steps = epoch_m;
        ts->resume_end_steps = -1; /* the resumed epoch is done */
        if (c->fast_dev_run <= 0) DDP_TRY(ddp_train_state_save_last(ts));
        ts->epoch = e;
        if (early) {
            ts->epoch = epochs;
            break;
        }
    }
    ddp_progress_summarize(&tr->prog, ts, tr->summary, last_epoch, last_k, last_m, epochs, 0, early);
done:
    ddp_loader_destroy(tl);
    ddp_loader_destroy(vl);
    ddp_sampler_free(&tsm);
    ddp_sampler_free(&vsm);
    return st;
}

ddp_status ddp_train(ddp_ctx *ctx, const ddp_train_config *cfg, ddp_model *model, ddp_dataset *train, ddp_dataset *val)
{
    return ddp_train_summarized(ctx, cfg, model, train, val, NULL);
}

ddp_status ddp_train_summarized(ddp_ctx *ctx, const ddp_train_config *cfg, ddp_model *model, ddp_dataset *train,
                                ddp_dataset *val, ddp_train_summary *summary)
{
    double t_start = now_s();
    if (summary) memset(summary, 0, sizeof *summary);
    DDP_CHECK(ddp_ctx_usable(ctx, "ddp_train"));
    /* the arguments, agreed: a NULL or a broken model on one rank fails every rank here, not a collective later */
    DDP_CHECK(ddp_agree_status(ctx, ddp_train_args_check(cfg, ctx->topo.size, ctx->cli_names, model, train, val)));
    /* a built-in model's own configuration where cfg.model_config is NULL, and in place of one that describes the
     * model (one that contradicts it was refused above) but gives other workspace sizes or precision: the checks below,
     * the token budgets' cost, checkpoints (eval rebuilds the model) and run.json (its activation rows) read it */
    ddp_train_config own_cfg;
    const ddp_model_config *own_mc = ddp_model_own_config(model);
    int own = !cfg->model_config && own_mc;
    if (own_mc) {
        own_cfg = *cfg;
        own_cfg.model_config = own_mc;
        cfg = &own_cfg;
    }
    DDP_CHECK(ddp_train_args_agree(ctx, cfg, model)); /* valid values that differ between ranks: replicas diverge */
    const ddp_model_config *mc = cfg->model_config;
    if (mc && mc->kind == DDP_MODEL_TRANSFORMER) { /* a sample longer than P: one line naming it on every rank, before
                                                    * the run directory (in a step, only the ranks holding it fail) */
        char p[96]; /* "... more than --max-positions 8", "... more than cfg.model_config->max_positions = 8", "...
                     * more than the model's max_positions = 8" (cfg.model_config NULL) */
        snprintf(p, sizeof p, "%s%s",
                 own ? "the model's max_positions" : ddp_opt_name(ctx->cli_names, DDP_OPT_MAX_POSITIONS),
                 ctx->cli_names ? "" : " =");
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, train, mc->max_positions, p));
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, val, mc->max_positions, p));
    }
    ddp_trainer tr = {.state = {.ctx = ctx,
                                .cfg = cfg,
                                .model = model,
                                .resume_os = -1,
                                .resume_pos = -1,
                                .resume_legacy_mb = -1,
                                .prev_steps = -1,
                                .resume_end_steps = -1},
                      .summary = summary};
    ddp_rundir rd;
    /* before anything is written: the run directory is this run's (lock; no other run's files unless resuming) */
    DDP_CHECK(ddp_rundir_acquire(ctx, cfg->out_dir, cfg->resume, cfg->overwrite, &rd));
    ddp_status st = ddp_agree_status(ctx, ddp_trainer_setup(&tr, train, val));
    if (st == DDP_OK) st = run(&tr, train, val);
    if (st == DDP_OK) { /* run.json's data_cache: the open-shard LRU's peaks and hit rates (docs/run-directory.md) */
        char rj[4200];
        snprintf(rj, sizeof rj, "%s/run.json", cfg->out_dir);
        st = ddp_run_json_data_cache(ctx, rj, train, val);
    }
    /* failed on this rank alone (a step, validation, a metric row's write): the others may be waiting in a collective
     * it left (as the CLI's MPI_Abort assumes), so no further collective, and ddp_finalize leaves MPI_Finalize alone
     * rather than wait for them; before the teardown, which then keeps what a pending request may still write */
    if (st != DDP_OK && !ddp_error_shared() && ctx->topo.size > 1) ddp_ctx_break_alone(ctx, ddp_last_error());
    ddp_trainer_teardown(&tr);
    if (st != DDP_OK && !tr.wrote)
        ddp_rundir_discard(ctx, &rd); /* refused before writing: a --out this run made is gone again */
    else
        ddp_rundir_release(&rd);
    if (summary && summary->valid) summary->wall_s = now_s() - t_start;
    return st;
}
