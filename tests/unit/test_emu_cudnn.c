/* test_emu.c — the CUDA host emulator's own semantics, which the GPU tests rely on: streams, events, device memory,
 * kernels, __syncthreads, __syncwarp and the warp shuffles, launch limits, cuBLAS, bf16/TF32 rounding, wmma
 * (test_emu_wmma.cpp), NCCL, cuDNN's SDPA graphs (emu_cudnn.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "emu_cuda.h"
#include "test_data.h"

#ifdef DDP_HAVE_CUDNN
/* the real cudnn_graph.h over emu_cuda.h's CUDA types: the runtime headers it includes would define them again */
#define __CUDA_RUNTIME_API_H__
#define __LIBRARY_TYPES_H__
typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
typedef struct CUgraph_st *cudaGraph_t;
#include <cudnn_graph.h>
#include <stdbool.h>
#endif

#include <math.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Stream order made deterministic with a gate: a host operation that blocks a stream until the test opens it. A test
 * that fails with gates shut has them opened by its teardown (open_gates), so no stream stays blocked. */
static sem_t gate;
static int gates_shut;
static void wait_gate(void *arg)
{
    (void)arg;
    sem_wait(&gate);
}
static cudaError_t shut_gate(cudaStream_t s)
{
    gates_shut++;
    return ddp_emu_enqueue(s, wait_gate, NULL, NULL);
}
static void open_gate(void)
{
    gates_shut--;
    sem_post(&gate);
}
static int open_gates(void **state)
{
    (void)state;
    while (gates_shut > 0) open_gate();
    return 0;
}
static void sleep_ms(int ms)
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

static void test_blas(void **state)
{
    (void)state;
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
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, M, N, K, &one, dA, K, dB, N, &zero, dC, M),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);
    if (memcmp(C, ref, sizeof C) != 0) fail_msg("sgemm (T, T) differs from the triple loop");
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M - 1, dB, K, &zero, dC, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, M, N, K, &one, A, K, dB, N, &zero, dC, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* Round-to-nearest-even to a significand of 24 - drop bits, by an independent method: the two neighbours of x
 * with the low `drop` bits clear, the nearer one in exact double arithmetic, on a tie the even one; past the
 * largest finite value the upper neighbour is 2^128, i.e. Inf (IEEE's unbounded-exponent rule). */
static uint32_t rne_ref(uint32_t u, int drop)
{
    uint32_t mag = u & 0x7fffffffu, sign = u & 0x80000000u, step = 1u << drop, lo = mag & ~(step - 1);
    float flo, fx;
    memcpy(&flo, &lo, 4), memcpy(&fx, &mag, 4);
    uint32_t hi = lo + step;
    double dhi;
    if (hi >= 0x7f800000u)
        dhi = ldexp(1.0, 128), hi = 0x7f800000u;
    else {
        float fhi;
        memcpy(&fhi, &hi, 4);
        dhi = fhi;
    }
    double dl = (double)fx - flo, dh = dhi - fx;
    uint32_t r = dl < dh ? lo : dh < dl ? hi : ((lo >> drop) & 1u) ? hi : lo;
    return sign | r;
}
static uint16_t bf16_bits(float f) { return __float2bfloat16_rn(f).x; }
static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* bf16 and TF32 rounding: ties to even both ways, signs, Inf, NaN (canonical 0x7FFF for bf16, NaN kept by TF32),
 * overflow to Inf, denormals, exact round trips; then 10^6 random bit patterns against rne_ref. */
static void test_rounding(void **state)
{
    (void)state;
    static const struct {
        uint32_t in;
        uint16_t bf16;
    } bf[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},
        {0x3f807fffu, 0x3f80}, {0xbf808000u, 0xbf80}, {0xbf818000u, 0xbf82}, {0x7f800000u, 0x7f80},
        {0xff800000u, 0xff80}, {0x7fc00000u, 0x7fff}, {0x7f800001u, 0x7fff}, {0xffc00000u, 0x7fff},
        {0x7f7fffffu, 0x7f80}, {0x7f7f7fffu, 0x7f7f}, {0x7f7f8000u, 0x7f80}, {0xff7fffffu, 0xff80},
        {0x00008000u, 0x0000}, {0x00018000u, 0x0002}, {0x00010000u, 0x0001}, {0x00008001u, 0x0001},
        {0x80008000u, 0x8000}, {0x007fffffu, 0x0080}, {0x00000000u, 0x0000}, {0x80000000u, 0x8000},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        if (bf16_bits(from_bits(bf[i].in)) != bf[i].bf16)
            fail_msg("bf16(0x%08x) = 0x%04x, want 0x%04x", bf[i].in, bf16_bits(from_bits(bf[i].in)), bf[i].bf16);
    __nv_bfloat16 h = {0x3f81};
    if (!(__bfloat162float(h) == 1.0f + 0x1p-7f)) fail_msg("bf16 0x3f81 widens to %.9g", __bfloat162float(h));
    h.x = 0x0001;
    if (!(__bfloat162float(h) == 0x1p-133f)) fail_msg("the smallest bf16 denormal widens to %g", __bfloat162float(h));
    static const struct {
        uint32_t in, out;
    } tf[] = {
        {0x3f801000u, 0x3f800000u}, {0x3f803000u, 0x3f804000u}, {0x3f801001u, 0x3f802000u}, {0xbf803000u, 0xbf804000u},
        {0x7f7fffffu, 0x7f800000u}, {0x7f800000u, 0x7f800000u}, {0xff800000u, 0xff800000u}, {0x00001000u, 0x00000000u},
        {0x00003000u, 0x00004000u}, {0x80003000u, 0x80004000u}, {0x3f802000u, 0x3f802000u},
    };
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++)
        if (bits_of(ddp_emu_tf32(from_bits(tf[i].in))) != tf[i].out)
            fail_msg("tf32(0x%08x) = 0x%08x, want 0x%08x", tf[i].in, bits_of(ddp_emu_tf32(from_bits(tf[i].in))),
                     tf[i].out);
    if (!(isnan(ddp_emu_tf32(from_bits(0x7f800001u))) && isnan(ddp_emu_tf32(from_bits(0xffc00000u)))))
        fail_msg("tf32 of a NaN is not NaN");
    uint64_t seed = 12345;
    int bad_bf = 0, bad_tf = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)(test_lcg(&seed) >> 32);
        if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u; /* a bf16 tie */
        if (i % 4 == 2) u = (u & 0xffffe000u) | 0x1000u; /* a TF32 tie */
        if ((u & 0x7f800000u) == 0x7f800000u) continue;  /* Inf and NaN: above */
        bad_bf += (uint32_t)bf16_bits(from_bits(u)) << 16 != rne_ref(u, 16);
        bad_tf += bits_of(ddp_emu_tf32(from_bits(u))) != rne_ref(u, 13);
    }
    if (!(!bad_bf && !bad_tf))
        fail_msg("random patterns: %d bf16 and %d TF32 roundings differ from round-to-nearest-even", bad_bf, bad_tf);
}

