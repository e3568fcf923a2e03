/* lr_schedule.c — learning-rate schedules on optimizer steps of the global batch: constant, or linear warmup
 * followed by cosine or linear decay to --min-lr (the shapes of PyTorch's LinearLR, CosineAnnealingLR and
 * LambdaLR, and of llm.c's schedulers). See lr_schedule.h and docs/cli.md. */
#include "mpi_ddp/train/lr_schedule.h"

#include <math.h>

const char *ddp_lr_schedule_name(int schedule)
{
    return schedule == DDP_LR_COSINE ? "cosine" : schedule == DDP_LR_LINEAR ? "linear" : "constant";
}

int64_t ddp_lr_warmup_steps(const ddp_train_config *c, int64_t total)
{
    if (!(c->warmup > 0)) return 0;
    if (c->warmup < 1) return (int64_t)ceil(c->warmup * (double)total);
    return (int64_t)c->warmup;
}

double ddp_lr_at(const ddp_train_config *c, int64_t step, int64_t total)
{
    int64_t w = ddp_lr_warmup_steps(c, total);
    if (step < w) return c->lr * (double)(step + 1) / (double)w;
    if (c->lr_schedule == DDP_LR_CONSTANT) return c->lr;
    /* decay over the steps after the warmup: p runs from 0 (first step after it) to 1 (the run's last step) */
    int64_t span = total - w;
    double p = span > 1 ? (double)(step - w) / (double)(span - 1) : 1.0;
    if (p > 1) p = 1;
    double f = c->lr_schedule == DDP_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * p)) : 1.0 - p;
    return c->min_lr + (c->lr - c->min_lr) * f;
}
