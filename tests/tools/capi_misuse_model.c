/* capi_misuse_model.c — capi_misuse's case own_config: a built-in model (ddp_model_create) trained with
 * cfg.model_config NULL, with one that contradicts the configuration the model was created with, or with one that
 * differs from it only in workspace sizes or precision (the rest of the program is capi_misuse.c; sh/capi_misuse.sh
 * runs it at np 1 and 2 and evaluates the checkpoint it leaves). */
#include "capi_misuse.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int is_model_case(const char *c) { return !strcmp(c, "own_config"); }

/* line is "TRD/<shard>: /offsets[<i>]" followed by tail exactly (the sample's file and index are the dataset's) */
static void expect_sample_line(const char *what, ddp_status st, const char *trd, const char *tail)
{
    expect_api(what, st, DDP_ERR_ARG, tail);
    const char *e = ddp_last_error();
    size_t n = strlen(trd), t = strlen(tail), len = e ? strlen(e) : 0;
    const char *mid = len > n ? strstr(e + n, ": /offsets[") : NULL;
    int ok = mid && !strncmp(e, trd, n) && e[n] == '/' && !memchr(e + n, ' ', (size_t)(mid - e) - n) && len > t &&
             !strcmp(e + len - t, tail) && strchr(mid, ']') == e + len - t - 1;
    if (!ok) {
        fprintf(stderr, "FAIL rank %d %s: the line is not\n  %s/SHARD: /offsets[I]%s\n", g_rank, what, trd, tail);
        g_failed = 1;
    }
}

/* a refusal of ddp_train on every rank, agreed, before the run directory was made */
static void expect_refused(const char *what, ddp_status st, const char *line, const char *out_dir)
{
    expect_is(what, st, DDP_ERR_ARG, line);
    if (!ddp_error_shared()) {
        fprintf(stderr, "FAIL rank %d %s: not agreed (ddp_error_shared 0)\n", g_rank, what);
        g_failed = 1;
    }
    if (access(out_dir, F_OK) == 0) {
        fprintf(stderr, "FAIL rank %d %s: the refused run created %s\n", g_rank, what, out_dir);
        g_failed = 1;
    }
}

