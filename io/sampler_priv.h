/* sampler_priv.h — what the sampler's files share (sampler.c: the order and the batches of each rank;
 * sampler_blocks.c: --shuffle block; sampler_budget.c: token-budget plans and their split). Not public. */
#ifndef DDP_SAMPLER_PRIV_H
#define DDP_SAMPLER_PRIV_H

#include "io/permute.h"
#include "io/sampler.h"

/* --shuffle block: the epoch's block order (pure: seed, epoch, blocks), and the sample at position p. */
void ddp_sampler_make_block_order(ddp_sampler *s);
int64_t ddp_sampler_block_order_at(const ddp_sampler *s, int64_t p);
/* Token budgets: the epoch's plan of optimizer steps, and this rank's share of micro-batch m of step os. */
ddp_status ddp_sampler_make_plan(ddp_sampler *s);
ddp_status ddp_sampler_budget_batch(const ddp_sampler *s, int64_t os, int64_t m, int64_t *indices, uint8_t *is_pad,
                                    int64_t *count);

#endif
