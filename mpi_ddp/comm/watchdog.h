/* watchdog.h — collectives that cannot hang: nonblocking MPI requests polled against --collective-timeout,
 * and a progress board (RUNDIR/progress/rank<R>: last step and phase of each rank, one pwrite per mark)
 * from which a rank that times out reports which collective it waits in and which ranks are missing. */
#ifndef DDP_WATCHDOG_H
#define DDP_WATCHDOG_H

#include "mpi_ddp/core/ctx.h"

/* Most bytes of ddp_allreduce's own buffer (grown to the largest reduction asked): a larger one runs in pieces. */
#define DDP_WATCH_SCRATCH_MAX (64 << 20)

/* A rank's watchdog state (ctx->watch). */
struct ddp_watch {
    double coll_timeout; /* seconds; <= 0: no deadline, no board */
    int fd;              /* this rank's record on the board, or -1 */
    char dir[4200];      /* RUNDIR/progress */
    int64_t step;        /* the position last marked */
    char phase[48];
    /* ddp_allreduce's timed collectives run on this copy, never on the caller's buffer: after a timeout the pending
     * request (kept in `pending`) may still write here, in memory the context owns (comm/ctxlive.h keeps it). */
    MPI_Request pending;
    void *scratch;        /* malloc'd, freed by ddp_finalize unless the context is broken */
    size_t scratch_bytes; /* its size */
};

/* Collective. timeout_s <= 0 disables both the deadline and the board. */
ddp_status ddp_watch_init(ddp_ctx *ctx, const char *run_dir, double timeout_s);
/* Ends the board (ddp_train's teardown): the collective timeout is off again (0), so the collectives a program runs
 * on the context after ddp_train are untimed, as before it. */
void ddp_watch_close(ddp_ctx *ctx);
/* Records this rank's position (cheap: one pwrite; no-op without a board). Called with ctx->watch->phase itself (the
 * heartbeat of a wait loop) it also records that this rank is waiting in a collective: such a rank is never taken
 * for a silent one while its heartbeats keep coming. */
void ddp_watch_mark(ddp_ctx *ctx, int64_t step, const char *phase);
/* The heartbeat of a wait loop: ddp_watch_mark at the current position, as waiting. */
void ddp_watch_beat(ddp_ctx *ctx);
/* Completes n requests, or fails after the timeout with "collective timeout: rank R waited T s in WHERE at
 * step S; rank(s) ... last seen ..." (a local error: the caller aborts the job). A timeout leaves the requests
 * pending and marks the context broken (comm/ctxlive.h): every later collective on it fails at once, naming the
 * timeout, and ddp_finalize does not finalize MPI (it would wait for the stalled rank). */
ddp_status ddp_wait(ddp_ctx *ctx, int n, MPI_Request *req, const char *where);
/* Seconds this process has been blocked in the MPI collective wait it is in now (ddp_wait, ddp_allreduce, the CPU
 * gradient allreduce), 0 when it is in none. Any thread may ask (the CLI's signal thread says why a stop waits).
 * ddp_wait_enter/_leave bracket such a wait; nested waits count from the outermost. */
double ddp_wait_blocked_s(void);
int ddp_wait_enter(void); /* returns the token for ddp_wait_leave */
void ddp_wait_leave(int token);
/* Seconds between board refreshes while a rank waits in a collective: at most DDP_WATCH_HEARTBEAT, and a tenth
 * of --collective-timeout below 5 s, so that a waiting rank refreshes its record well within the stale limit. */
#define DDP_WATCH_HEARTBEAT 0.5
double ddp_watch_heartbeat(const ddp_ctx *ctx);
/* Sets the timeout error for a wait of `waited` seconds in `where`, naming the ranks whose board records
 * went stale (used by ddp_wait and by the NCCL waits in sync_nccl.c). Seconds are printed with %g ("waited 0.3 s
 * ... (--collective-timeout 0.3)"). A record older than the stale limit (six heartbeats, at most half the timeout)
 * is a silent rank; one that says it is waiting gets at least 1.5 DDP_WATCH_HEARTBEAT (wait loops that beat at the
 * fixed interval). */
void ddp_watch_report(ddp_ctx *ctx, const char *where, double waited);
/* In-place allreduce through ddp_wait. With a timeout it reduces a copy held by the context (grown to the largest
 * count asked, at most DDP_WATCH_SCRATCH_MAX bytes, above which it runs in pieces of that size), so that a request
 * left pending by a timeout never writes into the caller's buffer. Growing it fails with DDP_ERR_NOMEM on this rank
 * alone and breaks the context (the other ranks wait in the collective: they time out). */
ddp_status ddp_allreduce(ddp_ctx *ctx, void *buf, int count, MPI_Datatype type, MPI_Op op, const char *where);

#endif
