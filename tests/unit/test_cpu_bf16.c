/* test_cpu_bf16.c — the CPU backend's gemm at --precision bf16 (backend_cpu_bf16.c, issue #24), on whichever path
 * this build and machine take: oneDNN's bf16 matmul, or with MPIDDP_CPU_ONEDNN=0 (the second CTest entry) OpenBLAS
 * on operands rounded to bf16. Checks:
 *  - every shape (odd ones, K from 1 to 1000) with the four transpositions, leading dimensions wider than the rows
 *    (the padding holds NaN, so a stride mistake shows) and (alpha, beta) = (1, 0), (1, 1) and (0.75, -0.5),
 *    against a double reference of the operands rounded to bf16 (nearest even) on the host. The products of two
 *    bf16 values are exact in fp32, so only the fp32 accumulation errs: per element, with S = |alpha| sum|a_k b_k|
 *    over the rounded operands and T = S + |beta c0|, |c - ref| <= (K + 3) 2^-24 (1 + 2^-24)^2 T (Higham's
 *    gamma_{K+3}: K products summed in any order, alpha, beta c0 and the final addition). C's padding is never
 *    written. And the rounding shows: against the unrounded operands the worst error exceeds 2^-12 T.
 *  - the parameters' bf16 copy (refreshed by adamw): a gemm reading weights inside the parameters gives the SAME bits
 *    as the same gemm on an equal buffer outside them (rounded per call), with the counters showing which path ran;
 *    after an upload or a zero into the parameters the copy is not used stale (the result follows the new values),
 *    while a write behind the backend's back is seen to be stale (so the check can fail).
 *  - set_precision: tf32 refused with one line, fp32 again gives sgemm's bits. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/backend_cpu_bf16.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) CHECK((call) == DDP_OK, "%s: %s", #call, ddp_last_error())

static ddp_backend *cpu;
static double worst_acc, worst_round; /* largest |c - ref| / T against the rounded and the unrounded operands */

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static float bf16(float f) /* nearest even (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = frand(&seed);
    memcpy(C, C0, nc * 4);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    int64_t at = -1;
    double bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = 0, raw = 0, S = 0, Sr = 0;
            for (int64_t k = 0; k < K; k++) {
                float a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                double p = (double)bf16(a) * bf16(b);
                ref += p, S += fabs(p), raw += (double)a * b, Sr += fabs((double)a * b);
            }
            double c0 = C0[i * ldc + j], T = fabs(alpha) * S + fabs(beta * c0), c = C[i * ldc + j];
            ref = alpha * ref + beta * c0, raw = alpha * raw + beta * c0;
            double err = fabs(c - ref), tol = (K + 3) * 0x1p-24 * (1 + 0x1p-24) * (1 + 0x1p-24) * T;
            if (!(err <= tol) && at < 0) at = i * ldc + j, bad = err / (T + 1e-30);
            if (T > 0 && err / T > worst_acc) worst_acc = err / T;
            double Tr = fabs(alpha) * Sr + fabs(beta * c0);
            if (Tr > 0 && fabs(c - raw) / Tr > worst_round) worst_round = fabs(c - raw) / Tr;
        }
    CHECK(at < 0, "bf16 gemm ta %d tb %d %lldx%lldx%lld alpha %g beta %g: element %lld off by %.3g of T, beyond (K+3) 2^-24",
          ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, (long long)at, bad);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            CHECK(memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4) == 0, "bf16 gemm wrote C's padding");
    free(A), free(B), free(C0), free(C);
}

static void counts(int64_t *copy, int64_t *conv) { ddp_cpu_bf16_counts(ddp_backend_cpu_bf16(cpu), copy, conv); }

/* y = x W^T (the forward of a linear layer, W [N, K] at offset off in P) and dx = dy W (transb 0), with W read from
 * P and from an equal buffer W2 outside the parameters: the same bits, and P's read from the copy when fresh. */
