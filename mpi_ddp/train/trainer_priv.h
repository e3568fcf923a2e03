/* trainer_priv.h — the trainer's state, shared by trainer.c (set-up, the epoch loop, steps, validation) and
 * trainer_ckpt.c (checkpoint saves, decisions and top-k files, resume). Not part of the public API. */
#ifndef DDP_TRAINER_PRIV_H
#define DDP_TRAINER_PRIV_H

#include "io/dataset.h"
#include "io/sampler.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/evaluate.h"
#include "mpi_ddp/train/metrics.h"
#include "mpi_ddp/comm/sync.h"

#include <stdio.h>

/* the step's control floats after the gradients: sample count, stop flag, then each rank's rows */
enum { CTL_COUNT, CTL_STOP, CTL_ROWS };

typedef struct {
    ddp_ctx *ctx;
    const ddp_train_config *cfg;
    ddp_model *model;
    ddp_backend *be;
    int64_t n;                 /* parameters */
    float *params, *grads, *m, *v;
    float *h_params, *h_m, *h_v;
    int64_t *toff;             /* tensor offsets [ntensors+1] */
    double *sumsq;             /* [ntensors] squared gradient norms of the step */
    int64_t nctl;              /* CTL_ROWS + world size */
    float *ctl, *ctl_back;     /* the step's control floats, host side: sent, and reduced */
    ddp_sync *sync;
    ddp_metrics *metrics;
    ddp_csv *csv, *csv_rank;
    int64_t global_step, optim_step, skipped;
    int64_t test_stop_at, test_stop_rank; /* MPIDDP_TEST_STOP_AT_STEP / _RANK, read once */
    int64_t test_step_delay_ms;           /* MPIDDP_TEST_STEP_DELAY_MS: a slower job for signal tests */
    FILE *trace;                          /* MPIDDP_TEST_TRACE_SAMPLES=PREFIX: each rank writes PREFIX.r<rank>, one
                                             line "epoch step id..." per micro-batch it trains (tests) */
    ddp_metric_row row, lrow;
    int tty;
    char ckpt_dir[4200];
    ddp_eval_acc eval;
    ddp_decider dec;
    int64_t epoch, mb;         /* position: next micro-batch of this epoch */
    int64_t nmb;               /* micro-batches of this epoch */
    int64_t lr_total;          /* optimizer steps of the run, the schedule's horizon: epochs x the first epoch's */
    double lr_last;            /* learning rate of the last optimizer step (the lr column) */
    const ddp_sampler *tsm;    /* the training order (checkpoints record positions in its units) */
    /* a resume's position, converted to micro-batches once the first epoch's plan is known (run) */
    int64_t resume_os, resume_pos, resume_legacy_mb; /* -1: none */
    int32_t *lens_train, *lens_val; /* token budgets: every sample's rows */
} trainer;

/* trainer_ckpt.c */
ddp_status ddp_trainer_save_last(trainer *t);
/* After validation: the policy's decision, the top-k file, early stopping. */
ddp_status ddp_trainer_decide(trainer *t, int64_t epoch, int *stop);
/* Restores the state from a checkpoint read by rank 0 and broadcast. */
ddp_status ddp_trainer_resume(trainer *t, const char *path);
/* Positions of the epoch's global order consumed after `os` optimizer steps of the epoch (the epoch's end:
 * the number of training samples), the same at every world size and accumulation for one global batch. */
int64_t ddp_trainer_epoch_position(const trainer *t, int64_t os);
/* Temporary files of a save that was killed before its rename. */
void ddp_trainer_remove_stale_tmp(const char *dir);

#endif
