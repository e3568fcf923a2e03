/* test_gemm_epi.c — the CUDA backend's gemm_epi (cuBLASLt's BIAS and BGRADB epilogues) at fp32, tf32 and bf16 against
 * a double reference within each precision's bound, against its own composition (gemm, then add_bias or colsum), and
 * its refusals; on a GPU (label gpu) and on the emulator (label emu), where cuBLASLt may also be made to refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/bf16_round.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/model/models.h"
#include "cuda_test.h"
#include "test_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

static ddp_backend *gpu;
static int emulated;
static int bgrad_cases, bgrad_fused; /* bf16 bias gradients checked, and those that came from cuBLASLt's epilogue */
static int c16_cases, c16_fused;     /* bf16-output bias epilogues checked, and those cuBLASLt ran (one launch) */

static float round_bits(float f, int drop) /* nearest even, dropping `drop` mantissa bits (finite inputs) */
{
    if (!drop || isnan(f)) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + ((1u << (drop - 1)) - 1u) + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
    memcpy(&f, &u, 4);
    return f;
}
static void *on_gpu(const void *h, size_t bytes)
{
    void *d = NULL;
    OK(gpu->alloc(gpu, &d, bytes ? bytes : 4));
    OK(gpu->upload(gpu, d, h, bytes));
    return d;
}
/* x as bf16 bits (nearest even), the form of an activation the model stores in bf16 */
static uint16_t *to_bits16(const float *x, size_t n)
{
    uint16_t *y = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) {
        float r = round_bits(x[i], 16);
        uint32_t u;
        memcpy(&u, &r, 4);
        y[i] = (uint16_t)(u >> 16);
    }
    return y;
}

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

/* linear_bwd (dW += dy^T x, dbias += sum dy, dx = dy W from one rounding of dy) against its composition through
 * gemm_epi and gemm (linear_bwd removed from the op table): the same bits on the emulator, where the two see the same
 * bf16 operands; on a GPU, whose algorithms may differ with the scratch's offsets, within 1e-5 (relative L2) of each
 * other, fp32 accumulation of the same products. With x in bf16 or fp32, with and without a bias, at every
 * precision, and with cuBLASLt refusing (MPIDDP_EMU_LT_REFUSE=1). At bf16, dy handed over in bf16 (dy16: the
 * rounding linear_bwd would make) gives the same dW and dx as dy in fp32: the same bits on the emulator; its bias
 * gradient (linear_bwd's own: the composition refuses a bias of a bf16 dy) the sum of those bf16 values, the bits of
 * the fp32 dy's epilogue where cuBLASLt ran, else within the fp32 accumulation bound of that sum. */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
/* the case's results (dW, dbias, dx) through linear_bwd and through its composition; fused[] (NULL: freed) gets
 * linear_bwd's */