static void weights_case(float *P, int64_t off, const float *W2, int64_t N, int64_t K, int fresh, const char *what)
{
    enum { M = 37 };
    float X[M * 300], Y1[M * 300], Y2[M * 300];
    uint64_t seed = 99;
    for (int i = 0; i < M * 300; i++) X[i] = frand(&seed);
    for (int tb = 0; tb < 2; tb++) {
        int64_t Kx = tb ? K : N, Nx = tb ? N : K; /* tb 1: X[M,K] W^T -> [M,N];  tb 0: X[M,N] W -> [M,K] */
        int64_t c0, v0, c1, v1;
        counts(&c0, &v0);
        OK(cpu->gemm(cpu, 0, tb, M, Nx, Kx, 1.0f, X, Kx, P + off, K, 0.0f, Y1, Nx));
        counts(&c1, &v1);
        CHECK(c1 - c0 == fresh && v1 - v0 == 2 - fresh, "%s (transb %d): %lld operands from the copy, %lld converted; want %d, %d",
              what, tb, (long long)(c1 - c0), (long long)(v1 - v0), fresh, 2 - fresh);
        OK(cpu->gemm(cpu, 0, tb, M, Nx, Kx, 1.0f, X, Kx, W2, K, 0.0f, Y2, Nx));
        CHECK(memcmp(Y1, Y2, (size_t)(M * Nx) * 4) == 0, "%s (transb %d): the weights in the parameters give other bits than "
              "the same weights outside them", what, tb);
    }
    /* transa: the weight gradient's pattern with the weights as A: W^T X' ([K,N] [N,M]) */
    float Xt[300 * M];
    for (int i = 0; i < 300 * M; i++) Xt[i] = frand(&seed);
    OK(cpu->gemm(cpu, 1, 0, K, M, N, 1.0f, P + off, K, Xt, M, 0.0f, Y1, M));
    OK(cpu->gemm(cpu, 1, 0, K, M, N, 1.0f, W2, K, Xt, M, 0.0f, Y2, M));
    CHECK(memcmp(Y1, Y2, (size_t)(K * M) * 4) == 0, "%s (transa): the copy and the per-call rounding differ", what);
}

static void weight_copy(void)
{
    const int64_t n = 5003, off = 211, N = 67, K = 45; /* W: N x K at off inside the n parameters */
    float *P = NULL, *G = NULL, *Mo = NULL, *V = NULL;
    OK(cpu->alloc(cpu, (void **)&P, n * 4));
    OK(cpu->alloc(cpu, (void **)&G, n * 4));
    OK(cpu->alloc(cpu, (void **)&Mo, n * 4));
    OK(cpu->alloc(cpu, (void **)&V, n * 4));
    float *h = malloc(n * 4), *W2 = malloc(N * K * 4);
    uint64_t seed = 5;
    for (int64_t i = 0; i < n; i++) h[i] = frand(&seed), G[i] = frand(&seed) * 0.1f;
    OK(cpu->upload(cpu, P, h, n * 4));
    /* before any adamw nothing is registered: converted per call */
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 0, "before adamw");
    /* adamw registers P and refreshes the copy; the update equals the fp32 backend's bit for bit */
    ddp_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .bc1 = 0.1f,
                        .bc2_sqrt = 0.0316f, .gscale = 1.0f};
    float *p32 = malloc(n * 4), *m32 = calloc(n, 4), *v32 = calloc(n, 4);
    memcpy(p32, P, n * 4);
    ddp_backend *ref = NULL;
    OK(ddp_backend_cpu_create(1, &ref));
    OK(ref->adamw(ref, p32, G, m32, v32, n, &a));
    OK(cpu->adamw(cpu, P, G, Mo, V, n, &a));
    CHECK(memcmp(P, p32, n * 4) == 0 && memcmp(Mo, m32, n * 4) == 0 && memcmp(V, v32, n * 4) == 0,
          "adamw at bf16 (fused with the copy) differs from fp32's adamw");
    ref->destroy(ref);
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 1, "after adamw");
    /* an upload into the parameters (a checkpoint load): the copy is stale, not used */
    for (int64_t i = 0; i < n; i++) h[i] = frand(&seed);
    OK(cpu->upload(cpu, P + 100, h, (n - 100) * 4));
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 0, "after an upload");
    OK(cpu->adamw(cpu, P, G, Mo, V, n, &a));
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 1, "after the next adamw");
    /* zero into the parameters: stale too */
    OK(cpu->zero(cpu, P + off + 7, 64 * 4));
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 0, "after a zero");
    /* a write the backend does not see is read stale: the copy really is what gemm reads (the checks above can fail) */
    OK(cpu->adamw(cpu, P, G, Mo, V, n, &a));
    for (int64_t i = 0; i < N * K; i++) P[off + i] = -P[off + i];
    float X[5 * 45], Y1[5 * 67], Y2[5 * 67];
    for (int i = 0; i < 5 * 45; i++) X[i] = frand(&seed);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, P + off, K, 0.0f, Y1, N));
    memcpy(W2, P + off, N * K * 4);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, W2, K, 0.0f, Y2, N));
    CHECK(memcmp(Y1, Y2, sizeof Y1) != 0, "a write behind the backend's back went unnoticed: the copy is not what gemm reads");
    /* an operand straddling the end of the parameters is not taken from the copy */
    int64_t c0, v0, c1, v1, end = n - 100; /* registered: P[0, end) */
    OK(cpu->adamw(cpu, P, G, Mo, V, end, &a));
    counts(&c0, &v0);
    OK(cpu->gemm(cpu, 0, 1, 5, 2, K, 1.0f, X, K, P + end - K, K, 0.0f, Y1, 2));
    counts(&c1, &v1);
    CHECK(c1 == c0 && v1 - v0 == 2, "an operand reaching past the parameters was read from the copy");
    /* released parameters are forgotten: a buffer allocated after (possibly at the same address) is converted */
    cpu->release(cpu, P);
    float *P2 = NULL;
    OK(cpu->alloc(cpu, (void **)&P2, (size_t)n * 4));
    OK(cpu->upload(cpu, P2, h, (size_t)n * 4));
    counts(&c0, &v0);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, P2 + off, K, 0.0f, Y1, N));
    counts(&c1, &v1);
    CHECK(c1 == c0 && v1 - v0 == 2, "after release, an operand in a new buffer was read from the old copy");
    P = P2;
    cpu->release(cpu, P), cpu->release(cpu, G), cpu->release(cpu, Mo), cpu->release(cpu, V);
    free(h), free(W2), free(p32), free(m32), free(v32);
}

