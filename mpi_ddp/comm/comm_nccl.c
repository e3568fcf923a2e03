/* comm_nccl.c — the NCCL communicator over the world communicator, through the CUDA plugin: its bootstrap gives an
 * error, never a hang, when a peer's init failed or the peer died. */
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds an init may take: MPIDDP_NCCL_INIT_TIMEOUT, else --collective-timeout, else 300. */
static double init_timeout(const ddp_ctx *c)
{
    int64_t env = ddp_knob_int(DDP_KNOB_NCCL_INIT_TIMEOUT);
    if (env > 0) return (double)env;
    return c->nccl_init_timeout > 0 ? c->nccl_init_timeout : 300.0;
}

enum { INIT_FAILED, INIT_TIMED_OUT, INIT_OK }; /* ordered: the agreement reports the lowest */
#define INIT_NOTICE_TAG 7306                   /* "my init failed": one int to every other rank */

/* A rank whose init failed tells the others at once (nonblocking sends, completed after the agreement), so that they
 * stop waiting for it: they waited for their own init to time out (MPIDDP_NCCL_INIT_TIMEOUT, --collective-timeout or
 * 300 s) before the failure was reported. *out: the requests (NULL: none could be made; the others time out). Returns
 * MPI_SUCCESS or the first failing MPI_Isend's code (a local MPI failure: the caller aborts). */
static int notify_failure(ddp_ctx *c, int *payload, MPI_Request **out)
{
    int W = c->topo.size, rc = MPI_SUCCESS;
    MPI_Request *rq = calloc((size_t)(W > 1 ? W : 1), sizeof *rq);
    for (int r = 0; rq && r < W; r++) {
        rq[r] = MPI_REQUEST_NULL;
        if (r != c->topo.rank && rc == MPI_SUCCESS)
            rc = MPI_Isend(payload, 1, MPI_INT, r, INIT_NOTICE_TAG, c->world, &rq[r]);
    }
    *out = rq;
    return rc;
}

/* Rank 0 makes the ncclUniqueId and MPI broadcasts it; every rank joins on its GPU (node-local rank) with a
 * non-blocking init polled against a deadline, and stops early when a peer says its own init failed. The outcome is
 * agreed over MPI: a rank whose init failed outright is reported in preference to ranks that only timed out or
 * stopped waiting for it. */
ddp_status ddp_nccl_init(ddp_ctx *c)
{
    if (c->nccl) return DDP_OK;
    const ddp_cuda_api *cu = ddp_cuda();
    ddp_status st = cu ? DDP_OK : ddp_set_error(DDP_ERR_NCCL, "NCCL: CUDA plugin unavailable: %s", ddp_cuda_why());
    unsigned char id[DDP_NCCL_ID_BYTES] = {0};
    if (st == DDP_OK && c->topo.rank == 0) st = cu->nccl_unique_id(id);
    DDP_CHECK(ddp_agree_status(c, st));
    MPI_CHECK(MPI_Bcast(id, DDP_NCCL_ID_BYTES, MPI_BYTE, 0, c->world));
    void *comm = NULL;
    int outcome = INIT_OK, payload = 1, sent = 0;
    MPI_Request *notices = NULL;
    double limit = init_timeout(c), t0 = mono();
    st = cu->nccl_init_start(&comm, c->topo.size, id, c->topo.rank, c->cuda_device);
    for (int busy = 1; st == DDP_OK && busy;) {
        st = cu->nccl_poll(comm, &busy);
        int told = 0;
        MPI_Status ms;
        if (st == DDP_OK && busy && MPI_Iprobe(MPI_ANY_SOURCE, INIT_NOTICE_TAG, c->world, &told, &ms) == MPI_SUCCESS &&
            told) {
            st = ddp_set_error(DDP_ERR_NCCL, "NCCL communicator init on rank %d stopped: rank %d's init failed",
                               c->topo.rank, ms.MPI_SOURCE);
            outcome = INIT_TIMED_OUT; /* not the cause: rank ms.MPI_SOURCE reports */
        } else if (st == DDP_OK && busy && mono() - t0 > limit) {
            st = ddp_set_error(DDP_ERR_NCCL,
                               "NCCL communicator init on rank %d (%s, device %d) did not complete in %.0f s: "
                               "a peer rank failed or never joined (MPIDDP_NCCL_INIT_TIMEOUT)",
                               c->topo.rank, c->topo.host, c->cuda_device, limit);
            outcome = INIT_TIMED_OUT;
        } else if (st == DDP_OK && busy) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    if (st != DDP_OK && outcome == INIT_OK) {
        outcome = INIT_FAILED;
        int nrc = notify_failure(c, &payload, &notices);
        if (nrc != MPI_SUCCESS) {
            free(notices); /* the sends made stay unmatched: MPI is failing, the caller aborts the job */
            if (comm) cu->nccl_abort(comm);
            return ddp_mpi_error(nrc, "MPI_Isend(NCCL init failure notice)", __FILE__, __LINE__);
        }
        sent = notices != NULL;
    }
    /* agree: every rank learns the outcome; the first rank that failed outright names the problem */
    struct {
        int outcome, rank;
    } mine = {outcome, c->topo.rank}, first;
    int rc = MPI_Allreduce(&mine, &first, 1, MPI_2INT, MPI_MINLOC, c->world);
    if (rc == MPI_SUCCESS && first.outcome == INIT_OK) {
        c->nccl = comm;
        return DDP_OK;
    }
    if (comm) cu->nccl_abort(comm); /* also on ranks whose own init succeeded: the job cannot go on */
    /* every notice sent is received (the count agreed), and every send completed, before MPI is used again */
    int nsent = 0;
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&sent, &nsent, 1, MPI_INT, MPI_SUM, c->world);
    for (int k = nsent - sent; rc == MPI_SUCCESS && k > 0; k--) {
        int got;
        rc = MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, INIT_NOTICE_TAG, c->world, MPI_STATUS_IGNORE);
    }
    if (notices) {
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(c->topo.size, notices, MPI_STATUSES_IGNORE);
        free(notices);
    }
    if (rc != MPI_SUCCESS) return ddp_mpi_error(rc, "NCCL init outcome", __FILE__, __LINE__);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ddp_last_error());
    MPI_CHECK(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first.rank, c->world));
    msg[sizeof msg - 1] = 0;
    ddp_set_error_text(msg);
    ddp_mark_error_shared();
    return DDP_ERR_NCCL;
}

void ddp_nccl_abort(ddp_ctx *c)
{
    if (c->nccl && ddp_cuda()) ddp_cuda()->nccl_abort(c->nccl);
    c->nccl = NULL;
}

void ddp_nccl_destroy(ddp_ctx *c)
{
    if (c->nccl && ddp_cuda()) ddp_cuda()->nccl_destroy(c->nccl);
    c->nccl = NULL;
}

ddp_status ddp_nccl_allreduce_sum(ddp_ctx *c, float *buf, int64_t count, void *stream)
{
    return ddp_cuda()->nccl_allreduce_sum(c->nccl, buf, count, stream);
}
