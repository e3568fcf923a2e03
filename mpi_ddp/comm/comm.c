/* comm.c — MPI start-up and topology: world and node-local communicators, local rank, node id, device
 * selection and the context's backends (comm.h). The status agreement is in watchdog.c, with the timed
 * collectives it uses. */
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "mpi_ddp/comm/watchdog.h"
#include "slurm/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The context and the parts its owners' headers define, in one allocation (freed by ddp_finalize). */
typedef struct {
    ddp_ctx ctx;
    ddp_jobfacts facts;
    struct ddp_watch watch;
} ctx_block;

ddp_status ddp_init(int *argc, char ***argv, ddp_ctx **out)
{
    DDP_NONNULL(out, "ctx");
    *out = NULL;
    int inited = 0, provided = 0, finished = 0;
    MPI_CHECK(MPI_Finalized(&finished));
    if (finished) /* MPI_Init after MPI_Finalize aborts the process: say so instead */
        return ddp_set_error(DDP_ERR_ARG, "ddp_init: MPI is already finalized (ddp_init after ddp_finalize)");
    MPI_CHECK(MPI_Initialized(&inited));
    ctx_block *blk = ddp_calloc(1, sizeof *blk);
    if (!blk) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    if (ddp_ctx_reserve() != DDP_OK) { /* before MPI_Init: a failure leaves nothing to finalize */
        free(blk);
        return DDP_ERR_NOMEM;
    }
    ddp_ctx *c = &blk->ctx;
    c->facts = &blk->facts;
    c->watch = &blk->watch;
    c->watch->fd = -1;
    if (!inited) {
        MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        c->owns_mpi = 1;
    }
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->world));
    MPI_CHECK(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN));
    ddp_topology *t = &c->topo;
    MPI_CHECK(MPI_Comm_rank(c->world, &t->rank));
    ddp_alloc_hook_rank(t->rank);
    MPI_CHECK(MPI_Comm_size(c->world, &t->size));
    MPI_CHECK(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &c->local));
    MPI_CHECK(MPI_Comm_set_errhandler(c->local, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(c->local, &t->local_rank));
    MPI_CHECK(MPI_Comm_size(c->local, &t->local_size));
    /* node id: rank of this node's leader among all leaders, shared within the node */
    MPI_Comm leaders;
    MPI_CHECK(MPI_Comm_split(c->world, t->local_rank == 0 ? 0 : MPI_UNDEFINED, t->rank, &leaders));
    int node = 0, nodes = 0;
    if (leaders != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(leaders, &node));
        MPI_CHECK(MPI_Comm_size(leaders, &nodes));
        MPI_CHECK(MPI_Comm_free(&leaders));
    }
    int nn[2] = {node, nodes};
    MPI_CHECK(MPI_Bcast(nn, 2, MPI_INT, 0, c->local));
    t->node_id = nn[0];
    t->num_nodes = nn[1];
    int len = 0;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_CHECK(MPI_Get_processor_name(host, &len));
    snprintf(t->host, sizeof t->host, "%s", host);
    ddp_ctx_register(c); /* in the room reserved before MPI_Init */
    ddp_jobfacts_read(c->facts);
    ddp_status fst = ddp_jobfacts_check(c->facts, t->rank, t->size);
    if (fst != DDP_OK) { /* every process of a mis-launched job fails alike: nothing to agree with */
        ddp_mark_error_shared();
        *out = c; /* the caller finalizes */
        return fst;
    }
    snprintf(t->launcher, sizeof t->launcher, "%s", c->facts->source);
    snprintf(t->job_id, sizeof t->job_id, "%s", c->facts->job_id);
    t->restart_count = c->facts->restart_count;
    c->device = DDP_DEVICE_CPU;
    c->cuda_device = -1;
    *out = c;
    return DDP_OK;
}

