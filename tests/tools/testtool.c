/* testtool.c — helpers the CTest scripts drive:
 *   dump DIR              one line per sample: index id label rows fnv1a(rows)   (reader output, any path)
 *   refdump OUT.h5        model, batch, loss, gradients and one AdamW step, for the PyTorch comparison
 *   meta DIR              (mpirun) rank 0 alone reads metadata; each rank maps only the shards it reads
 *   mismatch              (mpirun) rank 0 logs a collective metric the others do not: every rank must get
 *                         the mismatch error naming the metric and ranks, and exit 0 if so; with
 *                         MPIDDP_TEST_FAIL_ALLOC, an error every rank shares (no hang) is enough
 *   zerocount             (mpirun) a metric no rank logged a count for has no value (nan), not 0, in the global
 *                         row and none in the local rows; weighted means stay sum/count over all ranks; a
 *                         decision on it says that no rank logged a value (not a NaN in the data)
 *   adamw TRAIN VAL RUNDIR BETA1 BETA2 EPS EPOCHS
 *                         (mpirun) trains the reference model through the public API (ddp_train) with AdamW's beta1,
 *                         beta2 and eps as given (no CLI option sets them), resuming RUNDIR's last.h5 when it exists
 *   busy TRAIN VAL OUT [RESUME]
 *                         ddp_train into OUT, which holds a run (run.json), as a C-API program: prints the refusal
 *                         (rank 0, stdout), whose line names ddp_train_config's fields; exit 0 if DDP_ERR_BUSY
 */
#include "io/dataset.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/metrics.h"
#include "mpiddp.h"
#include "tests/unit/test_data.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAILF(...)                    \
    do {                              \
        fprintf(stderr, __VA_ARGS__); \
        fputc('\n', stderr);          \
        return 1;                     \
    } while (0)

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
    return h;
}

static int do_dump(ddp_ctx *ctx, const char *dir)
{
    ddp_dataset *ds;
    if (ddp_dataset_open(ctx, dir, &ds) != DDP_OK) FAILF("%s", ddp_last_error());
    const ddp_dataset_info *in = ddp_dataset_get_info(ds);
    float *scratch = malloc((size_t)(in->max_sample_rows * in->dim) * sizeof(float));
    for (int64_t i = 0; i < in->num_samples; i++) {
        const float *rows;
        int64_t nr, lab, id;
        if (ddp_dataset_sample(ds, i, scratch, &rows, &nr, &lab, &id) != DDP_OK) FAILF("%s", ddp_last_error());
        printf("%lld %lld %lld %lld %016llx\n", (long long)i, (long long)id, (long long)lab, (long long)nr,
               (unsigned long long)fnv(rows, (size_t)(nr * in->dim) * sizeof(float)));
    }
    free(scratch);
    ddp_dataset_close(ds);
    return 0;
}

static void put(hid_t f, const char *name, hid_t mt, hid_t ft, int rank, hsize_t d0, hsize_t d1, const void *data)
{
    hsize_t dims[2] = {d0, d1};
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(sp);
}

