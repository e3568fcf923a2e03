/* dataset.c — many shards as one dataset: the directory listing, the metadata every rank holds after start-up
 * (io/dataset_scan.c gathers it; the manifest written from it), lazy per-rank shard opening (within the open-shard
 * budget of io/shard_cache.c), and the collective checks over it. */
#include "io/dataset.h"
#include "mpi_ddp/comm/ctxlive.h"
#include "io/finite.h"
#include "io/shard_cache.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

ddp_status ddp_survey_write_manifest(ddp_ctx *ctx, const ddp_survey *s, const char *manifest)
{
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        char path[4200];
        if (manifest)
            snprintf(path, sizeof path, "%s", manifest);
        else
            snprintf(path, sizeof path, "%s/%s", s->dir, DDP_MANIFEST_NAME);
        char **nm = ddp_calloc((size_t)s->nshards, sizeof *nm);
        ddp_manifest_entry *e = ddp_calloc((size_t)s->nshards, sizeof *e);
        st = nm && e ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        for (int64_t k = 0; st == DDP_OK && k < s->nshards; k++) nm[k] = (char *)s->metas[k].name, e[k] = s->entries[k];
        if (st == DDP_OK) st = ddp_manifest_write(path, e, nm, s->nshards, s->pairs, s->npairs);
        if (st != DDP_OK && !manifest) { /* the data directory may be read-only: say where else it can go */
            char why[1024];
            snprintf(why, sizeof why, "%s", ddp_last_error());
            st = ddp_set_error(
                st, "%s; keep it elsewhere: mpiddp index %s --manifest FILE (and give that FILE to train and inspect)",
                why, s->dir);
        }
        free(nm), free(e);
    }
    return ddp_agree_status(ctx, st);
}

ddp_status ddp_survey_check_finite(const ddp_survey *s)
{
    int64_t values = 0, samples = 0, first = -1;
    for (int64_t k = 0; k < s->nshards; k++)
        if (s->entries[k].nonfinite > 0) {
            values += s->entries[k].nonfinite, samples += s->entries[k].nonfinite_samples;
            if (first < 0) first = k;
        }
    if (first < 0) return DDP_OK;
    ddp_shard sh; /* the first non-finite value's position: that shard is scanned again */
    memset(&sh, 0, sizeof sh);
    sh.meta = s->metas[first];
    sh.fd = -1;
    sh.h5file = sh.h5features = -1;
    ddp_finite_scan r;
    DDP_CHECK(ddp_shard_scan_finite(&sh, s->dir, 0, &r));
    if (!r.values) return ddp_set_error(DDP_ERR_IO, "%s/%s: changed since it was scanned", s->dir, sh.meta.name);
    ddp_finite_error(s->dir, &sh, &r);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s; %lld non-finite value(s) in %lld sample(s) of the dataset", ddp_last_error(),
             (long long)values, (long long)samples);
    return ddp_set_error(DDP_ERR_FORMAT, "%s", msg);
}

/* FNV-1a over len bytes, into h. */
static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Up to 64 KiB of fd at off (when off >= 0), into h; what cannot be read counts as its own value, and a read error
 * is noted in *err (the first one). */
static uint64_t fnv_at(uint64_t h, int fd, int64_t off, int64_t len, int *err)
{
    static const int64_t cap = 64 << 10;
    char buf[4096];
    if (off < 0) return h;
    for (int64_t at = 0, n = len < cap ? len : cap; at < n;) {
        ssize_t got = pread(fd, buf, (size_t)(n - at < (int64_t)sizeof buf ? n - at : (int64_t)sizeof buf), off + at);
        if (got < 0 && !*err) *err = errno;
        if (got <= 0) return fnv(h, "short", 5);
        h = fnv(h, buf, (size_t)got);
        at += got;
    }
    return h;
}

/* This rank's view of the dataset it opened: the shard count, and for the first, middle and last shard the size of
 * the file in this rank's dir and the bytes of its offsets, labels, sample ids and first features (at the offsets
 * the survey found); a shard whose arrays cannot be located (chunked, compressed, converted: HDF5 reads them) adds
 * the raw first and last 64 KiB of its file instead. Content, not paths: copies of one dataset at different paths
 * (node-local) are byte-identical and agree. A shard this rank cannot read is named in why ("cannot read NAME: ...")
 * and in own ("DIR/NAME: cannot open: ...", or "cannot read" for a read that failed after the open). */
