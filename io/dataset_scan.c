/* dataset_scan.c — start-up metadata of a dataset directory (issue #33): rank 0 lists it once, the ranks validate
 * shards r, r + W, ... (each in a forked child that survives HDF5 crashing or hanging) or take them from a fresh
 * manifest (io/manifest.h), and every rank ends with the same metadata or the same first error in shard order. */
#include "io/dataset.h"
#include "io/dataset_validate.h"
#include "io/finite.h"
#include "io/manifest.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* ---- the collective survey */

/* Rank 0's listing, on every rank: names[i] point into one buffer (*blob). */
static ddp_status share_names(ddp_ctx *ctx, const char *dir, char ***names_out, char **blob_out, int64_t *n_out)
{
    char **names = NULL, *blob = NULL;
    int64_t hdr[2] = {0, 0}; /* count, bytes */
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        char **v = NULL;
        st = ddp_dataset_list(dir, &v, &hdr[0]);
        for (int64_t i = 0; st == DDP_OK && i < hdr[0]; i++) hdr[1] += (int64_t)strlen(v[i]) + 1;
        if (st == DDP_OK && !(blob = ddp_malloc((size_t)hdr[1], 1)))
            st = ddp_set_error(DDP_ERR_NOMEM, "out of memory listing %s", dir);
        for (int64_t i = 0, at = 0; st == DDP_OK && i < hdr[0]; i++) {
            size_t l = strlen(v[i]) + 1;
            memcpy(blob + at, v[i], l);
            at += (int64_t)l;
        }
        for (int64_t i = 0; v && i < hdr[0]; i++) free(v[i]);
        free(v);
    }
    DDP_CHECK(ddp_agree_status(ctx, st));
    MPI_CHECK(MPI_Bcast(hdr, 2, MPI_INT64_T, 0, ctx->world));
    if (ctx->topo.rank != 0 && !(blob = ddp_malloc((size_t)hdr[1], 1)))
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    if (st == DDP_OK && !(names = ddp_calloc((size_t)hdr[0], sizeof *names)))
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    st = ddp_agree_status(ctx, st);
    for (int64_t lo = 0, chunk = (int64_t)1 << 30; st == DDP_OK && lo < hdr[1]; lo += chunk) {
        int rc = MPI_Bcast(blob + lo, (int)(hdr[1] - lo < chunk ? hdr[1] - lo : chunk), MPI_BYTE, 0, ctx->world);
        if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Bcast(shard names)", __FILE__, __LINE__);
    }
    if (st != DDP_OK) {
        free(blob), free(names);
        return st;
    }
    for (int64_t i = 0, at = 0; i < hdr[0]; i++) {
        names[i] = blob + at;
        at += (int64_t)strlen(blob + at) + 1;
    }
    *names_out = names, *blob_out = blob, *n_out = hdr[0];
    return DDP_OK;
}

/* Rank 0 reads and checks the manifest; a valid one reaches every rank (*buf, *len), else *len = -1 and rank 0's
 * out->notice says why it is ignored. */