static void linear_bwd_case(int p, int64_t R, int64_t N, int64_t K, int dy16, int x16, int with_bias, uint64_t seed,
                            float *fused[3])
{
    size_t ndy = (size_t)(R * N), nx = (size_t)(R * K), nw = (size_t)(N * K);
    float *dy = test_rnd((int64_t)ndy, seed, 2.0f, -1.0f), *x = test_rnd((int64_t)nx, seed + 1, 2.0f, -1.0f),
          *W = test_rnd((int64_t)nw, seed + 2, 2.0f, -1.0f), *dW0 = test_rnd((int64_t)nw, seed + 3, 2.0f, -1.0f),
          *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    uint16_t *x16b = to_bits16(x, nx), *dy16b = to_bits16(dy, ndy);
    float *out[2][3];
    for (int way = 0; way < 2; way++) {
        float *dW = on_gpu(dW0, nw * 4), *db = on_gpu(b0, (size_t)N * 4), *dWt = on_gpu(W, nw * 4), *dx = NULL;
        void *dxin = x16 ? on_gpu(x16b, nx * 2) : on_gpu(x, nx * 4),
             *ddy = dy16 ? on_gpu(dy16b, ndy * 2) : on_gpu(dy, ndy * 4);
        OK(gpu->alloc(gpu, (void **)&dx, nx * 4));
        OK(gpu->set_precision(gpu, (ddp_precision)p));
        ddp_status (*own)(ddp_backend *, const void *, int, const void *, int, const float *, float *, float *, void *,
                          int, int64_t, int64_t, int64_t) = gpu->linear_bwd;
        if (way) gpu->linear_bwd = NULL; /* the composition */
        ddp_status st = ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, dW, with_bias ? db : NULL, dx, 0, R, N, K);
        gpu->linear_bwd = own;
        if (way && dy16 && with_bias) { /* refused with its line; linear_bwd's results stand for both */
            if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dy"))
                fail_msg("the composition took a bias gradient of a bf16 dy (%d: %s)", (int)st, ddp_last_error());
            const size_t nk[3] = {nw, (size_t)N, nx};
            for (int k = 0; k < 3; k++) out[1][k] = malloc(nk[k] * 4), memcpy(out[1][k], out[0][k], nk[k] * 4);
            OK(gpu->download(gpu, out[1][1], db, (size_t)N * 4));
            if (memcmp(out[1][1], b0, (size_t)N * 4)) fail_msg("the refused composition wrote a bias gradient");
            memcpy(out[1][1], out[0][1], (size_t)N * 4);
            gpu->release(gpu, ddy), gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dWt);
            gpu->release(gpu, dx), gpu->release(gpu, dxin);
            break;
        }
        OK(st);
        out[way][0] = malloc(nw * 4), out[way][1] = malloc((size_t)N * 4), out[way][2] = malloc(nx * 4);
        OK(gpu->download(gpu, out[way][0], dW, nw * 4));
        OK(gpu->download(gpu, out[way][1], db, (size_t)N * 4));
        OK(gpu->download(gpu, out[way][2], dx, nx * 4));
        gpu->release(gpu, ddy), gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dWt);
        gpu->release(gpu, dx), gpu->release(gpu, dxin);
    }
    if (!with_bias && memcmp(out[0][1], b0, (size_t)N * 4) != 0) fail_msg("linear_bwd without a bias wrote one");
    size_t n[3] = {nw, (size_t)N, nx};
    static const char *what[3] = {"dW", "dbias", "dx"};
    for (int k = 0; k < 3; k++) {
        int same = memcmp(out[0][k], out[1][k], n[k] * 4) == 0;
        double d = rel_l2(out[0][k], out[1][k], n[k]);
        if (emulated ? !same : !(d <= 1e-5))
            fail_msg("%s linear_bwd %lldx%lldx%lld dy16 %d x16 %d bias %d: %s %s its composition's (relative L2 %.3g)",
                     ddp_precision_name((ddp_precision)p), (long long)R, (long long)N, (long long)K, dy16, x16,
                     with_bias, what[k], emulated ? "not the bits of" : "too far from", d);
        free(out[1][k]);
        if (fused)
            fused[k] = out[0][k];
        else
            free(out[0][k]);
    }
    free(dy), free(x), free(W), free(dW0), free(b0), free(x16b), free(dy16b);
}
/* the bias gradient g16 of linear_bwd_case's bf16 dy (seed's): b0 + the sum of the bf16 values, within the fp32
 * accumulation bound of a double reference; where cuBLASLt ran, the bits of g32, the fp32 dy's epilogue (which sums
 * the same bf16 values) */
static void bias_of16(int64_t R, int64_t N, uint64_t seed, const float *g16, const float *g32)
{
    float *dy = test_rnd(R * N, seed, 2.0f, -1.0f), *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    const char *refuse = getenv("MPIDDP_EMU_LT_REFUSE");
    for (int64_t c = 0; c < N; c++) {
        double ref = b0[c], S = fabs(b0[c]);
        for (int64_t r = 0; r < R; r++) {
            double v = round_bits(dy[r * N + c], 16);
            ref += v, S += fabs(v);
        }
        if (!(fabs(g16[c] - ref) <= (R + 3) * 0x1p-24 * S + 1e-30))
            fail_msg("bf16 linear_bwd %lldx%lld: the bias gradient of a bf16 dy %lld = %.9g, the sum of its values "
                     "%.9g",
                     (long long)R, (long long)N, (long long)c, (double)g16[c], ref);
    }
    if (emulated && !(refuse && *refuse == '1') && R > 1 && memcmp(g16, g32, (size_t)N * 4))
        fail_msg("bf16 linear_bwd %lldx%lld: the bias gradient of a bf16 dy is not the bits of the fp32 dy's epilogue",
                 (long long)R, (long long)N);
    free(dy), free(b0);
}
/* dx written in bf16 (dx16) at bf16: the rounding of the fp32 dx of the same call, bit for bit on the emulator (on a
 * GPU, whose cuBLASLt may choose another algorithm for a bf16 D, within 2^-8 relative L2, a rounding's size), with
 * dW and dbias the same bits. The composition refuses a bf16 dx with one line, and
 * so does linear_bwd at another precision. */
