/* writer.c — the atomic shard writer shared by synth and pack. */
#include "io/writer.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "io/manifest.h"
#include "io/shard.h"
#include "mpi_ddp/core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define H5W(call, what)                                                      \
    do {                                                                     \
        if ((call) < 0) DDP_FAIL(DDP_ERR_HDF5, "%s: %s failed", path, what); \
    } while (0)

static hid_t make_dset(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(pl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(pl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER);
    hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Pclose(pl);
    H5Sclose(sp);
    return d;
}

ddp_status ddp_shard_write(const char *path, int64_t dim, int64_t classes, int64_t n, const int64_t *offsets,
                           const int64_t *labels, const int64_t *sample_ids, ddp_rows_fn fill, void *arg)
{
    ddp_h5_quiet();
    char tmp[8192], dcopy[4096], bcopy[4096];
    snprintf(dcopy, sizeof dcopy, "%s", path);
    snprintf(bcopy, sizeof bcopy, "%s", path);
    const char *dir = dirname(dcopy), *base = basename(bcopy);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, base, (long)getpid());
    ddp_status st = DDP_OK;
    int placed = 0; /* path is this call's file: a failure after the rename removes it too */
    hid_t fapl = -1, f = -1, d = -1, fs = -1, ms = -1;
    float *buf = NULL;
    int64_t rows = offsets[n];
    fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5W(fapl, "H5Pcreate");
    H5W(H5Pset_alignment(fapl, 1, 4096), "H5Pset_alignment");
    ddp_register_temporary(tmp); /* SIGINT, SIGTERM, SIGHUP: the handler removes it (app/stop_signals.c) */
    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) DDP_FAIL(DDP_ERR_IO, "%s: cannot create (directory missing or not writable?)", tmp);
    H5W(ddp_h5_attr_str(f, "format", "mpiddp-shard"), "writing attribute 'format'");
    H5W(ddp_h5_attr_i64(f, "version", 1), "writing attribute 'version'");
    H5W(ddp_h5_attr_i64(f, "num_classes", classes), "writing attribute 'num_classes'");
    hsize_t dn1 = (hsize_t)n + 1, dn = (hsize_t)n;
    hid_t od = make_dset(f, "offsets", H5T_STD_I64LE, 1, &dn1);
    H5W(od, "creating dataset 'offsets'");
    herr_t e = H5Dwrite(od, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets);
    H5Dclose(od);
    H5W(e, "writing dataset 'offsets'");
    hid_t ld = make_dset(f, "labels", H5T_STD_I64LE, 1, &dn);
    H5W(ld, "creating dataset 'labels'");
    e = H5Dwrite(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
    H5Dclose(ld);
    H5W(e, "writing dataset 'labels'");
    if (sample_ids) {
        hid_t id = make_dset(f, "sample_ids", H5T_STD_I64LE, 1, &dn);
        H5W(id, "creating dataset 'sample_ids'");
        e = H5Dwrite(id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sample_ids);
        H5Dclose(id);
        H5W(e, "writing dataset 'sample_ids'");
    }
    hsize_t fdims[2] = {(hsize_t)rows, (hsize_t)dim};
    d = make_dset(f, "features", H5T_IEEE_F32LE, 2, fdims);
    H5W(d, "creating dataset 'features'");
    fs = H5Dget_space(d);
    /* write in blocks of whole samples, about 16 MiB each */
    int64_t cap_rows = ((int64_t)4 << 20) / dim;
    int64_t maxr = 0;
    for (int64_t i = 0; i < n; i++)
        if (offsets[i + 1] - offsets[i] > maxr) maxr = offsets[i + 1] - offsets[i];
    if (cap_rows < maxr) cap_rows = maxr;
    buf = ddp_calloc((size_t)(cap_rows * dim), sizeof *buf);
    if (!buf) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && offsets[j + 1] - offsets[i] <= cap_rows) j++;
        for (int64_t k = i; k < j; k++)
            DDP_TRY(fill(arg, k, buf + (offsets[k] - offsets[i]) * dim, offsets[k + 1] - offsets[k]));
        hsize_t start[2] = {(hsize_t)offsets[i], 0}, count[2] = {(hsize_t)(offsets[j] - offsets[i]), (hsize_t)dim};
        ms = H5Screate_simple(2, count, NULL);
        H5W(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), "selecting rows");
        H5W(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf), "writing dataset 'features'");
        H5Sclose(ms);
        ms = -1;
        i = j;
    }
    H5Sclose(fs);
    fs = -1;
    H5Dclose(d);
    d = -1;
    H5W(H5Fflush(f, H5F_SCOPE_GLOBAL), "H5Fflush");
    e = H5Fclose(f);
    f = -1;
    H5W(e, "H5Fclose");
    DDP_TRY(ddp_fsync_path(tmp, 0));
    if (rename(tmp, path) != 0) DDP_FAIL(DDP_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
    placed = 1;
    ddp_register_temporary(NULL); /* a complete shard: a signal now leaves it, as the command's --out holds it */
    DDP_TRY(ddp_fsync_path(dir, 1));
done:
    free(buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (fapl >= 0) H5Pclose(fapl);
    if (st != DDP_OK) unlink(placed ? path : tmp);
    ddp_register_temporary(NULL);
    return st;
}

/* Whether s starts with prefix followed by one or more digits and then the end of s. */
static int prefix_digits(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0) return 0;
    s += n;
    return *s && strspn(s, "0123456789") == strlen(s);
}

