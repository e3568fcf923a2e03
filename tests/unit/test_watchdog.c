/* test_watchdog.c — the collective-timeout report's reading of the progress board (mpi_ddp/comm/watchdog.c), with
 * two rank contexts over one board directory in one process (no MPI calls): the scenarios below, in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/status.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rank r of 2 over the board in dir, with --collective-timeout 5 */
static struct ddp_watch boards[2]; /* each rank's watchdog state (ddp_init allocates it with the context) */
static void rank_ctx(ddp_ctx *c, const char *dir, int r)
{
    memset(c, 0, sizeof *c);
    c->watch = &boards[r];
    memset(c->watch, 0, sizeof *c->watch);
    c->topo.rank = r, c->topo.size = 2, c->watch->coll_timeout = 5;
    c->cli_names = 1; /* the report names --collective-timeout, as under mpiddp train (else cfg.collective_timeout) */
    snprintf(c->watch->dir, sizeof c->watch->dir, "%s", dir);
    char p[4400];
    snprintf(p, sizeof p, "%s/rank%d", dir, r);
    c->watch->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!(c->watch->fd >= 0)) fail_msg("open %s", p);
}

/* the wall-clock time of rank r's record (the board's layout: int64 step, double when, phase) */
static double record_time(const char *dir, int r)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/rank%d", dir, r);
    struct {
        int64_t step;
        double when;
        char phase[48];
    } e = {0};
    int fd = open(p, O_RDONLY);
    ssize_t got = fd >= 0 ? pread(fd, &e, sizeof e, 0) : -1;
    if (fd >= 0) close(fd);
    return got == (ssize_t)sizeof e ? e.when : 0.0;
}
static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static atomic_int beating;
static void *heartbeat(void *arg)
{
    ddp_ctx *c = arg;
    while (atomic_load(&beating)) {
        ddp_watch_mark(c, 9, "gradient allreduce");
        usleep(100000);
    }
    return NULL;
}

/* a wait loop's heartbeat: re-marks the current position (ctx->watch->phase itself), every 0.5 s */
static atomic_int waiting;
static void *waiter(void *arg)
{
    ddp_ctx *c = arg;
    while (atomic_load(&waiting)) {
        ddp_watch_mark(c, c->watch->step, c->watch->phase);
        for (int i = 0; i < 10 && atomic_load(&waiting); i++) usleep(50000);
    }
    return NULL;
}

static char dir[] = "/tmp/test_watchdog.XXXXXX";
static ddp_ctx r0, r1;
static const double stale = 2.5; /* min(6 heartbeats, timeout / 2) at --collective-timeout 5 */

/* a rank whose record is older than the stale limit is named at once ("missing: rank 1 silent") */
static void test_stale_rank_named_at_once(void **state)
{
    (void)state;
    ddp_watch_mark(&r0, 9, "gradient allreduce");
    ddp_watch_mark(&r1, 9, "forward/backward");
    sleep(3);
    double t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    double took = now_s() - t;
    if (strstr(ddp_last_error(), "collective timeout: rank 0 waited 5 s in the gradient allreduce at step 9") == NULL)
        fail_msg("report: %s", ddp_last_error());
    if (strstr(ddp_last_error(), "missing: rank 1 silent for 3.") == NULL)
        fail_msg("stale rank not named: %s", ddp_last_error());
    if (!(took < 1.0)) fail_msg("a stale rank was named after %.2f s, not at once", took);
}

/* a rank that stopped just before the deadline (its record still fresh) is named after the second reading of the
 * board, not reported as alive (the race of faults.sh's stalled rank: rank 0 timed out about when rank 2 stopped and
 * said "every rank is alive and waiting"); while it waits to read the board again, the reporting rank keeps its own
 * record fresh */
static void test_rank_stopped_before_deadline(void **state)
{
    (void)state;
    ddp_watch_mark(&r1, 9, "gradient allreduce");
    double t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    double took = now_s() - t;
    if (!(strstr(ddp_last_error(), "missing: rank 1 silent for 2.") != NULL && !strstr(ddp_last_error(), "alive")))
        fail_msg("a rank stopped just before the deadline: %s", ddp_last_error());
    if (!(took >= stale - 0.01 && took < stale + 1.0)) fail_msg("second reading after %.2f s (want %.1f)", took, stale);
    /* rank 0 kept its own record fresh meanwhile */
    if (!(wall_s() - record_time(dir, 0) < 1.0))
        fail_msg("rank 0's record is %.2f s old after the report", wall_s() - record_time(dir, 0));
}

