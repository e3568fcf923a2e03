/* capi_misuse.c — a user program that misuses the public API (include/mpiddp.h only): NULL pointers, bad sizes and
 * config values (also on one rank only), calls out of order. Each must return its status with one line naming what
 * is wrong, agreed across the ranks where the call is collective; never crash, hang, abort or print. Run by
 * sh/capi_misuse.sh:  capi_misuse CASE TRAIN_DIR VAL_DIR WORK_DIR  (exit 0: every check of CASE held); case scratch,
 * which needs shards read through HDF5 (h5py-written, chunked), by sh/reader_variants.sh. */
#include "capi_misuse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int g_rank, g_failed;
const char *g_case;

/* st must be want, the error one non-empty line holding `has` (NULL: any) */
void expect(const char *what, ddp_status st, ddp_status want, const char *has)
{
    const char *e = ddp_last_error();
    int ok = st == want;
    if (want != DDP_OK)
        ok = ok && e && *e && !strchr(e, '\n') && strcmp(e, "no error") != 0 && (!has || strstr(e, has));
    fprintf(stderr, "%s rank %d %s: %s (%s)%s%s\n", ok ? "ok" : "FAIL", g_rank, what, ddp_status_name(st),
            ddp_status_name(want), want != DDP_OK ? ": " : "", want != DDP_OK ? e : "");
    if (!ok) g_failed = 1;
}

/* expect, and the line names ddp_train_config's fields (has: "cfg.lr = -0.1"), never a CLI option (--lr) */
void expect_api(const char *what, ddp_status st, ddp_status want, const char *has)
{
    expect(what, st, want, has);
    const char *e = ddp_last_error();
    if (e && strstr(e, "--")) {
        fprintf(stderr, "FAIL rank %d %s: names a CLI option: %s\n", g_rank, what, e);
        g_failed = 1;
    }
}

/* expect_api, and the line is exactly `line` */
void expect_is(const char *what, ddp_status st, ddp_status want, const char *line)
{
    expect_api(what, st, want, NULL);
    const char *e = ddp_last_error();
    if (!e || strcmp(e, line)) {
        fprintf(stderr, "FAIL rank %d %s: the line is not\n  %s\n", g_rank, what, line);
        g_failed = 1;
    }
}

/* the user model of examples/user_model.c in brief: one linear layer on the first row */
typedef struct {
    int64_t D, C;
    ddp_tensor_spec spec[2];
} lin;
static ddp_status lin_init(void *self, float *p, uint64_t seed)
{
    lin *m = self;
    for (int64_t i = 0; i < m->C * m->D + m->C; i++) p[i] = 0.01f * (float)((i + (int64_t)seed) % 7);
    return DDP_OK;
}
static ddp_status lin_fwd(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    lin *m = self;
    out->loss_sum = 0;
    for (int64_t s = 0; s < b->nsamples; s++) {
        if (out->loss) out->loss[s] = 1;
        if (out->pred) out->pred[s] = 0;
        if (out->prob) out->prob[s] = 0.5f;
        out->loss_sum += 1 + 0 * P[0];
    }
    out->count = b->nsamples;
    (void)m;
    return DDP_OK;
}
const ddp_model *g_logger; /* set: lin_eval also logs g_log_name through the model's metrics */
const char *g_log_name;
static ddp_status lin_eval(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    if (g_logger) { /* 1 per sample, padding duplicates left out as the trainer's own metrics leave them */
        int64_t n = 0;
        for (int64_t s = 0; s < b->nsamples; s++) n += !b->is_pad[s];
        double sum = strcmp(g_log_name, "model/nan") ? (double)n : NAN;
        ddp_status st = ddp_log(g_logger->metrics, g_log_name, sum, (double)n);
        if (st != DDP_OK) return st;
    }
    return lin_fwd(self, b, P, out);
}
static ddp_status lin_train(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                            ddp_grad_ready_fn ready, void *arg)
{
    (void)G;
    (void)ready;
    (void)arg;
    return lin_fwd(self, b, P, out);
}
static lin g_lin;
ddp_model user_model(const ddp_dataset *tr)
{
    g_lin.D = ddp_dataset_get_info(tr)->dim;
    g_lin.C = ddp_dataset_get_info(tr)->num_classes;
    g_lin.spec[0] = (ddp_tensor_spec){.name = "fc.weight", .ndim = 2, .shape = {g_lin.C, g_lin.D}};
    g_lin.spec[1] = (ddp_tensor_spec){.name = "fc.bias", .ndim = 1, .shape = {g_lin.C}};
    return (ddp_model){.name = "misuse",
                       .ntensors = 2,
                       .tensors = g_lin.spec,
                       .num_classes = (int)g_lin.C,
                       .device = DDP_DEVICE_CPU,
                       .self = &g_lin,
                       .init = lin_init,
                       .train_step = lin_train,
                       .eval_step = lin_eval};
}

