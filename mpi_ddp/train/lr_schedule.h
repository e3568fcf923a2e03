/* lr_schedule.h — the learning rate of each optimizer step (--lr-schedule, --warmup-steps, --min-lr, and the
 * horizon a resume keeps or restarts: --lr-horizon). */
#ifndef DDP_LR_SCHEDULE_H
#define DDP_LR_SCHEDULE_H

#include "mpiddp.h"

/* The optimizer steps [*start, *end) the schedule spans in a run of `total` optimizer steps: [0, total), or
 * [c->lr_start_step, c->lr_end_step) when lr_end_step > 0 (a resume sets them: the checkpoint's horizon kept,
 * or a decay restarted at the resumed step). */
void ddp_lr_span(const ddp_train_config *c, int64_t total, int64_t *start, int64_t *end);
/* Warmup length in optimizer steps: --warmup-steps N (N >= 1), or a fraction in (0, 1) of the span's steps. */
int64_t ddp_lr_warmup_steps(const ddp_train_config *c, int64_t total);
/* The learning rate of the optimizer step with 0-based global index `step`, s = step - start steps into the
 * span [start, end) of ddp_lr_span: (s + 1) / warmup x lr during the warmup, then constant, or cosine / linear
 * from lr at the first step after the warmup down to --min-lr at step end - 1, and --min-lr after. A decay of
 * one step keeps the peak lr (there is nothing to decay over; PyTorch's CosineAnnealingLR(T_max = 0) divides by
 * zero). A function of these numbers only: the same at every world size and accumulation, and on resume. */
double ddp_lr_at(const ddp_train_config *c, int64_t step, int64_t total);
const char *ddp_lr_schedule_name(int schedule);
/* DDP_LR_* of a name ddp_lr_schedule_name gives; -1 for another. */
int ddp_lr_schedule_id(const char *name);

#endif
