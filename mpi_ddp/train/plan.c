/* plan.c — the run's samplers as the trainer sets them up, and the largest micro-batch their plans give this rank
 * (the model's activation buffers: docs/sizing.md). */
#include "mpi_ddp/train/plan.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/model/models.h"

#include <stdlib.h>

ddp_status ddp_plan_samplers(ddp_ctx *ctx, const ddp_train_config *c, ddp_dataset *train, ddp_dataset *val,
                             int want_lens, ddp_sampler *tsm, ddp_sampler *vsm, int32_t **lens_train,
                             int32_t **lens_val)
{
    ddp_status st = DDP_OK;
    *lens_train = *lens_val = NULL;
    int64_t *sizes = ddp_calloc((size_t)train->nshards, sizeof *sizes);
    if (!sizes) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld shard sizes", (long long)train->nshards);
    for (int64_t i = 0; sizes && i < train->nshards; i++) sizes[i] = train->shards[i].meta.n;
    if (sizes)
        st = ddp_sampler_init(tsm, c->sampling_shard ? DDP_SAMPLE_SHARD : DDP_SAMPLE_GLOBAL, train->info.num_samples,
                              ctx->topo.size, ctx->topo.rank, c->seed, c->drop_last, c->batch_size, sizes,
                              train->nshards, ctx->cli_names);
    free(sizes);
    DDP_CHECK(ddp_agree_status(ctx, st));
    DDP_CHECK(
        ddp_agree_status(ctx, ddp_sampler_init(vsm, DDP_SAMPLE_SEQUENTIAL, val->info.num_samples, ctx->topo.size,
                                               ctx->topo.rank, c->seed, 0, c->batch_size, NULL, 0, ctx->cli_names)));
    if (c->batch_rows > 0 || c->shuffle_block || want_lens) DDP_CHECK(ddp_dataset_row_counts(ctx, train, lens_train));
    if (c->batch_rows > 0 || want_lens) DDP_CHECK(ddp_dataset_row_counts(ctx, val, lens_val));
    if (c->shuffle_block) { /* blocks of consecutive samples within each shard, permuted per epoch */
        int64_t *first = ddp_calloc((size_t)train->nshards + 1, sizeof *first);
        if (!first) return ddp_agree_status(ctx, ddp_set_error(DDP_ERR_NOMEM, "out of memory"));
        for (int64_t k = 0; k < train->nshards; k++) first[k] = train->shards[k].meta.first;
        first[train->nshards] = train->info.num_samples;
        st = ddp_sampler_set_blocks(tsm, *lens_train, train->info.dim, first, train->nshards,
                                    c->shuffle_block_mb * 1048576.0, c->shuffle_window);
        free(first);
        DDP_CHECK(ddp_agree_status(ctx, st));
    }
    if (c->batch_rows > 0) { /* token budgets: every sample's rows, then the plans (docs/distributed.md) */
        double sq = ddp_model_cost_sq(c->model_config); /* a user's own model: rows only */
        const char *opt = ddp_opt_name(ctx->cli_names, DDP_OPT_BATCH_ROWS);
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, train, c->batch_rows, opt));
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, val, c->batch_rows, opt));
        DDP_CHECK(ddp_agree_status(ctx, ddp_sampler_set_budget(tsm, c->batch_rows, c->accumulate, *lens_train,
                                                               train->info.max_sample_rows, sq)));
        DDP_CHECK(ddp_agree_status(
            ctx, ddp_sampler_set_budget(vsm, c->batch_rows, 1, *lens_val, val->info.max_sample_rows, sq)));
    }
    return DDP_OK;
}

ddp_status ddp_plan_walk(ddp_sampler *sm, const int32_t *lens, int64_t epochs, int64_t steps, int64_t *rows,
                         int64_t *samples)
{
    int64_t cap = sm->max_samples > 0 ? sm->max_samples : 1, left = steps;
    int64_t *idx = ddp_calloc((size_t)cap, sizeof *idx);
    uint8_t *pad = ddp_calloc((size_t)cap, 1);
    ddp_status st = idx && pad ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory for the batch plan");
    for (int64_t e = 0; st == DDP_OK && (steps < 0 ? e < epochs : left > 0); e++) {
        st = ddp_sampler_set_epoch(sm, e);
        if (st == DDP_OK && sm->steps == 0) break;
        if (st == DDP_OK && steps < 0 && sm->budget > 0) { /* token budgets: one split serves a step's micro-batches */
            for (int64_t os = 0; st == DDP_OK && os < sm->nplan; os++)
                st = ddp_sampler_budget_step_max(sm, os, rows, samples);
            continue;
        }
        for (int64_t k = 0; st == DDP_OK && k < sm->steps && (steps < 0 || left-- > 0); k++) {
            int64_t n = 0, r = 0;
            st = ddp_sampler_batch(sm, k, idx, pad, &n);
            for (int64_t i = 0; st == DDP_OK && i < n; i++) r += lens[idx[i]]; /* padding duplicates are read too */
            if (r > *rows) *rows = r;
            if (n > *samples) *samples = n;
        }
    }
    free(idx), free(pad);
    return st;
}

ddp_status ddp_plan_max_batch(ddp_ctx *ctx, const ddp_train_config *c, ddp_dataset *train, ddp_dataset *val,
                              int64_t *rows, int64_t *samples)
{
    ddp_sampler tsm = {0}, vsm = {0};
    int32_t *lt = NULL, *lv = NULL;
    *rows = *samples = 0;
    ddp_status st = ddp_plan_samplers(ctx, c, train, val, 1, &tsm, &vsm, &lt, &lv);
    if (st == DDP_OK) st = ddp_plan_walk(&tsm, lt, c->fast_dev_run > 0 ? 1 : c->epochs, -1, rows, samples);
    if (st == DDP_OK) st = ddp_plan_walk(&vsm, lv, 1, -1, rows, samples);
    ddp_sampler_free(&tsm), ddp_sampler_free(&vsm);
    if (st == DDP_OK && *rows < 1) *rows = 1, *samples = *samples > 0 ? *samples : 1; /* an empty rank still builds */
    st = ddp_agree_status(ctx, st);
    /* the trainer's samplers read the counts again where they need them (ddp_plan_samplers): hand them over */
    const int keep_t = st == DDP_OK && (c->batch_rows > 0 || c->shuffle_block),
              keep_v = st == DDP_OK && c->batch_rows > 0;
    ddp_dataset_keep_row_counts(train, keep_t ? lt : NULL);
    ddp_dataset_keep_row_counts(val, keep_v ? lv : NULL);
    if (!keep_t) free(lt);
    if (!keep_v) free(lv);
    return st;
}

int ddp_plan_wanted(ddp_device device)
{
    int64_t k = ddp_knob_int(DDP_KNOB_PLAN_BUFFERS);
    return k < 0 ? device == DDP_DEVICE_CUDA : k != 0;
}

ddp_status ddp_plan_agree(ddp_ctx *ctx, ddp_device device, int *want)
{
    int w = ddp_plan_wanted(device); /* rank 0's: an environment that differs between ranks cannot split them */
    MPI_CHECK(MPI_Bcast(&w, 1, MPI_INT, 0, ctx->world));
    *want = w;
    return DDP_OK;
}
