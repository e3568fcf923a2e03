/* test_emu_runtime.c — the CUDA host emulator's runtime: streams, events, device memory, kernels, __syncthreads, launch
 * limits, the visible devices; the stream gate; main of test_cuda_emu, whose other cases are cuBLAS (test_emu_blas.c),
 * NCCL (test_emu_nccl.c), cuDNN (test_emu_cudnn*.c), wmma and the warp shuffles (test_emu_wmma.cpp). */
#include "test_emu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

sem_t gate; /* the stream gate: test_emu.h */
static int gates_shut;
static void wait_gate(void *arg)
{
    (void)arg;
    sem_wait(&gate);
}
cudaError_t shut_gate(cudaStream_t s)
{
    gates_shut++;
    return ddp_emu_enqueue(s, wait_gate, NULL, NULL);
}
void open_gate(void)
{
    gates_shut--;
    sem_post(&gate);
}
int open_gates(void **state)
{
    (void)state;
    while (gates_shut > 0) open_gate();
    return 0;
}
void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_streams(void **state)
{
    (void)state;
    cudaStream_t a, b, blocking;
    assert_int_equal(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreate(&blocking), cudaSuccess);
    float *d;
    assert_int_equal(cudaMalloc((void **)&d, 64), cudaSuccess);
    unsigned char raw[4];
    assert_int_equal(cudaMemcpy(raw, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    if (!(raw[0] == 0xff && raw[3] == 0xff)) fail_msg("fresh device memory is not NaN-filled");
    /* stream a is blocked: work on b runs anyway (streams are unordered) */
    sem_init(&gate, 0, 0);
    assert_int_equal(shut_gate(a), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(d, 0, 64, b), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(b), cudaSuccess);
    assert_int_equal(cudaStreamQuery(a), cudaErrorNotReady);
    /* with an event, b waits for a */
    cudaEvent_t e;
    assert_int_equal(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaEventRecord(e, a), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(d, 1, 64, b), cudaSuccess);
    sleep_ms(50);
    assert_int_equal(cudaStreamQuery(b), cudaErrorNotReady);
    assert_int_equal(cudaEventQuery(e), cudaErrorNotReady);
    open_gate();
    assert_int_equal(cudaStreamSynchronize(b), cudaSuccess);
    assert_int_equal(cudaEventSynchronize(e), cudaSuccess);
    /* the legacy stream is not ordered with a non-blocking stream, but it is with a blocking one */
    assert_int_equal(shut_gate(a), cudaSuccess);
    assert_int_equal(cudaMemset(d, 2, 64), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(NULL), cudaSuccess); /* done although a is still blocked */
    assert_int_equal(cudaStreamQuery(a), cudaErrorNotReady);
    open_gate();
    assert_int_equal(cudaStreamSynchronize(a), cudaSuccess);
    assert_int_equal(shut_gate(blocking), cudaSuccess);
    assert_int_equal(cudaMemset(d, 3, 64), cudaSuccess);
    sleep_ms(50);
    assert_int_equal(cudaStreamQuery(NULL), cudaErrorNotReady); /* waits for the blocking stream's earlier work */
    open_gate();
    assert_int_equal(cudaStreamSynchronize(NULL), cudaSuccess);
    assert_int_equal(cudaMemcpy(raw, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(raw[0], 3);
    /* memory checks */
    float h[16];
    assert_int_equal(cudaMemcpy(d, h, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaFree(h), cudaErrorInvalidDevicePointer);
    cudaGetLastError();
    assert_int_equal(cudaFree(d), cudaSuccess);
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

static void test_kernels(void **state)
{
    (void)state;
    enum { B = 256, G = 40 };
    float *hx = malloc(B * G * sizeof(float)), *dx;
    double *dout, hout[G];
    for (int i = 0; i < B * G; i++) hx[i] = (float)(i % 97);
    assert_int_equal(cudaMalloc((void **)&dx, B * G * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&dout, sizeof hout), cudaSuccess);
    assert_int_equal(cudaMemcpy(dx, hx, B * G * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    red_args ra = {dx, dout};
    assert_int_equal(ddp_emu_launch("k_reduce", (dim3){G, 1, 1}, (dim3){B, 1, 1}, 0, NULL, k_reduce, &ra, NULL),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost), cudaSuccess);
    int ok = 1;
    for (int g = 0; g < G; g++) {
        double want = 0;
        for (int i = 0; i < B; i++) want += hx[g * B + i];
        ok &= hout[g] == want;
    }
    if (!ok) fail_msg("shared-memory reduction with __syncthreads is wrong");
    rev_args rv = {dx};
    assert_int_equal(
        ddp_emu_launch("k_reverse", (dim3){G, 1, 1}, (dim3){B, 1, 1}, B * sizeof(float), NULL, k_reverse, &rv, NULL),
        cudaSuccess);
    assert_int_equal(cudaMemcpy(hx, dx, B * G * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    ok = 1;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < B; i++) ok &= hx[g * B + i] == (float)((g * B + B - 1 - i) % 97);
    if (!ok) fail_msg("block reversal through shared memory is wrong");
    /* limits, as a GPU enforces them: the error is returned and kept for cudaGetLastError */
    assert_int_equal(ddp_emu_launch("k_nop", (dim3){1, 1, 1}, (dim3){1025, 1, 1}, 0, NULL, k_nop, NULL, NULL),
                     cudaErrorInvalidConfiguration);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    assert_int_equal(ddp_emu_launch("k_nop", (dim3){1, 65536, 1}, (dim3){32, 1, 1}, 0, NULL, k_nop, NULL, NULL),
                     cudaErrorInvalidConfiguration);
    assert_int_equal(ddp_emu_launch("k_nop", (dim3){1, 1, 1}, (dim3){32, 1, 1}, 49 << 10, NULL, k_nop, NULL, NULL),
                     cudaErrorInvalidValue);
    assert_int_equal(ddp_emu_launch("k_nop", (dim3){0, 1, 1}, (dim3){32, 1, 1}, 0, NULL, k_nop, NULL, NULL),
                     cudaErrorInvalidConfiguration);
    cudaGetLastError();
    /* a barrier reached by one thread only is a launch failure, sticky, with the kernel's name */
    assert_int_equal(ddp_emu_launch("k_divergent", (dim3){1, 1, 1}, (dim3){64, 1, 1}, 0, NULL, k_divergent, NULL, NULL),
                     cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    if (strstr(ddp_emu_last_fault(), "k_divergent") == NULL) fail_msg("fault text: %s", ddp_emu_last_fault());
    free(hx);
}

/* the devices MPIDDP_EMU_DEVICES makes visible */
static void test_device_count(void **state)
{
    (void)state;
    int n = 0;
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 4);
}

int main(int argc, char **argv)
{
    setenv("MPIDDP_EMU_DEVICES", "4", 1);
    if (argc > 1 && !strcmp(argv[1], "warp_divergent")) { /* it leaves the sticky fault set: a process of its own */
        const struct CMUnitTest one[] = {cmocka_unit_test(test_warp_divergent)};
        return cmocka_run_group_tests(one, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_count),
        cmocka_unit_test(test_nccl_blocking), /* NCCL first, before any stream thread: test_emu_nccl.c */
        cmocka_unit_test(test_nccl_nonblocking),
        cmocka_unit_test(test_nccl_duplicate_device),
        cmocka_unit_test(test_nccl_init_fault),
        cmocka_unit_test(test_nccl_hang_abort),
        cmocka_unit_test(test_blas),
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_gemm_ex),
        cmocka_unit_test(test_cublaslt),
#ifdef DDP_HAVE_CUDNN
        cmocka_unit_test_teardown(test_cudnn_sdpa, open_gates),
#endif
        cmocka_unit_test(test_wmma_tf32_rounding), /* the test_wmma_* tests: test_emu_wmma.cpp */
        cmocka_unit_test(test_wmma_mma_tf32),
        cmocka_unit_test(test_wmma_mma_bf16),
        cmocka_unit_test(test_wmma_memo),
        cmocka_unit_test(test_warp_shuffles),
        cmocka_unit_test_teardown(test_streams, open_gates),
        cmocka_unit_test(test_kernels), /* last: it leaves the sticky fault set */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
