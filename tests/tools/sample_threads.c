/* sample_threads.c — ddp_dataset_sample as a user program calls it (include/mpiddp.h only), run by
 * sh/sample_threads.sh:
 *   sample_threads threads DIR THREADS ITERS WAVES   WAVES waves of THREADS threads, each wave started after the
 *       last one's threads exited; every thread samples ITERS random indices with its own scratch buffer, checks
 *       each sample (rows, label, id) against the main thread's reading before the threads started, yields, and
 *       checks `rows` again: mpiddp.h keeps them valid until the thread's next ddp_dataset_sample
 *   sample_threads finalized DIR   a sample after ddp_finalize: DDP_ERR_ARG, one line naming DIR; then
 *       ddp_dataset_close
 * Each problem is a line "FAIL rank R ..." on stderr (the first few of each kind); the last line is "done rank R"
 * and the exit status 0 when there was none. */
#include <mpiddp.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ddp_dataset *g_ds;
static int64_t g_n, g_dim, g_max_rows;
static double *g_sum;
static int64_t *g_rows, *g_label, *g_id;
static int g_iters, g_rank;
static int g_bad, g_errs, g_stale;

/* a weighted sum of a sample's values: any row or value out of place changes it */
static double weigh(const float *rows, int64_t nrows)
{
    double s = 0;
    for (int64_t i = 0; i < nrows * g_dim; i++) s += rows[i] * (double)(1 + i % 7);
    return s;
}

static void report(int *count, const char *what, int64_t index, const char *why)
{
    if (__atomic_fetch_add(count, 1, __ATOMIC_RELAXED) < 5)
        fprintf(stderr, "FAIL rank %d sample %lld: %s%s%s\n", g_rank, (long long)index, what, why ? ": " : "",
                why ? why : "");
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1u;
    float *scratch = malloc(sizeof(float) * (size_t)(g_max_rows * g_dim));
    if (!scratch) {
        report(&g_errs, "out of memory", -1, NULL);
        return NULL;
    }
    for (int it = 0; it < g_iters; it++) {
        int64_t i = (int64_t)(rand_r(&seed) % (unsigned)g_n), nr = 0, lab = 0, id = 0;
        const float *rows = NULL;
        ddp_status st = ddp_dataset_sample(g_ds, i, scratch, &rows, &nr, &lab, &id);
        if (st != DDP_OK) {
            report(&g_errs, ddp_status_name(st), i, ddp_last_error());
            continue;
        }
        if (nr != g_rows[i] || lab != g_label[i] || id != g_id[i] || weigh(rows, nr) != g_sum[i]) {
            report(&g_bad, "differs from the main thread's reading", i, NULL);
            continue;
        }
        for (int y = 0; y < 20; y++) sched_yield(); /* others sample meanwhile */
        if (weigh(rows, nr) != g_sum[i]) report(&g_stale, "rows changed before this thread's next call", i, NULL);
    }
    free(scratch);
    return NULL;
}

