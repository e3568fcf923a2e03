/* rundir.c — a run directory belongs to one run: the lock rank 0 holds while the run lives, the refusal to
 * start a new run over another run's files, and --overwrite's removal of exactly the files a run writes
 * (docs/run-directory.md, "One run per directory"). */
#include "mpi_ddp/train/rundir.h"

#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/lockfile.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/status.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME "run.lock"
#define LOCK_WAIT_S 5.0 /* a run killed a moment ago may still be ending (ranks outlive a killed mpirun ~1 s) */

/* The files a run writes (docs/run-directory.md), matched by their exact forms, never by a glob that a user's file
 * could also match: the first group marks a run. */
static const char *const RUN_MARKS[] = {"run.json", "metrics.csv", "checkpoints/last.h5", "checkpoints/decisions.log"};

/* The end of a run of decimal digits starting at s; NULL when there is none. */
static const char *digits(const char *s)
{
    if (*s < '0' || *s > '9') return NULL;
    while (*s >= '0' && *s <= '9') s++;
    return s;
}

/* 1 when [s, e) is a number as "%.6g" writes it: -?(nan|inf|D+(.D+)?(e[+-]D+)?). */
static int g_number(const char *s, const char *e)
{
    if (s < e && *s == '-') s++;
    if (e - s == 3 && (!strncmp(s, "nan", 3) || !strncmp(s, "inf", 3))) return 1;
    const char *p = digits(s);
    if (!p || p > e) return 0;
    if (p < e && *p == '.' && (!(p = digits(p + 1)) || p > e)) return 0;
    if (p < e && *p == 'e') {
        if (p + 1 >= e || (p[1] != '+' && p[1] != '-') || !(p = digits(p + 2)) || p > e) return 0;
    }
    return p == e;
}

/* The length of name without a ".tmp.PID" ending (a save's temporary); -1 without one. */
static long tmp_pid_base(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    for (const char *n; t && (n = strstr(t + 1, ".tmp.")); t = n) {}
    const char *p = t ? digits(t + 5) : NULL;
    return p && !*p ? (long)(t - name) : -1;
}

/* 1 when the first len characters of name are a top-k file's name as ddp_topk_name writes it:
 * epoch=<int>-step=<int>-<monitor>=<%.6g number>.h5 (the monitor with '/' as '_'). */
static int topk_name(const char *name, size_t len)
{
    const char *e = name + len, *p, *eq = NULL;
    if (len < 3 || strncmp(e - 3, ".h5", 3)) return 0;
    e -= 3;
    if (strncmp(name, "epoch=", 6) || !(p = digits(name + 6)) || strncmp(p, "-step=", 6) || !(p = digits(p + 6)) ||
        *p != '-')
        return 0;
    for (const char *q = ++p; q < e; q++)
        if (*q == '=') eq = q;
    return eq && eq > p && g_number(eq + 1, e);
}

/* 1 when name is a save's temporary in checkpoints/: last.h5.tmp.PID, or a top-k file's NAME.h5.tmp.PID. */
static int save_tmp(const char *name)
{
    long b = tmp_pid_base(name);
    return b >= 0 && ((b == 7 && !strncmp(name, "last.h5", 7)) || topk_name(name, (size_t)b));
}

/* 1 when sub/name ("" for the run directory itself) is a file a run writes. */
static int run_file(const char *sub, const char *name, const void *arg)
{
    (void)arg;
    if (!*sub) {
        static const char *const top[] = {"run.json", "run.json.tmp", "metrics.csv", "metrics.csv.tmp"};
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(name, top[i])) return 1;
        const char *p = strncmp(name, "metrics_rank", 12) ? NULL : digits(name + 12);
        return p && (!strcmp(p, ".csv") || !strcmp(p, ".csv.tmp"));
    }
    if (!strcmp(sub, "checkpoints"))
        return !strcmp(name, "last.h5") || !strcmp(name, "decisions.log") || !strcmp(name, "decisions.log.tmp") ||
               topk_name(name, strlen(name)) || save_tmp(name);
    if (!strcmp(sub, "progress")) {
        const char *p = strncmp(name, "rank", 4) ? NULL : digits(name + 4);
        return p && !*p;
    }
    return 0;
}

static int save_tmp_in(const char *sub, const char *name, const void *arg)
{
    (void)arg;
    return !strcmp(sub, "checkpoints") && save_tmp(name);
}

/* progress/rank<R> with R >= *(const int *)from */
static int board_from(const char *sub, const char *name, const void *from)
{
    return run_file(sub, name, NULL) && !strcmp(sub, "progress") && strtol(name + 4, NULL, 10) >= *(const int *)from;
}

/* on_gone of the run lock's wait: the run whose lock this one waited for was refused and removed the directory it
 * made (ddp_rundir_discard): made again */
