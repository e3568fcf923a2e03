/* capi_misuse_metrics.c — capi_misuse's cases local_failure (a call that is not collective failing on one rank) and
 * own_metric (a model's own metrics through ddp_log: its own names, ddp_train's names refused, a NaN monitored). */
#include "capi_misuse.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int is_metrics_case(const char *c) { return !strcmp(c, "local_failure") || !strcmp(c, "own_metric"); }

typedef struct {
    ddp_dataset *ds;
    float *scratch;
    ddp_status st;
} loader_arg;
static char g_loader_error[1024]; /* the loader's error line (ddp_last_error is the calling thread's) */

static void *loader(void *p)
{
    loader_arg *a = p;
    const float *rows;
    int64_t nr, lab, id;
    a->st = ddp_dataset_sample(a->ds, 0, a->scratch, &rows, &nr, &lab, &id);
    snprintf(g_loader_error, sizeof g_loader_error, "%s", ddp_last_error());
    return NULL;
}

/* CAPI_SAMPLE=DIR: rank 1 opens DIR, a copy of trd, replaces its shard CAPI_SAMPLE_SHARD with a file that is not
 * HDF5 (a dataset changed under a run) and reads sample 0 from it, the other ranks from trd. CAPI_SAMPLE_THREAD: on
 * a loader thread, whose status the program takes after the next collective (a prefetch: the step's allreduce ran
 * before the batch was taken) */
static ddp_status sample_copy(ddp_ctx *ctx, const char *trd, ddp_dataset **ds)
{
    const char *copy = getenv("CAPI_SAMPLE"), *shard = getenv("CAPI_SAMPLE_SHARD");
    if (!copy || !*copy) return DDP_OK;
    ddp_status st = ddp_dataset_open(ctx, g_rank == 1 ? copy : trd, ds);
    if (st != DDP_OK || g_rank != 1) return st;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.new", shard ? shard : "");
    FILE *f = fopen(tmp, "w");
    if (!f || fputs("not an HDF5 file\n", f) < 0 || fclose(f) != 0 || rename(tmp, shard) != 0) {
        fprintf(stderr, "FAIL rank %d: cannot replace %s\n", g_rank, shard ? shard : "(CAPI_SAMPLE_SHARD unset)");
        g_failed = 1;
        return DDP_OK;
    }
    const ddp_dataset_info *in = ddp_dataset_get_info(*ds);
    float *scratch = malloc((size_t)(in->max_sample_rows * in->dim) * sizeof *scratch);
    const float *rows;
    int64_t nr, lab, id;
    const char *thread = getenv("CAPI_SAMPLE_THREAD");
    loader_arg la = {*ds, scratch, DDP_ERR_NOMEM};
    pthread_t t;
    if (!scratch)
        st = DDP_ERR_NOMEM;
    else if (!thread || !*thread)
        st = ddp_dataset_sample(*ds, 0, scratch, &rows, &nr, &lab, &id);
    else if (pthread_create(&t, NULL, loader, &la) == 0 && pthread_join(t, NULL) == 0)
        st = la.st;
    free(scratch);
    return st;
}

/* a call that is not collective failing on one rank (sh/capi_misuse.sh fails an allocation with
 * MPIDDP_TEST_FAIL_ALLOC, or a shard read with CAPI_SAMPLE): that rank ends as mpiddp.h directs (ddp_finalize,
 * exit non-zero) while the others wait in the next collective; ddp_finalize once waited for them in MPI_Finalize for
 * ever */
