/* bench_ckpt.c — what the checkpoints' integrity costs (issue #31): writing and reading N floats x 3 through mpiddp
 * (CRC-32 per dataset) beside plain HDF5 without checksums and the peer, HDF5's Fletcher-32 filter. */
#include "mpi_ddp/train/checkpoint.h"
#include "mpi_ddp/train/ckpt_verify.h"
#include "mpiddp.h"
#include "bench_util.h"

#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT 4 /* tensors per group: 1/2, 1/4, 1/8 and the rest of N */

static void specs(int64_t n, ddp_tensor_spec *t)
{
    static const char *names[NT] = {"w1", "w2", "w3", "b"};
    int64_t left = n;
    for (int k = 0; k < NT; k++) {
        int64_t s = k < NT - 1 ? n >> (k + 1) : left;
        t[k] = (ddp_tensor_spec){.name = names[k], .ndim = 1, .shape = {s}};
        left -= s;
    }
}

static void fsync_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        if (fsync(fd) != 0) perror("fsync");
        close(fd);
    }
}

/* The three groups through plain HDF5 on disk (sec2), without checksums (fletcher 0) or with Fletcher-32; to a
 * temporary name, fsynced and renamed, as checkpoints were written before #31. */
static int h5_write(const char *path, const ddp_tensor_spec *t, float *const *arr, int fletcher)
{
    static const char *groups[3] = {"params", "exp_avg", "exp_avg_sq"};
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int bad = f < 0;
    for (int g = 0; g < 3 && !bad; g++) {
        hid_t gr = H5Gcreate2(f, groups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        int64_t off = 0;
        for (int k = 0; k < NT && gr >= 0 && !bad; k++) {
            hsize_t dims = (hsize_t)t[k].shape[0], chunk = dims < (1u << 20) ? dims : (1u << 20);
            hid_t sp = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
            if (fletcher) bad |= H5Pset_chunk(dcpl, 1, &chunk) < 0 || H5Pset_fletcher32(dcpl) < 0;
            hid_t d = H5Dcreate2(gr, t[k].name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            bad |= d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, arr[g] + off) < 0;
            bad |= (d >= 0 && H5Dclose(d) < 0) || H5Pclose(dcpl) < 0 || H5Sclose(sp) < 0;
            off += t[k].shape[0];
        }
        bad |= gr < 0 || H5Gclose(gr) < 0;
    }
    bad |= f < 0 || H5Fclose(f) < 0;
    fsync_file(tmp);
    return bad || rename(tmp, path) != 0;
}

static int h5_read(const char *path, const ddp_tensor_spec *t, float *const *arr)
{
    static const char *groups[3] = {"params", "exp_avg", "exp_avg_sq"};
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int bad = f < 0;
    char name[64];
    for (int g = 0; g < 3 && !bad; g++) {
        int64_t off = 0;
        for (int k = 0; k < NT && !bad; k++) {
            snprintf(name, sizeof name, "%s/%s", groups[g], t[k].name);
            hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
            bad |= d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, arr[g] + off) < 0;
            bad |= d >= 0 && H5Dclose(d) < 0;
            off += t[k].shape[0];
        }
    }
    bad |= f < 0 || H5Fclose(f) < 0;
    return bad;
}

