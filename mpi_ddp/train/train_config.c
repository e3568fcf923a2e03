/* train_config.c — the training configuration's defaults (ddp_train_config_default), its checks
 * (ddp_train_config_check, ddp_train's arguments) and the ranks' agreement on it, out of trainer.c (the loop). */
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/lr_schedule.h"
#include "mpi_ddp/train/train_state.h"
#include "mpiddp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void ddp_train_config_default(ddp_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->out_dir = "run";
    c->epochs = 3;
    c->batch_size = 32;
    c->accumulate = 1;
    c->lr = 1e-3;
    c->weight_decay = 0.01;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->seed = 0;
    c->log_every = 50;
    c->bucket_mb = 25.0;
    c->device = DDP_DEVICE_CPU;
    c->progress = 1;
    c->hidden = 0;
    c->monitor = "val/loss";
    c->save_top_k = 1;
    c->shuffle_block_mb = 4.0;
    c->shuffle_window = 16;
}

ddp_status ddp_train_config_check(const ddp_train_config *c, int world)
{
    DDP_NONNULL(c, "cfg");
    return ddp_train_config_check_as(c, world, 0);
}

/* N(X): the setting's name, V(X, fmt, value): with its value; the CLI's option or the C API's field (optname.h) */
#define N(X) ddp_opt_name(cli, DDP_OPT_##X)
#define V(X, ...) ddp_opt_fmt(v##X, sizeof v##X, cli, DDP_OPT_##X, __VA_ARGS__)