ddp_status ddp_finalize(ddp_ctx *c)
{
    if (!c) return DDP_OK;
    DDP_CHECK(ddp_ctx_alive(c, __func__)); /* finalized already: the block is freed, not to be touched */
    char why[768]; /* a failure of this rank's alone: the others may wait in the next collective */
    if (ddp_ctx_local_failure_pending(c, why, sizeof why, NULL) && !c->comm_broken) ddp_ctx_break_alone(c, why);
    if (c->comm_broken) /* ncclCommDestroy could wait for the stalled rank's side of a pending collective */
        ddp_nccl_abort(c);
    else
        ddp_nccl_destroy(c);
    for (int i = 0; i < 3; i++)
        if (c->backends[i]) c->backends[i]->destroy(c->backends[i]);
    ddp_ctx_unregister(c);
    if (c->comm_broken) /* a collective left pending: freeing its communicator or MPI_Finalize waits for the
                           stalled rank; the block stays allocated (ctxlive.c keeps it) for the pending request */
        return ddp_set_error(DDP_ERR_MISMATCH,
                             "ddp_finalize: MPI not finalized: %s (%s); end the job: exit non-zero or MPI_Abort",
                             c->comm_broken == 2 ? "this rank failed alone, the others perhaps waiting "
                                                   "in a collective"
                                                 : "an earlier collective timeout left a collective pending",
                             c->broken_why);
    MPI_Comm_free(&c->local);
    MPI_Comm_free(&c->world);
    int owns = c->owns_mpi;
    free(c->watch->scratch);
    free(c); /* the ctx_block: the context is its first member */
    int fin = 0;
    MPI_Finalized(&fin);
    if (owns && !fin) MPI_Finalize();
    return DDP_OK;
}

const ddp_topology *ddp_topo(const ddp_ctx *c) { return ddp_ctx_is_live(c) ? &c->topo : NULL; }

/* The device a caller asked for, as it asked: the CLI's option ("--device cuda", ctx->cli_names) or the value a
 * C-API program passed to ddp_select_device ("DDP_DEVICE_CUDA"). */
static const char *dev_name(const ddp_ctx *c, ddp_device d)
{
    static const char *cli[3] = {"--device auto", "--device cpu", "--device cuda"};
    static const char *api[3] = {"DDP_DEVICE_AUTO", "DDP_DEVICE_CPU", "DDP_DEVICE_CUDA"};
    return (unsigned)d > DDP_DEVICE_CUDA ? "?" : c->cli_names ? cli[d] : api[d];
}

/* One rank per GPU: a node with more ranks than visible devices is refused (NCCL would reject two ranks
 * on one GPU with "Duplicate GPU detected" deep inside its init). Collective over the node's ranks. */
static ddp_status check_ranks_per_gpu(ddp_ctx *c, int ndev)
{
    ddp_topology *t = &c->topo;
    int *ranks = ddp_calloc((size_t)t->local_size, sizeof *ranks);
    int ok = ranks != NULL; /* agreed by the node's ranks before their allgather */
    int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->local);
    if (rc != MPI_SUCCESS) {
        free(ranks);
        return ddp_mpi_error(rc, "MPI_Allreduce(node ranks)", __FILE__, __LINE__);
    }
    if (!ok) {
        free(ranks);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the list of %d node ranks (%zu bytes on one of them)",
                             t->local_size, (size_t)t->local_size * sizeof *ranks);
    }
    rc = MPI_Allgather(&t->rank, 1, MPI_INT, ranks, 1, MPI_INT, c->local);
    if (rc != MPI_SUCCESS) {
        free(ranks);
        return ddp_mpi_error(rc, "MPI_Allgather(node ranks)", __FILE__, __LINE__);
    }
    ddp_status st = DDP_OK;
    if (t->local_size > ndev) {
        char list[256];
        size_t k = 0;
        for (int i = 0; i < t->local_size && k + 16 < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? "," : "", ranks[i]);
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        st = ddp_set_error(DDP_ERR_ARG,
                           "%s: node %d (%s) runs %d ranks (%s) but sees %d CUDA device(s) "
                           "(CUDA_VISIBLE_DEVICES=%s): mpiddp uses one GPU per rank; start at most %d rank(s) per "
                           "node, or use %s",
                           dev_name(c, DDP_DEVICE_CUDA), t->node_id, t->host, t->local_size, list, ndev,
                           vis ? vis : "unset", ndev, dev_name(c, DDP_DEVICE_CPU));
    }
    free(ranks);
    return st;
}

