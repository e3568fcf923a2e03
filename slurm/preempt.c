/* preempt.c — requeue after a stop request; see preempt.h. The signal thread itself only records the request
 * (ddp_request_stop_kind); the ranks agree on it, and on its kinds, in the step's allreduce and save before this
 * runs. */
#include "slurm/preempt.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "slurm/env.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Spawns scontrol with argv, the stop signals blocked (see below), stdout to out_fd when >= 0 (else inherited).
 * Returns 0 with its pid, or posix_spawn's error. */
static int spawn_scontrol(char **argv, int out_fd, pid_t *pid)
{
    /* The requeue itself makes SLURM signal every process of the job step, scontrol included, with SIGTERM
     * (SIGKILL only after KillWait): scontrol starts with SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 blocked,
     * so the signal its own request causes cannot kill it before it reports. */
    posix_spawnattr_t attr;
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGUSR1);
    sigaddset(&block, SIGUSR2);
    int have_attr = posix_spawnattr_init(&attr) == 0;
    if (have_attr && (posix_spawnattr_setsigmask(&attr, &block) != 0 ||
                      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK) != 0)) {
        posix_spawnattr_destroy(&attr);
        have_attr = 0;
    }
    posix_spawn_file_actions_t fa;
    int have_fa = out_fd >= 0 && posix_spawn_file_actions_init(&fa) == 0;
    if (have_fa && posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        have_fa = 0;
    }
    if (out_fd >= 0 && !have_fa) {
        if (have_attr) posix_spawnattr_destroy(&attr);
        return ENOMEM;
    }
    int rc = posix_spawnp(pid, "scontrol", have_fa ? &fa : NULL, have_attr ? &attr : NULL, argv, environ);
    if (have_attr) posix_spawnattr_destroy(&attr);
    if (have_fa) posix_spawn_file_actions_destroy(&fa);
    return rc;
}

static int wait_status(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return st;
}

/* Whether Slurm says job `job` is a batch job (`scontrol show job -o`: BatchFlag=1). Asked only where ENVIRONMENT
 * is not BATCH: `srun --export=NONE` inside a batch script hides it from the ranks. 0 when scontrol cannot say. */
static int batch_by_scontrol(const char *job)
{
    int fd[2];
    if (pipe(fd) != 0) return 0;
    fcntl(fd[0], F_SETFD, FD_CLOEXEC); /* scontrol keeps only its stdout */
    fcntl(fd[1], F_SETFD, FD_CLOEXEC);
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)job, NULL};
    pid_t pid;
    int rc = spawn_scontrol(argv, fd[1], &pid);
    close(fd[1]); /* the parent's write end: the reader sees end-of-file when scontrol exits */
    if (rc != 0) {
        close(fd[0]);
        return 0;
    }
    /* the whole output is read (what does not fit the buffer is dropped) before waiting, so scontrol never blocks */
    char buf[16384], chunk[4096];
    size_t n = 0;
    for (;;) { /* BatchFlag comes early: what does not fit buf is drained, not kept */
        ssize_t r = read(fd[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t k = (size_t)r < sizeof buf - 1 - n ? (size_t)r : sizeof buf - 1 - n;
        memcpy(buf + n, chunk, k);
        n += k;
    }
    close(fd[0]);
    buf[n] = 0;
    int st = wait_status(pid);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(buf, " BatchFlag=1") != NULL;
}

/* `scontrol requeue job`; msg says what happened and, from the caller's phrases, what the requeued job starts from
 * (requeued) or what a resubmission of it does (resubmit). */
static ddp_requeue run_scontrol(const char *job, const char *requeued, const char *resubmit, char *msg)
{
    char *argv[] = {"scontrol", "requeue", (char *)job, NULL};
    pid_t pid;
    int rc = spawn_scontrol(argv, -1, &pid);
    if (rc != 0) {
        snprintf(msg, DDP_REQUEUE_MSG, "job %s NOT requeued: scontrol cannot be run (%s); %s", job, strerror(rc),
                 resubmit);
        return rc == ENOENT ? DDP_REQUEUE_NO_SCONTROL : DDP_REQUEUE_FAILED;
    }
    int st = wait_status(pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(msg, DDP_REQUEUE_MSG, "job %s NOT requeued: `scontrol requeue` failed (status %d); %s", job,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, resubmit);
        return DDP_REQUEUE_FAILED;
    }
    snprintf(msg, DDP_REQUEUE_MSG, "job %s requeued; %s", job, requeued);
    return DDP_REQUEUE_DONE;
}

ddp_status ddp_slurm_requeue(ddp_ctx *ctx, int kinds, const char *requeued, const char *resubmit, ddp_requeue *out,
                             char *msg)
{
    int code = DDP_REQUEUE_NOT_SLURM;
    char text[DDP_REQUEUE_MSG] = "not a SLURM job: continue with --resume auto";
    if (ctx->topo.rank == 0) {
        const ddp_jobfacts *f = ctx->facts;
        char job[80];
        if (f->array_job_id[0] && f->array_task_id[0])
            snprintf(job, sizeof job, "%s_%s", f->array_job_id, f->array_task_id);
        else
            snprintf(job, sizeof job, "%s", f->job_id);
        if (!getenv("SLURM_JOB_ID") || !job[0])
            code = DDP_REQUEUE_NOT_SLURM;
        else if (kinds != DDP_STOP_REQUEUE) {
            code = DDP_REQUEUE_NOT_WANTED;
            snprintf(text, sizeof text,
                     "job %s not requeued: SIGTERM or SIGINT (scancel, preemption, Ctrl-C) ends the job (Slurm itself "
                     "requeues a job preempted under PreemptMode=REQUEUE)",
                     job);
        } else if (!f->batch && !batch_by_scontrol(f->job_id)) {
            code = DDP_REQUEUE_NOT_BATCH; /* the caller's resubmit phrase, "resubmit it ...", said of a rerun */
            const char *how = strncmp(resubmit, "resubmit it", 11) ? resubmit : resubmit + 11;
            snprintf(text, sizeof text,
                     "job %s is not a batch job (srun or salloc), so it is not requeued: run it again%s%s", job,
                     how == resubmit ? ": " : "", how);
        } else if (ddp_knob_int(DDP_KNOB_REQUEUE) == 0) {
            code = DDP_REQUEUE_DISABLED;
            snprintf(text, sizeof text, "job %s not requeued (MPIDDP_REQUEUE=0)", job);
        } else if (!requeued) { /* the attempt would be refused: a requeue only holds a queue slot to fail in */
            code = DDP_REQUEUE_DECLINED;
            snprintf(text, sizeof text, "job %s NOT requeued: a requeued attempt would be refused (exit 2); %s", job,
                     resubmit);
        } else {
            code = run_scontrol(job, requeued, resubmit, text);
        }
    }
    MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, 0, ctx->world));
    MPI_CHECK(MPI_Bcast(text, (int)sizeof text, MPI_CHAR, 0, ctx->world));
    *out = (ddp_requeue)code;
    snprintf(msg, DDP_REQUEUE_MSG, "%s", text);
    return DDP_OK;
}
