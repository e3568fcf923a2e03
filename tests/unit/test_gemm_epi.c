/* test_gemm_epi.c — the CUDA backend's gemm_epi (cuBLASLt's BIAS and BGRADB epilogues) at fp32, tf32 and bf16 against
 * a double reference within each precision's bound, against its own composition (gemm, then add_bias or colsum), and
 * its refusals, on a GPU and the emulator (labels gpu, emu); linear_bwd and train steps: test_gemm_epi_bwd.c. */
#include "test_gemm_epi.h"

ddp_backend *gpu;
int emulated;
static int bgrad_cases, bgrad_fused; /* bf16 bias gradients checked, and those that came from cuBLASLt's epilogue */
static int c16_cases, c16_fused;     /* bf16-output bias epilogues checked, and those cuBLASLt ran (one launch) */

typedef struct {
    int epi, ta, tb, a16, b16;
    int64_t M, N, K, pad; /* extra columns of A and B (NaN), and of C for BGRAD (C0): BIAS's C, BGRAD's A are packed */
    float beta;
    int shift; /* bytes every device operand sits past its allocation's start (4: as a tensor inside the parameters) */
} epi_case;

/* h copied to the device `shift` bytes into a fresh allocation (*base, to release) */
static void *on_gpu_at(const void *h, size_t bytes, int shift, void **base)
{
    OK(gpu->alloc(gpu, base, bytes + 16));
    OK(gpu->upload(gpu, (char *)*base + shift, h, bytes));
    return (char *)*base + shift;
}

/* The bias epilogue with a bf16 C (DDP_EPI_C16, beta 0, C packed) of run_case's operands, given its fp32 result C
 * and bounds tols: each value C rounded once (nearest even) on the emulator, where the same product runs; on a GPU
 * cuBLASLt may pick another algorithm for a bf16 output, so within the bound twice plus the rounding. Twice: the same
 * bits. */
static void c16_case(const epi_case *c, const char *what, int64_t M, int64_t N, int64_t K, float alpha, const void *dA,
                     int64_t lda, const void *dB, int64_t ldb, float *dbias, const float *C, const double *tols)
{
    const size_t n = (size_t)(M * N);
    uint16_t *got = calloc(n ? n : 1, 2), *got2 = malloc((n ? n : 1) * 2);
    void *base, *dC16 = on_gpu_at(got, n * 2, c->shift, &base);
    /* the launches of the same call with an fp32 C: conversions of the operands, then cuBLASLt or the unfused calls */
    void *base32, *dC32 = on_gpu_at(C, n * 4, c->shift, &base32);
    long long l0 = ddp_cuda()->launches(), launched = 0;
    OK(gpu->gemm_epi(gpu, DDP_EPI_BIAS, dbias, c->ta, c->tb, M, N, K, alpha, dA, c->a16, lda, dB, c->b16, ldb, 0.0f,
                     dC32, N));
    const long long l32 = ddp_cuda()->launches() - l0;
    gpu->release(gpu, base32);
    for (int run = 0; run < 2; run++) {
        l0 = ddp_cuda()->launches();
        OK(gpu->gemm_epi(gpu, DDP_EPI_BIAS | DDP_EPI_C16, dbias, c->ta, c->tb, M, N, K, alpha, dA, c->a16, lda, dB,
                         c->b16, ldb, 0.0f, dC16, N));
        launched = ddp_cuda()->launches() - l0;
        OK(gpu->download(gpu, run ? got2 : got, dC16, n * 2));
    }
    if (memcmp(got, got2, n * 2)) fail_msg("%s bf16 C: two runs differ", what);
    /* cuBLASLt's epilogue writes either type in one launch; without it the bf16 C takes one rounding pass more than
     * the fp32 one (the product and bias add into scratch). So cuBLASLt ran the bf16 C where it took no more launches
     * than the fp32 call (which may itself have been refused on a GPU). */
    const char *refuse = getenv("MPIDDP_EMU_LT_REFUSE");
    const int refused = emulated && refuse && *refuse == '1';
    if (K > 0) c16_cases++, c16_fused += launched <= l32;
    if (emulated && K > 0 && launched != l32 + refused)
        fail_msg("%s bf16 C: %lld launches, the fp32 C's %lld%s", what, launched, l32, refused ? " + 1" : "");
    for (size_t i = 0; i < n; i++) {
        const float w = ddp_bf16_widen(got[i]);
        const double tol = 2 * tols[i] + 0x1p-8 * (fabs(C[i]) + 2 * tols[i]);
        if (emulated ? got[i] != ddp_bf16_bits(C[i]) : !(fabs(w - C[i]) <= tol * (1 + 1e-12) + 1e-30))
            fail_msg("%s bf16 C[%zu] = 0x%04x (%.9g), the fp32 epilogue's %.9g%s", what, i, got[i], (double)w,
                     (double)C[i], emulated ? " rounded is not it" : ": beyond the bound");
    }
    gpu->release(gpu, base);
    free(got), free(got2);
}