static uint64_t local_fingerprint(const char *dir, const ddp_shard_meta *m, int64_t n, char *why, size_t wlen,
                                  char *own, size_t olen)
{
    static const int64_t cap = 64 << 10;
    uint64_t h = fnv(0xcbf29ce484222325ULL, &n, sizeof n);
    int64_t pick[3] = {0, n / 2, n - 1};
    for (int i = 0; i < 3; i++) {
        if (i && pick[i] == pick[i - 1]) continue;
        const ddp_shard_meta *s = &m[pick[i]];
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, s->name);
        struct stat sb;
        int err = 0;
        int64_t size = stat(path, &sb) == 0 ? (int64_t)sb.st_size : (err = errno, -1);
        h = fnv(h, &size, sizeof size);
        int fd = size >= 0 ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
        if (fd < 0 && !err) err = errno;
        int opened = fd >= 0;
        if (fd >= 0) {
            h = fnv_at(h, fd, s->off_off, (s->n + 1) * 8, &err);
            h = fnv_at(h, fd, s->lab_off, s->n * s->lab_width, &err);
            if (s->has_ids) h = fnv_at(h, fd, s->ids_off, s->n * 8, &err);
            h = fnv_at(h, fd, s->feat_off, s->rows * s->dim * 4, &err);
            if (s->off_off < 0 || s->lab_off < 0 || (s->has_ids && s->ids_off < 0) || s->feat_off < 0) {
                h = fnv_at(h, fd, 0, size, &err);
                h = fnv_at(h, fd, size > cap ? size - cap : 0, size, &err);
            }
            close(fd);
        }
        if (err && !why[0]) {
            snprintf(why, wlen, "cannot read %.400s: %s", s->name, strerror(err));
            snprintf(own, olen, "%.4000s: cannot %s: %s", path, opened ? "read" : "open", strerror(err));
        }
    }
    return h;
}

/* Collective: every rank opened the same dataset (its content, wherever it lies), or one line on every rank naming
 * rank 0's directory and the first rank's whose differs (or that cannot read a shard, and why). One allreduce when
 * they agree; nothing at one rank. */
static ddp_status agree_same_dataset(ddp_ctx *ctx, const char *dir, const ddp_shard_meta *m, int64_t n)
{
    if (ctx->topo.size == 1) return DDP_OK; /* no other rank to differ from */
    char why[512] = "", own[4600] = "";
    uint64_t h = local_fingerprint(dir, m, n, why, sizeof why, own, sizeof own), mm[3] = {h, ~h, !why[0]};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, mm, 3, MPI_UINT64_T, MPI_MIN, ctx->world));
    if (mm[0] == ~mm[1] && mm[2]) return DDP_OK;
    uint64_t h0 = h;
    MPI_CHECK(MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, ctx->world));
    int size = ctx->topo.size, rank = ctx->topo.rank;
    int first[2] = {why[0] ? rank : size, h != h0 ? rank : size}; /* the first that cannot read, that differs */
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, first, 2, MPI_INT, MPI_MIN, ctx->world));
    if (mm[0] == ~mm[1]) { /* the same view everywhere, and a shard some rank cannot read (every rank, most likely) */
        MPI_CHECK(MPI_Bcast(own, (int)sizeof own, MPI_CHAR, first[0], ctx->world));
        own[sizeof own - 1] = 0;
        ddp_set_error(DDP_ERR_IO, "%s", own);
        ddp_mark_error_shared(); /* every rank sets the same line */
        return DDP_ERR_IO;
    }
    int other = first[0] > 0 && first[0] < size ? first[0] : first[1] < size ? first[1] : 1;
    char d0[4096], d1[4096], real[PATH_MAX], host[256] = "?"; /* "DIR (= its real path) on HOST" */
    gethostname(host, sizeof host - 1);
    if (realpath(dir, real) && strcmp(real, dir) != 0)
        snprintf(d0, sizeof d0, "%.1800s (= %.1800s) on %.255s", dir, real, host);
    else
        snprintf(d0, sizeof d0, "%.1800s on %.255s", dir, host);
    memcpy(d1, d0, sizeof d1);
    MPI_CHECK(MPI_Bcast(d0, (int)sizeof d0, MPI_CHAR, 0, ctx->world));
    MPI_CHECK(MPI_Bcast(d1, (int)sizeof d1, MPI_CHAR, other, ctx->world));
    d0[sizeof d0 - 1] = d1[sizeof d1 - 1] = 0;
    char because[600];
    if (first[0] < size) {
        MPI_CHECK(MPI_Bcast(why, (int)sizeof why, MPI_CHAR, first[0], ctx->world));
        why[sizeof why - 1] = 0;
        snprintf(because, sizeof because, "rank %d %s", first[0], why);
    } else {
        snprintf(because, sizeof because, "their shards differ in size or content");
    }
    ddp_set_error(DDP_ERR_ARG,
                  "the ranks opened different datasets: rank 0 %s, rank %d %s: %s; give every rank the same dataset "
                  "(copies of it at other paths are fine)",
                  d0, other, d1, because);
    ddp_mark_error_shared(); /* every rank formatted the same line */
    return DDP_ERR_ARG;
}

