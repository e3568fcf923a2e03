/* watchdog.c — timed collectives, the status agreement built on them, and the progress board; see watchdog.h. */
#include "mpi_ddp/comm/watchdog.h"

#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int64_t step;
    double when; /* CLOCK_REALTIME seconds: comparable across nodes with synchronised clocks */
    char phase[48];
    int32_t waiting; /* 1: written by the heartbeat of a wait loop (the rank waits in a collective) */
    int32_t pad;
} board_entry;

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* When this process entered the collective wait it is in (mono() in ns), 0: none (ddp_wait_blocked_s) */
static _Atomic int64_t g_wait_since_ns;

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int ddp_wait_enter(void)
{
    int64_t none = 0, now = (int64_t)(mono() * 1e9);
    return atomic_compare_exchange_strong(&g_wait_since_ns, &none, now > 0 ? now : 1); /* 0: an outer wait's */
}

void ddp_wait_leave(int token)
{
    if (token) atomic_store(&g_wait_since_ns, 0);
}

double ddp_wait_blocked_s(void)
{
    int64_t since = atomic_load(&g_wait_since_ns);
    return since ? mono() - 1e-9 * (double)since : 0.0;
}

ddp_status ddp_watch_init(ddp_ctx *ctx, const char *run_dir, double timeout_s)
{
    ctx->watch->coll_timeout = timeout_s;
    ctx->watch->fd = -1;
    if (timeout_s <= 0) return DDP_OK;
    snprintf(ctx->watch->dir, sizeof ctx->watch->dir, "%s/progress", run_dir);
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0 && mkdir(ctx->watch->dir, 0777) != 0 && errno != EEXIST)
        st = ddp_set_error(DDP_ERR_IO, "%s: mkdir: %s", ctx->watch->dir, strerror(errno));
    DDP_CHECK(ddp_agree_status(ctx, st));
    char p[4400];
    snprintf(p, sizeof p, "%s/rank%d", ctx->watch->dir, ctx->topo.rank);
    ctx->watch->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    st = ctx->watch->fd < 0 ? ddp_set_error(DDP_ERR_IO, "%s: %s", p, strerror(errno)) : DDP_OK;
    DDP_CHECK(ddp_agree_status(ctx, st));
    ddp_watch_mark(ctx, 0, "start");
    return DDP_OK;
}

void ddp_watch_close(ddp_ctx *ctx)
{
    if (ctx->watch->fd >= 0) close(ctx->watch->fd);
    ctx->watch->fd = -1;
    ctx->watch->coll_timeout = 0; /* the timeout is ddp_train's: a program's own collectives after it are untimed */
    ctx->watch->dir[0] = 0;
}

void ddp_watch_mark(ddp_ctx *ctx, int64_t step, const char *phase)
{
    int waiting = phase == ctx->watch->phase; /* a wait loop's heartbeat re-marks the current position */
    ctx->watch->step = step;
    if (!waiting) snprintf(ctx->watch->phase, sizeof ctx->watch->phase, "%s", phase);
    if (ctx->watch->fd < 0) return;
    board_entry e = {.step = step, .when = wall(), .waiting = waiting};
    snprintf(e.phase, sizeof e.phase, "%s", phase);
    if (pwrite(ctx->watch->fd, &e, sizeof e, 0) != (ssize_t)sizeof e) { /* the board is best effort */
    }
}

void ddp_watch_beat(ddp_ctx *ctx) { ddp_watch_mark(ctx, ctx->watch->step, ctx->watch->phase); }

double ddp_watch_heartbeat(const ddp_ctx *ctx)
{
    double t = ctx->watch->coll_timeout / 10;
    return t > 0 && t < DDP_WATCH_HEARTBEAT ? t : DDP_WATCH_HEARTBEAT;
}

/* Seconds shown in the report: %g of the value rounded to 0.1 s below 10 s, to 1 s above. */
static double shown(double s) { return s < 10 ? round(s * 10) / 10 : round(s); }

/* Appends "; missing: rank r ..." for every other rank whose record is older than `stale` seconds to msg (k
 * characters so far); returns how many. */
