/* cmd_train.c — `mpiddp train`: options (command line and --config INI), datasets, the reference model
 * on the chosen device, and ddp_train. Prints where the run directory is. */
#include "cli.h"

#include "io/dataset.h"
#include "io/writer.h"
#include "mpi_ddp/backend/cpu/backend_cpu_bf16.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/train/plan.h"
#include "mpi_ddp/train/rundir.h"
#include "mpi_ddp/train/train_state.h"
#include "slurm/preempt.h"
#include "stop_signals.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE = "--train DIR --val DIR --out RUNDIR [options]";
static const char *ABOUT =
    "Trains a model (--model mlp: docs/model.md, or transformer: docs/transformer.md) with data-parallel AdamW across "
    "the MPI ranks, validates after each\n"
    "epoch and writes RUNDIR/{metrics.csv, run.json, checkpoints/last.h5}. Options may also come from an INI\n"
    "file (--config FILE, keys are option names); the command line wins.";

/* Rank 0, stdout, at the end of a run that finished or stopped on request (docs/cli.md#output-on-the-terminal):
 *   mpiddp train: finished at epoch E (of N) step K/M (global S)      (or "early stopping at", "stopped at"; K/M
 *                                                                       as the epoch's run took them, when known)
 *   mpiddp train: best checkpoint: PATH, MONITOR=V (epoch E, global step S)
 *   mpiddp train: T s; trained X samples, R samples/s [(Q tokens/s)]
 *   run directory: RUNDIR */
static void print_summary(const ddp_train_summary *s, const ddp_train_config *cfg)
{
    char abs[PATH_MAX];
    const char *dir = realpath(cfg->out_dir, abs) ? abs : cfg->out_dir;
    if (s->valid) {
        char steps[64] = ""; /* unknown (-1): an epoch a resumed checkpoint's run trained in another order */
        if (s->steps_in_epoch >= 0)
            snprintf(steps, sizeof steps, " step %lld/%lld", (long long)s->step_in_epoch, (long long)s->steps_in_epoch);
        printf("mpiddp train: %s at epoch %lld (of %lld)%s (global %lld)\n",
               s->stopped         ? "stopped"
               : s->early_stopped ? "early stopping"
                                  : "finished",
               (long long)s->epoch, (long long)s->epochs, steps, (long long)s->global_step);
        /* rank0 decides on rank 0's own value, not the whole set's (metrics.csv's) */
        const char *whose = cfg->ckpt_policy == 1 ? " (rank 0's own value: --ckpt-policy rank0)" : "";
        if (s->has_best && s->best_path[0])
            printf("mpiddp train: best checkpoint: %s/%s, %s=%.9g%s (epoch %lld, global step %lld)\n", dir,
                   s->best_path, s->monitor, s->best_value, whose, (long long)s->best_epoch, (long long)s->best_step);
        else if (s->has_best) /* --save-top-k 0, or a fork whose best is the resumed run's */
            printf("mpiddp train: best checkpoint: none kept%s; best %s=%.9g%s\n",
                   cfg->save_top_k > 0 ? " in this run directory" : " (--save-top-k 0)", s->monitor, s->best_value,
                   whose);
        else if (s->never_finite)
            printf("mpiddp train: best checkpoint: none (%s was never finite; see checkpoints/decisions.log)\n",
                   s->monitor);
        else
            printf("mpiddp train: best checkpoint: none (%s)\n", cfg->fast_dev_run > 0
                                                                     ? "--fast-dev-run makes no checkpoint decision"
                                                                     : "no checkpoint decision yet");
        printf("mpiddp train: %.2f s; trained %.0f samples, %.0f samples/s", s->wall_s, s->samples, s->samples_per_s);
        if (s->token_budget) printf(" (%.0f tokens/s)", s->rows_per_s);
        printf("\n");
    }
    printf("run directory: %s\n", dir);
}

/* RUNDIR/checkpoints/last.h5 into last; whether it exists, on rank 0 (0 elsewhere). */
static int rank0_has_last(ddp_ctx *ctx, const ddp_train_config *cfg, char *last, size_t len)
{
    snprintf(last, len, "%s/checkpoints/last.h5", cfg->out_dir);
    return cli_rank0(ctx) && access(last, F_OK) == 0;
}