ddp_status ddp_train_config_check_as(const ddp_train_config *c, int world, int cli)
{
    if (!c) return ddp_set_error(DDP_ERR_ARG, "ddp_train_config_check: cfg is NULL");
    if (world < 1) return ddp_set_error(DDP_ERR_ARG, "ddp_train_config_check: world %d: must be >= 1 rank", world);
    char vBATCH_ROWS[96], vBATCH_SIZE[96], vACCUMULATE[96], vEPOCHS[96], vLR[96], vWEIGHT_DECAY[96], vSHUFFLE[96],
        vSAMPLING[96], vCOLLECTIVE_TIMEOUT[96], vGRAD_CLIP[96], vLOG_EVERY[96], vBUCKET_MB[96], vSAVE_TOP_K[96],
        vEARLY_STOP_PATIENCE[96], vWARMUP[96], vMIN_LR[96];
    /* global batch and budget: products of options that must fit int64 (and a float for the sample count) */
    if (c->accumulate >= 1 && c->batch_rows > 0 && c->batch_rows > (INT64_MAX / 4) / world / c->accumulate)
        return ddp_set_error(DDP_ERR_ARG, "%s x %d ranks x %s: the global budget is too large",
                             V(BATCH_ROWS, "%lld", (long long)c->batch_rows), world,
                             V(ACCUMULATE, "%d", c->accumulate));
    if (c->accumulate >= 1 && c->batch_size > 0 && (double)c->batch_size * world * c->accumulate > 16777216.0)
        return ddp_set_error(DDP_ERR_ARG, "%s x %d ranks x %s: more than 2^24 samples per optimizer step",
                             V(BATCH_SIZE, "%d", c->batch_size), world, V(ACCUMULATE, "%d", c->accumulate));
    if (!c->out_dir || !*c->out_dir) return ddp_set_error(DDP_ERR_ARG, "%s: a run directory is required", N(OUT));
    if (c->epochs < 1) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1", V(EPOCHS, "%d", c->epochs));
    if (c->batch_size < 1) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1", V(BATCH_SIZE, "%d", c->batch_size));
    if (c->accumulate < 1) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1", V(ACCUMULATE, "%d", c->accumulate));
    if (c->batch_rows < 0)
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1", V(BATCH_ROWS, "%lld", (long long)c->batch_rows));
    if (c->shuffle_block && (!(c->shuffle_block_mb > 0) || c->shuffle_window < 1 || c->shuffle_window > 64))
        return ddp_set_error(DDP_ERR_ARG, "%s: need %s > 0 and %s in [1, 64]", V(SHUFFLE, "block"), N(SHUFFLE_BLOCK_MB),
                             N(SHUFFLE_WINDOW));
    if (c->shuffle_block && c->sampling_shard)
        return ddp_set_error(DDP_ERR_ARG, "%s needs %s (shard sampling shuffles within each rank's shards)",
                             V(SHUFFLE, "block"), V(SAMPLING, "global"));
    if (c->batch_rows > 0 && c->sampling_shard)
        return ddp_set_error(DDP_ERR_ARG, "%s needs %s (shard sampling keeps sample-count batches)", N(BATCH_ROWS),
                             V(SAMPLING, "global"));
    if (!(c->lr > 0) || !isfinite(c->lr))
        return ddp_set_error(DDP_ERR_ARG, "%s: must be a positive number", V(LR, "%g", c->lr));
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 0", V(WEIGHT_DECAY, "%g", c->weight_decay));
    /* AdamW's constants, the device and the lr span have no CLI option (the CLI sets valid ones): the C API's fields.
     * beta 1 divided by zero in the bias correction */
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return ddp_set_error(DDP_ERR_ARG, "cfg.beta1 = %g, cfg.beta2 = %g: each must be in [0, 1)", c->beta1, c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps))
        return ddp_set_error(DDP_ERR_ARG, "cfg.eps = %g: must be a positive number", c->eps);
    if (!(c->collective_timeout >= 0) || !isfinite(c->collective_timeout))
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 0 seconds (0: wait forever)",
                             V(COLLECTIVE_TIMEOUT, "%g", c->collective_timeout));
    if (c->device != DDP_DEVICE_AUTO && c->device != DDP_DEVICE_CPU && c->device != DDP_DEVICE_CUDA)
        return ddp_set_error(DDP_ERR_ARG, "cfg.device = %d: not a device (DDP_DEVICE_AUTO, _CPU or _CUDA)",
                             (int)c->device);
    if (!(c->grad_clip >= 0)) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 0", V(GRAD_CLIP, "%g", c->grad_clip));
    if (c->log_every < 1) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 1", V(LOG_EVERY, "%d", c->log_every));
    if (!(c->bucket_mb > 0) || !isfinite(c->bucket_mb))
        return ddp_set_error(DDP_ERR_ARG, "%s: must be > 0", V(BUCKET_MB, "%g", c->bucket_mb));
    if (c->save_top_k < 0 || c->save_top_k > DDP_TOPK_MAX)
        return ddp_set_error(DDP_ERR_ARG, "%s: must be in [0, %d]", V(SAVE_TOP_K, "%d", c->save_top_k), DDP_TOPK_MAX);
    if (c->ckpt_policy < 0 || c->ckpt_policy > DDP_POLICY_MAJORITY)
        return ddp_set_error(DDP_ERR_ARG, "%s: unknown policy", N(CKPT_POLICY));
    if (c->early_stop_patience < 0)
        return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 0", V(EARLY_STOP_PATIENCE, "%d", c->early_stop_patience));
    if (c->ckpt_every_steps < 0) return ddp_set_error(DDP_ERR_ARG, "%s: must be >= 0", N(CKPT_EVERY_STEPS));
    if (!c->monitor || !*c->monitor) return ddp_set_error(DDP_ERR_ARG, "%s: empty metric name", N(MONITOR));
    if (c->lr_schedule < DDP_LR_CONSTANT || c->lr_schedule > DDP_LR_LINEAR)
        return ddp_set_error(DDP_ERR_ARG, "%s: unknown schedule", N(LR_SCHEDULE));
    if (!(c->warmup >= 0) || !(c->min_lr >= 0) || !isfinite(c->warmup))
        return ddp_set_error(DDP_ERR_ARG, "%s and %s must be >= 0", N(WARMUP), N(MIN_LR));
    if (c->warmup >= 1 && c->warmup != floor(c->warmup)) /* 1.5 once ran as 1 step */
        return ddp_set_error(DDP_ERR_ARG, "%s: a step count (an integer >= 1) or a fraction in (0, 1)",
                             V(WARMUP, "%g", c->warmup));
    if (c->lr_schedule != DDP_LR_CONSTANT && c->min_lr > c->lr)
        return ddp_set_error(DDP_ERR_ARG, "%s is above %s", V(MIN_LR, "%g", c->min_lr), V(LR, "%g", c->lr));
    if (c->lr_horizon < DDP_LR_HORIZON_KEEP || c->lr_horizon > DDP_LR_HORIZON_RESTART)
        return ddp_set_error(DDP_ERR_ARG, "%s: unknown choice (%s or %s)", N(LR_HORIZON),
                             cli ? "keep" : "DDP_LR_HORIZON_KEEP", cli ? "restart" : "DDP_LR_HORIZON_RESTART");
    if (c->lr_start_step < 0 || c->lr_end_step < 0 || (c->lr_end_step > 0 && c->lr_end_step <= c->lr_start_step))
        return ddp_set_error(
            DDP_ERR_ARG,
            "cfg.lr_start_step = %lld, cfg.lr_end_step = %lld: need 0 <= start < end (or end 0: the whole run)",
            (long long)c->lr_start_step, (long long)c->lr_end_step);
    if (c->precision < DDP_PRECISION_FP32 || c->precision > DDP_PRECISION_BF16)
        return ddp_set_error(DDP_ERR_ARG, "%s: unknown", N(PRECISION));
    return DDP_OK;
}
#undef N
#undef V

