/* stop_signals.h — stop requests delivered to one waiting thread instead of a handler on whichever thread the
 * kernel picks (a oneDNN JIT kernel may run with its stack pointer inside heap memory). */
#ifndef DDP_APP_STOP_SIGNALS_H
#define DDP_APP_STOP_SIGNALS_H

/* Blocks SIGUSR1, SIGUSR2, SIGTERM and SIGINT in the calling thread; every thread created after inherits the mask.
 * Call before MPI_Init and before any library starts a thread. Returns 0, or -1 on failure. */
int cli_stop_signals_block(void);
/* Starts the thread that waits for the blocked signals and turns each into ddp_request_stop_kind(): SIGUSR1 and
 * SIGUSR2 (the time-limit warning) ask DDP_STOP_REQUEUE, SIGTERM and SIGINT DDP_STOP_END. A signal that arrived
 * between the two calls is pending and taken at once. Returns 0, or -1 on failure. */
int cli_stop_signals_start(void);
/* The kinds (DDP_STOP_* bits) whose signals become stop requests; a signal of another kind takes its default action
 * and ends the process (the default: none armed). */
void cli_stop_signals_arm(int kinds);
/* From now until cli_stop_signals_settle (train, while it trains): a stop signal 2 s or more after the first, taken
 * while this rank has waited 2 s or more in a bracketed MPI collective (ddp_wait_blocked_s) and the ranks have not
 * agreed the stop (ddp_stop_agreed), prints one notice naming rank (once) that the stop waits for a step boundary;
 * nothing is escalated. */
void cli_stop_signals_training(int rank);
void cli_stop_signals_settle(void);
/* The last stop signal taken (0: none). */
int cli_stop_signal_received(void);
/* The commands other than train: SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 first remove the temporary the process
 * is writing (ddp_register_temporary: a shard's, the manifest's) and what a synth's or pack's run made
 * (ddp_register_signal_cleanup: its shards, lock file and --out), then take their default action. Returns 0, or -1 on
 * failure. */
int cli_fatal_signals_cleanup(void);

#endif