static void linear_bwd_dx16_case(int64_t R, int64_t N, int64_t K, int dy16, int x16, int with_bias, uint64_t seed)
{
    size_t ndy = (size_t)(R * N), nx = (size_t)(R * K), nw = (size_t)(N * K);
    float *dy = test_rnd((int64_t)ndy, seed, 2.0f, -1.0f), *x = test_rnd((int64_t)nx, seed + 1, 2.0f, -1.0f),
          *W = test_rnd((int64_t)nw, seed + 2, 2.0f, -1.0f), *dW0 = test_rnd((int64_t)nw, seed + 3, 2.0f, -1.0f),
          *b0 = test_rnd(N, seed + 4, 2.0f, -1.0f);
    uint16_t *x16b = to_bits16(x, nx), *dy16b = to_bits16(dy, ndy);
    void *dxin = x16 ? on_gpu(x16b, nx * 2) : on_gpu(x, nx * 4),
         *ddy = dy16 ? on_gpu(dy16b, ndy * 2) : on_gpu(dy, ndy * 4);
    float *dWt = on_gpu(W, nw * 4), *res[2][3];
    OK(gpu->set_precision(gpu, DDP_PRECISION_BF16));
    for (int o16 = 0; o16 < 2; o16++) {
        float *dW = on_gpu(dW0, nw * 4), *db = on_gpu(b0, (size_t)N * 4);
        void *dx = NULL;
        OK(gpu->alloc(gpu, &dx, nx * 4 + 8));
        OK(gpu->zero(gpu, dx, nx * 4 + 8));
        OK(ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, dW, with_bias ? db : NULL, dx, o16, R, N, K));
        res[o16][0] = malloc(nw * 4 + 4), res[o16][1] = malloc((size_t)N * 4 + 4), res[o16][2] = malloc(nx * 4 + 4);
        OK(gpu->download(gpu, res[o16][0], dW, nw * 4));
        OK(gpu->download(gpu, res[o16][1], db, (size_t)N * 4));
        OK(gpu->download(gpu, res[o16][2], dx, nx * (o16 ? 2 : 4)));
        gpu->release(gpu, dW), gpu->release(gpu, db), gpu->release(gpu, dx);
    }
    float *w16 = malloc(nx * 4 + 4); /* the bf16 dx widened, and the fp32 dx rounded */
    int64_t bad = -1;
    for (size_t i = 0; i < nx; i++) {
        uint32_t u = (uint32_t)((uint16_t *)res[1][2])[i] << 16;
        memcpy(&w16[i], &u, 4);
        if (bad < 0 && memcmp(&w16[i], &(float){round_bits(res[0][2][i], 16)}, 4)) bad = (int64_t)i;
    }
    const double d = rel_l2(w16, res[0][2], nx);
    if (emulated ? bad >= 0 : !(d <= 0x1p-8))
        fail_msg(
            "bf16 linear_bwd %lldx%lldx%lld dy16 %d x16 %d bias %d: the bf16 dx is not the fp32 dx rounded (element "
            "%lld, relative L2 %.3g)",
            (long long)R, (long long)N, (long long)K, dy16, x16, with_bias, (long long)bad, d);
    for (int k = 0; k < 2; k++) {
        const size_t nk = k ? (size_t)N : nw;
        if (emulated ? memcmp(res[0][k], res[1][k], nk * 4) != 0 : !(rel_l2(res[1][k], res[0][k], nk) <= 1e-5))
            fail_msg("bf16 linear_bwd %lldx%lldx%lld: %s changed with a bf16 dx", (long long)R, (long long)N,
                     (long long)K, k ? "dbias" : "dW");
    }
    ddp_status (*own)(ddp_backend *, const void *, int, const void *, int, const float *, float *, float *, void *, int,
                      int64_t, int64_t, int64_t) = gpu->linear_bwd;
    gpu->linear_bwd = NULL; /* the composition: refused, one line */
    ddp_status st = ddp_linear_bwd(gpu, 1, ddy, dy16, dxin, x16, dWt, (float *)dxin, NULL, ddy, 1, R, N, K);
    gpu->linear_bwd = own;
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dx") || strchr(ddp_last_error(), '\n'))
        fail_msg("the composition took a bf16 dx (%d: %s)", (int)st, ddp_last_error());
    OK(gpu->set_precision(gpu, DDP_PRECISION_TF32));
    st = gpu->linear_bwd(gpu, dy, 0, x, 0, W, dW0, NULL, x, 1, R, N, K); /* refused before any pointer is read */
    if (st != DDP_ERR_ARG || !strstr(ddp_last_error(), "bf16 dx needs bf16 precision"))
        fail_msg("linear_bwd at tf32 took a bf16 dx (%d: %s)", (int)st, ddp_last_error());
    for (int k = 0; k < 3; k++) free(res[0][k]), free(res[1][k]);
    free(w16), free(dy), free(x), free(W), free(dW0), free(b0), free(x16b), free(dy16b);
    gpu->release(gpu, dxin), gpu->release(gpu, ddy), gpu->release(gpu, dWt);
}
static void linear_bwd_cases(void)
{
    static const int64_t dx16_shapes[][3] = {{37, 96, 32}, {300, 24, 16}, {1, 3, 5}, {0, 4, 4}, {5, 8, 6}};
    for (size_t s = 0; s < sizeof dx16_shapes / sizeof *dx16_shapes; s++)
        for (int v = 0; v < 4; v++) /* dy16, x16 and the bias: four of their combinations */
            linear_bwd_dx16_case(dx16_shapes[s][0], dx16_shapes[s][1], dx16_shapes[s][2], v & 1, (v >> 1) & 1,
                                 v == 0 || v == 3 ? 0 : 1, 777 + 10 * s + (uint64_t)v);
    static const int64_t shapes[][3] = {{37, 96, 32}, {300, 24, 16}, {1, 3, 5}, {0, 4, 4}};
    uint64_t seed = 99;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t R = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int p = 0; p < 3; p++)
            for (int bias = 0; bias < 2; bias++)
                for (int x16 = 0; x16 <= (p == 2); x16++) {
                    seed += 10;
                    float *f32[3], *f16[3];
                    const int both = p == 2; /* dy16 as well: the results of the same seed's fp32 dy */
                    linear_bwd_case(p, R, N, K, 0, x16, bias, seed, both ? f32 : NULL);
                    if (!both) continue;
                    linear_bwd_case(p, R, N, K, 1, x16, bias, seed, f16);
                    size_t n[3] = {(size_t)(N * K), (size_t)N, (size_t)(R * K)};
                    if (bias) bias_of16(R, N, seed, f16[1], f32[1]);
                    for (int k = 0; k < 3; k++) {
                        if (bias && k == 1) {
                            free(f16[k]), free(f32[k]);
                            continue;
                        }
                        double d = rel_l2(f16[k], f32[k], n[k]);
                        if (emulated ? memcmp(f16[k], f32[k], n[k] * 4) != 0 : !(d <= 1e-5))
                            fail_msg("bf16 linear_bwd %lldx%lldx%lld x16 %d: output %d from a bf16 dy %s from an fp32 "
                                     "dy (relative L2 %.3g)",
                                     (long long)R, (long long)N, (long long)K, x16, k,
                                     emulated ? "not the bits of that" : "too far from that", d);
                        free(f16[k]), free(f32[k]);
                    }
                }
    }
}
static void test_linear_bwd(void **state)
{
    (void)state;
    linear_bwd_cases();
    if (!emulated) return;
    setenv("MPIDDP_EMU_LT_REFUSE", "1", 1);
    linear_bwd_cases();
    unsetenv("MPIDDP_EMU_LT_REFUSE");
}