ddp_train_config base_cfg(const char *work, const char *name)
{
    static char outs[8][4096]; /* the last eight configurations' directories stay valid */
    static int k;
    char *out = outs[k++ % 8];
    snprintf(out, 4096, "%s/%s", work, name);
    ddp_train_config c;
    ddp_train_config_default(&c);
    c.out_dir = out;
    c.epochs = 1;
    c.batch_size = 8;
    c.progress = 0;
    return c;
}

/* ddp_train of a built-in model of configuration mc (epochs 1) into WORK/name, resume NULL or "auto" */
ddp_status train_builtin(ddp_ctx *ctx, const char *work, const char *name, const ddp_model_config *mc,
                         const char *resume, ddp_precision precision, ddp_dataset *tr, ddp_dataset *va)
{
    ddp_model m;
    ddp_status st = ddp_model_create(ctx, DDP_DEVICE_CPU, mc, &m);
    if (st != DDP_OK) return st;
    ddp_train_config cfg = base_cfg(work, name);
    cfg.model_config = mc;
    cfg.resume = resume;
    cfg.precision = precision;
    st = ddp_train(ctx, &cfg, &m, tr, va);
    if (m.destroy) m.destroy(m.self);
    return st;
}


int main(int argc, char **argv)
{
    if (argc != 5) return 2;
    g_case = argv[1];
    const char *trd = argv[2], *vad = argv[3], *work = argv[4];
    const char *c = g_case;
    if (!strcmp(c, "finalize_twice") || !strcmp(c, "timeout") || !strcmp(c, "timeout_after_train"))
        return comm_cases(argc, argv, trd, vad, work);
    if (is_io_case(c)) return io_cases(argc, argv, trd, vad, work);
    if (is_metrics_case(c)) return metrics_cases(argc, argv, trd, vad, work);
    /* before init: calls that need a context refuse a NULL one */
    if (!strcmp(c, "before_init")) {
        ddp_dataset *ds = (ddp_dataset *)1;
        int all = 0;
        expect("ddp_init(ctx NULL)", ddp_init(&argc, &argv, NULL), DDP_ERR_ARG, "ctx");
        expect("ddp_dataset_open(ctx NULL)", ddp_dataset_open(NULL, trd, &ds), DDP_ERR_ARG, "ctx");
        expect("ddp_all_ok(ctx NULL)", ddp_all_ok(NULL, 1, &all), DDP_ERR_ARG, "ctx");
        expect("ddp_agree_status(ctx NULL)", ddp_agree_status(NULL, DDP_OK), DDP_ERR_ARG, "ctx");
        ddp_metrics *m = NULL;
        expect("ddp_metrics_create(ctx NULL)", ddp_metrics_create(NULL, &m), DDP_ERR_ARG, "ctx");
        ddp_device got;
        expect("ddp_select_device(ctx NULL)", ddp_select_device(NULL, DDP_DEVICE_CPU, &got, NULL), DDP_ERR_ARG, "ctx");
        ddp_train_config cfg = base_cfg(work, "r");
        expect("ddp_train(ctx NULL)", ddp_train(NULL, &cfg, NULL, NULL, NULL), DDP_ERR_ARG, "ctx");
        if (ddp_topo(NULL) != NULL) expect("ddp_topo(NULL) is NULL", DDP_ERR_INTERNAL, DDP_OK, NULL);
        ddp_finalize(NULL);
        ddp_dataset_close(NULL);
        ddp_metrics_destroy(NULL);
        ddp_metric_row_free(NULL);
        return g_failed;
    }
    ddp_ctx *ctx = NULL;
    if (!strcmp(c, "after_finalize")) { /* MPI cannot start twice: a status, not an abort */
        expect("ddp_init", ddp_init(&argc, &argv, &ctx), DDP_OK, NULL);
        g_rank = ddp_topo(ctx)->rank;
        ddp_finalize(ctx);
        ctx = NULL;
        expect("ddp_init after ddp_finalize", ddp_init(&argc, &argv, &ctx), DDP_ERR_ARG, "finalize");
        if (ctx) expect("ddp_init after ddp_finalize leaves ctx NULL", DDP_ERR_INTERNAL, DDP_OK, NULL);
        return g_failed;
    }
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 3;
    }
    g_rank = ddp_topo(ctx)->rank;
    int size = ddp_topo(ctx)->size;
    ddp_dataset *tr = NULL, *va = NULL;
    if (!strcmp(c, "context")) {
        int all = 0;
        ddp_device got = DDP_DEVICE_CPU;
        expect("ddp_select_device(want 42)", ddp_select_device(ctx, (ddp_device)42, &got, NULL), DDP_ERR_ARG, "device");
        /* one rank asks for a device that does not exist: agreed, no hang */
        ddp_status st = ddp_select_device_all(ctx, g_rank == size - 1 ? (ddp_device)42 : DDP_DEVICE_CPU, &got, NULL);
        expect("ddp_select_device_all(want 42 on the last rank)", st, DDP_ERR_ARG, "device");
        expect("ddp_all_ok after", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
        /* ranks asking for different devices (cpu and auto): agreed, no hang */
        st = ddp_select_device_all(ctx, g_rank == size - 1 ? DDP_DEVICE_AUTO : DDP_DEVICE_CPU, &got, NULL);
        expect("ddp_select_device_all(cpu, auto on the last rank)", st, size > 1 ? DDP_ERR_ARG : DDP_OK, "device");
        expect("ddp_all_ok after", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
        expect("ddp_all_ok(all NULL)", ddp_all_ok(ctx, 1, NULL), DDP_ERR_ARG, "all");
        /* ddp_select_device is collective over a node's ranks (all of them here): cpu on some, auto or a device that
         * does not exist on another fails on every rank of the node, no hang */
        st = ddp_select_device(ctx, g_rank == size - 1 ? DDP_DEVICE_AUTO : DDP_DEVICE_CPU, &got, NULL);
        expect("ddp_select_device(cpu, auto on the last rank)", st, size > 1 ? DDP_ERR_ARG : DDP_OK,
               size > 1 ? "ddp_select_device: the ranks of node 0" : NULL);
        expect("ddp_all_ok after", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
        st = ddp_select_device(ctx, g_rank == size - 1 ? (ddp_device)42 : DDP_DEVICE_CPU, &got, NULL);
        /* at np 1 the want alone is refused; at np 2 the node's ranks differ, and 42 is not printed as 99 */
        expect("ddp_select_device(want 42 on the last rank)", st, DDP_ERR_ARG,
               size == 1 ? "want 42: not a device" : "one of them asks for no device there is");
        expect("ddp_all_ok after", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
        /* the device is named as the program passed it (DDP_DEVICE_AUTO), not as the CLI's --device auto */
        char why[160] = "";
        st = ddp_select_device_all(ctx, DDP_DEVICE_AUTO, &got, why);
        expect("ddp_select_device_all(auto)", st, DDP_OK, NULL);
        if (got == DDP_DEVICE_CPU && (strncmp(why, "DDP_DEVICE_AUTO: ", 17) || !strstr(why, ", using cpu"))) {
            fprintf(stderr,
                    "FAIL rank %d ddp_select_device_all(auto) says '%s', not 'DDP_DEVICE_AUTO: ..., using cpu'\n",
                    g_rank, why);
            g_failed = 1;
        } else
            fprintf(stderr, "ok rank %d ddp_select_device_all(auto) says '%s'\n", g_rank, why);
        st = ddp_select_device_all(ctx, DDP_DEVICE_CUDA, &got, NULL); /* no plugin, no GPU, or fewer GPUs than ranks */
        if (st != DDP_OK) expect_api("ddp_select_device_all(cuda) refused", st, DDP_ERR_ARG, "DDP_DEVICE_CUDA: ");
        expect("ddp_select_device_all(cpu)", ddp_select_device_all(ctx, DDP_DEVICE_CPU, &got, NULL), DDP_OK, NULL);
    } else if (!strcmp(c, "dataset")) {
        expect("ddp_dataset_open(dir NULL)", ddp_dataset_open(ctx, NULL, &tr), DDP_ERR_ARG, "dir");
        expect("ddp_dataset_open(out NULL)", ddp_dataset_open(ctx, trd, NULL), DDP_ERR_ARG, "out");
        char nodir[4200];
        snprintf(nodir, sizeof nodir, "%s/no-such-dataset", work);
        expect("ddp_dataset_open(missing dir)", ddp_dataset_open(ctx, nodir, &tr), DDP_ERR_IO, "no-such-dataset");
        /* a path that differs on one rank: the collective's answer names it, on every rank */
        ddp_status st = ddp_dataset_open(ctx, g_rank == size - 1 ? nodir : trd, &tr);
        expect("ddp_dataset_open(missing dir on the last rank)", st, DDP_ERR_IO, "no-such-dataset");
        ddp_dataset_close(tr);
        tr = NULL;
        expect("ddp_dataset_open", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        const float *rows;
        int64_t nr, lab, id, n = ddp_dataset_get_info(tr)->num_samples;
        expect("ddp_dataset_sample(-1)", ddp_dataset_sample(tr, -1, NULL, &rows, &nr, &lab, &id), DDP_ERR_ARG, "index");
        expect("ddp_dataset_sample(n)", ddp_dataset_sample(tr, n, NULL, &rows, &nr, &lab, &id), DDP_ERR_ARG, "index");
        expect("ddp_dataset_sample(rows NULL)", ddp_dataset_sample(tr, 0, NULL, NULL, &nr, &lab, &id), DDP_ERR_ARG,
               "rows");
        expect("ddp_dataset_sample(ds NULL)", ddp_dataset_sample(NULL, 0, NULL, &rows, &nr, &lab, &id), DDP_ERR_ARG,
               "ds is NULL");
        expect("ddp_dataset_sample(0)", ddp_dataset_sample(tr, 0, NULL, &rows, &nr, &lab, &id), DDP_OK, NULL);
        if (ddp_dataset_get_info(NULL) != NULL)
            expect("ddp_dataset_get_info(NULL) is NULL", DDP_ERR_INTERNAL, DDP_OK, NULL);
    } else if (!strcmp(c, "scratch")) { /* TRAIN_DIR: shards read through HDF5 (chunked, compressed) */
        expect("ddp_dataset_open", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        const float *rows;
        int64_t nr, lab, id;
        expect("ddp_dataset_sample(scratch NULL, HDF5-read shard)",
               ddp_dataset_sample(tr, 0, NULL, &rows, &nr, &lab, &id), DDP_ERR_ARG,
               "ddp_dataset_sample: scratch is NULL");
        float *buf = malloc(sizeof(float) * (size_t)ddp_dataset_get_info(tr)->max_sample_rows *
                            (size_t)ddp_dataset_get_info(tr)->dim);
        expect("ddp_dataset_sample(scratch)",
               buf ? ddp_dataset_sample(tr, 0, buf, &rows, &nr, &lab, &id) : DDP_ERR_NOMEM, DDP_OK, NULL);
        free(buf);
    } else if (!strcmp(c, "metrics")) {
        ddp_metrics *m = NULL;
        expect("ddp_metrics_create(out NULL)", ddp_metrics_create(ctx, NULL), DDP_ERR_ARG, "out");
        expect("ddp_metrics_create", ddp_metrics_create(ctx, &m), DDP_OK, NULL);
        expect("ddp_log(m NULL)", ddp_log(NULL, "a", 1, 1), DDP_ERR_ARG, "m is NULL");
        expect("ddp_log_rank0(m NULL)", ddp_log_rank0(NULL, "a", 1), DDP_ERR_ARG, "m is NULL");
        expect("ddp_log(name NULL)", ddp_log(m, NULL, 1, 1), DDP_ERR_ARG, "metric name");
        expect("ddp_log(name with comma)", ddp_log(m, "a,b", 1, 1), DDP_ERR_ARG, "a,b");
        ddp_metric_row g = {0};
        expect("ddp_metrics_sync(m NULL)", ddp_metrics_sync(NULL, &g, NULL), DDP_ERR_ARG, "m is NULL");
        expect("ddp_metrics_sync(global NULL)", ddp_metrics_sync(m, NULL, NULL), DDP_ERR_ARG, "global");
        ddp_log(m, g_rank == size - 1 ? "only/last" : "every/rank", 1, 1);
        expect("ddp_metrics_sync(names differ)", ddp_metrics_sync(m, &g, NULL), size > 1 ? DDP_ERR_MISMATCH : DDP_OK,
               size > 1 ? "every/rank" : NULL);
        ddp_metric_row_free(&g);
        ddp_metrics_destroy(m);
    } else if (!strcmp(c, "models")) {
        ddp_model m;
        ddp_model_config mc;
        ddp_model_config_default(&mc);
        mc.kind = (ddp_model_kind)7;
        expect("ddp_model_config_check(kind 7)", ddp_model_config_check(&mc), DDP_ERR_ARG, "kind");
        ddp_model_config_default(&mc);
        mc.dim = 0;
        mc.classes = 3;
        mc.max_batch_rows = mc.max_batch_samples = 8;
        expect("ddp_model_create(dim 0)", ddp_model_create(ctx, DDP_DEVICE_CPU, &mc, &m), DDP_ERR_ARG, "D");
        mc.dim = 4;
        expect("ddp_model_create(device 9)", ddp_model_create(ctx, (ddp_device)9, &mc, &m), DDP_ERR_ARG, "device");
        expect("ddp_refmodel_create(hidden -1)", ddp_refmodel_create(ctx, DDP_DEVICE_CPU, 4, -1, 3, 8, 8, &m),
               DDP_ERR_ARG, "hidden");
        expect("ddp_refmodel_create(classes 0)", ddp_refmodel_create(ctx, DDP_DEVICE_CPU, 4, 8, 0, 8, 8, &m),
               DDP_ERR_ARG, "classes");
        expect("ddp_model_config_check(NULL)", ddp_model_config_check(NULL), DDP_ERR_ARG, "c is NULL");
        expect("ddp_model_create(out NULL)", ddp_model_create(ctx, DDP_DEVICE_CPU, &mc, NULL), DDP_ERR_ARG, "out");
        expect("ddp_model_create(cfg NULL)", ddp_model_create(ctx, DDP_DEVICE_CPU, NULL, &m), DDP_ERR_ARG, "c is NULL");
        if (strcmp(ddp_model_kind_name((ddp_model_kind)7), "?") || strcmp(ddp_precision_name((ddp_precision)7), "?"))
            expect("names of unknown enum values are \"?\"", DDP_ERR_INTERNAL, DDP_OK, NULL);
        if (ddp_model_num_params(NULL) != 0) expect("ddp_model_num_params(NULL) is 0", DDP_ERR_INTERNAL, DDP_OK, NULL);
    } else if (!strcmp(c, "config")) {
        ddp_train_config cfg = base_cfg(work, "r");
        expect("ddp_train_config_check(defaults)", ddp_train_config_check(&cfg, 2), DDP_OK, NULL);
        expect("ddp_train_config_check(world 0)", ddp_train_config_check(&cfg, 0), DDP_ERR_ARG, "world");
        ddp_train_config b;
#define CHECK_BAD(stmt, has)                                                                              \
    do {                                                                                                  \
        b = cfg;                                                                                          \
        stmt;                                                                                             \
        expect_api("ddp_train_config_check(" #stmt ")", ddp_train_config_check(&b, 2), DDP_ERR_ARG, has); \
    } while (0)
        CHECK_BAD(b.lr = -0.1, "cfg.lr = -0.1: must be a positive number");
        CHECK_BAD(b.batch_size = 0, "cfg.batch_size = 0: must be >= 1");
        CHECK_BAD(b.epochs = 0, "cfg.epochs = 0: must be >= 1");
        CHECK_BAD(b.weight_decay = -1, "cfg.weight_decay = -1: must be >= 0");
        CHECK_BAD((b.shuffle_block = 1, b.sampling_shard = 1), "cfg.shuffle_block = 1 needs cfg.sampling_shard = 0");
        CHECK_BAD((b.batch_rows = 64, b.sampling_shard = 1), "cfg.batch_rows needs cfg.sampling_shard = 0");
        CHECK_BAD((b.lr_schedule = DDP_LR_COSINE, b.min_lr = 1), "cfg.min_lr = 1 is above cfg.lr = 0.001");
        CHECK_BAD(b.warmup = 1.5, "cfg.warmup = 1.5: a step count");
        CHECK_BAD(b.save_top_k = -1, "cfg.save_top_k = -1");
        CHECK_BAD(b.lr_horizon = 7, "cfg.lr_horizon: unknown choice (DDP_LR_HORIZON_KEEP or DDP_LR_HORIZON_RESTART)");
        CHECK_BAD(b.precision = (ddp_precision)7, "cfg.precision: unknown");
        CHECK_BAD(b.eps = 0, "eps");
        CHECK_BAD(b.eps = NAN, "eps");
        CHECK_BAD(b.beta1 = 1, "beta1");
        CHECK_BAD(b.beta1 = -0.1, "beta1");
        CHECK_BAD(b.beta2 = 1.5, "beta2");
        CHECK_BAD(b.grad_clip = NAN, "cfg.grad_clip = nan");
        CHECK_BAD(b.bucket_mb = INFINITY, "bucket");
        CHECK_BAD(b.collective_timeout = -1, "cfg.collective_timeout = -1");
        CHECK_BAD(b.device = (ddp_device)9, "device");
        expect("ddp_train_config_check(NULL)", ddp_train_config_check(NULL, 2), DDP_ERR_ARG, "cfg is NULL");
        CHECK_BAD(b.out_dir = NULL, "cfg.out_dir: a run directory is required");
        CHECK_BAD(b.monitor = NULL, "cfg.monitor: empty metric name");
    } else if (!strcmp(c, "train")) {
        expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
        ddp_model m = user_model(tr), b;
        ddp_train_config cfg = base_cfg(work, "t1");
        /* one rank's config differs: the bad value is named on every rank */
        ddp_train_config one = cfg;
        if (g_rank == size - 1) one.lr = -1;
        expect_api("ddp_train(lr -1 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_ARG, "cfg.lr = -1");
        one = cfg;
        if (g_rank == size - 1) one.beta2 = 1;
        expect("ddp_train(beta2 1 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_ARG, "beta2");
#define TRAIN_BAD(stmt, has)                                                                \
    do {                                                                                    \
        b = m;                                                                              \
        stmt;                                                                               \
        expect("ddp_train(" #stmt ")", ddp_train(ctx, &cfg, &b, tr, va), DDP_ERR_ARG, has); \
    } while (0)
        ddp_tensor_spec sp[2] = {g_lin.spec[0], g_lin.spec[1]};
        TRAIN_BAD((sp[1].ndim = 5, b.tensors = sp), "ndim");
        sp[1] = g_lin.spec[1];
        TRAIN_BAD((sp[0].shape[1] = -3, b.tensors = sp), "shape");
        sp[0] = g_lin.spec[0];
        TRAIN_BAD((sp[1].name = NULL, b.tensors = sp), "name");
        TRAIN_BAD(b.init = NULL, "init");
        TRAIN_BAD(b.train_step = NULL, "train_step");
        TRAIN_BAD(b.eval_step = NULL, "eval_step");
        TRAIN_BAD(b.ntensors = 0, "ntensors");
        TRAIN_BAD(b.tensors = NULL, "tensors");
        TRAIN_BAD(b.device = (ddp_device)9, "device");
        expect("ddp_train(cfg NULL)", ddp_train(ctx, NULL, &m, tr, va), DDP_ERR_ARG, "cfg is NULL");
        expect("ddp_train(model NULL)", ddp_train(ctx, &cfg, NULL, tr, va), DDP_ERR_ARG, "model");
        expect("ddp_train(train NULL)", ddp_train(ctx, &cfg, &m, NULL, va), DDP_ERR_ARG, "train");
        expect("ddp_train(val NULL)", ddp_train(ctx, &cfg, &m, tr, NULL), DDP_ERR_ARG, "val");
        /* a model on one rank only broken: agreed */
        b = m;
        if (g_rank == size - 1) b.eval_step = NULL;
        expect("ddp_train(eval_step NULL on the last rank)", ddp_train(ctx, &cfg, &b, tr, va), DDP_ERR_ARG,
               "eval_step");
        if (size > 1) { /* valid values that differ between ranks: refused on every rank before anything is written */
            const int last = g_rank == size - 1;
            one = cfg;
            if (last) one.lr = 0.002;
            expect_api("ddp_train(lr 0.002 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_MISMATCH,
                       "the ranks were given different cfg.lr (0.001 and 0.002 among them)");
            one = cfg;
            if (last) one.beta1 = 0.8;
            expect_api("ddp_train(beta1 0.8 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_MISMATCH,
                       "different cfg.beta1 (0.8 and 0.9 among them)");
            one = cfg;
            if (last) one.monitor = "val/acc";
            expect_api("ddp_train(monitor val/acc on the last rank)", ddp_train(ctx, &one, &m, tr, va),
                       DDP_ERR_MISMATCH, "different cfg.monitor:");
            one = cfg;
            if (last) one.epochs = 4;
            expect_api("ddp_train(epochs 4 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_MISMATCH,
                       "different cfg.epochs (1 and 4 among them)");
            b = m;
            if (last) { /* another tensor table: the gradient buckets would not line up */
                sp[1].name = "fc.b";
                b.tensors = sp;
            }
            expect_api("ddp_train(a tensor named otherwise on the last rank)", ddp_train(ctx, &cfg, &b, tr, va),
                       DDP_ERR_MISMATCH, "different model tensors (names and shapes)");
            sp[1] = g_lin.spec[1];
            b = m;
            if (last) b.device = DDP_DEVICE_CUDA; /* refused before any backend: no GPU needed */
            expect_api("ddp_train(model device CUDA on the last rank)", ddp_train(ctx, &cfg, &b, tr, va),
                       DDP_ERR_MISMATCH, "different model device");
            ddp_model_config mc[2];
            ddp_model_config_default(&mc[0]);
            mc[1] = mc[0];
            mc[1].heads = 8;
            one = cfg;
            one.model_config = &mc[last];
            expect_api("ddp_train(model_config heads 8 on the last rank)", ddp_train(ctx, &one, &m, tr, va),
                       DDP_ERR_MISMATCH, "different cfg.model_config");
            one = cfg;
            one.resume = last ? "auto" : NULL;
            expect_api("ddp_train(resume auto on the last rank only)", ddp_train(ctx, &one, &m, tr, va),
                       DDP_ERR_MISMATCH, "different cfg.resume's kind (0 NULL, 1 \"auto\", 2 a file) (0 and 1");
            one = cfg;
            if (last) one.seed = (1ull << 63) + 1;
            expect_api("ddp_train(seed 2^63+1 on the last rank)", ddp_train(ctx, &one, &m, tr, va), DDP_ERR_MISMATCH,
                       "different cfg.seed (9223372036854775809 and 0 among them)");
            one = cfg;
            if (last) one.lr = nextafter(0.001, 1);
            expect_api("ddp_train(lr one ulp above on the last rank)", ddp_train(ctx, &one, &m, tr, va),
                       DDP_ERR_MISMATCH, "different cfg.lr (0.001 and 0.0010000000000000002 among them)");
            if (access(cfg.out_dir, F_OK) == 0) {
                fprintf(stderr, "FAIL rank %d: a refused ddp_train created %s\n", g_rank, cfg.out_dir);
                g_failed = 1;
            }
        }
        /* a run directory under a regular file */
        char file[4200], under[4300];
        snprintf(file, sizeof file, "%s/a-file", work);
        if (g_rank == 0) {
            FILE *f = fopen(file, "w");
            if (f) fclose(f);
        }
        int all;
        ddp_all_ok(ctx, 1, &all);
        snprintf(under, sizeof under, "%s/run", file);
        ddp_train_config uc = cfg;
        uc.out_dir = under;
        ddp_status st = ddp_train(ctx, &uc, &m, tr, va);
        expect("ddp_train(out_dir under a file)", st, st == DDP_ERR_IO ? DDP_ERR_IO : DDP_ERR_ARG, "a-file");
        /* settings equal as numbers or unused: -0 and 0, a block size without block shuffling */
        one = cfg;
        if (g_rank == size - 1) one.grad_clip = -0.0, one.shuffle_block_mb = 7;
        expect("ddp_train", ddp_train(ctx, &one, &m, tr, va), DDP_OK, NULL);
        /* resumes of that run: a refusal and a notice name the fields (sh/capi_misuse.sh reads the notice) */
        ddp_train_config rs = cfg;
        rs.resume = "auto";
        rs.seed = 5;
        expect_api("ddp_train(resume, another seed)", ddp_train(ctx, &rs, &m, tr, va), DDP_ERR_ARG,
                   "saved with cfg.seed = 0; this run uses cfg.seed = 5");
        rs = cfg;
        rs.resume = "auto";
        rs.mode_max = 1;
        expect_api("ddp_train(resume, another mode)", ddp_train(ctx, &rs, &m, tr, va), DDP_ERR_ARG,
                   "saved with cfg.mode_max = 0; this run uses cfg.mode_max = 1");
        rs = cfg;
        rs.resume = "auto";
        rs.epochs = 2;
        rs.weight_decay = 0.02;
        expect("ddp_train(resume, 2 epochs, weight_decay 0.02)", ddp_train(ctx, &rs, &m, tr, va), DDP_OK, NULL);
    } else if (!strcmp(c, "builtin")) { /* the built-in models' lines name ddp_model_config's fields */
        expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
        const ddp_dataset_info *ti = ddp_dataset_get_info(tr), *vi = ddp_dataset_get_info(va);
        ddp_model_config tx, b;
        ddp_model_config_default(&tx);
        tx.kind = DDP_MODEL_TRANSFORMER, tx.dim = ti->dim, tx.classes = ti->num_classes, tx.hidden = 16, tx.heads = 4;
        tx.max_batch_samples = 8;
        tx.max_batch_rows = 8 * (ti->max_sample_rows > vi->max_sample_rows ? ti->max_sample_rows : vi->max_sample_rows);
        b = tx, b.heads = 3;
        expect_is("ddp_model_config_check(heads 3)", ddp_model_config_check(&b), DDP_ERR_ARG,
                  "transformer: cfg.model_config->heads = 3 must divide cfg.model_config->hidden = 16");
        b = tx, b.layers = 0;
        expect_is("ddp_model_config_check(layers 0)", ddp_model_config_check(&b), DDP_ERR_ARG,
                  "transformer: cfg.model_config->layers = 0: must be >= 1");
        b = tx, b.max_positions = 0;
        expect_is("ddp_model_config_check(max_positions 0)", ddp_model_config_check(&b), DDP_ERR_ARG,
                  "transformer: need cfg.model_config->max_positions >= 1 and 0 <= cfg.model_config->dropout < 1 (got "
                  "0, 0)");
        ddp_model m;
        b = tx, b.hidden = 0;
        expect_is("ddp_model_create(hidden 0)", ddp_model_create(ctx, DDP_DEVICE_CPU, &b, &m), DDP_ERR_ARG,
                  "transformer: need D >= 1, cfg.model_config->hidden >= 1 and classes >= 2 (got D=4, hidden=0, "
                  "classes=3)");
        b = tx, b.heads = 5; /* as ddp_model_create names it */
        expect_is("ddp_model_create(heads 5)", ddp_model_create(ctx, DDP_DEVICE_CPU, &b, &m), DDP_ERR_ARG,
                  "transformer: cfg.model_config->heads = 5 must divide cfg.model_config->hidden = 16");
        ddp_model_config mlp = tx;
        mlp.kind = DDP_MODEL_MLP;
        expect("ddp_train(mlp)", train_builtin(ctx, work, "mlp", &mlp, NULL, DDP_PRECISION_FP32, tr, va), DDP_OK, NULL);
        expect("ddp_train(transformer)", train_builtin(ctx, work, "tx", &tx, NULL, DDP_PRECISION_FP32, tr, va), DDP_OK,
               NULL);
        char line[8400];
        snprintf(line, sizeof line,
                 "%s/mlp/checkpoints/last.h5 holds an mlp model (cfg.model_config->kind = DDP_MODEL_MLP), not the "
                 "transformer this run builds (cfg.model_config->kind = DDP_MODEL_TRANSFORMER)",
                 work);
        expect_is("ddp_train(resume an mlp as a transformer)",
                  train_builtin(ctx, work, "mlp", &tx, "auto", DDP_PRECISION_FP32, tr, va), DDP_ERR_ARG, line);
        b = tx, b.heads = 2;
        snprintf(line, sizeof line,
                 "%s/tx/checkpoints/last.h5: saved with cfg.model_config->heads = 4; this run uses "
                 "cfg.model_config->heads = 2 (the same tensors would be split into other attention heads): resume "
                 "with cfg.model_config->heads = 4",
                 work);
        expect_is("ddp_train(resume, heads 2)", train_builtin(ctx, work, "tx", &b, "auto", DDP_PRECISION_FP32, tr, va),
                  DDP_ERR_ARG, line);
        b = tx, b.hidden = 32;
        expect_api("ddp_train(resume, hidden 32)",
                   train_builtin(ctx, work, "tx", &b, "auto", DDP_PRECISION_FP32, tr, va), DDP_ERR_FORMAT,
                   "in this run's model (another cfg.model_config->hidden, cfg.model_config->ff, "
                   "cfg.model_config->max_positions, D or number of classes: resume with the model configuration and "
                   "data it was trained with)");
        b = mlp, b.hidden = 32;
        expect_api("ddp_train(resume an mlp, hidden 32)",
                   train_builtin(ctx, work, "mlp", &b, "auto", DDP_PRECISION_FP32, tr, va), DDP_ERR_FORMAT,
                   "in this run's model (another cfg.model_config->hidden, D or number of classes: resume with the "
                   "model configuration and data it was trained with)");
        b = tx, b.layers = 1;
        expect_api("ddp_train(resume, layers 1)",
                   train_builtin(ctx, work, "tx", &b, "auto", DDP_PRECISION_FP32, tr, va), DDP_ERR_FORMAT,
                   "in the model: another cfg.model_config->layers?)");
        b = tx, b.max_positions = 2; /* the samples have 4 rows or more: refused on every rank before any step (in a
                                      * step only the ranks holding a longer sample failed, the others waited) */
        expect_api("ddp_train(max_positions 2)",
                   train_builtin(ctx, work, "short", &b, NULL, DDP_PRECISION_FP32, tr, va), DDP_ERR_ARG,
                   " rows, more than cfg.model_config->max_positions = 2");
        expect("ddp_train(max_positions 2) is agreed", ddp_error_shared() ? DDP_OK : DDP_ERR_INTERNAL, DDP_OK, NULL);
        expect_is(
            "ddp_train(precision tf32 on the CPU)",
            train_builtin(ctx, work, "tf32", &mlp, NULL, DDP_PRECISION_TF32, tr, va), DDP_ERR_ARG,
            "cfg.precision = DDP_PRECISION_TF32 needs model.device = DDP_DEVICE_CUDA (the cpu backend computes in "
            "fp32 or bf16)");
    } else if (is_model_case(c)) {
        expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
        if (tr && va) model_cases(ctx, trd, tr, va, work);
    } else if (!strcmp(c, "shuffle")) { /* another order on resume, named in ddp_train_config's fields only */
        expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
        expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
        ddp_model m = user_model(tr);
        ddp_train_config cfg = base_cfg(work, "mid"), rs;
        cfg.shuffle_block = 1, cfg.shuffle_block_mb = 0.002, cfg.shuffle_window = 3, cfg.epochs = 2;
        setenv("MPIDDP_TEST_STOP_AT_STEP", "2", 1); /* stopped after 2 of the epoch's 4 (np 2) or 8 steps */
        ddp_status st = ddp_train(ctx, &cfg, &m, tr, va);
        unsetenv("MPIDDP_TEST_STOP_AT_STEP");
        fprintf(stderr, "ok rank %d ddp_train(stopped at step 2): %s\n", g_rank, ddp_status_name(st));
        rs = cfg, rs.resume = "auto", rs.shuffle_block = 0;
        char want[8400];
        snprintf(want, sizeof want,
                 "%s/mid/checkpoints/last.h5: saved with cfg.shuffle_block = 1, cfg.shuffle_block_mb = 0.002, "
                 "cfg.shuffle_window = 3; this run uses cfg.shuffle_block = 0 (another order continues only a "
                 "checkpoint saved at an epoch boundary; this one is 2 optimizer steps into epoch 0)",
                 work);
        expect_is("ddp_train(resume mid-epoch, shuffle_block 0)", ddp_train(ctx, &rs, &m, tr, va), DDP_ERR_ARG, want);
        cfg = base_cfg(work, "bnd"); /* at an epoch boundary: accepted, one notice (sh/capi_misuse.sh reads it) */
        cfg.shuffle_block = 1, cfg.shuffle_block_mb = 0.002, cfg.shuffle_window = 3;
        expect("ddp_train(shuffle_block 1)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK, NULL);
        rs = cfg, rs.resume = "auto", rs.shuffle_block = 0, rs.epochs = 2;
        expect("ddp_train(resume at the boundary, shuffle_block 0)", ddp_train(ctx, &rs, &m, tr, va), DDP_OK, NULL);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        g_failed = 1;
    }
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    ddp_finalize(ctx);
    return g_failed;
}
