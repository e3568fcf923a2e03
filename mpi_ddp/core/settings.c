/* settings.c — reads the knobs settings.h declares, and the launchers' integer variables. */
#include "mpi_ddp/core/settings.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *name; /* the variable's name without MPIDDP_ */
    int64_t dflt;
    int is_str;
} knobs[DDP_KNOB_COUNT] = {
#define KNOB_I_(name, dflt, meaning) {#name, dflt, 0},
#define KNOB_S_(name, meaning) {#name, 0, 1},
    DDP_KNOBS(KNOB_I_, KNOB_S_)
#undef KNOB_I_
#undef KNOB_S_
};

static const char *knob_raw(ddp_knob k)
{
    char key[64];
    snprintf(key, sizeof key, "MPIDDP_%s", knobs[k].name);
    const char *v = getenv(key);
    return v && *v ? v : NULL;
}

int64_t ddp_knob_int(ddp_knob k)
{
    const char *v = knob_raw(k);
    if (!v || knobs[k].is_str) return knobs[k].dflt;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end ? knobs[k].dflt : (int64_t)x;
}

const char *ddp_knob_str(ddp_knob k) { return knobs[k].is_str ? knob_raw(k) : NULL; }

int ddp_env_plain_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end && *end != '(') return dflt; /* SLURM_TASKS_PER_NODE style "2(x2)" keeps the first number */
    return (int)x;
}

int ddp_blas_threads_from_env(void)
{
    int n = ddp_env_plain_int("SLURM_CPUS_PER_TASK", -1);
    if (n < 1) n = ddp_env_plain_int("OMP_NUM_THREADS", -1);
    return n < 1 ? 1 : n;
}
