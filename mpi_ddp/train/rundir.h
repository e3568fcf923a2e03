/* rundir.h — one run per run directory: a lock held by rank 0 for the run's life (released by the kernel
 * when the process dies, so a dead job never leaves a lock that blocks the next), and the refusal to write
 * a new run over the files of another. */
#ifndef DDP_RUNDIR_H
#define DDP_RUNDIR_H

#include "mpiddp.h"

typedef struct {
    int lock_fd; /* rank 0: the locked RUNDIR/run.lock; -1 elsewhere */
    char lock_path[4400];
    char dir[4400]; /* rank 0: the run directory as given */
    int removed;    /* files removed by --overwrite */
    /* rank 0: what this run created, so that a run that ends before writing anything leaves nothing behind */
    char created[4400]; /* the topmost directory of dir's path this run's mkdir made ("" when dir existed) */
    int had_progress, had_checkpoints; /* dir/progress and dir/checkpoints existed when this run took the lock */
} ddp_rundir;

/* Collective. Rank 0 creates dir, takes its lock (waiting up to a few seconds for a run that is ending) and,
 * unless resume (NULL, "auto" or a checkpoint file), refuses a directory holding another run's files, or with
 * overwrite removes exactly those files (metrics, run.json, checkpoints, progress board; nothing else). A resume from
 * a file refuses a directory holding a run the file is not a checkpoint of (it lies outside dir/checkpoints), unless
 * that run is an attempt of the same start that never saved (run.json's resumed_from is the file; no last.h5).
 * --resume auto refuses a directory holding a run without checkpoints/last.h5, unless this is a requeued SLURM job
 * (restart count > 0) whose run.json records this job's id (a restart of an attempt that never saved).
 * DDP_ERR_BUSY, agreed, with one line naming the holder (host, PID, start) or the run's file and what to do: in the
 * CLI's options where ctx->cli_names (--out, --resume auto, --overwrite), else in the ddp_train_config fields a C-API
 * program sets (cfg.out_dir, cfg.resume = "auto", cfg.overwrite = 1). */
ddp_status ddp_rundir_acquire(ddp_ctx *ctx, const char *dir, const char *resume, int overwrite, ddp_rundir *rd);
/* 1 when dir's run.json records this job's id (t->job_id: SLURM_JOB_ID, which an array task has of its own; never
 * when empty): the run there, and so its checkpoints/last.h5, is this job's (an earlier attempt's, or this one's).
 * run.json is the first file a run writes, after --overwrite removed the files of the run before. */
int ddp_rundir_of_job(const char *dir, const ddp_topology *t);
/* 1 when the checkpoint file ckpt lies in dir/checkpoints (compared as real paths: any spelling of either). */
int ddp_rundir_own_checkpoint(const char *dir, const char *ckpt);
/* Releases the lock (no-op off rank 0 or when not held). */
void ddp_rundir_release(ddp_rundir *rd);
/* Instead of ddp_rundir_release, for a run that failed (or was refused) before it wrote any file of the run: rank 0
 * removes what the run created and nothing else — while still holding the lock, the progress board's files
 * rank0..rank<size-1> and the progress and checkpoints directories when they did not exist before; then, the lock
 * released, dir and the parents this run's mkdir made, each only while empty (rmdir). A directory that existed before
 * the run stays. Collective: every rank closes its board file (ddp_watch_close) and the ranks agree before rank 0
 * removes any (on NFS an open file removed leaves a .nfs* file); a rank that does not answer leaves the board. Best
 * effort; elsewhere than rank 0 only the release. ddp_last_error() stays the run's. */
void ddp_rundir_discard(ddp_ctx *ctx, ddp_rundir *rd);
/* 1 when rel is a relative path that stays inside the directory it is relative to (no "..", not absolute). */
int ddp_rundir_inside(const char *rel);
/* Rank 0, on resume: removes the temporaries of a save killed before its rename (last.h5's and the top-k files'
 * NAME.h5.tmp.PID in dir/checkpoints; nothing else). */
void ddp_rundir_remove_stale_tmp(const char *dir);
/* Rank 0, on resume: removes the progress board's records of ranks this run does not have (regular files
 * dir/progress/rank<R>, R >= from; not through a linked progress/), and progress/ when that leaves it empty: a record
 * is live state, and a stale one reads as a rank stuck at an old step. */
void ddp_rundir_remove_stale_board(const char *dir, int from);

#endif
