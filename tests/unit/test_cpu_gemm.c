/* test_cpu_gemm.c — the CPU backend's fp32 gemm (backend_cpu.c, backend_cpu_dnnl.c, issue #24) on the paths this
 * build and machine take (oneDNN's fp32 matmul from 2^20 multiply-adds, OpenBLAS's sgemm below and when off). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cpu/backend_cpu_dnnl.h"
#include "test_data.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

static ddp_backend *cpu;
static int want_onednn;
static double worst_ref, worst_blas; /* largest |c - ref| / T and |c - c_openblas| / T */

/* One gemm on this build's path, checked:
 *  - the path: oneDNN is used exactly where expected (built with it, AVX-512, not turned off), counted per call: a
 *    large product with (alpha, beta) = (1, 0) or (1, 1) runs one oneDNN matmul, a small one or any other none;
 *  - per element |c - ref| <= (K + 3) 2^-24 (1 + 2^-24)^2 T against a double reference, with T = |alpha| sum|a_k b_k|
 *    + |beta c0| (about Higham's gamma_{K+3}: K products summed in any order, alpha, beta c0 and the final addition);
 *    leading dimensions wider than the rows, the padding NaN (a stride mistake shows), C's padding never written;
 *  - against OpenBLAS's cblas_sgemm on the same data (the "fp32 oneDNN vs OpenBLAS within tolerance"):
 *    within twice that bound, and the largest difference is reported;
 *  - the same call twice gives the same bits (run-to-run determinism of whichever path). */
static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta,
                      uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad,
            ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4), *C2 = malloc(nc * 4),
          *Cb = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = (int64_t)(i % (size_t)ldc) < N ? test_frand(&seed) : NAN;
    memcpy(C, C0, nc * 4), memcpy(C2, C0, nc * 4), memcpy(Cb, C0, nc * 4);
    int64_t before = ddp_cpu_dnnl_matmuls(0);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    int64_t ran = ddp_cpu_dnnl_matmuls(0) - before;
    int expect = want_onednn && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && (double)M * N * K >= 1048576.0;
    if (ran != expect)
        fail_msg("gemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g: %lld oneDNN matmuls, want %d", (long long)M,
                 (long long)N, (long long)K, ta, tb, (double)alpha, (double)beta, (long long)ran, expect);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc));
    if (memcmp(C, C2, nc * 4))
        fail_msg("gemm %lldx%lldx%lld ta %d tb %d: two calls differ", (long long)M, (long long)N, (long long)K, ta, tb);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, Cb, (int)ldc);
    double g = (double)(K + 3) * ldexp(1.0, -24) * (1.0 + ldexp(1.0, -24)) * (1.0 + ldexp(1.0, -24));
    int bad = 0;
    char first[256] = ""; /* the first bad element */
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double ref = 0.0, T = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = A[ta ? k * lda + i : i * lda + k], b = B[tb ? j * ldb + k : k * ldb + j];
                ref += a * b, T += fabs(a * b);
            }
            double c0 = C0[i * ldc + j];
            ref = alpha * ref + (beta == 0.0f ? 0.0 : beta * c0);
            T = fabs(alpha) * T + (beta == 0.0f ? 0.0 : fabs(beta * c0));
            double e = fabs(C[i * ldc + j] - ref), eb = fabs((double)C[i * ldc + j] - Cb[i * ldc + j]);
            if (T > 0 && e / T > worst_ref) worst_ref = e / T;
            if (T > 0 && eb / T > worst_blas) worst_blas = eb / T;
            if ((!(e <= g * T) || !(eb <= 2 * g * T)) && !bad++)
                snprintf(first, sizeof first, "C[%lld][%lld] = %.9g, ref %.9g, OpenBLAS %.9g, T %.3g", (long long)i,
                         (long long)j, (double)C[i * ldc + j], ref, (double)Cb[i * ldc + j], T);
        }
        for (int64_t j = N; j < ldc; j++)
            if (!isnan(C[i * ldc + j]) && !bad++)
                snprintf(first, sizeof first, "gemm wrote C's padding at [%lld][%lld]", (long long)i, (long long)j);
    }
    if (bad)
        fail_msg("gemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g: %d bad elements, the first: %s", (long long)M,
                 (long long)N, (long long)K, ta, tb, (double)alpha, (double)beta, bad, first);
    free(A), free(B), free(C0), free(C), free(C2), free(Cb);
}