static ddp_status share_manifest(ddp_ctx *ctx, const char *dir, const char *path, int explicit_, ddp_survey *out,
                                 char **buf, int64_t *len)
{
    int64_t mlen = -1;
    char *mb = NULL;
    if (ctx->topo.rank == 0) {
        char why[256] = "";
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no wait for a writer, refused below */
        struct stat sb;
        int notreg = 0; /* a directory (the dataset's own, say) or a FIFO: index refuses to write there too */
        if (fd < 0) {
            if (errno != ENOENT || explicit_) snprintf(why, sizeof why, "cannot read (%s)", strerror(errno));
        } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            snprintf(why, sizeof why, "not a regular file%s", S_ISFIFO(sb.st_mode) ? " (a FIFO)" : "");
            notreg = 1;
        } else if (!(mb = malloc((size_t)sb.st_size + 8))) {
            snprintf(why, sizeof why, "cannot read (out of memory for %lld bytes)", (long long)sb.st_size);
        } else if ((errno = 0, ddp_read_all(fd, mb, (size_t)sb.st_size) != 0) && sb.st_size > 0) {
            snprintf(why, sizeof why, "cannot read (%s)", errno ? strerror(errno) : "short read");
        } else {
            ddp_manifest m;
            if (ddp_manifest_parse(mb, sb.st_size, &m, why, sizeof why) == 0) mlen = sb.st_size;
        }
        if (fd >= 0) close(fd);
        int foreign = explicit_ &&
                      (notreg || (mb && mlen < 0 && sb.st_size >= 8 && memcmp(mb, DDP_MANIFEST_MAGIC, 8) != 0));
        if (mlen < 0) free(mb), mb = NULL;
        if (foreign) /* another file named by mistake: index would refuse to write there, so do not suggest it */
            snprintf(out->notice, sizeof out->notice,
                     "%s: %s: ignored, validating every shard (is it the manifest you meant to give?)", path, why);
        else if (why[0])
            snprintf(out->notice, sizeof out->notice,
                     "%s: %s: ignored, validating every shard; %s `mpiddp index %s%s%s`", path, why,
                     explicit_ ? "write it with" : "rerun", dir, explicit_ ? " --manifest " : "",
                     explicit_ ? path : "");
    }
    MPI_CHECK(MPI_Bcast(&mlen, 1, MPI_INT64_T, 0, ctx->world));
    ddp_status st = DDP_OK;
    if (mlen >= 0 && ctx->topo.rank != 0 && !(mb = malloc((size_t)mlen + 8)))
        st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for the manifest");
    st = ddp_agree_status(ctx, st);
    for (int64_t lo = 0, chunk = (int64_t)1 << 30; st == DDP_OK && lo < mlen; lo += chunk) {
        int rc = MPI_Bcast(mb + lo, (int)(mlen - lo < chunk ? mlen - lo : chunk), MPI_BYTE, 0, ctx->world);
        if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Bcast(manifest)", __FILE__, __LINE__);
    }
    if (st != DDP_OK) {
        free(mb);
        return st;
    }
    *buf = mb, *len = mlen;
    return DDP_OK;
}

static int64_t slice_len(int64_t limit, int r, int W) { return limit > r ? (limit - r + W - 1) / W : 0; }

/* Every rank's entries of shards [0, limit) to every rank (rank r holds r, r + W, ...). */
static ddp_status gather_entries(ddp_ctx *ctx, ddp_manifest_entry *e, int64_t limit)
{
    int W = ctx->topo.size, me = ctx->topo.rank;
    int *cnt = ddp_calloc((size_t)W, sizeof *cnt), *dsp = ddp_calloc((size_t)W, sizeof *dsp);
    ddp_manifest_entry *mine = ddp_calloc((size_t)slice_len(limit, me, W) + 1, sizeof *mine);
    ddp_manifest_entry *all = ddp_calloc((size_t)limit + 1, sizeof *all);
    ddp_status st = cnt && dsp && mine && all
                        ? DDP_OK
                        : ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld shard records", (long long)limit);
    st = ddp_agree_status(ctx, st);
    MPI_Datatype t = MPI_DATATYPE_NULL;
    int rc = st == DDP_OK ? MPI_Type_contiguous((int)sizeof *e, MPI_BYTE, &t) : MPI_SUCCESS;
    if (rc == MPI_SUCCESS && st == DDP_OK) rc = MPI_Type_commit(&t);
    if (st == DDP_OK && rc == MPI_SUCCESS) {
        for (int r = 0; r < W; r++) cnt[r] = (int)slice_len(limit, r, W), dsp[r] = r ? dsp[r - 1] + cnt[r - 1] : 0;
        int64_t j = 0;
        for (int64_t k = me; k < limit; k += W) mine[j++] = e[k];
        rc = MPI_Allgatherv(mine, cnt[me], t, all, cnt, dsp, t, ctx->world);
        for (int r = 0; rc == MPI_SUCCESS && r < W; r++) {
            int64_t p = dsp[r];
            for (int64_t k = r; k < limit; k += W) e[k] = all[p++];
        }
    }
    if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Allgatherv(shard records)", __FILE__, __LINE__);
    if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
    free(cnt), free(dsp), free(mine), free(all);
    return st;
}

