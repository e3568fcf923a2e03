/* lockfile.c — the fcntl lock files of dataset and run directories: open or create, lock, name the holder, wait for
 * a holder that is ending, release; see lockfile.h. */
#include "mpi_ddp/core/lockfile.h"

#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A shared lock of kind k > 0 covers bytes [0, KIND_LEN + k): a file of one line lies inside it, as in a whole-file
 * lock (kind 0's, an older index's), and F_GETLK reports the range, so a refused writer can name the kind. */
#define KIND_LEN ((off_t)1 << 40)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The holder of the lock on fd: a shared lock is a reader's whatever the file holds (a killed writer's line stays
 * under it), with its PID only where the file system reports one (NFS may give 0); else the line the file holds. */
static void holder_of(const ddp_lockfile_spec *s, int fd, char *buf, size_t len)
{
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (s->nreaders > 0 && fcntl(fd, F_GETLK, &q) == 0 && q.l_type == F_RDLCK) {
        off_t k = q.l_len > KIND_LEN && q.l_len - KIND_LEN < s->nreaders ? q.l_len - KIND_LEN : 0;
        if (q.l_pid > 0)
            snprintf(buf, len, "%s, PID %ld", s->readers[k], (long)q.l_pid);
        else
            snprintf(buf, len, "%s", s->readers[k]);
        return;
    }
    ssize_t n = pread(fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
    if (!buf[0]) snprintf(buf, len, "%s", s->unnamed);
}

/* "WHO, host H, PID P, since T" and a newline, written over the file: who holds it, for the line that refuses
 * another run. */
static int write_line(const ddp_lockfile_spec *s, int fd)
{
    char host[256] = "?", line[600], when[64] = "?";
    gethostname(host, sizeof host - 1);
    time_t t = time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int n = snprintf(line, sizeof line, "%s%shost %s, PID %ld, since %s\n", s->who ? s->who : "", s->who ? ", " : "",
                     host, (long)getpid(), when);
    return ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) == n ? 0 : -1;
}

/* fd and the path name the same file: fd's was not removed or replaced since it was opened */
static int same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* An exclusive lock whose file is another user's that this one cannot open for writing (a killed run's, left mode
 * 0644): read-only, a holder's lock is still seen (DDP_LOCKFILE_HELD); held by nobody, the file is removed, which
 * needs only the directory's write permission, and the caller tries again (DDP_LOCKFILE_REPLACED). -1: neither
 * (errno as the read-write open left it). */
static int clear_foreign(const ddp_lockfile_spec *s, char *holder, size_t hlen)
{
    int e = errno, fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), got = -1;
    if (fd < 0) return errno == ENOENT ? DDP_LOCKFILE_GONE : (errno = e, -1);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_GETLK, &q) == 0) {
        if (q.l_type != F_UNLCK) {
            holder_of(s, fd, holder, hlen);
            got = DDP_LOCKFILE_HELD;
        } else if (!same_file(fd, s->path) || unlink(s->path) == 0 || errno == ENOENT) {
            got = DDP_LOCKFILE_REPLACED; /* removed, or replaced or removed by another meanwhile: try again */
        }
    }
    close(fd);
    errno = e;
    return got;
}

int ddp_lockfile_try(const ddp_lockfile_spec *s, int *fd_out, char *holder, size_t hlen)
{
    int shared = s->reader >= 0;
    /* whether this call created the file: a lock that cannot be taken then leaves no file behind (tidy) */
    int fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644), made = fd >= 0;
    if (fd < 0 && errno == EEXIST) {
        fd = open(s->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) return DDP_LOCKFILE_GONE; /* its holder removed it meanwhile */
        if (fd < 0 && errno == EACCES && !shared) {
            int got = clear_foreign(s, holder, hlen);
            if (got >= 0) return got;
        }
    }
    if (fd < 0 && errno == ENOENT && s->dir_may_go) return DDP_LOCKFILE_GONE;
    if (fd < 0 && shared) { /* read-only data: a writer's lock is still seen; no directory: the caller says so */
        fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return DDP_LOCKFILE_NONE;
    }
    if (fd < 0)
        return ddp_set_error(DDP_ERR_IO, "%s: cannot create the %s: %s", s->path, s->noun, strerror(errno)),
               DDP_LOCKFILE_ERROR;
    struct flock fl = {.l_type = shared ? F_RDLCK : F_WRLCK, .l_whence = SEEK_SET};
    if (s->reader > 0) fl.l_len = KIND_LEN + s->reader;
    int locked = s->test_nolock && ddp_knob_int(DDP_KNOB_TEST_NOLOCK) == 1 ? (errno = ENOLCK, -1)
                                                                           : fcntl(fd, F_SETLK, &fl);
    if (locked != 0) {
        int e = errno;
        if (e == EACCES || e == EAGAIN) {
            holder_of(s, fd, holder, hlen);
            close(fd);
            return DDP_LOCKFILE_HELD;
        }
        if (made && s->tidy) unlink(s->path); /* nobody can lock it: the directory stays as it was found */
        close(fd);
        if (shared) return DDP_LOCKFILE_NONE; /* a file system without POSIX locks: a reader reads as before */
        return ddp_set_error(DDP_ERR_IO, "%s: cannot lock (%s): %s needs a file system with POSIX locks", s->path,
                             strerror(e), s->needs),
               DDP_LOCKFILE_ERROR;
    }
    /* the holder before us may have removed the file between our open and our lock: lock the file on disk */
    if (!same_file(fd, s->path)) {
        close(fd);
        return DDP_LOCKFILE_REPLACED;
    }
    if (!shared && write_line(s, fd) != 0) {
        int e = errno;
        close(fd);
        return ddp_set_error(DDP_ERR_IO, "%s: cannot write the %s: %s", s->path, s->noun, strerror(e)),
               DDP_LOCKFILE_ERROR;
    }
    *fd_out = fd;
    return DDP_LOCKFILE_TAKEN;
}

int ddp_lockfile_take(const ddp_lockfile_spec *s, double wait_s, int pause_ms, ddp_status (*on_gone)(void *), void *arg,
                      int *fd, char *holder, size_t hlen)
{
    double t0 = now_s();
    for (;;) {
        int got = ddp_lockfile_try(s, fd, holder, hlen);
        if (got != DDP_LOCKFILE_HELD && got != DDP_LOCKFILE_GONE && got != DDP_LOCKFILE_REPLACED) return got;
        if (now_s() - t0 >= wait_s) return got;
        if (got == DDP_LOCKFILE_GONE && on_gone && on_gone(arg) != DDP_OK) return DDP_LOCKFILE_ERROR;
        /* held: pause_ms; gone or replaced (a holder ending, a stale file removed): 10 ms, so that a file that keeps
         * being replaced does not spin a core for the whole wait */
        int ms = got == DDP_LOCKFILE_HELD ? pause_ms : 10;
        nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L}, NULL);
    }
}

void ddp_lockfile_release(int fd, const char *path)
{
    if (fd < 0) return;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    /* an exclusive lock, or a shared one that no other process shares: removed while still locked (a run that opened
     * the old file sees the inode changed), and only while the path still names it: a directory removed or moved
     * meanwhile may hold another run's lock file there now */
    if (fcntl(fd, F_SETLK, &fl) == 0 && same_file(fd, path)) unlink(path);
    close(fd);
}
