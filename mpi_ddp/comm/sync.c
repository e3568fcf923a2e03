/* sync.c — bucketed gradient allreduce; see sync.h. Buckets are laid out from the end of the buffer,
 * because backward finishes the last layer first. The MPI path is here; the NCCL one is sync_nccl.c. */
#include "mpi_ddp/comm/sync.h"

#include "mpi_ddp/core/status.h"
#include "mpi_ddp/comm/watchdog.h"

#include <stdlib.h>


struct ddp_sync {
    ddp_ctx *ctx;
    ddp_backend *be;
    float *grads;
    int64_t total; /* params + control */
    int64_t n_params;
    int nb;
    int64_t *lo, *hi; /* bucket k covers [lo[k], hi[k]); k = 0 is at the end */
    int *launched;
    MPI_Request *req;
    int64_t ready_lo;
    int next;            /* next bucket to launch */
    ddp_status st;       /* first launch error */
    ddp_sync_nccl *nccl; /* GPU backends: NCCL on a communication stream */
    double comm_s;       /* seconds this rank spent inside allreduce calls and waits (benchmarks) */
};

ddp_status ddp_sync_create(ddp_ctx *ctx, ddp_backend *be, float *grads, int64_t n_params, int64_t n_ctl,
                           int64_t bucket_bytes, ddp_sync **out)
{
    *out = NULL;
    ddp_sync *s = ddp_calloc(1, sizeof *s);
    if (!s) return ddp_agree_status(ctx, ddp_set_error(DDP_ERR_NOMEM, "out of memory for the gradient sync"));
    s->ctx = ctx;
    s->be = be;
    s->grads = grads;
    s->total = n_params + n_ctl;
    s->n_params = n_params;
    int64_t per = bucket_bytes / 4 < 1 ? 1 : bucket_bytes / 4;
    if (per > INT32_MAX) per = INT32_MAX;
    s->nb = (int)((s->total + per - 1) / per);
    s->lo = ddp_calloc((size_t)s->nb, sizeof *s->lo);
    s->hi = ddp_calloc((size_t)s->nb, sizeof *s->hi);
    s->launched = ddp_calloc((size_t)s->nb, sizeof *s->launched);
    s->req = ddp_calloc((size_t)s->nb, sizeof *s->req);
    /* agreed before anything collective: a rank out of memory here must not leave the others waiting */
    ddp_status ast = ddp_agree_status(ctx,
                                      !s->lo || !s->hi || !s->launched || !s->req
                                          ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for %d gradient buckets", s->nb)
                                          : DDP_OK);
    if (ast != DDP_OK) {
        ddp_sync_destroy(s);
        return ast;
    }
    for (int k = 0; k < s->nb; k++) {
        s->hi[k] = s->total - (int64_t)k * per;
        s->lo[k] = s->hi[k] - per < 0 ? 0 : s->hi[k] - per;
        s->req[k] = MPI_REQUEST_NULL;
    }
    if (!be->host_memory) {
        ddp_status st = ddp_sync_nccl_create(ctx, be, &s->nccl);
        if (st != DDP_OK) {
            ddp_sync_destroy(s);
            return st;
        }
    }
    *out = s;
    return DDP_OK;
}

void ddp_sync_destroy(ddp_sync *s)
{
    if (!s) return;
    ddp_sync_nccl_destroy(s->nccl);
    free(s->lo);
    free(s->hi);
    free(s->launched);
    free(s->req);
    free(s);
}

int ddp_sync_num_buckets(const ddp_sync *s) { return s->nb; }

void ddp_sync_begin(ddp_sync *s)
{
    s->ready_lo = s->n_params; /* the control floats are set before backward starts */
    s->next = 0;
    s->st = DDP_OK;
    for (int k = 0; k < s->nb; k++) s->launched[k] = 0;
}

static ddp_status launch(ddp_sync *s, int k)
{
    float *p = s->grads + s->lo[k];
    int64_t n = s->hi[k] - s->lo[k];
    s->launched[k] = 1;
    if (!s->nccl) {
        /* Without a collective timeout the bucket is reduced right away with the blocking MPI_Allreduce:
         * on CPU there is no progress thread to overlap with, and Open MPI's tuned blocking allreduce is
         * faster than its nonblocking one (libnbc). With a timeout the request is polled (watchdog.h). */
        if (s->ctx->watch->coll_timeout <= 0) {
            double t0 = MPI_Wtime();
            int tok = ddp_wait_enter(); /* a collective wait, as ddp_wait's (ddp_wait_blocked_s) */
            int rc = MPI_Allreduce(MPI_IN_PLACE, p, (int)n, MPI_FLOAT, MPI_SUM, s->ctx->world);
            ddp_wait_leave(tok);
            if (rc != MPI_SUCCESS) return ddp_mpi_error(rc, "MPI_Allreduce", __FILE__, __LINE__);
            s->comm_s += MPI_Wtime() - t0;
            s->req[k] = MPI_REQUEST_NULL;
            return DDP_OK;
        }
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, (int)n, MPI_FLOAT, MPI_SUM, s->ctx->world, &s->req[k]));
        return DDP_OK;
    }
    return ddp_sync_nccl_launch(s->nccl, p, n, "the gradient allreduce");
}

void ddp_sync_ready(void *arg, int64_t lo, int64_t hi)
{
    ddp_sync *s = arg;
    if (s->st != DDP_OK) return;
    /* ranges arrive from the end backwards; one touching the ready tail extends it (others wait for finish) */
    if (hi >= s->ready_lo && lo < s->ready_lo) s->ready_lo = lo;
    while (s->next < s->nb && s->lo[s->next] >= s->ready_lo) {
        s->st = launch(s, s->next);
        if (s->st != DDP_OK) return;
        s->next++;
    }
    if (!s->nccl && s->next > 0 &&
        s->ctx->watch->coll_timeout > 0) { /* give MPI a chance to progress what is in flight */
        int flag;
        MPI_Testall(s->next, s->req, &flag, MPI_STATUSES_IGNORE);
    }
}

ddp_status ddp_sync_finish(ddp_sync *s, const char *where)
{
    while (s->st == DDP_OK && s->next < s->nb) {
        s->st = launch(s, s->next);
        s->next++;
    }
    if (s->st != DDP_OK) return s->st;
    double t0 = MPI_Wtime();
    ddp_status st = s->nccl ? ddp_sync_nccl_finish(s->nccl, where) : ddp_wait(s->ctx, s->nb, s->req, where);
    s->comm_s += MPI_Wtime() - t0;
    return st;
}

double ddp_sync_comm_seconds(const ddp_sync *s) { return s->comm_s; }
