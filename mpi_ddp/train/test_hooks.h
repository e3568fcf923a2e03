/* test_hooks.h — the trainer's MPIDDP_TEST_* hooks (docs/cli.md "Test hooks"), read once when a run starts:
 * stop requests at a chosen step or validation batch, slow steps, skewed monitor votes, a trace of trained samples. */
#ifndef DDP_TEST_HOOKS_H
#define DDP_TEST_HOOKS_H

#include "mpi_ddp/core/status.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int rank;
    int64_t stop_at, stop_rank; /* a stop request on rank stop_rank during optimizer step stop_at (1-based; -1: none) */
    int64_t stop_in_val;        /* a stop request on rank 0 before validation batch B (-1: none) */
    int64_t stop_self_rank;     /* this rank stops itself with SIGSTOP as run() starts (-1: none) */
    int64_t step_delay_ms;      /* every step sleeps this long: a job slow enough to be signalled */
    int64_t first_delay_ms;     /* the run's first step sleeps this long as well: a slow start-up */
    const char *monitor_offset; /* "rank:epoch:offset,...": added to one rank's local monitored value */
    FILE *trace;                /* PREFIX.r<rank>: one line "epoch step id..." per trained micro-batch */
} ddp_test_hooks;

/* Reads every hook; opens the trace file when asked (an error if it cannot). */
ddp_status ddp_test_hooks_open(ddp_test_hooks *h, int rank);
void ddp_test_hooks_close(ddp_test_hooks *h);
/* A stop request played on this rank during optimizer step `step` (1-based). */
int ddp_test_hooks_stop_at(const ddp_test_hooks *h, int64_t step);
/* Stops this rank (SIGSTOP, until SIGCONT or SIGKILL) when it is the one asked to stall as training starts. */
void ddp_test_hooks_start(const ddp_test_hooks *h);
/* Sleeps before a step as asked; `first`: the run's first step. */
void ddp_test_hooks_delay(const ddp_test_hooks *h, int first);
/* The offset this rank adds to its local monitored value at `epoch` (0 unless asked). */
double ddp_test_hooks_monitor_offset(const ddp_test_hooks *h, int64_t epoch);
/* Appends one micro-batch's line to the trace, when one is open. */
void ddp_test_hooks_trace(const ddp_test_hooks *h, int64_t epoch, int64_t step, const int64_t *ids, int64_t n);

#endif