/* A value of a ddp_model_config field as a C-API program writes it: DDP_MODEL_TRANSFORMER, 4, 0.1 (alt: at the full
 * precision, for two values that print alike otherwise). */
static const char *model_value(char *buf, size_t len, const char *field, double v, int alt)
{
    if (!strcmp(field, "kind") && (v == DDP_MODEL_MLP || v == DDP_MODEL_TRANSFORMER))
        snprintf(buf, len, "%s", v == DDP_MODEL_MLP ? "DDP_MODEL_MLP" : "DDP_MODEL_TRANSFORMER");
    else
        snprintf(buf, len, alt ? "%.17g" : "%g", v);
    return buf;
}

/* A cfg.model_config that contradicts the configuration the built-in model was created with (own): checkpoints and
 * run.json would record hyperparameters the model does not have. The fields of own's kind that say what the model
 * computes (its shapes and the model_* attributes checkpoints record); the workspace (max_batch_rows,
 * max_batch_samples) and the arithmetic (precision) may differ: ddp_train reads those from the model (trainer.c). */
static ddp_status check_model_config(const ddp_model_config *given, const ddp_model_config *own, int cli)
{
    if (!given || !own) return DDP_OK;
    int tx = own->kind == DDP_MODEL_TRANSFORMER;
    double fg = (double)(given->ff > 0 ? given->ff : 2 * given->hidden),
           fo = (double)(own->ff > 0 ? own->ff : 2 * own->hidden);
    const struct {
        const char *field;
        int opt; /* its ddp_opt, -1: none */
        double g, o;
        int used;
    } f[] = {{"kind", DDP_OPT_MODEL, given->kind, own->kind, 1},
             {"dim", -1, (double)given->dim, (double)own->dim, 1},
             {"classes", -1, (double)given->classes, (double)own->classes, 1},
             {"hidden", DDP_OPT_HIDDEN, (double)given->hidden, (double)own->hidden, 1},
             {"layers", DDP_OPT_LAYERS, given->layers, own->layers, tx},
             {"heads", DDP_OPT_HEADS, given->heads, own->heads, tx},
             {"ff", DDP_OPT_FF, fg, fo, tx},
             {"max_positions", DDP_OPT_MAX_POSITIONS, (double)given->max_positions, (double)own->max_positions, tx},
             {"positions", -1, given->positions != 0, own->positions != 0, tx},
             {"dropout", DDP_OPT_DROPOUT, given->dropout, own->dropout, tx}};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        if (!f[k].used || f[k].g == f[k].o) continue;
        char name[64], a[64], b[64];
        if (f[k].opt >= 0)
            snprintf(name, sizeof name, "%s", ddp_opt_name(cli, (ddp_opt)f[k].opt));
        else
            snprintf(name, sizeof name, "cfg.model_config->%s", f[k].field);
        model_value(a, sizeof a, f[k].field, f[k].g, 0), model_value(b, sizeof b, f[k].field, f[k].o, 0);
        if (!strcmp(a, b))
            model_value(a, sizeof a, f[k].field, f[k].g, 1), model_value(b, sizeof b, f[k].field, f[k].o, 1);
        return ddp_set_error(DDP_ERR_ARG,
                             "ddp_train: %s = %s, but the model was created with %s = %s: cfg.model_config must be "
                             "the configuration given to ddp_model_create, or NULL",
                             name, a, f[k].field, b);
    }
    return DDP_OK;
}

