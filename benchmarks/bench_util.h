/* bench_util.h — what the C benchmarks share: the monotonic clock they time with. */
#ifndef MPIDDP_BENCH_UTIL_H
#define MPIDDP_BENCH_UTIL_H

#include <time.h>

/* seconds on CLOCK_MONOTONIC */
static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