/* cublasGemmEx and the math mode: TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, or Sgemm and COMPUTE_32F under
 * CUBLAS_TF32_TENSOR_OP_MATH) rounds A and B first, pedantic never does; bf16 A and B are exact inputs; fp32
 * accumulation. Values chosen so each rounding shows: 1 + 2^-12 is 1 in TF32, 1 + 2^-9 is 1 in bf16 but not in TF32. */
static void test_gemm_ex(void **state)
{
    (void)state;
    enum { M = 3, N = 2, K = 8 };
    float A[M * K], A2[M * K], Bm[K * N], C[M * N];
    __nv_bfloat16 A16[M * K], B16[K * N];
    for (int i = 0; i < M * K; i++) A[i] = 1.0f + 0x1p-12f, A2[i] = 1.0f + 0x1p-9f, A16[i] = __float2bfloat16_rn(A2[i]);
    for (int i = 0; i < K * N; i++) Bm[i] = 1.0f, B16[i] = __float2bfloat16_rn(Bm[i]);
    float *dA, *dA2, *dB, *dC;
    __nv_bfloat16 *dA16, *dB16;
    cudaMalloc((void **)&dA, sizeof A), cudaMalloc((void **)&dA2, sizeof A2), cudaMalloc((void **)&dB, sizeof Bm);
    cudaMalloc((void **)&dC, sizeof C), cudaMalloc((void **)&dA16, sizeof A16), cudaMalloc((void **)&dB16, sizeof B16);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaMemcpy(dA2, A2, sizeof A2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bm, sizeof Bm, cudaMemcpyHostToDevice), cudaMemcpy(dA16, A16, sizeof A16, cudaMemcpyHostToDevice);
    cudaMemcpy(dB16, B16, sizeof B16, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    const float exact = K * (1.0f + 0x1p-12f), tf32 = K;
#define C00(what, want)                                                      \
    do {                                                                     \
        cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);                 \
        if (!(C[0] == (want) && C[M * N - 1] == (want)))                     \
            fail_msg("%s: C = %.9g, want %.9g", what, C[0], (double)(want)); \
    } while (0)
    /* column-major A [M x K] (lda M), B [K x N] (ldb K) */
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M),
                     CUBLAS_STATUS_SUCCESS);
    C00("sgemm, default math", exact);
    assert_int_equal(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M),
                     CUBLAS_STATUS_SUCCESS);
    C00("sgemm, TF32 math", tf32);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx 32F, TF32 math", tf32);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx 32F pedantic, TF32 math", exact);
    assert_int_equal(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M),
                     CUBLAS_STATUS_SUCCESS);
    C00("sgemm, pedantic math", exact);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx FAST_TF32, pedantic math", tf32);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA2, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx FAST_TF32 of 1 + 2^-9", K * (1.0f + 0x1p-9f));
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF,
                                  K, &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx bf16 of 1 + 2^-9", (float)K);
    /* k = 0: C = beta C, nothing read */
    float two = 2;
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, 0, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF,
                                  1, &two, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    C00("gemmEx bf16, k = 0, beta 2", 2.0f * K);
    /* what cuBLAS refuses */
    assert_int_equal(cublasSetMathMode(h, (cublasMath_t)7), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF,
                                  K, &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF,
                                  K, &zero, dC, CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, (cublasGemmAlgo_t)0),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M - 1, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K,
                                  &zero, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_INITIALIZED);
#undef C00
    cublasDestroy(h);
    cudaFree(dA), cudaFree(dA2), cudaFree(dB), cudaFree(dC), cudaFree(dA16), cudaFree(dB16);
}

/* cublasLtMatmul with its epilogues, column-major: BIAS adds a vector along D's rows, BGRADB writes op(B) summed over
 * k (bf16 B: the sum of the values the tensor cores read); the checks cuBLASLt makes (shapes, attribute sizes, types),
 * C = D only, and MPIDDP_EMU_LT_REFUSE=1 finding no algorithm. Small integers: every result is exact. */