static int run_threads(const char *dir, int nthreads, int waves)
{
    const ddp_dataset_info *in = ddp_dataset_get_info(g_ds);
    g_n = in->num_samples, g_dim = in->dim, g_max_rows = in->max_sample_rows;
    g_sum = calloc((size_t)g_n, sizeof *g_sum);
    g_rows = calloc((size_t)g_n, sizeof *g_rows);
    g_label = calloc((size_t)g_n, sizeof *g_label);
    g_id = calloc((size_t)g_n, sizeof *g_id);
    float *scratch = malloc(sizeof(float) * (size_t)(g_max_rows * g_dim));
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    if (!g_sum || !g_rows || !g_label || !g_id || !scratch || !t) {
        fprintf(stderr, "FAIL rank %d: out of memory\n", g_rank);
        return 1;
    }
    for (int64_t i = 0; i < g_n; i++) {
        const float *rows;
        ddp_status st = ddp_dataset_sample(g_ds, i, scratch, &rows, &g_rows[i], &g_label[i], &g_id[i]);
        if (st != DDP_OK) {
            fprintf(stderr, "FAIL rank %d %s: sample %lld: %s\n", g_rank, dir, (long long)i, ddp_last_error());
            return 1;
        }
        g_sum[i] = weigh(rows, g_rows[i]);
    }
    for (int w = 0; w < waves; w++) {
        /* a larger stack each wave: glibc cannot reuse an exited thread's stack, so a new thread's pthread_t is
         * not an exited one's (the cache once took a thread for the exited thread it had the id of) */
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, (size_t)(w + 1) << 18);
        int started = 0;
        for (; started < nthreads; started++)
            if (pthread_create(&t[started], &attr, worker, (void *)(uintptr_t)(started + 1000 * w)) != 0) break;
        pthread_attr_destroy(&attr);
        if (started < nthreads) report(&g_errs, "pthread_create failed", -1, NULL);
        for (int k = 0; k < started; k++) pthread_join(t[k], NULL);
    }
    fprintf(stderr, "rank %d: %d waves of %d threads: %d differed, %d changed, %d errors\n", g_rank, waves, nthreads,
            g_bad, g_stale, g_errs);
    free(scratch);
    free(t);
    free(g_sum);
    free(g_rows);
    free(g_label);
    free(g_id);
    return g_bad || g_stale || g_errs;
}

int main(int argc, char **argv)
{
    ddp_ctx *ctx = NULL;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "FAIL ddp_init: %s\n", ddp_last_error());
        return 1;
    }
    g_rank = ddp_topo(ctx)->rank;
    int threads = argc == 6 && strcmp(argv[1], "threads") == 0, finalized = argc == 3 && !strcmp(argv[1], "finalized");
    if (!threads && !finalized) {
        fprintf(stderr, "usage: sample_threads threads DIR THREADS ITERS WAVES | finalized DIR\n");
        ddp_finalize(ctx);
        return 2;
    }
    const char *dir = argv[2];
    if (ddp_dataset_open(ctx, dir, &g_ds) != DDP_OK) {
        fprintf(stderr, "FAIL rank %d open %s: %s\n", g_rank, dir, ddp_last_error());
        ddp_finalize(ctx);
        return 1;
    }
    int failed = 0;
    if (threads) {
        g_iters = atoi(argv[4]);
        failed = run_threads(dir, atoi(argv[3]), atoi(argv[5]));
        ddp_dataset_close(g_ds);
        ddp_status st = ddp_finalize(ctx);
        if (st != DDP_OK) fprintf(stderr, "FAIL rank %d ddp_finalize: %s\n", g_rank, ddp_last_error());
        failed |= st != DDP_OK;
    } else {
        float scratch[4096];
        const float *rows;
        int64_t nr, lab, id;
        ddp_status st = ddp_dataset_sample(g_ds, 0, scratch, &rows, &nr, &lab, &id); /* a shard open, HDF5 held */
        if (st != DDP_OK) fprintf(stderr, "FAIL rank %d sample before ddp_finalize: %s\n", g_rank, ddp_last_error());
        failed |= st != DDP_OK;
        st = ddp_finalize(ctx);
        if (st != DDP_OK) fprintf(stderr, "FAIL rank %d ddp_finalize: %s\n", g_rank, ddp_last_error());
        failed |= st != DDP_OK;
        st = ddp_dataset_sample(g_ds, 1, scratch, &rows, &nr, &lab, &id);
        char want[4200];
        snprintf(want, sizeof want, "ddp_dataset_sample: %s's ctx was finalized (ddp_finalize): ", dir);
        const char *e = ddp_last_error();
        if (st != DDP_ERR_ARG || strncmp(e, want, strlen(want)) != 0 || strchr(e, '\n')) {
            fprintf(stderr, "FAIL rank %d sample after ddp_finalize: %s: %s\n", g_rank, ddp_status_name(st), e);
            failed = 1;
        }
        ddp_dataset_close(g_ds);
    }
    fprintf(stderr, "done rank %d\n", g_rank);
    return failed;
}