/* Two accumulated train steps of a 2-layer encoder at prec, with fused epilogues (MPIDDP_CUBLASLT=1) or not: the
 * gradient and the launches (kernels and cuBLAS calls) per step. */
static float *model_steps(ddp_precision prec, int fuse, double dropout, long long *launches, int64_t *n)
{
    enum { NB = 2, B = 12, D = 11, C = 3 };
    test_batch bat[NB];
    int64_t max_rows = 0;
    uint64_t s = 12345;
    for (int k = 0; k < NB; k++) {
        test_batch_make(&bat[k], &s, B, 9, C, D, 2.0, 100 * k, 1);
        max_rows = bat[k].b.nrows > max_rows ? bat[k].b.nrows : max_rows;
    }
    setenv("MPIDDP_CUBLASLT", fuse ? "1" : "0", 1);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = 32, c.heads = 2, c.ff = 48, c.layers = 2;
    c.max_positions = 16, c.dropout = dropout, c.max_batch_rows = max_rows, c.max_batch_samples = B;
    c.precision = prec;
    ddp_model m;
    OK(ddp_model_create_on(gpu, &c, &m));
    unsetenv("MPIDDP_CUBLASLT");
    OK(gpu->set_precision(gpu, prec));
    *n = ddp_model_num_params(&m);
    void *p, *g;
    OK(gpu->alloc(gpu, &p, (size_t)*n * 4));
    OK(gpu->alloc(gpu, &g, (size_t)*n * 4));
    OK(m.init(m.self, p, 9));
    long long l0 = ddp_cuda()->launches();
    for (int k = 0; k < NB; k++) {
        float loss[B], prob[B];
        int64_t pred[B];
        ddp_forward_out o = {.loss = loss, .prob = prob, .pred = pred};
        OK(m.train_step(m.self, &bat[k].b, p, g, &o, NULL, NULL));
    }
    *launches = (ddp_cuda()->launches() - l0) / NB;
    float *grad = malloc((size_t)*n * 4);
    OK(gpu->download(gpu, grad, g, (size_t)*n * 4));
    /* the key third of every in_proj bias gradient is the exact 0 (transformer_pass.c), written after the epilogue */
    int64_t off = 0, keys = 0;
    for (int t = 0; t < m.ntensors; t++) {
        int64_t cnt = m.tensors[t].shape[0] * (m.tensors[t].ndim == 2 ? m.tensors[t].shape[1] : 1);
        if (strstr(m.tensors[t].name, "in_proj_bias")) {
            for (int64_t k = cnt / 3; k < 2 * cnt / 3; k++)
                if (grad[off + k] != 0.0f)
                    fail_msg("%s[%lld] = %g, not 0", m.tensors[t].name, (long long)k, (double)grad[off + k]);
            keys++;
        }
        off += cnt;
    }
    if (keys != 2) fail_msg("%lld in_proj biases found, want 2", (long long)keys);
    gpu->release(gpu, p), gpu->release(gpu, g);
    m.destroy(m.self);
    for (int k = 0; k < NB; k++) test_batch_free(&bat[k]);
    return grad;
}