static void test_cublaslt(void **state)
{
    (void)state;
    enum { M = 3, N = 2, K = 4 };
    float A[M * K], Bm[K * N], C[M * N], bias[M] = {1, 2, 3}, grad[N];
    __nv_bfloat16 B16[K * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)(i % 3);
    /* B's fp32 values carry a 2^-9 that bf16 (8 significant bits, values 0.5-8) rounds away */
    for (int i = 0; i < K * N; i++) Bm[i] = (float)i + 0.5f + 0x1p-9f, B16[i] = __float2bfloat16_rn(Bm[i]);
    float *dA, *dB, *dC, *dbias, *dgrad;
    __nv_bfloat16 *dB16;
    cudaMalloc((void **)&dA, sizeof A), cudaMalloc((void **)&dB, sizeof Bm),
        cudaMalloc((void **)&dC, sizeof C + 16); /* + 16: C also at dC + 1 */
    cudaMalloc((void **)&dbias, sizeof bias), cudaMalloc((void **)&dgrad, sizeof grad);
    cudaMalloc((void **)&dB16, sizeof B16);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaMemcpy(dB, Bm, sizeof Bm, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, bias, sizeof bias, cudaMemcpyHostToDevice),
        cudaMemcpy(dB16, B16, sizeof B16, cudaMemcpyHostToDevice);
    cublasLtHandle_t h;
    assert_int_equal(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lb16, lc, lbad;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    uint64_t ws = 1 << 20;
    float one = 1, zero = 0;
    assert_int_equal(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lb16, CUDA_R_16BF, K, N, K), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lbad, CUDA_R_32F, K, N, K - 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lbad, CUDA_R_32F, K + 1, N, K + 1), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, 4),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, 8),
                     CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    void *vec = dbias;
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 2),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                     CUBLAS_STATUS_SUCCESS);
    /* a bias epilogue without its vector is refused */
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op, la, lbad, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_INVALID_VALUE); /* B's rows are not A's columns */
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb16, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_NOT_SUPPORTED); /* fp32 A with bf16 B */
    setenv("MPIDDP_EMU_LT_REFUSE", "1", 1);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(found, 0);
    unsetenv("MPIDDP_EMU_LT_REFUSE");
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(found, 1);
    assert_int_equal(cublasLtMatmul(h, op, &one, dA, la, dB, lb, &zero, dC, lc, dbias, lc, &res.algo, NULL, 0, NULL),
                     CUBLAS_STATUS_NOT_SUPPORTED); /* C != D */
    assert_int_equal(cublasLtMatmul(h, op, &one, dA, la, dB, lb, &zero, dC, lc, dC, lc, &res.algo, NULL, 0, NULL),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float want = bias[i];
            for (int k = 0; k < K; k++) want += A[k * M + i] * Bm[j * K + k];
            if (C[j * M + i] != want) fail_msg("BIAS: C[%d,%d] = %g, want %g", i, j, C[j * M + i], want);
        }
    /* BGRADB over a bf16 B, transposed: B16 read as [N x K] with op T, the gradient per column of D */
    cublasLtMatrixLayout_t lbt;
    assert_int_equal(cublasLtMatrixLayoutCreate(&lbt, CUDA_R_16BF, N, K, N), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t op16;
    cublasOperation_t t = CUBLAS_OP_T;
    epi = CUBLASLT_EPILOGUE_BGRADB, vec = dgrad;
    assert_int_equal(cublasLtMatmulDescCreate(&op16, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op16, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op16, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op16, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec),
                     CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t la16;
    __nv_bfloat16 A16[M * K];
    for (int i = 0; i < M * K; i++) A16[i] = __float2bfloat16_rn(A[i]);
    __nv_bfloat16 *dA16;
    cudaMalloc((void **)&dA16, sizeof A16), cudaMemcpy(dA16, A16, sizeof A16, cudaMemcpyHostToDevice);
    assert_int_equal(cublasLtMatrixLayoutCreate(&la16, CUDA_R_16BF, M, K, M), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op16, la16, lbt, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(
        cublasLtMatmul(h, op16, &one, dA16, la16, dB16, lbt, &zero, dC, lc, dC, lc, &res.algo, NULL, 0, NULL),
        CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(grad, dgrad, sizeof grad, cudaMemcpyDeviceToHost);
    for (int j = 0; j < N; j++) {
        float want = 0, fp32 = 0;
        for (int k = 0; k < K; k++) want += __bfloat162float(B16[k * N + j]), fp32 += Bm[k * N + j];
        if (grad[j] != want || want == fp32)
            fail_msg("BGRADB: %d = %g, want %g (the bf16 values, not the fp32 %g)", j, grad[j], want, fp32);
    }
    /* the algorithm assumes the alignment the preference promised (256 bytes unless told): a pointer 4 bytes into
     * an allocation is refused, and accepted once the preference says 4 */
    assert_int_equal(
        cublasLtMatmul(h, op16, &one, dA16, la16, dB16, lbt, &zero, dC + 1, lc, dC + 1, lc, &res.algo, NULL, 0, NULL),
        CUBLAS_STATUS_INVALID_VALUE);
    uint32_t four = 4;
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
        assert_int_equal(
            cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &four, sizeof four),
            CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, op16, la16, lbt, lc, lc, pref, 1, &res, &found),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(
        cublasLtMatmul(h, op16, &one, dA16, la16, dB16, lbt, &zero, dC + 1, lc, dC + 1, lc, &res.algo, NULL, 0, NULL),
        CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDescDestroy(op), cublasLtMatmulDescDestroy(op16), cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lb16);
    cublasLtMatrixLayoutDestroy(lc), cublasLtMatrixLayoutDestroy(lbad), cublasLtMatrixLayoutDestroy(lbt);
    cublasLtMatrixLayoutDestroy(la16);
    cublasLtDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dbias), cudaFree(dgrad), cudaFree(dB16), cudaFree(dA16);
}

#ifdef DDP_HAVE_CUDNN
/* The emulated cuDNN backend API (emu_cudnn.c) driven as the plugin drives it: two packed samples (3 and 5 rows, ragged
 * offsets) of H = 2 heads of width D = 8, q|k|v in one row of 3HD; forward and backward against double-precision
 * references within the bf16 roundings, rows past a sample's length untouched, the engines' order and notes, refusals.
 */
enum { CB = 2, CH = 2, CD = 8, CS = 8, CR = 8, CHD = CH * CD, CQKV = 3 * CHD };
/* the tensors, unique id 100 + index: the SDPA roles, then the ragged offsets of q|k|v, o|do and the stats */
enum { TQ, TK, TV, TO, TST, TDO, TDQ, TDK, TDV, TSC, TSQ, TSKV, TRQKV, TRO, TRST, NT };
static const int32_t c_len[CB] = {3, 5}, c_row0[CB + 1] = {0, 3, 8};
#define CK(call) assert_int_equal((call), CUDNN_STATUS_SUCCESS)
#define CD_DESC CUDNN_TYPE_BACKEND_DESCRIPTOR

typedef struct {
    cudaStream_t s;
    cudnnHandle_t h;
    cudnnBackendDescriptor_t t[NT];
    void *ptr[NT]; /* by tensor: device memory; the scale's: its host value */
    void *ws;
    float scale;
    uint16_t qkv[CR * CQKV], dout[CR * CHD];
} cd_ctx;

/* A finalized tensor of unique id uid; rag: its ragged offsets (or NULL); virtual, or by value */
static cudnnBackendDescriptor_t cg_tensor(int64_t uid, cudnnDataType_t dt, const int64_t *dim, const int64_t *str,
                                          cudnnBackendDescriptor_t rag, bool virt, bool by_value)
{
    cudnnBackendDescriptor_t t;
    int64_t align = dt == CUDNN_DATA_BFLOAT16 ? 16 : 4;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (virt) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    if (by_value) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    if (rag) CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CD_DESC, 1, &rag));
    CK(cudnnBackendFinalize(t));
    return t;
}
static cudnnBackendDescriptor_t cd_tensor(int id, cudnnDataType_t dt, const int64_t *dim, const int64_t *str,
                                          cudnnBackendDescriptor_t rag)
{
    return cg_tensor(100 + id, dt, dim, str, rag, 0, id == TSC);
}

/* The problem's tensors for head width D, Q of type qt: packed rows, ragged by sample. */
static void cd_tensors(cudnnBackendDescriptor_t *t, int64_t D, cudnnDataType_t qt)
{
    int64_t hd = CH * D;
    const int64_t one[4] = {1, 1, 1, 1}, rag[4] = {CB + 1, 1, 1, 1}, seq[4] = {CB, 1, 1, 1};
    const int64_t dim[4] = {CB, CH, CS, D}, sdim[4] = {CB, CH, CS, 1};
    const int64_t qs[4] = {CS * 3 * hd, D, 3 * hd, 1}, os[4] = {CS * hd, D, hd, 1}, ss[4] = {CS * CH, 1, CH, 1};
    for (int i = TRQKV; i <= TRST; i++) t[i] = cd_tensor(i, CUDNN_DATA_INT32, rag, one, NULL);
    for (int i = TQ; i <= TDV; i++) {
        int packed = i == TQ || i == TK || i == TV || i == TDQ || i == TDK || i == TDV;
        if (i == TST)
            t[i] = cd_tensor(i, CUDNN_DATA_FLOAT, sdim, ss, t[TRST]);
        else
            t[i] = cd_tensor(i, i == TQ ? qt : CUDNN_DATA_BFLOAT16, dim, packed ? qs : os, t[packed ? TRQKV : TRO]);
    }
    t[TSC] = cd_tensor(TSC, CUDNN_DATA_FLOAT, one, one, NULL);
    t[TSQ] = cd_tensor(TSQ, CUDNN_DATA_INT32, seq, one, NULL);
    t[TSKV] = cd_tensor(TSKV, CUDNN_DATA_INT32, seq, one, NULL);
}
static void cd_destroy(cudnnBackendDescriptor_t *d, int n)
{
    for (int i = 0; i < n; i++) CK(cudnnBackendDestroyDescriptor(d[i]));
}

