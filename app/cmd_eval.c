/* cmd_eval.c — `mpiddp eval`: loads a checkpoint (rank 0 reads, parameters are broadcast), evaluates the
 * reference model exactly over a dataset on all ranks, prints `val/loss=… val/acc=… val/macro_f1=…` and
 * with --out writes sample_id,label,pred,prob with one row per sample, gathered to rank 0. */
#include "cli.h"

#include "io/dataset.h"
#include "io/loader.h"
#include "io/writer.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cpu/backend_cpu_bf16.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/train/checkpoint.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/train/evaluate.h"
#include "mpi_ddp/train/metrics.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CSV_HEADER "sample_id,label,pred,prob"

static ddp_status write_predictions(const char *path, const ddp_eval_acc *a)
{
    char tmp[4200]; /* a name of this process, created anew: a file of that name is never replaced */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    /* registered once it is this process's file (a fatal signal: the handler removes it, app/stop_signals.c): a file
     * of that name left by another process is never removed */
    if (fd >= 0) ddp_register_temporary(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        ddp_status st = ddp_set_error(DDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd), remove(tmp);
        ddp_register_temporary(NULL);
        return st;
    }
    fprintf(f, CSV_HEADER "\n");
    char prob[40];
    for (int64_t i = 0; i < a->n; i++)
        fprintf(f, "%lld,%lld,%lld,%s\n", (long long)a->ids[i], (long long)a->labels[i], (long long)a->preds[i],
                ddp_fmt_value(prob, sizeof prob, a->probs[i], 7));
    int bad = fflush(f) != 0 || ferror(f), err = bad ? errno : 0;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        remove(tmp);
        ddp_register_temporary(NULL);
        return ddp_set_error(DDP_ERR_IO, "%s: write failed: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        ddp_register_temporary(NULL);
        return ddp_set_error(DDP_ERR_IO, "%s: cannot put the predictions there: %s", path, strerror(err));
    }
    ddp_register_temporary(NULL); /* renamed: a signal now leaves the complete file */
    return DDP_OK;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* --out must not replace an input (the checkpoint, a file of the dataset: compared by device and inode, so links
 * and other spellings of the path count), a directory, or a file mpiddp did not write (an existing non-empty file
 * must start with the CSV header); nor be a file in the --data directory (a new *.h5, lock or manifest there would
 * change the dataset for every later command; the directories are compared by device and inode too); and its
 * directory must take the file (the temporary and the rename) now, not after the whole evaluation. DDP_ERR_ARG with
 * one line otherwise. */
static ddp_status check_out(const char *out, const char *ckpt, const char *data)
{
    struct stat so, sx, sd;
    size_t len = strlen(out);
    int exists = stat(out, &so) == 0;
    if (!exists) {
        if (errno != ENOENT) return ddp_set_error(DDP_ERR_ARG, "--out %s: %s", out, strerror(errno));
        if (len && out[len - 1] == '/')
            return ddp_set_error(DDP_ERR_ARG, "--out %s: names a directory, not a file", out);
    } else {
        if (S_ISDIR(so.st_mode))
            return ddp_set_error(DDP_ERR_ARG, "--out %s: is a directory (give a file name, e.g. %s%spredictions.csv)",
                                 out, out, len && out[len - 1] == '/' ? "" : "/");
        if (stat(ckpt, &sx) == 0 && same_file(&so, &sx))
            return ddp_set_error(DDP_ERR_ARG, "--out %s: is the checkpoint --ckpt %s; refusing to replace it", out,
                                 ckpt);
        DIR *d = opendir(data);
        struct dirent *e;
        char p[8400];
        while (d && (e = readdir(d))) {
            snprintf(p, sizeof p, "%s/%s", data, e->d_name);
            if (e->d_name[0] != '.' && stat(p, &sx) == 0 && same_file(&so, &sx)) {
                closedir(d);
                return ddp_set_error(DDP_ERR_ARG, "--out %s: is %s of the dataset --data %s; refusing to replace it",
                                     out, p, data);
            }
        }
        if (d) closedir(d);
        if (!S_ISREG(so.st_mode)) return ddp_set_error(DDP_ERR_ARG, "--out %s: exists and is not a regular file", out);
    }
    /* the directory the file is renamed into, as spelled (a link named --out is replaced, not its target) */
    char dir[4200];
    const char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    if (stat(dir, &sd) != 0) return ddp_set_error(DDP_ERR_ARG, "--out %s: directory %s: %s", out, dir, strerror(errno));
    if (!S_ISDIR(sd.st_mode)) return ddp_set_error(DDP_ERR_ARG, "--out %s: %s is not a directory", out, dir);
    if (stat(data, &sx) == 0 && same_file(&sd, &sx))
        return ddp_set_error(DDP_ERR_ARG,
                             "--out %s: is in the dataset directory --data %s; refusing to write there (a file "
                             "there changes the dataset: choose a file outside it)",
                             out, data);
    if (access(dir, W_OK | X_OK) != 0)
        return ddp_set_error(DDP_ERR_ARG, "--out %s: cannot create files in %s: %s", out, dir, strerror(errno));
    if (!exists || so.st_size == 0) return DDP_OK;
    char head[sizeof CSV_HEADER] = "";
    FILE *f = fopen(out, "r");
    size_t got = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    head[got] = 0;
    if (strcmp(head, CSV_HEADER) != 0)
        return ddp_set_error(
            DDP_ERR_ARG,
            "--out %s: exists and is not a predictions CSV of mpiddp eval (it does not start with " CSV_HEADER
            "); refusing to replace it (remove it, or choose another name)",
            out);
    return DDP_OK;
}

static const char *g_manifest; /* --manifest: the dataset's manifest (NULL: DIR/mpiddp-manifest.bin when present) */

static ddp_status evaluate(ddp_ctx *ctx, const char *ckpt, const char *data, const char *out, int batch,
                           int64_t batch_rows, ddp_device dev, ddp_precision precision)
{
    ddp_model_config mc; /* the checkpoint alone says which model it holds */
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_ckpt_peek_model(ckpt, &mc);
    DDP_CHECK(ddp_agree_status(ctx, st));
    MPI_CHECK(MPI_Bcast(&mc, (int)sizeof mc, MPI_BYTE, 0, ctx->world));
    int64_t dims[3] = {mc.dim, mc.hidden, mc.classes};
    ddp_dataset *ds = NULL;
    DDP_CHECK(ddp_dataset_open_with(ctx, data, g_manifest, &ds));
    if (ds->notice[0] && ctx->topo.rank == 0)
        fprintf(stderr, "mpiddp eval: notice: %s\n", ds->notice); /* manifest stale or ignored */
    const ddp_dataset_info *in = ddp_dataset_get_info(ds);
    ddp_model m = {0};
    ddp_sampler sm = {0};
    ddp_loader *ld = NULL;
    ddp_eval_acc a = {0}, all = {0};
    float *host = NULL;
    void *params = NULL;
    int32_t *lens = NULL;
    ddp_backend *be = NULL;
    if (in->dim != dims[0] || in->num_classes != dims[2]) { /* every rank sees the same facts */
        st = ddp_agree_status(
            ctx, ddp_set_error(
                     DDP_ERR_FORMAT, "%s has D=%lld and %lld classes but %s was trained on D=%lld, %lld classes", data,
                     (long long)in->dim, (long long)in->num_classes, ckpt, (long long)dims[0], (long long)dims[2]));
        goto done;
    }
    if (mc.kind == DDP_MODEL_TRANSFORMER)
        DDP_TRY(ddp_dataset_check_max_rows(ctx, ds, mc.max_positions, "the model's max_positions"));
    mc.precision = precision; /* bf16: GEMM-only activations in bf16, as in training */
    if (batch_rows > 0) DDP_TRY(ddp_dataset_check_max_rows(ctx, ds, batch_rows, "--batch-rows"));
    DDP_TRY(ddp_agree_status(ctx, ddp_sampler_init(&sm, DDP_SAMPLE_SEQUENTIAL, in->num_samples, ctx->topo.size,
                                                   ctx->topo.rank, 0, 0, batch, NULL, 0, ctx->cli_names)));
    if (batch_rows > 0) {
        double sq = ddp_model_cost_sq(&mc);
        DDP_TRY(ddp_dataset_row_counts(ctx, ds, &lens));
        DDP_TRY(ddp_agree_status(ctx, ddp_sampler_set_budget(&sm, batch_rows, 1, lens, in->max_sample_rows, sq)));
    }
    /* the buffers hold the largest batch the sampler makes, which a batch past the set's size does not change: a
     * rank's share of the set (token budgets: a rank's share is at most the mean load plus one sample, and never
     * more than the set's rows) */
    mc.max_batch_samples = sm.max_samples;
    mc.max_batch_rows = batch_rows > 0 ? sm.max_rows : sm.max_samples * in->max_sample_rows;
    DDP_TRY(ddp_agree_status(ctx, ddp_model_create(ctx, dev, &mc, &m)));
    int64_t n = ddp_model_num_params(&m);
    host = ddp_calloc((size_t)n, sizeof *host);
    if (!host) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    ddp_ckpt_state cs;
    st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_ckpt_read(ckpt, &m, NULL, host, NULL, NULL, &cs, ctx->cli_names);
    if (ctx->topo.rank == 0 && st == DDP_OK && cs.no_checksums) /* the library reports it; one notice line */
        fprintf(stderr,
                "mpiddp eval: notice: %s has no checksums (written before mpiddp verified checkpoints): loaded "
                "unverified\n",
                ckpt);
    if (ctx->topo.rank == 0 && st == DDP_OK) { /* eval needs the parameters only */
        free(cs.best_local);
        free(cs.best_local_es);
        free(cs.topk_json);
    }
    DDP_TRY(ddp_agree_status(ctx, st));
    for (int64_t lo = 0; lo < n; lo += 1 << 28) {
        int rc = MPI_Bcast(host + lo, (int)(n - lo < (1 << 28) ? n - lo : (1 << 28)), MPI_FLOAT, 0, ctx->world);
        if (rc != MPI_SUCCESS)
            DDP_FAIL(ddp_mpi_error(rc, "MPI_Bcast(params)", __FILE__, __LINE__), "%s", ddp_last_error());
    }
    DDP_TRY(ddp_ctx_backend(ctx, m.device, &be));
    DDP_TRY(ddp_agree_status(ctx, ddp_backend_set_precision(be, precision))); /* any precision, whatever trained it */
    DDP_TRY(be->alloc(be, &params, (size_t)n * sizeof(float)));
    DDP_TRY(be->upload(be, params, host, (size_t)n * sizeof(float)));
    DDP_TRY(ddp_agree_status(ctx, ddp_loader_create(ds, &sm, 1, &ld)));
    DDP_TRY(ddp_agree_status(ctx, ddp_eval_acc_init(&a, dims[2], sm.max_samples, out != NULL)));
    DDP_TRY(ddp_loader_start_epoch(ld, 0, 0));
    DDP_TRY(ddp_eval_run(&m, params, ld, sm.steps, &a, NULL, NULL));
    double sums[2] = {a.loss_sum, (double)a.count};
    int rc = MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, ctx->world);
    if (rc != MPI_SUCCESS)
        DDP_FAIL(ddp_mpi_error(rc, "MPI_Allreduce(eval)", __FILE__, __LINE__), "%s", ddp_last_error());
    DDP_TRY(ddp_eval_reduce_confusion(ctx, &a));
    double acc, f1;
    ddp_confusion_metrics(a.conf, a.C, &acc, &f1);
    if (out) {
        if (ctx->topo.rank == 0) all.C = a.C;
        DDP_TRY(ddp_eval_gather(ctx, &a, &all));
        st = ctx->topo.rank == 0 ? write_predictions(out, &all) : DDP_OK;
        DDP_TRY(ddp_agree_status(ctx, st));
    }
    if (ctx->topo.rank == 0) { /* nan and inf written as metrics.csv writes them */
        char v[3][40];
        printf("val/loss=%s val/acc=%s val/macro_f1=%s\n",
               ddp_fmt_value(v[0], sizeof v[0], sums[1] > 0 ? sums[0] / sums[1] : 0.0, 9),
               ddp_fmt_value(v[1], sizeof v[1], acc, 9), ddp_fmt_value(v[2], sizeof v[2], f1, 9));
    }
done:
    if (be) (void)ddp_backend_set_precision(be, DDP_PRECISION_FP32);
    if (params) be->release(be, params);
    free(host);
    ddp_eval_acc_free(&a);
    ddp_eval_acc_free(&all);
    ddp_loader_destroy(ld);
    ddp_sampler_free(&sm);
    free(lens);
    if (m.destroy) m.destroy(m.self);
    ddp_dataset_close(ds);
    return st;
}

