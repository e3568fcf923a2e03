/* shard.c — a rank's zero-copy access to one validated shard's samples: contiguous little-endian arrays are
 * memory-mapped in page-aligned windows at the offsets HDF5 reported (H5Dget_offset); anything else (chunked,
 * compressed, big-endian) is read through HDF5. Validation is in shard_validate.c. */
#include "io/shard.h"

#include "mpi_ddp/core/status.h"
#include "io/sigbus.h"
#include "mpi_ddp/core/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static ddp_io_counters g_counters;

/* HDF5 as Debian and most clusters build it is not thread-safe: every HDF5 call sequence of a shard (its open, its
 * close, a read of its features) holds this one process-wide lock, so that ddp_dataset_sample may run on any number
 * of threads. Mapped shards take it only to open or close HDF5 handles, never to read. Lock order: the shard cache's
 * lock (io/shard_cache.c, held around ddp_shard_open and ddp_shard_release_handles) before this one; nothing takes
 * the cache's lock while holding this one, so the two cannot deadlock. */
static pthread_mutex_t g_h5_mu = PTHREAD_MUTEX_INITIALIZER;
ddp_io_counters *ddp_io_counters_get(void) { return &g_counters; }

void ddp_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

int ddp_h5_is_hdf5(const char *path)
{
#if H5_VERSION_GE(1, 12, 0)
    return H5Fis_accessible(path, H5P_DEFAULT) > 0;
#else
    return H5Fis_hdf5(path) > 0;
#endif
}


/* ------------------------------------------------------------------ runtime access */
/* Maps a window of the file and registers it with the SIGBUS handler (sigbus.c): a read the file's
 * truncation took away then ends the process with one line naming path, not a crash. */
static ddp_status map_window(ddp_shard *s, const char *path, int slot, int64_t off, int64_t bytes, const void **ptr,
                             const char *obj)
{
    long page = sysconf(_SC_PAGESIZE);
    int64_t base = off - off % page;
    size_t len = (size_t)(off - base + bytes);
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, s->fd, (off_t)base);
    if (p == MAP_FAILED)
        return ddp_set_error(DDP_ERR_IO, "%s: dataset '%s': mmap of %zu bytes failed: %s", path, obj, len,
                             strerror(errno));
    s->maps[slot] = p;
    s->map_lens[slot] = len;
    DDP_CHECK(ddp_sigbus_register(p, len, path, obj, base, s->fd, &s->sigbus[slot]));
    *ptr = (const char *)p + (off - base);
    return DDP_OK;
}

#define CHANGED "the file changed after it was validated (rerun mpiddp index on the dataset)"

/* Dataset d (name) of path has the shape the shard's metadata records (rank 1 or 2: want[0], want[1]): the metadata
 * may come from a manifest, which a file rewritten with its size and mtime kept, or a manifest written by something
 * else, can contradict; HDF5 would otherwise read the file's extent into a buffer sized from the metadata. */
static ddp_status check_extent(const char *path, hid_t d, const char *name, int rank, const int64_t *want)
{
    hsize_t dims[2] = {0, 0};
    hid_t sp = H5Dget_space(d);
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (r >= 1 && r <= 2 && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) r = -1;
    if (sp >= 0) H5Sclose(sp);
    if (r < 0) return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': its extent cannot be queried", path, name);
    if (r != rank)
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: dataset '%s': rank %d, the manifest or validation recorded %d: " CHANGED, path, name,
                             r, rank);
    if ((int64_t)dims[0] != want[0] && rank == 1)
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s: dataset '%s': %lld elements, the manifest or validation recorded %lld: " CHANGED,
                             path, name, (long long)dims[0], (long long)want[0]);
    if ((int64_t)dims[0] != want[0] || (rank == 2 && (int64_t)dims[1] != want[1]))
        return ddp_set_error(
            DDP_ERR_FORMAT, "%s: dataset '%s': %lld x %lld, the manifest or validation recorded %lld x %lld: " CHANGED,
            path, name, (long long)dims[0], (long long)dims[1], (long long)want[0], (long long)want[1]);
    return DDP_OK;
}

