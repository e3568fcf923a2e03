/* trainer_loop.h — the trainer's private state, shared by the loop (trainer.c) and its set-up and teardown
 * (trainer_setup.c); the checkpointed part is train_state.h's. */
#ifndef DDP_TRAINER_LOOP_H
#define DDP_TRAINER_LOOP_H
#include "io/dataset.h"
#include "io/loader.h"
#include "mpi_ddp/comm/sync.h"
#include "mpi_ddp/train/evaluate.h"
#include "mpi_ddp/train/metrics.h"
#include "mpi_ddp/train/progress.h"
#include "mpi_ddp/train/test_hooks.h"
#include "mpi_ddp/train/train_state.h"

/* Control floats after the gradients, summed by the same allreduce: the step's sample count, one stop slot per
 * kind of request (DDP_STOP_END, DDP_STOP_REQUEUE: a sum > 0 is the OR of the ranks' requests), then one slot per
 * rank for that rank's rows (zero elsewhere), so every rank learns every rank's load. */
enum { CTL_COUNT, CTL_STOP, CTL_STOP_KINDS = 2, CTL_ROWS = CTL_STOP + CTL_STOP_KINDS };

/* The trainer: the checkpointed state (train_state.h, all trainer_ckpt.c sees) and what only the loop uses. */
typedef struct {
    ddp_train_state state;
    float *grads;          /* device: the flat gradient, then the step's control floats */
    int64_t *toff;         /* tensor offsets [ntensors+1] */
    double *sumsq;         /* [ntensors] squared gradient norms of the step */
    int64_t nctl;          /* CTL_ROWS + world size */
    float *ctl, *ctl_back; /* the step's control floats, host side: sent, and reduced */
    int *val_stop;         /* the validation stop check's two ints, sent and reduced (heap: see teardown) */
    ddp_sync *sync;
    ddp_metrics *metrics;
    ddp_csv *csv, *csv_rank;
    ddp_metric_row row, lrow; /* the last sync point's metrics: reduced, and this rank's */
    ddp_eval_acc eval;
    double lr_last;                 /* learning rate of the last optimizer step (the lr column) */
    int32_t *lens_train, *lens_val; /* token budgets: every sample's rows */
    ddp_progress prog;          /* rank 0's line and the run's pace, the first step (start-up) left out (progress.c) */
    ddp_train_summary *summary; /* optional: the end of the run, for the CLI */
    ddp_test_hooks hooks;       /* MPIDDP_TEST_*, read once (test_hooks.h) */
    int resuming;               /* setup resumed from a checkpoint */
    int wrote;                  /* the run's files were started (run.json and after): a failure keeps its directory */
    ddp_loader_cursor peek;     /* ddp_model.prefetch: the next micro-batch (step -1: none) */
} ddp_trainer;

/* Buffers, the model's initial parameters (rank 0's, broadcast), the gradient sync, the decider, the resume's
 * state and the watch; every step that can fail on one rank alone is agreed before the next collective. */
ddp_status ddp_trainer_setup(ddp_trainer *tr, ddp_dataset *train, ddp_dataset *val);
/* Releases whatever ddp_trainer_setup made, also after a partial set-up. */
void ddp_trainer_teardown(ddp_trainer *tr);
#endif