static int do_refdump(ddp_ctx *ctx, const char *out)
{
    enum { D = 6, H = 8, C = 4, B = 5 };
    const int64_t off[B + 1] = {0, 3, 4, 9, 11, 17}, lab[B] = {1, 3, 0, 2, 1};
    int64_t R = off[B];
    float x[17 * D];
    uint64_t s = 77;
    for (int i = 0; i < R * D; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
    }
    ddp_model m;
    if (ddp_refmodel_create(ctx, DDP_DEVICE_CPU, D, H, C, R, B, &m) != DDP_OK) FAILF("%s", ddp_last_error());
    int64_t n = ddp_model_num_params(&m);
    float *p0 = calloc((size_t)n, 4), *p1 = calloc((size_t)n, 4), *g = calloc((size_t)n, 4), *mm = calloc((size_t)n, 4),
          *vv = calloc((size_t)n, 4), losses[B];
    m.init(m.self, p0, 5);
    memcpy(p1, p0, (size_t)n * 4);
    uint8_t pad[B] = {0};
    int64_t ids[B] = {0};
    ddp_batch b = {
        .nsamples = B, .nrows = R, .dim = D, .offsets = off, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    ddp_forward_out o = {.loss = losses};
    if (m.train_step(m.self, &b, p0, g, &o, NULL, NULL) != DDP_OK) FAILF("%s", ddp_last_error());
    ddp_backend *be;
    ddp_ctx_backend(ctx, DDP_DEVICE_CPU, &be);
    /* step 1 with gradients averaged over the batch, then step 2 with the same gradients */
    double lr = 1e-2, wd = 0.01;
    for (int t = 1; t <= 2; t++) {
        ddp_adamw_args a = test_adamw_step(lr, wd, t, 1.0f / B);
        be->adamw(be, p1, g, mm, vv, n, &a);
    }
    hid_t f = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) FAILF("cannot create %s", out);
    put(f, "x", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, (hsize_t)R, D, x);
    put(f, "offsets", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, B + 1, 0, off);
    put(f, "labels", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, B, 0, lab);
    put(f, "losses", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 1, B, 0, losses);
    put(f, "params0", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 1, (hsize_t)n, 0, p0);
    put(f, "grad_sum", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 1, (hsize_t)n, 0, g);
    put(f, "params2", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 1, (hsize_t)n, 0, p1);
    int64_t dims[3] = {D, H, C};
    put(f, "dims", H5T_NATIVE_INT64, H5T_STD_I64LE, 1, 3, 0, dims);
    double hp[2] = {lr, wd};
    put(f, "lr_wd", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 1, 2, 0, hp);
    H5Fclose(f);
    free(p0), free(p1), free(g), free(mm), free(vv);
    m.destroy(m.self);
    return 0;
}