/* A requeued SLURM job (SLURM_RESTART_COUNT > 0) never starts over what an earlier attempt saved: with
 * RUNDIR/checkpoints/last.h5 present and RUNDIR/run.json naming this job (an attempt of it saved that last.h5) it
 * continues from there, whatever --overwrite or --resume FILE say (one notice); with another run's last.h5 (the
 * first attempt stopped before --overwrite removed it) --overwrite and --resume FILE apply, as they did in the first
 * attempt (one notice), and without either the run directory refuses it as it would have refused the first (continuing
 * another run is --resume auto's to ask for); without last.h5, --overwrite and --resume FILE apply, and without either
 * it runs as --resume auto (over the first attempt's files). The count is a job fact: rank 0's value decides on every
 * rank (one notice when the ranks saw different values, an MPMD launch or a user's environment on some ranks; before,
 * each rank took its own path and the job could hang). Collective (rank 0 looks for last.h5 and run.json). Returns 0,
 * or the exit code of an MPI failure. */
static int restart_resume(ddp_ctx *ctx, ddp_train_config *cfg)
{
    const ddp_topology *t = ddp_topo(ctx);
    int v[3] = {cli_rank0(ctx) ? t->restart_count : INT_MIN, t->restart_count, -t->restart_count};
    if (MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, ctx->world) != MPI_SUCCESS)
        return cli_fail(ctx, "train", ddp_set_error(DDP_ERR_MPI, "MPI_Allreduce of SLURM_RESTART_COUNT failed"));
    int count = v[0];
    if (v[1] != -v[2] && cli_rank0(ctx))
        fprintf(stderr,
                "mpiddp train: notice: the ranks see different SLURM_RESTART_COUNT values (%d to %d); rank 0's, %d, "
                "applies on every rank\n",
                -v[2], v[1], count);
    if (count <= 0) return 0;
    char last[PATH_MAX + 32];
    int have[2] = {rank0_has_last(ctx, cfg, last, sizeof last), 0}; /* last.h5; run.json names this job */
    if (have[0]) have[1] = ddp_rundir_of_job(cfg->out_dir, t);
    if (MPI_Bcast(have, 2, MPI_INT, 0, ctx->world) != MPI_SUCCESS)
        return cli_fail(ctx, "train", ddp_set_error(DDP_ERR_MPI, "MPI_Bcast of the restart's checkpoint failed"));
    int file = cfg->resume && strcmp(cfg->resume, "auto") != 0, mine = have[0] && have[1];
    const char *opt = cfg->overwrite ? "--overwrite" : "--resume ", *arg = cfg->overwrite ? "" : cfg->resume;
    if (have[0] && (cfg->overwrite || file) && cli_rank0(ctx)) {
        if (mine)
            fprintf(stderr,
                    "mpiddp train: notice: a requeued job (SLURM_RESTART_COUNT=%d) continues from %s: %s%s is not "
                    "applied\n",
                    count, last, opt, arg);
        else
            fprintf(stderr,
                    "mpiddp train: notice: a requeued job (SLURM_RESTART_COUNT=%d) does not continue from %s: no "
                    "attempt of job %s saved it (%s/run.json does not name this job), so %s%s applies as in the first "
                    "attempt\n",
                    count, last, t->job_id[0] ? t->job_id : "(no id)", cfg->out_dir, opt, arg);
    }
    if (mine) {
        cfg->resume = "auto";
        cfg->overwrite = 0;
    } else if (!have[0] && !cfg->resume && !cfg->overwrite)
        cfg->resume = "auto";
    return 0;
}

/* What a requeued attempt of this job starts from (rq) and what to do when the requeue failed (rs), for the job's own
 * arguments (overwrite, resume: as given, before restart_resume) and rank 0's run directory: have_last
 * (checkpoints/last.h5 exists), mine (run.json names this job, so that last.h5 is this job's). A requeued attempt
 * continues its own last.h5 whatever the arguments say, and meets another run's as the first attempt did (without
 * --resume or --overwrite the run directory refuses it); a resubmitted job is a new job: its --overwrite starts over,
 * its --resume FILE starts from FILE, and without --resume it refuses the run directory. Returns 1 when a requeued
 * attempt would be refused (another run's last.h5, neither option): then the job is not requeued (rq empty). */