ddp_status ddp_train_args_check(const ddp_train_config *cfg, int world, int cli, const ddp_model *m,
                                const ddp_dataset *train, const ddp_dataset *val)
{
    if (!cfg) return ddp_set_error(DDP_ERR_ARG, "ddp_train: cfg is NULL");
    DDP_CHECK(ddp_train_config_check_as(cfg, world, cli));
    if (!m || !train || !val)
        return ddp_set_error(DDP_ERR_ARG, "ddp_train: %s is NULL", !m ? "model" : !train ? "train" : "val");
    const char *name = m->name ? m->name : "(unnamed)";
    if (!m->init || !m->train_step || !m->eval_step)
        return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': its %s callback is NULL", name,
                             !m->init         ? "init"
                             : !m->train_step ? "train_step"
                                              : "eval_step");
    if (m->ntensors < 1 || !m->tensors)
        return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': ntensors %d, tensors %s: needs at least one tensor",
                             name, m->ntensors, m->tensors ? "set" : "NULL");
    if (m->device != DDP_DEVICE_AUTO && m->device != DDP_DEVICE_CPU && m->device != DDP_DEVICE_CUDA)
        return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': device %d: not a device (DDP_DEVICE_CPU or _CUDA)",
                             name, (int)m->device);
    int64_t total = 0;
    for (int k = 0; k < m->ntensors; k++) {
        const ddp_tensor_spec *t = &m->tensors[k];
        if (!t->name || !*t->name)
            return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': tensor %d: its name is %s", name, k,
                                 t->name ? "empty" : "NULL");
        if (t->ndim < 1 || t->ndim > 4)
            return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': tensor %d '%s': ndim %d: must be in [1, 4]", name,
                                 k, t->name, t->ndim);
        int64_t e = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 1 || t->shape[d] > (INT64_MAX / 8) / e)
                return ddp_set_error(DDP_ERR_ARG,
                                     "ddp_train: model '%s': tensor %d '%s': shape[%d] %lld: must be >= 1 "
                                     "(and the tensor's size fit memory)",
                                     name, k, t->name, d, (long long)t->shape[d]);
            e *= t->shape[d];
        }
        if (e > (INT64_MAX / 8) - total)
            return ddp_set_error(DDP_ERR_ARG, "ddp_train: model '%s': more parameters than fit memory", name);
        total += e;
    }
    return check_model_config(cfg->model_config, ddp_model_own_config(m), cli);
}

