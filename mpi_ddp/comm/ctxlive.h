/* ctxlive.h — which contexts are alive: ddp_init registers a context and ddp_finalize takes it off, so a call
 * given a finalized context is refused instead of reading freed memory; and the state of a context whose
 * communication a collective timeout broke (watchdog.c), on which no further collective may run. */
#ifndef DDP_CTXLIVE_H
#define DDP_CTXLIVE_H

#include "mpi_ddp/core/ctx.h"

/* Makes room for one more context in the live set; DDP_ERR_NOMEM when it cannot grow. ddp_init calls it before
 * MPI_Init, so that a failure leaves nothing initialized. */
ddp_status ddp_ctx_reserve(void);
/* Adds c to the live set (ddp_init), in the room ddp_ctx_reserve made: cannot fail. */
void ddp_ctx_register(ddp_ctx *c);
/* 1 when c was returned by ddp_init and not finalized since. */
int ddp_ctx_is_live(const ddp_ctx *c);
/* 1 once any context was taken off the live set: until then every context ever given is live (no lock). */
int ddp_ctx_any_finalized(void);
/* Takes c off the live set (ddp_finalize). A broken context's block is kept (reachable, never freed): a collective
 * that timed out may still write into the buffer it owns. */
void ddp_ctx_unregister(ddp_ctx *c);
/* A public entry point's context argument: NULL is "FUNC: ctx is NULL", a context not alive (finalized) "FUNC: ctx
 * is not a live context ...", both DDP_ERR_ARG; a context broken by a collective timeout DDP_ERR_MISMATCH naming
 * that timeout. A rank-local error (the others may not share it). */
ddp_status ddp_ctx_usable(const ddp_ctx *c, const char *func);
/* The same check without the broken state: for the functions that still run on a broken context (ddp_finalize). */
ddp_status ddp_ctx_alive(const ddp_ctx *c, const char *func);
/* The buffers a request may still write after a collective timeout (the request stays pending, MPI may complete it
 * at any later progress): ddp_ctx_release frees p (malloc'd), unless c is broken, when p is kept instead (reachable,
 * never freed); ddp_ctx_keep keeps p in any case (memory a backend would free, on a broken context). NULL: no-op. */
void ddp_ctx_release(const ddp_ctx *c, void *p);
void ddp_ctx_keep(void *p);
/* Marks c's communication broken by the timeout reported in `why` (the timeout's error line). */
void ddp_ctx_break(ddp_ctx *c, const char *why);
/* Marks it broken by a failure on this rank alone (ddp_train's, a collective buffer's) (`why`: its error line, not
 * shared): the other ranks may be waiting in a collective this rank left, as the CLI's MPI_Abort assumes. */
void ddp_ctx_break_alone(ddp_ctx *c, const char *why);
/* For a public function that is not collective: its failure st on this rank, other than DDP_ERR_ARG (a mistake of
 * the call's own that nothing followed, which the caller may mend and go on), is pending on c where it has other
 * ranks, which are likely in the program's next collective already, and ddp_finalize leaves MPI_Finalize alone
 * rather than wait for them for ever: on the thread that called ddp_init, until a collective that began after it
 * completes (the program knew of it when it entered); on another thread (a loader's), until a collective agrees a
 * failure (ddp_agree_status, ddp_all_ok). Any thread; c may be finalized already (then nothing). Returns st. */
ddp_status ddp_ctx_local_failure(ddp_ctx *c, ddp_status st);
/* A collective begins: its `seen` for ddp_ctx_local_failure_met (the owner's failure pending as it began). */
int ddp_ctx_local_failure_seen(ddp_ctx *c);
/* It completed: the owner's failure pending as it began (`seen`) is no longer this rank's alone; agreed_failure: it
 * told every rank that some rank failed, which ends any other thread's too. */
void ddp_ctx_local_failure_met(ddp_ctx *c, int seen, int agreed_failure);
/* 1 when a failure is pending (its line into why, len bytes, its status into *st unless NULL). */
int ddp_ctx_local_failure_pending(ddp_ctx *c, char *why, size_t len, ddp_status *st);
/* Sets the "no collective after the timeout" error for FUNC on broken ctx c and returns its status. */
ddp_status ddp_ctx_broken_error(const ddp_ctx *c, const char *func);

/* ddp_ctx_usable, returning its status from the calling function on failure. */
#define DDP_CTX_ARG(c)                                       \
    do {                                                     \
        ddp_status ddp_cst_ = ddp_ctx_usable((c), __func__); \
        if (ddp_cst_ != DDP_OK) return ddp_cst_;             \
    } while (0)

#endif
