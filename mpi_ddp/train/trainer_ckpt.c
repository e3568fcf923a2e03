/* trainer_ckpt.c — the trainer's checkpoints over the checkpointed state alone (train_state.h): saving last.h5 and the
 * top-k files with the position in units a resume at any world size reads back, the policy's decision after each
 * validation and its decisions.log. Resuming from them is trainer_resume.c's. */
#include "mpi_ddp/train/checkpoint.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/train/lr_schedule.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/train/train_state.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/train/rundir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *topk_json(const ddp_decider *d)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < d->ntopk; i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(d->topk[i].value));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)d->topk[i].epoch));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)d->topk[i].step));
        cJSON_AddItemToArray(e, cJSON_CreateString(d->topk[i].path));
        cJSON_AddItemToArray(a, e);
    }
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

void ddp_train_state_shuffle_name(const ddp_train_config *c, char *buf, size_t len)
{
    if (c->shuffle_block)
        snprintf(buf, len, "block:%g:%d", c->shuffle_block_mb, c->shuffle_window);
    else
        snprintf(buf, len, "full");
}

int64_t ddp_train_state_epoch_position(const ddp_train_state *ts, int64_t os)
{
    const ddp_sampler *sm = ts->tsm;
    if (sm->budget > 0) return os < sm->nplan ? sm->plan[os] : sm->n; /* the plan is a function of the global budget */
    int64_t gb = (int64_t)ts->cfg->batch_size * ts->ctx->topo.size * ts->cfg->accumulate;
    int64_t pos = os * gb; /* sample-count batches: optimizer step k covers positions [k gb, (k + 1) gb) */
    return pos < sm->per_rank * sm->world ? pos : sm->n;
}

/* Collective: rank 0 writes the full state (parameters, optimizer moments, position, decisions) at position
 * (ts->epoch, ts->mb) to path; the others wait (within --collective-timeout, which must therefore exceed the time a
 * checkpoint write takes). */
