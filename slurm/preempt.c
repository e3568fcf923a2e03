/* preempt.c — requeue after a stop request; see preempt.h. The signal thread itself only records the request
 * (ddp_request_stop_kind); the ranks agree on it, and on its kinds, in the step's allreduce and save before this
 * runs. */
#include "slurm/preempt.h"

#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/status.h"
#include "slurm/env.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

static ddp_requeue run_scontrol(const char *job, char *msg)
{
    char *argv[] = {"scontrol", "requeue", (char *)job, NULL};
    pid_t pid;
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
    int rc = posix_spawnp(&pid, "scontrol", NULL, have_attr ? &attr : NULL, argv, environ);
    if (have_attr) posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        snprintf(msg, 256,
                 "job %s NOT requeued: scontrol cannot be run (%s); resubmit the job, it resumes from last.h5", job,
                 strerror(rc));
        return rc == ENOENT ? DDP_REQUEUE_NO_SCONTROL : DDP_REQUEUE_FAILED;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(msg, 256,
                 "job %s NOT requeued: `scontrol requeue %s` failed (status %d); resubmit it, it resumes from last.h5",
                 job, job, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return DDP_REQUEUE_FAILED;
    }
    snprintf(msg, 256, "job %s requeued; it resumes from last.h5", job);
    return DDP_REQUEUE_DONE;
}

ddp_status ddp_slurm_requeue(ddp_ctx *ctx, int kinds, ddp_requeue *out, char *msg)
{
    int code = DDP_REQUEUE_NOT_SLURM;
    char text[256] = "not a SLURM job: continue with --resume auto";
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
        } else if (!f->batch) {
            code = DDP_REQUEUE_NOT_BATCH;
            snprintf(text, sizeof text,
                     "job %s is not a batch job (srun or salloc), so it is not requeued: run the same command with "
                     "--resume auto to continue",
                     job);
        } else if (ddp_knob_int(DDP_KNOB_REQUEUE) == 0) {
            code = DDP_REQUEUE_DISABLED;
            snprintf(text, sizeof text, "job %s not requeued (MPIDDP_REQUEUE=0)", job);
        } else {
            code = run_scontrol(job, text);
        }
    }
    MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, 0, ctx->world));
    MPI_CHECK(MPI_Bcast(text, (int)sizeof text, MPI_CHAR, 0, ctx->world));
    *out = (ddp_requeue)code;
    snprintf(msg, 256, "%s", text);
    return DDP_OK;
}
