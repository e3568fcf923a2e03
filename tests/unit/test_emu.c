/* test_emu.c — the CUDA host emulator's own semantics, which the GPU tests rely on: stream order and the
 * lack of it between streams (made deterministic with a gate: a host operation that blocks a stream until
 * the test opens it), events, the legacy stream against blocking and non-blocking streams, NaN-filled and
 * tracked device memory, kernels whose threads meet at __syncthreads, launch limits, a divergent barrier
 * reported as a fault, cuBLAS in column-major, and NCCL over shared memory between forked processes
 * (exact sums, duplicate devices refused, an injected init failure and a hung allreduce ended by abort). */
#include "check.h"
#include "emu_cuda.h"

#include <math.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EQ(a, b) CHECK((a) == (b), "%s == %s: %lld vs %lld", #a, #b, (long long)(a), (long long)(b))

static sem_t gate;
static void wait_gate(void *arg)
{
    (void)arg;
    sem_wait(&gate);
}
static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_streams(void)
{
    cudaStream_t a, b, blocking;
    EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    EQ(cudaStreamCreate(&blocking), cudaSuccess);
    float *d;
    EQ(cudaMalloc((void **)&d, 64), cudaSuccess);
    unsigned char raw[4];
    EQ(cudaMemcpy(raw, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(raw[0] == 0xff && raw[3] == 0xff, "fresh device memory is not NaN-filled");
    /* stream a is blocked: work on b runs anyway (streams are unordered) */
    sem_init(&gate, 0, 0);
    EQ(ddp_emu_enqueue(a, wait_gate, NULL, NULL), cudaSuccess);
    EQ(cudaMemsetAsync(d, 0, 64, b), cudaSuccess);
    EQ(cudaStreamSynchronize(b), cudaSuccess);
    EQ(cudaStreamQuery(a), cudaErrorNotReady);
    /* with an event, b waits for a */
    cudaEvent_t e;
    EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    EQ(cudaEventRecord(e, a), cudaSuccess);
    EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    EQ(cudaMemsetAsync(d, 1, 64, b), cudaSuccess);
    sleep_ms(50);
    EQ(cudaStreamQuery(b), cudaErrorNotReady);
    EQ(cudaEventQuery(e), cudaErrorNotReady);
    sem_post(&gate);
    EQ(cudaStreamSynchronize(b), cudaSuccess);
    EQ(cudaEventSynchronize(e), cudaSuccess);
    /* the legacy stream is not ordered with a non-blocking stream, but it is with a blocking one */
    EQ(ddp_emu_enqueue(a, wait_gate, NULL, NULL), cudaSuccess);
    EQ(cudaMemset(d, 2, 64), cudaSuccess);
    EQ(cudaStreamSynchronize(NULL), cudaSuccess); /* done although a is still blocked */
    EQ(cudaStreamQuery(a), cudaErrorNotReady);
    sem_post(&gate);
    EQ(cudaStreamSynchronize(a), cudaSuccess);
    EQ(ddp_emu_enqueue(blocking, wait_gate, NULL, NULL), cudaSuccess);
    EQ(cudaMemset(d, 3, 64), cudaSuccess);
    sleep_ms(50);
    EQ(cudaStreamQuery(NULL), cudaErrorNotReady); /* waits for the blocking stream's earlier work */
    sem_post(&gate);
    EQ(cudaStreamSynchronize(NULL), cudaSuccess);
    EQ(cudaMemcpy(raw, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EQ(raw[0], 3);
    /* memory checks */
    float h[16];
    EQ(cudaMemcpy(d, h, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EQ(cudaGetLastError(), cudaErrorInvalidValue);
    EQ(cudaGetLastError(), cudaSuccess);
    EQ(cudaFree(h), cudaErrorInvalidDevicePointer);
    cudaGetLastError();
    EQ(cudaFree(d), cudaSuccess);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaStreamDestroy(blocking);
}

/* A block reduction through shared memory: thread 0 of each block writes the sum of its threads' values. */
typedef struct {
    const float *x;
    double *out;
} red_args;
static __thread double sh[1024];
static void k_reduce(void *p)
{
    red_args *a = p;
    unsigned t = ddp_emu_threadIdx.x, n = ddp_emu_blockDim.x;
    sh[t] = a->x[ddp_emu_blockIdx.x * n + t];
    ddp_emu_syncthreads();
    for (unsigned w = n / 2; w > 0; w >>= 1) {
        if (t < w) sh[t] += sh[t + w];
        ddp_emu_syncthreads();
    }
    if (t == 0) a->out[ddp_emu_blockIdx.x] = sh[0];
}
/* Reverses a block's slice through dynamic shared memory: wrong without the barrier. */
typedef struct {
    float *x;
} rev_args;
static void k_reverse(void *p)
{
    rev_args *a = p;
    float *s = ddp_emu_dynamic_smem();
    unsigned t = ddp_emu_threadIdx.x, n = ddp_emu_blockDim.x, base = ddp_emu_blockIdx.x * n;
    s[t] = a->x[base + t];
    ddp_emu_syncthreads();
    a->x[base + t] = s[n - 1 - t];
}
static void k_divergent(void *p)
{
    (void)p;
    if (ddp_emu_threadIdx.x == 5) ddp_emu_syncthreads();
}
static void k_nop(void *p) { (void)p; }

static void test_kernels(void)
{
    enum { B = 256, G = 40 };
    float *hx = malloc(B * G * sizeof(float)), *dx;
    double *dout, hout[G];
    for (int i = 0; i < B * G; i++) hx[i] = (float)(i % 97);
    EQ(cudaMalloc((void **)&dx, B * G * sizeof(float)), cudaSuccess);
    EQ(cudaMalloc((void **)&dout, sizeof hout), cudaSuccess);
    EQ(cudaMemcpy(dx, hx, B * G * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    red_args ra = {dx, dout};
    EQ(ddp_emu_launch("k_reduce", (dim3){G, 1, 1}, (dim3){B, 1, 1}, 0, NULL, k_reduce, &ra, NULL), cudaSuccess);
    EQ(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost), cudaSuccess);
    int ok = 1;
    for (int g = 0; g < G; g++) {
        double want = 0;
        for (int i = 0; i < B; i++) want += hx[g * B + i];
        ok &= hout[g] == want;
    }
    CHECK(ok, "shared-memory reduction with __syncthreads is wrong");
    rev_args rv = {dx};
    EQ(ddp_emu_launch("k_reverse", (dim3){G, 1, 1}, (dim3){B, 1, 1}, B * sizeof(float), NULL, k_reverse, &rv, NULL), cudaSuccess);
    EQ(cudaMemcpy(hx, dx, B * G * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    ok = 1;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < B; i++) ok &= hx[g * B + i] == (float)((g * B + B - 1 - i) % 97);
    CHECK(ok, "block reversal through shared memory is wrong");
    /* limits, as a GPU enforces them: the error is returned and kept for cudaGetLastError */
    EQ(ddp_emu_launch("k_nop", (dim3){1, 1, 1}, (dim3){1025, 1, 1}, 0, NULL, k_nop, NULL, NULL), cudaErrorInvalidConfiguration);
    EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EQ(ddp_emu_launch("k_nop", (dim3){1, 65536, 1}, (dim3){32, 1, 1}, 0, NULL, k_nop, NULL, NULL), cudaErrorInvalidConfiguration);
    EQ(ddp_emu_launch("k_nop", (dim3){1, 1, 1}, (dim3){32, 1, 1}, 49 << 10, NULL, k_nop, NULL, NULL), cudaErrorInvalidValue);
    EQ(ddp_emu_launch("k_nop", (dim3){0, 1, 1}, (dim3){32, 1, 1}, 0, NULL, k_nop, NULL, NULL), cudaErrorInvalidConfiguration);
    cudaGetLastError();
    /* a barrier reached by one thread only is a launch failure, sticky, with the kernel's name */
    EQ(ddp_emu_launch("k_divergent", (dim3){1, 1, 1}, (dim3){64, 1, 1}, 0, NULL, k_divergent, NULL, NULL), cudaSuccess);
    EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    CHECK(strstr(ddp_emu_last_fault(), "k_divergent") != NULL, "fault text: %s", ddp_emu_last_fault());
    free(hx);
}

static void test_blas(void)
{
    enum { M = 37, N = 29, K = 13 };
    float A[K * M], Bm[N * K], C[M * N], ref[M * N];
    for (int i = 0; i < K * M; i++) A[i] = (float)((i * 7) % 11) - 5;
    for (int i = 0; i < N * K; i++) Bm[i] = (float)((i * 5) % 13) - 6;
    /* C = A^T B^T, column-major: A is [K x M] (lda K), B is [N x K] (ldb N) */
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * Bm[k * N + j];
            ref[j * M + i] = s;
        }
    float *dA, *dB, *dC;
    cudaMalloc((void **)&dA, sizeof A), cudaMalloc((void **)&dB, sizeof Bm), cudaMalloc((void **)&dC, sizeof C);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaMemcpy(dB, Bm, sizeof Bm, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, M, N, K, &one, dA, K, dB, N, &zero, dC, M), CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);
    CHECK(memcmp(C, ref, sizeof C) == 0, "sgemm (T, T) differs from the triple loop");
    EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M - 1, dB, K, &zero, dC, M), CUBLAS_STATUS_INVALID_VALUE);
    EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, M, N, K, &one, A, K, dB, N, &zero, dC, M), CUBLAS_STATUS_INVALID_VALUE);
    cublasDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* NCCL between forked ranks; each child exits with the number of its failed checks */
static int nccl_child(int rank, int nranks, ncclUniqueId id, int dev, int blocking, const char *fault)
{
    if (fault) setenv("MPIDDP_EMU_NCCL_FAULT", fault, 1);
    checks = failures = 0;
    EQ(cudaSetDevice(dev), cudaSuccess);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t c;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &cfg), a = r;
    for (int i = 0; i < 2000 && a == ncclInProgress; i++) {
        ncclCommGetAsyncError(c, &a);
        if (a == ncclInProgress) sleep_ms(1);
    }
    if (fault && !strncmp(fault, "init", 4)) { /* rank 1 fails at once; the others give up after the deadline */
        if (rank == 1) EQ(a, ncclSystemError);
        else CHECK(a == ncclInProgress || a == ncclRemoteError, "rank %d: init should still wait (or see a peer abort): %d", rank, a);
        ncclCommAbort(c);
        return failures;
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
    EQ(ncclAllReduce(d, d, n, ncclFloat, ncclSum, c, s), ncclSuccess);
    if (fault) { /* hang: no rank's stream completes; abort drains it (every rank checks before any aborts) */
        sleep_ms(300);
        EQ(cudaStreamQuery(s), cudaErrorNotReady);
        sleep_ms(700);
        ncclCommAbort(c);
        EQ(cudaStreamSynchronize(s), cudaSuccess);
        return failures;
    }
    EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++) want += (float)(q + 1) * 0.1f + (float)(i % 7);
        ok &= h[i] == want; /* rank order: the same bits as this loop, on every rank */
    }
    CHECK(ok, "allreduce result differs from the rank-ordered sum on rank %d", rank);
    ncclCommDestroy(c);
    return failures;
}

static void run_nccl(int nranks, const int *devs, int blocking, const char *fault, int want_status)
{
    ncclUniqueId id;
    EQ(ncclGetUniqueId(&id), ncclSuccess);
    pid_t pid[8];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) _exit(nccl_child(r, nranks, id, devs[r], blocking, fault));
    }
    for (int r = 0; r < nranks; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 200;
        CHECK(code == want_status, "nccl rank %d (%s, fault %s): exit %d, want %d", r, blocking ? "blocking" : "non-blocking",
              fault ? fault : "none", code, want_status);
    }
}

int main(void)
{
    setenv("MPIDDP_EMU_DEVICES", "4", 1);
    int n = 0;
    EQ(cudaGetDeviceCount(&n), cudaSuccess);
    EQ(n, 4);
    /* first, while this process has no stream threads yet (fork copies only the calling thread) */
    const int devs[3] = {0, 1, 2}, dup[3] = {0, 0, 1};
    run_nccl(3, devs, 1, NULL, 0);
    run_nccl(3, devs, 0, NULL, 0);
    run_nccl(3, dup, 0, NULL, 100);
    run_nccl(3, devs, 0, "init:1", 0);
    run_nccl(3, devs, 0, "hang:2", 0);
    test_blas();
    test_streams();
    test_kernels(); /* last: it leaves the sticky fault set */
    return check_summary();
}