/* The path oneDNN's fp32 GEMMs take here, with the reason where not, and the description run.json records: oneDNN's
 * version, and "fp32 GEMMs" exactly where they run on it. */
static void test_path(void **state)
{
    (void)state;
    const char *why = NULL;
    int usable = ddp_cpu_dnnl_usable(0, &why);
    printf("fp32 path: %s\n", usable ? "oneDNN from 2^20 multiply-adds, OpenBLAS below" : why);
    if (usable != want_onednn) fail_msg("oneDNN fp32 usable %d, want %d (%s)", usable, want_onednn, why ? why : "");
    if (!(usable || (why && *why))) fail_msg("not usable, without a reason");
    char desc[160];
    ddp_cpu_dnnl_describe(desc, sizeof desc);
    printf("onednn: '%s'\n", desc);
#ifdef DDP_TEST_HAVE_DNNL
    if (!(desc[0] >= '0' && desc[0] <= '9')) fail_msg("no oneDNN version in '%s'", desc);
    if (!strstr(desc, "fp32 GEMMs") != !want_onednn)
        fail_msg("'%s' does not say whether the fp32 GEMMs run on oneDNN (want %d)", desc, want_onednn);
#else
    if (desc[0]) fail_msg("'%s' without oneDNN in the build", desc);
#endif
}

/* a leading dimension below its row's length is refused with one line (oneDNN would read overlapping rows), C
 * untouched */
static void test_short_leading_dimension(void **state)
{
    (void)state;
    static float A[64 * 64], B[64 * 64], C[64 * 64];
    C[0] = 7.0f;
    ddp_status st = cpu->gemm(cpu, 0, 0, 64, 64, 64, 1.0f, A, 63, B, 64, 0.0f, C, 64);
    if (!(st == DDP_ERR_ARG && strstr(ddp_last_error(), "leading dimensions") && C[0] == 7.0f))
        fail_msg("lda 63 for K 64: status %d, '%s'", (int)st, ddp_last_error());
    st = cpu->gemm(cpu, 1, 1, 64, 64, 64, 1.0f, A, 64, B, 64, 0.0f, C, 32);
    if (!(st == DDP_ERR_ARG && C[0] == 7.0f)) fail_msg("ldc 32 for N 64: status %d", (int)st);
}

/* every shape with the four transpositions and (alpha, beta) = (1, 0), (1, 1), (0.75, -0.5): {M, N, K, pad}: the
 * transformer's forward/backward shapes at d 128 (qkv, out, FFN), odd ones around the switch (2^20 multiply-adds),
 * long K (to 1100), and tiny ones */
static void test_shapes(void **state)
{
    (void)state;
    static const int64_t shapes[][4] = {{300, 384, 128, 0}, {128, 384, 333, 3}, {257, 129, 65, 5}, {64, 64, 256, 1},
                                        {63, 64, 256, 1},   {40, 30, 1100, 0},  {1, 1, 1, 0},      {7, 300, 5, 2},
                                        {1100, 33, 31, 0},  {2, 1024, 512, 4}};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -0.5f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int k = 0; k < 3; k++)
                    gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ab[k][0], ab[k][1],
                              (uint64_t)(s * 16 + (size_t)(ta * 8 + tb * 4 + k)) + 1);
    printf("worst |c - ref| / T %.3g, |c - c_openblas| / T %.3g (bound per K: (K + 3) 2^-24)\n", worst_ref, worst_blas);
}

/* whether this build and machine should run the fp32 GEMMs on oneDNN; the backend */
static int setup(void **state)
{
    (void)state;
    const char *env = getenv("MPIDDP_CPU_ONEDNN"), *env32 = getenv("MPIDDP_CPU_ONEDNN_FP32");
    want_onednn = !(env && !strcmp(env, "0")) && !(env32 && !strcmp(env32, "0"));
#ifdef DDP_TEST_HAVE_DNNL
    /* oneDNN capped below AVX-512 (either of its two variables) acts as a CPU without it */
    const char *isa = getenv("ONEDNN_MAX_CPU_ISA");
    if (!isa || !*isa) isa = getenv("DNNL_MAX_CPU_ISA");
    want_onednn = want_onednn && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  (!isa || !*isa || !strncasecmp(isa, "AVX512_CORE", 11) || !strcasecmp(isa, "ALL"));
#else
    want_onednn = 0;
#endif
    OK(ddp_backend_cpu_create(1, &cpu));
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    cpu->destroy(cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_path), cmocka_unit_test(test_short_leading_dimension),
                                       cmocka_unit_test(test_shapes)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
