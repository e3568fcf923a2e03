/* evaluate.c — exact evaluation; see evaluate.h. */
#include "mpi_ddp/train/evaluate.h"

#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/comm/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ddp_status ddp_eval_acc_init(ddp_eval_acc *a, int64_t C, int64_t batch, int collect)
{
    memset(a, 0, sizeof *a);
    a->C = C;
    a->collect = collect;
    DDP_ALLOC(a->conf, C * C);
    DDP_ALLOC(a->b_pred, batch);
    DDP_ALLOC(a->b_prob, batch);
    DDP_ALLOC(a->b_loss, batch);
    return DDP_OK;
}

void ddp_eval_acc_free(ddp_eval_acc *a)
{
    free(a->conf), free(a->idx), free(a->ids), free(a->labels), free(a->preds), free(a->probs);
    free(a->b_pred), free(a->b_prob), free(a->b_loss);
    memset(a, 0, sizeof *a);
}

void ddp_eval_acc_reset(ddp_eval_acc *a)
{
    memset(a->conf, 0, (size_t)(a->C * a->C) * sizeof *a->conf);
    a->loss_sum = 0;
    a->count = 0;
    a->n = 0;
}

static ddp_status keep(ddp_eval_acc *a, int64_t idx, int64_t id, int64_t label, int64_t pred, float prob)
{
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 1024;
        int64_t *ni = realloc(a->idx, (size_t)nc * 8), *nd = realloc(a->ids, (size_t)nc * 8);
        if (ni) a->idx = ni;
        if (nd) a->ids = nd;
        int64_t *nl = realloc(a->labels, (size_t)nc * 8), *np = realloc(a->preds, (size_t)nc * 8);
        if (nl) a->labels = nl;
        if (np) a->preds = np;
        float *nr = realloc(a->probs, (size_t)nc * 4);
        if (nr) a->probs = nr;
        if (!ni || !nd || !nl || !np || !nr) return ddp_set_error(DDP_ERR_NOMEM, "out of memory keeping predictions");
        a->cap = nc;
    }
    a->idx[a->n] = idx;
    a->ids[a->n] = id;
    a->labels[a->n] = label;
    a->preds[a->n] = pred;
    a->probs[a->n] = prob;
    a->n++;
    return DDP_OK;
}

/* st's name in mpiddp.h ("DDP_ERR_INTERNAL") */
static const char *status_ident(ddp_status st, char *buf, size_t len)
{
    static const char *const names[] = {"DDP_OK",           "DDP_ERR_ARG",      "DDP_ERR_IO",     "DDP_ERR_FORMAT",
                                        "DDP_ERR_MPI",      "DDP_ERR_HDF5",     "DDP_ERR_CUDA",   "DDP_ERR_NCCL",
                                        "DDP_ERR_NOMEM",    "DDP_ERR_MISMATCH", "DDP_ERR_REMOTE", "DDP_ERR_NUMERIC",
                                        "DDP_ERR_INTERNAL", "DDP_ERR_BUSY"};
    if ((unsigned)st < sizeof names / sizeof *names) return names[st];
    if (st == DDP_STOPPED) return "DDP_STOPPED";
    snprintf(buf, len, "status %d", (int)st);
    return buf;
}

ddp_status ddp_model_callback_status(const ddp_model *m, const char *fn, ddp_status st, unsigned long seq,
                                     const char *where)
{
    char id[32];
    const char *name = m->name ? m->name : "(unnamed)";
    if (st == DDP_OK) return DDP_OK;
    if (st == DDP_STOPPED)
        return ddp_set_error(DDP_ERR_ARG,
                             "model '%s': %s returned DDP_STOPPED %s, which only ddp_train returns (after saving "
                             "last.h5): a model that wants the run to stop calls ddp_request_stop()",
                             name, fn, where);
    if (ddp_error_seq() != seq) return st; /* the callback's own line */
    return ddp_set_error(st, "model '%s': %s returned %s %s and set no error line on its thread", name, fn,
                         status_ident(st, id, sizeof id), where);
}

