/* bench_util.h — what the C benchmarks share: the monotonic clock they time with, the CPU they ran on, and the
 * checked reading of their numeric options. */
#ifndef MPIDDP_BENCH_UTIL_H
#define MPIDDP_BENCH_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* seconds on CLOCK_MONOTONIC */
static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The CPU's model name from /proc/cpuinfo ("?" when unknown). */
static inline void bench_cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* 1 when /proc/cpuinfo lists flag, 0 when not, -1 when it cannot be read. */
static inline int bench_cpu_has_flag(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5)) continue;
        size_t L = strlen(flag);
        for (char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
            if (p[-1] == ' ' && (p[L] == ' ' || p[L] == '\n')) found = 1;
        break;
    }
    fclose(f);
    return found;
}

/* An option's value as an integer: all of v, decimal, within [lo, hi]. Otherwise one line on stderr naming the
 * program, the option and the range (where say is set: rank 0), and 1; 0 when *out was set. */
static inline int bench_int(const char *prog, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out,
                            int say)
{
    char *e = NULL;
    errno = 0;
    long long x = v ? strtoll(v, &e, 10) : 0;
    if (!v || e == v || *e || errno || x < lo || x > hi) {
        if (say)
            fprintf(stderr, "%s: %s %s: expected an integer from %lld to %lld\n", prog, opt, v ? v : "(no value)",
                    (long long)lo, (long long)hi);
        return 1;
    }
    *out = x;
    return 0;
}

/* The same for a number in (lo, hi] (sizes in MB). */
static inline int bench_num(const char *prog, const char *opt, const char *v, double lo, double hi, double *out,
                            int say)
{
    char *e = NULL;
    errno = 0;
    double x = v ? strtod(v, &e) : 0;
    if (!v || e == v || *e || errno || !(x > lo && x <= hi)) {
        if (say)
            fprintf(stderr, "%s: %s %s: expected a number above %g, at most %g\n", prog, opt, v ? v : "(no value)", lo,
                    hi);
        return 1;
    }
    *out = x;
    return 0;
}

/* An option's value as one of choices ("cpu|cuda"): 0 when it is, else one line and 1. */
static inline int bench_choice(const char *prog, const char *opt, const char *v, const char *choices, int say)
{
    size_t n = strlen(v);
    for (const char *c = choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL)
        if (!strncmp(c, v, n) && (c[n] == '|' || !c[n])) return 0;
    if (say) fprintf(stderr, "%s: %s %s: expected %s\n", prog, opt, v, choices);
    return 1;
}

/* -h or --help in an option's place (not as a value): the usage on standard output (where say is set) and 1, after
 * which the program exits 0; else 0. */
static inline int bench_help(int argc, char **argv, const char *usage, int say)
{
    for (int i = 1; i < argc; i += 2) /* every option takes a value: -h given as one (--data -h) is not a request */
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            if (say) printf("%s\n", usage);
            return 1;
        }
    return 0;
}

/* An option the program does not take, or one left without its value (the last argument): one line, and 1. */
static inline int bench_bad_option(const char *prog, const char *opt, int has_value, int say)
{
    if (say && has_value)
        fprintf(stderr, "%s: unknown option %s (%s --help lists them)\n", prog, opt, prog);
    else if (say)
        fprintf(stderr, "%s: %s needs a value, or is not an option (%s --help lists them)\n", prog, opt, prog);
    return 1;
}

#endif
