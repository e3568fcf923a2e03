/* trainer_resume.c — resuming the trainer from a checkpoint (trainer_ckpt.c writes them): the checks that keep a
 * resume exact (world size, global batch or budget, seed, epoch order, monitor and mode), the notices of what a
 * resume changes, the learning-rate schedule settled against the checkpoint's, and the resumed position in this run's
 * micro-batches. */
#include "mpi_ddp/train/checkpoint.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/train/lr_schedule.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/train/train_state.h"
#include "mpi_ddp/train/rundir.h"
#include "mpi_ddp/train/runinfo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* N(X): the setting's name, V(buf, X, fmt, ...): the setting with its value, written to buf; the CLI's option or the
 * C API's field, as ctx->cli_names says (optname.h) */
#define N(X) ddp_opt_name(ctx->cli_names, DDP_OPT_##X)
#define V(buf, X, ...) ddp_opt_fmt(buf, sizeof buf, ctx->cli_names, DDP_OPT_##X, __VA_ARGS__)

/* One line on stderr as the command that runs the library names itself: "mpiddp train: notice: ..." for the CLI
 * (ctx->cli_names), "ddp_train: notice: ..." for a C-API program, as ddp_train's error lines begin. */
static void say(const ddp_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const ddp_ctx *ctx, const char *fmt, ...)
{
    char line[8192], *big = NULL;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n >= (int)sizeof line) { /* a longer line (paths near PATH_MAX): whole, or cut but still ending the line */
        big = malloc((size_t)n + 1);
        if (big)
            vsnprintf(big, (size_t)n + 1, fmt, again);
        else
            line[sizeof line - 2] = '\n';
    }
    va_end(again);
    va_end(ap);
    /* one fprintf, one line: stderr is unbuffered */
    fprintf(stderr, "%s: %s", ctx->cli_names ? "mpiddp train" : "ddp_train", big ? big : line);
    free(big);
}


/* A top-k entry's path as this run keeps it: "checkpoints/NAME", relative to the run directory. Older
 * checkpoints stored the path as --out was typed (relative to another working directory, or the directory a
 * run was copied from): the entry becomes this run directory's file of the same name, or is dropped (-1)
 * when the run has no such file, so a resumed copy never manages, let alone deletes, the original's files. */
static int topk_entry_path(const char *out_dir, const char *saved, char *rel, size_t len)
{
    const char *base = strrchr(saved, '/');
    base = base ? base + 1 : saved;
    if (!*base || !strcmp(base, "..") || !strcmp(base, ".")) return -1;
    int current = !strncmp(saved, "checkpoints/", 12) && !strchr(saved + 12, '/');
    snprintf(rel, len, "checkpoints/%s", base);
    if (current) return 0;
    char p[8400];
    struct stat s;
    snprintf(p, sizeof p, "%s/%s", out_dir, rel);
    return stat(p, &s) == 0 && S_ISREG(s.st_mode) ? 0 : -1;
}

