/* metrics.c — (sum, count) accumulation per name, the cross-rank name-set check, and one batched
 * allreduce per sync point. Rank-0-only values are kept aside and never enter a collective. */
#include "mpi_ddp/train/metrics.h"

#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/comm/watchdog.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ddp_metrics {
    ddp_ctx *ctx;
    /* mu guards acc_sum, acc_cnt and rank0: ddp_log and ddp_log_rank0 may be called from any thread. Never held
     * across an MPI call: ddp_metrics_sync takes the rows out under it and reduces them without it. */
    pthread_mutex_t mu;
    ddp_metric_row acc_sum, acc_cnt; /* same names in both */
    ddp_metric_row rank0;
    ddp_metric_row counts; /* the last sync point's count over all ranks of each collective metric (the thread that
                              syncs writes and reads it) */
    int builtin_reserved;  /* the trainer's accumulator: ddp_log and ddp_log_rank0 refuse its own names */
};

/* The names ddp_train logs itself, and the metric files' own columns: a model's value logged under one would be merged
 * into the trainer's (a biased val/loss that checkpoints and early stopping decide on) or overwritten by it. */
static const char *const BUILTIN[] = {"epoch",
                                      "step",
                                      "rank",
                                      "lr",
                                      "train/loss",
                                      "train/samples_per_s",
                                      "train/skipped_steps",
                                      "train/rows_per_rank_max_over_mean",
                                      "val/loss",
                                      "val/acc",
                                      "val/macro_f1",
                                      "val/count"};

void ddp_metrics_reserve_builtin(ddp_metrics *m) { m->builtin_reserved = 1; }

int ddp_row_find(const ddp_metric_row *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->names[i], name) == 0) return i;
    return -1;
}

ddp_status ddp_row_set_at(ddp_metric_row *r, const char *name, double v, const char *file, int line)
{
    int i = ddp_row_find(r, name);
    if (i >= 0) {
        r->vals[i] = v;
        return DDP_OK;
    }
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 16;
        char **nn = ddp_realloc_at(r->names, (size_t)nc * sizeof *nn, 1, file, line);
        if (!nn) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for metric '%s'", name);
        r->names = nn;
        double *nv = ddp_realloc_at(r->vals, (size_t)nc * sizeof *nv, 1, file, line);
        if (!nv) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for metric '%s'", name);
        r->vals = nv;
        r->cap = nc;
    }
    size_t len = strlen(name) + 1;
    char *copy = ddp_calloc_at(len, 1, file, line);
    if (!copy) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for metric '%s'", name);
    memcpy(copy, name, len);
    r->names[r->n] = copy;
    r->vals[r->n++] = v;
    return DDP_OK;
}

void ddp_row_clear(ddp_metric_row *r)
{
    for (int i = 0; i < r->n; i++) free(r->names[i]);
    r->n = 0;
}

void ddp_metric_row_free(ddp_metric_row *r)
{
    if (!r) return;
    ddp_row_clear(r);
    free(r->names);
    free(r->vals);
    memset(r, 0, sizeof *r);
}

ddp_status ddp_metrics_create(ddp_ctx *ctx, ddp_metrics **out)
{
    DDP_CTX_ARG(ctx);
    DDP_NONNULL(out, "out");
    ddp_metrics *m = ddp_calloc(1, sizeof *m);
    if (!m) return ddp_ctx_local_failure(ctx, ddp_set_error(DDP_ERR_NOMEM, "out of memory for a metrics accumulator"));
    int rc = pthread_mutex_init(&m->mu, NULL);
    if (rc != 0) {
        free(m);
        return ddp_ctx_local_failure(
            ctx, ddp_set_error(DDP_ERR_NOMEM, "ddp_metrics_create: pthread_mutex_init failed (%s)", strerror(rc)));
    }
    m->ctx = ctx;
    *out = m;
    return DDP_OK;
}

