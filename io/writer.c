/* writer.c — the atomic shard writer shared by synth and pack, the dataset directory's lock, and what a writer's run
 * undoes when it fails or a fatal signal ends it: no partial dataset is left (docs/dataset-format.md). */
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
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* This process's writer run, from ddp_out_lock_take (write = 1) to ddp_out_lock_release: what a fatal signal's
 * handler removes (undo_run). Filled before any shard is written; the handler builds every name by hand in its own
 * buffer and calls unlink, rmdir, fstat and stat only (async-signal-safe). */
static struct {
    atomic_int armed;       /* 1 during the run */
    char dir[4200];         /* --out as given */
    char pid[24];           /* getpid() in decimal: the temporaries' suffix */
    int64_t rank, size;     /* this rank writes shards rank, rank + size, ... */
    atomic_int width;       /* digits of a shard number (ddp_shard_name) */
    atomic_llong staged;    /* this rank's first `staged` shards are complete under their temporary names */
    atomic_int own_final;   /* 1 from ddp_out_finish's renames: they may be under their final names too */
    atomic_llong all_final; /* rank 0, once the ranks agreed every shard is written: shard-K.h5, K < all_final */
    atomic_int committed;   /* every shard in place on every rank: the dataset is complete and stays */
    int lock_fd;            /* rank 0: the lock's descriptor and file (removed while it is still that file) */
    char lock[4200];        /* DIR/mpiddp-dataset.lock, on every rank: where the directories to remove start */
    char created[4200];     /* the first directory the run made, rank 0's ("" none) */
    char name[4400];        /* the handler's */
} g_run = {.lock_fd = -1};

static void put_str(char *b, size_t *n, size_t cap, const char *s)
{
    while (*s && *n + 1 < cap) b[(*n)++] = *s++;
    b[*n] = 0;
}

/* v >= 0 in decimal, at least width digits (zero-padded). */
static void put_num(char *b, size_t *n, size_t cap, long long v, int width)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 && k < 20);
    while (k < width && k < 24) d[k++] = '0';
    while (k > 0 && *n + 1 < cap) b[(*n)++] = d[--k];
    b[*n] = 0;
}

/* DIR/shard-K.h5, or with pid DIR/.shard-K.h5.tmp.PID (ddp_shard_write's temporary), into b; async-signal-safe. */
static const char *shard_path(char *b, size_t cap, const char *dir, long long k, int width, const char *pid)
{
    size_t n = 0;
    b[0] = 0;
    put_str(b, &n, cap, dir);
    put_str(b, &n, cap, pid ? "/.shard-" : "/shard-");
    put_num(b, &n, cap, k, width);
    put_str(b, &n, cap, ".h5");
    if (pid) {
        put_str(b, &n, cap, ".tmp.");
        put_str(b, &n, cap, pid);
    }
    return b;
}

/* The digits of a shard number in a dataset of total shards: 5, more beyond 100 000 shards. */
static int shard_width(int64_t total)
{
    int w = 5;
    for (int64_t t = total - 1; t >= 100000 && w < 19; t /= 10) w++; /* int64 has at most 19 digits */
    return w;
}

/* The directories a writer made, once empty (async-signal-safe; b: cap bytes of scratch): the one holding lock (its
 * DIR/mpiddp-dataset.lock), then its parents down to created, the first one made ("": none). */
static void strip_made_dirs(char *b, size_t cap, const char *lock, const char *created)
{
    size_t top = strlen(created), n = 0;
    if (!top) return;
    put_str(b, &n, cap, lock);
    for (char *slash; (slash = strrchr(b, '/')) && (*slash = 0, strlen(b) >= top);) {
        if (slash > b && slash[-1] == '/') continue; /* "x//lock", "x/": the empty name after a slash is no directory */
        if (rmdir(b) != 0 || !strcmp(b, created)) break;
    }
}

static void remove_made_dirs(void) { strip_made_dirs(g_run.name, sizeof g_run.name, g_run.lock, g_run.created); }