static ddp_status save_ckpt(ddp_train_state *ts, const char *path)
{
    ddp_ctx *ctx = ts->ctx;
    ddp_watch_mark(ctx, ts->global_step, "checkpoint");
    int W = ctx->topo.size;
    double *bl = ctx->topo.rank == 0 ? ddp_calloc((size_t)(2 * W), sizeof *bl) : NULL; /* best_local, then _es */
    int ok = ctx->topo.rank != 0 || bl, all;
    DDP_CHECK(ddp_all_ok(ctx, ok, &all));
    if (!all) {
        free(bl);
        return ddp_agree_status(ctx, ddp_set_error(DDP_ERR_NOMEM, "out of memory"));
    }
    MPI_Request rq[2];
    MPI_CHECK(MPI_Igather(&ts->dec.best_local, 1, MPI_DOUBLE, bl, 1, MPI_DOUBLE, 0, ctx->world, &rq[0]));
    MPI_CHECK(
        MPI_Igather(&ts->dec.best_local_es, 1, MPI_DOUBLE, bl ? bl + W : NULL, 1, MPI_DOUBLE, 0, ctx->world, &rq[1]));
    ddp_status wst = ddp_wait(ctx, 2, rq, "the checkpoint state gather");
    if (wst != DDP_OK) {
        ddp_ctx_release(ctx, bl); /* kept after a timeout: the gather may still write into it */
        return wst;
    }
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        size_t bytes = (size_t)ts->n * sizeof(float);
        st = ts->be->download(ts->be, ts->h_params, ts->params, bytes);
        if (st == DDP_OK) st = ts->be->download(ts->be, ts->h_m, ts->m, bytes);
        if (st == DDP_OK) st = ts->be->download(ts->be, ts->h_v, ts->v, bytes);
        char *tk = topk_json(&ts->dec);
        /* at the epoch's end: the steps it took (resumed there in another order: the checkpoint's run's) */
        int64_t acc = ts->cfg->accumulate, os = ts->mb >= ts->nmb ? (ts->nmb + acc - 1) / acc : ts->mb / acc;
        if (ts->mb >= ts->nmb && ts->resume_end_steps >= 0) os = ts->resume_end_steps;
        int64_t lr_start, lr_end; /* the schedule's span: the run's steps, or what a resume kept or restarted */
        ddp_lr_span(ts->cfg, ts->lr_total, &lr_start, &lr_end);
        ddp_ckpt_state cs = {.epoch = ts->epoch,
                             .optim_step_in_epoch = os,
                             .prev_epoch_steps = ts->prev_steps,
                             .samples_in_epoch = ts->mb >= ts->nmb ? ts->tsm->n
                                                                   : ddp_train_state_epoch_position(ts, os),
                             .mode_max = ts->cfg->mode_max,
                             .skipped_steps = ts->skipped,
                             .lr_schedule = ddp_lr_schedule_name(ts->cfg->lr_schedule),
                             .lr_warmup_steps = ddp_lr_warmup_steps(ts->cfg, ts->lr_total),
                             .lr_start_step = lr_start,
                             .lr_total_steps = lr_end,
                             .lr = ts->cfg->lr,
                             .min_lr = ts->cfg->min_lr,
                             .weight_decay = ts->cfg->weight_decay,
                             .beta1 = ts->cfg->beta1,
                             .beta2 = ts->cfg->beta2,
                             .eps = ts->cfg->eps,
                             .global_step = ts->global_step,
                             .optim_step = ts->optim_step,
                             .seed = ts->cfg->seed,
                             .world_size = W,
                             .best_score = ts->dec.best,
                             .bad_epochs = ts->dec.bad_epochs,
                             .config_json = ts->cfg->config_json,
                             .global_batch = (int64_t)ts->cfg->batch_size * W * ts->cfg->accumulate,
                             .global_batch_rows = ts->cfg->batch_rows * W * ts->cfg->accumulate,
                             .best_local = bl,
                             .best_local_es = bl + W,
                             .topk_json = tk,
                             .model_cfg = ts->cfg->model_config,
                             .precision = ts->cfg->precision};
        snprintf(cs.monitor, sizeof cs.monitor, "%s", ts->dec.monitor);
        ddp_train_state_shuffle_name(ts->cfg, cs.shuffle, sizeof cs.shuffle);
        snprintf(cs.sampling, sizeof cs.sampling, "%s", ts->cfg->sampling_shard ? "shard" : "global");
        if (st == DDP_OK) st = ddp_ckpt_write(path, ts->model, ts->h_params, ts->h_m, ts->h_v, &cs);
        free(tk);
    }
    free(bl);
    return ddp_agree_status(ctx, st);
}

/* Rank 0, after a checkpoint that records the list without them was saved (last.h5 or a top-k file: a resume from
 * either no longer knows them): the files a lower --save-top-k dropped from the list at resume. */
static void drop_unlisted(ddp_train_state *ts)
{
    for (int i = 0; i < ts->ntopk_drop; i++) {
        const char *rel = ts->topk_drop + 4800 * i;
        int listed = 0;
        for (int k = 0; k < ts->dec.ntopk; k++) listed |= !strcmp(ts->dec.topk[k].path, rel);
        char p[8400];
        snprintf(p, sizeof p, "%s/%s", ts->cfg->out_dir, rel);
        if (!listed) remove(p);
    }
    ts->ntopk_drop = 0;
}

ddp_status ddp_train_state_save_last(ddp_train_state *ts)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/last.h5", ts->ckpt_dir);
    DDP_CHECK(save_ckpt(ts, path));
    drop_unlisted(ts);
    return DDP_OK;
}

