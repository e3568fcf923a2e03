/* opts.h — the CLI's option tables: strict parsing of --name VALUE / --name=VALUE, flags, choices,
 * numeric ranges, an INI --config file (inih) whose keys are the option names, and --help text. */
#ifndef DDP_APP_OPTS_H
#define DDP_APP_OPTS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef enum { OPT_STR, OPT_INT, OPT_I64, OPT_F64, OPT_FLAG, OPT_CHOICE } opt_kind;

typedef struct {
    const char *name; /* without dashes */
    opt_kind kind;
    void *dst;           /* const char **, int *, int64_t *, double *, int * (flag), int * (choice index) */
    const char *choices; /* OPT_CHOICE: "a|b|c" */
    double min, max;     /* numeric range (inclusive) */
    const char *help;
    int seen; /* where it was given: CLI_FROM_FILE (the --config file) | CLI_FROM_ARGS (the command line); 0: not */
} cli_opt;

enum { CLI_FROM_FILE = 1, CLI_FROM_ARGS = 2 };

enum { CLI_OK = 0, CLI_HELP = 1, CLI_USAGE = 2 };

/* Parses argv[first..]; positional arguments go to *pos (up to npos, may be NULL). An option named
 * "config" (OPT_STR) is loaded first as an INI file; the command line wins. err gets one line. */
/* v as a boolean option's value (1/true/yes/on, 0/false/no/off): 1 and *out set, or 0 for anything else */
int cli_parse_bool(const char *v, int *out);
int cli_parse(const char *cmd, cli_opt *opts, int nopts, int argc, char **argv, int first, const char **pos, int npos,
              int *npos_out, char *err, size_t errlen);
void cli_help(FILE *f, const char *cmd, const char *usage, const char *about, const cli_opt *opts, int nopts);
/* An INI key's callback, as inih's ini_handler: returns nonzero to go on, 0 to refuse the key. */
typedef int (*cli_ini_handler)(void *user, const char *section, const char *name, const char *value);
/* Reads the --config INI file as every command does and calls handler for each key in file order: only a regular
 * text file of at most 1 MiB (a FIFO is never waited on, /dev/zero never read forever, a directory refused), a
 * line's leading whitespace ignored (no continuation lines), a line inih would split refused. Returns 0; -1 with
 * one line in err ("--config FILE: REASON" or "FILE:N: REASON", without a command prefix); or the line (> 0) of the
 * first error inih reports. */
int cli_ini_parse(const char *file, cli_ini_handler handler, void *user, char *err, size_t errlen);
/* Whether the option was given (on the command line or in the --config file). */
int cli_seen(const cli_opt *opts, int nopts, const char *name);
/* Options a and b of the last cli_parse are either-or (give one): when one was given on the command line (a flag:
 * as true) and the other only in the --config file, the file's is dropped (back to its default, as not given), since
 * the command line overrides the file. Both on the command line, or both in the file, stay for the caller to
 * refuse. */
void cli_either(cli_opt *opts, int nopts, const char *a, const char *b);
/* Renders the options that were set (or all) as a JSON object, for run.json. Caller frees. */
char *cli_to_json(const cli_opt *opts, int nopts);

#endif
