/* decide.c — checkpoint / early-stop policies; see decide.h. */
#include "mpi_ddp/train/decide.h"

#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/fsutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ddp_decider_init(ddp_decider *d, ddp_policy policy, const char *monitor, int mode_max, int top_k, int patience,
                      double min_delta)
{
    memset(d, 0, sizeof *d);
    d->policy = policy;
    snprintf(d->monitor, sizeof d->monitor, "%s", monitor);
    d->mode_max = mode_max;
    d->top_k = top_k > DDP_TOPK_MAX ? DDP_TOPK_MAX : top_k;
    d->patience = patience;
    d->min_delta = min_delta;
    d->best = d->best_local = d->best_local_es = NAN;
    d->monitor_count = -1;
}

/* v is better than ref in the monitored direction, plainly (anything beats NaN): ranks the top-k list and decides
 * which files are saved. --early-stop-min-delta plays no part there, as in Lightning's ModelCheckpoint. */
static int beats(const ddp_decider *d, double v, double ref)
{
    if (isnan(v)) return 0;
    if (isnan(ref)) return 1;
    return d->mode_max ? v > ref : v < ref;
}

/* v improves on ref by more than min_delta (anything beats NaN): early stopping's improvement, as in Lightning's
 * EarlyStopping(min_delta) */
static int improves(const ddp_decider *d, double v, double ref)
{
    if (isnan(v)) return 0;
    if (isnan(ref)) return 1;
    return d->mode_max ? v > ref + d->min_delta : v < ref - d->min_delta;
}

/* The worst kept entry by plain comparison (NaN worst; of equal values the oldest), -1 when the list is empty: the
 * entry a full list replaces and a lower --save-top-k drops. */
static int topk_worst(const ddp_decider *d)
{
    int w = -1;
    for (int i = 0; i < d->ntopk; i++) {
        const ddp_topk_entry *e = &d->topk[i];
        int tie = w >= 0 && !beats(d, e->value, d->topk[w].value) && !beats(d, d->topk[w].value, e->value);
        if (w < 0 || beats(d, d->topk[w].value, e->value) || (tie && e->step < d->topk[w].step)) w = i;
    }
    return w;
}

/* would v enter the top-k list (rank 0): the list is not full, or v beats its worst entry. An empty list beside a
 * best value (a fork: the other run's files are not its own; a run resumed with --save-top-k raised from 0) takes
 * only a v that beats that best, so the first file kept is never worse than a result already seen */
static int enters_topk(const ddp_decider *d, double v, int *worst)
{
    *worst = -1;
    if (d->top_k <= 0 || isnan(v)) return 0;
    if (d->ntopk == 0) return beats(d, v, d->best);
    if (d->ntopk < d->top_k) return 1;
    *worst = topk_worst(d);
    return beats(d, v, d->topk[*worst].value);
}

static const char *policy_name(ddp_policy p)
{
    static const char *n[] = {"reduced", "rank0", "all", "any", "majority"};
    return n[p];
}

/* policy's rule over the ranks that voted: yes of voters said so */
static int vote_passes(ddp_policy p, int yes, int voters)
{
    if (p == DDP_POLICY_ALL) return voters > 0 && yes == voters;
    if (p == DDP_POLICY_ANY) return yes > 0;
    return 2 * yes > voters; /* majority */
}

/* the bits of a rank's vote */
enum { V_BEATS = 1, V_NONFINITE = 2, V_ABSENT = 4, V_IMPROVES = 8 };