/* After validation: the policy's decision, the top-k file, early stopping. */
ddp_status ddp_train_state_decide(ddp_train_state *ts, const ddp_metric_row *row, const ddp_metric_row *lrow,
                                  int64_t epoch, int *stop)
{
    ddp_decision d;
    ts->dec.nonfinite_continue = ts->cfg->skip_nonfinite; /* a non-finite monitor: an error, unless --skip-nonfinite */
    /* the top-k file holds the state before this decision (its position is before this epoch's validation), so a
     * resume from it takes the same decision again: the list, best and patience must not already count it */
    ddp_decider *state = ddp_calloc(2, sizeof *state); /* [0] before the decision, [1] after it */
    ddp_status st = ddp_agree_status(ts->ctx, state ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory"));
    if (st != DDP_OK) {
        free(state);
        return st;
    }
    state[0] = ts->dec;
    st = ddp_decide(ts->ctx, &ts->dec, row, lrow, epoch, ts->global_step, &d);
    if (st != DDP_OK) {
        free(state);
        return st;
    }
    int rank0 = ts->ctx->topo.rank == 0;
    if (rank0 && ts->cfg->progress) fprintf(stderr, "checkpoint: %s\n", d.note);
    if (d.save) { /* the top-k list holds paths relative to the run directory: a copied or moved run manages its own */
        char name[512], rel[600], path[4800 + 64], removed[4800];
        ddp_topk_name(name, sizeof name, &ts->dec, epoch, ts->global_step, d.value);
        snprintf(rel, sizeof rel, "checkpoints/%s", name);
        snprintf(path, sizeof path, "%s/%s", ts->cfg->out_dir, rel);
        ddp_decider_commit(&ts->dec, &d, epoch, ts->global_step, rel, removed, sizeof removed);
        state[1] = ts->dec; /* plain data: the state before the decision is the one saved */
        ts->dec = state[0];
        st = save_ckpt(ts, path);
        ts->dec = state[1];
        if (st != DDP_OK) {
            free(state);
            return st;
        }
        drop_unlisted(ts);
        if (rank0 && removed[0] && strcmp(removed, rel) != 0 &&
            ddp_rundir_inside(removed)) { /* never outside the run */
            snprintf(path, sizeof path, "%s/%s", ts->cfg->out_dir, removed);
            remove(path);
        }
    }
    free(state);
    st = DDP_OK;
    if (rank0 && d.note[0]) { /* the decision log, one line per decision, once its save has succeeded */
        char p[4400];
        snprintf(p, sizeof p, "%s/decisions.log", ts->ckpt_dir);
        FILE *f = fopen(p, "a");
        int bad = !f || fprintf(f, "%s\n", d.note) < 0;
        bad |= f && fclose(f) != 0;
        if (bad) st = ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", p, strerror(errno));
    }
    DDP_CHECK(ddp_agree_status(ts->ctx, st));
    *stop = d.stop;
    if (d.stop && rank0 && ts->cfg->progress)
        fprintf(stderr, "early stopping: %s did not improve for %d epoch(s)%s\n", ts->dec.monitor,
                ts->cfg->early_stop_patience, d.nonfinite ? " (the last value was not finite)" : "");
    return DDP_OK;
}

ddp_status ddp_train_state_trim_decisions(const char *dir, int64_t keep_upto)
{
    char p[4400], tmp[4420], line[2048];
    snprintf(p, sizeof p, "%s/decisions.log", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(p, "r"), *o = NULL;
    if (!f) return DDP_OK;
    long long e, s;
    int after = 0;
    while (!after && fgets(line, sizeof line, f))
        after = sscanf(line, "epoch %lld step %lld:", &e, &s) == 2 && s > keep_upto;
    if (after) {
        rewind(f);
        o = fopen(tmp, "w");
        while (o && fgets(line, sizeof line, f))
            if (!(sscanf(line, "epoch %lld step %lld:", &e, &s) == 2 && s > keep_upto)) fputs(line, o);
    }
    int bad = ferror(f);
    fclose(f);
    if (!after) return DDP_OK;
    bad |= !o || fflush(o) != 0 || ferror(o);
    bad |= o && fclose(o) != 0;
    if (!bad && rename(tmp, p) == 0) return DDP_OK;
    ddp_status st = ddp_set_error(DDP_ERR_IO, "%s: cannot rewrite it for the resume: %s", p, strerror(errno));
    remove(tmp);
    return st;
}
