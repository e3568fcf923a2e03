/* train_state.h — the trainer's state that checkpoints save and restore, and the functions of trainer_ckpt.c (saves,
 * decisions and top-k files) and trainer_resume.c (resume, the learning-rate schedule it settles), which see only
 * this; the rest of the trainer is private to trainer.c. Not part of the public API. */
#ifndef DDP_TRAIN_STATE_H
#define DDP_TRAIN_STATE_H

#include "io/sampler.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/train/decide.h"
#include "mpi_ddp/train/metrics.h"

/* What checkpoints save and restore: parameters and AdamW moments (device buffers and their host copies), step
 * counters, the position in the epoch order, the learning-rate horizon, the checkpoint decider, and a resume's pending
 * position. The rest of the trainer (gradient sync, metrics, CSV files, validation, test hooks) is trainer.c's. */
typedef struct {
    ddp_ctx *ctx;
    const ddp_train_config *cfg;
    ddp_model *model;
    ddp_backend *be;
    int64_t n;                   /* parameters */
    float *params, *m, *v;       /* device: parameters, AdamW moments */
    float *h_params, *h_m, *h_v; /* host copies: what rank 0 writes and reads, and broadcasts */
    int64_t global_step, optim_step, skipped;
    int64_t epoch, mb;      /* position: next micro-batch of this epoch */
    int64_t nmb;            /* micro-batches of this epoch */
    int64_t lr_total;       /* optimizer steps of the run, the schedule's horizon (ddp_train_state_settle_schedule) */
    const ddp_sampler *tsm; /* the training order (checkpoints record positions in its units) */
    /* a resume's position, converted to micro-batches once the first epoch's plan is known
     * (ddp_train_state_resume_position) */
    int64_t resume_os, resume_pos, resume_legacy_mb; /* -1: none */
    /* the optimizer steps epoch - 1 took as trained (checkpoints record it; -1: unknown); a resume at an epoch's end
     * (its training done): the steps the epoch took in the checkpoint's run (-1 otherwise); a resume in another epoch
     * order than the checkpoint's (whose epochs took other steps) */
    int64_t prev_steps, resume_end_steps;
    int order_changed;
    /* a resume: the checkpoint's learning-rate schedule (known 0: it records none), and the configuration in
     * effect, *cfg with the schedule's span (lr_start_step, lr_end_step) settled by ddp_train_state_settle_schedule;
     * cfg points to cfg_resumed from ddp_train_state_resume on */
    struct {
        int resumed, known, schedule;
        int64_t warmup, start, end;
        double lr, min_lr;
        char path[4400];
    } lr_saved;
    ddp_train_config cfg_resumed;
    const char *lr_horizon; /* run.json's lr_schedule.horizon: "run", "checkpoint" or "restart" (settled) */
    ddp_decider dec;
    char ckpt_dir[4200];
    /* rank 0, a resume with a lower --save-top-k: the top-k files (4800 bytes each, relative to the run directory)
     * dropped from the list, deleted after the first save of last.h5 */
    char *topk_drop;
    int ntopk_drop;
} ddp_train_state;

/* trainer_ckpt.c. The epoch order as checkpoints record it: "full" or "block:<MiB>:<window>". */
void ddp_train_state_shuffle_name(const ddp_train_config *c, char *buf, size_t len);
/* Positions of the epoch's global order consumed after `os` optimizer steps of the epoch (the epoch's end: the number
 * of training samples), the same at every world size and accumulation for one global batch. */
int64_t ddp_train_state_epoch_position(const ddp_train_state *ts, int64_t os);
/* Collective: saves the state at its position (epoch, mb) to ckpt_dir/last.h5. */
ddp_status ddp_train_state_save_last(ddp_train_state *ts);
/* After validation (row: the reduced metrics, lrow: this rank's): the policy's decision, the top-k file,
 * early stopping (*stop). */
ddp_status ddp_train_state_decide(ddp_train_state *ts, const ddp_metric_row *row, const ddp_metric_row *lrow,
                                  int64_t epoch, int *stop);
/* trainer_resume.c. Restores the state from a checkpoint read by rank 0 and broadcast; ntrain: the training set's
 * samples (a checkpoint whose position is all of them was saved at an epoch's end, before its validation). */
ddp_status ddp_train_state_resume(ddp_train_state *ts, const char *path, int64_t ntrain);
/* A resumed run's position in this run's micro-batches (ts->mb), once tsm and nmb hold the epoch's plan of
 * opt_steps optimizer steps; clears the pending position. Every rank computes the same; writes nothing (the last
 * check of a resume, before any file of the run directory is written). */