/* The bound of test_precision.c (u: one operand's rounding; S = sum |a b|; T = S + |beta c0| + |bias|), one more
 * rounding for the bias: |c - ref| <= (2u + u^2) S + (K + 4) 2^-24 (1 + u)^2 T. The bias gradient, a sum of R values
 * each rounded by at most u, then accumulated in fp32 with the old value: u sum|a| + (R + 3) 2^-24 (1 + u) T. */
static void run_case(const epi_case *c, int p, uint64_t seed)
{
    static const int drop[3] = {0, 13, 16};
    double u = p == 0 ? 0.0 : p == 1 ? (emulated ? 0x1p-11 : 0x1p-10) : 0x1p-8;
    int64_t M = c->M, N = c->N, K = c->K, ar = c->ta ? K : M, ac = c->ta ? M : K, br = c->tb ? N : K,
            bc = c->tb ? K : N, lda = ac + (c->epi == DDP_EPI_BIAS ? c->pad : 0), ldb = bc + c->pad,
            ldc = N + (c->epi == DDP_EPI_BGRAD ? c->pad : 0);
    int64_t nbias = c->epi == DDP_EPI_BIAS ? N : M;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc((na ? na : 1) * 4), *B = malloc((nb ? nb : 1) * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4),
          *C2 = malloc(nc * 4), *bias0 = malloc((size_t)nbias * 4), *bias = malloc((size_t)nbias * 4),
          *bias2 = malloc((size_t)nbias * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = test_frand(&seed);
    for (int64_t i = 0; i < nbias; i++) bias0[i] = test_frand(&seed);
    if (c->a16 || c->b16) /* a bf16 operand holds bf16 values: the reference reads them as the GEMM does */
        for (size_t i = 0; i < (c->a16 ? na : nb); i++) (c->a16 ? A : B)[i] = round_bits((c->a16 ? A : B)[i], 16);
    uint16_t *A16 = c->a16 ? to_bits16(A, na) : NULL, *B16 = c->b16 ? to_bits16(B, nb) : NULL;
    void *base[4];
    void *dA = c->a16 ? on_gpu_at(A16, na * 2, c->shift, &base[0]) : on_gpu_at(A, na * 4, c->shift, &base[0]);
    void *dB = c->b16 ? on_gpu_at(B16, nb * 2, c->shift, &base[1]) : on_gpu_at(B, nb * 4, c->shift, &base[1]);
    float *dC = on_gpu_at(C0, nc * 4, c->shift, &base[2]);
    float *dbias = on_gpu_at(bias0, (size_t)nbias * 4, c->shift, &base[3]);
    const float alpha = c->epi == DDP_EPI_BIAS ? 0.75f : 1.0f;
    OK(gpu->set_precision(gpu, (ddp_precision)p));
    /* fused (where the backend can), twice: the same bits */
    for (int run = 0; run < 2; run++) {
        OK(gpu->upload(gpu, dC, C0, nc * 4));
        OK(gpu->upload(gpu, dbias, bias0, (size_t)nbias * 4));
        OK(gpu->gemm_epi(gpu, c->epi, dbias, c->ta, c->tb, M, N, K, alpha, dA, c->a16, lda, dB, c->b16, ldb, c->beta,
                         dC, ldc));
        OK(gpu->download(gpu, run ? C2 : C, dC, nc * 4));
        OK(gpu->download(gpu, run ? bias2 : bias, dbias, (size_t)nbias * 4));
    }
    const char *pn = ddp_precision_name((ddp_precision)p);
    char what[160];
    snprintf(what, sizeof what, "%s %s ta %d tb %d a16 %d b16 %d %lldx%lldx%lld", pn,
             c->epi == DDP_EPI_BIAS ? "bias" : "bgrad", c->ta, c->tb, c->a16, c->b16, (long long)M, (long long)N,
             (long long)K);
    if (memcmp(C, C2, nc * 4) != 0 || memcmp(bias, bias2, (size_t)nbias * 4) != 0)
        fail_msg("%s: two runs differ", what);
    double *tols = malloc((nc ? nc : 1) * sizeof(double)); /* each element's bound */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= N) { /* the padding of C is never written */
                if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4) != 0) fail_msg("%s wrote C's padding", what);
                continue;
            }
            double ref = 0, S = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = c->ta ? A[k * lda + i] : A[i * lda + k], b = c->tb ? B[j * ldb + k] : B[k * ldb + j];
                ref += a * b, S += fabs(a * b);
            }
            double c0 = C0[i * ldc + j], add = c->epi == DDP_EPI_BIAS ? bias0[j] : 0.0;
            double T = fabs(alpha) * S + fabs(c->beta * c0) + fabs(add);
            ref = alpha * ref + c->beta * c0 + add;
            double tol = (2 * u + u * u) * fabs(alpha) * S + (K + 4) * 0x1p-24 * (1 + u) * (1 + u) * T;
            tols[i * ldc + j] = tol;
            if (!(fabs(C[i * ldc + j] - ref) <= tol * (1 + 1e-12) + 1e-30))
                fail_msg("%s: C[%lld,%lld] = %.9g, reference %.9g, beyond the bound %.3g", what, (long long)i,
                         (long long)j, (double)C[i * ldc + j], ref, tol);
        }
    if (c->epi == DDP_EPI_BIAS && p == 2) c16_case(c, what, M, N, K, alpha, dA, lda, dB, ldb, dbias, C, tols);
    free(tols);
    int rounded_sum = 0; /* a column whose gradient is the sum of the bf16-rounded A, not of A */
    if (c->epi == DDP_EPI_BGRAD)
        for (int64_t j = 0; j < M; j++) {
            double ref = bias0[j], ref16 = bias0[j], S = 0;
            for (int64_t r = 0; r < K; r++) {
                ref += A[r * lda + j], ref16 += round_bits(A[r * lda + j], drop[p]), S += fabs(A[r * lda + j]);
            }
            double T = fabs(bias0[j]) + S, tight = (K + 3) * 0x1p-24 * (1 + u) * T, tol = u * S + tight;
            if (!(fabs(bias[j] - ref) <= tol * (1 + 1e-12) + 1e-30))
                fail_msg("%s: bias gradient %lld = %.9g, reference %.9g, beyond the bound %.3g", what, (long long)j,
                         (double)bias[j], ref, tol);
            if (fabs(bias[j] - ref16) <= tight && fabs(ref - ref16) > 2 * tight) rounded_sum = 1;
        }
    /* On the emulator cuBLASLt always runs at tf32 and bf16 (unless told to refuse): its bias gradient sums A as the
     * tensor cores read it, which shows at bf16; fp32 composes (the pedantic reference). */
    const char *refuse = getenv("MPIDDP_EMU_LT_REFUSE");
    int fused = p == 2 && c->epi == DDP_EPI_BGRAD && K > 1 && M <= DDP_COLPART_FLOATS && !(refuse && *refuse == '1');
    if (fused) bgrad_cases++, bgrad_fused += rounded_sum;
    if (emulated && fused && !rounded_sum)
        fail_msg("%s: the bias gradient is not the GEMM's epilogue's (no column shows it)", what);
    /* the composition (gemm, then add_bias or colsum) on the same backend: equal bits where nothing was fused */
    OK(gpu->upload(gpu, dC, C0, nc * 4));
    OK(gpu->upload(gpu, dbias, bias0, (size_t)nbias * 4));
    OK(ddp_gemm_epi(gpu, 0, c->epi, dbias, c->ta, c->tb, M, N, K, alpha, dA, c->a16, lda, dB, c->b16, ldb, c->beta, dC,
                    ldc));
    OK(gpu->download(gpu, C2, dC, nc * 4));
    OK(gpu->download(gpu, bias2, dbias, (size_t)nbias * 4));
    int composed = p == 0 || (emulated && refuse && *refuse == '1');
    if (composed && (memcmp(C, C2, nc * 4) != 0 || memcmp(bias, bias2, (size_t)nbias * 4) != 0))
        fail_msg("%s: not the bits of gemm + %s where nothing is fused", what,
                 c->epi == DDP_EPI_BIAS ? "add_bias" : "colsum");
    for (int i = 0; i < 4; i++) gpu->release(gpu, base[i]);
    free(A), free(B), free(C0), free(C), free(C2), free(bias0), free(bias), free(bias2), free(A16), free(B16);
}

