/* trainer_ckpt.c — the trainer's checkpoints: saving last.h5 and the top-k files (state, optimizer moments,
 * position, decisions), the policy's decision after each validation, and resuming from a checkpoint with
 * the checks that keep a resume exact (world size, global batch or budget, shuffle). */
#include "mpi_ddp/train/checkpoint.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/train/lr_schedule.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/train/trainer_priv.h"
#include "mpi_ddp/comm/watchdog.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
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

/* Collective: rank 0 writes the full state at position (t->epoch, t->mb) to path; the others wait (within
 * --collective-timeout, which must therefore exceed the time a checkpoint write takes). */
/* The epoch order as checkpoints record it: "full" or "block:<MiB>:<window>". */
static void shuffle_name(const ddp_train_config *c, char *buf, size_t len)
{
    if (c->shuffle_block) snprintf(buf, len, "block:%g:%d", c->shuffle_block_mb, c->shuffle_window);
    else snprintf(buf, len, "full");
}

static ddp_status save_ckpt(trainer *t, const char *path)
{
    ddp_ctx *ctx = t->ctx;
    ddp_watch_mark(ctx, t->global_step, "checkpoint");
    int W = ctx->topo.size;
    double *bl = ctx->topo.rank == 0 ? ddp_calloc((size_t)W, sizeof *bl) : NULL;
    int ok = ctx->topo.rank != 0 || bl, all;
    DDP_CHECK(ddp_all_ok(ctx, ok, &all));
    if (!all) {
        free(bl);
        return ddp_agree_status(ctx, ddp_set_error(DDP_ERR_NOMEM, "out of memory"));
    }
    MPI_Request rq;
    MPI_CHECK(MPI_Igather(&t->dec.best_local, 1, MPI_DOUBLE, bl, 1, MPI_DOUBLE, 0, ctx->world, &rq));
    ddp_status wst = ddp_wait(ctx, 1, &rq, "the checkpoint state gather");
    if (wst != DDP_OK) {
        free(bl);
        return wst;
    }
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        size_t bytes = (size_t)t->n * sizeof(float);
        st = t->be->download(t->be, t->h_params, t->params, bytes);
        if (st == DDP_OK) st = t->be->download(t->be, t->h_m, t->m, bytes);
        if (st == DDP_OK) st = t->be->download(t->be, t->h_v, t->v, bytes);
        char *tk = topk_json(&t->dec);
        int64_t acc = t->cfg->accumulate, os = t->mb >= t->nmb ? (t->nmb + acc - 1) / acc : t->mb / acc;
        ddp_ckpt_state cs = {.epoch = t->epoch,
                             .optim_step_in_epoch = os,
                             .samples_in_epoch = t->mb >= t->nmb ? t->tsm->n : ddp_trainer_epoch_position(t, os),
                             .mode_max = t->cfg->mode_max,
                             .skipped_steps = t->skipped,
                             .lr_schedule = ddp_lr_schedule_name(t->cfg->lr_schedule),
                             .lr_warmup_steps = ddp_lr_warmup_steps(t->cfg, t->lr_total),
                             .lr_total_steps = t->lr_total,
                             .lr = t->cfg->lr,
                             .min_lr = t->cfg->min_lr,
                             .global_step = t->global_step,
                             .optim_step = t->optim_step,
                             .seed = t->cfg->seed,
                             .world_size = W,
                             .best_score = t->dec.best,
                             .bad_epochs = t->dec.bad_epochs,
                             .config_json = t->cfg->config_json,
                             .global_batch = (int64_t)t->cfg->batch_size * W * t->cfg->accumulate,
                             .global_batch_rows = t->cfg->batch_rows * W * t->cfg->accumulate,
                             .best_local = bl,
                             .topk_json = tk,
                             .model_cfg = t->cfg->model_config};
        snprintf(cs.monitor, sizeof cs.monitor, "%s", t->dec.monitor);
        shuffle_name(t->cfg, cs.shuffle, sizeof cs.shuffle);
        if (st == DDP_OK) st = ddp_ckpt_write(path, t->model, t->h_params, t->h_m, t->h_v, &cs);
        free(tk);
    }
    free(bl);
    return ddp_agree_status(ctx, st);
}

ddp_status ddp_trainer_save_last(trainer *t)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/last.h5", t->ckpt_dir);
    return save_ckpt(t, path);
}