/* Restores the state from a checkpoint read by rank 0 and broadcast. */
ddp_status ddp_train_state_resume(ddp_train_state *ts, const char *path, int64_t ntrain)
{
    ddp_ctx *ctx = ts->ctx;
    const ddp_train_config *c = ts->cfg;
    ddp_ckpt_state cs = {0};
    ddp_status st = DDP_OK;
    struct stat sb;
    if (ctx->topo.rank == 0)
        st = ddp_ckpt_read(path, ts->model, c->model_config, ts->h_params, ts->h_m, ts->h_v, &cs, ctx->cli_names);
    if (st != DDP_OK && c->resume && strcmp(c->resume, "auto") != 0 && stat(path, &sb) != 0 && errno == ENOENT) {
        char why[1024]; /* --resume last (Lightning's ckpt_path="last"), a mistyped file: what --resume takes */
        snprintf(why, sizeof why, "%s", ddp_last_error());
        st = ddp_set_error(st, "%s (%s takes a checkpoint file, or %s: %s/checkpoints/last.h5 when it exists)", why,
                           N(RESUME), ctx->cli_names ? "auto" : "\"auto\"", c->out_dir);
    }
    DDP_CHECK(ddp_agree_status(ctx, st));
    /* rank 0's facts, agreed in one broadcast of integers, and its strings (the checkpoint's --sampling, "" in older
     * files, --shuffle and --monitor) in one of characters */
    int64_t facts[13] = {
        cs.epoch,        cs.optim_step_in_epoch, cs.global_step,      cs.optim_step,         cs.world_size,
        cs.global_batch, cs.global_batch_rows,   cs.samples_in_epoch, cs.legacy_micro_batch, (int64_t)cs.seed,
        cs.mode_max,     cs.skipped_steps,       cs.prev_epoch_steps};
    MPI_CHECK(MPI_Bcast(facts, 13, MPI_INT64_T, 0, ctx->world));
    struct {
        char sampling[sizeof cs.sampling], shuffle[64], monitor[128];
    } strs;
    memset(&strs, 0, sizeof strs);
    snprintf(strs.sampling, sizeof strs.sampling, "%s", cs.sampling);
    snprintf(strs.shuffle, sizeof strs.shuffle, "%s", cs.shuffle);
    snprintf(strs.monitor, sizeof strs.monitor, "%s", cs.monitor);
    _Static_assert(sizeof strs == sizeof strs.sampling + sizeof strs.shuffle + sizeof strs.monitor, "no padding");
    MPI_CHECK(MPI_Bcast(&strs, (int)sizeof strs, MPI_CHAR, 0, ctx->world));
    strs.sampling[sizeof strs.sampling - 1] = strs.shuffle[sizeof strs.shuffle - 1] = 0;
    strs.monitor[sizeof strs.monitor - 1] = 0;
    const char *sampling = strs.sampling, *saved = strs.shuffle, *monitor = strs.monitor;
    int W = ctx->topo.size;
    int64_t gb = (int64_t)c->batch_size * W * c->accumulate, gr = c->batch_rows * W * c->accumulate;
    /* saved at an epoch boundary: the start of the next epoch (nothing of it trained), or the end of an epoch's
     * training before its validation (every sample of it trained: stopped during validation or at the epoch's last
     * step, a top-k file). Another epoch order (--shuffle, --sampling, a shard checkpoint's world size) continues it
     * exactly with the next epoch, no sample trained twice or skipped; the saved epoch's validation runs first as ever.
     * An older checkpoint's micro-batch position (same world size and micro-batches: checked below) is at the end
     * when it is the epoch's last micro-batch under its global sampling (older files record none, or "global").
     */
    int64_t per_rank = c->drop_last ? ntrain / W : (ntrain + W - 1) / W, bs = c->batch_size > 0 ? c->batch_size : 1;
    int legacy_end = facts[8] > 0 && gr == 0 && facts[4] == W && strcmp(sampling, "shard") != 0 &&
                     facts[8] == (per_rank + bs - 1) / bs;
    int at_end = (facts[8] < 0 && ntrain > 0 && facts[7] == ntrain) || legacy_end;
    int boundary = facts[8] >= 0 ? facts[8] == 0 || legacy_end : (facts[1] == 0 && facts[7] == 0) || at_end;
    int64_t steps_in = facts[8] >= 0 ? (facts[8] + c->accumulate - 1) / c->accumulate : facts[1];
    st = DDP_OK;
    char va[4200], vb[4200];
    if (facts[6] > 0 && gr == 0) /* name the option each side used, and the value that resumes */
        st = ddp_set_error(
            DDP_ERR_ARG,
            "%s: saved with token-budget batches (%s, %lld rows per optimizer step); this run uses sample-count "
            "batches (%s): resume with %s (batch-rows x ranks x accumulate = %lld)",
            path, N(BATCH_ROWS), (long long)facts[6], N(BATCH_SIZE), N(BATCH_ROWS), (long long)facts[6]);
    else if (facts[6] <= 0 && gr > 0)
        st = ddp_set_error(
            DDP_ERR_ARG,
            "%s: saved with sample-count batches (%s, %lld samples per optimizer step); this run uses token-budget "
            "batches (%s): resume with %s (batch-size x ranks x accumulate = %lld)",
            path, N(BATCH_SIZE), (long long)facts[5], N(BATCH_ROWS), N(BATCH_SIZE), (long long)facts[5]);
    else if (gr > 0) { /* token budgets: the order depends on the global budget only, any world size resumes */
        if (facts[6] != gr)
            st = ddp_set_error(
                DDP_ERR_ARG,
                "%s: saved with a global budget of %lld rows; this run's is %lld (batch-rows x ranks x accumulate)",
                path, (long long)facts[6], (long long)gr);
    } else if (facts[4] != W && !boundary && !strcmp(sampling, "shard")) /* each rank's own shards: mid-epoch, no
                                                                          * other world size continues */
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved by %lld ranks with %s, whose order depends on the world size; resume it on "
                           "%lld ranks with %s",
                           path, (long long)facts[4], V(va, SAMPLING, "shard"), (long long)facts[4], va);
    else if (facts[4] != W && !boundary && (c->sampling_shard || facts[5] != gb))
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved by %lld ranks with a global batch of %lld; resuming on %d ranks needs %s and "
                           "the same global batch (batch-size x ranks x accumulate = %lld now)",
                           path, (long long)facts[4], (long long)facts[5], W, V(va, SAMPLING, "global"), (long long)gb);
    else if (facts[5] != gb)
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: global batch %lld differs from this run's %lld (batch-size x ranks x accumulate)", path,
                           (long long)facts[5], (long long)gb);
    if (st == DDP_OK && facts[8] >= 0 && facts[4] != W) /* a micro-batch index means nothing at another world size */
        st = ddp_set_error(
            DDP_ERR_ARG,
            "%s: written by an older mpiddp that stored the position in micro-batches; resume it on %lld ranks", path,
            (long long)facts[4]);
    /* such a position counts micro-batches of the checkpoint's batch size, which it does not record (nor its
     * accumulate): the same global batch and world size leave batch-size x accumulate alone. It resumes only where
     * the split shows: its global step is one optimizer step per micro-batch of this run's (accumulate 1 then; the
     * epochs before it whole, under global sampling, where every epoch has this run's micro-batches), and accumulate
     * 1 now. Its drop-last is assumed to be this run's (it moves the epoch's end by a micro-batch at most;
     * docs/distributed.md). */
    int64_t before = facts[0] == 0                               ? 0
                     : strcmp(sampling, "shard") != 0 && gr == 0 ? facts[0] * ((per_rank + bs - 1) / bs)
                                                                 : -1;
    if (st == DDP_OK && facts[8] > 0 && (c->accumulate != 1 || before < 0 || facts[2] != before + facts[8])) {
        char acc[96];
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: written by an older mpiddp that stored the position in micro-batches (%lld into epoch "
                           "%lld) without their size; it resumes only where its global step shows one optimizer step "
                           "per micro-batch (after epoch 0: under global sampling), with %s",
                           path, (long long)facts[8], (long long)facts[0], V(acc, ACCUMULATE, "%d", 1));
    }
    if (st == DDP_OK && (uint64_t)facts[9] != c->seed) /* the epoch order and the dropout masks come from the seed */
        st = ddp_set_error(DDP_ERR_ARG, "%s: saved with %s; this run uses %s (the epoch order would change)", path,
                           V(va, SEED, "%llu", (unsigned long long)facts[9]),
                           V(vb, SEED, "%llu", (unsigned long long)c->seed));
    if (st == DDP_OK && facts[10] >= 0 && facts[10] != c->mode_max)
        st = ddp_set_error(
            DDP_ERR_ARG, "%s: saved with %s; this run uses %s (the best score and top-k would be misread)", path,
            V(va, MODE, "%s", facts[10] ? "max" : "min"), V(vb, MODE, "%s", c->mode_max ? "max" : "min"));
    char mine[64];
    const char *my_sampling = c->sampling_shard ? "shard" : "global";
    ddp_train_state_shuffle_name(c, mine, sizeof mine);
    /* another order would not continue a saved epoch exactly (mid-epoch: refused); at a boundary it starts with the
     * next epoch, and rank 0 says so below */
    int new_shuffle = strcmp(saved, mine) != 0, new_sampling = sampling[0] && strcmp(sampling, my_sampling) != 0;
    if (st == DDP_OK && new_shuffle && !boundary)
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved with %s; this run uses %s (another order continues only a checkpoint saved at "
                           "an epoch boundary; this one is %lld optimizer steps into epoch %lld)",
                           path, V(va, SHUFFLE, "%s", saved), V(vb, SHUFFLE, "%s", mine), (long long)steps_in,
                           (long long)facts[0]);
    if (st == DDP_OK && new_sampling && !boundary) /* nor would another sampling's order */
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved with %s; this run uses %s (another order continues only a checkpoint saved at "
                           "an epoch boundary; this one is %lld optimizer steps into epoch %lld)",
                           path, V(va, SAMPLING, "%s", sampling), V(vb, SAMPLING, "%s", my_sampling),
                           (long long)steps_in, (long long)facts[0]);
    if (st == DDP_OK && monitor[0] && strcmp(monitor, c->monitor) != 0)
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: saved with %s; this run uses %s (the best score and top-k would be misread)", path,
                           V(va, MONITOR, "%s", monitor), V(vb, MONITOR, "%s", c->monitor));
    if (st != DDP_OK) ddp_mark_error_shared(); /* every rank computed the same facts */
    if (st != DDP_OK) {
        free(cs.best_local);
        free(cs.best_local_es);
        free(cs.topk_json);
        return st;
    }
    { /* the checkpoint's learning-rate schedule, settled against this run's once the horizon is known
       * (ddp_train_state_settle_schedule); from here on the run uses its own copy of the configuration */
        int id = cs.lr_schedule ? ddp_lr_schedule_id(cs.lr_schedule) : -1;
        int64_t lrf[5] = {id, cs.lr_warmup_steps, cs.lr_start_step, cs.lr_total_steps, 0};
        double lrd[2] = {cs.lr, cs.min_lr};
        MPI_CHECK(MPI_Bcast(lrf, 5, MPI_INT64_T, 0, ctx->world));
        MPI_CHECK(MPI_Bcast(lrd, 2, MPI_DOUBLE, 0, ctx->world));
        ts->lr_saved.resumed = 1;
        ts->lr_saved.known = lrf[0] >= 0; /* none recorded (an older mpiddp), or a schedule this version lacks */
        ts->lr_saved.schedule = (int)lrf[0];
        ts->lr_saved.warmup = lrf[1], ts->lr_saved.start = lrf[2], ts->lr_saved.end = lrf[3];
        ts->lr_saved.lr = lrd[0], ts->lr_saved.min_lr = lrd[1];
        snprintf(ts->lr_saved.path, sizeof ts->lr_saved.path, "%s", path);
        ts->cfg_resumed = *c;
        ts->cfg = &ts->cfg_resumed;
    }
    for (int64_t lo = 0; lo < ts->n; lo += 1 << 28) {
        int cnt = (int)(ts->n - lo < (1 << 28) ? ts->n - lo : (1 << 28));
        MPI_CHECK(MPI_Bcast(ts->h_params + lo, cnt, MPI_FLOAT, 0, ctx->world));
        MPI_CHECK(MPI_Bcast(ts->h_m + lo, cnt, MPI_FLOAT, 0, ctx->world));
        MPI_CHECK(MPI_Bcast(ts->h_v + lo, cnt, MPI_FLOAT, 0, ctx->world));
    }
    size_t bytes = (size_t)ts->n * sizeof(float);
    st = ts->be->upload(ts->be, ts->params, ts->h_params, bytes);
    if (st == DDP_OK) st = ts->be->upload(ts->be, ts->m, ts->h_m, bytes);
    if (st == DDP_OK) st = ts->be->upload(ts->be, ts->v, ts->h_v, bytes);
    DDP_CHECK(ddp_agree_status(ctx, st));
    ts->epoch = facts[0];
    ts->mb = 0; /* set in micro-batches by the trainer once the epoch's plan is known */
    ts->resume_os = facts[8] >= 0 ? -1 : facts[1];
    ts->resume_pos = facts[7];
    ts->resume_legacy_mb = facts[8];
    ts->global_step = facts[2];
    ts->optim_step = facts[3];
    ts->skipped = facts[11];
    ts->prev_steps = facts[12];
    ts->resume_end_steps = at_end ? steps_in : -1;
    ts->order_changed = new_shuffle || new_sampling || (facts[4] != W && !strcmp(sampling, "shard"));
    /* decision state: rank 0's view is broadcast; each rank gets its own best local value when the world
     * size matches (else the votes start afresh) */
    double dstate[2] = {cs.best_score, (double)cs.bad_epochs}, mybest[2] = {NAN, NAN};
    MPI_CHECK(MPI_Bcast(dstate, 2, MPI_DOUBLE, 0, ctx->world));
    if (facts[4] == W) {
        MPI_CHECK(MPI_Scatter(cs.best_local, 1, MPI_DOUBLE, &mybest[0], 1, MPI_DOUBLE, 0, ctx->world));
        MPI_CHECK(MPI_Scatter(cs.best_local_es, 1, MPI_DOUBLE, &mybest[1], 1, MPI_DOUBLE, 0, ctx->world));
    }
    ts->dec.best = dstate[0];
    ts->dec.bad_epochs = (int64_t)dstate[1];
    ts->dec.best_local = mybest[0];
    ts->dec.best_local_es = mybest[1];
    /* the top-k list lives on rank 0, which manages the files; a fork (a checkpoint outside this run's checkpoints/)
     * starts with none: the files it lists are the other run's (best and early stopping carry over) */
    if (ctx->topo.rank == 0 && cs.topk_json && ddp_rundir_own_checkpoint(c->out_dir, path)) {
        cJSON *a = cJSON_Parse(cs.topk_json);
        cJSON *e;
        ts->dec.ntopk = 0;
        cJSON_ArrayForEach(e, a)
        {
            if (ts->dec.ntopk >= DDP_TOPK_MAX || cJSON_GetArraySize(e) != 4) continue;
            ddp_topk_entry *k = &ts->dec.topk[ts->dec.ntopk++];
            k->value = cJSON_GetArrayItem(e, 0)->valuedouble;
            k->epoch = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
            k->step = (int64_t)cJSON_GetArrayItem(e, 2)->valuedouble;
            const char *kept = cJSON_GetArrayItem(e, 3)->valuestring ? cJSON_GetArrayItem(e, 3)->valuestring : "";
            if (topk_entry_path(c->out_dir, kept, k->path, sizeof k->path) != 0) ts->dec.ntopk--; /* not this run's */
        }
        cJSON_Delete(a);
        /* a lower --save-top-k than the checkpoint's list: the run's command line applies, so the worst leave the
         * list now; their files go once a checkpoint records the shorter list (a resume refused later deletes none).
         * A finished run saves nothing: its list and files stay as they are */
        char removed[4800];
        int had = ts->dec.ntopk, n = 0, done = ts->epoch >= (c->fast_dev_run > 0 ? 1 : c->epochs);
        if (done && c->save_top_k > 0 && had > c->save_top_k)
            say(ctx,
                "notice: %s: the checkpoint lists %d top-k files, and this finished run saves "
                "nothing, so all are kept\n",
                V(va, SAVE_TOP_K, "%d", c->save_top_k), had);
        for (; !done && ddp_decider_trim(&ts->dec, removed, sizeof removed); n++)
            if (ddp_rundir_inside(removed) && (ts->topk_drop || (ts->topk_drop = ddp_calloc(DDP_TOPK_MAX, 4800))))
                snprintf(ts->topk_drop + 4800 * ts->ntopk_drop++, 4800, "%s", removed);
        if (n)
            say(ctx,
                "notice: %s: kept the best %d of the checkpoint's %d top-k files (the others "
                "are deleted once the next checkpoint is saved)\n",
                V(va, SAVE_TOP_K, "%d", c->save_top_k), ts->dec.ntopk, had);
    }
    free(cs.best_local);
    free(cs.best_local_es);
    free(cs.topk_json);
    if (ctx->topo.rank == 0 && cs.no_checksums) /* written before checksums: loaded unverified (finiteness checked) */
        say(ctx,
            "notice: %s has no checksums (written before mpiddp verified checkpoints): loaded "
            "unverified\n",
            path);
    if (ctx->topo.rank == 0 && cs.precision != c->precision) /* allowed: parameters and moments are fp32 in both */
        say(ctx,
            "notice: %s was trained at %s; this run continues at %s (parameters and AdamW "
            "moments are fp32 in both)\n",
            path, V(va, PRECISION, "%s", ddp_precision_name(cs.precision)),
            V(vb, PRECISION, "%s", ddp_precision_name(c->precision)));
    int epochs_run = c->fast_dev_run > 0 ? 1 : c->epochs, todo = ts->epoch < epochs_run; /* else nothing to do */
    char vc[4200], vd[4200];
    const char *sep = ctx->cli_names ? " " : ", "; /* "--shuffle full --sampling global" | "cfg.... = 0, cfg.... = 0" */
    if (ctx->topo.rank == 0 && (new_shuffle || new_sampling) && todo) {
        V(va, SHUFFLE, "%s", saved);
        V(vb, SAMPLING, "%s", sampling[0] ? sampling : my_sampling);
        V(vc, SHUFFLE, "%s", mine);
        V(vd, SAMPLING, "%s", my_sampling);
    }
    if (ctx->topo.rank == 0 && (new_shuffle || new_sampling) && todo && at_end) /* validation next, then epoch E + 1 */
        say(ctx,
            "notice: %s was saved at the end of epoch %lld's training (its validation next) with "
            "%s%s%s; this run orders the epochs after it with %s%s%s\n",
            path, (long long)facts[0], va, sep, vb, vc, sep, vd);
    else if (ctx->topo.rank == 0 && (new_shuffle || new_sampling) && todo) /* at an epoch boundary (else refused) */
        say(ctx,
            "notice: %s was saved at the start of epoch %lld with %s%s%s; this run orders it and "
            "the epochs after it with %s%s%s\n",
            path, (long long)facts[0], va, sep, vb, vc, sep, vd);
    const ddp_model_config *mc = c->model_config; /* allowed too (fine-tuning with more or less dropout), but said */
    if (ctx->topo.rank == 0 && mc && mc->kind == DDP_MODEL_TRANSFORMER && isfinite(cs.dropout) &&
        cs.dropout != mc->dropout)
        say(ctx, "notice: %s was trained with %s; this run continues with %s\n", path, V(va, DROPOUT, "%g", cs.dropout),
            V(vb, DROPOUT, "%g", mc->dropout));
    if (ctx->topo.rank == 0 && isfinite(cs.weight_decay) && cs.weight_decay != c->weight_decay) /* allowed, said */
        say(ctx, "notice: %s was trained with %s; this run continues with %s\n", path,
            V(va, WEIGHT_DECAY, "%g", cs.weight_decay), V(vb, WEIGHT_DECAY, "%g", c->weight_decay));
    { /* AdamW's beta1, beta2 and eps (ddp_train_config, no CLI options): allowed, said in one notice naming both */
        const char *name[3] = {"beta1", "beta2", "eps"};
        double was[3] = {cs.beta1, cs.beta2, cs.eps}, now[3] = {c->beta1, c->beta2, c->eps};
        char a[160] = "", b[160] = "";
        for (int k = 0; k < 3; k++)
            if (isfinite(was[k]) && was[k] != now[k]) {
                size_t na = strlen(a), nb = strlen(b);
                snprintf(a + na, sizeof a - na, "%s%s %g", na ? ", " : "", name[k], was[k]);
                snprintf(b + nb, sizeof b - nb, "%s%s %g", nb ? ", " : "", name[k], now[k]);
            }
        if (ctx->topo.rank == 0 && a[0])
            say(ctx, "notice: %s was trained with AdamW %s; this run continues with AdamW %s\n", path, a, b);
    }
    if (ctx->topo.rank == 0) /* a notice even with --no-progress: where the run continues from matters */
    {
        int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
        if (ts->epoch >= epochs) /* every epoch asked for is done: say so, and train nothing */
            say(ctx,
                "nothing to do: %s has finished %lld epoch(s) (epochs 0-%lld) and %s is %d; "
                "raise %s to train more\n",
                path, (long long)ts->epoch, (long long)ts->epoch - 1, N(EPOCHS), epochs, N(EPOCHS));
        else
            say(ctx, "resuming from %s at epoch %lld (0-based), optimizer step %lld of the epoch, step %lld\n", path,
                (long long)ts->epoch, (long long)(facts[8] >= 0 ? facts[8] / c->accumulate : facts[1]),
                (long long)ts->global_step);
    }
    return DDP_OK;
}

