/* stop_signals.h — stop requests delivered to one waiting thread instead of a handler on whichever thread the
 * kernel picks (a oneDNN JIT kernel may run with its stack pointer inside heap memory). */
#ifndef DDP_APP_STOP_SIGNALS_H
#define DDP_APP_STOP_SIGNALS_H

/* Blocks SIGUSR1, SIGTERM and SIGINT in the calling thread; every thread created after inherits the mask.
 * Call before MPI_Init and before any library starts a thread. Returns 0, or -1 on failure. */
int cli_stop_signals_block(void);
/* Starts the thread that waits for the blocked signals and turns each into ddp_request_stop(). A signal that
 * arrived between the two calls is pending and taken at once. Returns 0, or -1 on failure. */
int cli_stop_signals_start(void);
/* Armed (on != 0), a stop signal becomes a stop request; disarmed (the default: before training starts, when
 * there is nothing to save), it takes its default action and ends the process. */
void cli_stop_signals_arm(int on);
/* The last stop signal taken (0: none). */
int cli_stop_signal_received(void);

#endif
