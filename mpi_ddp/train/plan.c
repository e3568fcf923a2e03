/* plan.c — the run's samplers as the trainer sets them up, and the largest micro-batch their plans give this rank
 * (the model's activation buffers: docs/sizing.md). */
#include "mpi_ddp/train/plan.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/ctx.h"
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
                              train->nshards);
    free(sizes);
    DDP_CHECK(ddp_agree_status(ctx, st));
    DDP_CHECK(ddp_agree_status(ctx, ddp_sampler_init(vsm, DDP_SAMPLE_SEQUENTIAL, val->info.num_samples, ctx->topo.size,
                                                     ctx->topo.rank, c->seed, 0, c->batch_size, NULL, 0)));
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
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, train, c->batch_rows, "--batch-rows"));
        DDP_CHECK(ddp_dataset_check_max_rows(ctx, val, c->batch_rows, "--batch-rows"));
        DDP_CHECK(ddp_agree_status(ctx, ddp_sampler_set_budget(tsm, c->batch_rows, c->accumulate, *lens_train,
                                                               train->info.max_sample_rows, sq)));
        DDP_CHECK(ddp_agree_status(
            ctx, ddp_sampler_set_budget(vsm, c->batch_rows, 1, *lens_val, val->info.max_sample_rows, sq)));
    }
    return DDP_OK;
}

/* the largest micro-batch of sampler sm's epoch e, in rows and samples, into *rows and *samples (a running max) */
static ddp_status epoch_max(ddp_sampler *sm, int64_t e, const int32_t *lens, int64_t *idx, uint8_t *pad, int64_t *rows,
                            int64_t *samples)
{
    DDP_CHECK(ddp_sampler_set_epoch(sm, e));
    if (sm->budget > 0) { /* token budgets: one split per optimizer step gives every micro-batch of it */
        for (int64_t os = 0; os < sm->nplan; os++) DDP_CHECK(ddp_sampler_budget_step_max(sm, os, rows, samples));
        return DDP_OK;
    }
    for (int64_t s = 0; s < sm->steps; s++) {
        int64_t n = 0, r = 0;
        DDP_CHECK(ddp_sampler_batch(sm, s, idx, pad, &n));
        for (int64_t i = 0; i < n; i++) r += lens[idx[i]]; /* padding duplicates are read too */
        if (r > *rows) *rows = r;
        if (n > *samples) *samples = n;
    }
    return DDP_OK;
}

ddp_status ddp_plan_max_batch(ddp_ctx *ctx, const ddp_train_config *c, ddp_dataset *train, ddp_dataset *val,
                              int64_t *rows, int64_t *samples)
{
    ddp_sampler tsm = {0}, vsm = {0};
    int32_t *lt = NULL, *lv = NULL;
    *rows = *samples = 0;
    ddp_status st = ddp_plan_samplers(ctx, c, train, val, 1, &tsm, &vsm, &lt, &lv);
    int64_t cap = tsm.max_samples > vsm.max_samples ? tsm.max_samples : vsm.max_samples;
    int64_t *idx = st == DDP_OK ? ddp_calloc((size_t)(cap > 0 ? cap : 1), sizeof *idx) : NULL;
    uint8_t *pad = st == DDP_OK ? ddp_calloc((size_t)(cap > 0 ? cap : 1), 1) : NULL;
    if (st == DDP_OK && (!idx || !pad)) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for the batch plan");
    int epochs = c->fast_dev_run > 0 ? 1 : c->epochs;
    for (int64_t e = 0; st == DDP_OK && e < epochs; e++) st = epoch_max(&tsm, e, lt, idx, pad, rows, samples);
    if (st == DDP_OK) st = epoch_max(&vsm, 0, lv, idx, pad, rows, samples);
    free(idx), free(pad);
    ddp_sampler_free(&tsm), ddp_sampler_free(&vsm);
    free(lt), free(lv);
    if (st == DDP_OK && *rows < 1) *rows = 1, *samples = *samples > 0 ? *samples : 1; /* an empty rank still builds */
    return ddp_agree_status(ctx, st);
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
