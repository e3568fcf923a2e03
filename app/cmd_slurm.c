/* cmd_slurm.c — `mpiddp slurm-script [sbatch options] -- <train arguments>`: prints a ready sbatch
 * script: resources, --signal=USR1@90 (a flag, acted on at a step boundary), --requeue, append-mode
 * output, and `srun --mpi=pmix mpiddp train ... --resume auto`. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Prints s single-quoted for the shell. */
static void shq(FILE *f, const char *s)
{
    if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* A value sbatch reads from an #SBATCH line cannot hold a newline, and one with a double quote would need
 * sbatch's escapes: such a value is refused (cmd_slurm_script, before anything is printed). */
static int sbatch_value_ok(const char *v) { return !strpbrk(v, "\n\r\""); }

/* Prints `#SBATCH --opt=VALUE`: VALUE double-quoted when it holds anything beyond a plain word (sbatch splits an
 * unquoted value at whitespace and ends it at '#'), with its backslashes escaped (sbatch's escape character). */
static void sbatch_line(FILE *f, const char *opt, const char *v)
{
    fprintf(f, "#SBATCH --%s=", opt);
    if (strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == strlen(v)) {
        fprintf(f, "%s\n", v);
        return;
    }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '\\') fputc('\\', f);
        fputc(*v, f);
    }
    fputs("\"\n", f);
}

/* A Slurm time limit in seconds: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS; 0, UNLIMITED and INFINITE
 * are no limit (*secs = -1). Returns 0, or -1 when s is none of these. */
static int time_limit_s(const char *s, long long *secs)
{
    if (!strcasecmp(s, "unlimited") || !strcasecmp(s, "infinite")) {
        *secs = -1;
        return 0;
    }
    long long f[4] = {0, 0, 0, 0}; /* the fields as written, left to right */
    int nf = 0, days = strchr(s, '-') != NULL;
    for (const char *p = s;; p++) {
        if (*p < '0' || *p > '9' || nf == 4) return -1;
        char *end;
        f[nf++] = strtoll(p, &end, 10);
        if (f[nf - 1] > 1000000) return -1;
        p = end;
        if (!*p) break;
        if (*p != (days && nf == 1 ? '-' : ':')) return -1;
    }
    if (days ? nf < 2 || nf > 4 : nf > 3) return -1;
    long long d = 0, h = 0, m = 0, sec = 0;
    if (days) { /* D-HH[:MM[:SS]] */
        d = f[0], h = f[1], m = f[2], sec = f[3];
    } else if (nf == 1) { /* minutes */
        m = f[0];
    } else if (nf == 2) { /* MM:SS */
        m = f[0], sec = f[1];
    } else { /* HH:MM:SS */
        h = f[0], m = f[1], sec = f[2];
    }
    *secs = ((d * 24 + h) * 60 + m) * 60 + sec;
    if (*secs == 0) *secs = -1; /* sbatch: a limit of 0 is none */
    return 0;
}