static void all_cases(void)
{
    static const int64_t shapes[][3] = {{1, 3, 1}, {37, 96, 64}, {300, 24, 16}, {5, 7, 0}};
    uint64_t seed = 17;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int p = 0; p < 3; p++) {
            int64_t R = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            /* forward: y[R,N] = x[R,K] W[N,K]^T + bias (the model's form), and the other transpositions */
            static const int tr[][2] = {{0, 1}, {0, 0}, {1, 1}};
            for (int t = 0; t < 3; t++) {
                epi_case c = {DDP_EPI_BIAS, tr[t][0], tr[t][1], 0, 0, R, N, K, 2, 0.0f, 0};
                run_case(&c, p, seed++);
                c.shift = 4;
                run_case(&c, p, seed++);
                c.shift = 0;
                if (p == 2) { /* an activation stored in bf16 */
                    c.a16 = 1;
                    run_case(&c, p, seed++);
                }
            }
            /* weight gradient: dW[N,K] += dy[R,N]^T x[R,K], dbias[N] += sum_r dy (M = N, N = K, K = R) */
            for (int tb = 0; tb < 2; tb++) {
                epi_case c = {DDP_EPI_BGRAD, 1, tb, 0, 0, N, K ? K : 3, R, 1, tb ? 0.5f : 1.0f, 0};
                run_case(&c, p, seed++);
                c.shift = 4;
                run_case(&c, p, seed++);
                c.shift = 0;
                if (p == 2) {
                    c.b16 = 1;
                    run_case(&c, p, seed++);
                }
            }
        }
}