/* The SDPA operation over t without tensor `skip` (-1: none): its Finalize status. */
static cudnnStatus_t cd_op(int bwd, cudnnBackendDescriptor_t *t, int skip, cudnnBackendDescriptor_t *op)
{
    static const struct {
        int id;
        cudnnBackendAttributeName_t name;
    } fwd[] = {{TQ, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC},
               {TK, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC},
               {TV, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC},
               {TO, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC},
               {TST, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC},
               {TSC, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC},
               {TSQ, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC},
               {TSKV, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC}},
      bwdl[] = {
          {TQ, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC},          {TK, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC},
          {TV, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC},          {TO, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC},
          {TST, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC},     {TDO, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC},
          {TDQ, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC},        {TDK, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC},
          {TDV, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC},        {TSC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC},
          {TSQ, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC}, {TSKV, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC}};
    CK(cudnnBackendCreateDescriptor(
        bwd ? CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR : CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, op));
    for (int i = 0; i < (bwd ? 12 : 8); i++) {
        int id = bwd ? bwdl[i].id : fwd[i].id;
        if (id != skip) CK(cudnnBackendSetAttribute(*op, bwd ? bwdl[i].name : fwd[i].name, CD_DESC, 1, &t[id]));
    }
    return cudnnBackendFinalize(*op);
}

static cudnnStatus_t cd_plan_of(const cd_ctx *c, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *plan)
{
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
    CK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CD_DESC, 1, &cfg));
    return cudnnBackendFinalize(*plan);
}

/* op's graph and heuristics (mode A): the engine configurations into cfg (*n, at most 2), then the plan of cfg[pick]
 * (its Finalize status). The graph and the heuristics are destroyed at once: what uses them keeps them. */
static cudnnStatus_t cd_plan(const cd_ctx *c, cudnnBackendDescriptor_t op, int pick, cudnnBackendDescriptor_t *cfg,
                             int64_t *n, cudnnBackendDescriptor_t *plan)
{
    cudnnBackendDescriptor_t g, heur;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t total = -1, engines = -1;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &op));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendFinalize(g));
    CK(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, n, &engines));
    assert_int_equal(engines, 2);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CD_DESC, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, 0, &total, NULL));
    assert_true(total >= 1 && total <= 2);
    for (int i = 0; i < total; i++) CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, total, n, cfg));
    assert_int_equal(*n, total);
    cd_destroy(&heur, 1), cd_destroy(&g, 1);
    return cd_plan_of(c, cfg[pick], plan);
}

/* A configuration's engine: its global index, whether its notes say nondeterministic (and tensor cores). */
static int64_t cd_engine(cudnnBackendDescriptor_t cfg, int *nondet)
{
    cudnnBackendDescriptor_t e;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, index = -1;
    int tc = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    CK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CD_DESC, 1, &n, &e));
    assert_int_equal(n, 1);
    CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
    CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    *nondet = 0;
    for (int64_t i = 0; i < n; i++)
        tc |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
            *nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    assert_true(tc);
    cd_destroy(&e, 1);
    return index;
}

/* plan over the context's pointers, without tensor `skip` (-1: none), with workspace ws; the pack destroyed at once */
static cudnnStatus_t cd_exec(const cd_ctx *c, cudnnBackendDescriptor_t plan, int skip, void *ws)
{
    cudnnBackendDescriptor_t pack;
    int64_t uid[NT];
    void *ptr[NT];
    int n = 0;
    for (int i = 0; i < NT; i++)
        if (i != skip) uid[n] = 100 + i, ptr[n++] = c->ptr[i];
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CK(cudnnBackendFinalize(pack));
    cudnnStatus_t s = cudnnBackendExecute(c->h, plan, pack);
    cd_destroy(&pack, 1);
    return s;
}

static void cd_setup(cd_ctx *c)
{
    static const int32_t rag[3][CB + 1] = {{0, 3 * CQKV, 8 * CQKV}, {0, 3 * CHD, 8 * CHD}, {0, 3 * CH, 8 * CH}};
    size_t bytes[NT] = {
        [TQ] = sizeof c->qkv,  [TO] = sizeof c->dout, [TST] = CR * CH * sizeof(float), [TDO] = sizeof c->dout,
        [TDQ] = sizeof c->qkv, [TSQ] = sizeof c_len,  [TSKV] = sizeof c_len,           [TRQKV] = sizeof rag[0],
        [TRO] = sizeof rag[0], [TRST] = sizeof rag[0]};
    uint64_t seed = 77;
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NT; i++)
        if (bytes[i]) assert_int_equal(cudaMalloc(&c->ptr[i], bytes[i]), cudaSuccess);
    assert_int_equal(cudaMalloc(&c->ws, CB * CH * CS * sizeof(float)), cudaSuccess);
    c->ptr[TK] = (uint16_t *)c->ptr[TQ] + CHD, c->ptr[TV] = (uint16_t *)c->ptr[TQ] + 2 * CHD;
    c->ptr[TDK] = (uint16_t *)c->ptr[TDQ] + CHD, c->ptr[TDV] = (uint16_t *)c->ptr[TDQ] + 2 * CHD;
    c->scale = 1.0f / sqrtf((float)CD), c->ptr[TSC] = &c->scale;
    for (int i = 0; i < CR * CQKV; i++) c->qkv[i] = __float2bfloat16_rn(test_frand(&seed)).x;
    for (int i = 0; i < CR * CHD; i++) c->dout[i] = __float2bfloat16_rn(test_frand(&seed)).x;
    cudaMemcpy(c->ptr[TQ], c->qkv, sizeof c->qkv, cudaMemcpyHostToDevice);
    cudaMemcpy(c->ptr[TDO], c->dout, sizeof c->dout, cudaMemcpyHostToDevice);
    for (int i = 0; i < 3; i++) cudaMemcpy(c->ptr[TRQKV + i], rag[i], sizeof rag[i], cudaMemcpyHostToDevice);
    assert_int_equal(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking), cudaSuccess);
    CK(cudnnCreate(&c->h));
    CK(cudnnSetStream(c->h, c->s));
    cd_tensors(c->t, CD, CUDNN_DATA_BFLOAT16);
}