ddp_status ddp_eval_run(ddp_model *m, const float *params, ddp_loader *ld, int64_t steps, ddp_eval_acc *a,
                        ddp_eval_poll poll, void *arg)
{
    for (int64_t s = 0; s < steps; s++) {
        int stop = 0;
        if (poll) DDP_CHECK(poll(arg, s, &stop));
        if (stop) return DDP_OK;
        const ddp_batch *b;
        DDP_CHECK(ddp_loader_next(ld, s, &b));
        ddp_forward_out out = {.pred = a->b_pred, .prob = a->b_prob, .loss = a->b_loss};
        unsigned long seq = ddp_error_seq();
        ddp_status st = m->eval_step(m->self, b, params, &out);
        if (st != DDP_OK) {
            char where[64];
            snprintf(where, sizeof where, "at evaluation batch %lld of %lld", (long long)s + 1, (long long)steps);
            return ddp_model_callback_status(m, "eval_step", st, seq, where);
        }
        for (int64_t i = 0; i < b->nsamples; i++) {
            if (b->is_pad[i]) continue; /* padding duplicates never count */
            int64_t p = a->b_pred[i];
            if (p < 0 || p >= a->C)
                return ddp_set_error(DDP_ERR_INTERNAL, "model predicted class %lld outside [0, %lld)", (long long)p,
                                     (long long)a->C);
            a->loss_sum += a->b_loss[i];
            a->count++;
            a->conf[b->labels[i] * a->C + p]++;
            if (a->collect) DDP_CHECK(keep(a, b->indices[i], b->sample_ids[i], b->labels[i], p, a->b_prob[i]));
        }
    }
    return DDP_OK;
}

void ddp_confusion_metrics(const int64_t *conf, int64_t C, double *acc, double *f1)
{
    int64_t tot = 0, tp = 0;
    double fsum = 0;
    int64_t present = 0;
    for (int64_t i = 0; i < C; i++) {
        int64_t row = 0, col = 0;
        for (int64_t j = 0; j < C; j++) {
            row += conf[i * C + j];
            col += conf[j * C + i];
        }
        tot += row;
        tp += conf[i * C + i];
        if (row + col == 0) continue; /* class absent from labels and predictions: not averaged */
        present++;
        fsum += 2.0 * (double)conf[i * C + i] / (double)(row + col);
    }
    *acc = tot ? (double)tp / (double)tot : 0.0;
    *f1 = present ? fsum / (double)present : 0.0;
}

ddp_status ddp_eval_reduce_confusion(ddp_ctx *ctx, ddp_eval_acc *a)
{
    int64_t n = a->C * a->C, chunk = (int64_t)1 << 28;
    for (int64_t lo = 0; lo < n; lo += chunk)
        DDP_CHECK(ddp_allreduce(ctx, a->conf + lo, (int)(n - lo < chunk ? n - lo : chunk), MPI_INT64_T, MPI_SUM,
                                "the confusion-matrix reduction"));
    return DDP_OK;
}

static int cmp_idx(const void *x, const void *y)
{
    int64_t a = ((const int64_t *)x)[0], b = ((const int64_t *)y)[0];
    return (a > b) - (a < b);
}

/* Elements (int64) per message of the prediction gather: every MPI count stays far below INT_MAX whatever
 * the number of predictions (5 elements each; a single int count overflowed above ~429 M). The test hook
 * MPIDDP_TEST_GATHER_CHUNK makes messages small so that tests cross message boundaries. */
#define GATHER_CHUNK ((int64_t)1 << 27)
#define GATHER_TAG 7305

