/* test_hooks.c — reads and plays the trainer's test hooks; see test_hooks.h. */
#include "mpi_ddp/train/test_hooks.h"
#include "mpi_ddp/core/settings.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

ddp_status ddp_test_hooks_open(ddp_test_hooks *h, int rank)
{
    *h = (ddp_test_hooks){
        .rank = rank,
        .stop_at = ddp_knob_int(DDP_KNOB_TEST_STOP_AT_STEP),
        .stop_rank = ddp_knob_int(DDP_KNOB_TEST_STOP_RANK),
        .stop_in_val = ddp_knob_int(DDP_KNOB_TEST_STOP_IN_VAL),
        .stop_self_rank = ddp_knob_int(DDP_KNOB_TEST_STOP_SELF_AT_START),
        .step_delay_ms = ddp_knob_int(DDP_KNOB_TEST_STEP_DELAY_MS),
        .first_delay_ms = ddp_knob_int(DDP_KNOB_TEST_FIRST_STEP_DELAY_MS),
        .monitor_offset = ddp_knob_str(DDP_KNOB_TEST_MONITOR_OFFSET),
    };
    const char *trace = ddp_knob_str(DDP_KNOB_TEST_TRACE_SAMPLES);
    if (trace) {
        char path[4200];
        snprintf(path, sizeof path, "%s.r%d", trace, rank);
        h->trace = fopen(path, "a");
        if (!h->trace) return ddp_set_error(DDP_ERR_IO, "%s: cannot open (MPIDDP_TEST_TRACE_SAMPLES)", path);
    }
    return DDP_OK;
}

void ddp_test_hooks_close(ddp_test_hooks *h)
{
    if (h->trace) fclose(h->trace);
    h->trace = NULL;
}

int ddp_test_hooks_stop_at(const ddp_test_hooks *h, int64_t step)
{
    return h->stop_at >= 0 && step == h->stop_at && h->rank == h->stop_rank;
}

void ddp_test_hooks_start(const ddp_test_hooks *h)
{
    if (h->stop_self_rank >= 0 && h->rank == h->stop_self_rank) raise(SIGSTOP);
}

void ddp_test_hooks_delay(const ddp_test_hooks *h, int first)
{
    int64_t ms = h->step_delay_ms > 0 ? h->step_delay_ms : 0;
    if (first && h->first_delay_ms > 0) ms += h->first_delay_ms;
    if (ms <= 0) return;
    struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&delay, NULL);
}

double ddp_test_hooks_monitor_offset(const ddp_test_hooks *h, int64_t epoch)
{
    double sum = 0;
    for (const char *p = h->monitor_offset; p && *p;) {
        int r;
        long long e;
        double off;
        if (sscanf(p, "%d:%lld:%lf", &r, &e, &off) == 3 && r == h->rank && e == epoch) sum += off;
        p = strchr(p, ',');
        if (p) p++;
    }
    return sum;
}

void ddp_test_hooks_trace(const ddp_test_hooks *h, int64_t epoch, int64_t step, const int64_t *ids, int64_t n)
{
    if (!h->trace) return;
    fprintf(h->trace, "%lld %lld", (long long)epoch, (long long)step);
    for (int64_t i = 0; i < n; i++) fprintf(h->trace, " %lld", (long long)ids[i]);
    fputc('\n', h->trace);
    fflush(h->trace);
}
