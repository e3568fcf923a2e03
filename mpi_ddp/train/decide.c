/* decide.c — checkpoint / early-stop policies; see decide.h. */
#include "mpi_ddp/train/decide.h"

#include "mpi_ddp/core/status.h"
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
    d->best = d->best_local = NAN;
}

/* v improves on ref by more than min_delta in the monitored direction (anything beats NaN) */
static int better(const ddp_decider *d, double v, double ref)
{
    if (isnan(v)) return 0;
    if (isnan(ref)) return 1;
    return d->mode_max ? v > ref + d->min_delta : v < ref - d->min_delta;
}

/* would v enter the top-k list (rank 0) */
static int enters_topk(const ddp_decider *d, double v, int *worst)
{
    *worst = -1;
    if (d->top_k <= 0 || isnan(v)) return 0;
    if (d->ntopk < d->top_k) return 1;
    int w = 0;
    for (int i = 1; i < d->ntopk; i++)
        if (better(d, d->topk[w].value, d->topk[i].value)) w = i;
    *worst = w;
    return better(d, v, d->topk[w].value);
}

static const char *policy_name(ddp_policy p)
{
    static const char *n[] = {"reduced", "rank0", "all", "any", "majority"};
    return n[p];
}

ddp_status ddp_decide(ddp_ctx *ctx, ddp_decider *d, const ddp_metric_row *global, const ddp_metric_row *local,
                      int64_t epoch, int64_t step, ddp_decision *out)
{
    memset(out, 0, sizeof *out);
    out->drop = -1;
    int W = ctx->topo.size, me = ctx->topo.rank;
    int vote = d->policy >= DDP_POLICY_ALL, need_local = vote || d->policy == DDP_POLICY_RANK0;
    /* 1. the monitor must exist where the policy reads it: a clear error on every rank, never a hang */
    int gi = ddp_row_find(global, d->monitor), li = ddp_row_find(local, d->monitor);
    int have = (me != 0 || gi >= 0) && (!need_local || li >= 0), all = 0;
    DDP_CHECK(ddp_all_ok(ctx, have, &all));
    if (!all) {
        ddp_set_error(
            DDP_ERR_ARG,
            "--monitor '%s' was never logged (logged metrics include val/loss, val/acc, val/macro_f1, train/loss)",
            d->monitor);
        ddp_mark_error_shared();
        return DDP_ERR_ARG;
    }
    double lv = li >= 0 ? local->vals[li] : NAN;
    /* 2. each rank's vote: its local value improved over its own best (bit 0), and is not finite (bit 1) */
    int mine = better(d, lv, d->best_local) | (need_local && !isfinite(lv) ? 2 : 0);
    int *votes = me == 0 ? ddp_calloc((size_t)W, sizeof *votes) : NULL;
    int *imp = me == 0 ? ddp_calloc((size_t)W, sizeof *imp) : NULL;
    ddp_status ast = ddp_agree_status(ctx, me == 0 && (!votes || !imp)
                                               ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for the checkpoint vote")
                                               : DDP_OK);
    if (ast != DDP_OK) {
        free(votes);
        free(imp);
        return ast;
    }
    MPI_Request rq;
    MPI_CHECK(MPI_Igather(&mine, 1, MPI_INT, votes, 1, MPI_INT, 0, ctx->world, &rq));
    ddp_status wst = ddp_wait(ctx, 1, &rq, "the checkpoint vote");
    if (wst != DDP_OK) {
        free(votes);
        free(imp);
        return wst;
    }
    /* 3. rank 0 decides; one broadcast carries the decision */
    double dec[5] = {0, 0, NAN, -1, 0}; /* improved, stop, value, drop, not finite */
    char fail[600] = "";
    if (me == 0) {
        double view = d->policy == DDP_POLICY_RANK0 ? lv : global->vals[gi];
        int improved, yes = 0, nbad = 0;
        for (int r = 0; r < W; r++) nbad += (votes[r] & 2) != 0;
        for (int r = 0; r < W; r++) yes += imp[r] = votes[r] & 1;
        int nonfinite = !isfinite(view) || (vote && nbad > 0);
        if (d->policy == DDP_POLICY_ALL)
            improved = yes == W;
        else if (d->policy == DDP_POLICY_ANY)
            improved = yes > 0;
        else if (d->policy == DDP_POLICY_MAJORITY)
            improved = 2 * yes > W;
        else
            improved = better(d, view, d->best);
        if (nonfinite) { /* nothing to rank: no save, no improvement */
            char who[240];
            if (vote && nbad) {
                char badl[200];
                for (int r = 0; r < W; r++) votes[r] = (votes[r] & 2) != 0; /* done counting: reused for the list */
                ddp_rank_list(votes, W, 1, badl, sizeof badl);
                snprintf(who, sizeof who, "not finite on rank(s) %s", badl);
            } else {
                snprintf(who, sizeof who, "not finite (%s)", isnan(view) ? "nan" : view > 0 ? "inf" : "-inf");
            }
            improved = 0;
            snprintf(fail, sizeof fail,
                     "%s is %s after epoch %lld (step %lld), so it can neither rank checkpoints nor stop "
                     "early (a NaN or Inf in the validation data? mpiddp inspect or train --check-finite names it; "
                     "--skip-nonfinite "
                     "goes on without saving)",
                     d->monitor, who, (long long)epoch, (long long)step);
        }
        int worst = -1, save = !nonfinite && d->top_k > 0 && (vote ? improved : enters_topk(d, view, &worst));
        if (vote && save && d->ntopk >= d->top_k) { /* list full: the worst by value makes room */
            int w = 0;
            for (int i = 1; i < d->ntopk; i++)
                if (better(d, d->topk[w].value, d->topk[i].value)) w = i;
            worst = w;
        }
        int stop = d->patience > 0 && !improved && d->bad_epochs + 1 >= d->patience;
        dec[0] = improved, dec[1] = stop, dec[2] = view, dec[3] = save ? worst : -2, dec[4] = nonfinite;
        char yesl[200], nol[200];
        ddp_rank_list(imp, W, 1, yesl, sizeof yesl);
        ddp_rank_list(imp, W, 0, nol, sizeof nol);
        if (vote)
            snprintf(out->note, sizeof out->note,
                     "epoch %lld step %lld: %s=%.6g; policy %s: %s (improved on ranks %s; not on ranks %s)%s",
                     (long long)epoch, (long long)step, d->monitor, view, policy_name(d->policy),
                     save        ? "save"
                     : nonfinite ? "not finite, no save"
                                 : "no save",
                     yesl, nol, yes != 0 && yes != W ? " - ranks disagree" : "");
        else
            snprintf(out->note, sizeof out->note, "epoch %lld step %lld: %s=%.6g; policy %s: %s", (long long)epoch,
                     (long long)step, d->monitor, view, policy_name(d->policy),
                     save        ? "save"
                     : improved  ? "improved"
                     : nonfinite ? "not finite, no save"
                                 : "no improvement");
        free(imp);
    }
    free(votes);
    MPI_CHECK(MPI_Ibcast(dec, 5, MPI_DOUBLE, 0, ctx->world, &rq));
    DDP_CHECK(ddp_wait(ctx, 1, &rq, "the checkpoint decision"));
    out->nonfinite = dec[4] != 0;
    if (out->nonfinite && !d->nonfinite_continue) /* rank 0's line, on every rank */
        return ddp_agree_status(ctx, me == 0 ? ddp_set_error(DDP_ERR_NUMERIC, "%s", fail) : DDP_OK);
    int improved = dec[0] != 0;
    out->stop = dec[1] != 0;
    out->value = dec[2];
    out->save = dec[3] > -2;
    out->drop = out->save ? (int)dec[3] : -1;
    /* 4. state updates, identical in meaning on every rank (Lightning updates each rank's local best only
     *    when the combined decision is to save) */
    if (improved) {
        d->best = out->value;
        d->bad_epochs = 0;
    } else {
        d->bad_epochs++;
    }
    if (vote ? out->save || improved : better(d, lv, d->best_local)) d->best_local = lv;
    return DDP_OK;
}

int ddp_decider_trim(ddp_decider *d, char *removed, size_t n)
{
    if (d->top_k <= 0 || d->ntopk <= d->top_k) return 0;
    int w = 0;
    for (int i = 1; i < d->ntopk; i++)
        if (better(d, d->topk[w].value, d->topk[i].value)) w = i;
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