static int local_failure(ddp_ctx *ctx, const char *trd)
{
    ddp_model_config mc;
    ddp_model_config_default(&mc);
    mc.dim = 4, mc.classes = 3, mc.hidden = 8, mc.max_batch_rows = mc.max_batch_samples = 8;
    ddp_model m = {0};
    ddp_metrics *mm = NULL;
    ddp_dataset *ds = NULL;
    ddp_status st = sample_copy(ctx, trd, &ds);
    const char *thread = getenv("CAPI_SAMPLE_THREAD");
    int all = 0; /* the step's collective, rank 1 not yet knowing its loader failed */
    if (thread && *thread) expect("ddp_all_ok(1) after the loader", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
    if (st == DDP_OK) st = ddp_model_create(ctx, DDP_DEVICE_CPU, &mc, &m);
    if (st == DDP_OK) st = ddp_metrics_create(ctx, &mm);
    if (st == DDP_OK) st = ddp_log(mm, "x", 1, 1);
    if (st == DDP_OK) st = ddp_log_rank0(mm, "y", 1);
    const char *agree = getenv("CAPI_AGREE");
    if (agree && *agree) {        /* the failure agreed as the CLI agrees it: every rank ends cleanly */
        int sampled = ds != NULL; /* the shard rank 1 cannot read, else an allocation */
        ddp_status want = sampled ? DDP_ERR_IO : DDP_ERR_NOMEM;
        const char *line = sampled ? "file changed since it was validated" : "out of memory";
        if (!strcmp(agree, "other")) { /* rank 1 agrees another failure of its own: that one's line, not the loader's */
            ddp_metrics *m2 = NULL;
            if (st != DDP_OK && (st = ddp_metrics_create(ctx, &m2)) == DDP_OK) st = ddp_log(m2, "bad,name", 1, 1);
            ddp_metrics_destroy(m2);
            want = DDP_ERR_ARG, line = "metric name 'bad,name'";
        }
        expect("ddp_agree_status(a failure on rank 1)", ddp_agree_status(ctx, st), want, line);
        if (!ddp_error_shared()) fprintf(stderr, "FAIL rank %d: the agreed error is not shared\n", g_rank);
        expect("ddp_finalize after the agreement", ddp_finalize(ctx), DDP_OK, NULL);
        return g_failed || !ddp_error_shared();
    }
    if (st != DDP_OK) {
        fprintf(stderr, "rank %d failed alone: %s (shared %d)\n", g_rank,
                g_loader_error[0] ? g_loader_error : ddp_last_error(), ddp_error_shared());
        ddp_status fin = ddp_finalize(ctx);
        fprintf(stderr, "rank %d ddp_finalize: %s\n", g_rank, ddp_status_name(fin));
        return 3;
    }
    ddp_metric_row row = {0};
    expect("ddp_metrics_sync", ddp_metrics_sync(mm, &row, NULL), DDP_OK, NULL);
    ddp_metric_row_free(&row);
    ddp_metrics_destroy(mm);
    if (m.destroy) m.destroy(m.self);
    ddp_dataset_close(ds);
    ddp_finalize(ctx);
    return g_failed;
}

/* a model's own metric: under a name of its own it trains (sh/capi_misuse.sh reads its column); under a name
 * ddp_train logs itself it is refused, where it was summed into the trainer's val/loss, which the checkpoint
 * decisions watch. The model's error is each rank's own: the job ends after it */
static int own_metric(ddp_ctx *ctx, const char *trd, const char *vad, const char *work)
{
    ddp_dataset *tr = NULL, *va = NULL;
    expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
    expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
    ddp_model b = user_model(tr);
    g_logger = &b;
    g_log_name = "model/loss";
    ddp_train_config lc = base_cfg(work, "t_log");
    lc.log_per_rank = 1;
    expect("ddp_train(the model logs model/loss)", ddp_train(ctx, &lc, &b, tr, va), DDP_OK, NULL);
    lc.resume = "auto", lc.epochs = 2; /* the files read back keep their columns (sh/capi_misuse.sh) */
    expect("ddp_train(the model logs model/loss, resumed)", ddp_train(ctx, &lc, &b, tr, va), DDP_OK, NULL);
    /* the decisions watching it, NaN: the line blames the model's value, not the data */
    g_log_name = "model/nan";
    lc = base_cfg(work, "t_log_nan");
    lc.monitor = "model/nan";
    expect_api("ddp_train(monitor model/nan, NaN)", ddp_train(ctx, &lc, &b, tr, va), DDP_ERR_NUMERIC,
               "so it can neither rank checkpoints nor stop early (a value the model logged itself; ");
    g_log_name = "val/loss";
    lc = base_cfg(work, "t_log_refused");
    expect_api("ddp_train(the model logs val/loss)", ddp_train(ctx, &lc, &b, tr, va), DDP_ERR_ARG,
               "metric name 'val/loss' is one ddp_train logs itself");
    g_logger = NULL;
    /* every rank prints its line before the first to exit (MPI not finalized: its error is its own) ends the job */
    sleep(2);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    ddp_finalize(ctx);
    return g_failed;
}

int metrics_cases(int argc, char **argv, const char *trd, const char *vad, const char *work)
{
    ddp_ctx *ctx = NULL;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 3;
    }
    g_rank = ddp_topo(ctx)->rank;
    return !strcmp(g_case, "local_failure") ? local_failure(ctx, trd) : own_metric(ctx, trd, vad, work);
}
