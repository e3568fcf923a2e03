/* dataset.c — many shards as one dataset: directory listing, rank-0 validation and broadcast of the
 * shard metadata (no metadata storm on a parallel file system), lazy per-rank shard opening (within the
 * open-shard budget of io/shard_cache.c). */
#include "io/dataset.h"
#include "io/shard_cache.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static ddp_status list_shards(const char *dir, char ***names, int64_t *n)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return ddp_set_error(DDP_ERR_IO, "%s: dataset directory: %s", dir, strerror(errno));
    int64_t cap = 16, cnt = 0;
    char **v = ddp_calloc((size_t)cap, sizeof *v);
    struct dirent *e;
    ddp_status st = DDP_OK;
    while (v && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".h5") != 0 || e->d_name[0] == '.') continue;
        if (len >= DDP_SHARD_NAME_MAX) {
            st = ddp_set_error(DDP_ERR_ARG, "%s/%s: shard file name too long", dir, e->d_name);
            break;
        }
        if (cnt == cap) {
            char **nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[cnt++] = strdup(e->d_name);
    }
    closedir(d);
    if (!v) return ddp_set_error(DDP_ERR_NOMEM, "out of memory listing %s", dir);
    if (st == DDP_OK && cnt == 0) st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset directory: no *.h5 shard files", dir);
    if (st != DDP_OK) {
        for (int64_t i = 0; i < cnt; i++) free(v[i]);
        free(v);
        return st;
    }
    qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return DDP_OK;
}

/* The progress callback of the validation shards: the current file, then the object HDF5 reads. */
static const char *g_scan_file;
static void (*g_scan_note)(const char *file, const char *what);
static void scan_progress(const char *what)
{
    if (g_scan_note) g_scan_note(g_scan_file, what);
}

static ddp_status scan_inprocess(const char *dir, ddp_shard_meta **metas, int64_t *nshards, ddp_shard_stats *stats)
{
    char **names = NULL;
    int64_t n = 0;
    DDP_CHECK(list_shards(dir, &names, &n));
    ddp_shard_meta *m = ddp_calloc((size_t)n, sizeof *m);
    ddp_status st = m ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    int64_t first = 0;
    char path[8192];
    for (int64_t i = 0; i < n && st == DDP_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        g_scan_file = path;
        if (i == 0 && stats) { /* class counts need num_classes: peek at the first shard */
            st = ddp_shard_validate(path, names[i], &m[i], NULL);
            if (st == DDP_OK) {
                stats->class_counts = ddp_calloc((size_t)m[i].classes, sizeof(int64_t));
                stats->classes_cap = stats->class_counts ? m[i].classes : 0;
            }
        }
        if (st == DDP_OK) st = ddp_shard_validate(path, names[i], &m[i], stats);
        if (st != DDP_OK) break;
        if (m[i].dim != m[0].dim)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: dataset 'features': D=%lld differs from D=%lld of %s/%s", path,
                               (long long)m[i].dim, (long long)m[0].dim, dir, m[0].name);
        else if (m[i].classes != m[0].classes)
            st = ddp_set_error(DDP_ERR_FORMAT, "%s: attribute 'num_classes': %lld differs from %lld of %s/%s", path,
                               (long long)m[i].classes, (long long)m[0].classes, dir, m[0].name);
        m[i].first = first;
        first += m[i].n;
    }
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st != DDP_OK) {
        free(m);
        if (stats) {
            free(stats->class_counts);
            stats->class_counts = NULL;
        }
        return st;
    }
    *metas = m;
    *nshards = n;
    return DDP_OK;
}

/* ---- validation in a child process: HDF5 1.10 can crash, hang or corrupt memory on some malformed files
 * (tests/fuzz/regressions). The child validates and sends back the result; the parent survives whatever
 * HDF5 does, kills the child when one object takes longer than MPIDDP_VALIDATE_TIMEOUT seconds (default
 * 120), and names the file and object it was reading. Records: 'P' progress text, 'R' result. */
static int g_pipe = -1;

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static void send_rec(char type, const void *p, uint64_t n)
{
    if (write_all(g_pipe, &type, 1) == 0 && write_all(g_pipe, &n, sizeof n) == 0) write_all(g_pipe, p, n);
}

