/* bench_allreduce.c — allreduce bandwidth in nccl-tests' conventions (MPI on CPU, NCCL with -d cuda), then mpiddp's
 * bucketed gradient sync against one raw MPI_Allreduce of the same bytes at the reference model's gradient sizes. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/comm/sync.h"
#include "mpiddp.h"
#include "bench_util.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* nccl-tests' sizes: a number with an optional K, M or G (binary); -1 for anything else or beyond 2^40 */
static int64_t parse_size(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s) return -1;
    if (*e == 'K' || *e == 'k')
        v *= 1024, e++;
    else if (*e == 'M' || *e == 'm')
        v *= 1024 * 1024, e++;
    else if (*e == 'G' || *e == 'g')
        v *= 1024.0 * 1024 * 1024, e++;
    return *e || !(v >= 0 && v <= 1099511627776.0) ? -1 : (int64_t)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every status is checked: a failing call stops the benchmark on every rank instead of printing timings. */
#define BENCH_CHECK(call)                                                                 \
    do {                                                                                  \
        if ((call) != DDP_OK) {                                                           \
            fprintf(stderr, "bench_allreduce: %s failed: %s\n", #call, ddp_last_error()); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
        }                                                                                 \
    } while (0)

/* nccl-tests' flags -b -e -f -n -w -c and columns size, count, type, time, algbw, busbw = algbw * 2(n-1)/n, #wrong;
 * CSV to -o.
 *   mpirun -np 2 bench_allreduce -b 8 -e 64M -f 4 -n 20 -w 5 [-d cpu|cuda] [-o allreduce.csv] */
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 1;
    int64_t minb = 8, maxb = 64 << 20, factor = 4;
    int64_t iters = 20, warm = 5, check = 1;
    const char *dev = "cpu", *csv = "allreduce.csv";
    const ddp_topology *t = ddp_topo(ctx);
    const int say = t->rank == 0;
    int bad = 0;
    if (bench_help(
            argc, argv,
            "usage: mpirun -np R bench_allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] "
            "[-d cpu|cuda] [-o CSV]\n"
            "  sizes in bytes with K, M or G (defaults: -b 8 -e 64M -f 4 -n 20 -w 5 -c 1 -d cpu -o allreduce.csv); "
            "-c 1 checks the sums",
            say)) {
        ddp_finalize(ctx);
        return 0;
    }
#define P "bench_allreduce"
    for (int i = 1; i < argc && !bad; i += 2) { /* a bad value or option: one line, exit 2 on every rank */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            bad = bench_bad_option(P, a, 0, say);
        else if (!strcmp(a, "-b"))
            minb = parse_size(v);
        else if (!strcmp(a, "-e"))
            maxb = parse_size(v);
        else if (!strcmp(a, "-f"))
            bad = bench_int(P, a, v, 2, 1024, &factor, say);
        else if (!strcmp(a, "-n"))
            bad = bench_int(P, a, v, 1, 1000000, &iters, say);
        else if (!strcmp(a, "-w"))
            bad = bench_int(P, a, v, 0, 1000000, &warm, say);
        else if (!strcmp(a, "-c"))
            bad = bench_int(P, a, v, 0, 1, &check, say);
        else if (!strcmp(a, "-d"))
            bad = bench_choice(P, a, v, "cpu|cuda", say), dev = v;
        else if (!strcmp(a, "-o"))
            csv = v;
        else
            bad = bench_bad_option(P, a, 1, say);
    }
    /* whole floats, and at most INT_MAX of them (MPI_Allreduce's count) */
    if (!bad && !(minb >= 4 && minb % 4 == 0 && maxb >= minb && maxb % 4 == 0 && maxb / 4 <= INT_MAX)) {
        if (say)
            fprintf(stderr, P ": -b %lld -e %lld: expected sizes from 4 B to %lld B, multiples of 4, -b <= -e\n",
                    (long long)minb, (long long)maxb, (long long)INT_MAX * 4);
        bad = 1;
    }
#undef P
    if (bad) {
        ddp_finalize(ctx);
        return 2;
    }
    int W = t->size, cuda = !strcmp(dev, "cuda");
    ddp_backend *be = NULL;
    ddp_sync_nccl *nccl = NULL; /* the trainer's NCCL path: comm stream, event, polled waits */
    if (cuda) {
        ddp_device got;
        BENCH_CHECK(ddp_select_device(ctx, DDP_DEVICE_CUDA, &got, NULL));
        BENCH_CHECK(ddp_ctx_backend(ctx, DDP_DEVICE_CUDA, &be));
        BENCH_CHECK(ddp_sync_nccl_create(ctx, be, &nccl));
    } else {
        BENCH_CHECK(ddp_ctx_backend(ctx, DDP_DEVICE_CPU, &be));
    }
    int64_t maxn = maxb / 4;
    float *host = malloc((size_t)maxn * 4), *buf = NULL;
    void *vb;
    if (!host) BENCH_CHECK(DDP_ERR_NOMEM);
    BENCH_CHECK(be->alloc(be, &vb, (size_t)maxn * 4));
    buf = vb;
    FILE *f = t->rank == 0 ? fopen(csv, "w") : NULL;
    if (f)
        fprintf(f,
                "table,backend,ranks,size_bytes,count,time_us,algbw_GBps,busbw_GBps,wrong,buckets,raw_time_us,ratio\n");
    if (t->rank == 0)
        printf(
            "# mpiddp bench_allreduce: %d ranks, backend %s, in-place float sum\n#\n%12s %12s %6s %10s %10s %10s %8s\n",
            W, cuda ? "nccl" : "mpi", "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    for (int64_t bytes = minb; bytes <= maxb; bytes *= factor) {
        int64_t cnt = bytes / 4;
        if (cnt < 1) continue;
        double tt = 0;
        long wrong = 0;
        for (int64_t it = -warm; it < iters; it++) {
            if (check || it < 0) {
                for (int64_t i = 0; i < cnt; i++) host[i] = (float)(t->rank + 1) * (float)((i % 13) + 1);
                BENCH_CHECK(be->upload(be, buf, host, (size_t)cnt * 4));
            }
            MPI_Barrier(MPI_COMM_WORLD);
            double a = now_s();
            if (cuda) {
                BENCH_CHECK(ddp_sync_nccl_launch(nccl, buf, cnt, "bench_allreduce"));
                BENCH_CHECK(ddp_sync_nccl_finish(nccl, "bench_allreduce"));
            } else if (MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
                BENCH_CHECK(DDP_ERR_MPI);
            }
            double d = now_s() - a;
            MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (it >= 0) tt += d;
            if (check && it >= 0) {
                BENCH_CHECK(be->download(be, host, buf, (size_t)cnt * 4));
                float ranks = (float)W * (float)(W + 1) / 2.0f;
                for (int64_t i = 0; i < cnt; i++) wrong += host[i] != ranks * (float)((i % 13) + 1);
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        double us = tt / iters * 1e6, alg = (double)bytes / (tt / iters) / 1e9, bus = alg * 2.0 * (W - 1) / W;
        if (t->rank == 0) {
            printf("%12lld %12lld %6s %10.1f %10.3f %10.3f %8ld\n", (long long)bytes, (long long)cnt, "float", us, alg,
                   bus, wrong);
            if (f)
                fprintf(f, "allreduce,%s,%d,%lld,%lld,%.2f,%.4f,%.4f,%ld,,,\n", cuda ? "nccl" : "mpi", W,
                        (long long)bytes, (long long)cnt, us, alg, bus, wrong);
        }
    }
    /* bucketed gradient sync vs one raw MPI_Allreduce of the same bytes (CPU) */
    if (!cuda) {
        const int64_t hs[3] = {64, 256, 512};
        if (t->rank == 0)
            printf("#\n# gradient sync (reference model, D=64, C=10, 25 MiB buckets) vs one MPI_Allreduce of the same "
                   "bytes\n"
                   "# (median of >= 50 alternating iterations each)\n%8s %12s %8s %12s %12s %8s\n",
                   "hidden", "bytes", "buckets", "sync(us)", "raw(us)", "ratio");
        for (int k = 0; k < 3; k++) {
            int64_t H = hs[k], n = H * 64 + H + H * H + H + 10 * H + 10;
            float *g = calloc((size_t)n + 2, 4);
            if (!g) BENCH_CHECK(DDP_ERR_NOMEM);
            ddp_sync *s;
            BENCH_CHECK(ddp_sync_create(ctx, be, g, n, 2, 25 << 20, &s));
            /* medians over the iterations (each the slower rank's time): single slow iterations on a shared
             * VM move a mean by several percent */
            int64_t reps = iters < 50 ? 50 : iters;
            double *vs = calloc((size_t)reps, sizeof *vs), *vr = calloc((size_t)reps, sizeof *vr);
            if (!vs || !vr) BENCH_CHECK(DDP_ERR_NOMEM);
            for (int64_t it = -warm; it < reps; it++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double a = now_s();
                ddp_sync_begin(s);
                ddp_sync_ready(s, 0, n); /* the whole gradient ready at once: the transport cost only */
                BENCH_CHECK(ddp_sync_finish(s, "bench"));
                double d1 = now_s() - a;
                MPI_Barrier(MPI_COMM_WORLD);
                a = now_s();
                MPI_Allreduce(MPI_IN_PLACE, g, (int)(n + 2), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                double d2 = now_s() - a;
                double dd[2] = {d1, d2};
                MPI_Allreduce(MPI_IN_PLACE, dd, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (it >= 0) vs[it] = dd[0], vr[it] = dd[1];
            }
            qsort(vs, (size_t)reps, sizeof *vs, cmp_double);
            qsort(vr, (size_t)reps, sizeof *vr, cmp_double);
            double ts = vs[reps / 2], tr = vr[reps / 2];
            free(vs), free(vr);
            if (t->rank == 0) {
                printf("%8lld %12lld %8d %12.1f %12.1f %8.2f\n", (long long)H, (long long)(n + 2) * 4,
                       ddp_sync_num_buckets(s), ts * 1e6, tr * 1e6, ts / tr);
                if (f)
                    fprintf(f, "sync,mpi,%d,%lld,%lld,%.2f,,,,%d,%.2f,%.3f\n", W, (long long)(n + 2) * 4,
                            (long long)(n + 2), ts * 1e6, ddp_sync_num_buckets(s), tr * 1e6, ts / tr);
            }
            ddp_sync_destroy(s);
            free(g);
        }
    }
    if (f) fclose(f);
    ddp_sync_nccl_destroy(nccl);
    be->release(be, buf);
    free(host);
    ddp_finalize(ctx);
    return 0;
}