static int requeue_phrases(int have_last, int mine, int overwrite, const char *resume, char *rq, char *rs, size_t len)
{
    int refused = 0;
    int file = resume && strcmp(resume, "auto") != 0;
    if (!have_last) {
        snprintf(rq, len, "no last.h5 was saved, so it starts again");
        snprintf(rs, len, "resubmit it, %s", rq);
    } else if (!mine && overwrite) { /* a start-up stop before --overwrite removed another run's files */
        snprintf(rq, len, "the last.h5 there is not this job's, so it starts over (--overwrite)");
        snprintf(rs, len, "resubmit it, %s", rq);
    } else if (!mine && file) {
        snprintf(rq, len, "the last.h5 there is not this job's, so it starts from %.600s (--resume)", resume);
        snprintf(rs, len, "resubmit it, %s", rq);
    } else if (!mine && !resume) { /* a start-up stop before the run directory refused another run's files: the
                                    * requeued attempt would be refused there too, so the job is not requeued */
        rq[0] = 0;
        snprintf(rs, len,
                 "the last.h5 there is not this job's: resubmit it with another --out, with --overwrite to remove "
                 "that run's files, or with --resume auto to continue that run");
        refused = 1;
    } else {
        snprintf(rq, len, "it resumes from last.h5");
        if (overwrite)
            snprintf(rs, len,
                     "resubmit it with --resume auto in place of --overwrite: as submitted it starts over and "
                     "the saved steps are lost");
        else if (file)
            snprintf(rs, len,
                     "resubmit it with --resume auto in place of --resume %.600s: as submitted it starts from that "
                     "file again, not from last.h5",
                     resume);
        else
            snprintf(rs, len, "resubmit it%s, it resumes from last.h5", resume ? "" : " with --resume auto");
    }
    return refused;
}

/* After a stop request the ranks agreed on (kinds: DDP_STOP_* bits), before training or when it returned
 * DDP_STOPPED (summary non-NULL): the requeue the kinds ask for (preempt.h), rank 0's lines, the exit code.
 * overwrite and resume: the job's own arguments (restart_resume may have changed cfg's). */
static int end_stopped(ddp_ctx *ctx, int kinds, const char *line, const ddp_train_summary *summary,
                       const ddp_train_config *cfg, int overwrite, const char *resume)
{
    char msg[DDP_REQUEUE_MSG], last[PATH_MAX + 32], requeued[900] = "", resubmit[900] = "";
    int have_last = rank0_has_last(ctx, cfg, last, sizeof last); /* what a requeued job resumes from */
    int refused = 0; /* a requeued attempt would be refused there: no requeue (rank 0 decides) */
    if (cli_rank0(ctx))
        refused = requeue_phrases(have_last, have_last && ddp_rundir_of_job(cfg->out_dir, ddp_topo(ctx)), overwrite,
                                  resume, requeued, resubmit, sizeof requeued);
    ddp_requeue rq;
    if (ddp_slurm_requeue(ctx, kinds, refused ? NULL : requeued, resubmit, &rq, msg) != DDP_OK)
        return cli_fail(ctx, "train", DDP_ERR_MPI);
    if (cli_rank0(ctx)) {
        printf("mpiddp train: %s\n", line);
        if (rq == DDP_REQUEUE_NOT_BATCH) {
            fflush(stdout);
            fprintf(stderr, "mpiddp train: notice: %s\n", msg);
        } else if (rq != DDP_REQUEUE_NOT_SLURM)
            printf("mpiddp train: %s\n", msg);
        if (rq == DDP_REQUEUE_FAILED || rq == DDP_REQUEUE_NO_SCONTROL || rq == DDP_REQUEUE_DECLINED) {
            fflush(stdout);
            fprintf(stderr, "mpiddp train: error: %s\n", msg);
        }
        if (summary) print_summary(summary, cfg);
    }
    return rq == DDP_REQUEUE_NO_SCONTROL ? 3 : rq == DDP_REQUEUE_FAILED || rq == DDP_REQUEUE_DECLINED ? 1 : 0;
}