static void child_note(const char *file, const char *what)
{
    char buf[8400];
    int n = snprintf(buf, sizeof buf, "%s: %s", file ? file : "?", what);
    send_rec('P', buf, (uint64_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
}

typedef struct {
    int32_t status;
    char msg[1024];
    int64_t nshards;
    ddp_shard_stats stats; /* class_counts pointer not meaningful across processes */
    int64_t nclasses;
} scan_result;

static void child_scan(const char *dir, int want_stats)
{
    ddp_shard_meta *m = NULL;
    int64_t n = 0;
    ddp_shard_stats st = {0};
    g_scan_note = child_note;
    ddp_shard_progress = scan_progress;
    scan_result r = {0};
    r.status = (int32_t)scan_inprocess(dir, &m, &n, want_stats ? &st : NULL);
    snprintf(r.msg, sizeof r.msg, "%s", ddp_last_error());
    r.nshards = r.status == DDP_OK ? n : 0;
    r.stats = st;
    r.nclasses = st.class_counts ? st.classes_cap : 0;
    size_t bytes = sizeof r + (size_t)r.nshards * sizeof *m + (size_t)r.nclasses * sizeof(int64_t);
    char *buf = malloc(bytes);
    if (buf) {
        memcpy(buf, &r, sizeof r);
        if (r.nshards) memcpy(buf + sizeof r, m, (size_t)r.nshards * sizeof *m);
        if (r.nclasses) memcpy(buf + sizeof r + (size_t)r.nshards * sizeof *m, st.class_counts, (size_t)r.nclasses * sizeof(int64_t));
        send_rec('R', buf, bytes);
    }
    _exit(0); /* no atexit handlers: HDF5's could hang on a corrupt file, MPI's belong to the parent */
}

ddp_status ddp_dataset_scan(const char *dir, ddp_shard_meta **metas, int64_t *nshards, ddp_shard_stats *stats)
{
    if (ddp_env_int("VALIDATE_FORK", 1) == 0) {
        ddp_status st = scan_inprocess(dir, metas, nshards, stats);
        if (st == DDP_OK) ddp_io_counters_get()->validated += *nshards;
        return st;
    }
    int fds[2];
    if (pipe(fds) != 0) return ddp_set_error(DDP_ERR_IO, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return ddp_set_error(DDP_ERR_IO, "fork for validation: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        g_pipe = fds[1];
        if (ddp_env_int("VALIDATE_STDERR", 0) == 0) { /* whatever HDF5 prints while failing is not the message */
            int dn = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (dn >= 0) dup2(dn, 2);
        }
        child_scan(dir, stats != NULL);
    }
    close(fds[1]);
    int64_t secs = ddp_env_int("VALIDATE_TIMEOUT", 120);
    char last[8400] = "";
    char *res = NULL;
    uint64_t reslen = 0;
    int timed_out = 0;
    for (;;) { /* read records; each one restarts the per-object clock */
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&p, 1, secs > 0 ? (int)(secs * 1000) : -1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        char type;
        uint64_t n;
        if (read(fds[0], &type, 1) != 1) break;
        FILE *f = fdopen(dup(fds[0]), "r"); /* blocking reads of the record body */
        if (!f) break;
        setvbuf(f, NULL, _IONBF, 0);
        int ok = fread(&n, sizeof n, 1, f) == 1 && n < ((uint64_t)1 << 40);
        char *body = ok ? malloc(n + 1) : NULL;
        ok = body && fread(body, 1, n, f) == n;
        fclose(f);
        if (!ok) {
            free(body);
            break;
        }
        body[n] = 0;
        if (type == 'P') {
            snprintf(last, sizeof last, "%s", body);
            free(body);
        } else {
            free(res);
            res = body;
            reslen = n;
        }
    }
    close(fds[0]);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    ddp_status st = DDP_OK;
    if (timed_out)
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: HDF5 did not finish reading it in %lld s (corrupt file?)", last[0] ? last : dir, (long long)secs);
    else if (!res || reslen < sizeof(scan_result))
        st = ddp_set_error(DDP_ERR_FORMAT, "%s: HDF5 crashed reading it (%s %d; corrupt file?)", last[0] ? last : dir,
                           WIFSIGNALED(wst) ? "signal" : "exit", WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
    if (st != DDP_OK) {
        free(res);
        return st;
    }
    scan_result r;
    memcpy(&r, res, sizeof r);
    size_t need = sizeof r + (size_t)r.nshards * sizeof(ddp_shard_meta) + (size_t)r.nclasses * sizeof(int64_t);
    if (r.status != DDP_OK) {
        free(res);
        return ddp_set_error((ddp_status)r.status, "%s", r.msg);
    }
    if (reslen != need || r.nshards < 1) {
        free(res);
        return ddp_set_error(DDP_ERR_INTERNAL, "%s: validation result truncated", dir);
    }
    ddp_shard_meta *m = ddp_calloc((size_t)r.nshards, sizeof *m);
    if (!m) {
        free(res);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    }
    memcpy(m, res + sizeof r, (size_t)r.nshards * sizeof *m);
    if (stats) {
        int64_t *cc = ddp_calloc((size_t)(r.nclasses ? r.nclasses : 1), sizeof *cc);
        *stats = r.stats;
        stats->class_counts = cc;
        stats->classes_cap = cc ? r.nclasses : 0;
        if (cc && r.nclasses) memcpy(cc, res + sizeof r + (size_t)r.nshards * sizeof *m, (size_t)r.nclasses * sizeof *cc);
    }
    free(res);
    *metas = m;
    *nshards = r.nshards;
    ddp_io_counters_get()->validated += r.nshards;
    return DDP_OK;
}

ddp_status ddp_dataset_open(ddp_ctx *ctx, const char *dir, ddp_dataset **out)
{
    *out = NULL;
    ddp_shard_meta *metas = NULL;
    int64_t n = 0;
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_dataset_scan(dir, &metas, &n, NULL);
    DDP_CHECK(ddp_agree_status(ctx, st)); /* every rank fails with rank 0's message */
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, ctx->world));
    if (ctx->topo.rank != 0) DDP_ALLOC(metas, n);
    /* metadata in slices of < 2 GiB */
    int64_t bytes = n * (int64_t)sizeof *metas, chunk = (int64_t)1 << 30;
    for (int64_t lo = 0; lo < bytes; lo += chunk) {
        int64_t len = bytes - lo < chunk ? bytes - lo : chunk;
        MPI_CHECK(MPI_Bcast((char *)metas + lo, (int)len, MPI_BYTE, 0, ctx->world));
    }
    ddp_dataset *ds = ddp_calloc(1, sizeof *ds);
    ddp_shard *sh = ddp_calloc((size_t)n, sizeof *sh);
    if (!ds || !sh) {
        free(ds);
        free(sh);
        free(metas);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    }
    snprintf(ds->dir, sizeof ds->dir, "%s", dir);
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
    free(metas);
    st = ddp_shard_cache_attach(ds, ctx->topo.size); /* the open-shard budget (io/shard_cache.c) */
    if (st != DDP_OK) {
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
    free(ds);
}

const ddp_dataset_info *ddp_dataset_get_info(const ddp_dataset *ds) { return &ds->info; }

ddp_status ddp_dataset_locate(ddp_dataset *ds, int64_t index, ddp_shard **shard, int64_t *local)
{
    if (index < 0 || index >= ds->info.num_samples)
        return ddp_set_error(DDP_ERR_ARG, "%s: sample index %lld out of range [0, %lld)", ds->dir, (long long)index,
                             (long long)ds->info.num_samples);
    ddp_shard *s;
    DDP_CHECK(ddp_shard_cache_pin_current(ds, ddp_dataset_shard_of(ds, index), &s));
    *shard = s;
    *local = index - s->meta.first;
    return DDP_OK;
}

int64_t ddp_dataset_shard_of(const ddp_dataset *ds, int64_t index)
{
    int64_t lo = 0, hi = ds->nshards - 1;
    while (lo < hi) { /* last shard with first <= index */
        int64_t mid = (lo + hi + 1) / 2;
        if (ds->shards[mid].meta.first <= index) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

ddp_status ddp_dataset_sample(ddp_dataset *ds, int64_t index, float *scratch, const float **rows, int64_t *nrows,
                              int64_t *label, int64_t *sample_id)
{
    ddp_shard *s;
    int64_t i;
    DDP_CHECK(ddp_dataset_locate(ds, index, &s, &i));
    return ddp_shard_sample(s, i, scratch, rows, nrows, label, sample_id);
}

/* The three below run on the loader's worker, on the shard while the cache (io/shard_cache.c) keeps it open. The
 * addresses ddp_dataset_range returns may outlive the map (the LRU may close the shard): a madvise on them then
 * fails harmlessly (ENOMEM, or EFAULT for MADV_POPULATE_READ), it never faults. */
typedef struct {
    int64_t n;      /* samples from the one given */
    void **addr;
    size_t *len;
    int ok;
} ahead_arg;

static void range_fn(ddp_shard *s, int64_t i, void *arg)
{
    ahead_arg *a = arg;
    a->ok = ddp_shard_range(s, i, i + a->n, a->addr, a->len);
}

static void prefetch_range_fn(ddp_shard *s, int64_t i, void *arg) { ddp_shard_prefetch_range(s, i, i + ((ahead_arg *)arg)->n); }

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
        st = ddp_set_error(DDP_ERR_ARG, "%s: the longest sample has %lld rows, more than %s %lld", ds->dir, (long long)longest,
                           option, (long long)limit);
        for (int64_t k = 0; k < ds->nshards; k++) {
            if (ds->shards[k].meta.max_rows != longest) continue;
            ddp_shard *s;
            int64_t local;
            if (ddp_dataset_locate(ds, ds->shards[k].meta.first, &s, &local) != DDP_OK) break;
            for (int64_t i = 0; i < s->meta.n; i++) {
                int64_t n = s->offsets[i + 1] - s->offsets[i];
                if (n == longest) {
                    st = ddp_set_error(DDP_ERR_ARG, "%s/%s: /offsets[%lld]: sample (id %lld) has %lld rows, more than %s %lld",
                                       ds->dir, s->meta.name, (long long)i,
                                       (long long)(s->ids ? s->ids[i] : s->meta.first + i), (long long)n, option,
                                       (long long)limit);
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
    int32_t *lens = ddp_calloc((size_t)n, sizeof *lens);
    int *cnt = ddp_calloc((size_t)W, sizeof *cnt), *dsp = ddp_calloc((size_t)W, sizeof *dsp);
    ddp_status st = lens && cnt && dsp ? DDP_OK : ddp_set_error(DDP_ERR_NOMEM, "out of memory for %lld row counts", (long long)n);
    if (st == DDP_OK && n > INT32_MAX) st = ddp_set_error(DDP_ERR_ARG, "%s: more than 2^31 samples", ds->dir);
    /* rank r contributes shards r, r + W, ...: pack their counts contiguously, then put them in place */
    int32_t *mine = NULL;
    int64_t nmine = 0;
    for (int64_t k = me; st == DDP_OK && k < ds->nshards; k += W) nmine += ds->shards[k].meta.n;
    if (st == DDP_OK && !(mine = ddp_calloc((size_t)(nmine ? nmine : 1), sizeof *mine))) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    int64_t at = 0;
    for (int64_t k = me; st == DDP_OK && k < ds->nshards; k += W) {
        ddp_shard *s;
        int64_t local;
        st = ddp_dataset_locate(ds, ds->shards[k].meta.first, &s, &local);
        for (int64_t i = 0; st == DDP_OK && i < s->meta.n; i++) mine[at++] = (int32_t)(s->offsets[i + 1] - s->offsets[i]);
    }
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK) {
        for (int r = 0; r < W; r++)
            for (int64_t k = r; k < ds->nshards; k += W) cnt[r] += (int)ds->shards[k].meta.n;
        for (int r = 1; r < W; r++) dsp[r] = dsp[r - 1] + cnt[r - 1];
        int32_t *all = ddp_calloc((size_t)n, sizeof *all);
        int rc = all ? MPI_Allgatherv(mine, (int)nmine, MPI_INT32_T, all, cnt, dsp, MPI_INT32_T, ctx->world) : MPI_SUCCESS;
        if (!all) st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
        else if (rc != MPI_SUCCESS) st = ddp_mpi_error(rc, "MPI_Allgatherv(row counts)", __FILE__, __LINE__);
        for (int r = 0; st == DDP_OK && r < W; r++) { /* rank r's block holds shards r, r + W, ... in order */
            int64_t p = dsp[r];
            for (int64_t k = r; k < ds->nshards; k += W) {
                memcpy(lens + ds->shards[k].meta.first, all + p, (size_t)ds->shards[k].meta.n * sizeof *lens);
                p += ds->shards[k].meta.n;
            }
        }
        free(all);
    }
    free(mine), free(cnt), free(dsp);
    if (st != DDP_OK) {
        free(lens);
        return st;
    }
    *out = lens;
    return DDP_OK;
}