ddp_status ddp_decide(ddp_ctx *ctx, ddp_decider *d, const ddp_metric_row *global, const ddp_metric_row *local,
                      int64_t epoch, int64_t step, ddp_decision *out)
{
    memset(out, 0, sizeof *out);
    out->drop = -1;
    int W = ctx->topo.size, me = ctx->topo.rank;
    int vote = d->policy >= DDP_POLICY_ALL, need_local = vote || d->policy == DDP_POLICY_RANK0;
    /* 1. the monitor must exist where the policy reads it: a clear error on every rank, never a hang. A rank whose
     *    local row lacks it while its val/count is 0 has no value of its own (no validation sample:
     *    ddp_metrics_sync) and abstains; lacking it otherwise, the metric is not a per-rank one (logged on rank 0
     *    alone). */
    int gi = ddp_row_find(global, d->monitor), li = ddp_row_find(local, d->monitor);
    int ci = ddp_row_find(local, "val/count"), nosample = ci >= 0 && local->vals[ci] == 0;
    int have = (me != 0 || gi >= 0) && (!need_local || li >= 0 || nosample), all = 0;
    DDP_CHECK(ddp_all_ok(ctx, have, &all));
    if (!all) {
        char where[96] = "";
        if (need_local)
            snprintf(where, sizeof where, " on every rank (policy %s reads each rank's own value)",
                     policy_name(d->policy));
        char mon[300]; /* --monitor 'NAME' | cfg.monitor = "NAME" */
        ddp_set_error(
            DDP_ERR_ARG, "%s was never logged%s (logged metrics include val/loss, val/acc, val/macro_f1, train/loss)",
            ddp_opt_fmt(mon, sizeof mon, ctx->cli_names, DDP_OPT_MONITOR, ctx->cli_names ? "'%s'" : "%s", d->monitor),
            where);
        ddp_mark_error_shared();
        return DDP_ERR_ARG;
    }
    int absent = need_local && li < 0;
    double lv = li >= 0 ? local->vals[li] : NAN;
    /* 2. each rank's vote on its local value against its own best: beats it (saves), not finite, no value, improves
     *    on it by more than min_delta (early stopping) */
    int mine = absent ? V_ABSENT
                      : (beats(d, lv, d->best_local) ? V_BEATS : 0) | (need_local && !isfinite(lv) ? V_NONFINITE : 0) |
                            (improves(d, lv, d->best_local_es) ? V_IMPROVES : 0);
    int *votes = me == 0 ? ddp_calloc((size_t)W, sizeof *votes) : NULL;
    int *fl = me == 0 ? ddp_calloc((size_t)(3 * W), sizeof *fl) : NULL; /* rank lists: yes, no, no value */
    double *decb = ddp_calloc(7,
                              sizeof *decb); /* the decision's broadcast: heap, kept if a timeout leaves it pending */
    ddp_status ast = ddp_agree_status(ctx, (me == 0 && (!votes || !fl)) || !decb
                                               ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for the checkpoint vote")
                                               : DDP_OK);
    if (ast != DDP_OK) {
        free(votes);
        free(fl);
        free(decb);
        return ast;
    }
    MPI_Request rq;
    MPI_CHECK(MPI_Igather(&mine, 1, MPI_INT, votes, 1, MPI_INT, 0, ctx->world, &rq));
    ddp_status wst = ddp_wait(ctx, 1, &rq, "the checkpoint vote");
    if (wst != DDP_OK) {
        ddp_ctx_release(ctx, votes); /* kept after a timeout: the gather may still write into it */
        free(fl);
        free(decb);
        return wst;
    }
    /* 3. rank 0 decides; one broadcast carries the decision */
    double dec[7] = {0, 0, NAN, -1, 0, 0, 0}; /* improved, stop, value, drop, not finite, beaten, no value */
    char fail[600] = "", opt[64];
    if (me == 0) {
        double view = d->policy == DDP_POLICY_RANK0 ? lv : global->vals[gi];
        int improved, beaten, yes = 0, yes_imp = 0, voters = 0, nbad = 0, nabs = 0;
        for (int r = 0; r < W; r++) {
            fl[2 * W + r] = (votes[r] & V_ABSENT) != 0; /* abstains: counted nowhere else */
            nabs += fl[2 * W + r];
            if (fl[2 * W + r]) continue;
            voters++;
            nbad += (votes[r] & V_NONFINITE) != 0;
            yes += fl[r] = (votes[r] & V_BEATS) != 0;
            fl[W + r] = !fl[r];
            yes_imp += (votes[r] & V_IMPROVES) != 0;
        }
        int novalue = vote ? voters == 0 : d->policy == DDP_POLICY_RANK0 && (votes[0] & V_ABSENT);
        int nonfinite = !novalue && (!isfinite(view) || (vote && nbad > 0));
        /* the reduced value is nan because no rank logged a sample for the monitor (a C-API model's metric with a
         * count of 0 everywhere), not because of a NaN in the data: said so */
        int nocount = nonfinite && d->policy == DDP_POLICY_REDUCED && d->monitor_count == 0;
        if (vote) {
            beaten = vote_passes(d->policy, yes, voters);
            improved = vote_passes(d->policy, yes_imp, voters);
        } else {
            beaten = beats(d, view, d->best);
            improved = improves(d, view, d->best);
        }
        if (novalue) { /* nothing to decide on: an error on every rank (a validation set smaller than the world) */
            improved = beaten = 0;
            snprintf(fail, sizeof fail,
                     "%s has no value %s after epoch %lld (step %lld): %s, so policy %s has nothing to decide on "
                     "(%s decides on the value over all ranks)",
                     d->monitor, vote ? "on any rank" : "on rank 0", (long long)epoch, (long long)step,
                     vote ? "no rank evaluated a validation sample" : "rank 0 evaluated no validation sample",
                     policy_name(d->policy),
                     ddp_opt_set(opt, sizeof opt, ctx->cli_names, DDP_OPT_CKPT_POLICY,
                                 ctx->cli_names ? "reduced" : "0 (reduced)"));
        } else if (nocount) { /* nothing to rank: no save, no improvement */
            improved = beaten = 0;
            snprintf(fail, sizeof fail,
                     "%s has no value after epoch %lld (step %lld): no rank logged a value for it (its count is 0 on "
                     "every rank), so it can neither rank checkpoints nor stop early (%s goes on without saving)",
                     d->monitor, (long long)epoch, (long long)step,
                     ddp_opt_set(opt, sizeof opt, ctx->cli_names, DDP_OPT_SKIP_NONFINITE, NULL));
        } else if (nonfinite) { /* nothing to rank: no save, no improvement */
            char who[240];
            if (vote && nbad) {
                char badl[200];
                for (int r = 0; r < W; r++) votes[r] = (votes[r] & V_NONFINITE) != 0; /* counted: reused for the list */
                ddp_rank_list(votes, W, 1, badl, sizeof badl);
                snprintf(who, sizeof who, "not finite on rank(s) %s", badl);
            } else {
                char v[32];
                snprintf(who, sizeof who, "not finite (%s)", ddp_fmt_value(v, sizeof v, view, 6));
            }
            improved = beaten = 0;
            const char *why = "a value the model logged itself"; /* a metric of the model's own */
            if (!strcmp(d->monitor, "val/loss") || !strcmp(d->monitor, "val/acc") ||
                !strcmp(d->monitor, "val/macro_f1")) /* the CLI's option; no C-API counterpart */
                why = ctx->cli_names ? "a NaN or Inf in the validation data? mpiddp inspect or train --check-finite "
                                       "names it"
                                     : "a NaN or Inf in the validation data? mpiddp inspect names it";
            snprintf(fail, sizeof fail,
                     "%s is %s after epoch %lld (step %lld), so it can neither rank checkpoints nor stop "
                     "early (%s; %s goes on without saving)",
                     d->monitor, who, (long long)epoch, (long long)step, why,
                     ddp_opt_set(opt, sizeof opt, ctx->cli_names, DDP_OPT_SKIP_NONFINITE, NULL));
        }
        int worst = -1, save = !nonfinite && !novalue && d->top_k > 0 && (vote ? beaten : enters_topk(d, view, &worst));
        if (vote && save && d->ntopk >= d->top_k) worst = topk_worst(d); /* list full: the worst by value makes room */
        int stop = d->patience > 0 && !improved && d->bad_epochs + 1 >= d->patience;
        dec[0] = improved, dec[1] = stop, dec[2] = view, dec[3] = save ? worst : -2, dec[4] = nonfinite;
        dec[5] = beaten, dec[6] = novalue;
        char val[32], yesl[200], nol[200], absl[220] = "";
        ddp_fmt_value(val, sizeof val, view, 6);
        ddp_rank_list(fl, W, 1, yesl, sizeof yesl);
        ddp_rank_list(fl + W, W, 1, nol, sizeof nol);
        if (nabs) {
            char l[200];
            ddp_rank_list(fl + 2 * W, W, 1, l, sizeof l);
            snprintf(absl, sizeof absl, "; no value on ranks %s", l);
        }
        if (vote)
            snprintf(out->note, sizeof out->note,
                     "epoch %lld step %lld: %s=%s; policy %s: %s (improved on ranks %s; not on ranks %s%s)%s",
                     (long long)epoch, (long long)step, d->monitor, val, policy_name(d->policy),
                     save        ? "save"
                     : nonfinite ? "not finite, no save"
                                 : "no save",
                     yesl, nol, absl, yes != 0 && yes != voters ? " - ranks disagree" : "");
        else
            snprintf(out->note, sizeof out->note, "epoch %lld step %lld: %s=%s; policy %s: %s", (long long)epoch,
                     (long long)step, d->monitor, val, policy_name(d->policy),
                     save        ? "save"
                     : improved  ? "improved"
                     : nocount   ? "no value on any rank, no save"
                     : nonfinite ? "not finite, no save"
                                 : "no improvement");
        free(fl);
    }
    free(votes);
    memcpy(decb, dec, sizeof dec);
    MPI_CHECK(MPI_Ibcast(decb, 7, MPI_DOUBLE, 0, ctx->world, &rq));
    wst = ddp_wait(ctx, 1, &rq, "the checkpoint decision");
    if (wst == DDP_OK) memcpy(dec, decb, sizeof dec);
    ddp_ctx_release(ctx, decb);
    DDP_CHECK(wst);
    if (dec[6] != 0) /* rank 0's line, on every rank */
        return ddp_agree_status(ctx, me == 0 ? ddp_set_error(DDP_ERR_ARG, "%s", fail) : DDP_OK);
    out->nonfinite = dec[4] != 0;
    if (out->nonfinite && !d->nonfinite_continue) /* rank 0's line, on every rank */
        return ddp_agree_status(ctx, me == 0 ? ddp_set_error(DDP_ERR_NUMERIC, "%s", fail) : DDP_OK);
    int improved = dec[0] != 0;
    out->stop = dec[1] != 0;
    out->value = dec[2];
    out->save = dec[3] > -2;
    out->drop = out->save ? (int)dec[3] : -1;
    /* 4. state updates, identical in meaning on every rank. Early stopping's best moves on an improvement (by more
     *    than min_delta). A rank's own bests move, for the votes, on the combined decision (as Lightning updates
     *    each rank's state only then): the save vote's when the vote saves, early stopping's when it improves, so
     *    gains smaller than min_delta add up as they do for `reduced`. A rank without a value keeps its bests. */
    if (improved) {
        d->best = out->value;
        d->bad_epochs = 0;
    } else {
        d->bad_epochs++;
    }
    if (!absent && (vote ? dec[5] != 0 : beats(d, lv, d->best_local))) d->best_local = lv;
    if (!absent && (vote ? improved : improves(d, lv, d->best_local_es))) d->best_local_es = lv;
    return DDP_OK;
}

