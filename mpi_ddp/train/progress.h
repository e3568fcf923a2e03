/* progress.h — rank 0's view of a run's pace: the progress line (in place on a terminal, lines elsewhere), the
 * throughput with the run's first step (start-up) left out, the time left, and the end-of-run summary. */
#ifndef DDP_PROGRESS_H
#define DDP_PROGRESS_H

#include "mpi_ddp/train/train_state.h"

typedef struct {
    int tty;                        /* rank 0: the line is rewritten in place (ddp_progress_init) */
    int line_open;                  /* an in-place line is on the terminal, not yet ended by a newline */
    int warm;                       /* the run's first step is done */
    double first_dt, first_samples; /* that step's seconds and samples (the only figure when an event comes at it) */
    double warm_t;                  /* when the first step ended */
    int64_t warm_step;              /* global step then */
    double loop_s, loop_samples, loop_rows; /* after the first step: seconds in training loops, samples and rows */
    double samples_all, rows_all;           /* every step of this run */
} ddp_progress;

/* tty: rank 0 with the line on, and its stderr a terminal (or mpirun's, when mpirun started it on this node). */
void ddp_progress_init(ddp_progress *p, int rank0_with_line);
/* Ends an in-place line before anything else goes to stderr. */
void ddp_progress_end_line(ddp_progress *p);
/* Counts a training step that ran from t_step to t_end; 1 when it was the run's first (start-up). */
int ddp_progress_step(ddp_progress *p, double t_step, double t_end, double samples, double rows, int64_t global_step);
/* Seconds left for the steps up to total_steps at the pace since the first step; < 0 when not known. */
double ddp_progress_eta(const ddp_progress *p, double now, int64_t global_step, int64_t total_steps);
/* The line (docs/cli.md): epoch E (of N) step K/M (global S) loss L R samples/s ETA T. Rank 0 with the line on. */
void ddp_progress_line(ddp_progress *p, const ddp_train_state *ts, int epoch, int64_t step, int64_t steps, double loss,
                       double sps, double eta);
/* Fills *sm (may be NULL) with where the run ended, its throughput and the best checkpoint of rank 0's top-k list. */
void ddp_progress_summarize(const ddp_progress *p, const ddp_train_state *ts, ddp_train_summary *sm, int64_t last_epoch,
                            int64_t last_k, int64_t opt_steps, int epochs, int stopped, int early);

#endif