ddp_status ddp_select_device(ddp_ctx *c, ddp_device want, ddp_device *got, char *why)
{
    DDP_CTX_ARG(c);
    int valid = want == DDP_DEVICE_AUTO || want == DDP_DEVICE_CPU || want == DDP_DEVICE_CUDA;
    int n = !valid || want == DDP_DEVICE_CPU ? 0 : ddp_cuda_device_count();
    char buf[160];
    ddp_device d = want;
    /* the node's ranks first agree on what they ask for and see, so that all or none of them enter
     * check_ranks_per_gpu's collectives: a rank asking for cpu (or a device that does not exist) once returned
     * without a collective while the others waited in it for ever; ranks that see different numbers of devices
     * (CUDA_VISIBLE_DEVICES set per rank) hung there, the ones seeing none (or, under auto, too few) having left */
    int w = valid ? (int)want : 99; /* the node's ranks agree: every one of them refuses an invalid want */
    int mm[4] = {n, -n, w, -w};
    int rc = MPI_Allreduce(MPI_IN_PLACE, mm, 4, MPI_INT, MPI_MIN, c->local);
    if (rc != MPI_SUCCESS) return ddp_mpi_error(rc, "MPI_Allreduce(node devices)", __FILE__, __LINE__);
    int lo = mm[0], hi = -mm[1];
    if (mm[2] != -mm[3]) {
        char span[64]; /* 99 stands for an invalid want, which the line does not print as a value */
        if (-mm[3] == 99)
            snprintf(span, sizeof span, "one of them asks for no device there is");
        else
            snprintf(span, sizeof span, "want %d to %d", mm[2], -mm[3]);
        ddp_set_error(DDP_ERR_ARG,
                      "%s: the ranks of node %d (%s) ask for different devices (%s; rank %d: %d): it is collective "
                      "over a node's ranks, which must pass the same want",
                      __func__, c->topo.node_id, c->topo.host, span, c->topo.rank, (int)want);
        return DDP_ERR_ARG;
    }
    if (!valid)
        return ddp_set_error(DDP_ERR_ARG, "%s: want %d: not a device (DDP_DEVICE_AUTO, _CPU or _CUDA)", __func__,
                             (int)want);
    if (lo != hi) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (want == DDP_DEVICE_CUDA)
            return ddp_set_error(DDP_ERR_ARG,
                                 "%s: the ranks of node %d (%s) see different numbers of CUDA devices "
                                 "(%d to %d; rank %d sees %d, CUDA_VISIBLE_DEVICES=%s): every rank of a node must see "
                                 "the same GPUs, one per rank on the node (do not set CUDA_VISIBLE_DEVICES per rank)",
                                 dev_name(c, want), c->topo.node_id, c->topo.host, lo, hi, c->topo.rank, n,
                                 vis ? vis : "unset");
        snprintf(buf, sizeof buf,
                 "%s: the ranks of this node see %d to %d CUDA devices (not the same GPUs), "
                 "using cpu",
                 dev_name(c, want), lo, hi);
        d = DDP_DEVICE_CPU;
    } else if (want == DDP_DEVICE_AUTO) {
        d = n > 0 ? DDP_DEVICE_CUDA : DDP_DEVICE_CPU;
        if (n > 0)
            snprintf(buf, sizeof buf, "%s: %d CUDA device(s) visible%s, using cuda", dev_name(c, want), n,
                     ddp_cuda() && ddp_cuda()->emulated ? " (host emulator)" : "");
        else
            snprintf(buf, sizeof buf, "%s: %s, using cpu", dev_name(c, want), ddp_cuda_device_why());
    } else {
        snprintf(buf, sizeof buf, "%s", dev_name(c, want));
    }
    if (d == DDP_DEVICE_CUDA) {
        if (!ddp_cuda_built())
            return ddp_set_error(DDP_ERR_ARG, "%s: CUDA plugin unavailable: %s", dev_name(c, DDP_DEVICE_CUDA),
                                 ddp_cuda_why());
        if (n == 0)
            return ddp_set_error(DDP_ERR_ARG, "%s: %s on %s", dev_name(c, DDP_DEVICE_CUDA), ddp_cuda_device_why(),
                                 c->topo.host);
        if (want == DDP_DEVICE_AUTO && c->topo.local_size > n) { /* auto never oversubscribes a GPU */
            snprintf(buf, sizeof buf, "%s: %d CUDA device(s) for %d ranks on this node (one GPU per rank), using cpu",
                     dev_name(c, want), n, c->topo.local_size);
            d = DDP_DEVICE_CPU;
        } else {
            DDP_CHECK(check_ranks_per_gpu(c, n));
            c->cuda_device = c->topo.local_rank; /* GPU = node-local rank */
        }
    }
    c->device = d;
    if (why) snprintf(why, 160, "%s", buf);
    if (got) *got = d;
    return DDP_OK;
}