static int scan_board(ddp_ctx *ctx, char *msg, size_t cap, size_t k, double stale)
{
    int behind = 0;
    double now = wall();
    for (int r = 0; r < ctx->topo.size && k + 120 < cap; r++) {
        if (r == ctx->topo.rank) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/rank%d", ctx->watch->dir, r);
        board_entry e;
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? pread(fd, &e, sizeof e, 0) : -1;
        if (fd >= 0) close(fd);
        if (got != (ssize_t)sizeof e) {
            k += (size_t)snprintf(msg + k, cap - k, "%s rank %d: no progress record", behind++ ? ";" : "; missing:", r);
            continue;
        }
        e.phase[sizeof e.phase - 1] = 0;
        double limit = e.waiting && stale < 1.5 * DDP_WATCH_HEARTBEAT ? 1.5 * DDP_WATCH_HEARTBEAT : stale;
        if (now - e.when > limit)
            k += (size_t)snprintf(msg + k, cap - k, "%s rank %d silent for %.1f s (last at step %lld %s '%s')",
                                  behind++ ? ";" : "; missing:", r, now - e.when, (long long)e.step,
                                  e.waiting ? "while waiting in" : "in", e.phase);
    }
    return behind;
}

/* Names the ranks that stopped answering: a waiting rank refreshes its record every heartbeat, so a
 * record older than a few heartbeats belongs to a rank that is stopped, dead, or stuck outside MPI. A rank
 * stopped less than `stale` seconds before this rank's deadline still looks alive (it heartbeat while it
 * waited beside this one): when nobody looks behind, the board is read once more `stale` seconds later
 * before the report says every rank is alive. */
void ddp_watch_report(ddp_ctx *ctx, const char *where, double waited)
{
    char msg[1024], opt[96];
    size_t k = (size_t)snprintf(
        msg, sizeof msg, "collective timeout: rank %d waited %g s in %s at step %lld (%s)", ctx->topo.rank,
        shown(waited), where, (long long)ctx->watch->step,
        ddp_opt_fmt(opt, sizeof opt, ctx->cli_names, DDP_OPT_COLLECTIVE_TIMEOUT, "%g", ctx->watch->coll_timeout));
    double hb = ddp_watch_heartbeat(ctx);
    double stale = 6 * hb < ctx->watch->coll_timeout / 2 ? 6 * hb : ctx->watch->coll_timeout / 2;
    int behind = scan_board(ctx, msg, sizeof msg, k, stale);
    if (!behind && ctx->watch->fd >= 0) {
        /* heartbeat meanwhile, so that the others do not take this rank for the silent one */
        for (double left = stale; left > 0; left -= hb) {
            ddp_watch_beat(ctx);
            double t = left < hb ? left : hb;
            struct timespec d = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
            while (nanosleep(&d, &d) != 0 && errno == EINTR) {}
        }
        msg[k] = 0;
        behind = scan_board(ctx, msg, sizeof msg, k, stale);
    }
    if (!behind)
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                 "; every rank is alive and waiting (network or MPI problem?)");
    ddp_set_error(DDP_ERR_MISMATCH, "%s", msg);
}