/* Rank 0 collects the class pairs of every shard, in shard order (entries' cc_first become offsets there). */
static ddp_status gather_pairs(ddp_ctx *ctx, ddp_survey *out, const ddp_shard_checks *v)
{
    int W = ctx->topo.size, me = ctx->topo.rank;
    int64_t n = out->nshards, mine = 0, total = 0;
    for (int64_t k = me; k < n; k += W) mine += out->entries[k].ncc;
    for (int64_t k = 0; k < n; k++) total += out->entries[k].ncc;
    if (total * 2 > INT_MAX) { /* every rank counts the same total: one line, from rank 0 */
        ddp_status big = ddp_set_error(DDP_ERR_ARG, "%s: more than 2^30 (class, count) pairs", out->dir);
        ddp_mark_error_shared();
        return big;
    }
    int64_t *buf = ddp_malloc((size_t)(2 * mine + 2), sizeof *buf), *all = NULL;
    int *cnt = ddp_calloc((size_t)W, sizeof *cnt), *dsp = ddp_calloc((size_t)W, sizeof *dsp);
    ddp_status st = buf && cnt && dsp ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    if (st == DDP_OK && me == 0) { /* both of rank 0's buffers before the agreement: no failure after it */
        all = ddp_malloc((size_t)(2 * total + 2), sizeof *all);
        out->pairs = ddp_malloc((size_t)(2 * total + 2), sizeof *out->pairs);
        if (!all || !out->pairs)
            st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld class counts", (long long)total);
    }
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK) {
        int64_t j = 0;
        for (int64_t k = me; k < n; k += W) {
            if (out->entries[k].ncc)
                memcpy(buf + j, v->pairs + 2 * out->entries[k].cc_first, (size_t)out->entries[k].ncc * 16);
            j += 2 * out->entries[k].ncc;
        }
        for (int r = 0; r < W; r++) {
            for (int64_t k = r; k < n; k += W) cnt[r] += (int)(2 * out->entries[k].ncc);
            dsp[r] = r ? dsp[r - 1] + cnt[r - 1] : 0;
        }
        int rc = MPI_Gatherv(buf, cnt[me], MPI_INT64_T, all, cnt, dsp, MPI_INT64_T, 0, ctx->world);
        if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Gatherv(class counts)", __FILE__, __LINE__);
    }
    if (st == DDP_OK && me == 0) {
        int64_t at = 0;
        for (int64_t k = 0; st == DDP_OK && k < n; k++)
            out->entries[k].cc_first = (at += out->entries[k].ncc) - out->entries[k].ncc;
        for (int r = 0; st == DDP_OK && r < W; r++) {
            int64_t p = dsp[r];
            for (int64_t k = r; k < n; k += W) {
                if (out->entries[k].ncc)
                    memcpy(out->pairs + 2 * out->entries[k].cc_first, all + p, (size_t)out->entries[k].ncc * 16);
                p += 2 * out->entries[k].ncc;
            }
        }
        out->npairs = total;
    }
    free(buf), free(all), free(cnt), free(dsp);
    return st;
}

static int64_t mtime_ns(const struct stat *sb)
{
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

/* The first problem in shard order becomes every rank's error: a shard's own (validated by rank k mod W), or a D
 * or num_classes that differs from shard 0's, whichever comes first; anything else (fork, memory) by the lowest rank.
 */
static ddp_status agree_first(ddp_ctx *ctx, ddp_survey *out, char *const *names, const ddp_shard_checks *v,
                              int64_t *limit)
{
    int W = ctx->topo.size, me = ctx->topo.rank;
    int64_t key = v->status == DDP_OK ? INT64_MAX : v->fail;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT64_T, MPI_MIN, ctx->world));
    int who = -1;
    if (key == -1) {
        who = v->fail == -1 && v->status != DDP_OK ? me : W;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &who, 1, MPI_INT, MPI_MIN, ctx->world));
    } else {
        *limit = key == INT64_MAX ? out->nshards : key;
        DDP_CHECK(gather_entries(ctx, out->entries, *limit));
        const ddp_manifest_entry *e = out->entries;
        for (int64_t k = 1; k < *limit; k++) {
            if (e[k].dim != e[0].dim)
                ddp_set_error(DDP_ERR_FORMAT, "%s/%s: dataset 'features': D=%lld differs from D=%lld of %s/%s",
                              out->dir, names[k], (long long)e[k].dim, (long long)e[0].dim, out->dir, names[0]);
            else if (e[k].classes != e[0].classes)
                ddp_set_error(DDP_ERR_FORMAT, "%s/%s: attribute 'num_classes': %lld differs from %lld of %s/%s",
                              out->dir, names[k], (long long)e[k].classes, (long long)e[0].classes, out->dir, names[0]);
            else
                continue;
            ddp_mark_error_shared(); /* every rank formatted the same line */
            return DDP_ERR_FORMAT;
        }
        if (key == INT64_MAX) return DDP_OK;
        who = (int)(key % W);
    }
    int code = v->status;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", v->msg);
    MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, who, ctx->world));
    MPI_CHECK(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, who, ctx->world));
    msg[sizeof msg - 1] = 0;
    ddp_set_error_text(msg);
    ddp_mark_error_shared();
    return code == DDP_OK ? DDP_ERR_REMOTE : (ddp_status)code;
}

