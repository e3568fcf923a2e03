/* test_emu.c — the CUDA host emulator's own semantics, which the GPU tests rely on: streams, events, device memory,
 * kernels and __syncthreads, launch limits, cuBLAS, bf16/TF32 rounding, wmma (test_emu_wmma.cpp), NCCL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "emu_cuda.h"
#include "test_data.h"

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

int main(void)
{
    setenv("MPIDDP_EMU_DEVICES", "4", 1);
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
        cmocka_unit_test(test_wmma_tf32_rounding), /* the test_wmma_* tests: test_emu_wmma.cpp */
        cmocka_unit_test(test_wmma_mma_tf32),
        cmocka_unit_test(test_wmma_mma_bf16),
        cmocka_unit_test(test_wmma_memo),
        cmocka_unit_test_teardown(test_streams, open_gates),
        cmocka_unit_test(test_kernels), /* last: it leaves the sticky fault set */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