/* The encoder's steps with the epilogues fused (the qkv and head biases in the forward GEMMs, the bias gradients of
 * qkv, out_proj, linear2 and the head in the weight-gradient GEMMs, no residual-gradient copy without dropout)
 * against the unfused calls, at tf32 and bf16, with dropout 0 and 0.1: the same gradient within the operands'
 * rounding (relative L2 distance under 2%: a bias gradient now sums the gradient as the GEMM reads it), fewer
 * launches (printed for docs/architecture.md); on the emulator at bf16 the bits differ, so the fused path ran. */
static void test_model_steps(void **state)
{
    (void)state;
    for (int p = 1; p <= 2; p++)
        for (int dr = 0; dr < 2; dr++) {
            long long lf, lu;
            int64_t n;
            float *gf = model_steps((ddp_precision)p, 1, dr ? 0.1 : 0.0, &lf, &n);
            float *gu = model_steps((ddp_precision)p, 0, dr ? 0.1 : 0.0, &lu, &n);
            double num = 0, den = 0;
            for (int64_t i = 0; i < n; i++) {
                if (!isfinite(gf[i])) fail_msg("fused gradient %lld is not finite", (long long)i);
                num += ((double)gf[i] - gu[i]) * ((double)gf[i] - gu[i]), den += (double)gu[i] * gu[i];
            }
            const char *pn = ddp_precision_name((ddp_precision)p);
            printf("%s dropout %s: %lld launches per step fused, %lld unfused; relative gradient distance %.2g\n", pn,
                   dr ? "0.1" : "0", lf, lu, sqrt(num / den));
            if (!(den > 0 && sqrt(num / den) < 0.02))
                fail_msg("%s dropout %d: fused and unfused gradients %.3g apart", pn, dr, sqrt(num / (den + 1e-300)));
            if (!(lf < lu)) fail_msg("%s: %lld launches fused, %lld unfused", pn, lf, lu);
            if (emulated && p == 2 && num == 0) fail_msg("%s: the fused step gave the unfused bits", pn);
            free(gf), free(gu);
        }
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
