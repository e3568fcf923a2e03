/* capi_train.c — a user program of the public C API (only include/mpiddp.h) around ddp_train and its metrics
 * (sh/capi_train.sh). Usage: capi_train CASE TRAIN_DIR VAL_DIR WORK [ARGS]. Each check prints one line on stderr,
 * "ok rank R ..." or "FAIL rank R ...", and the program ends with "done rank R".
 *   threads NT ITERS: ddp_log and ddp_log_rank0 from NT threads at once into one ddp_metrics: every value counts
 *     (the exact mean of a metric logged with counts 1 and 0.5), every new name is kept (the rows grow meanwhile)
 *   dangling: after ddp_train, model.metrics is NULL (its accumulator is gone) and logging through it is DDP_ERR_ARG
 *   stop: a stop request is taken by the ddp_train that stops for it; later ones run to the end; one made before a
 *     ddp_train (and not yet taken) stops that one; ddp_stop_requested keeps every kind asked
 *   fail_train, fail_log, fail_stopped, fail_eval, fail_init: a callback that fails: one line naming model, callback
 * and step when it set none; its own line when it set one; DDP_STOPPED from a callback is DDP_ERR_ARG, not a stop */
#include "mpiddp.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_size, g_failed;

static void check(int ok, const char *what, const char *detail)
{
    fprintf(stderr, "%s rank %d %s%s%s\n", ok ? "ok" : "FAIL", g_rank, what, detail ? ": " : "", detail ? detail : "");
    if (!ok) g_failed = 1;
}

/* st must be want; for an error, ddp_last_error() one line holding has */
static void expect(const char *what, ddp_status st, ddp_status want, const char *has)
{
    const char *e = ddp_last_error();
    int ok = st == want;
    if (want != DDP_OK) ok = ok && *e && !strchr(e, '\n') && strcmp(e, "no error") && (!has || strstr(e, has));
    char d[1400];
    snprintf(d, sizeof d, "%s (want %s)%s%s", ddp_status_name(st), ddp_status_name(want), st ? ": " : "", st ? e : "");
    check(ok, what, d);
}

/* ------------------------------------------------------------------ a linear softmax model on mean-pooled rows */
enum { FAIL_NONE, FAIL_TRAIN, FAIL_LOG, FAIL_STOPPED, FAIL_EVAL, FAIL_INIT };
typedef struct {
    int64_t D, C;
    ddp_tensor_spec spec[2];
    int64_t calls;   /* train_step calls, all runs */
    int64_t run;     /* train_step calls of the current ddp_train */
    int64_t stop_at; /* > 0: the last rank calls ddp_request_stop() in that train_step call */
    int fail;        /* FAIL_*: at train_step call 3 (eval_step's first call for FAIL_EVAL), on every rank */
    ddp_model *model;
    int saw_metrics; /* model->metrics was set during train_step */
} lin;

static ddp_status lin_init(void *self, float *p, uint64_t seed)
{
    lin *m = self;
    if (m->fail == FAIL_INIT) return DDP_ERR_NOMEM; /* sets no line */
    uint64_t x = seed + 1;
    for (int64_t i = 0; i < m->C * m->D + m->C; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = 0.1f * (float)((x >> 40) & 0xffff) / 65536.0f;
    }
    return DDP_OK;
}