int ddp_decider_trim(ddp_decider *d, char *removed, size_t n)
{
    if (d->top_k <= 0 || d->ntopk <= d->top_k) return 0;
    int w = topk_worst(d);
    snprintf(removed, n, "%s", d->topk[w].path);
    d->topk[w] = d->topk[--d->ntopk];
    return 1;
}

void ddp_topk_name(char *buf, size_t n, const ddp_decider *d, int64_t epoch, int64_t step, double value)
{
    char mon[128];
    snprintf(mon, sizeof mon, "%s", d->monitor);
    for (char *p = mon; *p; p++)
        if (*p == '/') *p = '_';
    snprintf(buf, n, "epoch=%lld-step=%lld-%s=%.6g.h5", (long long)epoch, (long long)step, mon, value);
}

void ddp_decider_commit(ddp_decider *d, const ddp_decision *out, int64_t epoch, int64_t step, const char *path,
                        char *removed, size_t n)
{
    if (n) removed[0] = 0;
    if (!out->save) return;
    int slot = -1;
    for (int i = 0; i < d->ntopk; i++) /* a file listed already (a resume from a top-k file of an older mpiddp) */
        if (!strcmp(d->topk[i].path, path)) slot = i;
    if (slot < 0 && out->drop >= 0 && d->ntopk >= d->top_k) {
        slot = out->drop;
        snprintf(removed, n, "%s", d->topk[slot].path);
    } else if (slot < 0 && d->ntopk < DDP_TOPK_MAX) {
        slot = d->ntopk++;
    } else if (slot < 0) {
        return;
    }
    d->topk[slot].value = out->value;
    d->topk[slot].epoch = epoch;
    d->topk[slot].step = step;
    snprintf(d->topk[slot].path, sizeof d->topk[slot].path, "%s", path);
}