ddp_status ddp_dataset_open(ddp_ctx *ctx, const char *dir, ddp_dataset **out)
{
    DDP_CTX_ARG(ctx);
    ddp_status st = DDP_NONNULL_ST(dir, "dir");
    if (st == DDP_OK) st = DDP_NONNULL_ST(out, "out");
    DDP_CHECK(ddp_agree_status(ctx, st)); /* collective: a NULL on one rank fails every rank */
    return ddp_dataset_open_with(ctx, dir, NULL, out);
}

ddp_status ddp_dataset_open_with(ddp_ctx *ctx, const char *dir, const char *manifest, ddp_dataset **out)
{
    *out = NULL;
    ddp_survey sv;
    DDP_CHECK(ddp_dataset_survey(ctx, dir, manifest, 0, &sv)); /* spread over the ranks; same metadata everywhere */
    ddp_status same = agree_same_dataset(ctx, dir, sv.metas, sv.nshards); /* rank r validated its slice in its dir */
    if (same != DDP_OK) {
        ddp_survey_free(&sv);
        return same;
    }
    int64_t n = sv.nshards;
    const ddp_shard_meta *metas = sv.metas;
    ddp_dataset *ds = ddp_calloc(1, sizeof *ds);
    ddp_shard *sh = ddp_calloc((size_t)n, sizeof *sh);
    ddp_status st = ds && sh ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    st = ddp_agree_status(ctx, st);
    if (st != DDP_OK) {
        free(ds);
        free(sh);
        ddp_survey_free(&sv);
        return st;
    }
    ds->ctx = ctx;
    snprintf(ds->dir, sizeof ds->dir, "%s", dir);
    snprintf(ds->notice, sizeof ds->notice, "%s", sv.notice);
    ds->manifest_fresh = sv.fresh;
    ds->nshards = n;
    ds->shards = sh;
    ds->all_mappable = 1;
    ddp_dataset_info *in = &ds->info;
    in->num_shards = n;
    in->dim = metas[0].dim;
    in->num_classes = metas[0].classes;
    for (int64_t i = 0; i < n; i++) {
        sh[i].meta = metas[i];
        sh[i].fd = -1;
        sh[i].h5file = sh[i].h5features = -1;
        in->num_samples += metas[i].n;
        in->num_rows += metas[i].rows;
        if (metas[i].max_rows > in->max_sample_rows) in->max_sample_rows = metas[i].max_rows;
        in->hdf5_read_shards += metas[i].feat_off < 0;
        if (metas[i].feat_off < 0 || metas[i].off_off < 0 || metas[i].lab_off < 0 ||
            (metas[i].has_ids && metas[i].ids_off < 0))
            ds->all_mappable = 0;
    }
    ddp_survey_free(&sv);
    st = ddp_shard_cache_attach(ds, ctx->topo.size); /* the open-shard budget (io/shard_cache.c) */
    st = ddp_agree_status(ctx, st);                  /* a rank without its table fails every rank, not alone */
    if (st != DDP_OK) {
        ddp_shard_cache_detach(ds); /* none where this rank's attach failed */
        free(ds->shards);
        free(ds);
        return st;
    }
    *out = ds;
    return DDP_OK;
}