static void forward(lin *m, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out)
{
    const float *W = P, *bias = P + m->C * m->D;
    double tot = 0;
    float p[64], z[64];
    for (int64_t s = 0; s < b->nsamples; s++) {
        int64_t lo = b->offsets[s], hi = b->offsets[s + 1], am = 0;
        for (int64_t d = 0; d < m->D; d++) {
            p[d] = 0;
            for (int64_t r = lo; r < hi; r++) p[d] += b->x[r * m->D + d] / (float)(hi - lo);
        }
        float mx = -INFINITY;
        for (int64_t c = 0; c < m->C; c++) {
            z[c] = bias[c];
            for (int64_t d = 0; d < m->D; d++) z[c] += W[c * m->D + d] * p[d];
            if (z[c] > mx) mx = z[c], am = c;
        }
        double se = 0;
        for (int64_t c = 0; c < m->C; c++) se += exp(z[c] - mx);
        double lse = mx + log(se), loss = lse - z[b->labels[s]];
        tot += loss;
        if (out->loss) out->loss[s] = (float)loss;
        if (out->pred) out->pred[s] = am;
        if (out->prob) out->prob[s] = (float)(1.0 / se);
        if (G)
            for (int64_t c = 0; c < m->C; c++) {
                float g = (float)exp(z[c] - lse) - (c == b->labels[s] ? 1.0f : 0.0f);
                for (int64_t d = 0; d < m->D; d++) G[c * m->D + d] += g * p[d];
                G[m->C * m->D + c] += g;
            }
    }
    out->loss_sum = tot;
    out->count = b->nsamples;
}

static ddp_status lin_train(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                            ddp_grad_ready_fn ready, void *arg)
{
    lin *m = self;
    m->calls++;
    m->run++;
    if (m->model->metrics) m->saw_metrics = 1;
    if (m->stop_at > 0 && m->run == m->stop_at && g_rank == g_size - 1) ddp_request_stop();
    if (m->run == 3) {
        if (m->fail == FAIL_TRAIN) return DDP_ERR_INTERNAL;
        if (m->fail == FAIL_STOPPED) return DDP_STOPPED;
        if (m->fail == FAIL_LOG) return ddp_log(m->model->metrics, "bad,name", 1.0, 1.0); /* sets its own line */
    }
    forward(m, b, P, G, out);
    if (ready) ready(arg, 0, m->C * m->D + m->C);
    return DDP_OK;
}

static ddp_status lin_eval(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    lin *m = self;
    if (m->fail == FAIL_EVAL) return DDP_ERR_IO;
    forward(m, b, P, NULL, out);
    return DDP_OK;
}

static lin g_lin;
static ddp_model make_model(const ddp_dataset *tr)
{
    g_lin.D = ddp_dataset_get_info(tr)->dim;
    g_lin.C = ddp_dataset_get_info(tr)->num_classes;
    g_lin.spec[0] = (ddp_tensor_spec){.name = "fc.weight", .ndim = 2, .shape = {g_lin.C, g_lin.D}};
    g_lin.spec[1] = (ddp_tensor_spec){.name = "fc.bias", .ndim = 1, .shape = {g_lin.C}};
    return (ddp_model){.name = "capi_lin",
                       .ntensors = 2,
                       .tensors = g_lin.spec,
                       .num_classes = (int)g_lin.C,
                       .device = DDP_DEVICE_CPU,
                       .self = &g_lin,
                       .init = lin_init,
                       .train_step = lin_train,
                       .eval_step = lin_eval};
}

static ddp_status train(ddp_ctx *ctx, ddp_model *m, ddp_dataset *tr, ddp_dataset *va, const char *work,
                        const char *name, const char *resume, int epochs)
{
    char out[4096];
    g_lin.run = 0;
    snprintf(out, sizeof out, "%s/%s", work, name);
    ddp_train_config cfg;
    ddp_train_config_default(&cfg);
    cfg.out_dir = out;
    cfg.epochs = epochs;
    cfg.batch_size = 8;
    cfg.lr = 0.05;
    cfg.progress = 0;
    cfg.resume = resume;
    cfg.collective_timeout = 30;
    return ddp_train(ctx, &cfg, m, tr, va);
}

/* ------------------------------------------------------------------ threads */
typedef struct {
    ddp_metrics *m;
    int k, iters, newnames;
    pthread_barrier_t *start;
    ddp_status st;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    char nm[64];
    int stride = a->iters / a->newnames;
    pthread_barrier_wait(a->start); /* all at once */
    for (int i = 0; i < a->iters && a->st == DDP_OK; i++) {
        a->st = ddp_log(a->m, "x", 1.0, a->k % 2 ? 0.5 : 1.0);
        if (a->st == DDP_OK && i % stride == 0 && i / stride < a->newnames) { /* new names meanwhile: rows grow */
            snprintf(nm, sizeof nm, "t/%d/%d", a->k, i / stride);
            a->st = ddp_log(a->m, nm, (double)i, 1.0);
        }
        if (a->st == DDP_OK && i % 64 == 0) {
            snprintf(nm, sizeof nm, "r/%d/%d", a->k, i / 64 % 50);
            a->st = ddp_log_rank0(a->m, nm, (double)a->k);
        }
    }
    return NULL;
}

