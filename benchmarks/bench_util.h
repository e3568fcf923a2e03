/* bench_util.h — what the C benchmarks share: the monotonic clock they time with, and the CPU they ran on. */
#ifndef MPIDDP_BENCH_UTIL_H
#define MPIDDP_BENCH_UTIL_H

#include <stdio.h>
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

#endif
