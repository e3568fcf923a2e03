/* test_emu.c — the CUDA host emulator's own semantics, which the GPU tests rely on: stream order and the
 * lack of it between streams (made deterministic with a gate: a host operation that blocks a stream until
 * the test opens it), events, the legacy stream against blocking and non-blocking streams, NaN-filled and
 * tracked device memory, kernels whose threads meet at __syncthreads, launch limits, a divergent barrier
 * reported as a fault, cuBLAS in column-major, bf16 and TF32 rounding (to nearest even) and cublasGemmEx with
 * TF32 and bf16 inputs, the warp matrix functions of nvcuda::wmma (test_emu_wmma.cpp), and NCCL over shared
 * memory between forked processes
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
    if (hi >= 0x7f800000u) dhi = ldexp(1.0, 128), hi = 0x7f800000u;
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
static void test_rounding(void)
{
    static const struct {
        uint32_t in;
        uint16_t bf16;
    } bf[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80},
        {0xbf808000u, 0xbf80}, {0xbf818000u, 0xbf82}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, {0x7fc00000u, 0x7fff},
        {0x7f800001u, 0x7fff}, {0xffc00000u, 0x7fff}, {0x7f7fffffu, 0x7f80}, {0x7f7f7fffu, 0x7f7f}, {0x7f7f8000u, 0x7f80},
        {0xff7fffffu, 0xff80}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002}, {0x00010000u, 0x0001}, {0x00008001u, 0x0001},
        {0x80008000u, 0x8000}, {0x007fffffu, 0x0080}, {0x00000000u, 0x0000}, {0x80000000u, 0x8000},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        CHECK(bf16_bits(from_bits(bf[i].in)) == bf[i].bf16, "bf16(0x%08x) = 0x%04x, want 0x%04x", bf[i].in,
              bf16_bits(from_bits(bf[i].in)), bf[i].bf16);
    __nv_bfloat16 h = {0x3f81};
    CHECK(__bfloat162float(h) == 1.0f + 0x1p-7f, "bf16 0x3f81 widens to %.9g", __bfloat162float(h));
    h.x = 0x0001;
    CHECK(__bfloat162float(h) == 0x1p-133f, "the smallest bf16 denormal widens to %g", __bfloat162float(h));
    static const struct {
        uint32_t in, out;
    } tf[] = {
        {0x3f801000u, 0x3f800000u}, {0x3f803000u, 0x3f804000u}, {0x3f801001u, 0x3f802000u}, {0xbf803000u, 0xbf804000u},
        {0x7f7fffffu, 0x7f800000u}, {0x7f800000u, 0x7f800000u}, {0xff800000u, 0xff800000u}, {0x00001000u, 0x00000000u},
        {0x00003000u, 0x00004000u}, {0x80003000u, 0x80004000u}, {0x3f802000u, 0x3f802000u},
    };
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++)
        CHECK(bits_of(ddp_emu_tf32(from_bits(tf[i].in))) == tf[i].out, "tf32(0x%08x) = 0x%08x, want 0x%08x", tf[i].in,
              bits_of(ddp_emu_tf32(from_bits(tf[i].in))), tf[i].out);
    CHECK(isnan(ddp_emu_tf32(from_bits(0x7f800001u))) && isnan(ddp_emu_tf32(from_bits(0xffc00000u))), "tf32 of a NaN is not NaN");
    uint64_t seed = 12345;
    int bad_bf = 0, bad_tf = 0;
    for (int i = 0; i < 1000000; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(seed >> 32);
        if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u; /* a bf16 tie */
        if (i % 4 == 2) u = (u & 0xffffe000u) | 0x1000u; /* a TF32 tie */
        if ((u & 0x7f800000u) == 0x7f800000u) continue;   /* Inf and NaN: above */
        bad_bf += (uint32_t)bf16_bits(from_bits(u)) << 16 != rne_ref(u, 16);
        bad_tf += bits_of(ddp_emu_tf32(from_bits(u))) != rne_ref(u, 13);
    }
    CHECK(!bad_bf && !bad_tf, "random patterns: %d bf16 and %d TF32 roundings differ from round-to-nearest-even", bad_bf, bad_tf);
}

/* cublasGemmEx and the math mode: TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, or Sgemm and COMPUTE_32F under
 * CUBLAS_TF32_TENSOR_OP_MATH) rounds A and B first, pedantic never does; bf16 A and B are exact inputs; fp32
 * accumulation. Values chosen so each rounding shows: 1 + 2^-12 is 1 in TF32, 1 + 2^-9 is 1 in bf16 but not in TF32. */
static void test_gemm_ex(void)
{
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
    EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    float one = 1, zero = 0;
    const float exact = K * (1.0f + 0x1p-12f), tf32 = K;
#define C00(what, want)                                                                                                  \
    do {                                                                                                             \
        cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);                                                         \
        CHECK(C[0] == (want) && C[M * N - 1] == (want), "%s: C = %.9g, want %.9g", what, C[0], (double)(want));      \
    } while (0)
    /* column-major A [M x K] (lda M), B [K x N] (ldb K) */
    EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M), CUBLAS_STATUS_SUCCESS);
    C00("sgemm, default math", exact);
    EQ(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M), CUBLAS_STATUS_SUCCESS);
    C00("sgemm, TF32 math", tf32);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx 32F, TF32 math", tf32);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx 32F pedantic, TF32 math", exact);
    EQ(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
    EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M), CUBLAS_STATUS_SUCCESS);
    C00("sgemm, pedantic math", exact);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx FAST_TF32, pedantic math", tf32);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA2, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx FAST_TF32 of 1 + 2^-9", K * (1.0f + 0x1p-9f));
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF, K, &zero, dC, CUDA_R_32F,
                    M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx bf16 of 1 + 2^-9", (float)K);
    /* k = 0: C = beta C, nothing read */
    float two = 2;
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, 0, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF, 1, &two, dC, CUDA_R_32F,
                    M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    C00("gemmEx bf16, k = 0, beta 2", 2.0f * K);
    /* what cuBLAS refuses */
    EQ(cublasSetMathMode(h, (cublasMath_t)7), CUBLAS_STATUS_INVALID_VALUE);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF, K, &zero, dC, CUDA_R_32F,
                    M, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_NOT_SUPPORTED);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_NOT_SUPPORTED);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA16, CUDA_R_16BF, M, dB16, CUDA_R_16BF, K, &zero, dC, CUDA_R_16BF,
                    M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_NOT_SUPPORTED);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, (cublasGemmAlgo_t)0), CUBLAS_STATUS_NOT_SUPPORTED);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M - 1, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_INVALID_VALUE);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, A, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_INVALID_VALUE);
    EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_SUCCESS);
    EQ(cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_32F, M, dB, CUDA_R_32F, K, &zero, dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_NOT_INITIALIZED);
#undef C00
    cublasDestroy(h);
    cudaFree(dA), cudaFree(dA2), cudaFree(dB), cudaFree(dC), cudaFree(dA16), cudaFree(dB16);
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

/* emu_wmma.h against host references (test_emu_wmma.cpp): the number of failed checks, the first one in msg */
int ddp_test_emu_wmma(char *msg, size_t cap);
static void test_wmma(void)
{
    char msg[256];
    int f = ddp_test_emu_wmma(msg, sizeof msg);
    CHECK(f == 0, "wmma: %d checks failed, the first: %s", f, msg);
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
    test_rounding();
    test_gemm_ex();
    test_wmma();
    test_streams();
    test_kernels(); /* last: it leaves the sticky fault set */
    return check_summary();
}