static void case_threads(ddp_ctx *ctx, int nt, int iters)
{
    enum { NEWN = 200 };
    ddp_metrics *m = NULL;
    expect("ddp_metrics_create", ddp_metrics_create(ctx, &m), DDP_OK, NULL);
    if (!m) return;
    pthread_t t[64];
    worker_arg a[64];
    pthread_barrier_t start;
    if (nt > 64) nt = 64;
    if (nt < 1 || iters < 1 || pthread_barrier_init(&start, NULL, (unsigned)nt)) {
        check(0, "threads: NT in [1, 64], ITERS >= 1, pthread_barrier_init", NULL);
        ddp_metrics_destroy(m);
        return;
    }
    for (int k = 0; k < nt; k++) {
        a[k] = (worker_arg){.m = m, .k = k, .iters = iters, .newnames = NEWN < iters ? NEWN : iters, .start = &start};
        if (pthread_create(&t[k], NULL, worker, &a[k])) {
            check(0, "pthread_create", NULL);
            exit(1);
        }
    }
    for (int k = 0; k < nt; k++) pthread_join(t[k], NULL);
    pthread_barrier_destroy(&start);
    for (int k = 0; k < nt; k++) expect("ddp_log from a thread", a[k].st, DDP_OK, NULL);
    ddp_metric_row g = {0}, l = {0};
    expect("ddp_metrics_sync after the threads", ddp_metrics_sync(m, &g, &l), DDP_OK, NULL);
    /* per rank: nt*iters samples over sum of counts (nt/2 threads at 1, the others at 0.5): the same on every rank */
    double cnt = 0;
    for (int k = 0; k < nt; k++) cnt += (k % 2 ? 0.5 : 1.0) * iters;
    double want = (double)nt * iters / cnt;
    int newn = nt * (NEWN < iters ? NEWN : iters), rank0n = 0;
    for (int k = 0; k < nt; k++) rank0n += (iters + 63) / 64 < 50 ? (iters + 63) / 64 : 50;
    char d[256];
    for (int pass = 0; pass < 2; pass++) {
        const ddp_metric_row *r = pass ? &g : &l;
        double x = NAN;
        int tnames = 0, rnames = 0;
        for (int i = 0; i < r->n; i++) {
            if (!strcmp(r->names[i], "x")) x = r->vals[i];
            tnames += !strncmp(r->names[i], "t/", 2);
            rnames += !strncmp(r->names[i], "r/", 2);
        }
        int want_r = pass && g_rank == 0 ? rank0n : 0; /* rank-0 values: in global, on rank 0 */
        snprintf(d, sizeof d, "x = %.17g (want %.17g), %d new names (want %d), %d rank-0 names (want %d)", x, want,
                 tnames, newn, rnames, want_r);
        check(x == want && tnames == newn && rnames == want_r,
              pass ? "global row: every value and name logged from the threads" : "local row: every value and name", d);
    }
    ddp_metric_row_free(&g);
    ddp_metric_row_free(&l);
    ddp_metrics_destroy(m);
}

/* ------------------------------------------------------------------ ddp_train cases */
static int has_last(const char *work, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s/checkpoints/last.h5", work, name);
    return access(p, F_OK) == 0;
}