/* Whether directory mdir holds a shard (a regular *.h5 file) that manifest mf records: mdir is a dataset the manifest
 * was written for, not a place the manifest is merely kept (index DIR --manifest KEEP/mpiddp-manifest.bin). */
static int holds_recorded_shard(const char *mdir, const ddp_manifest *mf)
{
    DIR *d = mf->count ? opendir(mdir) : NULL;
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".h5") != 0 || ddp_manifest_find(mf, e->d_name) < 0) continue;
        char p[PATH_MAX + 256];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", mdir, e->d_name);
        found = stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    closedir(d);
    return found;
}

/* The directory of manifest when it is the mpiddp-manifest.bin of a dataset directory other than dir (one holding
 * shards the manifest records): another dataset's own manifest, named by mistake (--train-manifest
 * data/val/mpiddp-manifest.bin). "" otherwise, also for dir's manifest kept in a directory of no such shard. */
static void others_manifest(const char *manifest, const char *dir, const ddp_manifest *mf, char *other, size_t n)
{
    other[0] = 0;
    const char *slash = strrchr(manifest, '/'), *base = slash ? slash + 1 : manifest;
    if (strcmp(base, DDP_MANIFEST_NAME) != 0) return;
    char mdir[PATH_MAX];
    if (!slash)
        snprintf(mdir, sizeof mdir, ".");
    else
        snprintf(mdir, sizeof mdir, "%.*s", slash == manifest ? 1 : (int)(slash - manifest), manifest);
    struct stat a, b;
    if (stat(mdir, &a) == 0 && stat(dir, &b) == 0 && (a.st_dev != b.st_dev || a.st_ino != b.st_ino) &&
        holds_recorded_shard(mdir, mf))
        snprintf(other, n, "%s", mdir);
}

