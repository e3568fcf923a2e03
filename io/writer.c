/* writer.c — the atomic shard writer shared by synth and pack. */
#include "io/writer.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "io/manifest.h"
#include "io/shard.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/lockfile.h"
#include "mpi_ddp/core/settings.h"

#include <dirent.h>
#include <errno.h>
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
    ddp_register_temporary(tmp); /* a fatal signal: the handler removes it (app/stop_signals.c) */
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

ddp_status ddp_prepare_out_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return ddp_set_error(DDP_ERR_IO, "%s: %s", dir, strerror(errno));
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
    /* a writer killed before its rename (SIGKILL, a node lost) left its temporary: under the dataset lock
     * (ddp_out_lock_take) no other writer or index is in dir, so a dataset directory without shards is this run's */
    rewinddir(d);
    while ((e = readdir(d)))
        if (is_writer_temporary(e->d_name)) (void)unlinkat(dirfd(d), e->d_name, 0); /* best effort: never read */
    closedir(d);
    return DDP_OK;
}

/* The names of the shared holders, by kind (mpi_ddp/core/lockfile.h): the readers of a dataset directory. */
static const char *const READERS[] = {"mpiddp index", "mpiddp train", "mpiddp eval"};

/* Rank 0's part of ddp_out_lock_take: DDP_OK with the lock held (or, for a reader, none to take), else the error set
 * and nothing left behind but what ddp_out_lock_release removes. */
static ddp_status take_local(const char *dir, int write, const char *what, ddp_out_lock *lk)
{
    char holder[600] = "", who[64];
    snprintf(lk->path, sizeof lk->path, "%s/%s", dir, DDP_DATASET_LOCK);
    snprintf(who, sizeof who, "mpiddp %s", what);
    if (write) DDP_CHECK(ddp_mkdir_p_made(dir, lk->created, sizeof lk->created));
    int reader = 0; /* the kind of a shared holder: index (0, also for an unknown reader), train, eval */
    for (int k = 1; !write && k < (int)(sizeof READERS / sizeof READERS[0]); k++)
        if (!strcmp(READERS[k], who)) reader = k;
    ddp_lockfile_spec s = {.path = lk->path,
                           .noun = "dataset lock",
                           .needs = "a dataset directory",
                           .unnamed = "a writer that has not written its name yet",
                           .who = who,
                           .reader = write ? -1 : reader,
                           .readers = READERS,
                           .nreaders = (int)(sizeof READERS / sizeof READERS[0]),
                           .tidy = 1,
                           .test_nolock = 1};
    /* a holder that is finishing (a reader upgrades its lock to exclusive to remove the file, a writer has not
     * written its line yet) is waited for: about 1 s before a run is refused */
    int got = ddp_lockfile_take(&s, 1.0, 50, NULL, NULL, &lk->fd, holder, sizeof holder);
    if (got == DDP_LOCKFILE_GONE || got == DDP_LOCKFILE_REPLACED)
        return ddp_set_error(DDP_ERR_IO, "%s: cannot lock: the file keeps being replaced", lk->path);
    if (got == DDP_LOCKFILE_ERROR) return DDP_ERR_IO;
    if (got == DDP_LOCKFILE_HELD)
        return ddp_set_error(DDP_ERR_BUSY,
                             "%s: the dataset directory is in use by another run (%s); wait for it to end%s", dir,
                             holder, write ? ", or choose another --out" : "");
    return DDP_OK;
}

static void lock_init(ddp_out_lock *lk)
{
    memset(lk, 0, sizeof *lk);
    lk->fd = -1;
}

ddp_status ddp_out_lock_take(ddp_ctx *ctx, const char *dir, int write, const char *what, ddp_out_lock *lk)
{
    lock_init(lk);
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        st = take_local(dir, write, what, lk);
        if (st != DDP_OK) ddp_out_lock_release(lk);
    }
    return ddp_agree_status(ctx, st);
}

/* Whether dirs[i] is one of dirs[0..i) (the same directory however named: "v", "./v/", a symlink) or its lock file is
 * one that lks[0..i) holds (a hard link): a process's fcntl locks on one file are one lock, and closing any of its
 * descriptors of that file drops them all, so such a directory is locked once. Looked at without opening the file. */
static int locked_already(const char *const *dirs, const ddp_out_lock *lks, int i)
{
    struct stat a, b;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dirs[i], DDP_DATASET_LOCK);
    int file = stat(path, &a) == 0, dir = stat(dirs[i], &b) == 0;
    for (int j = 0; j < i; j++) {
        struct stat c;
        if (dir && stat(dirs[j], &c) == 0 && c.st_dev == b.st_dev && c.st_ino == b.st_ino) return 1;
        if (file && lks[j].fd >= 0 && fstat(lks[j].fd, &c) == 0 && c.st_dev == a.st_dev && c.st_ino == a.st_ino)
            return 1;
    }
    return 0;
}

ddp_status ddp_read_locks_take(ddp_ctx *ctx, const char *const *dirs, int n, const char *what, ddp_out_lock *lks)
{
    for (int i = 0; i < n; i++) lock_init(&lks[i]);
    ddp_status st = DDP_OK;
    for (int i = 0; ctx->topo.rank == 0 && st == DDP_OK && i < n; i++)
        if (!locked_already(dirs, lks, i)) st = take_local(dirs[i], 0, what, &lks[i]);
    if (st != DDP_OK) ddp_read_locks_release(lks, n);
    return ddp_agree_status(ctx, st);
}

void ddp_read_locks_release(ddp_out_lock *lks, int n)
{
    for (int i = n - 1; i >= 0; i--) ddp_out_lock_release(&lks[i]);
}

void ddp_out_lock_release(ddp_out_lock *lk)
{
    /* a writer's lock, or a reader's that no other reader shares: removed while still locked; a leftover file (a
     * killed run's) never refuses by itself */
    ddp_lockfile_release(lk->fd, lk->path);
    lk->fd = -1;
    if (lk->created[0]) { /* the directories the writer made, when nothing is left in them (a refused or failed run) */
        char p[4200];
        snprintf(p, sizeof p, "%s", lk->path);
        size_t top = strlen(lk->created);
        for (char *slash; (slash = strrchr(p, '/')) && (*slash = 0, strlen(p) >= top);)
            if (rmdir(p) != 0 || !strcmp(p, lk->created)) break;
        lk->created[0] = 0;
    }
}

void ddp_out_discard(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written)
{
    char msg[1024], name[64], path[4200];
    int shared = ddp_error_shared(), all = 1;
    snprintf(msg, sizeof msg, "%s", ddp_last_error());
    for (int64_t k = ctx->topo.rank, i = 0; k < shards && i < written; k += ctx->topo.size, i++) {
        ddp_shard_name(name, sizeof name, k, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        unlink(path); /* best effort: the run's error is the one reported */
    }
    /* every rank's shards are gone before rank 0 releases the lock and removes the directories it made */
    if (ctx->topo.size > 1) (void)ddp_all_ok(ctx, 1, &all);
    ddp_set_error_text(msg); /* the run's error, not the cleanup's */
    if (shared) ddp_mark_error_shared();
}

void ddp_shard_name(char *buf, size_t len, int64_t k, int64_t total)
{
    int w = 5;
    for (int64_t t = total - 1; t >= 100000 && w < 19; t /= 10) w++; /* int64 has at most 19 digits */
    snprintf(buf, len, "shard-%0*lld.h5", w, (long long)k);
}
