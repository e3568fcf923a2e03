/* sync_nccl.c — the NCCL half of gradient sync (see sync.h), through the CUDA plugin (real or host emulator): buckets
 * summed in place by ncclAllReduce on a communication stream that waits for the backend's stream through an event, so
 * backward keeps running while earlier buckets are reduced. */
#include "mpi_ddp/comm/sync.h"

#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/watchdog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct ddp_sync_nccl {
    ddp_ctx *ctx;
    ddp_backend *be;
    const ddp_cuda_api *cu;
    void *stream, *event;
};

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

ddp_status ddp_sync_nccl_create(ddp_ctx *ctx, ddp_backend *be, ddp_sync_nccl **out)
{
    *out = NULL;
    ddp_sync_nccl *n = ddp_calloc(1, sizeof *n);
    /* agreed before the NCCL communicator's collective start-up */
    ddp_status ast = ddp_agree_status(ctx,
                                      n ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory for the NCCL sync"));
    if (ast != DDP_OK) {
        free(n);
        return ast;
    }
    n->ctx = ctx;
    n->be = be;
    n->cu = ddp_cuda();
    ddp_status st = ddp_nccl_init(ctx); /* agreed there */
    if (st == DDP_OK) {
        /* agreed too: a rank whose stream or event could not be made left the others in set-up's next collective
         * (a resume's broadcast hung; --collective-timeout reported that rank as missing instead of its error) */
        st = n->cu->stream_create(&n->stream);
        if (st == DDP_OK) st = n->cu->event_create(&n->event);
        st = ddp_agree_status(ctx, st);
    }
    if (st != DDP_OK) {
        ddp_sync_nccl_destroy(n);
        return st;
    }
    *out = n;
    return DDP_OK;
}

void ddp_sync_nccl_destroy(ddp_sync_nccl *n)
{
    if (!n) return;
    if (n->event) n->cu->event_destroy(n->event);
    if (n->stream) n->cu->stream_destroy(n->stream);
    free(n);
}

/* Polls until the communicator is idle (and, with stream_too, the stream has drained), watching its asynchronous
 * error. A NCCL error, or the collective timeout (--collective-timeout), aborts the communicator: its pending work
 * returns and the stream drains; a timeout first reports, as the MPI path does, who waits where and which ranks are
 * silent. */
static ddp_status wait_idle(ddp_sync_nccl *n, int stream_too, const char *where)
{
    ddp_ctx *ctx = n->ctx;
    double t0 = mono(), deadline = ctx->watch->coll_timeout > 0 ? t0 + ctx->watch->coll_timeout : INFINITY;
    double every = ddp_watch_heartbeat(ctx), beat = t0 + every; /* as ddp_wait's loop beats */
    for (long spins = 0;; spins++) {
        int busy = 0, done = 1;
        ddp_status st = n->cu->nccl_poll(ctx->nccl, &busy);
        if (st == DDP_OK && stream_too) st = n->cu->stream_query(n->stream, &done);
        if (st != DDP_OK) {
            char why[900];
            snprintf(why, sizeof why, "%s", ddp_last_error());
            ddp_nccl_abort(ctx);
            return ddp_set_error(st, "rank %d in %s at step %lld: %s", ctx->topo.rank, where,
                                 (long long)ctx->watch->step, why);
        }
        if (!busy && done) return DDP_OK;
        double t = mono();
        if (t > beat) { /* still alive, still waiting: keep this rank's progress record fresh */
            ddp_watch_beat(ctx);
            beat = t + every;
        }
        if (t > deadline) {
            /* the report first: it may read the board a second time (watchdog.c), and an aborted communicator
             * ends the other ranks at once, so aborting first could let the job end before this rank's report */
            ddp_watch_report(ctx, where, t - t0);
            ddp_ctx_break(ctx, ddp_last_error()); /* as ddp_wait: later collectives fail at once, no MPI_Finalize */
            ddp_nccl_abort(ctx);
            return DDP_ERR_MISMATCH;
        }
        if (spins > 200) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

ddp_status ddp_sync_nccl_launch(ddp_sync_nccl *n, float *buf, int64_t count, const char *where)
{
    if (!n->ctx->nccl) return ddp_set_error(DDP_ERR_NCCL, "NCCL communicator was aborted");
    /* a non-blocking communicator takes the next call only when the previous one is enqueued */
    DDP_CHECK(wait_idle(n, 0, where));
    DDP_CHECK(n->cu->stream_wait(n->event, ddp_backend_cuda_stream(n->be), n->stream));
    return ddp_nccl_allreduce_sum(n->ctx, buf, count, n->stream);
}

ddp_status ddp_sync_nccl_finish(ddp_sync_nccl *n, const char *where)
{
    if (!n->ctx->nccl) return ddp_set_error(DDP_ERR_NCCL, "NCCL communicator was aborted");
    return wait_idle(n, 1, where);
}