/* Under mpirun the first rank to die has the others SIGTERMed and about 1 s later SIGKILLed, which cut rank 0's undo
 * short (seen with Open MPI 4.1): so a rank other than 0 waits, about 2 s at most,
 * until rank 0's lock file is gone (rank 0 is done, or has ended the run), and rank 0, while the other ranks' shards
 * are still theirs to remove, until the directory it made is gone (about 2 s where it made none). */
#define LINGER_MS 2000

/* The fatal signal's undo (ddp_register_signal_cleanup), after the temporary being written is gone: this rank's
 * complete shards (each temporary before its final name, so that a rename racing with this on another thread leaves
 * neither), on rank 0 every shard while they are renamed, rank 0's lock file, then the directories the run made, once
 * empty (the last rank to empty it removes it). Once committed (every shard in place; the manifest is written after),
 * only rank 0's lock file. */
static void undo_run(void)
{
    if (!atomic_load(&g_run.armed)) return;
    struct stat held, named;
    if (atomic_load(
            &g_run.committed)) { /* a complete dataset stays (index writes a manifest it lacks); the lock goes */
        if (g_run.lock_fd >= 0 && fstat(g_run.lock_fd, &held) == 0 && stat(g_run.lock, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            (void)unlink(g_run.lock);
        for (int t = 0; g_run.rank != 0 && t < LINGER_MS / 10 && stat(g_run.lock, &named) == 0; t++)
            (void)poll(NULL, 0, 10); /* rank 0's turn first: mpirun kills it once this rank has died */
        return;
    }
    char *b = g_run.name;
    size_t cap = sizeof g_run.name;
    int w = atomic_load(&g_run.width), fin = atomic_load(&g_run.own_final);
    long long staged = atomic_load(&g_run.staged), all = atomic_load(&g_run.all_final);
    for (long long i = 0; i < staged; i++) {
        long long k = g_run.rank + i * g_run.size;
        (void)unlink(shard_path(b, cap, g_run.dir, k, w, g_run.pid));
        if (fin) (void)unlink(shard_path(b, cap, g_run.dir, k, w, NULL));
    }
    for (long long k = 0; k < all; k++) (void)unlink(shard_path(b, cap, g_run.dir, k, w, NULL));
    if (g_run.lock_fd >= 0 && fstat(g_run.lock_fd, &held) == 0 && stat(g_run.lock, &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
        (void)unlink(g_run.lock); /* still locked: the process holds it until it dies */
    remove_made_dirs();
    if (g_run.size < 2 || (g_run.rank == 0 && all > 0)) return; /* alone, or rank 0 answering for every shard */
    for (int t = 0; t < LINGER_MS / 10; t++) {
        if (g_run.rank != 0 ? stat(g_run.lock, &named) != 0 : g_run.created[0] && stat(g_run.dir, &named) != 0) break;
        (void)poll(NULL, 0, 10); /* async-signal-safe, unlike nanosleep */
        if (g_run.rank == 0) remove_made_dirs();
    }
    remove_made_dirs(); /* emptied by this rank's files and rank 0's: this may be the last rank */
}

/* Starts the run of the writer lock lk just taken for dir, on every rank (rank 0's made directories broadcast). */
static ddp_status arm_run(ddp_ctx *ctx, const char *dir, const ddp_out_lock *lk)
{
    char created[sizeof lk->created];
    memcpy(created, lk->created, sizeof created);
    if (ctx->topo.size > 1) MPI_CHECK(MPI_Bcast(created, (int)sizeof created, MPI_CHAR, 0, ctx->world));
    created[sizeof created - 1] = 0;
    atomic_store(&g_run.armed, 0);
    snprintf(g_run.dir, sizeof g_run.dir, "%s", dir);
    snprintf(g_run.pid, sizeof g_run.pid, "%ld", (long)getpid());
    snprintf(g_run.lock, sizeof g_run.lock, "%s/%s", dir, DDP_DATASET_LOCK);
    snprintf(g_run.created, sizeof g_run.created, "%s", created);
    g_run.rank = ctx->topo.rank;
    g_run.size = ctx->topo.size;
    g_run.lock_fd = lk->fd;
    atomic_store(&g_run.width, 0);
    atomic_store(&g_run.staged, 0);
    atomic_store(&g_run.own_final, 0);
    atomic_store(&g_run.all_final, 0);
    atomic_store(&g_run.committed, 0);
    ddp_register_signal_cleanup(undo_run);
    atomic_store(&g_run.armed, 1);
    return DDP_OK;
}

static void disarm_run(void)
{
    atomic_store(&g_run.armed, 0);
    g_run.lock_fd = -1;
}

/* Whether path is a shard of this process's writer run (DIR/shard-DIGITS.h5, DIR the run's --out): its number in *k,
 * the digits in *width. */
static int run_shard(const char *path, int64_t *k, int *width)
{
    if (!atomic_load(&g_run.armed)) return 0;
    size_t n = strlen(g_run.dir);
    if (strncmp(path, g_run.dir, n) != 0 || strncmp(path + n, "/shard-", 7) != 0) return 0;
    const char *d = path + n + 7;
    size_t w = strspn(d, "0123456789");
    if (w == 0 || w > 19 || strcmp(d + w, ".h5") != 0) return 0;
    *k = strtoll(d, NULL, 10);
    *width = (int)w;
    return 1;
}

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
    int64_t num = 0, expect = atomic_load(&g_run.staged) * g_run.size + g_run.rank;
    int width = 0, staged = run_shard(path, &num, &width); /* 1: left under the temporary name for ddp_out_finish */
    if (staged && num != expect)
        return ddp_set_error(DDP_ERR_INTERNAL, "%s: shard %lld written out of turn (rank %lld's next is %lld)", path,
                             (long long)num, (long long)g_run.rank, (long long)expect);
    hid_t fapl = -1, f = -1, d = -1, fs = -1, ms = -1;
    float *buf = NULL;
    int64_t rows = offsets[n];
    fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5W(fapl, "H5Pcreate");
    H5W(H5Pset_alignment(fapl, 1, 4096), "H5Pset_alignment");
    ddp_register_temporary(tmp); /* a fatal signal: the handler removes it (app/stop_signals.c) */
    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) DDP_FAIL(DDP_ERR_IO, "%s: cannot create (directory missing or not writable?)", tmp);
    int64_t delay_ms = ddp_knob_int(DDP_KNOB_TEST_SHARD_DELAY_MS); /* a window for the signal tests */
    if (delay_ms > 0) {
        struct timespec ts = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
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
    int64_t maxr = 0, longest = 0;
    for (int64_t i = 0; i < n; i++)
        if (offsets[i + 1] - offsets[i] > maxr) maxr = offsets[i + 1] - offsets[i], longest = i;
    if (cap_rows < maxr) cap_rows = maxr;
    buf = ddp_calloc((size_t)(cap_rows * dim), sizeof *buf);
    if (!buf) /* a block holds at least the longest sample: name it, the likely cause */
        DDP_FAIL(DDP_ERR_NOMEM,
                 "%s: out of memory for a block of %lld rows x %lld features (%lld bytes); the longest sample, %lld "
                 "of the shard (offsets[%lld]), has %lld rows",
                 path, (long long)cap_rows, (long long)dim, (long long)(cap_rows * dim * 4), (long long)longest,
                 (long long)longest, (long long)maxr);
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
    if (staged) { /* complete: counted before the temporary is unregistered, so that a signal never misses it */
        atomic_store(&g_run.width, width);
        atomic_fetch_add(&g_run.staged, 1);
        ddp_register_temporary(NULL);
        goto done;
    }
    if (rename(tmp, path) != 0) DDP_FAIL(DDP_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
    placed = 1;
    ddp_register_temporary(NULL); /* a complete shard outside a writer's run: a signal now leaves it */
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
    st = ddp_agree_status(ctx, st);
    if (st != DDP_OK || !write) return st;
    lk->writer = 1;
    st = arm_run(ctx, dir, lk);
    if (st != DDP_OK) ddp_out_lock_release(lk);
    return st;
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
    if (lk->writer)
        disarm_run(); /* first: a signal from here leaves what the run wrote (and maybe the lock file,
                         which refuses nothing), never removes a dataset another process may hold now */
    lk->writer = 0;
    ddp_lockfile_release(lk->fd, lk->path);
    lk->fd = -1;
    if (lk->created[0]) { /* the directories the writer made, when nothing is left in them (a refused or failed run) */
        char p[4200];
        strip_made_dirs(p, sizeof p, lk->path, lk->created);
        lk->created[0] = 0;
    }
}

void ddp_out_discard(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written)
{
    char msg[1024], pid[24], path[4400];
    int shared = ddp_error_shared(), all = 1, w = shard_width(shards);
    snprintf(msg, sizeof msg, "%s", ddp_last_error());
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    for (int64_t k = ctx->topo.rank, i = 0; k < shards && i < written; k += ctx->topo.size, i++) {
        /* best effort: the run's error is the one reported */
        unlink(shard_path(path, sizeof path, dir, k, w, pid)); /* not renamed yet (ddp_out_finish) */
        unlink(shard_path(path, sizeof path, dir, k, w, NULL));
    }
    /* every rank's shards are gone before rank 0 releases the lock and removes the directories it made */
    if (ctx->topo.size > 1) (void)ddp_all_ok(ctx, 1, &all);
    atomic_store(&g_run.all_final, 0);
    atomic_store(&g_run.own_final, 0);
    atomic_store(&g_run.staged, 0);
    ddp_set_error_text(msg); /* the run's error, not the cleanup's */
    if (shared) ddp_mark_error_shared();
}

ddp_status ddp_out_finish(ddp_ctx *ctx, const char *dir, int64_t shards, int64_t written, ddp_status st)
{
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK && atomic_load(&g_run.armed)) {
        /* every shard is written (so the directory held none before: ddp_prepare_out_dir): rank 0 answers for all of
         * them from here, each rank for its own until the ranks agree they are all in place */
        int w = shard_width(shards);
        atomic_store(&g_run.width, w);
        if (ctx->topo.rank == 0) atomic_store(&g_run.all_final, shards);
        atomic_store(&g_run.own_final, 1);
        int64_t n = atomic_load(&g_run.staged);
        char tmp[4400], path[4400];
        for (int64_t i = 0; i < n && st == DDP_OK; i++) {
            int64_t k = ctx->topo.rank + i * ctx->topo.size;
            shard_path(tmp, sizeof tmp, dir, k, w, g_run.pid);
            if (rename(tmp, shard_path(path, sizeof path, dir, k, w, NULL)) != 0)
                st = ddp_set_error(DDP_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
        }
        if (st == DDP_OK && n > 0) st = ddp_fsync_path(dir, 1);
        if (st == DDP_OK && ctx->topo.rank != 0) { /* rank 0 alone decides from here (all_final, then committed): a */
            atomic_store(&g_run.own_final, 0);     /* signal between the ranks' commits never leaves a part */
            atomic_store(&g_run.staged, 0);
        }
        st = ddp_agree_status(ctx, st);
    }
    if (st != DDP_OK) {
        ddp_out_discard(ctx, dir, shards, written); /* no partial dataset is left */
        return st;
    }
    /* every shard is in place on every rank: the dataset is complete, and a signal from here leaves it (undoing it
     * would be rank 0 unlinking every shard, which at 100 000 shards on a parallel file system outlasts mpirun's
     * SIGKILL) */
    atomic_store(&g_run.committed, 1);
    return DDP_OK;
}

void ddp_shard_name(char *buf, size_t len, int64_t k, int64_t total)
{
    snprintf(buf, len, "shard-%0*lld.h5", shard_width(total), (long long)k);
}