static void cd_teardown(cd_ctx *c)
{
    cd_destroy(c->t, NT);
    CK(cudnnDestroy(c->h));
    for (int i = 0; i < NT; i++)
        if (i != TK && i != TV && i != TDK && i != TDV && i != TSC) cudaFree(c->ptr[i]);
    cudaFree(c->ws);
    cudaStreamDestroy(c->s);
}

/* the sequence lengths of queries and keys (the stream idle) */
static void cd_seq(const cd_ctx *c, const int32_t *nq, const int32_t *nkv)
{
    assert_int_equal(cudaMemcpy(c->ptr[TSQ], nq, sizeof c_len, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(c->ptr[TSKV], nkv, sizeof c_len, cudaMemcpyHostToDevice), cudaSuccess);
}
/* O and the stats back to 0xFF bytes, in stream order */
static void cd_poison(const cd_ctx *c, int id, size_t bytes)
{
    assert_int_equal(cudaMemsetAsync(c->ptr[id], 0xff, bytes, c->s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
}

static double cd_in(const cd_ctx *c, int r, int part, int h, int d)
{
    __nv_bfloat16 x = {c->qkv[r * CQKV + part * CHD + h * CD + d]};
    return __bfloat162float(x);
}
static double cd_dout(const cd_ctx *c, int r, int h, int d)
{
    __nv_bfloat16 x = {c->dout[r * CHD + h * CD + d]};
    return __bfloat162float(x);
}

/* Query i of sample b, head h, over keys [0, nkv), in double: p[j], o[d], bound[d] = sum_j p_j |v_jd|; the lse. */
static double cd_ref_row(const cd_ctx *c, int b, int h, int i, int nkv, double *p, double *o, double *bound)
{
    int r0 = c_row0[b];
    double m = -INFINITY, l = 0.0;
    for (int j = 0; j < nkv; j++) {
        double s = 0.0;
        for (int d = 0; d < CD; d++) s += cd_in(c, r0 + i, 0, h, d) * cd_in(c, r0 + j, 1, h, d);
        p[j] = s * c->scale, m = fmax(m, p[j]);
    }
    for (int j = 0; j < nkv; j++) l += exp(p[j] - m);
    double lse = m + log(l);
    for (int d = 0; d < CD; d++) o[d] = bound[d] = 0.0;
    for (int j = 0; j < nkv; j++) {
        p[j] = exp(p[j] - lse);
        for (int d = 0; d < CD; d++)
            o[d] += p[j] * cd_in(c, r0 + j, 2, h, d), bound[d] += p[j] * fabs(cd_in(c, r0 + j, 2, h, d));
    }
    return lse;
}

static void cd_near(const char *what, int r, int h, int d, double got, double want, double bound)
{
    if (!(fabs(got - want) <= 0x1p-6 * bound + 1e-6))
        fail_msg("%s row %d head %d [%d] = %.7g, want %.7g (bound %.3g)", what, r, h, d, got, want, bound);
}

/* O and the stats of queries [0, nq) of each sample over nkv keys; the sample's later rows still 0xFF */
static void cd_check_fwd(const cd_ctx *c, const int32_t *nq, const int32_t *nkv)
{
    uint16_t o[CR * CHD];
    uint32_t st[CR * CH];
    double p[CS], ref[CD], bound[CD];
    cudaMemcpy(o, c->ptr[TO], sizeof o, cudaMemcpyDeviceToHost);
    cudaMemcpy(st, c->ptr[TST], sizeof st, cudaMemcpyDeviceToHost);
    for (int b = 0; b < CB; b++)
        for (int h = 0; h < CH; h++)
            for (int i = 0; i < c_len[b]; i++) {
                int r = c_row0[b] + i;
                if (i >= nq[b]) {
                    for (int d = 0; d < CD; d++)
                        if (o[r * CHD + h * CD + d] != 0xffff) fail_msg("O row %d past its length was written", r);
                    if (st[r * CH + h] != 0xffffffffu) fail_msg("stats row %d past its length was written", r);
                    continue;
                }
                double lse = cd_ref_row(c, b, h, i, nkv[b], p, ref, bound);
                for (int d = 0; d < CD; d++) {
                    __nv_bfloat16 x = {o[r * CHD + h * CD + d]};
                    cd_near("O", r, h, d, __bfloat162float(x), ref[d], 0.5 * bound[d]); /* 2^-7 of the bound */
                }
                float got;
                memcpy(&got, &st[r * CH + h], sizeof got);
                if (!(fabs(got - lse) <= 1e-5 * (1.0 + fabs(lse))))
                    fail_msg("stats row %d: %.9g, want %.9g", r, got, lse);
            }
}

static void cd_forward(cd_ctx *c)
{
    cudnnBackendDescriptor_t op, cfg[2], plan;
    int64_t n = 0, ws = -1;
    int nondet = -1;
    uint16_t o1[CR * CHD], o2[CR * CHD];
    const int32_t nq[CB] = {3, 2}, nkv[CB] = {3, 4};
    CK(cd_op(0, c->t, -1, &op));
    CK(cd_plan(c, op, 0, cfg, &n, &plan));
    assert_int_equal(n, 1);
    assert_int_equal(cd_engine(cfg[0], &nondet), 0);
    assert_false(nondet);
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
    assert_int_equal(ws, 0);
    cd_seq(c, c_len, c_len);
    cd_poison(c, TO, sizeof o1), cd_poison(c, TST, CR * CH * sizeof(float));
    /* queued: nothing is written while the stream waits */
    sem_init(&gate, 0, 0);
    assert_int_equal(shut_gate(c->s), cudaSuccess);
    CK(cd_exec(c, plan, -1, NULL));
    sleep_ms(20);
    cudaMemcpy(o1, c->ptr[TO], sizeof o1, cudaMemcpyDeviceToHost);
    if (o1[0] != 0xffff) fail_msg("the attention ran before its stream reached it");
    open_gate();
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_check_fwd(c, c_len, c_len);
    /* bitwise repeatable */
    cudaMemcpy(o1, c->ptr[TO], sizeof o1, cudaMemcpyDeviceToHost);
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(o2, c->ptr[TO], sizeof o2, cudaMemcpyDeviceToHost);
    if (memcmp(o1, o2, sizeof o1)) fail_msg("the forward is not bitwise repeatable");
    /* sample 1 shortened to 2 queries over 4 keys: its rows 2..4 stay as they were */
    cd_poison(c, TO, sizeof o1), cd_poison(c, TST, CR * CH * sizeof(float));
    cd_seq(c, nq, nkv);
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_check_fwd(c, nq, nkv);
    cd_seq(c, c_len, c_len); /* the full forward again: the backward's O and stats */
    CK(cd_exec(c, plan, -1, NULL));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cd_destroy(&plan, 1), cd_destroy(cfg, 1), cd_destroy(&op, 1);
}

/* dQ, dK, dV of sample b, head h against the double-precision backward (bounds: sums of magnitudes, O's rounding in
 * dO.O included) */
static void cd_check_bwd_bh(const cd_ctx *c, const uint16_t *g, int b, int h)
{
    int n = c_len[b], r0 = c_row0[b];
    double P[CS][CS], dS[CS][CS], A[CS], o[CD], vb[CD];
    for (int i = 0; i < n; i++) {
        cd_ref_row(c, b, h, i, n, P[i], o, vb);
        double dl = 0.0;
        A[i] = 0.0;
        for (int d = 0; d < CD; d++) {
            dl += cd_dout(c, r0 + i, h, d) * o[d];
            A[i] += fabs(cd_dout(c, r0 + i, h, d)) * vb[d]; /* bounds dO.O's error from O's rounding */
        }
        for (int j = 0; j < n; j++) {
            double dp = 0.0;
            for (int d = 0; d < CD; d++) dp += cd_dout(c, r0 + i, h, d) * cd_in(c, r0 + j, 2, h, d);
            dS[i][j] = P[i][j] * (dp - dl);
        }
    }
    for (int x = 0; x < n; x++)
        for (int d = 0; d < CD; d++) {
            double dq = 0, dqb = 0, dk = 0, dkb = 0, dv = 0, dvb = 0;
            for (int y = 0; y < n; y++) {
                double kv = cd_in(c, r0 + y, 1, h, d), qv = cd_in(c, r0 + y, 0, h, d), dov = cd_dout(c, r0 + y, h, d);
                dq += dS[x][y] * kv;
                dqb += (fabs(dS[x][y]) + P[x][y] * A[x]) * fabs(kv);
                dk += dS[y][x] * qv;
                dkb += (fabs(dS[y][x]) + P[y][x] * A[y]) * fabs(qv);
                dv += P[y][x] * dov;
                dvb += P[y][x] * fabs(dov);
            }
            const uint16_t *row = g + (r0 + x) * CQKV + h * CD + d;
            __nv_bfloat16 gq = {row[0]}, gk = {row[CHD]}, gv = {row[2 * CHD]};
            cd_near("dQ", r0 + x, h, d, __bfloat162float(gq), c->scale * dq, c->scale * dqb);
            cd_near("dK", r0 + x, h, d, __bfloat162float(gk), c->scale * dk, c->scale * dkb);
            cd_near("dV", r0 + x, h, d, __bfloat162float(gv), dv, dvb);
        }
}

static void cd_backward(cd_ctx *c)
{
    cudnnBackendDescriptor_t op, cfg[2], plan, plan0;
    int64_t n = 0, ws = -1;
    int nondet = -1;
    uint16_t g1[CR * CQKV], g0[CR * CQKV];
    CK(cd_op(1, c->t, -1, &op));
    { /* as cuDNN 9.19: the backward operation finalizes, a graph of it does not (unless MPIDDP_EMU_CUDNN_BWD=1) */
        cudnnBackendDescriptor_t g;
        unsetenv("MPIDDP_EMU_CUDNN_BWD");
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &op));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
        assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
        cd_destroy(&g, 1);
        setenv("MPIDDP_EMU_CUDNN_BWD", "1", 1);
    }
    CK(cd_plan(c, op, 1, cfg, &n, &plan));
    assert_int_equal(n, 2); /* the nondeterministic engine 0 first, then the deterministic engine 1 */
    assert_int_equal(cd_engine(cfg[0], &nondet), 0);
    assert_true(nondet);
    assert_int_equal(cd_engine(cfg[1], &nondet), 1);
    assert_false(nondet);
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
    assert_int_equal(ws, CB * CH * CS * sizeof(float));
    assert_int_equal(cd_exec(c, plan, -1, NULL), CUDNN_STATUS_BAD_PARAM); /* without the workspace */
    cd_poison(c, TDQ, sizeof g1);
    CK(cd_exec(c, plan, -1, c->ws));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(g1, c->ptr[TDQ], sizeof g1, cudaMemcpyDeviceToHost);
    for (int b = 0; b < CB; b++)
        for (int h = 0; h < CH; h++) cd_check_bwd_bh(c, g1, b, h);
    /* engine 0 computes the same bits here */
    CK(cd_plan_of(c, cfg[0], &plan0));
    cd_poison(c, TDQ, sizeof g0);
    CK(cd_exec(c, plan0, -1, c->ws));
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    cudaMemcpy(g0, c->ptr[TDQ], sizeof g0, cudaMemcpyDeviceToHost);
    if (memcmp(g0, g1, sizeof g0)) fail_msg("the two backward engines differ");
    cd_destroy(&plan0, 1), cd_destroy(&plan, 1), cd_destroy(cfg, 2), cd_destroy(&op, 1);
}

/* refusals at operation finalize: fp32 Q, head width 12, O missing; the attribute rules */
static void cd_refuse_ops(cd_ctx *c)
{
    cudnnBackendDescriptor_t t[NT], op, raw;
    int64_t uid = 1;
    cd_tensors(t, CD, CUDNN_DATA_FLOAT);
    assert_int_equal(cd_op(0, t, -1, &op), CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&op, 1), cd_destroy(t, NT);
    cd_tensors(t, 12, CUDNN_DATA_BFLOAT16);
    assert_int_equal(cd_op(1, t, -1, &op), CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&op, 1), cd_destroy(t, NT);
    assert_int_equal(cd_op(0, c->t, TO, &op), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&op, 1);
    assert_int_equal(cudnnBackendSetAttribute(c->t[TQ], CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                     CUDNN_STATUS_NOT_INITIALIZED); /* finalized */
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &raw));
    assert_int_equal(cudnnBackendSetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_DOUBLE, 1, &uid),
                     CUDNN_STATUS_BAD_PARAM);
    CK(cudnnBackendSetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    assert_int_equal(cudnnBackendFinalize(raw), CUDNN_STATUS_BAD_PARAM); /* no type, dimensions, ... */
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &op));
    assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CD_DESC, 1, &raw),
                     CUDNN_STATUS_BAD_PARAM); /* not finalized */
    cd_destroy(&op, 1), cd_destroy(&raw, 1);
}