/* --- the same configuration and model on every rank --- */
enum { AGREE_MAX = 64 };
typedef struct {
    int n;
    const char *name[AGREE_MAX];
    char kind[AGREE_MAX]; /* 'i' integer, 'u' unsigned, 'd' double (its bits), 'h' a hash (no value printed) */
    int64_t v[2 * AGREE_MAX];
} agree_set;

static void put(agree_set *s, const char *name, char kind, int64_t v)
{
    if (s->n == AGREE_MAX) return; /* the fixed list in ddp_train_args_agree stays below it */
    s->name[s->n] = name;
    s->kind[s->n] = kind;
    s->v[s->n++] = v;
}
static void put_d(agree_set *s, const char *name, double d)
{
    if (d == 0) d = 0;   /* -0 is 0 */
    if (d != d) d = NAN; /* one NaN, whatever its payload */
    int64_t b;
    memcpy(&b, &d, sizeof b);
    put(s, name, 'd', b);
}
static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    for (size_t i = 0; i < len; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}
static int64_t str_hash(const char *s) { return s ? (int64_t)fnv(14695981039346656037ull, s, strlen(s) + 1) : 0; }

ddp_status ddp_train_args_agree(ddp_ctx *ctx, const ddp_train_config *c, const ddp_model *m)
{
    int cli = ctx->cli_names;
    agree_set s = {0};
#define I(o, x) put(&s, ddp_opt_name(cli, DDP_OPT_##o), 'i', (int64_t)(x))
#define D(o, x) put_d(&s, ddp_opt_name(cli, DDP_OPT_##o), (x))
    I(EPOCHS, c->epochs), I(BATCH_SIZE, c->batch_size), I(BATCH_ROWS, c->batch_rows), I(ACCUMULATE, c->accumulate);
    I(SHUFFLE, c->shuffle_block); /* the block's settings only where they apply (and are checked) */
    D(SHUFFLE_BLOCK_MB, c->shuffle_block ? c->shuffle_block_mb : 0),
        I(SHUFFLE_WINDOW, c->shuffle_block ? c->shuffle_window : 0);
    I(SAMPLING, c->sampling_shard), D(LR, c->lr), D(WEIGHT_DECAY, c->weight_decay);
    put_d(&s, "cfg.beta1", c->beta1), put_d(&s, "cfg.beta2", c->beta2), put_d(&s, "cfg.eps", c->eps);
    I(LR_SCHEDULE, c->lr_schedule), D(WARMUP, c->warmup), D(MIN_LR, c->min_lr), I(LR_HORIZON, c->lr_horizon);
    put(&s, "cfg.lr_start_step", 'i', c->lr_start_step), put(&s, "cfg.lr_end_step", 'i', c->lr_end_step);
    D(GRAD_CLIP, c->grad_clip), put(&s, ddp_opt_name(cli, DDP_OPT_SEED), 'u', (int64_t)c->seed),
        put(&s, "cfg.drop_last", 'i', c->drop_last);
    I(LOG_EVERY, c->log_every), put(&s, "cfg.log_per_rank", 'i', c->log_per_rank);
    I(FAST_DEV_RUN, c->fast_dev_run), D(BUCKET_MB, c->bucket_mb), D(COLLECTIVE_TIMEOUT, c->collective_timeout);
    I(OVERWRITE, c->overwrite), I(CKPT_EVERY_STEPS, c->ckpt_every_steps);
    I(MODE, c->mode_max), I(SAVE_TOP_K, c->save_top_k), I(CKPT_POLICY, c->ckpt_policy);
    I(EARLY_STOP_PATIENCE, c->early_stop_patience), put_d(&s, "cfg.early_stop_min_delta", c->early_stop_min_delta);
    I(SKIP_NONFINITE, c->skip_nonfinite), I(PRECISION, c->precision);
    put(&s, ddp_opt_name(cli, DDP_OPT_MONITOR), 'h', str_hash(c->monitor));
    /* rank 0 alone reads the checkpoint: one file may have another path on another node, but not another kind */
    put(&s, cli ? "--resume's kind (0 none, 1 auto, 2 a file)" : "cfg.resume's kind (0 NULL, 1 \"auto\", 2 a file)",
        'i',
        !c->resume                   ? 0
        : !strcmp(c->resume, "auto") ? 1
                                     : 2);
    /* the device that computes (cfg.device is not read): ranks on the CPU and on GPUs reduce by other paths */
    put(&s, "model device (model.device, or the context's for DDP_DEVICE_AUTO)", 'i',
        m->device == DDP_DEVICE_AUTO ? ctx->device : m->device);
    const ddp_model_config *mc = c->model_config; /* a built-in model's hyperparameters, recorded by rank 0 */
    uint64_t hm = 0;
    if (mc) {
        double dropout = mc->dropout == 0 ? 0 : mc->dropout;
        int64_t f[] = {mc->kind,  mc->dim, mc->classes,       mc->hidden,    mc->layers,
                       mc->heads, mc->ff,  mc->max_positions, mc->positions, mc->precision};
        hm = fnv(fnv(14695981039346656037ull, f, sizeof f), &dropout, sizeof dropout);
    }
    put(&s, "cfg.model_config (the built-in model's hyperparameters)", 'h', (int64_t)hm);
#undef I
#undef D
    uint64_t h = fnv(14695981039346656037ull, &m->ntensors, sizeof m->ntensors);
    for (int k = 0; k < m->ntensors; k++) { /* names and shapes: the gradient buckets are laid out from them */
        h = fnv(h, m->tensors[k].name, strlen(m->tensors[k].name) + 1);
        h = fnv(h, &m->tensors[k].ndim, sizeof m->tensors[k].ndim);
        h = fnv(h, m->tensors[k].shape, (size_t)m->tensors[k].ndim * sizeof m->tensors[k].shape[0]);
    }
    put(&s, "model tensors (names and shapes)", 'h', (int64_t)h);
    for (int k = 0; k < s.n; k++) s.v[s.n + k] = ~s.v[k]; /* MAX of ~v is ~(MIN of v): both in one allreduce */
    DDP_CHECK(ddp_allreduce(ctx, s.v, 2 * s.n, MPI_INT64_T, MPI_MAX, "the configuration agreement"));
    int bad = -1;
    for (int k = 0; k < s.n && bad < 0; k++)
        if (s.v[k] != ~s.v[s.n + k]) bad = k;
    if (bad < 0) return DDP_OK;
    char vals[128] = "";
    int64_t hi = s.v[bad], lo = ~s.v[s.n + bad];
    if (s.kind[bad] == 'i') snprintf(vals, sizeof vals, " (%lld and %lld among them)", (long long)lo, (long long)hi);
    if (s.kind[bad] == 'u') /* the two ends in signed order: two of the values, whichever */
        snprintf(vals, sizeof vals, " (%llu and %llu among them)", (unsigned long long)lo, (unsigned long long)hi);
    if (s.kind[bad] == 'd') {
        double a, b;
        char sa[40], sb[40];
        memcpy(&a, &lo, sizeof a), memcpy(&b, &hi, sizeof b);
        snprintf(sa, sizeof sa, "%.9g", a), snprintf(sb, sizeof sb, "%.9g", b);
        if (!strcmp(sa, sb)) snprintf(sa, sizeof sa, "%.17g", a), snprintf(sb, sizeof sb, "%.17g", b);
        snprintf(vals, sizeof vals, " (%s and %s among them)", sa, sb);
    }
    ddp_set_error(DDP_ERR_MISMATCH,
                  "ddp_train: the ranks were given different %s%s: every rank must pass the same configuration and "
                  "model",
                  s.name[bad], vals);
    ddp_mark_error_shared(); /* computed from the reduced values: the same line on every rank */
    return DDP_ERR_MISMATCH;
}
