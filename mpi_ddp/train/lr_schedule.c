/* lr_schedule.c — learning-rate schedules on optimizer steps of the global batch: constant, or linear warmup then
 * cosine or linear decay to --min-lr (the shapes of PyTorch's LinearLR, CosineAnnealingLR and LambdaLR, and of llm.c's
 * schedulers), over the run's steps or the span a resume set. See lr_schedule.h and docs/cli.md. */
#include "mpi_ddp/train/lr_schedule.h"

#include <math.h>
#include <string.h>

const char *ddp_lr_schedule_name(int schedule)
{
    return schedule == DDP_LR_COSINE ? "cosine" : schedule == DDP_LR_LINEAR ? "linear" : "constant";
}

int ddp_lr_schedule_id(const char *name)
{
    for (int s = DDP_LR_CONSTANT; s <= DDP_LR_LINEAR; s++)
        if (name && !strcmp(name, ddp_lr_schedule_name(s))) return s;
    return -1;
}

void ddp_lr_span(const ddp_train_config *c, int64_t total, int64_t *start, int64_t *end)
{
    *start = c->lr_end_step > 0 ? c->lr_start_step : 0;
    *end = c->lr_end_step > 0 ? c->lr_end_step : total;
}

int64_t ddp_lr_warmup_steps(const ddp_train_config *c, int64_t total)
{
    int64_t start, end;
    ddp_lr_span(c, total, &start, &end);
    if (!(c->warmup > 0)) return 0;
    if (c->warmup < 1) return (int64_t)ceil(c->warmup * (double)(end > start ? end - start : 0));
    return (int64_t)c->warmup;
}

double ddp_lr_at(const ddp_train_config *c, int64_t step, int64_t total)
{
    int64_t start, end;
    ddp_lr_span(c, total, &start, &end);
    int64_t w = ddp_lr_warmup_steps(c, total), s = step > start ? step - start : 0, span = end - start;
    if (s < w) return c->lr * (double)(s + 1) / (double)w;
    if (c->lr_schedule == DDP_LR_CONSTANT) return c->lr;
    /* decay over the span's steps after the warmup: p runs from 0 (the first step after it) to 1 (the span's last
     * step), and stays 1 past the span; a decay of one step is its first step (p = 0, the peak lr) */
    int64_t decay = span - w;
    double p = s >= span ? 1.0 : decay > 1 ? (double)(s - w) / (double)(decay - 1) : 0.0;
    if (p > 1) p = 1;
    double f = c->lr_schedule == DDP_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * p)) : 1.0 - p;
    return c->min_lr + (c->lr - c->min_lr) * f;
}