/* a pack without a tensor's pointer; MPIDDP_EMU_CUDNN_REFUSE=1 and =bwd at plan finalize */
static void cd_refuse_plans(cd_ctx *c)
{
    cudnnBackendDescriptor_t fwd, bwd, cfg[2], plan;
    int64_t n = 0;
    CK(cd_op(0, c->t, -1, &fwd));
    CK(cd_op(1, c->t, -1, &bwd));
    CK(cd_plan(c, fwd, 0, cfg, &n, &plan));
    assert_int_equal(cd_exec(c, plan, TSKV, NULL), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cd_exec(c, plan, TRO, NULL), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&plan, 1), cd_destroy(cfg, (int)n);
    static const struct {
        const char *v;
        cudnnStatus_t fwd, bwd;
    } env[] = {{"1", CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_NOT_SUPPORTED},
               {"bwd", CUDNN_STATUS_SUCCESS, CUDNN_STATUS_NOT_SUPPORTED},
               {NULL, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS}};
    for (int i = 0; i < 3; i++) {
        cudnnStatus_t s[2];
        char msg[2][256] = {"", ""};
        if (env[i].v) setenv("MPIDDP_EMU_CUDNN_REFUSE", env[i].v, 1);
        for (int k = 0; k < 2; k++) {
            s[k] = cd_plan(c, k ? bwd : fwd, 0, cfg, &n, &plan);
            cudnnGetLastErrorString(msg[k], sizeof msg[k]);
            cd_destroy(&plan, 1), cd_destroy(cfg, (int)n);
        }
        unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
        for (int k = 0; k < 2; k++) {
            if (s[k] != (k ? env[i].bwd : env[i].fwd))
                fail_msg("MPIDDP_EMU_CUDNN_REFUSE=%s, %s plan: %s", env[i].v ? env[i].v : "(unset)", k ? "bwd" : "fwd",
                         cudnnGetErrorString(s[k]));
            if (s[k] != CUDNN_STATUS_SUCCESS && !strstr(msg[k], "MPIDDP_EMU_CUDNN_REFUSE"))
                fail_msg("the refusal said: %s", msg[k]);
        }
    }
    unsetenv("MPIDDP_EMU_CUDNN_REFUSE");
    cd_destroy(&fwd, 1), cd_destroy(&bwd, 1);
}