/* "%g" of a number into buf (the notices' numbers). */
static const char *num(char *buf, size_t len, double v)
{
    snprintf(buf, len, "%.6g", v);
    return buf;
}

/* Appends "; " and a formatted item to the notice in buf. */
static void add_item(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_item(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n && n + 2 < len) buf[n++] = ';', buf[n++] = ' ', buf[n] = 0;
    va_list ap;
    va_start(ap, fmt);
    if (n < len) vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

/* A warmup longer than the schedule it belongs to would still be warming up at the schedule's last step, and past
 * it (where --min-lr applies): refused in one line naming both numbers. Every rank computes the same (shared). */
static ddp_status warmup_fits(const ddp_train_state *ts, int64_t total, const char *what)
{
    const ddp_ctx *ctx = ts->ctx;
    int64_t start, end, w = ddp_lr_warmup_steps(ts->cfg, total);
    ddp_lr_span(ts->cfg, total, &start, &end);
    if (w <= end - start) return DDP_OK;
    char v[96];
    ddp_set_error(DDP_ERR_ARG,
                  "%s exceeds %s %lld optimizer steps (steps %lld-%lld): lower %s, or give it as a fraction of the "
                  "run",
                  V(v, WARMUP, "%lld", (long long)w), what, (long long)(end - start), (long long)start,
                  (long long)end - 1, N(WARMUP));
    ddp_mark_error_shared();
    return DDP_ERR_ARG;
}

/* The learning-rate schedule of this run, once its horizon (epochs x the first epoch's optimizer steps, as the
 * trainer computes it) is known. A resume compares it with the checkpoint's: the horizon the run asks for differs
 * when --epochs changed; --lr-horizon keep (default) keeps the checkpoint's span, restart starts the schedule again
 * at the resumed step over the run's remaining steps (only when the horizon changed: a requeued job resumed with
 * the same options continues a restarted schedule). --lr, --min-lr, --lr-schedule and --warmup-steps are this
 * run's. Rank 0 prints one notice when the schedule changes; a warmup longer than the schedule is refused. Writes
 * nothing: ddp_train_state_record_schedule records the schedule in effect in run.json. */
ddp_status ddp_train_state_settle_schedule(ddp_train_state *ts, int64_t steps0, int64_t full0)
{
    ddp_ctx *ctx = ts->ctx;
    const ddp_train_config *c = ts->cfg;
    int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
    int64_t total = steps0 * epochs, want_start, want_end;
    if (ts->lr_saved.resumed && c->batch_rows <= 0 && c->fast_dev_run <= 0 && ts->epoch < epochs) {
        /* sample-count batches: the steps done before this epoch, then this run's epochs. The same as epochs x steps0
         * when every epoch had this run's steps; another order at an epoch boundary (--sampling shard pads each
         * rank's shards to the longest) changes the steps of the epochs to come, not of those done */
        int64_t acc = c->accumulate, done = (ts->mb + acc - 1) / acc;
        total = ts->global_step - done + (epochs - ts->epoch) * steps0;
    }
    ts->lr_total = total;
    ddp_lr_span(c, total, &want_start, &want_end); /* what this run's options ask for */
    const char *horizon = "run";
    if (ts->lr_saved.resumed && ts->lr_saved.known) {
        ddp_train_config *rc = &ts->cfg_resumed;                          /* ts->cfg */
        int matters = c->lr_schedule != DDP_LR_CONSTANT || c->warmup > 0; /* else every span gives lr */
        int moved = ts->lr_saved.end != want_end;
        int restart = matters && moved && c->lr_horizon == DDP_LR_HORIZON_RESTART && want_end > ts->global_step;
        if (matters && !restart) { /* the checkpoint's span: unchanged, or kept */
            rc->lr_start_step = ts->lr_saved.start;
            rc->lr_end_step = ts->lr_saved.end > ts->lr_saved.start ? ts->lr_saved.end : 0;
            horizon = "checkpoint";
        } else if (restart) {
            rc->lr_start_step = ts->global_step;
            rc->lr_end_step = want_end;
            horizon = "restart";
        }
        DDP_CHECK(warmup_fits(ts, total, restart ? "the restarted schedule's" : "the checkpoint's schedule's"));
        /* the checkpoint's own schedule, for the lr it would give now */
        ddp_train_config old = *rc;
        old.lr_schedule = ts->lr_saved.schedule;
        old.lr = ts->lr_saved.lr, old.min_lr = ts->lr_saved.min_lr, old.warmup = (double)ts->lr_saved.warmup;
        old.lr_start_step = ts->lr_saved.start,
        old.lr_end_step = ts->lr_saved.end > ts->lr_saved.start ? ts->lr_saved.end : 0;
        int64_t s = ts->global_step, w = ddp_lr_warmup_steps(rc, total);
        double lr_old = ddp_lr_at(&old, s, total), lr_new = ddp_lr_at(rc, s, total), lr_moved = lr_new;
        if (moved && !restart && matters) { /* what the new horizon would have given: the jump a keep avoids */
            ddp_train_config mv = *rc;
            mv.lr_start_step = want_start, mv.lr_end_step = want_end;
            lr_moved = ddp_lr_at(&mv, s, total);
        }
        char items[2048] = "", a[32], b[32], ve[96], vh[96], vr[96];
        int64_t from = ts->epoch + (ts->nmb > 0 && ts->mb >= ts->nmb); /* the first epoch of steps0 (saved at an end) */
        if (ts->lr_saved.schedule != c->lr_schedule)
            add_item(items, sizeof items, "%s %s -> %s", N(LR_SCHEDULE), ddp_lr_schedule_name(ts->lr_saved.schedule),
                     ddp_lr_schedule_name(c->lr_schedule));
        if (ts->lr_saved.lr != c->lr)
            add_item(items, sizeof items, "%s %s -> %s", N(LR), num(a, 32, ts->lr_saved.lr), num(b, 32, c->lr));
        if (ts->lr_saved.min_lr != c->min_lr &&
            (c->lr_schedule != DDP_LR_CONSTANT || ts->lr_saved.schedule != DDP_LR_CONSTANT))
            add_item(items, sizeof items, "%s %s -> %s", N(MIN_LR), num(a, 32, ts->lr_saved.min_lr),
                     num(b, 32, c->min_lr));
        if (ts->lr_saved.warmup != w && !restart)
            add_item(items, sizeof items, "warmup %lld -> %lld steps", (long long)ts->lr_saved.warmup, (long long)w);
        if (restart) {
            char how[96] = "";
            if (w > 0) snprintf(how, sizeof how, "warmup %lld steps, then ", (long long)w);
            add_item(items, sizeof items,
                     "horizon %lld -> %lld steps (%s, %lld per epoch from epoch %lld): the schedule starts again at "
                     "step %lld (%s%s to step %lld; %s)",
                     (long long)ts->lr_saved.end, (long long)want_end, V(ve, EPOCHS, "%d", epochs), (long long)steps0,
                     (long long)from, (long long)s, how,
                     c->lr_schedule == DDP_LR_CONSTANT ? "constant"
                     : c->lr_schedule == DDP_LR_COSINE ? "cosine decay"
                                                       : "linear decay",
                     (long long)want_end, V(vh, LR_HORIZON, "restart"));
        } else if (moved && matters)
            add_item(items, sizeof items,
                     "horizon %lld -> %lld steps (%s, %lld per epoch from epoch %lld) not taken: the checkpoint's is "
                     "kept (%s; %s starts warmup and decay again at step %lld)",
                     (long long)ts->lr_saved.end, (long long)want_end, V(ve, EPOCHS, "%d", epochs), (long long)steps0,
                     (long long)from, V(vh, LR_HORIZON, "keep"), V(vr, LR_HORIZON, "restart"), (long long)s);
        if (items[0] && ctx->topo.rank == 0 && ts->epoch < epochs) { /* even with --no-progress, like --precision's */
            char lr_note[160];
            if (lr_old != lr_new)
                snprintf(lr_note, sizeof lr_note, "lr %s -> %s", num(a, 32, lr_old), num(b, 32, lr_new));
            else
                snprintf(lr_note, sizeof lr_note, "lr continues at %s", num(a, 32, lr_new));
            size_t n = strlen(lr_note);
            if (lr_moved != lr_new)
                snprintf(lr_note + n, sizeof lr_note - n, " (the new horizon would make it %s)", num(b, 32, lr_moved));
            say(ctx, "notice: %s: learning-rate schedule at step %lld: %s; %s\n", ts->lr_saved.path, (long long)s,
                items, lr_note);
        }
    } else if (ts->lr_saved.resumed && ctx->topo.rank == 0 && ts->epoch < epochs) { /* as before: this run's schedule */
        char a[32], vl[96], ve[96];
        say(ctx,
            "notice: %s records no learning-rate schedule (written by an older mpiddp): this run's "
            "applies as given (%s, %s, horizon %lld steps from %s)\n",
            ts->lr_saved.path, ddp_lr_schedule_name(c->lr_schedule), V(vl, LR, "%s", num(a, 32, c->lr)),
            (long long)want_end, V(ve, EPOCHS, "%d", epochs));
    }
    /* --fast-dev-run smoke-tests the run's options: its warmup against the run's steps, not the few it trains */
    if (!(ts->lr_saved.resumed && ts->lr_saved.known))
        DDP_CHECK(warmup_fits(ts, c->fast_dev_run > 0 ? full0 * c->epochs : total, "the run's"));
    ts->lr_horizon = horizon;
    return DDP_OK;
}

ddp_status ddp_train_state_record_schedule(ddp_train_state *ts, int64_t total)
{
    const ddp_train_config *c = ts->cfg;
    int64_t start, end;
    ddp_lr_span(c, total, &start, &end);
    char rj[4200];
    snprintf(rj, sizeof rj, "%s/run.json", c->out_dir);
    return ddp_run_json_lr_schedule(ts->ctx, rj, ddp_lr_schedule_name(c->lr_schedule), c->lr, c->min_lr,
                                    ddp_lr_warmup_steps(c, total), start, end, ts->lr_horizon ? ts->lr_horizon : "run");
}

/* A resumed run's position in this run's micro-batches: optimizer steps of the epoch x --accumulate, checked
 * against the positions of the epoch's order the checkpoint had consumed. Every rank computes the same. */
ddp_status ddp_train_state_resume_position(ddp_train_state *ts, int64_t opt_steps)
{
    ddp_status st = DDP_OK;
    int64_t os = ts->resume_os, acc = ts->cfg->accumulate;
    if (ts->resume_legacy_mb >= 0 && ts->resume_end_steps >= 0) { /* saved at the epoch's end: validation next */
        ts->mb = ts->nmb;
    } else if (ts->resume_legacy_mb >= 0) { /* same world size and global batch (checked): the same micro-batches */
        ts->mb = ts->resume_legacy_mb;
        if (ts->mb > ts->nmb)
            st = ddp_set_error(DDP_ERR_ARG, "resume position: micro-batch %lld is past the epoch's %lld",
                               (long long)ts->mb, (long long)ts->nmb);
    } else if (os >= 0) {
        int64_t end = ts->tsm->n;
        if (ts->resume_pos == end) /* saved at the epoch's end: validation comes next (past it: refused below) */
            ts->mb = ts->nmb;
        else if (os > opt_steps || ts->resume_pos > end)
            st = ddp_set_error(DDP_ERR_ARG,
                               "resume position: %lld optimizer steps and %lld samples into epoch %lld cannot be "
                               "continued exactly (this run's epoch has %lld steps over %lld samples: another training "
                               "set?)",
                               (long long)os, (long long)ts->resume_pos, (long long)ts->epoch, (long long)opt_steps,
                               (long long)end);
        else if (ddp_train_state_epoch_position(ts, os) != ts->resume_pos)
            st = ddp_set_error(
                DDP_ERR_ARG,
                "resume position: %lld optimizer steps and %lld samples into epoch %lld cannot be continued exactly "
                "(this run's epoch has %lld steps; step %lld starts at sample %lld)",
                (long long)os, (long long)ts->resume_pos, (long long)ts->epoch, (long long)opt_steps, (long long)os,
                (long long)ddp_train_state_epoch_position(ts, os));
        else
            ts->mb = os * acc < ts->nmb ? os * acc : ts->nmb;
    }
    ts->resume_os = ts->resume_legacy_mb = -1;
    if (st != DDP_OK) ddp_mark_error_shared();
    return st;
}
