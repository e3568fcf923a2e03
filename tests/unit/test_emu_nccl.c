/* test_emu_nccl.c — the emulated NCCL between forked ranks (test cases of test_emu_runtime.c's main): exact sums,
 * blocking and non-blocking communicators, a duplicate device, an injected init failure, a hang ended by abort. */
#include "test_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* NCCL between forked ranks. A forked rank cannot report through cmocka (a failed assertion would jump into the
 * child's copy of the test runner), so it counts its failed checks, each printed, and exits with the count. */
static int child_failures;
#define CHILD_EXPECT(cond, ...)                                  \
    do {                                                         \
        if (!(cond)) {                                           \
            child_failures++;                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
        }                                                        \
    } while (0)
#define CHILD_EQ(a, b) CHILD_EXPECT((a) == (b), "%s == %s: %lld vs %lld", #a, #b, (long long)(a), (long long)(b))

static int nccl_child(int rank, int nranks, ncclUniqueId id, int dev, int blocking, const char *fault)
{
    if (fault) setenv("MPIDDP_EMU_NCCL_FAULT", fault, 1);
    child_failures = 0;
    CHILD_EQ(cudaSetDevice(dev), cudaSuccess);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t c;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &cfg), a = r;
    for (int i = 0; i < 2000 && a == ncclInProgress; i++) {
        ncclCommGetAsyncError(c, &a);
        if (a == ncclInProgress) sleep_ms(1);
    }
    if (fault && !strncmp(fault, "init", 4)) { /* rank 1 fails at once; the others give up after the deadline */
        if (rank == 1)
            CHILD_EQ(a, ncclSystemError);
        else
            CHILD_EXPECT(a == ncclInProgress || a == ncclRemoteError,
                         "rank %d: init should still wait (or see a peer abort): %d", rank, a);
        ncclCommAbort(c);
        return child_failures;
    }
    if (a != ncclSuccess) {
        ncclCommAbort(c);
        return a == ncclInvalidUsage ? 100 : 1; /* 100: refused (duplicate device) */
    }
    size_t n = 3 << 20; /* several chunks */
    float *h = malloc(n * sizeof(float)), *d;
    for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) * 0.1f + (float)(i % 7);
    cudaMalloc((void **)&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CHILD_EQ(ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, s), ncclSuccess);
    if (fault) { /* hang: no rank's stream completes; abort drains it (every rank checks before any aborts) */
        sleep_ms(300);
        CHILD_EQ(cudaStreamQuery(s), cudaErrorNotReady);
        sleep_ms(700);
        ncclCommAbort(c);
        CHILD_EQ(cudaStreamSynchronize(s), cudaSuccess);
        return child_failures;
    }
    CHILD_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++) want += (float)(q + 1) * 0.1f + (float)(i % 7);
        ok &= h[i] == want; /* rank order: the same bits as this loop, on every rank */
    }
    CHILD_EXPECT(ok, "allreduce result differs from the rank-ordered sum on rank %d", rank);
    ncclCommDestroy(c);
    return child_failures;
}

static void run_nccl(int nranks, const int *devs, int blocking, const char *fault, int want_status)
{
    ncclUniqueId id;
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    pid_t pid[8];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) _exit(nccl_child(r, nranks, id, devs[r], blocking, fault));
    }
    int code[8];
    for (int r = 0; r < nranks; r++) { /* every rank waited for before any check fails the test */
        int st = 0;
        waitpid(pid[r], &st, 0);
        code[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
    }
    for (int r = 0; r < nranks; r++)
        if (code[r] != want_status)
            fail_msg("nccl rank %d (%s, fault %s): exit %d, want %d", r, blocking ? "blocking" : "non-blocking",
                     fault ? fault : "none", code[r], want_status);
}

/* NCCL first, while this process has no stream threads yet (fork copies only the calling thread): exact sums with
 * blocking and non-blocking communicators, a duplicate device refused, an injected init failure, a hung allreduce
 * ended by abort */
static const int three_devs[3] = {0, 1, 2}, dup_devs[3] = {0, 0, 1};
void test_nccl_blocking(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 1, NULL, 0);
}
void test_nccl_nonblocking(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, NULL, 0);
}
void test_nccl_duplicate_device(void **state)
{
    (void)state;
    run_nccl(3, dup_devs, 0, NULL, 100);
}
void test_nccl_init_fault(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, "init:1", 0);
}
void test_nccl_hang_abort(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, "hang:2", 0);
}