/* 1 for a temporary this module or the manifest writer names: .shard-N.h5.tmp.PID, or
 * mpiddp-manifest.bin.tmp.HOST.pidns-NS.PID (and .tmp.HOST.PID, .tmp.PID: without /proc, an older mpiddp's). */
static int is_writer_temporary(const char *name)
{
    if (ddp_manifest_is_temporary(name, DDP_MANIFEST_NAME, NULL, 0, NULL, NULL)) return 1;
    if (strncmp(name, ".shard-", 7) != 0) return 0;
    const char *p = name + 7;
    size_t digits = strspn(p, "0123456789");
    return digits > 0 && prefix_digits(p + digits, ".h5.tmp.");
}

ddp_status ddp_prepare_out_dir(const char *dir, int *created)
{
    struct stat sb;
    *created = 0;
    int existed = lstat(dir, &sb) == 0;
    DDP_CHECK(ddp_mkdir_p(dir));
    *created = !existed;
    const char *p = dir;
    DIR *d = opendir(p);
    if (!d) {
        ddp_status st = ddp_set_error(DDP_ERR_IO, "%s: %s", p, strerror(errno));
        if (*created && rmdir(dir) == 0) *created = 0;
        return st;
    }
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len >= 3 && strcmp(e->d_name + len - 3, ".h5") == 0 && e->d_name[0] != '.') found = 1;
    }
    if (found) {
        closedir(d);
        return ddp_set_error(DDP_ERR_ARG, "%s: already holds *.h5 shard files; remove them or choose another --out",
                             dir);
    }
    /* a writer killed before its rename (SIGKILL, a node lost) left its temporary: a dataset directory without shards
     * is this run's now, and no rank writes before the ranks agree on this call's status */
    rewinddir(d);
    while ((e = readdir(d)))
        if (is_writer_temporary(e->d_name)) (void)unlinkat(dirfd(d), e->d_name, 0); /* best effort: never read */
    closedir(d);
    return DDP_OK;
}

void ddp_out_discard(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written, int created)
{
    char msg[1024], name[64], path[4200];
    int shared = ddp_error_shared(), all = 1;
    snprintf(msg, sizeof msg, "%s", ddp_last_error());
    for (int64_t k = ctx->topo.rank, i = 0; k < shards && i < written; k += ctx->topo.size, i++) {
        ddp_shard_name(name, sizeof name, k, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        unlink(path); /* best effort: the run's error is the one reported */
    }
    /* every rank's shards are gone before the directory is; rmdir removes it only if it is now empty */
    if (ctx->topo.size > 1 && ddp_all_ok(ctx, 1, &all) != DDP_OK) all = 0;
    if (created && all && ctx->topo.rank == 0) rmdir(dir);
    ddp_set_error_text(msg); /* the run's error, not the cleanup's */
    if (shared) ddp_mark_error_shared();
}

void ddp_shard_name(char *buf, size_t len, int64_t k, int64_t total)
{
    int w = 5;
    for (int64_t t = total - 1; t >= 100000 && w < 19; t /= 10) w++; /* int64 has at most 19 digits */
    snprintf(buf, len, "shard-%0*lld.h5", w, (long long)k);
}
