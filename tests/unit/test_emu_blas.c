/* test_emu_blas.c — the emulated cuBLAS and cuBLASLt (test cases of test_emu_runtime.c's main): Sgemm, GemmEx and
 * the math modes, bf16 and TF32 rounding against an independent round-to-nearest-even, cublasLtMatmul's epilogues. */
#include "test_emu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void test_blas(void **state)
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
void test_rounding(void **state)
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
void test_gemm_ex(void **state)
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
void test_cublaslt(void **state)
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
