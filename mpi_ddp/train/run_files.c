/* run_files.c — the run directory's files when a run starts, written only once every check of a resume has passed:
 * stale save temporaries, decisions.log kept up to the resumed step, run.json and the metric files kept up to that
 * step (docs/run-directory.md). */
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/train/rundir.h"
#include "mpi_ddp/train/runinfo.h"
#include "mpi_ddp/train/train_state.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const COLS[] = {"train/loss",
                                   "train/samples_per_s",
                                   "lr",
                                   "val/loss",
                                   "val/acc",
                                   "val/macro_f1",
                                   "train/rows_per_rank_max_over_mean"};

ddp_status ddp_train_start_files(ddp_train_state *ts, int resuming, const ddp_dataset_info *train,
                                 const ddp_dataset_info *val, ddp_csv **csv, ddp_csv **csv_rank)
{
    ddp_ctx *ctx = ts->ctx;
    const ddp_train_config *c = ts->cfg;
    char path[4400], from[4400] = ""; /* run.json's resumed_from (rank 0): a retry of this start is known by it */
    if (resuming && ctx->topo.rank == 0) {
        if (!strcmp(c->resume, "auto"))
            snprintf(path, sizeof path, "%s/last.h5", ts->ckpt_dir);
        else
            snprintf(path, sizeof path, "%s", c->resume);
        if (!realpath(path, from)) snprintf(from, sizeof from, "%s", path);
    }
    ddp_status st = DDP_OK;
    if (ctx->topo.rank == 0) st = ddp_mkdir_p(ts->ckpt_dir);
    /* a checkpoint at its epoch's end, before validation (a top-k file, a stop during validation): the resumed run
     * validates and decides at its step again, so the rows and lines of that validation are not kept */
    int again = resuming && ts->resume_pos >= 0 && ts->resume_pos == train->num_samples;
    if (ctx->topo.rank == 0 && st == DDP_OK) ddp_rundir_remove_stale_tmp(c->out_dir);
    if (ctx->topo.rank == 0 && st == DDP_OK && resuming) /* a fresh run's --overwrite removed an earlier board */
        ddp_rundir_remove_stale_board(c->out_dir, c->collective_timeout > 0 ? ctx->topo.size : 0);
    if (ctx->topo.rank == 0 && st == DDP_OK && c->resume) /* --resume auto without last.h5: a restart, none kept */
        st = ddp_train_state_trim_decisions(ts->ckpt_dir, resuming ? ts->global_step - again : -1);
    DDP_CHECK(ddp_agree_status(ctx, st));
    /* run.json first: a requeued job's restart knows its directory by the job id it records (rundir.c), so no other
     * file of a run may exist without it */
    char note[160];
    snprintf(note, sizeof note, "%s", ts->be->name);
    snprintf(path, sizeof path, "%s/run.json", c->out_dir);
    DDP_CHECK(ddp_write_run_json(ctx, path, c, c->config_json, train, val, note, ts->model->attention, from));
    int64_t keep = resuming ? ts->global_step : -1; /* with again: validation rows at that step are dropped */
    if (ctx->topo.rank == 0) {
        snprintf(path, sizeof path, "%s/metrics.csv", c->out_dir);
        st = ddp_csv_open(path, -1, COLS, 7, keep, again, csv);
    }
    /* the per-rank files this run does not write (a resume on fewer ranks, or without --log-per-rank) keep the rows up
     * to the resumed step too, as the others (rank 0: each one in turn while they exist) */
    for (int r = c->log_per_rank ? ctx->topo.size : 0; resuming && ctx->topo.rank == 0 && st == DDP_OK; r++) {
        ddp_csv *other = NULL;
        snprintf(path, sizeof path, "%s/metrics_rank%d.csv", c->out_dir, r);
        if (access(path, F_OK) != 0) break;
        st = ddp_csv_open(path, r, COLS, 7, keep, again, &other);
        ddp_csv_close(other);
    }
    DDP_CHECK(ddp_agree_status(ctx, st));
    if (c->log_per_rank) {
        snprintf(path, sizeof path, "%s/metrics_rank%d.csv", c->out_dir, ctx->topo.rank);
        st = ddp_csv_open(path, ctx->topo.rank, COLS, 7, keep, again, csv_rank);
        DDP_CHECK(ddp_agree_status(ctx, st));
    }
    return DDP_OK;
}