ddp_status ddp_dataset_preopen_for_threads(ddp_dataset *ds, int *ok)
{
    *ok = 1;
    for (int64_t i = 0; i < ds->nshards; i++)
        if (ds->shards[i].meta.feat_off < 0) *ok = 0;
    if (!*ok || ds->all_mappable) return DDP_OK;
    for (int64_t i = 0; i < ds->nshards; i++) {
        ddp_shard *s = &ds->shards[i];
        const ddp_shard_meta *m = &s->meta;
        if (s->opened || (m->off_off >= 0 && m->lab_off >= 0 && (!m->has_ids || m->ids_off >= 0))) continue;
        s->access_hint = ds->access_hint;
        DDP_CHECK(ddp_shard_open(s, ds->dir));
        ddp_shard_release_handles(s); /* keeps the arrays read: no descriptor or map held outside the budget */
    }
    return DDP_OK;
}

void ddp_dataset_close(ddp_dataset *ds)
{
    if (!ds) return;
    ddp_shard_cache_detach(ds);
    for (int64_t i = 0; i < ds->nshards; i++) ddp_shard_close(&ds->shards[i]);
    free(ds->shards);
    free(ds->row_counts);
    free(ds);
}

const ddp_dataset_info *ddp_dataset_get_info(const ddp_dataset *ds) { return ds ? &ds->info : NULL; }

ddp_status ddp_dataset_locate(ddp_dataset *ds, int64_t index, ddp_shard **shard, int64_t *local)
{
    *shard = NULL;
    *local = 0;
    if (index < 0 || index >= ds->info.num_samples)
        return ddp_set_error(DDP_ERR_ARG, "%s: sample index %lld out of range [0, %lld)", ds->dir, (long long)index,
                             (long long)ds->info.num_samples);
    ddp_shard *s;
    DDP_CHECK(ddp_shard_cache_pin_current(ds, ddp_dataset_shard_of(ds, index), &s));
    *shard = s;
    *local = index - s->meta.first;
    return DDP_OK;
}

ddp_status ddp_dataset_sample(ddp_dataset *ds, int64_t index, float *scratch, const float **rows, int64_t *nrows,
                              int64_t *label, int64_t *sample_id)
{
    DDP_NONNULL(ds, "ds");
    DDP_NONNULL(rows, "rows");
    DDP_NONNULL(nrows, "nrows");
    /* its shards read through HDF5 died with MPI (MPI_Finalize ends parallel HDF5); the lock only once a ctx ended */
    if (ddp_ctx_any_finalized() && !ddp_ctx_is_live(ds->ctx))
        return ddp_set_error(DDP_ERR_ARG,
                             "ddp_dataset_sample: %s's ctx was finalized (ddp_finalize): sample before ddp_finalize, "
                             "then ddp_dataset_close",
                             ds->dir);
    ddp_shard *s;
    int64_t i;
    ddp_status st = ddp_dataset_locate(ds, index, &s, &i);
    if (st == DDP_OK) st = ddp_shard_sample(s, i, scratch, rows, nrows, label, sample_id);
    /* not collective, often on a loader thread: a shard this rank alone cannot read leaves the others in the
     * program's next collective, which ddp_finalize's MPI_Finalize once waited for */
    return ddp_ctx_local_failure(ds->ctx, st);
}

/* The three below run on the loader's worker, on the shard while the cache (io/shard_cache.c) keeps it open. The
 * addresses ddp_dataset_range returns may outlive the map (the LRU may close the shard): a madvise on them then
 * fails harmlessly (ENOMEM, or EFAULT for MADV_POPULATE_READ), it never faults. */
typedef struct {
    int64_t n; /* samples from the one given */
    void **addr;
    size_t *len;
    int ok;
} ahead_arg;

