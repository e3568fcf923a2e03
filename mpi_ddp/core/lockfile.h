/* lockfile.h — a file locked with a POSIX (fcntl) lock while a run lives: the dataset directory's lock (io/writer.c)
 * and the run directory's (mpi_ddp/train/rundir.c). The kernel releases it with the process, so a killed run's file
 * refuses nothing; an exclusive holder's line in the file names it to a run that is refused. */
#ifndef DDP_LOCKFILE_H
#define DDP_LOCKFILE_H

#include "mpiddp.h"

#include <stddef.h>

/* What one attempt (and ddp_lockfile_take) found. */
enum {
    DDP_LOCKFILE_ERROR = -1,   /* set: cannot create or write the file, or no POSIX locks for an exclusive lock */
    DDP_LOCKFILE_HELD = 0,     /* another process holds it: holder filled in */
    DDP_LOCKFILE_TAKEN = 1,    /* *fd holds the lock on the file on disk */
    DDP_LOCKFILE_GONE = 2,     /* the file (or with dir_may_go its directory) vanished before it could be opened */
    DDP_LOCKFILE_REPLACED = 3, /* locked, but the file had been removed meanwhile (its holder ended) */
    DDP_LOCKFILE_NONE = 4,     /* a shared lock with no file to lock or no POSIX locks: read without one */
};

typedef struct {
    const char *path;           /* the lock file */
    const char *noun;           /* in errors "PATH: cannot create the NOUN: E", "cannot write the NOUN": "run lock" */
    const char *needs;          /* "PATH: cannot lock (E): NEEDS needs a file system with POSIX locks" */
    const char *unnamed;        /* the holder of an exclusive lock whose file holds no line (yet) */
    const char *who;            /* exclusive: the holder line starts "WHO, " (NULL: "host H, PID P, since T" alone) */
    int reader;                 /* -1: exclusive; else a shared lock of this kind, an index into readers */
    const char *const *readers; /* the names of the kinds of shared holders ("mpiddp index"), as a refusal says */
    int nreaders;
    int dir_may_go;  /* the directory missing is DDP_LOCKFILE_GONE (the caller makes it again), not an error */
    int tidy;        /* a file this attempt created and cannot lock is removed again */
    int test_nolock; /* MPIDDP_TEST_NOLOCK=1 makes locking fail with ENOLCK */
} ddp_lockfile_spec;

/* One attempt: open (or create) the file, lock it without waiting, check that the file locked is still the one on
 * disk, and for an exclusive lock write the holder line. A shared lock is named by its kind (F_GETLK: the readers'
 * name with the PID where the file system reports one); an exclusive one by the line its file holds. A shared lock
 * whose file cannot be opened for writing is taken on a read-only descriptor (a writer's lock is still seen); an
 * exclusive one whose existing file cannot be opened for writing (another user's, EACCES) removes the file when no
 * process holds it (DDP_LOCKFILE_REPLACED: try again), or names its holder (DDP_LOCKFILE_HELD). */
int ddp_lockfile_try(const ddp_lockfile_spec *s, int *fd, char *holder, size_t hlen);
/* ddp_lockfile_try again until the lock is taken (or DDP_LOCKFILE_NONE, DDP_LOCKFILE_ERROR), for at most wait_s
 * seconds: pause_ms between tries while it is held, 10 ms after GONE (then on_gone, when not NULL, may make the
 * directory again: a status other than DDP_OK ends the wait with DDP_LOCKFILE_ERROR) or REPLACED. Returns the last
 * attempt's result. */
int ddp_lockfile_take(const ddp_lockfile_spec *s, double wait_s, int pause_ms, ddp_status (*on_gone)(void *), void *arg,
                      int *fd, char *holder, size_t hlen);
/* Unlocks fd and closes it (a no-op for fd < 0). The file goes first, still locked, unless another process shares
 * the lock or path no longer names fd's file (its directory removed or moved: another run's file may be there now):
 * a newcomer that opened the old file sees it replaced and tries again; a leftover file never refuses by itself. */
void ddp_lockfile_release(int fd, const char *path);

#endif