static void case_dangling(ddp_ctx *ctx, ddp_model *m, ddp_dataset *tr, ddp_dataset *va, const char *work)
{
    expect("ddp_train", train(ctx, m, tr, va, work, "dangling", NULL, 1), DDP_OK, NULL);
    check(g_lin.saw_metrics, "model.metrics set during ddp_train", NULL);
    char d[64];
    snprintf(d, sizeof d, "%p", (void *)m->metrics);
    check(m->metrics == NULL, "model.metrics is NULL after ddp_train", d);
    if (m->metrics) return; /* freed memory: logging through it would crash */
    expect("ddp_log(model.metrics) after ddp_train", ddp_log(m->metrics, "after/x", 1.0, 1.0), DDP_ERR_ARG,
           "ddp_log: m is NULL");
    expect("ddp_log_rank0(model.metrics) after ddp_train", ddp_log_rank0(m->metrics, "after/y", 1.0), DDP_ERR_ARG,
           "ddp_log_rank0: m is NULL");
    /* a second run sets it again and resets it again */
    g_lin.saw_metrics = 0;
    expect("ddp_train again", train(ctx, m, tr, va, work, "dangling2", NULL, 1), DDP_OK, NULL);
    check(g_lin.saw_metrics && m->metrics == NULL, "model.metrics set during the second ddp_train, NULL after", NULL);
}

/* runs ddp_train, returns the train_step calls it made */
static int64_t run_counted(ddp_ctx *ctx, ddp_model *m, ddp_dataset *tr, ddp_dataset *va, const char *work,
                           const char *name, const char *resume, int epochs, ddp_status want, const char *what)
{
    int64_t c0 = g_lin.calls;
    expect(what, train(ctx, m, tr, va, work, name, resume, epochs), want, NULL);
    return g_lin.calls - c0;
}

static void case_stop(ddp_ctx *ctx, ddp_model *m, ddp_dataset *tr, ddp_dataset *va, const char *work)
{
    char d[256];
    /* the steps of one epoch: a run nothing stops */
    int64_t full = run_counted(ctx, m, tr, va, work, "full", NULL, 1, DDP_OK, "ddp_train, no stop request");
    check(ddp_stop_requested() == 0, "ddp_stop_requested() 0 before any request", NULL);
    g_lin.stop_at = 2; /* the last rank asks in its second step: the ranks agree at the next step boundary */
    int64_t c = run_counted(ctx, m, tr, va, work, "a", NULL, 1, DDP_STOPPED, "ddp_train stopped by a model's request");
    g_lin.stop_at = 0;
    snprintf(d, sizeof d, "%lld train_step calls of %lld", (long long)c, (long long)full);
    check(c < full && has_last(work, "a"), "the stopped run ended early with last.h5", d);
    int want_kinds = g_rank == g_size - 1 ? DDP_STOP_END : 0;
    check(ddp_stop_requested() == want_kinds, "ddp_stop_requested() still says DDP_STOP_END where it was asked", NULL);
    /* the request is spent: the resume and a fresh run train to their end */
    int64_t cstop = c;
    c = run_counted(ctx, m, tr, va, work, "a", "auto", 1, DDP_OK, "the resume after the stop runs to its end");
    int64_t c2 = run_counted(ctx, m, tr, va, work, "b", NULL, 1, DDP_OK, "a fresh run after the stop runs to its end");
    snprintf(d, sizeof d, "resume %lld calls (want %lld), fresh run %lld (want %lld)", (long long)c,
             (long long)(full - cstop), (long long)c2, (long long)full);
    check(c == full - cstop && c2 == full, "the runs after the stopped one train every step left", d);
    check(ddp_stop_requested() == want_kinds, "ddp_stop_requested() keeps the kinds asked", NULL);
    /* a request made before ddp_train starts, and not yet taken: stops that run at its first step, then is spent */
    if (g_rank == 0) ddp_request_stop_kind(DDP_STOP_REQUEUE);
    c = run_counted(ctx, m, tr, va, work, "c", NULL, 1, DDP_STOPPED, "a request made before ddp_train stops it");
    snprintf(d, sizeof d, "%lld calls", (long long)c);
    check(c == 1 && has_last(work, "c"), "stopped at its first step, with last.h5", d);
    c = run_counted(ctx, m, tr, va, work, "d", NULL, 1, DDP_OK, "the next run after that runs to its end");
    snprintf(d, sizeof d, "%lld calls (want %lld)", (long long)c, (long long)full);
    check(c == full, "the next run trains every step", d);
    want_kinds |= g_rank == 0 ? DDP_STOP_REQUEUE : 0;
    snprintf(d, sizeof d, "%d (want %d)", ddp_stop_requested(), want_kinds);
    check(ddp_stop_requested() == want_kinds, "ddp_stop_requested() holds every kind asked so far", d);
}