ddp_status ddp_eval_gather(ddp_ctx *ctx, ddp_eval_acc *a, ddp_eval_acc *all)
{
    int W = ctx->topo.size, root = ctx->topo.rank == 0;
    int64_t chunk = ddp_knob_int(DDP_KNOB_TEST_GATHER_CHUNK);
    if (chunk < 1 || chunk > GATHER_CHUNK) chunk = GATHER_CHUNK;
    /* pack rows as 5 int64 (index, id, label, pred, prob bits) */
    int64_t cnt = a->n * 5, total = 0;
    int64_t *mine = ddp_calloc((size_t)cnt + 1, sizeof *mine), *rows = NULL;
    int64_t *cnts = root ? ddp_calloc((size_t)W, sizeof *cnts) : NULL;
    int ok = mine && (!root || cnts), allok, agree = 0; /* agree: every rank is at the same point */
    ddp_status st = DDP_OK;
    DDP_TRY(ddp_all_ok(ctx, ok, &allok));
    agree = 1;
    if (!allok) DDP_FAIL(DDP_ERR_NOMEM, "out of memory gathering predictions");
    agree = 0;
    for (int64_t i = 0; i < a->n; i++) {
        int64_t *r = mine + 5 * i;
        r[0] = a->idx[i], r[1] = a->ids[i], r[2] = a->labels[i], r[3] = a->preds[i];
        float p = a->probs[i];
        r[4] = 0;
        memcpy(&r[4], &p, sizeof p);
    }
    int rc = MPI_Gather(&cnt, 1, MPI_INT64_T, cnts, 1, MPI_INT64_T, 0, ctx->world);
    if (rc != MPI_SUCCESS) DDP_TRY(ddp_mpi_error(rc, "MPI_Gather", __FILE__, __LINE__));
    if (root) {
        for (int r = 0; r < W; r++) total += cnts[r];
        rows = ddp_calloc((size_t)total + 1, sizeof *rows);
    }
    DDP_TRY(ddp_all_ok(ctx, !root || rows, &allok));
    agree = 1;
    if (!allok) DDP_FAIL(DDP_ERR_NOMEM, "out of memory gathering %lld predictions on rank 0", (long long)(total / 5));
    /* rank r's rows land after those of ranks < r, in messages of at most `chunk` elements */
    if (root) {
        memcpy(rows, mine, (size_t)cnt * sizeof *rows);
        int64_t at = cnt;
        for (int r = 1; r < W; r++) {
            for (int64_t lo = 0; lo < cnts[r]; lo += chunk) {
                int len = (int)(cnts[r] - lo < chunk ? cnts[r] - lo : chunk);
                rc = MPI_Recv(rows + at + lo, len, MPI_INT64_T, r, GATHER_TAG, ctx->world, MPI_STATUS_IGNORE);
                if (rc != MPI_SUCCESS) DDP_TRY(ddp_mpi_error(rc, "MPI_Recv", __FILE__, __LINE__));
            }
            at += cnts[r];
        }
    } else {
        for (int64_t lo = 0; lo < cnt; lo += chunk) {
            int len = (int)(cnt - lo < chunk ? cnt - lo : chunk);
            rc = MPI_Send(mine + lo, len, MPI_INT64_T, 0, GATHER_TAG, ctx->world);
            if (rc != MPI_SUCCESS) DDP_TRY(ddp_mpi_error(rc, "MPI_Send", __FILE__, __LINE__));
        }
    }
    agree = 1;
    if (root) {
        int64_t n = total / 5;
        qsort(rows, (size_t)n, 5 * sizeof *rows, cmp_idx);
        all->n = 0;
        for (int64_t i = 0; i < n && st == DDP_OK; i++) {
            float p;
            memcpy(&p, &rows[5 * i + 4], sizeof p);
            if (i > 0 && rows[5 * i] == rows[5 * (i - 1)])
                st = ddp_set_error(DDP_ERR_INTERNAL, "sample %lld predicted twice", (long long)rows[5 * i]);
            else
                st = keep(all, rows[5 * i], rows[5 * i + 1], rows[5 * i + 2], rows[5 * i + 3], p);
        }
    }
done: /* after an MPI error the ranks may stand at different calls: no agreement then */
    free(rows), free(mine), free(cnts);
    return agree ? ddp_agree_status(ctx, st) : st;
}