/* a rank that keeps heartbeating is reported alive */
static void test_heartbeating_rank_alive(void **state)
{
    (void)state;
    pthread_t th;
    atomic_store(&beating, 1);
    if (pthread_create(&th, NULL, heartbeat, &r1) != 0) fail_msg("pthread_create");
    usleep(200000);
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    atomic_store(&beating, 0);
    pthread_join(th, NULL);
    if (!(strstr(ddp_last_error(), "every rank is alive and waiting") != NULL && !strstr(ddp_last_error(), "missing")))
        fail_msg("a heartbeating rank: %s", ddp_last_error());
}

/* at --collective-timeout 0.3 the seconds read "waited 0.3 s ... (--collective-timeout 0.3)", not "0", and a rank
 * waiting in the collective (its wait loop's heartbeat, at the fixed 0.5 s of the slowest loop) is not named silent */
static void test_short_timeout_waiting_rank(void **state)
{
    (void)state;
    pthread_t th;
    r0.watch->coll_timeout = r1.watch->coll_timeout = 0.3;
    ddp_watch_mark(&r0, 12, "gradient allreduce");
    ddp_watch_mark(&r1, 12, "gradient allreduce");
    atomic_store(&waiting, 1);
    if (pthread_create(&th, NULL, waiter, &r1) != 0) fail_msg("pthread_create");
    usleep(450000); /* rank 1's record is 0.45 s old: older than the stale limit (0.15 s), but it says "waiting" */
    ddp_watch_report(&r0, "the gradient allreduce", 0.3012);
    char why[2048];
    snprintf(why, sizeof why, "%s", ddp_last_error());
    atomic_store(&waiting, 0); /* before a failing check ends the test */
    pthread_join(th, NULL);
    if (!strstr(why, "collective timeout: rank 0 waited 0.3 s in the gradient allreduce at step 12 "
                     "(--collective-timeout 0.3)"))
        fail_msg("seconds at --collective-timeout 0.3: %s", why);
    if (!(!strstr(why, "silent") && strstr(why, "every rank is alive and waiting") != NULL))
        fail_msg("a rank waiting in the collective was named: %s", why);
}

/* a rank stopped outside a collective is named silent at once (at --collective-timeout 0.3, set by the test before) */
static void test_stopped_outside_collective(void **state)
{
    (void)state;
    ddp_watch_mark(&r1, 12, "forward/backward");
    usleep(400000);
    double t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 0.3);
    if (!(strstr(ddp_last_error(), "missing: rank 1 silent for 0.4 s (last at step 12 in 'forward/backward')") !=
              NULL &&
          now_s() - t < 0.1))
        fail_msg("a stopped rank at --collective-timeout 0.3: %s", ddp_last_error());
}

/* a rank stopped while waiting is named silent, and where it waited */
static void test_stopped_while_waiting(void **state)
{
    (void)state;
    ddp_watch_mark(&r1, 12, "gradient allreduce");
    ddp_watch_mark(&r1, r1.watch->step, r1.watch->phase);
    sleep(1);
    ddp_watch_report(&r0, "the gradient allreduce", 0.3);
    if (!strstr(ddp_last_error(),
                "missing: rank 1 silent for 1.0 s (last at step 12 while waiting in 'gradient allreduce')"))
        fail_msg("a rank stopped while waiting: %s", ddp_last_error());
}

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(dir) == NULL) fail_msg("mkdtemp");
    rank_ctx(&r0, dir, 0);
    rank_ctx(&r1, dir, 1);
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    ddp_watch_close(&r0);
    ddp_watch_close(&r1);
    char p[4400];
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/rank%d", dir, r);
        unlink(p);
    }
    rmdir(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* in order: each scenario starts from the board the one before left */
        cmocka_unit_test(test_stale_rank_named_at_once),   cmocka_unit_test(test_rank_stopped_before_deadline),
        cmocka_unit_test(test_heartbeating_rank_alive),    cmocka_unit_test(test_short_timeout_waiting_rank),
        cmocka_unit_test(test_stopped_outside_collective), cmocka_unit_test(test_stopped_while_waiting),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
