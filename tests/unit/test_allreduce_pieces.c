/* test_allreduce_pieces.c — ddp_allreduce with a collective timeout (watchdog.c), on one rank: it reduces a copy the
 * context owns, grown to the count asked, so that a reduction of up to DDP_WATCH_SCRATCH_MAX bytes is one collective
 * (the confusion matrix of 1000 classes: 8 MB, was 123 of 64 KiB) and a larger one runs in pieces of that size; the
 * values come back whole. The MPI_Iallreduce calls are counted through the MPI profiling interface. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/ctx.h"
#include "mpiddp.h"

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

static ddp_ctx *g_ctx;
static int g_calls; /* MPI_Iallreduce calls */

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *req)
{
    g_calls++;
    return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, req);
}

/* count int64 values i through ddp_allreduce (MAX over one rank: unchanged); returns the collectives it took */
static int reduce(int count)
{
    int64_t *v = malloc((size_t)count * sizeof *v);
    assert_non_null(v);
    for (int i = 0; i < count; i++) v[i] = i;
    g_calls = 0;
    assert_int_equal(ddp_allreduce(g_ctx, v, count, MPI_INT64_T, MPI_MAX, "a test reduction"), DDP_OK);
    for (int i = 0; i < count; i++)
        if (v[i] != i) fail_msg("value %d is %lld after the reduction", i, (long long)v[i]);
    free(v);
    return g_calls;
}

static void test_one_collective_up_to_the_cap(void **state)
{
    (void)state;
    g_ctx->watch->coll_timeout = 30;
    assert_int_equal(reduce(1), 1);
    assert_int_equal(reduce(1000 * 1000), 1); /* 8 MB: the confusion matrix of 1000 classes */
    assert_int_equal(reduce(DDP_WATCH_SCRATCH_MAX / 8), 1);
    assert_int_equal(reduce(DDP_WATCH_SCRATCH_MAX / 8 + 5), 2); /* above the cap: pieces */
    g_ctx->watch->coll_timeout = 0;
}

int main(int argc, char **argv)
{
    if (ddp_init(&argc, &argv, &g_ctx) != DDP_OK) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_collective_up_to_the_cap)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ddp_finalize(g_ctx);
    return rc;
}