/* After validation: the policy's decision, the top-k file, early stopping. */
ddp_status ddp_trainer_decide(trainer *t, int64_t epoch, int *stop)
{
    ddp_decision d;
    DDP_CHECK(ddp_decide(t->ctx, &t->dec, &t->row, &t->lrow, epoch, t->global_step, &d));
    int rank0 = t->ctx->topo.rank == 0;
    if (rank0 && t->cfg->progress) fprintf(stderr, "checkpoint: %s\n", d.note);
    if (rank0 && d.note[0]) { /* the decision log, one line per decision */
        char p[4400];
        snprintf(p, sizeof p, "%s/decisions.log", t->ckpt_dir);
        FILE *f = fopen(p, "a");
        if (f) {
            fprintf(f, "%s\n", d.note);
            fclose(f);
        }
    }
    if (d.save) {
        char name[512], path[4800], removed[4800];
        ddp_topk_name(name, sizeof name, &t->dec, epoch, t->global_step, d.value);
        snprintf(path, sizeof path, "%s/%s", t->ckpt_dir, name);
        ddp_decider_commit(&t->dec, &d, epoch, t->global_step, path, removed, sizeof removed);
        DDP_CHECK(save_ckpt(t, path));
        if (rank0 && removed[0] && strcmp(removed, path) != 0) remove(removed);
    }
    *stop = d.stop;
    if (d.stop && rank0 && t->cfg->progress)
        fprintf(stderr, "early stopping: %s did not improve for %d epoch(s)\n", t->dec.monitor, t->cfg->early_stop_patience);
    return DDP_OK;
}

