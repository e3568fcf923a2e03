/* finite.c — NaN/Inf features: the vectorised scan, its per-shard and per-dataset drivers (`inspect`, serial) and
 * the naming of a non-finite value; see finite.h. The collective checks over an open dataset are in dataset.c. */
#include "io/finite.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SCAN_BLOCK 4096               /* floats per vectorised test */
#define SCAN_CHUNK ((int64_t)1 << 24) /* floats per chunk (64 MiB): HDF5 reads and dropped mapped pages */

/* Any NaN or Inf (all exponent bits set) in x[0..n): integer bit tests, no float compares, so the loop
 * vectorises under any floating-point flags. */
static int block_any(const float *restrict x, int64_t n)
{
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, sizeof b);
        any |= (b & 0x7f800000u) == 0x7f800000u;
    }
    return any != 0;
}

int64_t ddp_first_nonfinite(const float *x, int64_t n)
{
    for (int64_t lo = 0; lo < n; lo += SCAN_BLOCK) {
        int64_t m = n - lo < SCAN_BLOCK ? n - lo : SCAN_BLOCK;
        if (!block_any(x + lo, m)) continue;
        for (int64_t i = 0; i < m; i++)
            if (!isfinite(x[lo + i])) return lo + i;
    }
    return -1;
}

/* The sample owning `row` of the shard: the last i with offsets[i] <= row. */
static int64_t sample_of(const ddp_shard *s, int64_t row)
{
    int64_t lo = 0, hi = s->meta.n - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (s->offsets[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int64_t id_of(const ddp_shard *s, int64_t i) { return s->ids ? s->ids[i] : s->meta.first + i; }

/* Scans x = the features from flat element `base` on, n floats; counts into r (the first is recorded). */
static void scan_range(const ddp_shard *s, const float *x, int64_t base, int64_t n, int all, ddp_finite_scan *r,
                       int64_t *last_sample)
{
    int64_t dim = s->meta.dim;
    for (int64_t at = 0; at < n;) {
        int64_t k = ddp_first_nonfinite(x + at, n - at);
        if (k < 0) return;
        int64_t flat = base + at + k, row = flat / dim, smp = sample_of(s, row);
        if (r->values++ == 0) {
            r->row = row, r->col = flat % dim, r->sample = smp, r->id = id_of(s, smp);
            r->value = x[at + k];
        }
        if (smp != *last_sample) r->samples++, *last_sample = smp;
        if (!all) return;
        at += k + 1;
    }
}

/* Reads rows [lo, lo + cnt) of an unmappable shard's features through HDF5 into buf. */
static ddp_status read_rows(ddp_shard *s, int64_t lo, int64_t cnt, float *buf)
{
    hid_t fs = H5Dget_space(s->h5features);
    hsize_t start[2] = {(hsize_t)lo, 0}, count[2] = {(hsize_t)cnt, (hsize_t)s->meta.dim};
    hid_t ms = fs >= 0 ? H5Screate_simple(2, count, NULL) : -1;
    herr_t e = ms >= 0 ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) : -1;
    if (e >= 0) e = H5Dread(s->h5features, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0)
        return ddp_set_error(DDP_ERR_HDF5,
                             "%s/%s: dataset 'features'[rows %lld..%lld]: read failed (corrupt or "
                             "truncated file?)",
                             s->dir, s->meta.name, (long long)lo, (long long)(lo + cnt - 1));
    return DDP_OK;
}

/* Gives back the whole pages of the map between a and b (already scanned): they stay in the page cache,
 * but out of this process's resident memory. */
static void drop_pages(const void *a, const void *b)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + page - 1) & ~(page - 1), hi = (uintptr_t)b & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

ddp_status ddp_shard_scan_finite(ddp_shard *s, const char *dir, int all, ddp_finite_scan *r)
{
    memset(r, 0, sizeof *r);
    r->row = r->col = r->sample = r->id = -1;
    int was_open = s->opened, hint = s->access_hint;
    if (!was_open) {
        s->access_hint = DDP_ACCESS_SEQUENTIAL; /* front to back: the kernel's read-ahead at its most aggressive */
        ddp_status ost = ddp_shard_open(s, dir);
        s->access_hint = hint;
        if (ost != DDP_OK) return ost;
    }
    const ddp_shard_meta *m = &s->meta;
    int64_t per = SCAN_CHUNK / m->dim > 0 ? SCAN_CHUNK / m->dim : 1; /* rows per chunk */
    float *buf = NULL;
    ddp_status st = DDP_OK;
    if (!s->features && !(buf = ddp_malloc((size_t)(per * m->dim), sizeof *buf)))
        st = ddp_set_error(DDP_ERR_NOMEM, "%s/%s: out of memory for %lld rows of features", dir, m->name,
                           (long long)per);
    int64_t last = -1;
    for (int64_t lo = 0; st == DDP_OK && lo < m->rows && (all || r->values == 0); lo += per) {
        int64_t cnt = m->rows - lo < per ? m->rows - lo : per;
        const float *x = s->features ? s->features + lo * m->dim : buf;
        if (!s->features) st = read_rows(s, lo, cnt, buf);
        if (st != DDP_OK) break;
        scan_range(s, x, lo * m->dim, cnt * m->dim, all, r, &last);
        if (s->features) drop_pages(x, x + cnt * m->dim);
    }
    free(buf);
    if (!was_open) ddp_shard_close(s);
    return st;
}

static const char *value_name(float v) { return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

ddp_status ddp_finite_error(const char *dir, const ddp_shard *s, const ddp_finite_scan *r)
{
    return ddp_set_error(
        DDP_ERR_FORMAT,
        "%s/%s: dataset 'features'[row %lld, column %lld]: %s, in sample %lld of the shard (offsets[%lld], id %lld)",
        dir, s->meta.name, (long long)r->row, (long long)r->col, value_name(r->value), (long long)r->sample,
        (long long)r->sample, (long long)r->id);
}

ddp_status ddp_dataset_scan_finite(const char *dir, const ddp_shard_meta *metas, int64_t nshards)
{
    int64_t values = 0, samples = 0, first = -1;
    ddp_finite_scan fr = {0};
    for (int64_t i = 0; i < nshards; i++) {
        ddp_shard sh;
        memset(&sh, 0, sizeof sh);
        sh.meta = metas[i];
        sh.fd = -1;
        sh.h5file = sh.h5features = -1;
        ddp_finite_scan r;
        DDP_CHECK(ddp_shard_scan_finite(&sh, dir, 1, &r));
        values += r.values, samples += r.samples;
        if (r.values && first < 0) first = i, fr = r;
    }
    if (first < 0) return DDP_OK;
    ddp_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.meta = metas[first];
    char msg[1024];
    ddp_finite_error(dir, &sh, &fr);
    snprintf(msg, sizeof msg, "%s; %lld non-finite value(s) in %lld sample(s) of the dataset", ddp_last_error(),
             (long long)values, (long long)samples);
    return ddp_set_error(DDP_ERR_FORMAT, "%s", msg);
}