/* check_world > 0: only the parse and the usage checks, for a job of that many ranks (cmd_train_check). */
static int train_main(ddp_ctx *ctx, int argc, char **argv, int check_world, int *chosen)
{
    const char *train_dir = NULL, *val_dir = NULL, *config = NULL, *train_mf = NULL, *val_mf = NULL;
    int no_manifest = 0;
    ddp_train_config cfg;
    ddp_train_config_default(&cfg);
    int64_t seed = 0;
    int hidden = 64, sampling = 0, device = 0, no_progress = 0, kind = 0, positions = 0, shuffle = 0;
    ddp_model_config mc;
    ddp_model_config_default(&mc);
    double timeout = 0;
    int mode = 0, policy = 0, precision = 0, check_finite = 0;
    cli_opt opts[] = {
        {"train", OPT_STR, &train_dir, NULL, 0, 0, "training dataset directory (required)", 0},
        {"val", OPT_STR, &val_dir, NULL, 0, 0, "validation dataset directory (required)", 0},
        {"out", OPT_STR, &cfg.out_dir, NULL, 0, 0, "run directory (required)", 0},
        {"train-manifest", OPT_STR, &train_mf, NULL, 0, 0,
         "manifest of --train (default DIR/mpiddp-manifest.bin when present; none: ignore it)", 0},
        {"val-manifest", OPT_STR, &val_mf, NULL, 0, 0,
         "manifest of --val (default DIR/mpiddp-manifest.bin when present; none: ignore it)", 0},
        {"no-manifest", OPT_FLAG, &no_manifest, NULL, 0, 0,
         "validate every shard of both datasets; no manifest is read", 0},
        {"config", OPT_STR, &config, NULL, 0, 0, "INI file with any of these options", 0},
        {"epochs", OPT_INT, &cfg.epochs, NULL, 1, 1e6, "epochs (default 3)", 0},
        {"batch-size", OPT_INT, &cfg.batch_size, NULL, 1, 1e7,
         "samples per rank per micro-batch, also the validation batch (default 32)", 0},
        {"batch-rows", OPT_I64, &cfg.batch_rows, NULL, 1, 1e12,
         "token budget instead of --batch-size: N x ranks x accumulate rows per optimizer step, split over ranks by "
         "cost, no padding; also for validation (at least the longest sample)",
         0},
        {"model", OPT_CHOICE, &kind, "mlp|transformer", 0, 0,
         "per-row MLP with mean pooling (default), or the Transformer encoder", 0},
        {"hidden", OPT_INT, &hidden, NULL, 1, 1e5, "MLP hidden units H, or the transformer's width d (default 64)", 0},
        {"layers", OPT_INT, &mc.layers, NULL, 1, 1e3, "transformer: encoder layers L (default 2)", 0},
        {"heads", OPT_INT, &mc.heads, NULL, 1, 1e4, "transformer: attention heads, must divide --hidden (default 4)",
         0},
        {"ff", OPT_I64, &mc.ff, NULL, 0, 1e7, "transformer: FFN width f (default 2 x --hidden)", 0},
        {"max-positions", OPT_I64, &mc.max_positions, NULL, 1, 1e7,
         "transformer: longest sample in rows, P (default 512)", 0},
        {"positions", OPT_CHOICE, &positions, "learned|none", 0, 0,
         "transformer: learned position embeddings (default) or none (sets)", 0},
        {"dropout", OPT_F64, &mc.dropout, NULL, 0, 0.99, "transformer: dropout probability (default 0)", 0},
        {"lr", OPT_F64, &cfg.lr, NULL, 1e-12, 1e3, "AdamW learning rate (default 1e-3)", 0},
        {"lr-schedule", OPT_CHOICE, &cfg.lr_schedule, "constant|cosine|linear", 0, 0,
         "after --warmup-steps: constant (default), or cosine / linear decay to --min-lr over the run's optimizer "
         "steps",
         0},
        {"warmup-steps", OPT_F64, &cfg.warmup, NULL, 0, 1e12,
         "linear warmup: N optimizer steps (N >= 1), or a fraction in (0, 1) of the run's steps (default 0)", 0},
        {"min-lr", OPT_F64, &cfg.min_lr, NULL, 0, 1e3, "learning rate at the end of the decay (default 0)", 0},
        {"lr-horizon", OPT_CHOICE, &cfg.lr_horizon, "keep|restart", 0, 0,
         "a resume with another --epochs: keep the checkpoint's schedule (default; lr stays at --min-lr past its end), "
         "or restart warmup and decay at the resumed step",
         0},
        {"weight-decay", OPT_F64, &cfg.weight_decay, NULL, 0, 1e3, "decoupled weight decay (default 0.01)", 0},
        {"seed", OPT_I64, &seed, NULL, 0, 9.2e18, "seed of init and sampling (default 0)", 0},
        {"grad-clip", OPT_F64, &cfg.grad_clip, NULL, 0, 1e12, "clip gradients to this global L2 norm (0 = off)", 0},
        {"accumulate", OPT_INT, &cfg.accumulate, NULL, 1, 1e6, "micro-batches per optimizer step (default 1)", 0},
        {"sampling", OPT_CHOICE, &sampling, "global|shard", 0, 0,
         "global permutation (default), or whole shards per rank", 0},
        {"shuffle", OPT_CHOICE, &shuffle, "full|block", 0, 0,
         "full permutation (default), or blocks of consecutive samples shuffled within windows (data larger than "
         "memory)",
         0},
        {"shuffle-block-mb", OPT_F64, &cfg.shuffle_block_mb, NULL, 0.001, 1e6,
         "--shuffle block: MiB of features per block (default 4)", 0},
        {"shuffle-window", OPT_INT, &cfg.shuffle_window, NULL, 1, 64,
         "--shuffle block: blocks per shuffle window, read ahead together (default 16)", 0},
        {"drop-last", OPT_FLAG, &cfg.drop_last, NULL, 0, 0, "truncate the epoch to a multiple of the world size", 0},
        {"log-every", OPT_INT, &cfg.log_every, NULL, 1, 1e9, "optimizer steps between train rows (default 50)", 0},
        {"log-per-rank", OPT_FLAG, &cfg.log_per_rank, NULL, 0, 0, "also write metrics_rank<R>.csv with local values",
         0},
        {"fast-dev-run", OPT_INT, &cfg.fast_dev_run, NULL, 0, 1e9, "run N train and N val batches, no checkpoint", 0},
        {"bucket-mb", OPT_F64, &cfg.bucket_mb, NULL, 1e-6, 1e5, "gradient bucket size in MiB (default 25)", 0},
        {"collective-timeout", OPT_F64, &timeout, NULL, 0, 1e7,
         "seconds a rank may wait in a collective of the training loop before the job stops with a report (0 = "
         "forever)",
         0},
        {"device", OPT_CHOICE, &device, "auto|cpu|cuda", 0, 0, "compute device (default auto)", 0},
        {"precision", OPT_CHOICE, &precision, "fp32|tf32|bf16", 0, 0,
         "GEMM arithmetic: fp32 (default, exact), tf32 (--device cuda) or bf16 operands with fp32 accumulation", 0},
        {"monitor", OPT_STR, &cfg.monitor, NULL, 0, 0,
         "metric for checkpoint and early-stop decisions (default val/loss)", 0},
        {"mode", OPT_CHOICE, &mode, "min|max", 0, 0, "whether lower or higher --monitor is better (default min)", 0},
        {"save-top-k", OPT_INT, &cfg.save_top_k, NULL, 0, 64,
         "keep the k best checkpoints by --monitor (default 1, 0 = none)", 0},
        {"ckpt-policy", OPT_CHOICE, &policy, "reduced|rank0|all|any|majority", 0, 0,
         "who decides: reduced monitor (default), rank 0's value, or a vote of local values", 0},
        {"early-stop-patience", OPT_INT, &cfg.early_stop_patience, NULL, 0, 1e9,
         "stop after N epochs without improvement (0 = off)", 0},
        {"early-stop-min-delta", OPT_F64, &cfg.early_stop_min_delta, NULL, 0, 1e12,
         "smallest change that counts as improvement", 0},
        {"ckpt-every-steps", OPT_I64, &cfg.ckpt_every_steps, NULL, 0, 1e15,
         "also write last.h5 every N optimizer steps (0 = per epoch)", 0},
        {"check-finite", OPT_FLAG, &check_finite, NULL, 0, 0,
         "before training, read every feature of both datasets for NaN/Inf (one line naming file, row and sample)", 0},
        {"skip-nonfinite", OPT_FLAG, &cfg.skip_nonfinite, NULL, 0, 0,
         "skip steps whose gradient is NaN/Inf (counted in train/skipped_steps)", 0},
        {"resume", OPT_STR, &cfg.resume, NULL, 0, 0,
         "auto (RUNDIR/checkpoints/last.h5 if present) or a checkpoint file", 0},
        {"overwrite", OPT_FLAG, &cfg.overwrite, NULL, 0, 0,
         "RUNDIR holds another run: remove that run's files (metrics, run.json, checkpoints) first; without it such a "
         "RUNDIR is refused",
         0},
        {"no-progress", OPT_FLAG, &no_progress, NULL, 0, 0, "no progress line on stderr", 0},
    };
    int n = (int)(sizeof opts / sizeof opts[0]);
    const cli_cmd cmd = {"train", USAGE, ABOUT, opts, n};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, NULL, 0, NULL);
    if (done >= 0) return done;
    /* the command line overrides the file, also across these either-or pairs (conflicts within one stay below) */
    cli_either(opts, n, "batch-size", "batch-rows");
    cli_either(opts, n, "resume", "overwrite");
    const char *const required[] = {"--train DIR", "--val DIR", "--out RUNDIR"};
    int rc = cli_require(ctx, "train", 3, required, (const int[]){!!train_dir, !!val_dir, cli_seen(opts, n, "out")});
    if (rc >= 0) return rc;

    cfg.seed = (uint64_t)seed;
    cfg.hidden = hidden;
    cfg.sampling_shard = sampling == 1;
    cfg.shuffle_block = shuffle == 1;
    cfg.progress = !no_progress;
    cfg.collective_timeout = timeout;
    cfg.mode_max = mode == 1;
    cfg.precision = (ddp_precision)precision;
    mc.precision = cfg.precision;     /* bf16: the model keeps its GEMM-only activations in bf16 */
    const char *resume0 = cfg.resume; /* the job's own arguments, for what a resubmission of it does (end_stopped) */
    int overwrite0 = cfg.overwrite;
    int rrc = check_world ? 0 : restart_resume(ctx, &cfg); /* a requeued SLURM job continues where it stopped */
    if (rrc != 0) return rrc;
    cfg.ckpt_policy = policy;
    /* usage errors found by combining options: one line from rank 0, exit 2, before anything is created */
    const char *conflict = NULL;
    static const char *monitors[] = {"val/loss", "val/acc", "val/macro_f1"};
    int known_monitor = 0;
    for (int i = 0; i < 3; i++) known_monitor |= strcmp(cfg.monitor, monitors[i]) == 0;
    mc.kind = kind == 1 ? DDP_MODEL_TRANSFORMER : DDP_MODEL_MLP;
    mc.hidden = hidden;
    if (cfg.resume && cfg.overwrite)
        conflict =
            "--resume and --overwrite: give one (continue the run in --out, or remove its files and start afresh)";
    else if (cli_seen(opts, n, "batch-size") && cli_seen(opts, n, "batch-rows"))
        conflict =
            "--batch-size and --batch-rows: give one (samples per rank per step, or a token budget per rank per step)";
    else if (!known_monitor) {
        ddp_set_error(
            DDP_ERR_ARG,
            "--monitor %s: must be one of val/loss, val/acc, val/macro_f1 (decisions are taken after each validation)",
            cfg.monitor);
        conflict = ddp_last_error();
    } else if (ddp_train_config_check_as(&cfg, check_world ? check_world : ddp_topo(ctx)->size, 1) != DDP_OK ||
               ddp_model_config_check_as(&mc, 1) != DDP_OK)
        conflict = ddp_last_error(); /* before buffers are sized from them */
    if (conflict) return cli_usage(ctx, "train", "%s", conflict);
    if (check_world) {
        *chosen = cfg.resume != NULL || cfg.overwrite; /* how the run starts: its own choice, else --resume auto */
        return -1;
    }
    ddp_device want = device == 1 ? DDP_DEVICE_CPU : device == 2 ? DDP_DEVICE_CUDA : DDP_DEVICE_AUTO, got;
    char why[160];
    ddp_status st = ddp_select_device_all(ctx, want, &got, why);
    if (st != DDP_OK) return cli_fail(ctx, "train", st);
    if (got == DDP_DEVICE_CPU && cfg.precision == DDP_PRECISION_TF32) /* every rank is on the same kind of device */
        return cli_usage(ctx, "train",
                         "--precision tf32 needs --device cuda (the CPU backend computes in fp32 or bf16)");
    const char *note = got == DDP_DEVICE_CPU && cfg.precision == DDP_PRECISION_BF16 ? ddp_cpu_bf16_notice() : NULL;
    if (note && cli_rank0(ctx)) fprintf(stderr, "mpiddp train: notice: %s\n", note); /* how bf16 runs on this CPU */
    if (cli_rank0(ctx) && cfg.progress) fprintf(stderr, "mpiddp train: %s\n", why);
    cfg.device = got;
    ddp_out_lock
        lks[2]; /* the shared locks of --train and --val for the run: no synth or pack writes there meanwhile */
    st = ddp_read_locks_take(ctx, (const char *const[]){train_dir, val_dir}, 2, "train", lks);
    if (st != DDP_OK) return cli_fail(ctx, "train", st);
    ddp_dataset *tr = NULL, *va = NULL;
    ddp_model model = {0};
    ddp_train_summary summary;
    memset(&summary, 0, sizeof summary);
    char *json = cli_to_json(opts, n);
    cfg.config_json = json;
    st = ddp_dataset_open_with(ctx, train_dir, no_manifest ? "none" : train_mf, &tr);
    if (tr && tr->notice[0] && cli_rank0(ctx))
        fprintf(stderr, "mpiddp train: notice: %s\n", tr->notice); /* manifest stale or ignored */
    if (st == DDP_OK) st = ddp_dataset_open_with(ctx, val_dir, no_manifest ? "none" : val_mf, &va);
    if (va && va->notice[0] && cli_rank0(ctx)) fprintf(stderr, "mpiddp train: notice: %s\n", va->notice);
    if (st == DDP_OK && check_finite)
        st = ddp_dataset_check_finite(ctx, tr); /* collective: shards spread over the ranks */
    if (st == DDP_OK && check_finite) st = ddp_dataset_check_finite(ctx, va);
    for (int k = 0; k < 2 && st == DDP_OK && cli_rank0(ctx); k++) { /* the one-time notice of the slow path */
        const ddp_dataset_info *in = ddp_dataset_get_info(k ? va : tr);
        if (in->hdf5_read_shards)
            fprintf(stderr,
                    "mpiddp train: notice: %lld of %lld shard(s) of %s have features that cannot be memory-mapped "
                    "(chunked, compressed, unaligned or not IEEE float32 little-endian); "
                    "they are read through HDF5, slower than the memory-mapped path\n",
                    (long long)in->hdf5_read_shards, (long long)in->num_shards, k ? val_dir : train_dir);
    }
    if (st == DDP_OK) {
        const ddp_dataset_info *ti = ddp_dataset_get_info(tr), *vi = ddp_dataset_get_info(va);
        if (ti->dim != vi->dim) {
            st = ddp_agree_status(ctx, ddp_set_error(DDP_ERR_FORMAT,
                                                     "%s and %s disagree: D %lld vs %lld, classes %lld vs %lld",
                                                     train_dir, val_dir, (long long)ti->dim, (long long)vi->dim,
                                                     (long long)ti->num_classes, (long long)vi->num_classes));
        } else if (ti->num_classes !=
                   vi->num_classes) { /* pack counts largest label + 1: a split may lack the top class */
            int64_t cmax = ti->num_classes > vi->num_classes ? ti->num_classes : vi->num_classes;
            st = ddp_agree_status(
                ctx, ddp_set_error(DDP_ERR_FORMAT,
                                   "%s and %s disagree: classes %lld vs %lld (a split that lacks the top label "
                                   "counts fewer): give both num_classes %lld (mpiddp pack --classes %lld; with h5py, "
                                   "f.attrs['num_classes'] = %lld in every shard)",
                                   train_dir, val_dir, (long long)ti->num_classes, (long long)vi->num_classes,
                                   (long long)cmax, (long long)cmax, (long long)cmax));
        } else {
            int64_t maxrows = ti->max_sample_rows > vi->max_sample_rows ? ti->max_sample_rows : vi->max_sample_rows;
            mc.positions = positions == 0; /* kind and hidden: set with the usage checks above */
            mc.dim = ti->dim, mc.classes = ti->num_classes;
            /* a micro-batch never holds more samples than a set has (a rank's share is at most the set; shard
             * sampling's padding repeats a rank's own samples, so rows are not capped by the set's), nor, with token
             * budgets (no padding), more rows: a --batch-size or --batch-rows past the set sizes no more, as the
             * loaders and eval do (before, --batch-rows 1e8 on 50 samples asked for 25.6 GB and failed) */
            int64_t nmax = ti->num_samples > vi->num_samples ? ti->num_samples : vi->num_samples;
            int64_t rmax = ti->num_rows > vi->num_rows ? ti->num_rows : vi->num_rows;
            mc.max_batch_samples = cfg.batch_size < nmax ? cfg.batch_size : nmax;
            mc.max_batch_rows = mc.max_batch_samples * maxrows;
            if (cfg.batch_rows > 0) { /* a rank's share: at most the mean load plus one sample */
                mc.max_batch_rows = cfg.batch_rows + maxrows < rmax ? cfg.batch_rows + maxrows : rmax;
                mc.max_batch_samples = mc.max_batch_rows < nmax ? mc.max_batch_rows : nmax;
            }
            if (mc.kind == DDP_MODEL_TRANSFORMER) { /* a sample longer than P: one line naming it, before any step */
                st = ddp_dataset_check_max_rows(ctx, tr, mc.max_positions, "--max-positions");
                if (st == DDP_OK) st = ddp_dataset_check_max_rows(ctx, va, mc.max_positions, "--max-positions");
            }
            if (cfg.batch_rows > 0) { /* the same for a budget below the longest sample, before the run directory */
                if (st == DDP_OK) st = ddp_dataset_check_max_rows(ctx, tr, cfg.batch_rows, "--batch-rows");
                if (st == DDP_OK) st = ddp_dataset_check_max_rows(ctx, va, cfg.batch_rows, "--batch-rows");
            }
            cfg.model_config = &mc;
            int plan = 0;
            if (st == DDP_OK) st = ddp_plan_agree(ctx, got, &plan);
            if (st == DDP_OK && plan) { /* the largest micro-batch the run reads, not the bound */
                int64_t rows, samples, slack = ddp_knob_int(DDP_KNOB_TEST_PLAN_SLACK);
                st = ddp_plan_max_batch(ctx, &cfg, tr, va, &rows, &samples);
                mc.max_batch_rows = rows + slack > 0 ? rows + slack : 1, mc.max_batch_samples = samples;
            }
            if (st == DDP_OK) st = ddp_agree_status(ctx, ddp_model_create(ctx, got, &mc, &model));
        }
    }
    int early_stop = 0; /* the kinds of a stop request agreed before training started */
    if (st == DDP_OK) {
        /* from here SIGTERM and SIGINT too only set a flag (stop_signals.c; SIGUSR1 and SIGUSR2 have since main);
         * the ranks act at the next step or validation batch (a further one to a rank blocked in a collective says
         * why it waits). A request made during start-up is agreed here: the
         * run ends before its first step, with nothing to save, and is requeued as its kinds ask. */
        cli_stop_signals_training(ddp_topo(ctx)->rank);
        cli_stop_signals_arm(DDP_STOP_END | DDP_STOP_REQUEUE);
        int mine = ddp_stop_requested();
        if (MPI_Allreduce(&mine, &early_stop, 1, MPI_INT, MPI_BOR, ctx->world) != MPI_SUCCESS)
            st = ddp_set_error(DDP_ERR_MPI, "MPI_Allreduce of the stop requests failed");
    }
    if (st == DDP_OK && !early_stop)
        st = ddp_train_summarized(ctx, &cfg, &model, tr, va,
                                  &summary); /* stays armed: a request after the last step changes nothing */
    cli_stop_signals_settle();               /* trained, stopped or failed: no notice from here (the requeue) */
    if (model.destroy) model.destroy(model.self);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    ddp_read_locks_release(lks, 2);
    free(json);
    if (st == DDP_OK && early_stop)
        return end_stopped(ctx, early_stop, "stopped on request before training started; nothing saved", NULL, &cfg,
                           overwrite0, resume0);
    if (st == DDP_STOPPED) { /* every rank saved last.h5; rank 0 requeues the job when the stop asks for it */
        char stopped[1024];
        snprintf(stopped, sizeof stopped, "%s", ddp_last_error());
        return end_stopped(ctx, summary.stop_kinds, stopped, &summary, &cfg, overwrite0, resume0);
    }
    if (st == DDP_ERR_BUSY) { /* --out is another run's: a usage error, nothing written */
        (void)cli_fail(ctx, "train", st);
        return 2;
    }
    if (st != DDP_OK) return cli_fail(ctx, "train", st);
    if (cli_rank0(ctx)) print_summary(&summary, &cfg);
    return 0;
}

int cmd_train(ddp_ctx *ctx, int argc, char **argv) { return train_main(ctx, argc, argv, 0, NULL); }

int cmd_train_check(ddp_ctx *ctx, int argc, char **argv, int world, int *chosen)
{
    return train_main(ctx, argc, argv, world, chosen);
}
