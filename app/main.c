/* main.c — the `mpiddp` executable: subcommand dispatch, MPI start/stop, and exit codes
 * (0 success, 1 runtime error, 2 usage error). The only place besides the cmd_* files that prints. */
#include "cli.h"
#include "cli_agree.h"
#include "stop_signals.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/ctx.h"

#include "io/shard.h"

#include <mpi.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *name;
    cmd_fn fn;
    const char *about;
} commands[] = {
    {"synth", cmd_synth, "write a deterministic synthetic dataset"},
    {"pack", cmd_pack, "convert an HDF5 file of per-sample datasets into shards"},
    {"index", cmd_index, "validate a dataset once and write its manifest (faster start-up)"},
    {"inspect", cmd_inspect, "validate a dataset and print its statistics"},
    {"train", cmd_train, "train the MLP or the Transformer encoder (under mpirun / srun)"},
    {"eval", cmd_eval, "evaluate a checkpoint on a dataset; predictions CSV"},
    {"slurm-script", cmd_slurm_script, "print an sbatch script (signal-safe preemption and requeue)"},
    {"env", cmd_env, "print each rank's topology, device and library versions"},
};
#define NCMD (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: mpiddp <command> [options]   (mpiddp <command> --help for its options)\n"
               "       mpiddp --version              print the version\n\ncommands:\n");
    for (int i = 0; i < NCMD; i++) fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].about);
    fprintf(f, "\nParallel commands run under `mpirun -np N mpiddp ...` or `srun --mpi=pmix mpiddp ...`.\n");
}

int cli_rank0(ddp_ctx *ctx) { return ddp_topo(ctx)->rank == 0; }

int cli_fail(ddp_ctx *ctx, const char *cmd, ddp_status st)
{
    const ddp_topology *t = ddp_topo(ctx);
    if (ddp_error_shared()) {
        if (t->rank == 0) fprintf(stderr, "mpiddp %s: error: %s\n", cmd, ddp_last_error());
        return 1;
    }
    fprintf(stderr, "mpiddp %s: rank %d: error: %s\n", cmd, t->rank, ddp_last_error());
    fflush(stderr);
    ddp_coverage_flush(); /* no-op unless built for coverage: MPI_Abort skips the exit handlers */
    if (t->size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    (void)st;
    return 1;
}

int cli_usage(ddp_ctx *ctx, const char *cmd, const char *fmt, ...)
{
    if (cli_rank0(ctx)) {
        char msg[2048]; /* formatted first: the line goes out in one write */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "mpiddp %s: %s\n", cmd, msg);
    }
    return 2;
}

int cli_require(ddp_ctx *ctx, const char *cmd, int n, const char *const *names, const int *given)
{
    char missing[512] = "", all[512] = "";
    int nmiss = 0;
    for (int i = 0; i < n; i++)
        if (!given[i]) nmiss++;
    if (nmiss == 0) return -1;
    for (int i = 0, m = 0; i < n; i++) {
        size_t a = strlen(all), b = strlen(missing);
        snprintf(all + a, sizeof all - a, "%s%.*s",
                 i == 0       ? ""
                 : i == n - 1 ? " and "
                              : ", ",
                 (int)strcspn(names[i], " "), names[i]);
        if (!given[i]) {
            snprintf(missing + b, sizeof missing - b, "%s%s", m == 0 ? "" : m == nmiss - 1 ? " and " : ", ", names[i]);
            m++;
        }
    }
    return cli_usage(ctx, cmd, "missing %s (%s %s required; see mpiddp %s --help)", missing, all, n == 1 ? "is" : "are",
                     cmd);
}

int cli_cmd_parse(ddp_ctx *ctx, const cli_cmd *c, int argc, char **argv, const char **pos, int npos, int *npos_out)
{
    char err[1024] = ""; /* one line, already "mpiddp NAME: ..." */
    int np = 0, rc = cli_parse(c->name, c->opts, c->nopts, argc, argv, 2, pos, npos, &np, err, sizeof err);
    if (npos_out) *npos_out = np;
    int agreed = cli_agree_parse(ctx, c, rc, err, pos, np); /* a rank given other arguments: 2, one line */
    if (agreed == 1) return 1;
    if (agreed == 2 && rc != CLI_USAGE) return 2;
    if (rc == CLI_OK) return -1;
    if (rc == CLI_HELP) {
        if (cli_rank0(ctx)) cli_help(stdout, c->name, c->usage, c->about, c->opts, c->nopts);
        return 0;
    }
    if (cli_rank0(ctx)) fprintf(stderr, "%s\n", err);
    return 2;
}