/* Restores the state from a checkpoint read by rank 0 and broadcast. */
ddp_status ddp_trainer_resume(trainer *t, const char *path)
{
    ddp_ctx *ctx = t->ctx;
    const ddp_train_config *c = t->cfg;
    ddp_ckpt_state cs = {0};
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_ckpt_read(path, t->model, t->h_params, t->h_m, t->h_v, &cs);
    DDP_CHECK(ddp_agree_status(ctx, st));
    int64_t facts[12] = {cs.epoch,           cs.optim_step_in_epoch, cs.global_step,      cs.optim_step,
                         cs.world_size,      cs.global_batch,        cs.global_batch_rows, cs.samples_in_epoch,
                         cs.legacy_micro_batch, (int64_t)cs.seed,    cs.mode_max,          cs.skipped_steps};
    MPI_CHECK(MPI_Bcast(facts, 12, MPI_INT64_T, 0, ctx->world));
    int W = ctx->topo.size;
    int64_t gb = (int64_t)c->batch_size * W * c->accumulate, gr = c->batch_rows * W * c->accumulate;
    st = DDP_OK;
    if ((facts[6] > 0) != (gr > 0))
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with %s batches; this run uses %s (--batch-rows)", path,
                           facts[6] > 0 ? "token-budget" : "sample-count", gr > 0 ? "token budgets" : "sample counts");
    else if (gr > 0) { /* token budgets: the order depends on the global budget only, any world size resumes */
        if (facts[6] != gr)
            st = ddp_set_error(DDP_ERR_ARG, "%s: saved with a global budget of %lld rows; this run's is %lld (batch-rows x ranks x accumulate)",
                               path, (long long)facts[6], (long long)gr);
    } else if (facts[4] != W && (c->sampling_shard || facts[5] != gb))
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved by %lld ranks with a global batch of %lld; resuming on %d ranks needs --sampling global and the same "
                           "global batch (batch-size x ranks x accumulate = %lld now)",
                           path, (long long)facts[4], (long long)facts[5], W, (long long)gb);
    else if (facts[5] != gb)
        st = ddp_set_error(DDP_ERR_ARG, "%s: global batch %lld differs from this run's %lld (batch-size x ranks x accumulate)", path,
                           (long long)facts[5], (long long)gb);
    if (st == DDP_OK && facts[8] >= 0 && facts[4] != W) /* a micro-batch index means nothing at another world size */
        st = ddp_set_error(DDP_ERR_ARG, "%s: written by an older mpiddp that stored the position in micro-batches; resume it on %lld ranks",
                           path, (long long)facts[4]);
    if (st == DDP_OK && (uint64_t)facts[9] != c->seed) /* the epoch order and the dropout masks come from the seed */
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with --seed %llu; this run uses --seed %llu (the epoch order would change)", path,
                           (unsigned long long)facts[9], (unsigned long long)c->seed);
    if (st == DDP_OK && facts[10] >= 0 && facts[10] != c->mode_max)
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with --mode %s; this run uses --mode %s (the best score and top-k would be misread)",
                           path, facts[10] ? "max" : "min", c->mode_max ? "max" : "min");
    char mine[64], saved[64], monitor[128];
    shuffle_name(c, mine, sizeof mine);
    snprintf(saved, sizeof saved, "%s", cs.shuffle);
    snprintf(monitor, sizeof monitor, "%s", cs.monitor);
    MPI_CHECK(MPI_Bcast(saved, (int)sizeof saved, MPI_CHAR, 0, ctx->world));
    MPI_CHECK(MPI_Bcast(monitor, (int)sizeof monitor, MPI_CHAR, 0, ctx->world));
    if (st == DDP_OK && strcmp(saved, mine) != 0) /* another order would not continue the saved epoch exactly */
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with --shuffle %s; this run uses --shuffle %s", path, saved, mine);
    if (st == DDP_OK && monitor[0] && strcmp(monitor, c->monitor) != 0)
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with --monitor %s; this run uses --monitor %s (the best score and top-k would be misread)",
                           path, monitor, c->monitor);
    if (st != DDP_OK) ddp_mark_error_shared(); /* every rank computed the same facts */
    if (st != DDP_OK) {
        free(cs.best_local);
        free(cs.topk_json);
        return st;
    }
    for (int64_t lo = 0; lo < t->n; lo += 1 << 28) {
        int cnt = (int)(t->n - lo < (1 << 28) ? t->n - lo : (1 << 28));
        MPI_CHECK(MPI_Bcast(t->h_params + lo, cnt, MPI_FLOAT, 0, ctx->world));
        MPI_CHECK(MPI_Bcast(t->h_m + lo, cnt, MPI_FLOAT, 0, ctx->world));
        MPI_CHECK(MPI_Bcast(t->h_v + lo, cnt, MPI_FLOAT, 0, ctx->world));
    }
    size_t bytes = (size_t)t->n * sizeof(float);
    st = t->be->upload(t->be, t->params, t->h_params, bytes);
    if (st == DDP_OK) st = t->be->upload(t->be, t->m, t->h_m, bytes);
    if (st == DDP_OK) st = t->be->upload(t->be, t->v, t->h_v, bytes);
    DDP_CHECK(ddp_agree_status(ctx, st));
    t->epoch = facts[0];
    t->mb = 0; /* set in micro-batches by the trainer once the epoch's plan is known */
    t->resume_os = facts[8] >= 0 ? -1 : facts[1];
    t->resume_pos = facts[7];
    t->resume_legacy_mb = facts[8];
    t->global_step = facts[2];
    t->optim_step = facts[3];
    t->skipped = facts[11];
    /* decision state: rank 0's view is broadcast; each rank gets its own best local value when the world
     * size matches (else the votes start afresh) */
    double dstate[2] = {cs.best_score, (double)cs.bad_epochs}, mybest = NAN;
    MPI_CHECK(MPI_Bcast(dstate, 2, MPI_DOUBLE, 0, ctx->world));
    if (facts[4] == W) MPI_CHECK(MPI_Scatter(cs.best_local, 1, MPI_DOUBLE, &mybest, 1, MPI_DOUBLE, 0, ctx->world));
    t->dec.best = dstate[0];
    t->dec.bad_epochs = (int64_t)dstate[1];
    t->dec.best_local = mybest;
    if (ctx->topo.rank == 0 && cs.topk_json) { /* the top-k list lives on rank 0, which manages the files */
        cJSON *a = cJSON_Parse(cs.topk_json);
        cJSON *e;
        t->dec.ntopk = 0;
        cJSON_ArrayForEach(e, a)
        {
            if (t->dec.ntopk >= DDP_TOPK_MAX || cJSON_GetArraySize(e) != 4) continue;
            ddp_topk_entry *k = &t->dec.topk[t->dec.ntopk++];
            k->value = cJSON_GetArrayItem(e, 0)->valuedouble;
            k->epoch = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
            k->step = (int64_t)cJSON_GetArrayItem(e, 2)->valuedouble;
            snprintf(k->path, sizeof k->path, "%s", cJSON_GetArrayItem(e, 3)->valuestring ? cJSON_GetArrayItem(e, 3)->valuestring : "");
        }
        cJSON_Delete(a);
    }
    free(cs.best_local);
    free(cs.topk_json);
    if (ctx->topo.rank == 0) /* a notice even with --no-progress: where the run continues from matters */
    {
        int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
        if (t->epoch >= epochs) /* every epoch asked for is done: say so, and train nothing */
            fprintf(stderr, "mpiddp train: nothing to do: %s has finished %lld epoch(s) (epochs 0-%lld) and --epochs is %d; "
                            "raise --epochs to train more\n",
                    path, (long long)t->epoch, (long long)t->epoch - 1, epochs);
        else
            fprintf(stderr, "mpiddp train: resuming from %s at epoch %lld (0-based), optimizer step %lld of the epoch, step %lld\n",
                    path, (long long)t->epoch, (long long)(facts[8] >= 0 ? facts[8] / c->accumulate : facts[1]), (long long)t->global_step);
    }
    return DDP_OK;
}

/* Temporary files of a save that was killed before its rename (never read: last.h5 is still whole). */
void ddp_trainer_remove_stale_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[8400];
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".h5.tmp.")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            remove(p);
        }
    if (d) closedir(d);
}