/* The n values of 1-D dataset name, as int64, into a new buffer (read with an explicit extent of n elements). */
static ddp_status read_whole(ddp_shard *s, const char *path, const char *name, int64_t n, int64_t **out)
{
    hid_t d = H5Dopen2(s->h5file, name, H5P_DEFAULT);
    if (d < 0) return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': cannot be opened", path, name);
    ddp_status st = check_extent(path, d, name, 1, &n);
    if (st != DDP_OK) {
        H5Dclose(d);
        return st;
    }
    hsize_t count = (hsize_t)n;
    hid_t ms = H5Screate_simple(1, &count, NULL);
    int64_t *buf = ddp_calloc((size_t)n, sizeof *buf);
    herr_t e = buf && ms >= 0 ? H5Dread(d, H5T_NATIVE_INT64, ms, H5S_ALL, H5P_DEFAULT, buf) : -1;
    if (ms >= 0) H5Sclose(ms);
    H5Dclose(d);
    if (!buf)
        return ddp_set_error(DDP_ERR_NOMEM, "%s: dataset '%s': out of memory for %lld values", path, name,
                             (long long)n);
    if (e < 0) {
        free(buf);
        return ddp_set_error(DDP_ERR_HDF5, "%s: dataset '%s': cannot be read", path, name);
    }
    *out = buf;
    return DDP_OK;
}

/* A column of n values beside the features (offsets: map slot 1, labels: 2, sample_ids: 3): mapped where the
 * file stores it contiguously (off >= 0, bytes long), else read whole through HDF5 as int64 into owned[slot - 1]. */
static ddp_status map_or_read(ddp_shard *s, const char *path, int slot, int64_t off, int64_t bytes, int64_t n,
                              const char *obj, const void **ptr)
{
    if (off >= 0) return map_window(s, path, slot, off, bytes, ptr, obj);
    if (s->owned[slot - 1]) { /* read before the shard cache closed the shard: a reopen needs no HDF5 */
        *ptr = s->owned[slot - 1];
        return DDP_OK;
    }
    int64_t *buf = NULL;
    DDP_CHECK(read_whole(s, path, obj, n, &buf));
    s->owned[slot - 1] = buf;
    *ptr = buf;
    return DDP_OK;
}