typedef struct {
    ddp_rundir *rd;
    const char *dir;
    ddp_status st;
} remake;

static ddp_status remake_dir(void *arg)
{
    remake *m = arg;
    return m->st = ddp_mkdir_p_made(m->dir, m->rd->created, sizeof m->rd->created);
}

static int exists(const char *dir, const char *rel)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat s;
    return lstat(p, &s) == 0;
}

/* "--resume VALUE" or "cfg.resume = "VALUE"" (optname.h); value NULL: any checkpoint file ("--resume FILE",
 * "cfg.resume = its path"). */
static const char *resume_is(int cli, const char *value, char *buf, size_t len)
{
    if (!value && !cli) return snprintf(buf, len, "cfg.resume = its path"), buf;
    return ddp_opt_set(buf, len, cli, DDP_OPT_RESUME, value ? value : "FILE");
}

/* Removes the regular files of dir/sub that match(sub, name) accepts; counts them. */
static ddp_status remove_matching(const char *dir, const char *sub,
                                  int (*match)(const char *, const char *, const void *), const void *arg, int *count,
                                  int cli)
{
    char p[8400];
    snprintf(p, sizeof p, "%s%s%s", dir, sub[0] ? "/" : "", sub);
    /* the progress board only where it is the run's own directory (checkpoints/ may be a link to scratch space) */
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (!strcmp(sub, "progress") ? O_NOFOLLOW : 0));
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return DDP_OK;
    }
    ddp_status st = DDP_OK;
    struct dirent *e;
    while (st == DDP_OK && (e = readdir(d))) {
        if (!match(sub, e->d_name, arg)) continue;
        char f[8800];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        struct stat s;
        if (lstat(f, &s) != 0 || !S_ISREG(s.st_mode)) continue; /* a run writes regular files only */
        if (unlink(f) != 0)
            st = ddp_set_error(DDP_ERR_IO, "%s: cannot remove (%s): %s", f, ddp_opt_name(cli, DDP_OPT_OVERWRITE),
                               strerror(errno));
        else
            (*count)++;
    }
    closedir(d);
    return st;
}

/* Rank 0's part: directory, lock, the check of what it holds. */
int ddp_rundir_own_checkpoint(const char *dir, const char *ckpt)
{
    char c[4400], d[4400], a[PATH_MAX], b[PATH_MAX];
    snprintf(c, sizeof c, "%s", ckpt);
    char *slash = strrchr(c, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(c, sizeof c, ".");
    snprintf(d, sizeof d, "%s/checkpoints", dir);
    return realpath(c, a) && realpath(d, b) && !strcmp(a, b);
}

/* dir/run.json parsed (NULL when absent or unreadable); the caller deletes it. */
static cJSON *read_run_json(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/run.json", dir);
    FILE *f = fopen(p, "re");
    if (!f) return NULL;
    char *text = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1L << 24) && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)))
        text[fread(text, 1, (size_t)n, f)] = 0;
    fclose(f);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    return root;
}

/* 1 when dir holds an attempt of the same start that never saved: no checkpoints/last.h5, and its run.json says it
 * started from ckpt (resumed_from, compared as real paths). A job that died (or was requeued) before its first save
 * starts from ckpt again, as the first attempt did. */
static int retry_of(const char *dir, const char *ckpt)
{
    if (exists(dir, "checkpoints/last.h5")) return 0;
    char want[PATH_MAX];
    if (!realpath(ckpt, want)) return 0;
    cJSON *root = read_run_json(dir);
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(root, "resumed_from");
    int same = cJSON_IsString(from) && !strcmp(from->valuestring, want);
    cJSON_Delete(root);
    return same;
}

int ddp_rundir_of_job(const char *dir, const ddp_topology *t)
{
    if (!t->job_id[0]) return 0;
    cJSON *root = read_run_json(dir);
    const cJSON *job = cJSON_GetObjectItemCaseSensitive(root, "job_id");
    int same = cJSON_IsString(job) && !strcmp(job->valuestring, t->job_id);
    cJSON_Delete(root);
    return same;
}

/* 1 when this is a requeued SLURM job (restart count > 0) whose earlier attempt wrote dir's run: run.json records
 * this job's id. Such an attempt that never saved last.h5 starts again as the first attempt did. */
static int restart_of(const char *dir, const ddp_topology *t)
{
    return t->restart_count > 0 && ddp_rundir_of_job(dir, t);
}

/* The newest top-k file of dir/checkpoints ("checkpoints/NAME" into rel; "" when none): what a refused
 * --resume auto names to resume from. By the step in its name (a copy, cp -r or rsync, resets modification times),
 * the later modified of equal steps. */
