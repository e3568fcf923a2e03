/* cmd_env.c — `mpiddp env`: one line per rank (in rank order, printed by rank 0) with rank, local
 * rank, node, host, device, backend, launcher, the MPI / HDF5 / CUDA / NCCL / cuDNN versions and, on a GPU, which
 * attention a bf16 encoder would run (cuDNN's probe). */
#include "cli.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/train/runinfo.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE 4096

/* What attention_select says for a bf16 encoder of d 512 with 8 heads (heads of 64) on device dev: "cudnn: <why>"
 * (cuDNN's forward and backward probes built, or why the backward stays on the own kernels), "own: <why>", or why
 * it could not ask. The first thing a new GPU or cuDNN shows (docs/transformer.md). */
static void attention_probe(int dev, char *out, size_t n)
{
    ddp_backend *b = NULL;
    const char *name = NULL;
    char why[700] = "";
    ddp_status st = ddp_cuda()->backend_create(dev, &b);
    if (st == DDP_OK) st = b->attention_select(b, DDP_PRECISION_BF16, 512, 8, 0.0f, &name, why, sizeof why);
    if (st == DDP_OK)
        snprintf(out, n, "%s: %s", name, why);
    else
        snprintf(out, n, "not probed: %s", ddp_last_error());
    if (b) b->destroy(b);
    for (char *c = out; *c; c++) /* one field of the line */
        if (*c == '"') *c = '\'';
}

int cmd_env(ddp_ctx *ctx, int argc, char **argv)
{
    int device = 0;
    cli_opt opts[] = {{"device", OPT_CHOICE, &device, "auto|cpu|cuda", 0, 0, "device to resolve (default auto)", 0}};
    const cli_cmd cmd = {"env", "[--device auto|cpu|cuda]",
                         "Prints one line per rank: topology as MPI sees it, job facts, device and library versions.",
                         opts, 1};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, NULL, 0, NULL);
    if (done >= 0) return done;
    ddp_device want = device == 1 ? DDP_DEVICE_CPU : device == 2 ? DDP_DEVICE_CUDA : DDP_DEVICE_AUTO, got;
    char why[160];
    ddp_status st = ddp_select_device_all(ctx, want, &got, why);
    if (st != DDP_OK) return cli_fail(ctx, "env", st);
    const ddp_topology *t = ddp_topo(ctx);
    ddp_versions v;
    ddp_versions_get(&v);
    char cudnn[400] = "unavailable: no CUDA plugin";
    const char *attn = ddp_knob_str(DDP_KNOB_ATTENTION);
    if (ddp_cuda()) { /* env is a diagnostic: report the plugin even on a node without a GPU */
        ddp_cuda()->version_string(v.cuda, sizeof v.cuda);
        ddp_cuda()->nccl_version_string(v.nccl, sizeof v.nccl);
        ddp_cuda()->cudnn_version_string(cudnn, sizeof cudnn);
    } else {
        snprintf(v.cuda, sizeof v.cuda, "unavailable");
        snprintf(v.nccl, sizeof v.nccl, "unavailable");
    }
    char dev[200] = "cpu", probe[800] = "-";
    if (got == DDP_DEVICE_CUDA) {
        char name[160];
        ddp_cuda_device_name(ctx->cuda_device, name, sizeof name);
        snprintf(dev, sizeof dev, "cuda:%d(%s)", ctx->cuda_device, name);
        attention_probe(ctx->cuda_device, probe, sizeof probe);
    }
    char line[LINE];
    int len = snprintf(
        line, sizeof line,
        "rank=%d size=%d local_rank=%d local_size=%d node=%d nodes=%d host=%s device=%s backend=%s launcher=%s job=%s "
        "mpi=\"%s\" hdf5=%s cuda=\"%s\" nccl=\"%s\" cudnn=\"%s\" attention=%s attention_bf16=\"%s\"",
        t->rank, t->size, t->local_rank, t->local_size, t->node_id, t->num_nodes, t->host, dev,
        got == DDP_DEVICE_CUDA ? "cuda(cublas+nccl)" : "cpu(openblas+mpi)", t->launcher, t->job_id[0] ? t->job_id : "-",
        v.mpi, v.hdf5, v.cuda, v.nccl, cudnn, attn ? attn : "auto", probe);
    if (len >= (int)sizeof line) memcpy(line + sizeof line - 4, "...", 4); /* a line too long says so */
    char *all = t->rank == 0 ? ddp_calloc((size_t)t->size, LINE) : NULL;
    /* rank 0 gathers into it: a failed allocation there ends every rank with one line, before the gather */
    st = ddp_agree_status(ctx, t->rank == 0 && !all
                                   ? ddp_set_error(DDP_ERR_NOMEM, "out of memory for %d ranks' lines", t->size)
                                   : DDP_OK);
    if (st != DDP_OK) return cli_fail(ctx, "env", st);
    int mrc = MPI_Gather(line, LINE, MPI_CHAR, all, LINE, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (mrc != MPI_SUCCESS) return cli_fail(ctx, "env", ddp_set_error(DDP_ERR_MPI, "MPI_Gather failed"));
    if (t->rank == 0) {
        printf("# %s\n", why);
        for (int r = 0; r < t->size; r++) printf("%s\n", all + (size_t)r * LINE);
    }
    free(all);
    return 0;
}
