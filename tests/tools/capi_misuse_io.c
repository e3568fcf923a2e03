/* capi_misuse_io.c — capi_misuse's cases whose lines come from below the trainer (the sampler, the open-shard
 * cache, the CPU backend's bf16 state, the non-finite diagnoses): each names what a C-API program sets (cfg.FIELD),
 * never the CLI's option (the rest of the program is capi_misuse.c). */
#include "capi_misuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CASES[] = {"sampler", "shard_cache", "bf16_nomem", "nonfinite_grad", "nonfinite_val"};

int is_io_case(const char *c)
{
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (!strcmp(c, CASES[i])) return 1;
    return 0;
}

/* an MLP of the dataset's sizes, batches of 4 (nonfinite_*, bf16_nomem) */
static ddp_model_config mlp_of(const ddp_dataset *tr, const ddp_dataset *va)
{
    const ddp_dataset_info *ti = ddp_dataset_get_info(tr), *vi = ddp_dataset_get_info(va);
    ddp_model_config mc;
    ddp_model_config_default(&mc);
    mc.kind = DDP_MODEL_MLP, mc.dim = ti->dim, mc.classes = ti->num_classes, mc.hidden = 8;
    mc.max_batch_samples = 8;
    mc.max_batch_rows = 8 * (ti->max_sample_rows > vi->max_sample_rows ? ti->max_sample_rows : vi->max_sample_rows);
    return mc;
}

/* sampler: shard sampling with fewer shards than ranks (np >= 2; VAL has one shard, TRAIN two), and cfg.drop_last
 * with fewer samples than ranks (WORK/tiny: one sample, written by the script).
 * shard_cache: a batch reading more shards at once than MPIDDP_MAX_OPEN_SHARDS=2 allows (set here, before ddp_init).
 * bf16_nomem: cfg.precision bf16 on the CPU with the bf16 operands' allocation failed (the script sets
 * MPIDDP_TEST_FAIL_ALLOC, which fails rank 0 alone: at np 2 its ddp_finalize then leaves MPI_Finalize alone, which
 * would wait for rank 1 in the step's allreduce). nonfinite_grad: a NaN feature in TRAIN; nonfinite_val: one in VAL
 * (sh/nonfinite.sh). */
int io_cases(int argc, char **argv, const char *trd, const char *vad, const char *work)
{
    if (!strcmp(g_case, "shard_cache")) setenv("MPIDDP_MAX_OPEN_SHARDS", "2", 1);
    ddp_ctx *ctx = NULL;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 3;
    }
    g_rank = ddp_topo(ctx)->rank;
    int size = ddp_topo(ctx)->size;
    ddp_dataset *tr = NULL, *va = NULL, *tiny = NULL;
    expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
    expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
    char line[8400];
    if (!tr || !va) {
        g_failed = 1;
    } else if (!strcmp(g_case, "sampler")) {
        ddp_model m = user_model(tr);
        ddp_train_config cfg = base_cfg(work, "shard");
        cfg.sampling_shard = 1;
        if (size >= 2) { /* whole shards to ranks: rank nshards is the first without one */
            ddp_dataset *ds = size > 2 ? tr : va;
            int64_t ns = size > 2 ? 2 : 1;
            snprintf(line, sizeof line,
                     "cfg.sampling_shard = 1: rank %lld gets no samples (%lld shards for %d ranks); use "
                     "cfg.sampling_shard = 0 or more shards",
                     (long long)ns, (long long)ns, size);
            expect_is("ddp_train(sampling_shard 1, fewer shards than ranks)", ddp_train(ctx, &cfg, &m, ds, va),
                      DDP_ERR_ARG, line);
        }
        char tdir[4200];
        snprintf(tdir, sizeof tdir, "%s/tiny", work);
        expect("ddp_dataset_open(tiny)", ddp_dataset_open(ctx, tdir, &tiny), DDP_OK, NULL);
        cfg = base_cfg(work, "drop"), cfg.drop_last = 1;
        if (tiny && size >= 2) {
            snprintf(line, sizeof line,
                     "sampler: cfg.drop_last = 1 leaves rank 0 with no samples (1 samples for %d ranks)", size);
            expect_is("ddp_train(drop_last 1, fewer samples than ranks)", ddp_train(ctx, &cfg, &m, tiny, va),
                      DDP_ERR_ARG, line);
        }
    } else if (!strcmp(g_case, "shard_cache")) { /* validation's one shard passes; training's batches read both */
        ddp_model m = user_model(tr);
        ddp_train_config cfg = base_cfg(work, "cache");
        snprintf(line, sizeof line,
                 "%s: the batch of step 0 (epoch 0) on rank 0 reads 2 shard files at once, more than the 1 the "
                 "open-shard budget allows (MPIDDP_MAX_OPEN_SHARDS=2); raise MPIDDP_MAX_OPEN_SHARDS, or lower "
                 "cfg.batch_size/cfg.batch_rows",
                 trd);
        expect_is("ddp_train(MPIDDP_MAX_OPEN_SHARDS=2)", ddp_train(ctx, &cfg, &m, tr, va), DDP_ERR_ARG, line);
    } else if (!strcmp(g_case, "bf16_nomem")) { /* the byte count is the machine's (oneDNN: 2 bytes, else 4) */
        ddp_model_config mc = mlp_of(tr, va);
        expect_api("ddp_train(precision bf16, its operands' allocation failed)",
                   train_builtin(ctx, work, "bf16", &mc, NULL, DDP_PRECISION_BF16, tr, va), DDP_ERR_NOMEM,
                   " bytes for the GEMM operands rounded to bf16 (cfg.precision = DDP_PRECISION_BF16)");
    } else if (!strcmp(g_case, "nonfinite_grad")) { /* sh/nonfinite.sh checks the whole line */
        ddp_model_config mc = mlp_of(tr, va);
        expect_api("ddp_train(a NaN feature in the training data)",
                   train_builtin(ctx, work, "grad", &mc, NULL, DDP_PRECISION_FP32, tr, va), DDP_ERR_NUMERIC,
                   " sample(s) of the step hold non-finite features (mpiddp inspect finds them before training; "
                   "cfg.skip_nonfinite = 1 skips such steps)");
    } else if (!strcmp(g_case, "nonfinite_val")) {
        ddp_model_config mc = mlp_of(tr, va);
        expect_api("ddp_train(a NaN feature in the validation data)",
                   train_builtin(ctx, work, "val", &mc, NULL, DDP_PRECISION_FP32, tr, va), DDP_ERR_NUMERIC,
                   "so it can neither rank checkpoints nor stop early (a NaN or Inf in the validation data? mpiddp "
                   "inspect names it; cfg.skip_nonfinite = 1 goes on without saving)");
    }
    ddp_dataset_close(tiny);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    ddp_status fst = ddp_finalize(ctx);
    if (!strcmp(g_case, "bf16_nomem") && size > 1 && g_rank == 0) /* failed alone: rank 1 waits in the step's
                                                                   * allreduce; MPI_Finalize would wait for it */
        expect("ddp_finalize after ddp_train failed on this rank alone", fst, DDP_ERR_MISMATCH,
               "ddp_finalize: MPI not finalized: this rank failed alone, the others perhaps waiting in a "
               "collective (out of memory: ");
    else
        expect("ddp_finalize", fst, DDP_OK, NULL);
    return g_failed;
}