static void range_fn(ddp_shard *s, int64_t i, void *arg)
{
    ahead_arg *a = arg;
    a->ok = ddp_shard_range(s, i, i + a->n, a->addr, a->len);
}

static void prefetch_range_fn(ddp_shard *s, int64_t i, void *arg)
{
    ddp_shard_prefetch_range(s, i, i + ((ahead_arg *)arg)->n);
}

static void prefetch_fn(ddp_shard *s, int64_t i, void *arg)
{
    (void)arg;
    ddp_shard_prefetch(s, i);
}

int ddp_dataset_range(ddp_dataset *ds, int64_t lo, int64_t hi, void **addr, size_t *len)
{
    ahead_arg a = {hi - lo, addr, len, 0};
    return hi > lo && ddp_dataset_with_shard(ds, lo, range_fn, &a) && a.ok;
}

void ddp_dataset_prefetch_range(ddp_dataset *ds, int64_t lo, int64_t hi)
{
    ahead_arg a = {hi - lo, NULL, NULL, 0};
    if (hi > lo) ddp_dataset_with_shard(ds, lo, prefetch_range_fn, &a);
}

void ddp_dataset_prefetch(ddp_dataset *ds, int64_t index) { ddp_dataset_with_shard(ds, index, prefetch_fn, NULL); }

ddp_status ddp_dataset_check_max_rows(ddp_ctx *ctx, ddp_dataset *ds, int64_t limit, const char *option)
{
    if (ds->info.max_sample_rows <= limit) return DDP_OK; /* every rank knows this from the broadcast metadata */
    ddp_status st = DDP_ERR_REMOTE;
    if (ctx->topo.rank == 0) { /* name the longest sample (the first of that length): file, object and index */
        int64_t longest = ds->info.max_sample_rows;
        st = ddp_set_error(DDP_ERR_ARG, "%s: the longest sample has %lld rows, more than %s %lld", ds->dir,
                           (long long)longest, option, (long long)limit);
        for (int64_t k = 0; k < ds->nshards; k++) {
            if (ds->shards[k].meta.max_rows != longest) continue;
            ddp_shard *s;
            int64_t local;
            if (ddp_dataset_locate(ds, ds->shards[k].meta.first, &s, &local) != DDP_OK) break;
            for (int64_t i = 0; i < s->meta.n; i++) {
                int64_t n = s->offsets[i + 1] - s->offsets[i];
                if (n == longest) {
                    st = ddp_set_error(
                        DDP_ERR_ARG, "%s/%s: /offsets[%lld]: sample (id %lld) has %lld rows, more than %s %lld",
                        ds->dir, s->meta.name, (long long)i, (long long)(s->ids ? s->ids[i] : s->meta.first + i),
                        (long long)n, option, (long long)limit);
                    break;
                }
            }
            break;
        }
    }
    return ddp_agree_status(ctx, st);
}