static ddp_status wait_body(ddp_ctx *ctx, int n, MPI_Request *req, const char *where)
{
    if (ctx->watch->coll_timeout <= 0) {
        MPI_CHECK(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
        return DDP_OK;
    }
    double hb = ddp_watch_heartbeat(ctx), t0 = mono(), deadline = t0 + ctx->watch->coll_timeout, beat = t0 + hb;
    for (long spins = 0;; spins++) {
        int flag = 0;
        MPI_CHECK(MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE));
        if (flag) return DDP_OK;
        double t = mono();
        if (t > beat) { /* still alive, still waiting */
            ddp_watch_beat(ctx);
            beat = t + hb;
        }
        if (t > deadline) {
            ddp_watch_report(ctx, where, t - t0);
            ddp_ctx_break(ctx, ddp_last_error()); /* the requests stay pending: no further collective on ctx */
            return DDP_ERR_MISMATCH;
        }
        if (spins > 1000) { /* long waits (validation on other ranks): stop burning the core */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

ddp_status ddp_wait(ddp_ctx *ctx, int n, MPI_Request *req, const char *where)
{
    if (ctx->comm_broken) return ddp_ctx_broken_error(ctx, where); /* requests started after it: never complete */
    int tok = ddp_wait_enter();
    ddp_status st = wait_body(ctx, n, req, where);
    ddp_wait_leave(tok);
    return st;
}

ddp_status ddp_allreduce(ddp_ctx *ctx, void *buf, int count, MPI_Datatype type, MPI_Op op, const char *where)
{
    if (ctx->comm_broken) return ddp_ctx_broken_error(ctx, where);
    int seen = ddp_ctx_local_failure_seen(ctx); /* a failure of the owner's before this collective began */
    if (ctx->watch->coll_timeout <= 0) {
        int tok = ddp_wait_enter();
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, count, type, op, ctx->world);
        ddp_wait_leave(tok);
        if (rc != MPI_SUCCESS) return ddp_mpi_error(rc, "MPI_Allreduce", __FILE__, __LINE__);
        ddp_ctx_local_failure_met(ctx, seen, 0); /* the ranks met: the owner's failure before it is not alone */
        return DDP_OK;
    }
    int tsize = 0;
    MPI_CHECK(MPI_Type_size(type, &tsize));
    if (tsize <= 0 || (size_t)tsize > DDP_WATCH_SCRATCH_MAX)
        return ddp_set_error(DDP_ERR_INTERNAL, "%s: MPI type of %d bytes", where, tsize);
    /* every rank cuts the same count alike: the piece depends on count and type alone, never on what was allocated */
    int piece = (int)(DDP_WATCH_SCRATCH_MAX / (size_t)tsize);
    if (count < piece) piece = count > 0 ? count : 1;
    size_t need = (size_t)piece * (size_t)tsize;
    if (need > ctx->watch->scratch_bytes) { /* no request pends on it here: a timeout broke the context above */
        void *p = realloc(ctx->watch->scratch, need);
        if (!p) {
            ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for %zu bytes of collective buffer", where, need);
            ddp_ctx_break_alone(ctx, ddp_last_error()); /* the others are in the collective this rank cannot join */
            return DDP_ERR_NOMEM;
        }
        ctx->watch->scratch = p, ctx->watch->scratch_bytes = need;
    }
    for (int64_t lo = 0; lo < count; lo += piece) {
        int k = count - lo < piece ? (int)(count - lo) : piece;
        char *at = (char *)buf + (size_t)lo * (size_t)tsize;
        memcpy(ctx->watch->scratch, at, (size_t)k * (size_t)tsize);
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, ctx->watch->scratch, k, type, op, ctx->world, &ctx->watch->pending));
        DDP_CHECK(ddp_wait(ctx, 1, &ctx->watch->pending, where));
        memcpy(at, ctx->watch->scratch, (size_t)k * (size_t)tsize);
    }
    ddp_ctx_local_failure_met(ctx, seen, 0);
    return DDP_OK;
}

ddp_status ddp_all_ok(ddp_ctx *c, int ok, int *all)
{
    DDP_CTX_ARG(c);
    int v = ok ? 1 : 0;
    DDP_CHECK(ddp_allreduce(c, &v, 1, MPI_INT, MPI_MIN, "an agreement"));
    if (!v) ddp_ctx_local_failure_met(c, 0, 1); /* every rank knows: a loader's failure is no longer alone */
    DDP_NONNULL(all, "all");                    /* after the collective: the other ranks are not left waiting */
    *all = v;
    return DDP_OK;
}

ddp_status ddp_agree_status(ddp_ctx *c, ddp_status mine)
{
    DDP_CHECK(ddp_ctx_alive(c, __func__));
    if (c->comm_broken) /* this rank's own error (often the timeout itself) says more than the broken state */
        return mine != DDP_OK ? mine : ddp_ctx_broken_error(c, __func__);
    int who = mine == DDP_OK ? c->topo.size : c->topo.rank;
    char msg[1024], pend[768] = ""; /* a failure pending on this rank (a loader thread's line is not this thread's) */
    ddp_status pst = DDP_OK;        /* its line goes with its own status only (another failure sends its own line) */
    if (mine != DDP_OK && (!ddp_ctx_local_failure_pending(c, pend, sizeof pend, &pst) || pst != mine)) pend[0] = 0;
    /* timed like every collective of the training loop: a stalled rank is reported, not waited for */
    ddp_status wst = ddp_allreduce(c, &who, 1, MPI_INT, MPI_MIN, "a status agreement");
    if (wst != DDP_OK) return wst;
    if (who == c->topo.size) return DDP_OK;
    ddp_ctx_local_failure_met(c, 0, 1); /* every rank gets the failure: a loader's is no longer alone */
    int rc;
    int code = (int)mine;
    snprintf(msg, sizeof msg, "%s", pend[0] ? pend : ddp_last_error());
    rc = MPI_Bcast(&code, 1, MPI_INT, who, c->world);
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, who, c->world);
    if (rc != MPI_SUCCESS) return ddp_mpi_error(rc, "MPI_Bcast(agree)", __FILE__, __LINE__);
    msg[sizeof msg - 1] = 0;
    ddp_set_error_text(msg);
    ddp_mark_error_shared();
    return code == DDP_OK ? DDP_ERR_REMOTE : (ddp_status)code;
}
