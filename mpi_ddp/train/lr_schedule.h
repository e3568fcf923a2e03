/* lr_schedule.h — the learning rate of each optimizer step (--lr-schedule, --warmup-steps, --min-lr). */
#ifndef DDP_LR_SCHEDULE_H
#define DDP_LR_SCHEDULE_H

#include "mpiddp.h"

/* Warmup length in optimizer steps: --warmup-steps N (N >= 1), or a fraction in (0, 1) of total steps. */
int64_t ddp_lr_warmup_steps(const ddp_train_config *c, int64_t total);
/* The learning rate of the optimizer step with 0-based global index `step` in a run of `total` optimizer
 * steps: (step + 1) / warmup x lr during the warmup, then constant, or cosine / linear from lr down to
 * --min-lr at step total - 1 (and --min-lr after). A function of these numbers only: the same at every
 * world size and accumulation, and on resume. */
double ddp_lr_at(const ddp_train_config *c, int64_t step, int64_t total);
const char *ddp_lr_schedule_name(int schedule);

#endif