ddp_status ddp_dataset_row_counts(ddp_ctx *ctx, ddp_dataset *ds, int32_t **out)
{
    *out = NULL;
    int W = ctx->topo.size, me = ctx->topo.rank;
    int64_t n = ds->info.num_samples;
    if (ds->row_counts) { /* handed back by an earlier caller (ddp_dataset_keep_row_counts), on every rank */
        *out = ds->row_counts;
        ds->row_counts = NULL;
        return DDP_OK;
    }
    int32_t *lens = ddp_calloc((size_t)n, sizeof *lens);
    int *cnt = ddp_calloc((size_t)W, sizeof *cnt), *dsp = ddp_calloc((size_t)W, sizeof *dsp);
    ddp_status st = lens && cnt && dsp
                        ? DDP_OK
                        : ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld row counts", (long long)n);
    if (st == DDP_OK && n > INT32_MAX) st = ddp_set_error(DDP_ERR_ARG, "%s: more than 2^31 samples", ds->dir);
    /* rank r contributes shards r, r + W, ...: pack their counts contiguously, then put them in place */
    int32_t *mine = NULL;
    int64_t nmine = 0;
    for (int64_t k = me; st == DDP_OK && k < ds->nshards; k += W) nmine += ds->shards[k].meta.n;
    if (st == DDP_OK && !(mine = ddp_calloc((size_t)(nmine ? nmine : 1), sizeof *mine)))
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    int64_t at = 0;
    for (int64_t k = me; st == DDP_OK && k < ds->nshards; k += W) {
        ddp_shard *s;
        int64_t local;
        st = ddp_dataset_locate(ds, ds->shards[k].meta.first, &s, &local);
        for (int64_t i = 0, lo = 0, hi = 0; st == DDP_OK && i < s->meta.n; i++)
            if ((st = ddp_shard_rows(s, i, &lo, &hi)) == DDP_OK) mine[at++] = (int32_t)(hi - lo);
    }
    /* the gather's buffer before the agreement: a rank without it must not skip a collective the others enter */
    int32_t *all = st == DDP_OK ? ddp_calloc((size_t)(n > 0 ? n : 1), sizeof *all) : NULL;
    if (st == DDP_OK && !all) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld row counts", (long long)n);
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK) {
        for (int r = 0; r < W; r++)
            for (int64_t k = r; k < ds->nshards; k += W) cnt[r] += (int)ds->shards[k].meta.n;
        for (int r = 1; r < W; r++) dsp[r] = dsp[r - 1] + cnt[r - 1];
        int rc = MPI_Allgatherv(mine, (int)nmine, MPI_INT32_T, all, cnt, dsp, MPI_INT32_T, ctx->world);
        if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Allgatherv(row counts)", __FILE__, __LINE__);
        for (int r = 0; st == DDP_OK && r < W; r++) { /* rank r's block holds shards r, r + W, ... in order */
            int64_t p = dsp[r];
            for (int64_t k = r; k < ds->nshards; k += W) {
                memcpy(lens + ds->shards[k].meta.first, all + p, (size_t)ds->shards[k].meta.n * sizeof *lens);
                p += ds->shards[k].meta.n;
            }
        }
    }
    free(all), free(mine), free(cnt), free(dsp);
    if (st != DDP_OK) {
        free(lens);
        return st;
    }
    *out = lens;
    return DDP_OK;
}

void ddp_dataset_keep_row_counts(ddp_dataset *ds, int32_t *lens)
{
    free(ds->row_counts);
    ds->row_counts = lens;
}

int ddp_sample_nonfinite(ddp_dataset *ds, int64_t index, const float *rows, int64_t nrows, ddp_shard **shard,
                         ddp_finite_scan *r)
{
    int64_t dim = ds->info.dim, k = ddp_first_nonfinite(rows, nrows * dim);
    if (k < 0) return 0;
    ddp_shard *s;
    int64_t li;
    if (ddp_dataset_locate(ds, index, &s, &li) != DDP_OK) return 0;
    memset(r, 0, sizeof *r);
    r->values = r->samples = 1;
    r->row = s->offsets[li] + k / dim, r->col = k % dim, r->sample = li,
    r->id = s->ids ? s->ids[li] : s->meta.first + li;
    r->value = rows[k];
    *shard = s;
    return 1;
}

/* Collective. Rank r scans shards r, r + W, ... in order and stops at its first failure (a non-finite value or an
 * I/O error); the failure in the lowest shard is everyone's error. */
ddp_status ddp_dataset_check_finite(ddp_ctx *ctx, ddp_dataset *ds)
{
    int W = ctx->topo.size, me = ctx->topo.rank;
    int64_t fail = INT64_MAX;
    ddp_status st = DDP_OK;
    for (int64_t k = me; k < ds->nshards; k += W) {
        ddp_finite_scan r;
        st = ddp_shard_scan_finite(&ds->shards[k], ds->dir, 0, &r);
        if (st == DDP_OK && r.values) st = ddp_finite_error(ds->dir, &ds->shards[k], &r);
        if (st != DDP_OK) {
            fail = k;
            break;
        }
    }
    int64_t first = fail;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT64_T, MPI_MIN, ctx->world));
    if (first == INT64_MAX) return DDP_OK;
    return ddp_agree_status(ctx, fail == first ? st : DDP_OK); /* only the owner of that shard holds an error */
}
