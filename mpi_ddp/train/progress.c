/* progress.c — rank 0's view of a run's pace: the progress line, samples/s without start-up, the time left and the
 * end-of-run summary; see progress.h. */
#include "mpi_ddp/train/progress.h"

#include "mpi_ddp/train/decide.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Whether rank 0's progress line is rewritten in place: when its stderr is a terminal, or when it was started by
 * mpirun on this node (Open MPI hands its ranks a pipe for stderr, whatever mpirun's own stderr is) and mpirun's
 * stderr is a terminal. Anywhere else (a file, a pipe, srun, a remote node) the line is written once per event. */
static int in_place(void)
{
    if (isatty(2)) return 1;
    char p[64], comm[64] = "";
    pid_t pp = getppid();
    snprintf(p, sizeof p, "/proc/%d/comm", (int)pp);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    static const char *launchers[] = {"mpirun", "mpiexec", "orterun", "prterun", "prte", "prted"};
    int launcher = 0;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) launcher |= strcmp(comm, launchers[i]) == 0;
    if (!launcher) return 0;
    snprintf(p, sizeof p, "/proc/%d/fd/2", (int)pp);
    int fd = open(p, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    int t = isatty(fd);
    close(fd);
    return t;
}

void ddp_progress_init(ddp_progress *p, int rank0_with_line)
{
    memset(p, 0, sizeof *p);
    p->tty = rank0_with_line && in_place();
}

void ddp_progress_end_line(ddp_progress *p)
{
    if (!p->line_open) return;
    fputc('\n', stderr);
    p->line_open = 0;
}

int ddp_progress_step(ddp_progress *p, double t_step, double t_end, double samples, double rows, int64_t global_step)
{
    p->samples_all += samples;
    p->rows_all += rows;
    if (p->warm) {
        p->loop_samples += samples;
        p->loop_rows += rows;
        return 0;
    }
    p->warm = 1;
    p->first_dt = t_end - t_step;
    p->first_samples = samples;
    p->warm_t = t_end;
    p->warm_step = global_step;
    return 1;
}

double ddp_progress_eta(const ddp_progress *p, double now, int64_t global_step, int64_t total_steps)
{ /* the run's pace since its first step (validation and checkpoints included); with token budgets an estimate */
    int64_t done = global_step - p->warm_step;
    double per_step = done > 0 ? (now - p->warm_t) / (double)done : p->first_dt;
    int64_t left = total_steps > global_step ? total_steps - global_step : 0;
    return per_step > 0 ? per_step * (double)left : -1;
}

/* The progress line, one format whether it is rewritten in place or written as lines (docs/cli.md):
 *   epoch E (of N) step K/M (global S) loss L R samples/s ETA T
 * E 0-based, K/M the optimizer step within the epoch, S the global optimizer step; eta < 0: not known yet. */
void ddp_progress_line(ddp_progress *p, const ddp_train_state *ts, int epoch, int64_t step, int64_t steps, double loss,
                       double sps, double eta)
{
    if (!ts->cfg->progress || ts->ctx->topo.rank != 0) return;
    int epochs = ts->cfg->fast_dev_run > 0 ? 1
                                           : ts->cfg->epochs; /* epochs are 0-based, as in metrics.csv and file names */
    char left[32];
    if (eta < 0 || !isfinite(eta))
        snprintf(left, sizeof left, "-:--");
    else {
        long long t = (long long)(eta + 0.5);
        if (t >= 3600)
            snprintf(left, sizeof left, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
        else
            snprintf(left, sizeof left, "%lld:%02lld", t / 60, t % 60);
    }
    char line[256];
    snprintf(line, sizeof line, "epoch %d (of %d) step %lld/%lld (global %lld) loss %.4f %.0f samples/s ETA %s", epoch,
             epochs, (long long)step, (long long)steps, (long long)ts->global_step, loss, sps, left);
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
        p->line_open = 1;
    } else {
        fprintf(stderr, "%s\n", line);
    }
}

/* The end of the run for the CLI's summary (ddp_train_summary): where it ended and its throughput, the run's first
 * step left out as in the progress line (the only figure when there was one step). */
void ddp_progress_summarize(const ddp_progress *p, const ddp_train_state *ts, ddp_train_summary *sm, int64_t last_epoch,
                            int64_t last_k, int64_t opt_steps, int epochs, int stopped, int early)
{
    if (!sm) return;
    sm->valid = 1;
    sm->stopped = stopped;
    sm->early_stopped = early;
    sm->epoch = last_epoch;
    sm->epochs = epochs;
    sm->step_in_epoch = last_k;
    sm->steps_in_epoch = opt_steps;
    sm->global_step = ts->global_step;
    sm->samples = p->samples_all;
    sm->rows = p->rows_all;
    double ls = p->loop_s, lsm = p->loop_samples, lr = p->loop_rows;
    if (!(lsm > 0 && ls > 0) && p->first_dt > 0) ls = p->first_dt, lsm = p->first_samples, lr = p->rows_all;
    sm->samples_per_s = ls > 0 ? lsm / ls : 0;
    sm->rows_per_s = ls > 0 ? lr / ls : 0;
    sm->token_budget = ts->cfg->batch_rows > 0;
    /* the best checkpoint: rank 0 keeps the top-k list (paths relative to the run directory) */
    const ddp_decider *d = &ts->dec;
    sm->has_best = 0;
    sm->best_path[0] = 0;
    /* a first finite value always improves (anything beats "none yet"): decisions without one saw no finite value */
    sm->never_finite = isnan(d->best) && d->ntopk == 0 && d->bad_epochs > 0;
    snprintf(sm->monitor, sizeof sm->monitor, "%s", d->monitor);
    int b = -1;
    for (int i = 0; i < d->ntopk; i++)
        if (b < 0 || (d->mode_max ? d->topk[i].value > d->topk[b].value : d->topk[i].value < d->topk[b].value)) b = i;
    if (b >= 0) {
        sm->has_best = 1;
        sm->best_value = d->topk[b].value;
        sm->best_epoch = d->topk[b].epoch;
        sm->best_step = d->topk[b].step;
        snprintf(sm->best_path, sizeof sm->best_path, "%s", d->topk[b].path);
    } else if (!isnan(d->best)) { /* --save-top-k 0: improvements are tracked, no file kept */
        sm->has_best = 1;
        sm->best_value = d->best;
        sm->best_epoch = sm->best_step = -1;
    }
}