static void newest_topk(const char *dir, char *rel, size_t len)
{
    char p[4400], f[8800];
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    rel[0] = 0;
    DIR *d = opendir(p);
    if (!d) return;
    struct dirent *e;
    struct timespec best = {0, 0};
    long long best_step = -1;
    while ((e = readdir(d))) {
        if (!topk_name(e->d_name, strlen(e->d_name))) continue;
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        struct stat s;
        if (lstat(f, &s) != 0 || !S_ISREG(s.st_mode)) continue;
        long long step = strtoll(strstr(e->d_name, "-step=") + 6, NULL, 10); /* topk_name: digits there */
        if (rel[0] && (step < best_step ||
                       (step == best_step && (s.st_mtim.tv_sec < best.tv_sec ||
                                              (s.st_mtim.tv_sec == best.tv_sec && s.st_mtim.tv_nsec <= best.tv_nsec)))))
            continue;
        best = s.st_mtim, best_step = step;
        snprintf(rel, len, "checkpoints/%s", e->d_name);
    }
    closedir(d);
}

static ddp_status acquire_local(ddp_rundir *rd, const char *dir, const char *resume, int overwrite,
                                const ddp_topology *t, int cli)
{
    char r1[4200], r2[64], ov[32];
    const char *out = ddp_opt_name(cli, DDP_OPT_OUT);
    ddp_opt_set(ov, sizeof ov, cli, DDP_OPT_OVERWRITE, NULL); /* "--overwrite" | "cfg.overwrite = 1" */
    DDP_CHECK(ddp_mkdir_p_made(dir, rd->created, sizeof rd->created));
    char path[4400], holder[600] = "";
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_NAME);
    ddp_lockfile_spec s = {.path = path,
                           .noun = "run lock",
                           .needs = "the run directory",
                           .unnamed = "a process that has not written its name yet",
                           .reader = -1,
                           .dir_may_go = 1};
    remake m = {rd, dir, DDP_OK};
    int got = ddp_lockfile_take(&s, LOCK_WAIT_S, 100, remake_dir, &m, &rd->lock_fd, holder, sizeof holder);
    if (got == DDP_LOCKFILE_GONE)
        return ddp_set_error(DDP_ERR_IO, "%s: cannot create the run lock: the directory keeps disappearing", path);
    if (got == DDP_LOCKFILE_ERROR) return m.st != DDP_OK ? m.st : DDP_ERR_IO;
    if (got == DDP_LOCKFILE_REPLACED) snprintf(holder, sizeof holder, "a run that just ended");
    if (got != DDP_LOCKFILE_TAKEN)
        return ddp_set_error(
            DDP_ERR_BUSY,
            "%s: the run directory is in use by another run (%s); wait for it to end, or choose another %s", dir,
            holder, out);
    snprintf(rd->lock_path, sizeof rd->lock_path, "%s", path);
    /* looked at under the lock: a run that held it meanwhile may have made them, and they are then that run's */
    rd->had_progress = exists(dir, "progress");
    rd->had_checkpoints = exists(dir, "checkpoints");
    const char *mark = NULL;
    for (size_t i = 0; i < sizeof RUN_MARKS / sizeof RUN_MARKS[0] && !mark; i++)
        if (exists(dir, RUN_MARKS[i])) mark = RUN_MARKS[i];
    if (resume && strcmp(resume, "auto") && mark && !ddp_rundir_own_checkpoint(dir, resume) &&
        !retry_of(dir, resume)) { /* would mix two runs' files */
        char cont[4200] = "";     /* --resume last (Lightning's ckpt_path="last") meant this run's own last.h5 */
        if (exists(dir, "checkpoints/last.h5"))
            snprintf(cont, sizeof cont, "continue this run with %s (%s/checkpoints/last.h5), ",
                     resume_is(cli, "auto", r2, sizeof r2), dir);
        return ddp_set_error(DDP_ERR_BUSY,
                             "%s holds a run (%s) and %s is not one of its checkpoints: %sresume into a new %s (the "
                             "run continues there), or from a checkpoint in %s/checkpoints",
                             dir, mark, resume_is(cli, resume, r1, sizeof r1), cont, out, dir);
    }
    if (resume && !strcmp(resume, "auto") && mark && !exists(dir, "checkpoints/last.h5") && !restart_of(dir, t)) {
        char topk[600], hint[700] = "";
        newest_topk(dir, topk, sizeof topk);
        if (topk[0]) snprintf(hint, sizeof hint, " (the newest: %s/%s)", dir, topk);
        return ddp_set_error(DDP_ERR_BUSY,
                             "%s holds a run (%s) but no checkpoints/last.h5 to resume from: start over with %s, "
                             "resume from one of its checkpoints with %s%s, or choose a new %s",
                             dir, mark, ov, resume_is(cli, NULL, r1, sizeof r1), hint, out);
    }
    if (resume) return DDP_OK;
    if (mark && !overwrite)
        return ddp_set_error(DDP_ERR_BUSY,
                             "%s holds a run (%s): continue it with %s, start afresh with a new %s, or %s %s to "
                             "remove that run's files first",
                             dir, mark, resume_is(cli, "auto", r2, sizeof r2), out, cli ? "pass" : "set", ov);
    if (mark) {
        int removed = 0;
        static const char *const subs[] = {"", "checkpoints", "progress"};
        for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
            DDP_CHECK(remove_matching(dir, subs[i], run_file, NULL, &removed, cli));
        rd->removed = removed;
    }
    return DDP_OK;
}

