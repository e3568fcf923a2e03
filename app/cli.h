/* cli.h — what the subcommands share: their entry points and the one place errors become output. */
#ifndef DDP_APP_CLI_H
#define DDP_APP_CLI_H

#include "mpiddp.h"
#include "opts.h"

#include <stdio.h>

typedef int (*cmd_fn)(ddp_ctx *ctx, int argc, char **argv);

int cmd_train(ddp_ctx *ctx, int argc, char **argv);
int cmd_env(ddp_ctx *ctx, int argc, char **argv);
int cmd_eval(ddp_ctx *ctx, int argc, char **argv);
int cmd_slurm_script(ddp_ctx *ctx, int argc, char **argv);
int cmd_synth(ddp_ctx *ctx, int argc, char **argv);
int cmd_pack(ddp_ctx *ctx, int argc, char **argv);
int cmd_inspect(ddp_ctx *ctx, int argc, char **argv);

/* Reports a failed library call and returns the exit code (1). A shared error is printed once by rank
 * 0 and the job shuts down cleanly; an error only this rank holds is printed by it and aborts the job. */
int cli_fail(ddp_ctx *ctx, const char *cmd, ddp_status st);
/* Handles cli_parse's result: prints help or the usage error on rank 0; returns -1 to continue, else
 * the exit code. */
int cli_parsed(ddp_ctx *ctx, int rc, const char *cmd, const char *usage, const char *about, const cli_opt *opts, int nopts,
               const char *err);
int cli_rank0(ddp_ctx *ctx);

#endif