/* ---- operation graphs of matmul, pointwise, reduction and reshape operations (the plugin's attention backward) */
/* an operation of type t over n (attribute, descriptor) pairs: its Finalize status */
static cudnnStatus_t cg_op(cudnnBackendDescriptorType_t type, int n, const cudnnBackendAttributeName_t *a,
                           const cudnnBackendDescriptor_t *d, cudnnBackendDescriptor_t *op)
{
    CK(cudnnBackendCreateDescriptor(type, op));
    for (int i = 0; i < n; i++) CK(cudnnBackendSetAttribute(*op, a[i], CD_DESC, 1, &d[i]));
    return cudnnBackendFinalize(*op);
}
static cudnnBackendDescriptor_t cg_pwdesc(cudnnPointwiseMode_t mode)
{
    cudnnBackendDescriptor_t f;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &f));
    CK(cudnnBackendSetAttribute(f, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    CK(cudnnBackendSetAttribute(f, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    CK(cudnnBackendFinalize(f));
    return f;
}

/* S = A.B over the rows below the length (2 of 3), Y = scale S, R = rowsum(Y), Z = S^T (a reshape, then IDENTITY),
 * run by the interpreter against a double reference; the finalize rules: mismatched matmul, a reshape that is no
 * transpose, a pointwise MUL without b, a virtual tensor read but never written */
static void cd_graph(cd_ctx *c)
{
    enum { GA = 1, GB, GS, GY, GR, GZ, GL, GSC, GST, GX };
    const int64_t ad[4] = {1, 1, 3, 2}, as[4] = {6, 6, 2, 1}, bd[4] = {1, 1, 2, 3}, bs[4] = {6, 6, 3, 1};
    const int64_t sd[4] = {1, 1, 3, 3}, ss[4] = {9, 9, 3, 1}, tsd[4] = {9, 9, 1, 3}, rd[4] = {1, 1, 3, 1},
                  rs[4] = {3, 3, 1, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t A = cg_tensor(GA, CUDNN_DATA_FLOAT, ad, as, NULL, 0, 0),
                             B = cg_tensor(GB, CUDNN_DATA_FLOAT, bd, bs, NULL, 0, 0);
    cudnnBackendDescriptor_t S = cg_tensor(GS, CUDNN_DATA_FLOAT, sd, ss, NULL, 1, 0),
                             Y = cg_tensor(GY, CUDNN_DATA_FLOAT, sd, ss, NULL, 0, 0);
    cudnnBackendDescriptor_t R = cg_tensor(GR, CUDNN_DATA_FLOAT, rd, rs, NULL, 0, 0),
                             Z = cg_tensor(GZ, CUDNN_DATA_FLOAT, sd, ss, NULL, 0, 0);
    cudnnBackendDescriptor_t L = cg_tensor(GL, CUDNN_DATA_INT32, one, one, NULL, 0, 0),
                             SC = cg_tensor(GSC, CUDNN_DATA_FLOAT, one, one, NULL, 0, 1);
    cudnnBackendDescriptor_t ST = cg_tensor(GST, CUDNN_DATA_FLOAT, sd, tsd, NULL, 1, 0),
                             X = cg_tensor(GX, CUDNN_DATA_FLOAT, sd, ss, NULL, 1, 0);
    cudnnBackendDescriptor_t mmd, red, mul = cg_pwdesc(CUDNN_POINTWISE_MUL), idn = cg_pwdesc(CUDNN_POINTWISE_IDENTITY);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnReduceTensorOp_t add = CUDNN_REDUCE_TENSOR_ADD;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mmd));
    CK(cudnnBackendSetAttribute(mmd, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(cudnnBackendFinalize(mmd));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &red));
    CK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &add));
    CK(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(cudnnBackendFinalize(red));
    const cudnnBackendAttributeName_t mma[] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                               CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                               CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC};
    const cudnnBackendAttributeName_t pwa[] = {
        CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC};
    const cudnnBackendAttributeName_t ra[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                              CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    const cudnnBackendAttributeName_t sa[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    cudnnBackendDescriptor_t ops[5], bad, g;
    CK(cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 5, mma, (cudnnBackendDescriptor_t[]){A, B, S, mmd, L},
             &ops[0]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 4, pwa, (cudnnBackendDescriptor_t[]){mul, S, Y, SC},
             &ops[1]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, ra, (cudnnBackendDescriptor_t[]){Y, R, red}, &ops[2]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, sa, (cudnnBackendDescriptor_t[]){S, ST}, &ops[3]));
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 3, pwa, (cudnnBackendDescriptor_t[]){idn, ST, Z}, &ops[4]));
    /* the refusals */
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, mma, (cudnnBackendDescriptor_t[]){A, A, S, mmd}, &bad),
        CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&bad, 1);
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, sa, (cudnnBackendDescriptor_t[]){A, ST}, &bad),
        CUDNN_STATUS_NOT_SUPPORTED);
    cd_destroy(&bad, 1);
    assert_int_equal(
        cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 3, pwa, (cudnnBackendDescriptor_t[]){mul, S, Y}, &bad),
        CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&bad, 1);
    CK(cg_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 4, pwa, (cudnnBackendDescriptor_t[]){mul, X, Y, SC}, &bad));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &bad)); /* X: never written */
    assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&g, 1), cd_destroy(&bad, 1);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &mul)); /* a mode, no operation */
    assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&g, 1);
    { /* tensors of 2 samples, lengths of 1 */
        const int64_t a2[4] = {2, 1, 3, 2}, b2[4] = {2, 1, 2, 3}, s2[4] = {2, 1, 3, 3};
        cudnnBackendDescriptor_t A2 = cg_tensor(GX + 1, CUDNN_DATA_FLOAT, a2, as, NULL, 0, 0),
                                 B2 = cg_tensor(GX + 2, CUDNN_DATA_FLOAT, b2, bs, NULL, 0, 0),
                                 S2 = cg_tensor(GX + 3, CUDNN_DATA_FLOAT, s2, ss, NULL, 1, 0);
        CK(cg_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 5, mma, (cudnnBackendDescriptor_t[]){A2, B2, S2, mmd, L},
                 &bad));
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
        CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 1, &bad));
        assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
        cudnnBackendDescriptor_t gone[] = {g, bad, A2, B2, S2};
        cd_destroy(gone, 5);
    }
    /* the graph, its operations given out of order, run by engine 1 */
    cudnnBackendDescriptor_t order[5] = {ops[4], ops[2], ops[3], ops[1], ops[0]}, heur, cfg[2], plan, pack;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    int64_t n = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CD_DESC, 5, order));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h));
    CK(cudnnBackendFinalize(g));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CD_DESC, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    for (int i = 0; i < 2; i++) CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CD_DESC, 2, &n, cfg));
    assert_int_equal(n, 2);
    CK(cd_plan_of(c, cfg[1], &plan));
    float ha[6], hb[6], poison = -7.0f, hy[9], hr[3], hz[9], scale = 0.5f;
    int32_t len = 2;
    uint64_t seed = 5;
    for (int i = 0; i < 6; i++) ha[i] = test_frand(&seed), hb[i] = test_frand(&seed);
    void *d[6];
    size_t bytes[6] = {sizeof ha, sizeof hb, sizeof hy, sizeof hr, sizeof hz, sizeof len};
    for (int i = 0; i < 6; i++) assert_int_equal(cudaMalloc(&d[i], bytes[i]), cudaSuccess);
    for (int i = 0; i < 9; i++) hy[i] = hz[i] = poison;
    for (int i = 0; i < 3; i++) hr[i] = poison;
    const void *src[6] = {ha, hb, hy, hr, hz, &len};
    for (int i = 0; i < 6; i++) cudaMemcpy(d[i], src[i], bytes[i], cudaMemcpyHostToDevice);
    int64_t uid[7] = {GA, GB, GY, GR, GZ, GL, GSC};
    void *ptr[7] = {d[0], d[1], d[2], d[3], d[4], d[5], &scale};
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 6, uid)); /* no scale */
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 6, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &c->ws));
    CK(cudnnBackendFinalize(pack));
    assert_int_equal(cudnnBackendExecute(c->h, plan, pack), CUDNN_STATUS_BAD_PARAM);
    cd_destroy(&pack, 1);
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 7, uid));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 7, ptr));
    CK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &c->ws));
    CK(cudnnBackendFinalize(pack));
    CK(cudnnBackendExecute(c->h, plan, pack));
    scale = 99.0f; /* a value by value is read at Execute, not when the stream runs the work */
    assert_int_equal(cudaStreamSynchronize(c->s), cudaSuccess);
    scale = 0.5f;
    cudaMemcpy(hy, d[2], sizeof hy, cudaMemcpyDeviceToHost);
    cudaMemcpy(hr, d[3], sizeof hr, cudaMemcpyDeviceToHost);
    cudaMemcpy(hz, d[4], sizeof hz, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 3; i++) {
        double rsum = 0.0;
        for (int j = 0; j < 3; j++) {
            double s = ha[i * 2] * hb[j] + ha[i * 2 + 1] * hb[3 + j]; /* S[i][j] */
            rsum += scale * s;
            if (i < len && fabs(hy[i * 3 + j] - scale * s) > 1e-6)
                fail_msg("Y[%d][%d] %g, want %g", i, j, hy[i * 3 + j], scale * s);
            if (i >= len && hy[i * 3 + j] != poison) fail_msg("Y[%d][%d]: a row past the length written", i, j);
            /* Z = S^T: row j of Z is column j of S, below the length in its columns */
            if (i < len && fabs(hz[j * 3 + i] - s) > 1e-6) fail_msg("Z[%d][%d] %g, want %g", j, i, hz[j * 3 + i], s);
        }
        if (i < len && fabs(hr[i] - rsum) > 1e-5) fail_msg("R[%d] %g, want %g", i, hr[i], rsum);
        if (i >= len && hr[i] != poison) fail_msg("R[%d]: a row past the length written", i);
    }
    for (int i = 0; i < 6; i++) cudaFree(d[i]);
    cd_destroy(&pack, 1), cd_destroy(&plan, 1), cd_destroy(cfg, 2), cd_destroy(&heur, 1), cd_destroy(&g, 1);
    cd_destroy(ops, 5);
    cudnnBackendDescriptor_t all[] = {A, B, S, Y, R, Z, L, SC, ST, X, mmd, red, mul, idn};
    cd_destroy(all, (int)(sizeof all / sizeof all[0]));
}

