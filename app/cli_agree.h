/* cli_agree.h — every rank must have parsed the same command line (cli_agree.c). */
#ifndef DDP_APP_CLI_AGREE_H
#define DDP_APP_CLI_AGREE_H

#include "cli.h"

/* Collective, right after cli_parse on every rank: rc its outcome (CLI_OK, CLI_HELP, CLI_USAGE), err the usage
 * error's line, pos/npos the positional arguments. Returns 0 when every rank parsed the same outcome, options and
 * arguments; else 2, rank 0 having printed one line naming the first rank that differs and how (a usage error of
 * rank 0's own is left to the caller to print); 1 when MPI failed. */
int cli_agree_parse(ddp_ctx *ctx, const cli_cmd *c, int rc, const char *err, const char **pos, int npos);

#endif
