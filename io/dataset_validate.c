/* dataset_validate.c — validates a rank's list of shards for the start-up survey; see dataset_validate.h. */
#include "io/dataset_validate.h"
#include "io/dataset.h"
#include "io/finite.h"

#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- validating a list of shards. HDF5 1.10 can crash, hang or corrupt memory on some malformed files
 * (tests/fuzz/regressions), so by default a child process validates and streams back records through a pipe: 'M'
 * shard k valid (its entry and class pairs), 'R' the end (status, failing shard, message). Where it is (the shard
 * started, the file and object it reads) goes into a page shared with the parent instead, with no system call: the
 * parent polls its count of updates, kills the child when one object takes longer than MPIDDP_VALIDATE_TIMEOUT
 * seconds (default 120), and after a crash or that kill names the file and object it was reading. With
 * MPIDDP_VALIDATE_FORK=0 the same records are handled in process. */
typedef struct {
    int32_t status;
    int64_t fail;
    char msg[1024];
} vresult;

/* The shared page (MAP_SHARED | MAP_ANONYMOUS, before the fork). The parent reads seq while the child works, and
 * started and what only once the child has ended. */
typedef struct {
    _Atomic uint64_t seq; /* bumped after each update */
    int64_t started;      /* the shard being validated, or -1 */
    char what[8400];      /* "file: object" */
} vwhere;

static int g_pipe = -1;
static vwhere *g_where;
static ddp_shard_checks *g_inproc;
static const char *g_scan_file;

/* A record from the validating child. The child runs HDF5 on files that may be corrupt, which is why it is a child:
 * a shard index out of range or a malformed record ends the reading as if the child had crashed. */
static int on_record(ddp_shard_checks *v, char type, const char *body, uint64_t n)
{
    if (type == 'M' && n >= 8 + sizeof(ddp_manifest_entry) && (n - 8 - sizeof(ddp_manifest_entry)) % 16 == 0) {
        int64_t k;
        ddp_manifest_entry e;
        memcpy(&k, body, 8);
        memcpy(&e, body + 8, sizeof e);
        if (k < 0 || k >= v->nshards) return -1;
        int64_t np = (int64_t)(n - 8 - sizeof e) / 16;
        if (v->npairs + np > v->cap) {
            int64_t nc = (v->npairs + np) * 2 + 64;
            int64_t *p = realloc(v->pairs, (size_t)nc * 16);
            if (!p) { /* this shard counts as failed: its record is lost */
                if (v->status == DDP_OK)
                    v->status = ddp_set_error(DDP_ERR_NOMEM, "out of memory for class counts"), v->fail = k;
                snprintf(v->msg, sizeof v->msg, "%s", ddp_last_error());
                return 0;
            }
            v->pairs = p, v->cap = nc;
        }
        if (np) memcpy(v->pairs + 2 * v->npairs, body + 8 + sizeof e, (size_t)np * 16);
        e.cc_first = v->npairs, e.ncc = np;
        e.mtime_ns = v->entries[k].mtime_ns; /* the parent's stat */
        v->entries[k] = e;
        v->npairs += np;
        v->validated++;
    } else if (type == 'R' && n == sizeof(vresult)) {
        vresult r;
        memcpy(&r, body, sizeof r);
        r.msg[sizeof r.msg - 1] = 0;
        if (r.fail != INT64_MAX && r.fail != -1 && (r.fail < 0 || r.fail >= v->nshards)) return -1;
        v->done = 1;
        if (v->status != DDP_OK) return 0; /* a record already failed here (memory) */
        v->status = (ddp_status)r.status;
        v->fail = r.fail;
        snprintf(v->msg, sizeof v->msg, "%s", r.msg);
    } else {
        return -1;
    }
    return 0;
}

static void emit(char type, const void *p, uint64_t n)
{
    if (g_inproc) {
        on_record(g_inproc, type, p, n);
        return;
    }
    if (ddp_write_all(g_pipe, &type, 1) == 0 && ddp_write_all(g_pipe, &n, sizeof n) == 0) ddp_write_all(g_pipe, p, n);
}

/* The child's position, for the parent: shard k starts (what: NULL), or the object it reads next. */
static void where(int64_t k, const char *what)
{
    if (g_inproc) {
        if (!what) g_inproc->started = k;
        return;
    }
    if (what)
        snprintf(g_where->what, sizeof g_where->what, "%s: %s", g_scan_file ? g_scan_file : "?", what);
    else
        g_where->started = k;
    atomic_fetch_add_explicit(&g_where->seq, 1, memory_order_release);
}

