/* bench_open.c — the header phase of start-up (issue #33): how long ddp_dataset_open takes to list a dataset
 * directory, validate its shards (spread over the ranks, or from its manifest) and give every rank the metadata. */
#include "io/dataset.h"
#include "io/shard.h"
#include "mpi_ddp/core/ctx.h"
#include "mpiddp.h"
#include "bench_util.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double private_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) kb = atof(line + 8);
    if (f) fclose(f);
    return kb / 1024.0;
}

static int drop_caches(void)
{
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f) return 0;
    int ok = fputs("3\n", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* With --cold the page cache is dropped first (root only). Prints one line per repetition: the slowest rank's seconds,
 * the shards this process validated, and rank 0's private memory after the open.
 *   mpirun -np 2 bench_open --data DIR [--reps 3] [--cold] */
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "bench_open: %s\n", ddp_last_error());
        return 1;
    }
    const char *data = NULL;
    int reps = 3, cold = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cold"))
            cold = 1;
    }
    int rank = ctx->topo.rank, size = ctx->topo.size;
    if (!data || reps < 1) {
        if (rank == 0) fprintf(stderr, "usage: bench_open --data DIR [--reps N] [--cold]\n");
        ddp_finalize(ctx);
        return 2;
    }
    int rc = 0;
    for (int r = 0; r < reps && rc == 0; r++) {
        int dropped = 0;
        if (cold && ctx->topo.local_rank == 0) dropped = drop_caches();
        MPI_Bcast(&dropped, 1, MPI_INT, 0, ctx->world);
        int64_t v0 = ddp_io_counters_get()->validated;
        MPI_Barrier(ctx->world);
        double t0 = now_s();
        ddp_dataset *ds = NULL;
        ddp_status st = ddp_dataset_open(ctx, data, &ds);
        double t = now_s() - t0, tmax = 0;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, ctx->world);
        int64_t v = ddp_io_counters_get()->validated - v0, vsum = 0;
        MPI_Allreduce(&v, &vsum, 1, MPI_INT64_T, MPI_SUM, ctx->world);
        if (st != DDP_OK) {
            if (rank == 0) fprintf(stderr, "bench_open: %s\n", ddp_last_error());
            rc = 1;
            break;
        }
        if (rank == 0)
            printf("bench_open np=%d %s rep %d: %.3f s (slowest rank), %lld shards, %lld validated (all ranks), "
                   "private %.1f MiB on rank 0%s\n",
                   size, data, r, tmax, (long long)ds->nshards, (long long)vsum, private_mib(),
                   cold ? (dropped ? ", cold (page cache dropped)" : ", NOT cold (drop_caches refused)") : ", warm");
        ddp_dataset_close(ds);
    }
    ddp_finalize(ctx);
    return rc;
}