int cmd_slurm_script(ddp_ctx *ctx, int argc, char **argv)
{
    int nodes = 1, tpn = 1, gpn = 0, cpt = 1;
    const char *time = "01:00:00", *partition = NULL, *account = NULL, *output = "mpiddp-%j.out", *name = "mpiddp",
               *exe = NULL;
    cli_opt opts[] = {
        {"nodes", OPT_INT, &nodes, NULL, 1, 1e6, "nodes (default 1)", 0},
        {"ntasks-per-node", OPT_INT, &tpn, NULL, 1, 1e4,
         "ranks per node: one per GPU, or per socket/core group (default 1)", 0},
        {"gpus-per-node", OPT_INT, &gpn, NULL, 0, 1e4, "GPUs per node (default 0: CPU job)", 0},
        {"cpus-per-task", OPT_INT, &cpt, NULL, 1, 1e4, "CPU cores per rank; also the OpenBLAS threads (default 1)", 0},
        {"time", OPT_STR, &time, NULL, 0, 0, "time limit (default 01:00:00)", 0},
        {"partition", OPT_STR, &partition, NULL, 0, 0, "partition", 0},
        {"account", OPT_STR, &account, NULL, 0, 0, "account", 0},
        {"output", OPT_STR, &output, NULL, 0, 0, "output file (default mpiddp-%j.out, appended across requeues)", 0},
        {"job-name", OPT_STR, &name, NULL, 0, 0, "job name (default mpiddp)", 0},
        {"mpiddp", OPT_STR, &exe, NULL, 0, 0, "path of the mpiddp executable in the job (default: this one)", 0},
    };
    int n = (int)(sizeof opts / sizeof opts[0]), dd = argc;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            dd = i;
            break;
        }
    const cli_cmd cmd = {
        "slurm-script", "[sbatch options] -- <train arguments>",
        "Prints an sbatch script that runs `srun --mpi=pmix mpiddp train ARGS --resume auto` with --signal=USR1@90\n"
        "and --requeue: before the time limit every rank saves last.h5 at the next step, rank 0 requeues the job,\n"
        "and the requeued job continues from that step; scancel (SIGTERM) saves last.h5 and ends the job. --resume\n"
        "auto is left out when ARGS (or their --config file) give --resume or --overwrite. Submit it with sbatch.",
        opts, n};
    int done = cli_cmd_parse(ctx, &cmd, dd, argv, NULL, 0, NULL); /* the options before -- */
    if (done >= 0) return done;
    if (dd >= argc - 1) return cli_usage(ctx, "slurm-script", "give the train arguments after --");
    const char *lines[][2] = {
        {"job-name", name}, {"time", time}, {"partition", partition}, {"account", account}, {"output", output}};
    for (int i = 0; i < 5; i++)
        if (lines[i][1] && !sbatch_value_ok(lines[i][1]))
            return cli_usage(ctx, "slurm-script",
                             "--%s: a value with a newline or a double quote cannot be an #SBATCH line", lines[i][0]);
    long long limit;
    if (time_limit_s(time, &limit) != 0)
        return cli_usage(ctx, "slurm-script",
                         "--time %s: not a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or "
                         "UNLIMITED)",
                         time);
    if (limit >= 0 && limit <= 90)
        return cli_usage(ctx, "slurm-script",
                         "--time %s: the time-limit warning comes 90 s before the limit (--signal=USR1@90): a limit "
                         "of %lld s would stop and requeue the job at its first step, every time; give more than 90 s",
                         time, limit);
    /* the train arguments as train will parse them in the job (options, values, combinations), so that a typo is
     * said now, not after the job waited in the queue */
    char **targv = malloc(sizeof *targv * (size_t)(argc - dd + 2));
    if (!targv) return cli_usage(ctx, "slurm-script", "out of memory");
    targv[0] = argv[0];
    targv[1] = "train";
    memcpy(targv + 2, argv + dd + 1, sizeof *targv * (size_t)(argc - dd - 1));
    targv[argc - dd + 1] = NULL;
    long long world = (long long)nodes * tpn;
    int chosen = 0; /* the arguments (or their --config) give --resume or --overwrite */
    int rc = cmd_train_check(ctx, argc - dd + 1, targv, world > INT_MAX ? INT_MAX : (int)world, &chosen);
    free(targv);
    if (rc >= 0) return rc;
    if (!cli_rank0(ctx)) return 0;
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = 0;
    if (!exe) exe = len > 0 ? self : "mpiddp";
    FILE *f = stdout;
    fprintf(f, "#!/bin/bash\n");
    sbatch_line(f, "job-name", name);
    fprintf(f, "#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=%d\n", nodes, tpn);
    if (gpn > 0) fprintf(f, "#SBATCH --gpus-per-node=%d\n", gpn);
    fprintf(f, "#SBATCH --cpus-per-task=%d\n", cpt);
    sbatch_line(f, "time", time);
    if (partition) sbatch_line(f, "partition", partition);
    if (account) sbatch_line(f, "account", account);
    sbatch_line(f, "output", output);
    fprintf(f, "#SBATCH --open-mode=append\n#SBATCH --signal=USR1@90\n#SBATCH --requeue\n");
    fprintf(
        f, "# Generated by `mpiddp slurm-script`. SIGUSR1 (90 s before the time limit) only sets a flag: at the next\n"
           "# step boundary the ranks agree, save RUNDIR/checkpoints/last.h5, rank 0 runs `scontrol requeue`, and the\n"
           "# requeued job continues from that exact step (--resume auto). SIGTERM (scancel, preemption) saves\n"
           "# last.h5 the same way and ends the job without a requeue.\n");
    fprintf(f, "set -euo pipefail\nexport OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}\n");
    fprintf(f, "# srun (Slurm >= 22.05) does not take --cpus-per-task from the job: pass it on\n"
               "[ -z \"${SLURM_CPUS_PER_TASK:-}\" ] || export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\n");
    fprintf(f, "echo \"mpiddp: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST\"\n");
    fprintf(f, "srun --mpi=pmix --kill-on-bad-exit=1 ");
    shq(f, exe);
    fprintf(f, " train");
    for (int i = dd + 1; i < argc; i++) {
        fputc(' ', f);
        shq(f, argv[i]);
    }
    if (!chosen) fprintf(f, " --resume auto"); /* train refuses both */
    fprintf(f, "\n");
    return 0;
}
