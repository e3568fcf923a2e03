/* test_cpu_gemm.c — the CPU backend's fp32 gemm (backend_cpu.c, backend_cpu_dnnl.c, issue #24) on the paths this build
 * and machine take: oneDNN's fp32 matmul for products of at least 2^20 multiply-adds with alpha 1 and beta 0 or 1,
 * OpenBLAS's sgemm for everything else, or OpenBLAS only with MPIDDP_CPU_ONEDNN_FP32=0 (the second CTest entry).
 * Checks:
 *  - the path: oneDNN is used exactly where expected (built with it, AVX-512, not turned off), counted per call:
 *    a large product with (alpha, beta) = (1, 0) or (1, 1) runs one oneDNN matmul, a small one or any other
 *    (alpha, beta) none;
 *  - every shape (odd ones, large and small, K from 1 to 1100) with the four transpositions, leading dimensions
 *    wider than the rows (the padding holds NaN, so a stride mistake shows) and (alpha, beta) = (1, 0), (1, 1),
 *    (0.75, -0.5): per element |c - ref| <= (K + 3) 2^-24 (1 + 2^-24)^2 T against a double reference, with
 *    T = |alpha| sum|a_k b_k| + |beta c0| (about Higham's gamma_{K+3}: K products summed in any order, alpha, beta c0
 *    and the final addition); C's padding is never written;
 *  - against OpenBLAS's cblas_sgemm on the same data (the "fp32 oneDNN vs OpenBLAS within tolerance"):
 *    within twice that bound, and the largest difference is reported;
 *  - the same call twice gives the same bits (run-to-run determinism of whichever path);
 *  - a leading dimension below its row's length is refused with one line, C untouched;
 *  - the description run.json records: oneDNN's version, and "fp32 GEMMs" exactly where they run on it. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/backend_cpu_dnnl.h"
#include "check.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OK(call) CHECK((call) == DDP_OK, "%s: %s", #call, ddp_last_error())

static ddp_backend *cpu;
static int want_onednn;
static double worst_ref, worst_blas; /* largest |c - ref| / T and |c - c_openblas| / T */

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4), *C2 = malloc(nc * 4),
          *Cb = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = (int64_t)(i % (size_t)ldc) < N ? frand(&seed) : NAN;
    memcpy(C, C0, nc * 4), memcpy(C2, C0, nc * 4), memcpy(Cb, C0, nc * 4);
    int64_t before = ddp_cpu_dnnl_matmuls(0);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    int64_t ran = ddp_cpu_dnnl_matmuls(0) - before;
    int expect = want_onednn && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && (double)M * N * K >= 1048576.0;
    CHECK(ran == expect, "gemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g: %lld oneDNN matmuls, want %d", (long long)M,
          (long long)N, (long long)K, ta, tb, (double)alpha, (double)beta, (long long)ran, expect);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc));
    CHECK(!memcmp(C, C2, nc * 4), "gemm %lldx%lldx%lld ta %d tb %d: two calls differ", (long long)M, (long long)N,
          (long long)K, ta, tb);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, Cb, (int)ldc);
    double g = (double)(K + 3) * ldexp(1.0, -24) * (1.0 + ldexp(1.0, -24)) * (1.0 + ldexp(1.0, -24));
    int bad = 0;
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
            if (!(e <= g * T) || !(eb <= 2 * g * T)) {
                if (!bad++)
                    CHECK(0, "gemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g: C[%lld][%lld] = %.9g, ref %.9g, OpenBLAS %.9g, T %.3g",
                          (long long)M, (long long)N, (long long)K, ta, tb, (double)alpha, (double)beta, (long long)i,
                          (long long)j, (double)C[i * ldc + j], ref, (double)Cb[i * ldc + j], T);
            }
        }
        for (int64_t j = N; j < ldc; j++)
            if (!isnan(C[i * ldc + j]) && !bad++) CHECK(0, "gemm wrote C's padding at [%lld][%lld]", (long long)i, (long long)j);
    }
    CHECK(!bad, "%d bad elements", bad);
    free(A), free(B), free(C0), free(C), free(C2), free(Cb);
}

int main(void)
{
    const char *env = getenv("MPIDDP_CPU_ONEDNN"), *env32 = getenv("MPIDDP_CPU_ONEDNN_FP32"), *why = NULL;
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
    int usable = ddp_cpu_dnnl_usable(0, &why);
    printf("fp32 path: %s\n", usable ? "oneDNN from 2^20 multiply-adds, OpenBLAS below" : why);
    CHECK(usable == want_onednn, "oneDNN fp32 usable %d, want %d (%s)", usable, want_onednn, why ? why : "");
    CHECK(usable || (why && *why), "not usable, without a reason");
    char desc[160];
    ddp_cpu_dnnl_describe(desc, sizeof desc);
    printf("onednn: '%s'\n", desc);
#ifdef DDP_TEST_HAVE_DNNL
    CHECK(desc[0] >= '0' && desc[0] <= '9', "no oneDNN version in '%s'", desc);
    CHECK(!strstr(desc, "fp32 GEMMs") == !want_onednn, "'%s' does not say whether the fp32 GEMMs run on oneDNN (want %d)",
          desc, want_onednn);
#else
    CHECK(!desc[0], "'%s' without oneDNN in the build", desc);
#endif
    OK(ddp_backend_cpu_create(1, &cpu));
    if (failures) return check_summary();
    /* {M, N, K, pad}: the transformer's forward/backward shapes at d 128 (qkv, out, FFN), odd ones around the
     * switch (2^20 multiply-adds), long K, and tiny ones */
    static const int64_t shapes[][4] = {{300, 384, 128, 0}, {128, 384, 333, 3}, {257, 129, 65, 5},  {64, 64, 256, 1},
                                        {63, 64, 256, 1},   {40, 30, 1100, 0},  {1, 1, 1, 0},       {7, 300, 5, 2},
                                        {1100, 33, 31, 0},  {2, 1024, 512, 4}};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -0.5f}};
    /* a leading dimension below its row's length is refused (oneDNN would read overlapping rows), C untouched */
    {
        static float A[64 * 64], B[64 * 64], C[64 * 64];
        C[0] = 7.0f;
        ddp_status st = cpu->gemm(cpu, 0, 0, 64, 64, 64, 1.0f, A, 63, B, 64, 0.0f, C, 64);
        CHECK(st == DDP_ERR_ARG && strstr(ddp_last_error(), "leading dimensions") && C[0] == 7.0f,
              "lda 63 for K 64: status %d, '%s'", (int)st, ddp_last_error());
        st = cpu->gemm(cpu, 1, 1, 64, 64, 64, 1.0f, A, 64, B, 64, 0.0f, C, 32);
        CHECK(st == DDP_ERR_ARG && C[0] == 7.0f, "ldc 32 for N 64: status %d", (int)st);
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int k = 0; k < 3; k++)
                    gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ab[k][0], ab[k][1],
                              (uint64_t)(s * 16 + (size_t)(ta * 8 + tb * 4 + k)) + 1);
    printf("worst |c - ref| / T %.3g, |c - c_openblas| / T %.3g (bound per K: (K + 3) 2^-24)\n", worst_ref, worst_blas);
    cpu->destroy(cpu);
    return check_summary();
}