static int cmp_d(const void *a, const void *b)
{
    return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b);
}
static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* A checkpoint of N floats x 3 (parameters and both AdamW moments) through mpiddp: an HDF5 file built in memory, a
 * CRC-32 per dataset, write/fsync/rename; read with checksum and finiteness checks. Beside it the same datasets written
 * straight to disk by HDF5 without checksums (the code path before #31: a temporary name, fsync, rename) and with
 * HDF5's Fletcher-32 filter (chunked datasets, the peer). Reads come from the page cache (the file was just written);
 * every write ends with fsync, so disk time is in all of them. Prints one table row per size and variant, and the
 * checks' CPU time alone (CRC-32 over the three arrays, the finiteness scan).
 *   bench_ckpt [--floats 10000000,100000000] [--dir .] [--reps 3] */
int main(int argc, char **argv)
{
    const char *sizes = "10000000,100000000", *dir = ".";
    int64_t reps64 = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--floats") && i + 1 < argc)
            sizes = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (bench_int("bench_ckpt", "--reps", argv[++i], 1, 100, &reps64, 1)) return 2;
        } else {
            fprintf(stderr, "usage: bench_ckpt [--floats N,N...] [--dir DIR] [--reps R]\n");
            return 2;
        }
    }
    const int reps = (int)reps64;
    if (strlen(dir) > 4000) {
        fprintf(stderr, "bench_ckpt: --dir: a path of %zu bytes (at most 4000)\n", strlen(dir));
        return 2;
    }
    { /* every size first: 16 floats to 2^34 (a 192 GiB checkpoint) */
        char *chk = strdup(sizes);
        int64_t n;
        int bad = !chk || !*sizes;
        for (char *tok = chk ? strtok(chk, ",") : NULL; tok && !bad; tok = strtok(NULL, ","))
            bad = bench_int("bench_ckpt", "--floats", tok, 16, (int64_t)1 << 34, &n, 1);
        free(chk);
        if (bad) return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    printf("| floats x 3 | file MB | variant | write s (median of %d) | read s | write GB/s | read GB/s "
           "|\n|---:|---:|---|---:|---:|---:|---:|\n",
           reps);
    char *list = strdup(sizes);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int64_t n = atoll(tok); /* checked above */
        ddp_tensor_spec t[NT];
        specs(n, t);
        ddp_model model = {.name = "bench", .ntensors = NT, .tensors = t};
        float *arr[3], *back[3];
        for (int g = 0; g < 3; g++) {
            arr[g] = malloc((size_t)n * sizeof(float));
            back[g] = malloc((size_t)n * sizeof(float));
            if (!arr[g] || !back[g]) {
                fprintf(stderr, "out of memory at %lld floats\n", (long long)n);
                return 1;
            }
            for (int64_t i = 0; i < n; i++) arr[g][i] = (float)((i * 2654435761u + (uint64_t)g) % 1000003) * 1e-6f;
        }
        double bytes = 3.0 * (double)n * sizeof(float);
        static const char *variants[3] = {"mpiddp (crc32 + finite, in-memory image)",
                                          "HDF5 on disk, no checksums (before #31)", "HDF5 Fletcher-32 (chunks of 1M)"};
        char path[4096];
        for (int v = 0; v < 3; v++) {
            double tw[100], tr[100];
            snprintf(path, sizeof path, "%s/bench_ckpt_%d.h5", dir, v);
            for (int r = 0; r < reps; r++) {
                int bad;
                double t0 = now_s();
                if (v == 0) {
                    ddp_ckpt_state cs = {.world_size = 1, /* AdamW's defaults: a read refuses constants out of range */
                                         .best_score = NAN,
                                         .beta1 = 0.9,
                                         .beta2 = 0.999,
                                         .eps = 1e-8,
                                         .weight_decay = 0.01};
                    snprintf(cs.monitor, sizeof cs.monitor, "val/loss");
                    bad = ddp_ckpt_write(path, &model, arr[0], arr[1], arr[2], &cs) != DDP_OK;
                } else
                    bad = h5_write(path, t, arr, v == 2);
                tw[r] = now_s() - t0;
                t0 = now_s();
                if (v == 0) {
                    ddp_ckpt_state cs;
                    bad |= ddp_ckpt_read(path, &model, NULL, back[0], back[1], back[2], &cs, 0) != DDP_OK;
                    if (!bad) free(cs.best_local), free(cs.best_local_es), free(cs.topk_json);
                } else
                    bad |= h5_read(path, t, back);
                tr[r] = now_s() - t0;
                if (bad || memcmp(arr[2], back[2], (size_t)n * sizeof(float)) != 0) {
                    fprintf(stderr, "%s: %s failed: %s\n", path, variants[v], v == 0 ? ddp_last_error() : "HDF5 error");
                    return 1;
                }
            }
            FILE *fp = fopen(path, "rb");
            double mb = 0;
            if (fp && fseek(fp, 0, SEEK_END) == 0) mb = (double)ftell(fp) / 1e6;
            if (fp) fclose(fp);
            double w = median(tw, reps), rd = median(tr, reps);
            printf("| %lld | %.0f | %s | %.3f | %.3f | %.2f | %.2f |\n", (long long)n, mb, variants[v], w, rd,
                   bytes / w / 1e9, bytes / rd / 1e9);
            unlink(path);
        }
        double tc[100], tf[100];
        volatile uint32_t sink = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            for (int g = 0; g < 3; g++) sink ^= ddp_ckpt_crc32(arr[g], n, sizeof(float));
            tc[r] = now_s() - t0;
            t0 = now_s();
            int64_t nf = 0;
            for (int g = 0; g < 3; g++)
                for (int64_t i = 0; i < n; i++) nf += !isfinite(back[g][i]);
            tf[r] = now_s() - t0;
            sink ^= (uint32_t)nf;
        }
        double c = median(tc, reps), fi = median(tf, reps);
        printf("| %lld | | checks alone: crc32 %.3f s (%.2f GB/s), finiteness %.3f s (%.2f GB/s) | | | | |\n",
               (long long)n, c, bytes / c / 1e9, fi, bytes / fi / 1e9);
        for (int g = 0; g < 3; g++) free(arr[g]), free(back[g]);
    }
    free(list);
    return 0;
}
