/* cli.h — what the subcommands share: their entry points, the command-line parse each starts with, and the one
 * place errors (runtime and usage) become output. */
#ifndef DDP_APP_CLI_H
#define DDP_APP_CLI_H

#include "mpiddp.h"
#include "opts.h"
#include "mpi_ddp/core/status.h"

#include <stdio.h>

typedef int (*cmd_fn)(ddp_ctx *ctx, int argc, char **argv);

int cmd_train(ddp_ctx *ctx, int argc, char **argv);
/* train's parse of argv[2..argc) and its usage checks, for a job of `world` ranks, without running anything: -1 when
 * train would start (*chosen: 1 when the arguments or their --config give --resume or --overwrite), else the exit
 * code once rank 0 printed train's line (2) or its --help (0). */
int cmd_train_check(ddp_ctx *ctx, int argc, char **argv, int world, int *chosen);
int cmd_env(ddp_ctx *ctx, int argc, char **argv);
int cmd_eval(ddp_ctx *ctx, int argc, char **argv);
int cmd_slurm_script(ddp_ctx *ctx, int argc, char **argv);
int cmd_synth(ddp_ctx *ctx, int argc, char **argv);
int cmd_pack(ddp_ctx *ctx, int argc, char **argv);
int cmd_inspect(ddp_ctx *ctx, int argc, char **argv);
int cmd_index(ddp_ctx *ctx, int argc, char **argv);

/* Reports a failed library call and returns the exit code (1). A shared error is printed once by rank
 * 0 and the job shuts down cleanly; an error only this rank holds is printed by it and aborts the job. */
int cli_fail(ddp_ctx *ctx, const char *cmd, ddp_status st);

/* A subcommand's command line: what its --help prints and the options it takes. */
typedef struct {
    const char *name;  /* as in `mpiddp NAME` */
    const char *usage; /* the arguments, after `usage: mpiddp NAME` */
    const char *about; /* what the command does */
    cli_opt *opts;
    int nopts;
} cli_cmd;

/* Parses argv[2..argc) for c; positional arguments go to pos (up to npos, may be NULL) and their count to
 * *npos_out (may be NULL). Returns -1 to go on, or the exit code once --help (0) or a usage error (2) has
 * been printed on rank 0. */
int cli_cmd_parse(ddp_ctx *ctx, const cli_cmd *c, int argc, char **argv, const char **pos, int npos, int *npos_out);
/* A usage error found after parsing: prints "mpiddp CMD: MESSAGE" (printf-style) on rank 0 and returns the
 * exit code (2). */
int cli_usage(ddp_ctx *ctx, const char *cmd, const char *fmt, ...) DDP_PRINTF(3, 4);
/* The required options of cmd: names[i] ("--out RUNDIR", the option and what it takes) with given[i] 0 when it is
 * missing. Returns -1 when none is; else prints "mpiddp CMD: missing --out RUNDIR (--train, --val and --out are
 * required; see mpiddp CMD --help)" on rank 0 and returns the exit code (2). */
int cli_require(ddp_ctx *ctx, const char *cmd, int n, const char *const *names, const int *given);
/* Whether this is rank 0, the rank that prints what all ranks share. */
int cli_rank0(ddp_ctx *ctx);

#endif