static void test_cudnn_sdpa(void **state)
{
    (void)state;
    static cd_ctx c;
    assert_int_equal(cudnnGetVersion(), 91900);
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
    cd_setup(&c);
    cd_forward(&c);
    cd_backward(&c);
    cd_refuse_ops(&c);
    cd_refuse_plans(&c);
    cd_graph(&c);
    cd_teardown(&c);
    unsetenv("MPIDDP_EMU_CUDNN_BWD");
}
#endif

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

/* emu_wmma.h against host references: test_emu_wmma.cpp */
void test_wmma_tf32_rounding(void **state);
void test_wmma_mma_tf32(void **state);
void test_wmma_mma_bf16(void **state);
void test_wmma_memo(void **state);
void test_warp_shuffles(void **state);
void test_warp_divergent(void **state);

/* the devices MPIDDP_EMU_DEVICES makes visible */
static void test_device_count(void **state)
{
    (void)state;
    int n = 0;
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 4);
}

/* NCCL first, while this process has no stream threads yet (fork copies only the calling thread): exact sums with
 * blocking and non-blocking communicators, a duplicate device refused, an injected init failure, a hung allreduce
 * ended by abort */
static const int three_devs[3] = {0, 1, 2}, dup_devs[3] = {0, 0, 1};
static void test_nccl_blocking(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 1, NULL, 0);
}
static void test_nccl_nonblocking(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, NULL, 0);
}
static void test_nccl_duplicate_device(void **state)
{
    (void)state;
    run_nccl(3, dup_devs, 0, NULL, 100);
}
static void test_nccl_init_fault(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, "init:1", 0);
}
static void test_nccl_hang_abort(void **state)
{
    (void)state;
    run_nccl(3, three_devs, 0, "hang:2", 0);
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
        cmocka_unit_test(test_nccl_blocking),
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