int main(void)
{
    const char *env = getenv("MPIDDP_CPU_ONEDNN");
    int want_onednn = !(env && !strcmp(env, "0"));
    const char *note = ddp_cpu_bf16_notice();
    printf("path: %s; notice: %s\n", ddp_cpu_bf16_onednn() ? "oneDNN" : "OpenBLAS on rounded operands", note ? note : "(none)");
#ifdef DDP_TEST_HAVE_DNNL
    const char *isa = getenv("DNNL_MAX_CPU_ISA"); /* oneDNN's bf16 matmul needs AVX-512 (oneDNN may be capped below) */
    want_onednn = want_onednn && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && (!isa || !strncmp(isa, "AVX512", 6) || !strcmp(isa, "ALL"));
    if (want_onednn && isa && !strcmp(isa, "AVX512_CORE")) /* no bf16 units as far as oneDNN knows: one notice */
        CHECK(note && strstr(note, "no bf16 units") && strstr(note, "emulates"), "emulated bf16 without its notice: %s",
              note ? note : "(none)");
    CHECK(ddp_cpu_bf16_onednn() == want_onednn, "oneDNN path %d, want %d (MPIDDP_CPU_ONEDNN=%s)", ddp_cpu_bf16_onednn(),
          want_onednn, env ? env : "");
#else
    (void)want_onednn;
    CHECK(!ddp_cpu_bf16_onednn() && note, "a build without oneDNN must take the OpenBLAS path, with a notice");
#endif
    CHECK(ddp_cpu_bf16_onednn() || note, "the OpenBLAS path without a notice");
    OK(ddp_backend_cpu_create(1, &cpu));
    if (failures) return 1;
    CHECK(ddp_backend_set_precision(cpu, DDP_PRECISION_TF32) == DDP_ERR_ARG &&
              !strcmp(ddp_last_error(), "--precision tf32 needs --device cuda (the cpu backend computes in fp32 or bf16)"),
          "cpu tf32: %s", ddp_last_error());
    CHECK(ddp_backend_cpu_bf16(cpu) == NULL, "bf16 state at fp32");
    OK(ddp_backend_set_precision(cpu, DDP_PRECISION_BF16));
    CHECK(ddp_backend_cpu_bf16(cpu) != NULL, "no bf16 state at bf16");
    static const int64_t shapes[][4] = {{203, 210, 67, 0}, {64, 48, 1000, 3}, {1, 1, 1, 0}, {33, 17, 129, 5}, {7, 300, 5, 1}};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -0.5f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int k = 0; k < 3; k++)
                    gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ab[k][0], ab[k][1],
                              17 + s * 16 + ta * 8 + tb * 4 + k);
    printf("worst |c - ref| / T: %.3g of the rounded operands' double result (bound (K+3) 2^-24), %.3g of the unrounded\n",
           worst_acc, worst_round);
    CHECK(worst_round > 0x1p-12, "bf16 (%.3g against the unrounded operands) looks like fp32: the operands are not rounded", worst_round);
    weight_copy();
    /* back to fp32: sgemm's bits again */
    OK(ddp_backend_set_precision(cpu, DDP_PRECISION_FP32));
    CHECK(ddp_backend_cpu_bf16(cpu) == NULL, "bf16 state kept at fp32");
    float A[6] = {1.0f + 0x1p-12f, 2, 3, 4, 5, 6}, B[6] = {1, 1, 1, 1, 1, 1}, C[4];
    OK(cpu->gemm(cpu, 0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2));
    CHECK(C[0] == 6.0f + 0x1p-12f, "fp32 after bf16 rounds: %.9g", C[0]);
    cpu->destroy(cpu);
    return check_summary();
}