/* What a command printed must have reached standard output (a full disk, /dev/full, a closed file): otherwise one
 * line and exit code 1 (a command that failed keeps its code). Each rank checks its own stdout; rank 0 prints the
 * results, so the line is normally its own. A closed pipe keeps the convention: SIGPIPE ends the process during
 * the flush (128 + 13), and where SIGPIPE is ignored EPIPE gives this line. */
static int check_stdout(const char *cmd, int rank, int rc)
{
    errno = 0;
    int bad = fflush(stdout) != 0, err = errno;
    if (!bad && ferror(stdout)) bad = 1, err = errno; /* a write that failed earlier: the flush had nothing left */
    if (!bad) return rc;
    char who[32] = "";
    if (rank > 0) snprintf(who, sizeof who, "rank %d: ", rank);
    fprintf(stderr, "mpiddp%s%s: %serror: cannot write standard output: %s\n", cmd ? " " : "", cmd ? cmd : "", who,
            err ? strerror(err) : "write error");
    return rc != 0 ? rc : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return check_stdout(NULL, 0, argc < 2 ? 2 : 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("mpiddp %s\n", MPIDDP_VERSION);
        return check_stdout(NULL, 0, 0);
    }
    cmd_fn fn = NULL;
    for (int i = 0; i < NCMD; i++)
        if (!strcmp(argv[1], commands[i].name)) fn = commands[i].fn;
    if (!fn) { /* MPI starts, so that the ranks agree: one line from rank 0 (another rank may have a command) */
        char err[600];
        snprintf(err, sizeof err, "mpiddp: unknown command '%.400s' (see mpiddp --help)", argv[1]);
        ddp_ctx *ctx = NULL;
        if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
            fprintf(stderr, "%s\n", err);
            ddp_finalize(ctx);
            return 2;
        }
        cli_cmd none = {argv[1], "", "", NULL, 0};
        int rc = cli_agree_parse(ctx, &none, CLI_USAGE, err, NULL, 0);
        if (cli_rank0(ctx)) fprintf(stderr, "%s\n", err); /* rank 0's own error: cli_agree_parse leaves it to us */
        ddp_finalize(ctx);
        return rc == 1 ? 1 : 2;
    }
    /* train's stop signals go to one waiting thread: blocked before MPI_Init starts any thread. The time-limit
     * warning (SIGUSR1, SIGUSR2) is a request from the start, so one that arrives during a long start-up ends the run
     * cleanly (and requeues it) once start-up is done; SIGTERM and SIGINT end the process at once until training
     * starts (cmd_train), since there is nothing to save before */
    if (fn == cmd_train) {
        cli_stop_signals_arm(DDP_STOP_REQUEUE);
        if (cli_stop_signals_block() != 0 || cli_stop_signals_start() != 0) {
            fprintf(stderr, "mpiddp train: error: cannot set up the stop-signal thread\n");
            return 1;
        }
    }
    ddp_ctx *ctx = NULL;
    ddp_status st = ddp_init(&argc, &argv, &ctx);
    if (st != DDP_OK) {
        fprintf(stderr, "mpiddp %s: error: %s\n", argv[1], ddp_last_error());
        ddp_finalize(ctx);
        return 1;
    }
    ctx->cli_names = 1; /* the library's messages name --out, --lr, ..., not cfg.out_dir, cfg.lr (optname.h) */
    /* after MPI_Init, so that the handlers are ours: a killed `index` leaves no manifest temporary behind */
    if (fn != cmd_train && cli_fatal_signals_cleanup() != 0 && cli_rank0(ctx))
        fprintf(stderr, "mpiddp %s: notice: cannot set up the signal handlers that remove temporaries\n", argv[1]);
    int rc = fn(ctx, argc, argv);
    rc = check_stdout(argv[1], ddp_topo(ctx)->rank, rc);
    if (rc != 0) /* coverage builds: counters now, before MPI_Finalize, which mpirun cuts short once a rank failed */
        ddp_coverage_flush();
    ddp_finalize(ctx);
    if (ddp_hdf5_poisoned()) { /* a corrupt file broke HDF5: skip its exit handlers, which could hang */
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}
