/* plan.h — the run's samplers, set up as the trainer reads with them, and the largest micro-batch they give this
 * rank over the run: what the model's activation buffers are sized to (docs/sizing.md). */
#ifndef DDP_PLAN_H
#define DDP_PLAN_H

#include "io/dataset.h"
#include "io/sampler.h"
#include "mpiddp.h"

/* Collective. The training and validation samplers of configuration c (shard or global order, --shuffle block,
 * token budgets); *lens_train and *lens_val: every sample's rows where the samplers need them (token budgets,
 * --shuffle block) or want_lens is set, else NULL; the caller frees them after the samplers. */
ddp_status ddp_plan_samplers(ddp_ctx *ctx, const ddp_train_config *c, ddp_dataset *train, ddp_dataset *val,
                             int want_lens, ddp_sampler *tsm, ddp_sampler *vsm, int32_t **lens_train,
                             int32_t **lens_val);
/* Local. The most rows and samples of sm's micro-batches (a running max into *rows and *samples; lens: every sample's
 * rows): every step of epochs 0 .. epochs - 1 when steps < 0, else the first `steps` micro-batches from epoch 0 on,
 * epoch after epoch. Leaves sm at the last epoch it walked. */
ddp_status ddp_plan_walk(ddp_sampler *sm, const int32_t *lens, int64_t epochs, int64_t steps, int64_t *rows,
                         int64_t *samples);
/* Collective. The most rows and samples one micro-batch of this rank holds in any epoch of the run (epochs of c;
 * one with --fast-dev-run) and in a validation pass: the samplers' plans are deterministic, so this is the
 * largest batch the run will read, not the bound batch x longest sample. */
ddp_status ddp_plan_max_batch(ddp_ctx *ctx, const ddp_train_config *c, ddp_dataset *train, ddp_dataset *val,
                              int64_t *rows, int64_t *samples);

/* Whether train sizes the model's buffers by ddp_plan_max_batch on this device: MPIDDP_PLAN_BUFFERS, by default on
 * a GPU only (device memory is committed when allocated; untouched host pages cost nothing). */
int ddp_plan_wanted(ddp_device device);
/* Collective: rank 0's ddp_plan_wanted, on every rank (it decides collective calls). */
ddp_status ddp_plan_agree(ddp_ctx *ctx, ddp_device device, int *want);

#endif
