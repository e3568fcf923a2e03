/* ctxlive.c — the set of live contexts (ddp_init .. ddp_finalize), the failures of a rank's own pending on one, and
 * the broken state a collective timeout leaves on a context; see ctxlive.h. MPI runs on one thread (FUNNELED); the
 * lock is for ddp_dataset_sample's failures, which loader threads record. */
#include "mpi_ddp/comm/ctxlive.h"

#include "mpi_ddp/core/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int g_finalized; /* contexts taken off the set so far (ddp_ctx_any_finalized: no lock) */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* g_live, g_nlive, g_cap and each ctx's pending marks */
static ddp_ctx **g_live;                                   /* the live contexts, g_nlive of them in g_cap slots */
static int g_nlive, g_cap;
static void **g_kept; /* finalized broken contexts, and buffers of requests a timeout left pending: kept (reachable,
                        never freed), so that late MPI writes land in memory still owned */
static int g_nkept;

static void keep(void *p)
{
    void **k = realloc(g_kept, (size_t)(g_nkept + 1) * sizeof *k);
    if (k) g_kept = k, g_kept[g_nkept++] = p; /* else the block stays unreachable, never freed */
}

void ddp_ctx_release(const ddp_ctx *c, void *p)
{
    if (!p) return;
    if (c->comm_broken)
        keep(p);
    else
        free(p);
}

void ddp_ctx_keep(void *p)
{
    if (p) keep(p);
}

ddp_status ddp_ctx_reserve(void)
{
    ddp_status st = DDP_OK;
    pthread_mutex_lock(&g_lock);
    if (g_nlive == g_cap) {
        int cap = g_cap ? 2 * g_cap : 4;
        ddp_ctx **p = realloc(g_live, (size_t)cap * sizeof *p);
        if (p)
            g_live = p, g_cap = cap;
        else
            st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for the list of live contexts");
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

void ddp_ctx_register(ddp_ctx *c)
{
    c->owner = pthread_self();
    pthread_mutex_lock(&g_lock);
    g_live[g_nlive++] = c;
    pthread_mutex_unlock(&g_lock);
}

static int is_live_locked(const ddp_ctx *c)
{
    for (int i = 0; c && i < g_nlive; i++)
        if (g_live[i] == c) return 1;
    return 0;
}

int ddp_ctx_is_live(const ddp_ctx *c)
{
    pthread_mutex_lock(&g_lock);
    int live = is_live_locked(c);
    pthread_mutex_unlock(&g_lock);
    return live;
}

int ddp_ctx_any_finalized(void) { return atomic_load(&g_finalized) > 0; }

void ddp_ctx_unregister(ddp_ctx *c)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nlive; i++)
        if (g_live[i] == c) {
            g_live[i] = g_live[--g_nlive];
            break;
        }
    if (!g_nlive) { /* nothing left: no list either (leak checkers see none) */
        free(g_live);
        g_live = NULL, g_cap = 0;
    }
    atomic_fetch_add(&g_finalized, 1);
    pthread_mutex_unlock(&g_lock);
    if (c->comm_broken) keep(c);
}

ddp_status ddp_ctx_alive(const ddp_ctx *c, const char *func)
{
    if (!c) return ddp_set_error(DDP_ERR_ARG, "%s: ctx is NULL", func);
    if (!ddp_ctx_is_live(c))
        return ddp_set_error(DDP_ERR_ARG,
                             "%s: ctx is not a live context (already finalized by ddp_finalize, or not from ddp_init)",
                             func);
    return DDP_OK;
}

ddp_status ddp_ctx_usable(const ddp_ctx *c, const char *func)
{
    DDP_CHECK(ddp_ctx_alive(c, func));
    return c->comm_broken ? ddp_ctx_broken_error(c, func) : DDP_OK;
}

static void break_as(ddp_ctx *c, int kind, const char *why)
{
    if (c->comm_broken) return; /* the first timeout or failure is the one to name */
    c->comm_broken = kind;
    snprintf(c->broken_why, sizeof c->broken_why, "%s", why);
}
void ddp_ctx_break(ddp_ctx *c, const char *why) { break_as(c, 1, why); }
void ddp_ctx_break_alone(ddp_ctx *c, const char *why) { break_as(c, 2, why); }

ddp_status ddp_ctx_local_failure(ddp_ctx *c, ddp_status st)
{
    if (st == DDP_OK || st == DDP_ERR_ARG || ddp_error_shared()) return st;
    pthread_mutex_lock(&g_lock); /* held from the live check to the mark: ddp_finalize cannot free c in between */
    if (is_live_locked(c) && c->topo.size > 1) {
        if (!c->alone_pending && !c->thread_pending) { /* the first failure is the one named */
            snprintf(c->alone_why, sizeof c->alone_why, "%s", ddp_last_error());
            c->alone_st = st;
        }
        if (pthread_equal(pthread_self(), c->owner))
            c->alone_pending = 1;
        else
            c->thread_pending = 1;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}

int ddp_ctx_local_failure_seen(ddp_ctx *c)
{
    pthread_mutex_lock(&g_lock);
    int seen = c->alone_pending;
    pthread_mutex_unlock(&g_lock);
    return seen;
}

void ddp_ctx_local_failure_met(ddp_ctx *c, int seen, int agreed_failure)
{
    if (!seen && !agreed_failure) return;
    pthread_mutex_lock(&g_lock);
    if (seen) c->alone_pending = 0;            /* the owner knew it before the collective: the ranks met after it */
    if (agreed_failure) c->thread_pending = 0; /* every rank learned that the job failed */
    pthread_mutex_unlock(&g_lock);
}

int ddp_ctx_local_failure_pending(ddp_ctx *c, char *why, size_t len, ddp_status *st)
{
    pthread_mutex_lock(&g_lock);
    int pending = c->alone_pending || c->thread_pending;
    if (pending) snprintf(why, len, "%s", c->alone_why);
    if (pending && st) *st = c->alone_st;
    pthread_mutex_unlock(&g_lock);
    return pending;
}

ddp_status ddp_ctx_broken_error(const ddp_ctx *c, const char *func)
{
    return ddp_set_error(DDP_ERR_MISMATCH,
                         "%s: no collective can run on this ctx after %s (%s); end the job: ddp_finalize, then exit "
                         "non-zero or MPI_Abort",
                         func,
                         c->comm_broken == 2 ? "this rank failed alone, the others perhaps waiting in a "
                                               "collective"
                                             : "an earlier collective timeout left one pending",
                         c->broken_why);
}