int model_cases(ddp_ctx *ctx, const char *trd, ddp_dataset *tr, ddp_dataset *va, const char *work)
{
    const ddp_dataset_info *ti = ddp_dataset_get_info(tr), *vi = ddp_dataset_get_info(va);
    int64_t longest = ti->max_sample_rows > vi->max_sample_rows ? ti->max_sample_rows : vi->max_sample_rows;
    ddp_model_config tx, b;
    ddp_model_config_default(&tx);
    tx.kind = DDP_MODEL_TRANSFORMER, tx.dim = ti->dim, tx.classes = ti->num_classes, tx.hidden = 16, tx.heads = 4;
    tx.max_batch_samples = 8, tx.max_batch_rows = 8 * longest;
    ddp_model m = {0}; /* left as it was by a failed ddp_model_create */
    /* (1) cfg.model_config NULL: the model's own max_positions, one agreed line before the run directory (before:
     * met in a step, on the ranks holding such a sample alone) */
    b = tx, b.max_positions = ti->max_sample_rows - 1;
    expect("ddp_model_create(max_positions below the longest sample)", ddp_model_create(ctx, DDP_DEVICE_CPU, &b, &m),
           DDP_OK, NULL);
    ddp_train_config cfg = base_cfg(work, "short");
    char tail[256];
    snprintf(tail, sizeof tail, ": sample (id %s) has %lld rows, more than the model's max_positions = %lld", "%lld",
             (long long)ti->max_sample_rows, (long long)b.max_positions);
    {
        char want[256]; /* the id: the first sample of that length (the check names it) */
        float scratch[4096];
        const float *rows;
        int64_t nrows, label, id = -1;
        for (int64_t i = 0; i < ti->num_samples && id < 0; i++)
            if (ti->max_sample_rows * ti->dim <= 4096 &&
                ddp_dataset_sample(tr, i, scratch, &rows, &nrows, &label, &id) == DDP_OK &&
                nrows != ti->max_sample_rows)
                id = -1;
        snprintf(want, sizeof want, tail, (long long)id);
        ddp_status st = ddp_train(ctx, &cfg, &m, tr, va);
        expect_sample_line("ddp_train(model_config NULL, a sample longer than max_positions)", st, trd, want);
        if (!ddp_error_shared()) {
            fprintf(stderr, "FAIL rank %d: the max_positions refusal is not agreed\n", g_rank);
            g_failed = 1;
        }
        if (access(cfg.out_dir, F_OK) == 0) {
            fprintf(stderr, "FAIL rank %d: the max_positions refusal created %s\n", g_rank, cfg.out_dir);
            g_failed = 1;
        }
    }
    if (m.destroy) m.destroy(m.self);
    m = (ddp_model){0};
    /* (2) a cfg.model_config that contradicts the model's: refused on every rank, naming the field */
    expect("ddp_model_create(transformer)", ddp_model_create(ctx, DDP_DEVICE_CPU, &tx, &m), DDP_OK, NULL);
    static const struct {
        const char *what, *line;
    } bad[] = {{"kind mlp",
                "ddp_train: cfg.model_config->kind = DDP_MODEL_MLP, but the model was created with kind = "
                "DDP_MODEL_TRANSFORMER: cfg.model_config must be the configuration given to ddp_model_create, or NULL"},
               {"heads 2", "ddp_train: cfg.model_config->heads = 2, but the model was created with heads = 4: "
                           "cfg.model_config must be the configuration given to ddp_model_create, or NULL"},
               {"max_positions 1024",
                "ddp_train: cfg.model_config->max_positions = 1024, but the model was created with max_positions = "
                "512: cfg.model_config must be the configuration given to ddp_model_create, or NULL"},
               {"dim 5", "ddp_train: cfg.model_config->dim = 5, but the model was created with dim = 4: "
                         "cfg.model_config must be the configuration given to ddp_model_create, or NULL"},
               {"dropout 0.1", "ddp_train: cfg.model_config->dropout = 0.1, but the model was created with dropout = "
                               "0: cfg.model_config must be the configuration given to ddp_model_create, or NULL"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        b = tx;
        if (k == 0) b.kind = DDP_MODEL_MLP;
        if (k == 1) b.heads = 2;
        if (k == 2) b.max_positions = 1024;
        if (k == 3) b.dim = 5;
        if (k == 4) b.dropout = 0.1;
        char what[96];
        snprintf(what, sizeof what, "ddp_train(model_config %s)", bad[k].what);
        cfg = base_cfg(work, "bad");
        cfg.model_config = &b;
        expect_refused(what, ddp_train(ctx, &cfg, &m, tr, va), bad[k].line, cfg.out_dir);
    }
    /* the same configuration with ff spelled out (0 is 2 x hidden) is the model's */
    b = tx, b.ff = 2 * tx.hidden;
    cfg = base_cfg(work, "ff");
    cfg.model_config = &b;
    expect("ddp_train(model_config ff 2 x hidden)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK, NULL);
    /* other workspace sizes or another precision describe the same model (checkpoints record neither): accepted and
     * trained, run.json's activation rows the model's own (sh/capi_misuse.sh reads WORK/ws's) */
    b = tx, b.max_batch_rows = 2 * tx.max_batch_rows;
    cfg = base_cfg(work, "ws");
    cfg.model_config = &b;
    expect("ddp_train(model_config max_batch_rows 2 x the model's)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK, NULL);
    b = tx, b.max_batch_samples = tx.max_batch_samples + 1, b.precision = DDP_PRECISION_BF16;
    cfg = base_cfg(work, "prec");
    cfg.model_config = &b;
    expect("ddp_train(model_config max_batch_samples + 1, precision bf16)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK,
           NULL);
    /* (3) cfg.model_config NULL: the checkpoints record the model's hyperparameters (sh/capi_misuse.sh evaluates
     * WORK/own's with mpiddp eval) */
    cfg = base_cfg(work, "own");
    expect("ddp_train(model_config NULL)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK, NULL);
    if (m.destroy) m.destroy(m.self);
    return g_failed;
}