ddp_status ddp_select_device_all(ddp_ctx *c, ddp_device want, ddp_device *got, char *why)
{
    DDP_CTX_ARG(c);
    ddp_device d = DDP_DEVICE_CPU;
    /* every rank must ask for the same device, in one line naming the ranks' wants, before ddp_select_device's
     * node collective (which agrees per node only): ranks asking for cpu and auto once hung there */
    int w[2] = {(int)want, -(int)want};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, w, 2, MPI_INT, MPI_MIN, c->world));
    if (w[0] != -w[1]) {
        ddp_set_error(DDP_ERR_ARG, "%s: the ranks ask for different devices (want %d to %d; rank %d: %d)", __func__,
                      w[0], -w[1], c->topo.rank, (int)want);
        ddp_mark_error_shared();
        return DDP_ERR_ARG;
    }
    DDP_CHECK(ddp_agree_status(c, ddp_select_device(c, want, &d, why)));
    /* --device auto decides per node: one job must not mix CPU and GPU ranks (MPI and NCCL sync) */
    int mine[2] = {(int)d, -(int)d}, all[2];
    MPI_CHECK(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, c->world));
    if (all[0] != -all[1]) {
        ddp_set_error(DDP_ERR_ARG, "%s chose cuda on some nodes and cpu on others (rank %d: %s); pass %s or %s",
                      dev_name(c, want), c->topo.rank, d == DDP_DEVICE_CUDA ? "cuda" : "cpu",
                      dev_name(c, DDP_DEVICE_CPU), dev_name(c, DDP_DEVICE_CUDA));
        ddp_mark_error_shared();
        return DDP_ERR_ARG;
    }
    if (got) *got = d;
    return DDP_OK;
}

ddp_status ddp_ctx_backend(ddp_ctx *c, ddp_device dev, ddp_backend **out)
{
    if (dev != DDP_DEVICE_AUTO && dev != DDP_DEVICE_CPU && dev != DDP_DEVICE_CUDA)
        return ddp_set_error(DDP_ERR_ARG, "device %d: not a device (DDP_DEVICE_AUTO, _CPU or _CUDA)", (int)dev);
    if (dev == DDP_DEVICE_AUTO) dev = c->device;
    if (!c->backends[dev]) {
        if (dev == DDP_DEVICE_CUDA) {
            if (c->cuda_device < 0) return ddp_set_error(DDP_ERR_ARG, "CUDA backend requested before device selection");
            DDP_CHECK(ddp_backend_cuda_create(c->cuda_device, &c->backends[dev]));
        } else {
            DDP_CHECK(ddp_backend_cpu_create(ddp_blas_threads_from_env(), &c->backends[dev]));
        }
    }
    c->backends[dev]->cli_names = c->cli_names; /* its messages name what the caller set (optname.h) */
    *out = c->backends[dev];
    return DDP_OK;
}