ddp_status ddp_shard_open(ddp_shard *s, const char *dir)
{
    if (s->opened) return DDP_OK;
    char path[4096 + DDP_SHARD_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, s->meta.name);
    s->dir = dir;
    const ddp_shard_meta *m = &s->meta;
    s->fd = -1;
    s->h5file = s->h5features = -1;
    int need_h5 = m->feat_off < 0 || (m->off_off < 0 && !s->owned[0]) || (m->lab_off < 0 && !s->owned[1]) ||
                  (m->has_ids && m->ids_off < 0 && !s->owned[2]);
    ddp_status st = DDP_OK;
    int h5_locked = 0;
    s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO put there since validation: no wait, refused */
    if (s->fd < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(s->fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (int64_t)sb.st_size != m->file_bytes)
        DDP_FAIL(DDP_ERR_IO, "%s: file changed since it was validated (size %lld, was %lld)", path,
                 (long long)sb.st_size, (long long)m->file_bytes);
    if (need_h5) {
        pthread_mutex_lock(&g_h5_mu); /* to the end: its datasets opened and read, or the file closed */
        h5_locked = 1;
        ddp_h5_quiet();
        s->h5file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        g_counters.h5_opens++;
        if (s->h5file < 0) DDP_FAIL(DDP_ERR_HDF5, "%s: cannot be opened by HDF5", path);
    }
    const void *p = NULL;
    if (m->feat_off >= 0) {
        DDP_TRY(map_window(s, path, 0, m->feat_off, m->rows * m->dim * 4, &p, "features"));
        s->features = p;
        if (s->access_hint != DDP_ACCESS_NORMAL) /* shuffled: no readahead waste; in order: aggressive readahead */
            madvise(s->maps[0], s->map_lens[0], s->access_hint == DDP_ACCESS_RANDOM ? MADV_RANDOM : MADV_SEQUENTIAL);
        g_counters.shards_mapped++;
    } else {
        s->h5features = H5Dopen2(s->h5file, "features", H5P_DEFAULT);
        if (s->h5features < 0) DDP_FAIL(DDP_ERR_HDF5, "%s: dataset 'features': cannot be opened", path);
        const int64_t shape[2] = {m->rows, m->dim};
        DDP_TRY(check_extent(path, s->h5features, "features", 2, shape));
    }
    DDP_TRY(map_or_read(s, path, 1, m->off_off, (m->n + 1) * 8, m->n + 1, "offsets", &p));
    s->offsets = p;
    DDP_TRY(map_or_read(s, path, 2, m->lab_off, m->n * m->lab_width, m->n, "labels", &p));
    s->labels = p;
    s->lab_width = m->lab_off >= 0 ? m->lab_width : 8;
    if (m->has_ids) {
        DDP_TRY(map_or_read(s, path, 3, m->ids_off, m->n * 8, m->n, "sample_ids", &p));
        s->ids = p;
    }
    if (m->feat_off >= 0 && s->h5file >= 0) { /* index arrays read, features mapped: HDF5 is done with the file */
        H5Fclose(s->h5file);
        s->h5file = -1;
    }
    if (h5_locked) pthread_mutex_unlock(&g_h5_mu);
    s->opened = 1;
    return DDP_OK;
done:
    if (h5_locked) pthread_mutex_unlock(&g_h5_mu); /* ddp_shard_release_handles takes it again */
    ddp_shard_release_handles(s);
    return st;
}

void ddp_shard_close(ddp_shard *s)
{
    ddp_shard_release_handles(s);
    for (int i = 0; i < 3; i++) {
        free(s->owned[i]);
        s->owned[i] = NULL;
    }
}

/* 1 once MPI_Finalize has run: parallel HDF5 closed every handle then and shut down, and a call would start it
 * again only to print that the handle is not valid (a dataset closed after ddp_finalize). */
static int h5_ended(void)
{
#ifdef H5_HAVE_PARALLEL
    int done = 0;
    return MPI_Finalized(&done) == MPI_SUCCESS && done;
#else
    return 0;
#endif
}

void ddp_shard_release_handles(ddp_shard *s)
{
    for (int i = 0; i < 4; i++) {
        ddp_sigbus_unregister(&s->sigbus[i]);
        if (s->maps[i]) munmap(s->maps[i], s->map_lens[i]);
        s->maps[i] = NULL;
        s->map_lens[i] = 0;
    }
    if ((s->h5features >= 0 || s->h5file >= 0) && !h5_ended()) {
        pthread_mutex_lock(&g_h5_mu);
        if (s->h5features >= 0) H5Dclose(s->h5features);
        if (s->h5file >= 0) H5Fclose(s->h5file);
        pthread_mutex_unlock(&g_h5_mu);
    }
    if (s->fd >= 0) close(s->fd);
    s->h5features = s->h5file = -1;
    s->fd = -1;
    s->features = NULL;
    s->offsets = NULL;
    s->labels = NULL;
    s->ids = NULL;
    s->opened = 0;
}

/* 1 when sample i's offsets are ones validation could have seen: 1 to max_rows rows within the shard */
static int rows_ok(const ddp_shard *s, int64_t i, int64_t *a, int64_t *b)
{
    const ddp_shard_meta *m = &s->meta;
    if (i < 0 || i >= m->n) return 0;
    *a = s->offsets[i], *b = s->offsets[i + 1];
    return *a >= 0 && *b > *a && *b <= m->rows && *b - *a <= m->max_rows;
}

ddp_status ddp_shard_rows(const ddp_shard *s, int64_t i, int64_t *lo, int64_t *hi)
{
    const ddp_shard_meta *m = &s->meta;
    int64_t a = 0, b = 0;
    if (i < 0 || i >= m->n)
        return ddp_set_error(DDP_ERR_INTERNAL, "%s/%s: sample %lld of %lld", s->dir, m->name, (long long)i,
                             (long long)m->n);
    if (!rows_ok(s, i, &a, &b))
        return ddp_set_error(DDP_ERR_FORMAT,
                             "%s/%s: dataset 'offsets'[%lld]: %lld, then %lld: not a sample of 1 to %lld rows within "
                             "the shard's %lld: " CHANGED,
                             s->dir, m->name, (long long)i, (long long)a, (long long)b, (long long)m->max_rows,
                             (long long)m->rows);
    *lo = a, *hi = b;
    return DDP_OK;
}

ddp_status ddp_shard_sample(ddp_shard *s, int64_t i, float *scratch, const float **rows, int64_t *nrows, int64_t *label,
                            int64_t *sample_id)
{
    const ddp_shard_meta *m = &s->meta;
    int64_t lo = 0, hi = 0;
    DDP_CHECK(ddp_shard_rows(s, i, &lo, &hi));
    *nrows = hi - lo;
    int64_t y = !label ? 0 : s->lab_width == 4 ? ((const int32_t *)s->labels)[i] : ((const int64_t *)s->labels)[i];
    if (y < 0 || y >= m->classes) /* read (and checked) only for a caller that uses it */
        return ddp_set_error(DDP_ERR_FORMAT, "%s/%s: dataset 'labels'[%lld]: %lld: not in [0, %lld): " CHANGED, s->dir,
                             m->name, (long long)i, (long long)y, (long long)m->classes);
    if (label) *label = y;
    if (sample_id) *sample_id = s->ids ? s->ids[i] : m->first + i;
    if (s->features) {
        *rows = s->features + lo * m->dim;
        return DDP_OK;
    }
    if (!scratch)
        return ddp_set_error(
            DDP_ERR_ARG,
            "ddp_dataset_sample: scratch is NULL, but %s/%s is read through HDF5 (not memory-mappable: "
            "chunked, compressed, unaligned or not IEEE float32 little-endian): sample %lld needs a "
            "scratch buffer of nrows x dim floats",
            s->dir, m->name, (long long)i);
    hsize_t start[2] = {(hsize_t)lo, 0}, count[2] = {(hsize_t)(hi - lo), (hsize_t)m->dim};
    pthread_mutex_lock(&g_h5_mu);
    hid_t fs = H5Dget_space(s->h5features);
    hid_t ms = H5Screate_simple(2, count, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) : -1;
    if (e >= 0) e = H5Dread(s->h5features, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, scratch);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    g_counters.hdf5_reads++;
    pthread_mutex_unlock(&g_h5_mu);
    if (e < 0) /* the rows, as inspect's finite scan names them, and the sample, as the offsets number it */
        return ddp_set_error(DDP_ERR_HDF5,
                             "%s/%s: dataset 'features'[rows %lld..%lld]: read failed (corrupt or truncated file?), "
                             "in sample %lld of the shard (offsets[%lld])",
                             s->dir, m->name, (long long)lo, (long long)hi - 1, (long long)i, (long long)i);
    *rows = scratch;
    return DDP_OK;
}

int ddp_shard_range(ddp_shard *s, int64_t i, int64_t j, void **addr, size_t *len)
{
    int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0; /* hints only: a changed sample gets none, and sets no error */
    if (!s->features || j <= i || !rows_ok(s, i, &a0, &a1) || !rows_ok(s, j - 1, &b0, &b1)) return 0;
    long page = sysconf(_SC_PAGESIZE);
    const char *a = (const char *)(s->features + a0 * s->meta.dim);
    const char *b = (const char *)(s->features + b1 * s->meta.dim);
    uintptr_t lo = (uintptr_t)a & ~(uintptr_t)(page - 1);
    *addr = (void *)lo;
    *len = (size_t)((uintptr_t)b - lo);
    return 1;
}

void ddp_shard_prefetch_range(ddp_shard *s, int64_t i, int64_t j)
{
    void *a;
    size_t n;
    if (!ddp_shard_range(s, i, j, &a, &n)) return;
    madvise(a, n, MADV_WILLNEED);
    ddp_io_counters_get()->ahead_runs++;
}

void ddp_shard_prefetch(ddp_shard *s, int64_t i)
{
    void *a;
    size_t n;
    if (ddp_shard_range(s, i, i + 1, &a, &n)) madvise(a, n, MADV_WILLNEED);
}