void ddp_rundir_remove_stale_tmp(const char *dir)
{
    int n = 0; /* best effort: a temporary that cannot be removed is never read */
    (void)remove_matching(dir, "checkpoints", save_tmp_in, NULL, &n, 0);
}

void ddp_rundir_remove_stale_board(const char *dir, int from)
{
    int n = 0; /* best effort: a stale record is only read by a person */
    (void)remove_matching(dir, "progress", board_from, &from, &n, 0);
    char p[4400];
    snprintf(p, sizeof p, "%s/progress", dir);
    if (from == 0) (void)rmdir(p); /* kept when anything else is in it */
}

ddp_status ddp_rundir_acquire(ddp_ctx *ctx, const char *dir, const char *resume, int overwrite, ddp_rundir *rd)
{
    memset(rd, 0, sizeof *rd);
    rd->lock_fd = -1;
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) {
        snprintf(rd->dir, sizeof rd->dir, "%s", dir);
        st = acquire_local(rd, dir, resume, overwrite, &ctx->topo, ctx->cli_names);
    }
    st = ddp_agree_status(ctx, st);
    if (st != DDP_OK) ddp_rundir_discard(ctx, rd); /* a fresh --out it made is gone again */
    return st;
}

/* rmdir of dir/sub (sub "" : dir itself); 1 when removed. */
static int rmdir_in(const char *dir, const char *sub)
{
    char p[4500];
    snprintf(p, sizeof p, "%s%s%s", dir, sub[0] ? "/" : "", sub);
    return rmdir(p) == 0;
}

void ddp_rundir_discard(ddp_ctx *ctx, ddp_rundir *rd)
{
    /* every rank's board file is closed before rank 0 removes it: on NFS a file removed while a process of that client
     * holds it open becomes a .nfs* file, and progress/ (and dir) stayed */
    char msg[1024];
    int shared = ddp_error_shared(), all = 1;
    snprintf(msg, sizeof msg, "%s", ddp_last_error());
    ddp_watch_close(ctx);
    if (ctx->topo.size > 1 && ddp_all_ok(ctx, 1, &all) != DDP_OK) all = 0; /* a rank gone: its board file stays */
    ddp_set_error_text(msg);                                               /* the run's error, not the cleanup's */
    if (shared) ddp_mark_error_shared();
    if (ctx->topo.rank != 0 || !rd->dir[0]) {
        ddp_rundir_release(rd);
        return;
    }
    /* while the lock is held no other run is in dir: the board's rank<R> files are this run's (watchdog.c) */
    if (!rd->had_progress && rd->lock_fd >= 0 && all) {
        char p[4500];
        for (int r = 0; r < ctx->topo.size; r++) {
            snprintf(p, sizeof p, "%s/progress/rank%d", rd->dir, r);
            (void)unlink(p);
        }
        (void)rmdir_in(rd->dir, "progress"); /* kept if anything else is in it */
    }
    if (!rd->had_checkpoints && rd->lock_fd >= 0) (void)rmdir_in(rd->dir, "checkpoints");
    ddp_rundir_release(rd); /* run.lock goes: from here only rmdir, which removes only what is empty */
    if (!rd->created[0] || !rmdir_in(rd->dir, "")) return; /* not empty: something is not this run's */
    char p[4400]; /* then the parents make_dir made, up to the first one it created */
    snprintf(p, sizeof p, "%s", rd->dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    while (strcmp(p, rd->created) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p || rmdir((*slash = 0, p)) != 0) return;
    }
}

void ddp_rundir_release(ddp_rundir *rd)
{
    ddp_lockfile_release(rd->lock_fd, rd->lock_path); /* a waiter that opened the old file sees the inode changed */
    rd->lock_fd = -1;
}

int ddp_rundir_inside(const char *rel)
{
    if (!rel || !*rel || rel[0] == '/') return 0;
    for (const char *p = rel; *p;) { /* no component may be ".." */
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
        p += n;
        while (*p == '/') p++;
    }
    return 1;
}