static void scan_progress(const char *what) { where(0, what); }

/* Validates shard `name` (and scans its features with DDP_SURVEY_FINITE); the entry and class pairs in rec. */
static ddp_status check_one(const char *dir, const char *name, int flags, int64_t **cc, int64_t *cap, char **recp,
                            size_t *reccap, uint64_t *reclen)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    g_scan_file = path;
    ddp_shard_meta m;
    ddp_shard_stats s;
    memset(&s, 0, sizeof s);
    int want = (flags & DDP_SURVEY_STATS) != 0;
    if (want && !*cc) { /* room for the usual class counts, so that a shard is read once (more: read again below) */
        if (!(*cc = calloc(1024, sizeof **cc)))
            return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for class counts", path);
        *cap = 1024;
    }
    s.class_counts = *cc, s.classes_cap = *cap;
    if (*cc) memset(*cc, 0, (size_t)*cap * sizeof **cc);
    DDP_CHECK(ddp_shard_validate(path, name, &m, want ? &s : NULL));
    if (want && m.classes > *cap) { /* class counts need num_classes: again with room for them */
        int64_t *nc = realloc(*cc, (size_t)m.classes * sizeof *nc);
        if (!nc)
            return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for %lld class counts", path, (long long)m.classes);
        *cc = nc, *cap = m.classes;
        memset(&s, 0, sizeof s);
        memset(nc, 0, (size_t)m.classes * sizeof *nc);
        s.class_counts = nc, s.classes_cap = m.classes;
        DDP_CHECK(ddp_shard_validate(path, name, &m, &s));
    }
    ddp_manifest_entry e;
    memset(&e, 0, sizeof e);
    ddp_manifest_from_meta(&m, &e);
    e.min_rows = s.min_rows, e.sum_rows = s.sum_rows;
    memcpy(e.hist, s.hist, sizeof e.hist);
    e.nonfinite = e.nonfinite_samples = -1;
    if (flags & DDP_SURVEY_FINITE) {
        ddp_shard sh;
        memset(&sh, 0, sizeof sh);
        sh.meta = m;
        sh.fd = -1;
        sh.h5file = sh.h5features = -1;
        ddp_finite_scan r;
        scan_progress("dataset 'features'"); /* a scan that times out names what it was reading */
        DDP_CHECK(ddp_shard_scan_finite(&sh, dir, 1, &r));
        e.nonfinite = r.values, e.nonfinite_samples = r.samples;
    }
    size_t need = 8 + sizeof e + (size_t)(want ? m.classes : 0) * 16;
    if (need > *reccap) {
        char *nr = realloc(*recp, need);
        if (!nr) return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for its class counts", path);
        *recp = nr, *reccap = need;
    }
    char *rec = *recp;
    memcpy(rec + 8, &e, sizeof e);
    int64_t np = 0, *pp = (int64_t *)(rec + 8 + sizeof e);
    for (int64_t c = 0; want && c < m.classes && c < *cap; c++)
        if ((*cc)[c]) pp[2 * np] = c, pp[2 * np + 1] = (*cc)[c], np++;
    *reclen = 8 + sizeof e + (uint64_t)np * 16;
    return DDP_OK;
}

/* The shards todo[0..nt) in order, stopping at the first failure; records through emit. */
static void check_list(const char *dir, char *const *names, const int64_t *todo, int64_t nt, int flags)
{
    ddp_shard_progress = scan_progress;
    int64_t *cc = NULL, cap = 0;
    char *rec = NULL;
    size_t reccap = 0;
    vresult r = {0, INT64_MAX, ""};
    for (int64_t i = 0; i < nt; i++) {
        int64_t k = todo[i];
        where(k, NULL);
        uint64_t len = 0;
        ddp_status st = check_one(dir, names[k], flags, &cc, &cap, &rec, &reccap, &len);
        if (st != DDP_OK) {
            r.status = (int32_t)st, r.fail = k;
            snprintf(r.msg, sizeof r.msg, "%s", ddp_last_error());
            break;
        }
        memcpy(rec, &k, 8);
        emit('M', rec, len);
    }
    free(rec);
    free(cc);
    ddp_shard_progress = NULL;
    emit('R', &r, sizeof r);
}