int cmd_eval(ddp_ctx *ctx, int argc, char **argv)
{
    const char *ckpt = NULL, *data = NULL, *out = NULL;
    int batch = 256, device = 0, precision = 0;
    int64_t batch_rows = 0;
    cli_opt opts[] = {
        {"ckpt", OPT_STR, &ckpt, NULL, 0, 0, "checkpoint file (required)", 0},
        {"data", OPT_STR, &data, NULL, 0, 0, "dataset directory (required)", 0},
        {"manifest", OPT_STR, &g_manifest, NULL, 0, 0,
         "manifest of --data (default DIR/mpiddp-manifest.bin when present; none: ignore it)", 0},
        {"out", OPT_STR, &out, NULL, 0, 0, "write predictions CSV: sample_id,label,pred,prob", 0},
        {"batch-size", OPT_INT, &batch, NULL, 1, 1e7, "samples per rank per step (default 256)", 0},
        {"batch-rows", OPT_I64, &batch_rows, NULL, 1, 1e12,
         "token budget instead: about N rows per rank per step, split by cost", 0},
        {"device", OPT_CHOICE, &device, "auto|cpu|cuda", 0, 0, "compute device (default auto)", 0},
        {"precision", OPT_CHOICE, &precision, "fp32|tf32|bf16", 0, 0,
         "GEMM arithmetic: fp32 (default, exact), tf32 (--device cuda) or bf16 operands with fp32 accumulation", 0},
    };
    const cli_cmd cmd = {
        "eval",
        "--ckpt FILE --data DIR [--out FILE.csv] [--batch-size N | --batch-rows N] [--device auto|cpu|cuda] "
        "[--precision fp32|tf32|bf16]",
        "Evaluates a checkpoint exactly over a dataset (every sample once, at any number of ranks) and prints\n"
        "val/loss, val/acc and val/macro_f1; --out writes one prediction row per sample.",
        opts, (int)(sizeof opts / sizeof opts[0])};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, NULL, 0, NULL);
    if (done >= 0) return done;
    const char *const required[] = {"--ckpt FILE", "--data DIR"};
    int rc = cli_require(ctx, "eval", 2, required, (const int[]){!!ckpt, !!data});
    if (rc >= 0) return rc;
    if (cli_seen(opts, (int)(sizeof opts / sizeof opts[0]), "batch-size") &&
        cli_seen(opts, (int)(sizeof opts / sizeof opts[0]), "batch-rows")) /* as train: --batch-rows won silently */
        return cli_usage(ctx, "eval",
                         "--batch-size and --batch-rows: give one (samples per rank per step, or a token "
                         "budget per rank per step)");
    if (out &&
        ddp_agree_status(ctx, cli_rank0(ctx) ? check_out(out, ckpt, data) : DDP_OK) != DDP_OK) /* rank 0 writes it */
        return cli_usage(ctx, "eval", "%s", ddp_last_error());
    ddp_device want = device == 1 ? DDP_DEVICE_CPU : device == 2 ? DDP_DEVICE_CUDA : DDP_DEVICE_AUTO, got;
    ddp_status st = ddp_select_device_all(ctx, want, &got, NULL);
    if (st == DDP_OK && got == DDP_DEVICE_CPU && precision == DDP_PRECISION_TF32)
        return cli_usage(ctx, "eval",
                         "--precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)");
    const char *note = st == DDP_OK && got == DDP_DEVICE_CPU && precision == DDP_PRECISION_BF16 ? ddp_cpu_bf16_notice()
                                                                                                : NULL;
    if (note && ctx->topo.rank == 0) fprintf(stderr, "mpiddp eval: notice: %s\n", note); /* how bf16 runs on this CPU */
    if (st == DDP_OK) { /* --data's shared lock for the run: no synth or pack writes into it meanwhile */
        ddp_out_lock lk;
        st = ddp_out_lock_take(ctx, data, 0, "eval", &lk);
        if (st == DDP_OK) st = evaluate(ctx, ckpt, data, out, batch, batch_rows, got, (ddp_precision)precision);
        ddp_out_lock_release(&lk);
    }
    if (st != DDP_OK) return cli_fail(ctx, "eval", st);
    return 0;
}
