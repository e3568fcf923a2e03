/* decide.h — checkpoint and early-stop decisions after validation, made once and broadcast so every rank acts alike:
 * `reduced` (rank 0 on the reduced monitor), `rank0` (rank 0's local value), or Lightning-style votes on each rank's
 * local value: `all` (Lightning's behaviour), `any`, `majority`. Keeps the top-k list (rank 0 writes and removes). */
#ifndef DDP_DECIDE_H
#define DDP_DECIDE_H

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/train/metrics.h"

typedef enum {
    DDP_POLICY_REDUCED = 0,
    DDP_POLICY_RANK0,
    DDP_POLICY_ALL,
    DDP_POLICY_ANY,
    DDP_POLICY_MAJORITY
} ddp_policy;

#define DDP_TOPK_MAX 64

typedef struct {
    double value; /* ranking value (the policy's view of the monitor) */
    int64_t epoch, step;
    char path[4800];
} ddp_topk_entry;

typedef struct {
    ddp_policy policy;
    char monitor[128];
    int mode_max;           /* 1: higher is better */
    int top_k;              /* files to keep; 0 = none */
    int patience;           /* epochs without improvement before stopping; 0 = never */
    double min_delta;       /* early stopping's alone: which files are saved and kept depends on the values only */
    int nonfinite_continue; /* a non-finite monitor: 0 (default) stops the run with one line (DDP_ERR_NUMERIC on
                               every rank); 1 takes it as "no improvement, no save" and goes on */
    double monitor_count;   /* input: the monitor's count over all ranks at this sync (ddp_metrics_count): 0 says a
                               nan global value means no rank logged a sample for it; -1 (init) unknown */
    /* state, saved in checkpoints */
    double best;          /* policy view's best (for early stopping) */
    double best_local;    /* this rank's best local value for the save vote (moves on a combined save) */
    double best_local_es; /* this rank's best for early stopping's vote (moves on a combined improvement) */
    int64_t bad_epochs;   /* consecutive non-improving decisions */
    int ntopk;            /* rank 0 */
    ddp_topk_entry topk[DDP_TOPK_MAX];
} ddp_decider;

typedef struct {
    int save;        /* write a top-k checkpoint now */
    int stop;        /* early stop after this epoch */
    double value;    /* the policy's view of the monitor (for file names and logs) */
    int drop;        /* index in topk of a file to delete after saving, -1 none */
    int nonfinite;   /* the policy's view (votes: some rank's local value) was NaN or Inf: no save */
    char note[1024]; /* one line for the log: the decision and, for votes, who voted how */
} ddp_decision;

void ddp_decider_init(ddp_decider *d, ddp_policy policy, const char *monitor, int mode_max, int top_k, int patience,
                      double min_delta);
/* Collective. global: reduced row (complete on rank 0); local: this rank's own row. A monitored value that is NaN
 * or Inf never saves and never improves; unless d->nonfinite_continue, it is an error on every rank ("val/loss is
 * nan after epoch E (step S): not finite ..."), as Lightning's EarlyStopping(check_finite=True) stops the run.
 * A save needs a value that beats (the worst kept, or for the votes each rank's own best) plainly; early stopping's
 * improvement needs it by more than min_delta. A rank whose local row lacks the monitor and whose val/count is 0 (it
 * evaluated no sample) abstains from the votes; with no value to decide on (no rank has one; rank 0 has none under
 * rank0) every rank returns DDP_ERR_ARG with one line. */
ddp_status ddp_decide(ddp_ctx *ctx, ddp_decider *d, const ddp_metric_row *global, const ddp_metric_row *local,
                      int64_t epoch, int64_t step, ddp_decision *out);
/* After the top-k file for out was written (rank 0): updates the list (an entry of the same path is replaced, not
 * repeated), returns the file to remove (or ""). */
void ddp_decider_commit(ddp_decider *d, const ddp_decision *out, int64_t epoch, int64_t step, const char *path,
                        char *removed, size_t n);
/* Rank 0: while the list holds more than top_k files (a resume with a lower --save-top-k), drops the worst entry
 * and returns 1 with its path in removed (the caller deletes the file); 0 when the list fits. */
int ddp_decider_trim(ddp_decider *d, char *removed, size_t n);
/* `epoch=E-step=S-<monitor>=V.h5`, '/' in the monitor name written as '_'. */
void ddp_topk_name(char *buf, size_t n, const ddp_decider *d, int64_t epoch, int64_t step, double value);

#endif
