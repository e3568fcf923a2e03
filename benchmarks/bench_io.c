/* bench_io.c — sample read throughput of mpiddp's reader (memory-mapped shards) against per-sample H5Dread hyperslabs,
 * sequential and random, warm and cold page cache; run_io.sh sets it beside the h5py peer (peers/h5py_read.py). */
#include "io/dataset.h"
#include "io/sampler.h"
#include "mpiddp.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void rss(long *anon_kb, long *file_kb)
{
    *anon_kb = *file_kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        sscanf(line, "RssAnon: %ld", anon_kb);
        sscanf(line, "RssFile: %ld", file_kb);
    }
    if (f) fclose(f);
}

/* Drop the dataset's pages from the page cache (local rank 0 of each node), then wait for everyone. */
static void drop_cache(ddp_ctx *ctx, ddp_dataset *ds, MPI_Comm local)
{
    if (ddp_topo(ctx)->local_rank == 0)
        for (int64_t k = 0; k < ds->nshards; k++) {
            char p[8400];
            snprintf(p, sizeof p, "%s/%s", ds->dir, ds->shards[k].meta.name);
            int fd = open(p, O_RDONLY);
            if (fd >= 0) {
                fdatasync(fd);
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
    MPI_Barrier(local);
    MPI_Barrier(MPI_COMM_WORLD);
}

typedef struct {
    hid_t *files, *feats;
    int64_t **offsets; /* per shard, preloaded (fair to every reader) */
} h5_reader;

static int h5_open(ddp_dataset *ds, h5_reader *r)
{
    r->files = calloc((size_t)ds->nshards, sizeof(hid_t));
    r->feats = calloc((size_t)ds->nshards, sizeof(hid_t));
    r->offsets = calloc((size_t)ds->nshards, sizeof(int64_t *));
    for (int64_t k = 0; k < ds->nshards; k++) {
        char p[8400];
        snprintf(p, sizeof p, "%s/%s", ds->dir, ds->shards[k].meta.name);
        r->files[k] = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
        r->feats[k] = H5Dopen2(r->files[k], "features", H5P_DEFAULT);
        hid_t od = H5Dopen2(r->files[k], "offsets", H5P_DEFAULT);
        r->offsets[k] = malloc((size_t)(ds->shards[k].meta.n + 1) * sizeof(int64_t));
        if (r->feats[k] < 0 || od < 0 ||
            H5Dread(od, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, r->offsets[k]) < 0)
            return 0;
        H5Dclose(od);
    }
    return 1;
}

static void h5_close(ddp_dataset *ds, h5_reader *r)
{
    for (int64_t k = 0; k < ds->nshards; k++) {
        H5Dclose(r->feats[k]);
        H5Fclose(r->files[k]);
        free(r->offsets[k]);
    }
    free(r->files), free(r->feats), free(r->offsets);
}

static int64_t shard_of(ddp_dataset *ds, int64_t idx)
{
    int64_t lo = 0, hi = ds->nshards - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (ds->shards[mid].meta.first <= idx)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* A failed read: one line (why: mpiddp's error, or NULL after HDF5's own report), and the job ends (timings of a
 * failed read would be meaningless). */
static void io_fail(const char *what, const char *why)
{
    fprintf(stderr, "bench_io: %s failed%s%s\n", what, why ? ": " : " (HDF5's report above)", why ? why : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Reads sample idx into buf with reader ri (0 mmap as the batch loader does, 1 per-sample H5Dread). */
static int64_t read_one(ddp_dataset *ds, h5_reader *hr, int ri, int64_t idx, float *buf, int64_t D)
{
    int64_t nr;
    if (ri == 0) {
        const float *rows;
        int64_t lab, id;
        if (ddp_dataset_sample(ds, idx, buf, &rows, &nr, &lab, &id) != DDP_OK)
            io_fail("reading a sample", ddp_last_error());
        if (rows != buf) memcpy(buf, rows, (size_t)(nr * D) * sizeof(float));
        return nr;
    }
    int64_t k = shard_of(ds, idx), i = idx - ds->shards[k].meta.first;
    int64_t lo = hr->offsets[k][i];
    nr = hr->offsets[k][i + 1] - lo;
    hid_t fs = H5Dget_space(hr->feats[k]);
    hsize_t start[2] = {(hsize_t)lo, 0}, count[2] = {(hsize_t)nr, (hsize_t)D};
    hid_t ms = H5Screate_simple(2, count, NULL);
    if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(hr->feats[k], H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0 || H5Sclose(ms) < 0 || H5Sclose(fs) < 0)
        io_fail("H5Dread of a sample", NULL);
    return nr;
}

/* The mmap reader works as the batch loader does: madvise(WILLNEED) one batch (--ahead, 64 samples) ahead, MADV_RANDOM
 * for shuffled orders and MADV_SEQUENTIAL for in-order reads. Every rank appends one CSV row per pass to --csv (rank,
 * reader, order, cache, samples, bytes, seconds, RssAnon, RssFile); report_io.py aggregates the ranks and compares
 * with the h5py peer run on the same data.
 *   mpirun -np 4 bench_io --data DIR --samples 20000 --csv io_raw.csv [--readers mmap,h5dread] */
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 1;
    const char *data = NULL, *csv = "io_raw.csv", *readers = "mmap,h5dread";
    int64_t K = 20000, ahead_opt = 64;
    const ddp_topology *t = ddp_topo(ctx);
    int bad = 0;
#define USAGE "usage: mpirun -np R bench_io --data DIR [--samples K] [--csv FILE] [--readers mmap,h5dread] [--ahead N]"
    if (bench_help(argc, argv, USAGE, t->rank == 0)) {
        ddp_finalize(ctx);
        return 0;
    }
    for (int i = 1; i < argc && !bad; i += 2) { /* a bad value or option: one line, exit 2 on every rank */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            bad = bench_bad_option("bench_io", a, 0, t->rank == 0);
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--samples"))
            bad = bench_int("bench_io", a, v, 1, (int64_t)1 << 40, &K, t->rank == 0);
        else if (!strcmp(a, "--csv"))
            csv = v;
        else if (!strcmp(a, "--readers"))
            readers = v;
        else if (!strcmp(a, "--ahead"))
            bad = bench_int("bench_io", a, v, 0, 1 << 20, &ahead_opt, t->rank == 0);
        else
            bad = bench_bad_option("bench_io", a, 1, t->rank == 0);
    }
    if (bad) {
        ddp_finalize(ctx);
        return 2;
    }
    if (!data) {
        if (t->rank == 0) fprintf(stderr, "bench_io: --data is required (bench_io --help lists the options)\n");
        ddp_finalize(ctx);
        return 2;
    }
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &local);
    ddp_dataset *ds;
    if (ddp_dataset_open(ctx, data, &ds) != DDP_OK) {
        if (t->rank == 0) fprintf(stderr, "bench_io: %s\n", ddp_last_error());
        ddp_finalize(ctx);
        return 1;
    }
    int64_t N = ds->info.num_samples, D = ds->info.dim;
    if (K > N / t->size) K = N / t->size;
    float *buf = malloc((size_t)(ds->info.max_sample_rows * D) * sizeof(float));
    int64_t *idx = malloc((size_t)K * sizeof *idx);
    const char *orders[2] = {"seq", "rand"}, *caches[2] = {"cold", "warm"};
    for (int ri = 0; ri < 2; ri++) {
        const char *reader = ri == 0 ? "mmap" : "h5dread";
        if (!strstr(readers, reader)) continue;
        for (int oi = 0; oi < 2; oi++)
            for (int ci = 0; ci < 2; ci++) {
                for (int64_t j = 0; j < K; j++) /* seq: a contiguous block per rank; rand: uniform over the dataset */
                    idx[j] = oi == 0 ? (int64_t)t->rank * K + j
                                     : (int64_t)(ddp_mix64(0xbe7c4 ^ ((uint64_t)t->rank << 40) ^ (uint64_t)j) %
                                                 (uint64_t)N);
                /* reopen so the reader holds no pages from the previous pass */
                ddp_dataset_close(ds);
                if (ddp_dataset_open(ctx, data, &ds) != DDP_OK) io_fail("reopening the dataset", ddp_last_error());
                ds->access_hint = oi == 1 ? DDP_ACCESS_RANDOM : DDP_ACCESS_SEQUENTIAL; /* what the loader advises */
                if (ci == 0) drop_cache(ctx, ds, local);
                h5_reader hr = {0};
                if (ri == 1 && !h5_open(ds, &hr)) {
                    fprintf(stderr, "bench_io: HDF5 open failed\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                if (ci == 1) /* warm: one untimed pass with the same reader (pages resident and mapped: epoch >= 2) */
                    for (int64_t j = 0; j < K; j++) read_one(ds, &hr, ri, idx[j], buf, D);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now_s(), sum = 0;
                int64_t bytes = 0;
                const int64_t ahead = ahead_opt; /* the loader hints the next batch (64 samples) while one computes */
                if (ri == 0)
                    for (int64_t j = 0; j < ahead && j < K; j++) ddp_dataset_prefetch(ds, idx[j]);
                for (int64_t j = 0; j < K; j++) {
                    if (ri == 0 && j + ahead < K) ddp_dataset_prefetch(ds, idx[j + ahead]);
                    int64_t nr = read_one(ds, &hr, ri, idx[j], buf, D);
                    sum += buf[0] + buf[nr * D - 1];
                    bytes += nr * D * 4;
                }
                double dt = now_s() - t0;
                long anon, file;
                rss(&anon, &file);
                if (ri == 1) h5_close(ds, &hr);
                for (int r = 0; r < t->size; r++) { /* one writer at a time */
                    if (r == t->rank) {
                        FILE *f = fopen(csv, "a");
                        int ok = f && fprintf(f, "%d,%d,%s,%s,%s,%lld,%lld,%.6f,%.1f,%.1f,%g\n", t->size, t->rank,
                                              reader, orders[oi], caches[ci], (long long)K, (long long)bytes, dt,
                                              anon / 1024.0, file / 1024.0, sum) > 0;
                        if (f && fclose(f) != 0) ok = 0;
                        if (!ok) {
                            fprintf(stderr, "bench_io: cannot append to %s: %s\n", csv, strerror(errno));
                            MPI_Abort(MPI_COMM_WORLD, 1);
                        }
                    }
                    MPI_Barrier(MPI_COMM_WORLD);
                }
            }
    }
    free(buf);
    free(idx);
    ddp_dataset_close(ds);
    MPI_Comm_free(&local);
    ddp_finalize(ctx);
    return 0;
}