static int do_meta(ddp_ctx *ctx, const char *dir)
{
    ddp_dataset *ds;
    if (ddp_dataset_open(ctx, dir, &ds) != DDP_OK) FAILF("%s", ddp_last_error());
    const ddp_topology *t = ddp_topo(ctx);
    int64_t shard = t->rank % ds->nshards, first = ds->shards[shard].meta.first;
    float *scratch = malloc((size_t)(ds->info.max_sample_rows * ds->info.dim) * sizeof(float));
    for (int64_t i = 0; i < ds->shards[shard].meta.n; i++) {
        const float *rows;
        int64_t nr, lab, id;
        if (ddp_dataset_sample(ds, first + i, scratch, &rows, &nr, &lab, &id) != DDP_OK) FAILF("%s", ddp_last_error());
    }
    free(scratch);
    ddp_io_counters *c = ddp_io_counters_get();
    long long mine[4] = {(long long)c->validated, (long long)c->h5_opens, (long long)c->shards_mapped, 0};
    for (int64_t k = 0; k < ds->nshards; k++) mine[3] += ds->shards[k].opened;
    long long all[4 * 64];
    MPI_Gather(mine, 4, MPI_LONG_LONG, all, 4, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    int bad = 0;
    if (t->rank == 0)
        for (int r = 0; r < t->size && r < 64; r++) {
            /* start-up validation is spread (rank r: shards r, r + W, ...), none when a fresh manifest was used */
            long long want = ds->manifest_fresh == ds->nshards ? 0
                             : ds->nshards > r                 ? (ds->nshards - r + t->size - 1) / t->size
                                                               : 0;
            long long *a = all + 4 * r;
            printf("rank %d: shards validated %lld (want %lld), H5Fopen calls %lld (want 0: contiguous shards are "
                   "mapped), "
                   "shards mapped %lld, shards opened %lld (want 1)\n",
                   r, a[0], want, a[1], a[2], a[3]);
            bad |= a[0] != want || a[1] != 0 || a[2] != 1 || a[3] != 1;
        }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    ddp_dataset_close(ds);
    return bad;
}

static int do_mismatch(ddp_ctx *ctx)
{
    const ddp_topology *t = ddp_topo(ctx);
    /* MPIDDP_TEST_FAIL_ALLOC set (the sweep of mpi_checks.sh): one allocation fails on one rank; every rank must
     * then get an error shared by all (no hang), and the ranks stay in step for the next sync */
    int sweep = getenv("MPIDDP_TEST_FAIL_ALLOC") != NULL;
    ddp_metrics *m = NULL;
    if (ddp_agree_status(ctx, ddp_metrics_create(ctx, &m)) != DDP_OK) return sweep && ddp_error_shared() ? 0 : 1;
    ddp_log(m, "train/loss", 1.0, 1.0);
    if (t->rank == 0)
        ddp_log(m, "val/only_rank0", 2.0, 1.0); /* the Lightning bug: a synced log inside `if rank == 0` */
    ddp_log_rank0(m, "lr", 0.1);                /* fine: rank-0-only values never join a collective */
    ddp_metric_row g = {0};
    ddp_status st = ddp_metrics_sync(m, &g, NULL);
    int ok = st == DDP_ERR_MISMATCH && strstr(ddp_last_error(), "val/only_rank0") &&
             strstr(ddp_last_error(), "rank(s) 0 ") && ddp_error_shared();
    if (sweep) ok = st != DDP_OK && ddp_error_shared();
    if (t->rank == 0) printf("rank 0 got: %s\n", ddp_last_error());
    if (!ok)
        fprintf(stderr, "rank %d: expected the mismatch error, got status %d: %s\n", t->rank, st, ddp_last_error());
    /* and a consistent set syncs fine afterwards */
    ddp_log(m, "train/loss", (double)t->rank, 1.0);
    st = ddp_metrics_sync(m, &g, NULL);
    double want = (t->size - 1) / 2.0;
    if (sweep && st != DDP_OK) { /* an allocation of this sync failed: agreed as well */
        if (!ddp_error_shared()) ok = 0;
    } else if (st != DDP_OK || g.n < 1 || fabs(g.vals[ddp_row_find(&g, "train/loss")] - want) > 1e-12) {
        fprintf(stderr, "rank %d: consistent sync failed: %s\n", t->rank, ddp_last_error());
        ok = 0;
    }
    ddp_metric_row_free(&g);
    ddp_metrics_destroy(m);
    return ok ? 0 : 1;
}

static int do_zerocount(ddp_ctx *ctx)
{
    const ddp_topology *t = ddp_topo(ctx);
    ddp_metrics *m = NULL;
    if (ddp_metrics_create(ctx, &m) != DDP_OK) FAILF("metrics: %s", ddp_last_error());
    ddp_log(m, "val/none", 0.0, 0.0);                                    /* no rank has a sample */
    ddp_log(m, "val/some", t->rank == 0 ? 0.0 : 3.0 * t->rank, t->rank); /* rank 0 has none */
    ddp_metric_row g = {0}, l = {0};
    ddp_status st = ddp_metrics_sync(m, &g, &l);
    int ok = st == DDP_OK, gn = ddp_row_find(&g, "val/none"), gs = ddp_row_find(&g, "val/some");
    double want = t->size > 1 ? 3.0 : NAN; /* sum 3 r / sum r over ranks 1..W-1 */
    if (!ok || gn < 0 || !isnan(g.vals[gn])) {
        fprintf(stderr, "rank %d: val/none: status %d, %s %g (want nan: no rank logged a count)\n", t->rank, st,
                gn < 0 ? "absent" : "value", gn < 0 ? 0.0 : g.vals[gn]);
        ok = 0;
    }
    if (gs < 0 || (isnan(want) ? !isnan(g.vals[gs]) : fabs(g.vals[gs] - want) > 1e-12)) {
        fprintf(stderr, "rank %d: val/some: %g, want %g\n", t->rank, gs < 0 ? -1.0 : g.vals[gs], want);
        ok = 0;
    }
    if (ddp_row_find(&l, "val/none") >= 0 || (ddp_row_find(&l, "val/some") >= 0) != (t->rank != 0)) {
        fprintf(stderr, "rank %d: local row: a metric with a count of 0 here must have no value\n", t->rank);
        ok = 0;
    }
    /* the decision on it (--ckpt-policy reduced) says that no rank logged a value, not that the data held a NaN */
    double cn = ddp_metrics_count(m, "val/none"), cs = ddp_metrics_count(m, "val/some");
    if (cn != 0 || cs != (double)t->size * (t->size - 1) / 2) {
        fprintf(stderr, "rank %d: global counts %g and %g, want 0 and %d\n", t->rank, cn, cs,
                t->size * (t->size - 1) / 2);
        ok = 0;
    }
    ddp_decider d;
    ddp_decider_init(&d, DDP_POLICY_REDUCED, "val/none", 0, 1, 0, 0.0);
    d.monitor_count = cn;
    ddp_decision out;
    st = ddp_decide(ctx, &d, &g, &l, 0, 10, &out);
    if (st != DDP_ERR_NUMERIC || !strstr(ddp_last_error(), "val/none has no value after epoch 0 (step 10): no rank "
                                                           "logged a value for it (its count is 0 on every rank)")) {
        fprintf(stderr, "rank %d: decision on val/none: status %d: %s\n", t->rank, st, ddp_last_error());
        ok = 0;
    }
    ddp_metric_row_free(&g);
    ddp_metric_row_free(&l);
    ddp_metrics_destroy(m);
    return ok ? 0 : 1;
}

static int do_adamw(ddp_ctx *ctx, char **a)
{
    ddp_dataset *tr = NULL, *va = NULL;
    ddp_model model = {0};
    ddp_status st = ddp_dataset_open(ctx, a[0], &tr);
    if (st == DDP_OK) st = ddp_dataset_open(ctx, a[1], &va);
    if (st == DDP_OK) {
        const ddp_dataset_info *in = ddp_dataset_get_info(tr);
        st = ddp_refmodel_create(ctx, DDP_DEVICE_CPU, in->dim, 8, in->num_classes, 16 * in->max_sample_rows, 16,
                                 &model);
    }
    if (st == DDP_OK) {
        ddp_train_config cfg;
        ddp_train_config_default(&cfg);
        cfg.out_dir = a[2];
        cfg.resume = "auto";
        cfg.beta1 = atof(a[3]);
        cfg.beta2 = atof(a[4]);
        cfg.eps = atof(a[5]);
        cfg.epochs = atoi(a[6]);
        cfg.batch_size = 8;
        cfg.progress = 0;
        st = ddp_train(ctx, &cfg, &model, tr, va);
    }
    if (st != DDP_OK && ddp_topo(ctx)->rank == 0) fprintf(stderr, "adamw: %s\n", ddp_last_error());
    if (model.destroy) model.destroy(model.self);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    return st == DDP_OK ? 0 : 1;
}

static int do_busy(ddp_ctx *ctx, const char *trdir, const char *vadir, const char *out, const char *resume)
{
    char mark[4200];
    snprintf(mark, sizeof mark, "%s/run.json", out);
    if (access(mark, F_OK) != 0) FAILF("busy: %s holds no run.json: the run would start", out);
    ddp_train_config cfg; /* the public API only, as a user's program */
    ddp_train_config_default(&cfg);
    cfg.out_dir = out;
    cfg.resume = resume;
    cfg.progress = 0;
    ddp_dataset *tr = NULL, *va = NULL;
    ddp_model model = {0}; /* valid (ddp_train checks its arguments first); the run directory is refused next */
    ddp_status st = ddp_dataset_open(ctx, trdir, &tr);
    if (st == DDP_OK) st = ddp_dataset_open(ctx, vadir, &va);
    if (st == DDP_OK) {
        const ddp_dataset_info *in = ddp_dataset_get_info(tr);
        st = ddp_refmodel_create(ctx, DDP_DEVICE_CPU, in->dim, 8, in->num_classes, 16 * in->max_sample_rows, 16,
                                 &model);
    }
    if (st == DDP_OK) st = ddp_train(ctx, &cfg, &model, tr, va);
    if (ddp_topo(ctx)->rank == 0) printf("%s\n", ddp_last_error());
    if (model.destroy) model.destroy(model.self);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    return st == DDP_ERR_BUSY ? 0 : 1;
}

int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 1;
    int rc = 2;
    if (argc == 3 && !strcmp(argv[1], "dump"))
        rc = do_dump(ctx, argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "refdump"))
        rc = do_refdump(ctx, argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "meta"))
        rc = do_meta(ctx, argv[2]);
    else if (argc == 2 && !strcmp(argv[1], "mismatch"))
        rc = do_mismatch(ctx);
    else if (argc == 2 && !strcmp(argv[1], "zerocount"))
        rc = do_zerocount(ctx);
    else if (argc == 9 && !strcmp(argv[1], "adamw"))
        rc = do_adamw(ctx, argv + 2);
    else if ((argc == 5 || argc == 6) && !strcmp(argv[1], "busy"))
        rc = do_busy(ctx, argv[2], argv[3], argv[4], argc == 6 ? argv[5] : NULL);
    else
        fprintf(stderr, "usage: testtool dump|refdump|meta DIR | mismatch | zerocount | adamw TRAIN VAL RUNDIR BETA1 "
                        "BETA2 EPS EPOCHS | busy TRAIN VAL OUT [RESUME]\n");
    ddp_finalize(ctx);
    return rc;
}