ddp_status ddp_train_state_resume_position(ddp_train_state *ts, int64_t opt_steps);
/* In every run, before the run directory's files are written: with steps0, the first epoch's optimizer steps (the
 * schedule's horizon is --epochs x steps0; a resume with sample-count batches: the steps done before its epoch, then
 * steps0 an epoch), sets ts->lr_total and settles the learning-rate schedule (a resume keeps the checkpoint's horizon
 * or restarts the decay, --lr-horizon; rank 0 prints one notice when the schedule changes). A warmup longer than the
 * schedule's steps (--fast-dev-run: than --epochs x full0, the first epoch's steps without its limit): DDP_ERR_ARG
 * on every rank (every rank computes the same). Writes nothing. */
ddp_status ddp_train_state_settle_schedule(ddp_train_state *ts, int64_t steps0, int64_t full0);
/* Collective, once run.json is written: records the settled schedule (of total = the run's optimizer steps) there. */
ddp_status ddp_train_state_record_schedule(ddp_train_state *ts, int64_t total);
/* Collective, once every check of a resume has passed (run_files.c): the run directory's files at the start of a run
 * (resuming: from a checkpoint; the metric files and decisions.log keep what precedes its step), the CSV files
 * (*csv on rank 0, *csv_rank with --log-per-rank), the progress board and run.json. */
ddp_status ddp_train_start_files(ddp_train_state *ts, int resuming, const ddp_dataset_info *train,
                                 const ddp_dataset_info *val, ddp_csv **csv, ddp_csv **csv_rank);
/* Rank 0, on resume: dir/decisions.log keeps the lines of decisions at steps <= keep_upto (the ones the resumed run
 * does not take again), rewritten through decisions.log.tmp and a rename; untouched when nothing is after. */
ddp_status ddp_train_state_trim_decisions(const char *dir, int64_t keep_upto);

/* The end of a run, for the summary `mpiddp train` prints (trainer.c). Filled when the run got past set-up and
 * ended normally, by early stopping or on a stop request; the best checkpoint is rank 0's (the top-k list). */
typedef struct {
    int valid, stopped, early_stopped;
    int stop_kinds;                        /* stopped: the DDP_STOP_* kinds the ranks asked for (agreed) */
    int64_t epoch, epochs;                 /* the last epoch trained (0-based; -1: none), of --epochs */
    int64_t step_in_epoch, steps_in_epoch; /* optimizer steps of that epoch done, of its steps (-1: unknown) */
    int64_t global_step;                   /* global optimizer step at the end */
    double wall_s;                         /* ddp_train from start to end */
    double samples, rows;                  /* trained by this run, all ranks (padding duplicates included) */
    double samples_per_s, rows_per_s;      /* over the training steps after the run's first (start-up), as the
                                              progress line; validation and epoch-end checkpoints excluded */
    int token_budget;                      /* --batch-rows: rows/s is the figure that matters (tokens/s) */
    int has_best;                          /* a decision has seen a value (rank 0) */
    int never_finite;                      /* decisions were made (--skip-nonfinite) but none saw a finite value */
    double best_value;
    int64_t best_epoch, best_step; /* -1 with --save-top-k 0 */
    char best_path[4800];          /* "checkpoints/NAME" relative to the run directory; "" when none */
    char monitor[128];
} ddp_train_summary;
/* Collective: ddp_train, and the run's end in *summary (may be NULL). */
/* ddp_train's arguments (train_config.c): cfg (ddp_train_config_check), a model whose callbacks and tensor table
 * can be used, both datasets. Local; DDP_ERR_ARG with one line naming the argument, field or tensor. */
ddp_status ddp_train_args_check(const ddp_train_config *cfg, int world, int cli, const ddp_model *model,
                                const ddp_dataset *train, const ddp_dataset *val);
/* ddp_train_config_check whose lines name the CLI's options (cli != 0: --lr 0) or the C API's fields (cfg.lr = 0);
 * ddp_train_config_check is cli 0, ddp_train passes its ctx's cli_names (optname.h). */
ddp_status ddp_train_config_check_as(const ddp_train_config *cfg, int world, int cli);
/* Collective, after ddp_train_args_check passed on every rank: the ranks were given the same configuration (every
 * setting that shapes the run) and the same tensor table; else DDP_ERR_MISMATCH on every rank, one line naming the
 * first setting that differs and, for a number, two of its values. */
ddp_status ddp_train_args_agree(ddp_ctx *ctx, const ddp_train_config *cfg, const ddp_model *model);
ddp_status ddp_train_summarized(ddp_ctx *ctx, const ddp_train_config *cfg, ddp_model *model, ddp_dataset *train,
                                ddp_dataset *val, ddp_train_summary *summary);

/* Non-zero once the ranks have agreed, at a step or validation batch boundary, to stop on a request: ddp_train is
 * saving last.h5 and returns DDP_STOPPED; 0 while a request waits for that boundary (the CLI's signal thread, which
 * may ask from any thread). Not reset (a stopped process stays stopped). */
int ddp_stop_agreed(void);

#endif