ddp_status ddp_dataset_survey(ddp_ctx *ctx, const char *dir, const char *manifest, int flags, ddp_survey *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->dir, sizeof out->dir, "%s", dir);
    int W = ctx->topo.size, me = ctx->topo.rank;
    char **names = NULL, *blob = NULL, *mbuf = NULL;
    int64_t n = 0, mlen = -1, *todo = NULL, nt = 0, limit = 0;
    ddp_shard_checks v;
    memset(&v, 0, sizeof v);
    ddp_status st = share_names(ctx, dir, &names, &blob, &n);
    if (st != DDP_OK) return st;
    if (n > INT_MAX) { /* the gathers count records in ints; every rank knows n */
        free(names), free(blob);
        ddp_set_error(DDP_ERR_ARG, "%s: %lld shards, more than the %d one dataset may have", dir, (long long)n,
                      INT_MAX);
        ddp_mark_error_shared();
        return DDP_ERR_ARG;
    }
    out->nshards = n;
    if (!manifest)
        snprintf(out->manifest, sizeof out->manifest, "%s/%s", dir, DDP_MANIFEST_NAME);
    else if (strcmp(manifest, "none") != 0)
        snprintf(out->manifest, sizeof out->manifest, "%s", manifest);
    if (out->manifest[0]) DDP_TRY(share_manifest(ctx, dir, out->manifest, manifest != NULL, out, &mbuf, &mlen));
    ddp_manifest mf = {0};
    char why[256];
    if (mlen >= 0 && ddp_manifest_parse(mbuf, mlen, &mf, why, sizeof why) != 0) memset(&mf, 0, sizeof mf);
    out->manifest_used = mlen >= 0;
    out->entries = ddp_calloc((size_t)n, sizeof *out->entries);
    todo = ddp_calloc((size_t)slice_len(n, me, W) + 1, sizeof *todo);
    st = out->entries && todo ? DDP_OK
                              : ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld shard records", (long long)n);
    v.entries = out->entries;
    v.nshards = out->nshards;
    int64_t counts[4] = {0, 0, 0, 0};                     /* fresh, changed, new, validated */
    for (int64_t k = me; st == DDP_OK && k < n; k += W) { /* this rank's slice: stat, compare with the manifest */
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        struct stat sb;
        int ok = stat(path, &sb) == 0;
        if (ok) out->entries[k].mtime_ns = mtime_ns(&sb);
        int64_t i = mf.count ? ddp_manifest_find(&mf, names[k]) : -1;
        const ddp_manifest_entry *e = i >= 0 ? &mf.e[i] : NULL;
        /* a chmod changes neither size nor mtime: a shard this user cannot read is validated, which names it
         * (access, not faccessat2: some sandboxes refuse that call, and no shard would be trusted) */
        if (e && ok && e->file_bytes == (int64_t)sb.st_size && e->mtime_ns == mtime_ns(&sb) &&
            (!(flags & DDP_SURVEY_FINITE) || e->nonfinite >= 0) && !(access(path, R_OK) != 0 && errno == EACCES)) {
            out->entries[k] = *e;
            out->entries[k].cc_first = v.npairs;
            if (v.npairs + e->ncc > v.cap) {
                int64_t nc = (v.npairs + e->ncc) * 2 + 64, *p = realloc(v.pairs, (size_t)nc * 16);
                if (!p) {
                    st = ddp_set_error(DDP_ERR_NOMEM, "out of memory for class counts");
                    break;
                }
                v.pairs = p, v.cap = nc;
            }
            if (e->ncc) memcpy(v.pairs + 2 * v.npairs, mf.pairs + 2 * e->cc_first, (size_t)e->ncc * 16);
            v.npairs += e->ncc;
            counts[0]++;
        } else {
            todo[nt++] = k;
            counts[e ? 1 : 2] += out->manifest_used;
        }
    }
    if (st != DDP_OK)
        v.status = st, v.fail = -1, snprintf(v.msg, sizeof v.msg, "%s", ddp_last_error());
    else
        ddp_validate_shards(&v, dir, names, todo, nt, flags);
    counts[3] = v.validated;
    ddp_io_counters_get()->validated += v.validated;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, counts, 4, MPI_INT64_T, MPI_SUM, ctx->world));
    out->fresh = counts[0], out->changed = counts[1], out->added = counts[2], out->validated = counts[3];
    out->removed = out->manifest_used ? mf.count - out->fresh - out->changed : 0;
    DDP_TRY(agree_first(ctx, out, names, &v, &limit));
    if (flags & DDP_SURVEY_STATS) DDP_TRY(gather_pairs(ctx, out, &v));
    out->metas = ddp_calloc((size_t)n, sizeof *out->metas);
    st = ddp_agree_status(
        ctx, out->metas ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld shard records", (long long)n));
    if (st != DDP_OK) goto done;
    for (int64_t k = 0, first = 0; k < n; k++) {
        ddp_manifest_to_meta(&out->entries[k], names[k], &out->metas[k]);
        out->metas[k].first = first;
        first += out->metas[k].n;
    }
    char other[PATH_MAX] = "";
    if (me == 0 && manifest && out->manifest_used && (out->changed || out->added || out->removed))
        others_manifest(manifest, dir, &mf, other, sizeof other);
    if (me == 0 && out->manifest_used && (out->changed || out->added || out->removed) && other[0])
        /* refreshing it (index DIR --manifest OTHER/mpiddp-manifest.bin) would replace the other dataset's manifest */
        snprintf(out->notice, sizeof out->notice,
                 "%s: %lld of %lld shards changed or new, %lld removed since it was written: re-validated them; it is "
                 "the manifest of %s, not of %s: name %s/%s (the default) or none",
                 out->manifest, (long long)(out->changed + out->added), (long long)n, (long long)out->removed, other,
                 dir, dir, DDP_MANIFEST_NAME);
    else if (me == 0 && out->manifest_used && (out->changed || out->added || out->removed))
        snprintf(out->notice, sizeof out->notice,
                 "%s: %lld of %lld shards changed or new, %lld removed since it was written: re-validated them; "
                 "`mpiddp index %s%s%s` refreshes it",
                 out->manifest, (long long)(out->changed + out->added), (long long)n, (long long)out->removed, dir,
                 manifest ? " --manifest " : "", manifest ? manifest : "");
done:
    free(names), free(blob), free(mbuf), free(todo), free(v.pairs);
    if (st != DDP_OK) {
        char keep[sizeof out->notice];
        memcpy(keep, out->notice, sizeof keep);
        ddp_survey_free(out);
        memcpy(out->notice, keep, sizeof keep);
    }
    return st;
}

void ddp_survey_free(ddp_survey *s)
{
    free(s->metas), free(s->entries), free(s->pairs);
    memset(s, 0, sizeof *s);
}