/* Runs check_list for this rank's todo list into v (fork isolation unless MPIDDP_VALIDATE_FORK=0). A failure that
 * is not a shard's (fork, pipe) leaves v->fail = -1. */
void ddp_validate_shards(ddp_shard_checks *v, const char *dir, char *const *names, const int64_t *todo, int64_t nt,
                         int flags)
{
    v->fail = INT64_MAX, v->started = -1, v->status = DDP_OK;
    if (nt == 0) return;
    if (ddp_knob_int(DDP_KNOB_VALIDATE_FORK) == 0) {
        g_inproc = v;
        check_list(dir, names, todo, nt, flags);
        g_inproc = NULL;
        return;
    }
    int fds[2];
    vwhere *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED) {
        v->status = ddp_set_error(DDP_ERR_IO, "mmap of the validation page: %s", strerror(errno)), v->fail = -1;
        snprintf(v->msg, sizeof v->msg, "%s", ddp_last_error());
        return;
    }
    w->started = -1; /* the page is zero: seq 0, what "" */
    if (pipe(fds) != 0) {
        v->status = ddp_set_error(DDP_ERR_IO, "pipe: %s", strerror(errno)), v->fail = -1;
        snprintf(v->msg, sizeof v->msg, "%s", ddp_last_error());
        munmap(w, sizeof *w);
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        munmap(w, sizeof *w);
        v->status = ddp_set_error(DDP_ERR_IO, "fork for validation: %s", strerror(errno)), v->fail = -1;
        snprintf(v->msg, sizeof v->msg, "%s", ddp_last_error());
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        g_pipe = fds[1];
        g_where = w;
        if (ddp_knob_int(DDP_KNOB_VALIDATE_STDERR) == 0) { /* whatever HDF5 prints while failing is not the message */
            int dn = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (dn >= 0) dup2(dn, 2);
        }
        check_list(dir, names, todo, nt, flags);
        _exit(0); /* no atexit handlers: HDF5's could hang on a corrupt file, MPI's belong to the parent */
    }
    close(fds[1]);
    int64_t secs = ddp_knob_int(DDP_KNOB_VALIDATE_TIMEOUT);
    char last[8400] = "";
    int timed_out = 0;
    char *body = NULL;
    uint64_t cap = 0, seen = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* each record and each update of the shared page restarts the per-object clock, looked at 5 times a second */
    int tick = secs <= 0 ? -1 : secs * 1000 < 200 ? (int)(secs * 1000) : 200;
    while (!v->done) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&p, 1, tick);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) break;
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        uint64_t s = atomic_load_explicit(&w->seq, memory_order_acquire);
        if (pr > 0 || s != seen) {
            seen = s, t0 = t;
        } else if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) >= (double)secs) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        if (pr == 0) continue;
        char type;
        uint64_t n;
        if (ddp_read_all(fds[0], &type, 1) != 0 || ddp_read_all(fds[0], &n, sizeof n) != 0 || n >= ((uint64_t)1 << 40))
            break;
        if (n + 1 > cap) {
            free(body);
            cap = n + 1 > 65536 ? n + 1 : 65536;
            if (!(body = malloc(cap))) break;
        }
        if (ddp_read_all(fds[0], body, n) != 0 || on_record(v, type, body, n) != 0) break;
    }
    free(body);
    close(fds[0]);
    if (!v->done && !timed_out) kill(pid, SIGKILL); /* it stopped talking: it may still be working through its list */
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {}
    /* the child has ended: the page holds its last position */
    if (w->started >= 0 && w->started < v->nshards) v->started = w->started;
    snprintf(last, sizeof last, "%.*s", (int)sizeof w->what - 1, w->what);
    munmap(w, sizeof *w);
    if (v->done) return;
    v->fail = v->started >= 0 ? v->started : todo[0];
    if (timed_out)
        v->status = ddp_set_error(DDP_ERR_FORMAT, "%s: HDF5 did not finish reading it in %lld s (corrupt file?)",
                                  last[0] ? last : dir, (long long)secs);
    else
        v->status = ddp_set_error(DDP_ERR_FORMAT, "%s: HDF5 crashed reading it (%s %d; corrupt file?)",
                                  last[0] ? last : dir, WIFSIGNALED(wst) ? "signal" : "exit",
                                  WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
    snprintf(v->msg, sizeof v->msg, "%s", ddp_last_error());
}