static void test_epilogues(void **state)
{
    (void)state;
    all_cases();
    /* on a GPU, where cuBLASLt may decline some layouts, this line says how often the epilogue ran */
    printf("bf16 bias gradients from cuBLASLt's epilogue: %d of %d cases\n", bgrad_fused, bgrad_cases);
    printf("bf16-output bias epilogues from cuBLASLt (fp32 bias, bf16 D): %d of %d cases\n", c16_fused, c16_cases);
}

/* cuBLASLt finding no algorithm (MPIDDP_EMU_LT_REFUSE=1 on the emulator; a GPU may, for some layouts): gemm_epi
 * composes, with the composition's bits at every precision. */
static void test_refused(void **state)
{
    (void)state;
    if (!emulated) skip();
    setenv("MPIDDP_EMU_LT_REFUSE", "1", 1);
    all_cases();
    unsetenv("MPIDDP_EMU_LT_REFUSE");
}

/* More bias-gradient columns than the column scratch holds: composed (gemm, colsum), still exact here (R = 1). */
static void test_wide_bias_gradient(void **state)
{
    (void)state;
    int64_t M = DDP_COLPART_FLOATS + 3;
    float *A = malloc((size_t)M * 4), *bias = malloc((size_t)M * 4), x = 0.5f, w = 0.0f;
    uint64_t seed = 5;
    for (int64_t i = 0; i < M; i++) A[i] = test_frand(&seed), bias[i] = 1.0f;
    float *dA = on_gpu(A, (size_t)M * 4), *dbias = on_gpu(bias, (size_t)M * 4), *dx = on_gpu(&x, 4), *dW = NULL;
    OK(gpu->alloc(gpu, (void **)&dW, (size_t)M * 4));
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    OK(gpu->gemm_epi(gpu, DDP_EPI_BGRAD, dbias, 1, 0, M, 1, 1, 1.0f, dA, 0, M, dx, 0, 1, 1.0f, dW, 1));
    OK(gpu->download(gpu, bias, dbias, (size_t)M * 4));
    for (int64_t i = 0; i < M; i++)
        if (bias[i] != 1.0f + A[i])
            fail_msg("wide bias gradient %lld: %.9g, not 1 + %.9g", (long long)i, bias[i], A[i]);
    OK(gpu->download(gpu, &w, dW + M - 1, 4));
    if (fabsf(w - round_bits(A[M - 1], 16) * 0.5f) > 0x1p-24f) fail_msg("wide weight gradient: %.9g", w);
    gpu->release(gpu, dA), gpu->release(gpu, dbias), gpu->release(gpu, dx), gpu->release(gpu, dW);
    free(A), free(bias);
}