void ddp_metrics_destroy(ddp_metrics *m)
{
    if (!m) return;
    ddp_metric_row_free(&m->acc_sum);
    ddp_metric_row_free(&m->acc_cnt);
    ddp_metric_row_free(&m->rank0);
    ddp_metric_row_free(&m->counts);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int ddp_metrics_pending(ddp_metrics *m)
{
    pthread_mutex_lock(&m->mu);
    int n = m->acc_sum.n + m->rank0.n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

double ddp_metrics_count(const ddp_metrics *m, const char *name)
{
    int i = ddp_row_find(&m->counts, name);
    return i >= 0 ? m->counts.vals[i] : -1;
}

static int valid_name(const char *name)
{
    return name && *name && strlen(name) < 128 && !strchr(name, ',') && !strchr(name, '\n');
}

/* DDP_ERR_ARG for a name not to be logged into m by its caller (own: the trainer logging its own metric), else OK. */
static ddp_status check_name(const ddp_metrics *m, const char *name, int own)
{
    if (!valid_name(name))
        return ddp_set_error(DDP_ERR_ARG, "metric name '%s': must be 1-127 characters without commas",
                             name ? name : "(null)");
    if (m->builtin_reserved && !own)
        for (size_t k = 0; k < sizeof BUILTIN / sizeof *BUILTIN; k++)
            if (!strcmp(name, BUILTIN[k]))
                return ddp_set_error(DDP_ERR_ARG,
                                     "metric name '%s' is one ddp_train logs itself (its value would be merged with "
                                     "the model's): log the model's under another name, e.g. 'model/%s'",
                                     name, strchr(name, '/') ? strchr(name, '/') + 1 : name);
    return DDP_OK;
}

static ddp_status log_sum(ddp_metrics *m, const char *name, double sum, double count, int own)
{
    DDP_CHECK(check_name(m, name, own));
    pthread_mutex_lock(&m->mu);
    int i = ddp_row_find(&m->acc_sum, name);
    if (i < 0) {
        ddp_status st = ddp_row_set(&m->acc_sum, name, sum);
        if (st == DDP_OK && (st = ddp_row_set(&m->acc_cnt, name, count)) != DDP_OK)
            free(m->acc_sum.names[--m->acc_sum.n]); /* the two rows stay in step */
        pthread_mutex_unlock(&m->mu);
        return own ? st : ddp_ctx_local_failure(m->ctx, st); /* this rank's: the next sync point would wait */
    }
    m->acc_sum.vals[i] += sum;
    m->acc_cnt.vals[i] += count;
    pthread_mutex_unlock(&m->mu);
    return DDP_OK;
}

static ddp_status log_rank0(ddp_metrics *m, const char *name, double value, int own)
{
    DDP_CHECK(check_name(m, name, own));
    if (m->ctx->topo.rank != 0) return DDP_OK;
    pthread_mutex_lock(&m->mu);
    ddp_status st = ddp_row_set(&m->rank0, name, value);
    pthread_mutex_unlock(&m->mu);
    return own ? st : ddp_ctx_local_failure(m->ctx, st);
}

ddp_status ddp_log(ddp_metrics *m, const char *name, double sum, double count)
{
    DDP_NONNULL(m, "m");
    return log_sum(m, name, sum, count, 0);
}
ddp_status ddp_log_rank0(ddp_metrics *m, const char *name, double value)
{
    DDP_NONNULL(m, "m");
    return log_rank0(m, name, value, 0);
}
ddp_status ddp_log_own(ddp_metrics *m, const char *name, double sum, double count)
{
    return log_sum(m, name, sum, count, 1);
}
ddp_status ddp_log_rank0_own(ddp_metrics *m, const char *name, double value) { return log_rank0(m, name, value, 1); }

/* The accumulators a sync point reduces: taken out of the ddp_metrics under its lock, so that the reduction runs
 * without it (a value logged meanwhile, from another thread, goes to the next sync point). */
typedef struct {
    ddp_metric_row sum, cnt, rank0;
} taken_rows;

static void take_rows(ddp_metrics *m, taken_rows *t)
{
    pthread_mutex_lock(&m->mu);
    t->sum = m->acc_sum;
    t->cnt = m->acc_cnt;
    t->rank0 = m->rank0;
    memset(&m->acc_sum, 0, sizeof m->acc_sum);
    memset(&m->acc_cnt, 0, sizeof m->acc_cnt);
    memset(&m->rank0, 0, sizeof m->rank0);
    pthread_mutex_unlock(&m->mu);
}

/* Hands the taken rows back: their memory when nothing was logged meanwhile (the rows keep their capacity), and any
 * values they still hold (a sync point that reduced nothing), added to those logged meanwhile. */
static void give_back(ddp_metrics *m, taken_rows *t)
{
    pthread_mutex_lock(&m->mu);
    if (m->acc_sum.n == 0) { /* acc_cnt is in step */
        ddp_metric_row_free(&m->acc_sum);
        ddp_metric_row_free(&m->acc_cnt);
        m->acc_sum = t->sum;
        m->acc_cnt = t->cnt;
    } else {
        for (int i = 0; i < t->sum.n; i++) {
            int j = ddp_row_find(&m->acc_sum, t->sum.names[i]);
            if (j >= 0) {
                m->acc_sum.vals[j] += t->sum.vals[i];
                m->acc_cnt.vals[j] += t->cnt.vals[i];
            } else if (ddp_row_set(&m->acc_sum, t->sum.names[i], t->sum.vals[i]) == DDP_OK &&
                       ddp_row_set(&m->acc_cnt, t->sum.names[i], t->cnt.vals[i]) != DDP_OK) {
                free(m->acc_sum.names[--m->acc_sum.n]);
            }
        }
        ddp_metric_row_free(&t->sum);
        ddp_metric_row_free(&t->cnt);
    }
    if (m->rank0.n == 0) {
        ddp_metric_row_free(&m->rank0);
        m->rank0 = t->rank0;
    } else { /* a value logged meanwhile is the newer one */
        for (int i = 0; i < t->rank0.n; i++)
            if (ddp_row_find(&m->rank0, t->rank0.names[i]) < 0)
                (void)ddp_row_set(&m->rank0, t->rank0.names[i], t->rank0.vals[i]);
        ddp_metric_row_free(&t->rank0);
    }
    pthread_mutex_unlock(&m->mu);
}

/* sorts both accumulators by name, in step */
static void sort_acc(ddp_metric_row *s, ddp_metric_row *c)
{
    for (int i = 1; i < s->n; i++)
        for (int j = i; j > 0 && strcmp(s->names[j - 1], s->names[j]) > 0; j--) {
            char *t = s->names[j];
            s->names[j] = s->names[j - 1];
            s->names[j - 1] = t;
            double v = s->vals[j];
            s->vals[j] = s->vals[j - 1];
            s->vals[j - 1] = v;
            t = c->names[j];
            c->names[j] = c->names[j - 1];
            c->names[j - 1] = t;
            v = c->vals[j];
            c->vals[j] = c->vals[j - 1];
            c->vals[j - 1] = v;
        }
}

/* Names the first metric some rank did not log. Collective: every rank takes part in every collective here, so
 * an allocation that fails on one rank is agreed (one line, every rank) before the gathers, not left for the others
 * to wait on. */
static ddp_status explain_mismatch(ddp_ctx *c, const ddp_metric_row *acc_sum)
{
    int W = c->topo.size;
    size_t mylen = 0;
    for (int i = 0; i < acc_sum->n; i++) mylen += strlen(acc_sum->names[i]) + 1;
    int len = (int)mylen;
    int *lens = ddp_calloc((size_t)W, sizeof *lens), *displ = ddp_calloc((size_t)W, sizeof *displ);
    char *mine = ddp_calloc(mylen + 1, 1), *all = NULL;
    int rc;
    int64_t tot = 0;
    ddp_status st = ddp_agree_status(
        c, !lens || !displ || !mine ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for the metric-name check") : DDP_OK);
    if (st != DDP_OK) goto done;
    for (int i = 0, k = 0; i < acc_sum->n; i++) {
        strcpy(mine + k, acc_sum->names[i]);
        k += (int)strlen(acc_sum->names[i]) + 1;
    }
    rc = MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, c->world);
    if (rc != MPI_SUCCESS) {
        st = ddp_mpi_error(rc, "MPI_Allgather(metric name lengths)", __FILE__, __LINE__);
        goto done;
    }
    for (int r = 0; r < W; r++) {
        displ[r] = (int)tot;
        tot += lens[r];
    }
    all = ddp_calloc((size_t)tot + 1, 1);
    st = ddp_agree_status(c, !all ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for the metric-name check") : DDP_OK);
    if (st != DDP_OK) goto done;
    rc = MPI_Allgatherv(mine, len, MPI_CHAR, all, lens, displ, MPI_CHAR, c->world);
    if (rc != MPI_SUCCESS)
        st = ddp_mpi_error(rc, "MPI_Allgatherv(metric names)", __FILE__, __LINE__);
    else {
        /* first name not logged by every rank (in rank order, then name order) */
        int *in = ddp_calloc((size_t)W, sizeof *in);
        const char *bad = NULL;
        for (int r = 0; r < W && !bad && in; r++)
            for (int k = displ[r]; k < displ[r] + lens[r] && !bad; k += (int)strlen(all + k) + 1) {
                const char *name = all + k;
                int cnt = 0;
                for (int q = 0; q < W; q++) {
                    in[q] = 0;
                    for (int j = displ[q]; j < displ[q] + lens[q]; j += (int)strlen(all + j) + 1)
                        if (strcmp(all + j, name) == 0) in[q] = 1;
                    cnt += in[q];
                }
                if (cnt < W) bad = name;
            }
        if (bad) {
            char yes[256], no[256];
            ddp_rank_list(in, W, 1, yes, sizeof yes);
            ddp_rank_list(in, W, 0, no, sizeof no);
            st = ddp_set_error(DDP_ERR_MISMATCH,
                               "metric '%s' was logged on rank(s) %s but not on rank(s) %s before the same sync point; "
                               "log collective metrics on every rank (use ddp_log_rank0 for rank-0-only values)",
                               bad, yes, no);
        } else {
            st = ddp_set_error(DDP_ERR_MISMATCH, "metric names differ across ranks at a sync point");
        }
        free(in);
    }
done:
    free(all);
    free(lens);
    free(displ);
    free(mine);
    return st;
}

/* The sync point over the rows taken out of m. *reduced: 0 when it returned before the reduction (the rows keep their
 * values), else 1 (they were reduced, or dropped with the error every rank returns). */
static ddp_status sync_rows(ddp_metrics *m, taken_rows *t, ddp_metric_row *global, ddp_metric_row *local, int *reduced)
{
    ddp_ctx *c = m->ctx;
    *reduced = 0;
    sort_acc(&t->sum, &t->cnt);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the sorted names */
    for (int i = 0; i < t->sum.n; i++)
        for (const unsigned char *p = (const unsigned char *)t->sum.names[i];; p++) {
            h = (h ^ *p) * 1099511628211ULL;
            if (!*p) break;
        }
    int64_t hh = (int64_t)(h >> 2), n = t->sum.n;
    int64_t chk[5] = {hh, -hh, n, -n, global ? 0 : -1}; /* chk[4] < 0: a rank passed global NULL */
    DDP_CHECK(ddp_allreduce(c, chk, 5, MPI_INT64_T, MPI_MIN, "the metric-name check"));
    ddp_status st = DDP_OK;
    if (chk[4] < 0) { /* agreed in the same round trip: no rank goes on to the reduction alone */
        st = global ? ddp_set_error(DDP_ERR_ARG, "ddp_metrics_sync: global is NULL on another rank")
                    : ddp_set_error(DDP_ERR_ARG, "ddp_metrics_sync: global is NULL");
        return st;
    }
    *reduced = 1;
    if (chk[0] != -chk[1] || chk[2] != -chk[3]) {
        st = explain_mismatch(c, &t->sum);
        ddp_mark_error_shared();
    }
    int nn = t->sum.n, mismatch = st != DDP_OK; /* a mismatch is known to every rank */
    double *buf = st == DDP_OK ? ddp_calloc((size_t)(2 * nn + 1), sizeof *buf) : NULL;
    if (st == DDP_OK && !buf) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for the metric reduction");
    if (st == DDP_OK) {
        if (local) ddp_row_clear(local);
        for (int i = 0; i < nn; i++) {
            buf[i] = t->sum.vals[i];
            buf[nn + i] = t->cnt.vals[i];
            if (local && st == DDP_OK && buf[nn + i] != 0) /* a count of 0 here: no local value (not 0) */
                st = ddp_row_set(local, t->sum.names[i], buf[i] / buf[nn + i]);
        }
    }
    if (!mismatch) st = ddp_agree_status(c, st); /* a rank out of memory here: agreed before the allreduce */
    if (st == DDP_OK && nn) st = ddp_allreduce(c, buf, 2 * nn, MPI_DOUBLE, MPI_SUM, "the metric reduction");
    ddp_row_clear(&m->counts);
    if (st == DDP_OK) {
        ddp_row_clear(global);
        for (int i = 0; i < nn && st == DDP_OK; i++) {
            /* no count on any rank: no value (nan, written so), not a perfect 0 a monitor would take for the best */
            st = ddp_row_set(global, t->sum.names[i], buf[nn + i] != 0 ? buf[i] / buf[nn + i] : NAN);
            if (st == DDP_OK) st = ddp_row_set(&m->counts, t->sum.names[i], buf[nn + i]);
        }
        for (int i = 0; i < t->rank0.n && st == DDP_OK; i++)
            st = ddp_row_set(global, t->rank0.names[i], t->rank0.vals[i]);
        st = ddp_agree_status(c, st); /* a rank out of memory for its rows: every rank returns the error */
    }
    free(buf);
    return st;
}

ddp_status ddp_metrics_sync(ddp_metrics *m, ddp_metric_row *global, ddp_metric_row *local)
{
    DDP_NONNULL(m, "m");
    taken_rows t;
    take_rows(m, &t);
    int reduced = 0;
    ddp_status st = sync_rows(m, &t, global, local, &reduced);
    if (reduced) {
        ddp_row_clear(&t.sum);
        ddp_row_clear(&t.cnt);
        ddp_row_clear(&t.rank0);
    }
    give_back(m, &t);
    return st;
}