static void case_fail(ddp_ctx *ctx, ddp_model *m, ddp_dataset *tr, ddp_dataset *va, const char *work, int fail)
{
    g_lin.fail = fail;
    ddp_status st = train(ctx, m, tr, va, work, "fail", NULL, 1);
    if (fail == FAIL_TRAIN)
        expect("train_step returns DDP_ERR_INTERNAL and sets no line", st, DDP_ERR_INTERNAL,
               "model 'capi_lin': train_step returned DDP_ERR_INTERNAL at step 3");
    else if (fail == FAIL_LOG)
        expect("train_step returns a failed ddp_log's status: its line stays", st, DDP_ERR_ARG,
               "metric name 'bad,name'");
    else if (fail == FAIL_STOPPED) {
        expect("train_step returns DDP_STOPPED: ddp_train does not", st, DDP_ERR_ARG,
               "model 'capi_lin': train_step returned DDP_STOPPED at step 3");
        check(strstr(ddp_last_error(), "ddp_request_stop") != NULL, "the line points to ddp_request_stop", NULL);
    } else if (fail == FAIL_INIT)
        expect("init returns DDP_ERR_NOMEM and sets no line", st, DDP_ERR_NOMEM,
               "model 'capi_lin': init returned DDP_ERR_NOMEM at the start");
    else
        expect("eval_step returns DDP_ERR_IO and sets no line", st, DDP_ERR_IO,
               "model 'capi_lin': eval_step returned DDP_ERR_IO at evaluation batch 1");
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: capi_train CASE TRAIN_DIR VAL_DIR WORK [ARGS]\n");
        return 2;
    }
    const char *c = argv[1], *trd = argv[2], *vad = argv[3], *work = argv[4];
    int nt = argc > 5 ? atoi(argv[5]) : 4, iters = argc > 6 ? atoi(argv[6]) : 20000;
    ddp_ctx *ctx = NULL;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 3;
    }
    g_rank = ddp_topo(ctx)->rank;
    g_size = ddp_topo(ctx)->size;
    ddp_dataset *tr = NULL, *va = NULL;
    if (!strcmp(c, "threads"))
        case_threads(ctx, nt, iters);
    else if (ddp_dataset_open(ctx, trd, &tr) != DDP_OK || ddp_dataset_open(ctx, vad, &va) != DDP_OK)
        check(0, "ddp_dataset_open", ddp_last_error());
    else {
        ddp_model m = make_model(tr);
        g_lin.model = &m;
        if (!strcmp(c, "dangling"))
            case_dangling(ctx, &m, tr, va, work);
        else if (!strcmp(c, "stop"))
            case_stop(ctx, &m, tr, va, work);
        else if (!strcmp(c, "fail_train"))
            case_fail(ctx, &m, tr, va, work, FAIL_TRAIN);
        else if (!strcmp(c, "fail_log"))
            case_fail(ctx, &m, tr, va, work, FAIL_LOG);
        else if (!strcmp(c, "fail_stopped"))
            case_fail(ctx, &m, tr, va, work, FAIL_STOPPED);
        else if (!strcmp(c, "fail_init"))
            case_fail(ctx, &m, tr, va, work, FAIL_INIT);
        else if (!strcmp(c, "fail_eval"))
            case_fail(ctx, &m, tr, va, work, FAIL_EVAL);
        else
            check(0, "unknown case", c);
    }
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    fprintf(stderr, "done rank %d\n", g_rank);
    ddp_status fs = ddp_finalize(ctx); /* after a failure of this rank alone it leaves MPI_Finalize alone */
    return g_failed ? 1 : fs != DDP_OK ? 4 : 0;
}