/* What gemm_epi refuses, with one line each: a bias with beta != 0 or into a padded C, a bias gradient of an
 * untransposed, bf16 or padded A, an unknown epilogue. M = 0 is nothing to do. */
static void test_arguments(void **state)
{
    (void)state;
    float *d = NULL;
    OK(gpu->alloc(gpu, (void **)&d, 64 * 4));
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_BIAS, d, 0, 1, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 1.0f, d, 2),
                     DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "gemm_epi"));
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_BGRAD, d, 0, 0, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 1.0f, d, 2),
                     DDP_ERR_ARG);
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_BGRAD, d, 1, 0, 2, 2, 2, 1.0f, d, 1, 2, d, 0, 2, 1.0f, d, 2),
                     DDP_ERR_ARG);
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_BGRAD, d, 1, 0, 2, 2, 2, 1.0f, d, 0, 3, d, 0, 2, 1.0f, d, 2),
                     DDP_ERR_ARG);
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_BIAS, d, 0, 1, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 0.0f, d, 3),
                     DDP_ERR_ARG);
    assert_int_equal(gpu->gemm_epi(gpu, 3, d, 1, 0, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 1.0f, d, 2), DDP_ERR_ARG);
    OK(gpu->gemm_epi(gpu, DDP_EPI_BIAS, d, 0, 1, 0, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 0.0f, d, 2));
    /* a bf16 C: with the bias epilogue at bf16 only; the composition has none */
    assert_int_equal(
        gpu->gemm_epi(gpu, DDP_EPI_BGRAD | DDP_EPI_C16, d, 1, 0, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 1.0f, d, 2),
        DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "bf16 C: the bias epilogue only"));
    assert_int_equal(gpu->gemm_epi(gpu, DDP_EPI_C16, d, 0, 1, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 0.0f, d, 2),
                     DDP_ERR_ARG);
    assert_int_equal(
        ddp_gemm_epi(gpu, 0, DDP_EPI_BIAS | DDP_EPI_C16, d, 0, 1, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 0.0f, d, 2),
        DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "bf16 output"));
    OK(gpu->set_precision(gpu, DDP_PRECISION_TF32));
    assert_int_equal(
        gpu->gemm_epi(gpu, DDP_EPI_BIAS | DDP_EPI_C16, d, 0, 1, 2, 2, 2, 1.0f, d, 0, 2, d, 0, 2, 0.0f, d, 2),
        DDP_ERR_ARG);
    assert_non_null(strstr(ddp_last_error(), "bf16 operands or output need bf16 precision"));
    gpu->release(gpu, d);
}
static int setup(void **state)
{
    (void)state;
    emulated = ddp_cuda()->emulated;
    OK(ddp_backend_cuda_create(0, &gpu));
    OK(gpu->reserve(gpu, 1024));
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    gpu->destroy(gpu);
    return 0;
}

int main(void)
{
    int exit_code, ndev = cuda_test_devices(&exit_code);
    if (ndev == 0) return exit_code;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epilogues), cmocka_unit_test(test_refused),    cmocka_unit_test(test_wide_bias_gradient),
        cmocka_unit_test(test_arguments), cmocka_unit_test(test_linear_bwd), cmocka_unit_test(test_model_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
