/* test_watchdog.c — the timeout report's reading of the progress board (mpi_ddp/comm/watchdog.c), with two
 * rank contexts over one board directory in one process (no MPI calls):
 *   - a rank whose record is older than the stale limit is named at once ("missing: rank 1 silent");
 *   - a rank that stopped just before the deadline (its record still fresh) is named after the second
 *     reading of the board, not reported as alive (the race of faults.sh's stalled rank: rank 0 timed out
 *     about when rank 2 stopped and said "every rank is alive and waiting");
 *   - while it waits to read the board again, the reporting rank keeps its own record fresh;
 *   - a rank that keeps heartbeating is reported alive;
 *   - at --collective-timeout 0.3 the seconds read "waited 0.3 s ... (--collective-timeout 0.3)", not "0", and a
 *     rank waiting in the collective (its wait loop's heartbeat, at the fixed 0.5 s of the slowest loop) is not
 *     named silent, while a rank stopped outside a collective is, and one stopped while waiting says so. */
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/status.h"
#include "check.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
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
    snprintf(c->watch->dir, sizeof c->watch->dir, "%s", dir);
    char p[4400];
    snprintf(p, sizeof p, "%s/rank%d", dir, r);
    c->watch->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(c->watch->fd >= 0, "open %s", p);
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

int main(void)
{
    char dir[] = "/tmp/test_watchdog.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    ddp_ctx r0, r1;
    rank_ctx(&r0, dir, 0);
    rank_ctx(&r1, dir, 1);
    const double stale = 2.5; /* min(6 heartbeats, timeout / 2) at --collective-timeout 5 */

    /* 1. rank 1 stopped long ago: named at once */
    ddp_watch_mark(&r0, 9, "gradient allreduce");
    ddp_watch_mark(&r1, 9, "forward/backward");
    sleep(3);
    double t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    double took = now_s() - t;
    CHECK(strstr(ddp_last_error(), "collective timeout: rank 0 waited 5 s in the gradient allreduce at step 9") != NULL,
          "report: %s", ddp_last_error());
    CHECK(strstr(ddp_last_error(), "missing: rank 1 silent for 3.") != NULL, "stale rank not named: %s", ddp_last_error());
    CHECK(took < 1.0, "a stale rank was named after %.2f s, not at once", took);

    /* 2. rank 1 stopped just now (its record fresh): named after the second reading, not called alive */
    ddp_watch_mark(&r1, 9, "gradient allreduce");
    t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    took = now_s() - t;
    CHECK(strstr(ddp_last_error(), "missing: rank 1 silent for 2.") != NULL && !strstr(ddp_last_error(), "alive"),
          "a rank stopped just before the deadline: %s", ddp_last_error());
    CHECK(took >= stale - 0.01 && took < stale + 1.0, "second reading after %.2f s (want %.1f)", took, stale);
    /* rank 0 kept its own record fresh meanwhile */
    CHECK(wall_s() - record_time(dir, 0) < 1.0, "rank 0's record is %.2f s old after the report", wall_s() - record_time(dir, 0));

    /* 3. rank 1 heartbeating: alive and waiting */
    atomic_store(&beating, 1);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, heartbeat, &r1) == 0, "pthread_create");
    usleep(200000);
    ddp_watch_report(&r0, "the gradient allreduce", 5.0);
    atomic_store(&beating, 0);
    pthread_join(th, NULL);
    CHECK(strstr(ddp_last_error(), "every rank is alive and waiting") != NULL && !strstr(ddp_last_error(), "missing"),
          "a heartbeating rank: %s", ddp_last_error());

    /* 4. --collective-timeout 0.3: %g seconds; rank 1 waits in the collective beside rank 0 */
    r0.watch->coll_timeout = r1.watch->coll_timeout = 0.3;
    ddp_watch_mark(&r0, 12, "gradient allreduce");
    ddp_watch_mark(&r1, 12, "gradient allreduce");
    atomic_store(&waiting, 1);
    CHECK(pthread_create(&th, NULL, waiter, &r1) == 0, "pthread_create");
    usleep(450000); /* rank 1's record is 0.45 s old: older than the stale limit (0.15 s), but it says "waiting" */
    ddp_watch_report(&r0, "the gradient allreduce", 0.3012);
    CHECK(strstr(ddp_last_error(), "collective timeout: rank 0 waited 0.3 s in the gradient allreduce at step 12 (--collective-timeout 0.3)") != NULL,
          "seconds at --collective-timeout 0.3: %s", ddp_last_error());
    CHECK(!strstr(ddp_last_error(), "silent") && strstr(ddp_last_error(), "every rank is alive and waiting") != NULL,
          "a rank waiting in the collective was named: %s", ddp_last_error());
    atomic_store(&waiting, 0);
    pthread_join(th, NULL);

    /* 5. rank 1 stopped outside a collective 0.4 s ago: silent, at once */
    ddp_watch_mark(&r1, 12, "forward/backward");
    usleep(400000);
    t = now_s();
    ddp_watch_report(&r0, "the gradient allreduce", 0.3);
    CHECK(strstr(ddp_last_error(), "missing: rank 1 silent for 0.4 s (last at step 12 in 'forward/backward')") != NULL &&
          now_s() - t < 0.1, "a stopped rank at --collective-timeout 0.3: %s", ddp_last_error());

    /* 6. rank 1 stopped while waiting (its heartbeats ended 1 s ago): silent, and where it waited */
    ddp_watch_mark(&r1, 12, "gradient allreduce");
    ddp_watch_mark(&r1, r1.watch->step, r1.watch->phase);
    sleep(1);
    ddp_watch_report(&r0, "the gradient allreduce", 0.3);
    CHECK(strstr(ddp_last_error(), "missing: rank 1 silent for 1.0 s (last at step 12 while waiting in 'gradient allreduce')") != NULL,
          "a rank stopped while waiting: %s", ddp_last_error());

    ddp_watch_close(&r0);
    ddp_watch_close(&r1);
    char p[4400];
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/rank%d", dir, r);
        unlink(p);
    }
    rmdir(dir);
    return check_summary();
}
