/* test_cpu_bf16.c — the CPU backend's gemm and gemm16 at --precision bf16 (backend_cpu_bf16.c, issue #24) on this
 * build's path (oneDNN's bf16 matmul, or OpenBLAS on rounded operands), the parameters' bf16 copy, set_precision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cpu/backend_cpu_bf16.h"
#include "test_data.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The AdamW step the tests take (the first step's bias corrections). */
static const ddp_adamw_args ADAMW = {.lr = 1e-2f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.999f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.01f,
                                     .bc1 = 0.1f,
                                     .bc2_sqrt = 0.0316f,
                                     .gscale = 1.0f};

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)

static ddp_backend *cpu;
static double worst_acc, worst_round; /* largest |c - ref| / T against the rounded and the unrounded operands */

static float bf16(float f) /* nearest even (finite inputs) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta,
                      uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad,
            ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = test_frand(&seed);
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
    if (!(at < 0))
        fail_msg(
            "bf16 gemm ta %d tb %d %lldx%lldx%lld alpha %g beta %g: element %lld off by %.3g of T, beyond (K+3) 2^-24",
            ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, (long long)at, bad);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], 4) != 0) fail_msg("bf16 gemm wrote C's padding");
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
    for (int i = 0; i < M * 300; i++) X[i] = test_frand(&seed);
    for (int tb = 0; tb < 2; tb++) {
        int64_t Kx = tb ? K : N, Nx = tb ? N : K; /* tb 1: X[M,K] W^T -> [M,N];  tb 0: X[M,N] W -> [M,K] */
        int64_t c0, v0, c1, v1;
        counts(&c0, &v0);
        OK(cpu->gemm(cpu, 0, tb, M, Nx, Kx, 1.0f, X, Kx, P + off, K, 0.0f, Y1, Nx));
        counts(&c1, &v1);
        if (!(c1 - c0 == fresh && v1 - v0 == 2 - fresh))
            fail_msg("%s (transb %d): %lld operands from the copy, %lld converted; want %d, %d", what, tb,
                     (long long)(c1 - c0), (long long)(v1 - v0), fresh, 2 - fresh);
        OK(cpu->gemm(cpu, 0, tb, M, Nx, Kx, 1.0f, X, Kx, W2, K, 0.0f, Y2, Nx));
        if (memcmp(Y1, Y2, (size_t)(M * Nx) * 4) != 0)
            fail_msg("%s (transb %d): the weights in the parameters give other bits than "
                     "the same weights outside them",
                     what, tb);
    }
    /* transa: the weight gradient's pattern with the weights as A: W^T X' ([K,N] [N,M]) */
    float Xt[300 * M];
    for (int i = 0; i < 300 * M; i++) Xt[i] = test_frand(&seed);
    OK(cpu->gemm(cpu, 1, 0, K, M, N, 1.0f, P + off, K, Xt, M, 0.0f, Y1, M));
    OK(cpu->gemm(cpu, 1, 0, K, M, N, 1.0f, W2, K, Xt, M, 0.0f, Y2, M));
    if (memcmp(Y1, Y2, (size_t)(K * M) * 4) != 0)
        fail_msg("%s (transa): the copy and the per-call rounding differ", what);
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
    for (int64_t i = 0; i < n; i++) h[i] = test_frand(&seed), G[i] = test_frand(&seed) * 0.1f;
    OK(cpu->upload(cpu, P, h, n * 4));
    /* before any adamw nothing is registered: converted per call */
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 0, "before adamw");
    /* adamw registers P and refreshes the copy; the update equals the fp32 backend's bit for bit */
    ddp_adamw_args a = ADAMW;
    float *p32 = malloc(n * 4), *m32 = calloc(n, 4), *v32 = calloc(n, 4);
    memcpy(p32, P, n * 4);
    ddp_backend *ref = NULL;
    OK(ddp_backend_cpu_create(1, &ref));
    OK(ref->adamw(ref, p32, G, m32, v32, n, &a));
    OK(cpu->adamw(cpu, P, G, Mo, V, n, &a));
    if (!(memcmp(P, p32, n * 4) == 0 && memcmp(Mo, m32, n * 4) == 0 && memcmp(V, v32, n * 4) == 0))
        fail_msg("adamw at bf16 (fused with the copy) differs from fp32's adamw");
    ref->destroy(ref);
    memcpy(W2, P + off, N * K * 4);
    weights_case(P, off, W2, N, K, 1, "after adamw");
    /* an upload into the parameters (a checkpoint load): the copy is stale, not used */
    for (int64_t i = 0; i < n; i++) h[i] = test_frand(&seed);
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
    for (int i = 0; i < 5 * 45; i++) X[i] = test_frand(&seed);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, P + off, K, 0.0f, Y1, N));
    memcpy(W2, P + off, N * K * 4);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, W2, K, 0.0f, Y2, N));
    if (memcmp(Y1, Y2, sizeof Y1) == 0)
        fail_msg("a write behind the backend's back went unnoticed: the copy is not what gemm reads");
    /* an operand straddling the end of the parameters is not taken from the copy */
    int64_t c0, v0, c1, v1, end = n - 100; /* registered: P[0, end) */
    OK(cpu->adamw(cpu, P, G, Mo, V, end, &a));
    counts(&c0, &v0);
    OK(cpu->gemm(cpu, 0, 1, 5, 2, K, 1.0f, X, K, P + end - K, K, 0.0f, Y1, 2));
    counts(&c1, &v1);
    if (!(c1 == c0 && v1 - v0 == 2)) fail_msg("an operand reaching past the parameters was read from the copy");
    /* released parameters are forgotten: a buffer allocated after (possibly at the same address) is converted */
    cpu->release(cpu, P);
    float *P2 = NULL;
    OK(cpu->alloc(cpu, (void **)&P2, (size_t)n * 4));
    OK(cpu->upload(cpu, P2, h, (size_t)n * 4));
    counts(&c0, &v0);
    OK(cpu->gemm(cpu, 0, 1, 5, N, K, 1.0f, X, K, P2 + off, K, 0.0f, Y1, N));
    counts(&c1, &v1);
    if (!(c1 == c0 && v1 - v0 == 2)) fail_msg("after release, an operand in a new buffer was read from the old copy");
    P = P2;
    cpu->release(cpu, P), cpu->release(cpu, G), cpu->release(cpu, Mo), cpu->release(cpu, V);
    free(h), free(W2), free(p32), free(m32), free(v32);
}

/* ---------------------------------------------------------------- gemm16: bf16 operands */
/* the bf16 bits of x[0, n) rounded by this file's bf16() (nearest even); NaN (the padding) as a quiet NaN */
static void to16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = bf16(x[i]);
        uint32_t u;
        memcpy(&u, &f, 4);
        y[i] = isnan(x[i]) ? 0x7fc0 : (uint16_t)(u >> 16);
    }
}

/* gemm16 with A (a16) and/or B (b16) as bf16 equals gemm on their fp32 sources, bit for bit, C's padding included; the
 * bf16 operands lie one element past an allocation's start (2-byte, not 4-byte aligned) with odd leading dimensions
 * whose padding holds NaN. The counters: an fp32 operand converted per call as by gemm; a bf16 one read in place on
 * oneDNN's path (counted nowhere: no copy), widened on OpenBLAS's (counted converted). */
static void gemm16_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta, int a16,
                        int b16, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N, lda = ac + pad, ldb = bc + pad,
            ldc = N + pad;
    size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4), *Cr = malloc(nc * 4);
    uint16_t *A16 = malloc((na + 1) * 2), *B16 = malloc((nb + 1) * 2);
    for (size_t i = 0; i < na; i++) A[i] = (int64_t)(i % (size_t)lda) < ac ? test_frand(&seed) : NAN;
    for (size_t i = 0; i < nb; i++) B[i] = (int64_t)(i % (size_t)ldb) < bc ? test_frand(&seed) * 4.0f : NAN;
    for (size_t i = 0; i < nc; i++) C0[i] = test_frand(&seed);
    to16(A, A16 + 1, na), to16(B, B16 + 1, nb);
    memcpy(Cr, C0, nc * 4), memcpy(C, C0, nc * 4);
    OK(cpu->gemm(cpu, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cr, ldc));
    int64_t c0, v0, c1, v1;
    counts(&c0, &v0);
    OK(cpu->gemm16(cpu, ta, tb, M, N, K, alpha, a16 ? (const void *)(A16 + 1) : A, a16, lda,
                   b16 ? (const void *)(B16 + 1) : B, b16, ldb, beta, C, ldc));
    counts(&c1, &v1);
    int n16 = a16 + b16, want = 2 - n16 + (ddp_cpu_bf16_onednn() ? 0 : n16);
    if (!(c1 == c0 && v1 - v0 == want))
        fail_msg("gemm16 (a16 %d b16 %d): %lld operands from the copy, %lld converted; want 0, %d", a16, b16,
                 (long long)(c1 - c0), (long long)(v1 - v0), want);
    size_t at = 0;
    while (at < nc && !memcmp(&C[at], &Cr[at], 4)) at++;
    if (at != nc)
        fail_msg(
            "gemm16 ta %d tb %d %lldx%lldx%lld lda %lld ldb %lld alpha %g beta %g a16 %d b16 %d: element %zu is %.9g, "
            "gemm on the fp32 source gives %.9g",
            ta, tb, (long long)M, (long long)N, (long long)K, (long long)lda, (long long)ldb, alpha, beta, a16, b16, at,
            at < nc ? C[at] : 0.0f, at < nc ? Cr[at] : 0.0f);
    free(A), free(B), free(C0), free(C), free(Cr), free(A16), free(B16);
}

/* gemm16 with the fp32 operand inside the parameters (read from their bf16 copy) and the other in bf16: gemm's bits,
 * the copy used. Then the path of an activation: layernorm_fwd16's output through gemm16 gives the bits of
 * layernorm_fwd's fp32 output through gemm (stored rounded = rounded at GEMM time). */
static void gemm16_params(void)
{
    const int64_t n = 4001, off = 97, N = 37, K = 29, M = 23; /* W: N x K at off inside the n parameters */
    float *P = NULL, *G = NULL, *Mo = NULL, *V = NULL;
    OK(cpu->alloc(cpu, (void **)&P, n * 4));
    OK(cpu->alloc(cpu, (void **)&G, n * 4));
    OK(cpu->alloc(cpu, (void **)&Mo, n * 4));
    OK(cpu->alloc(cpu, (void **)&V, n * 4));
    float *h = malloc(n * 4), X[M * 64], Y1[64 * 64], Y2[64 * 64];
    uint16_t X16[M * 64];
    uint64_t seed = 8;
    for (int64_t i = 0; i < n; i++) h[i] = test_frand(&seed), G[i] = test_frand(&seed) * 0.1f;
    OK(cpu->upload(cpu, P, h, n * 4));
    ddp_adamw_args a = ADAMW;
    OK(cpu->adamw(cpu, P, G, Mo, V, n, &a)); /* registers P: its bf16 copy is fresh */
    for (int i = 0; i < M * 64; i++) X[i] = test_frand(&seed);
    to16(X, X16, M * 64);
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 2.0f}};
    for (int tb = 0; tb < 2; tb++)
        for (int k = 0; k < 3; k++) {
            /* tb 1: X[M,K] W^T -> [M,N] (forward);  tb 0: X[M,N] W -> [M,K] (the input gradient's pattern) */
            int64_t Kx = tb ? K : N, Nx = tb ? N : K, ldx = Kx + 3;
            for (int i = 0; i < 64 * 64; i++) Y1[i] = Y2[i] = (float)(i % 7) - 3.0f;
            OK(cpu->gemm(cpu, 0, tb, M, Nx, Kx, ab[k][0], X, ldx, P + off, K, ab[k][1], Y1, Nx + 1));
            int64_t c0, v0, c1, v1;
            counts(&c0, &v0);
            OK(cpu->gemm16(cpu, 0, tb, M, Nx, Kx, ab[k][0], X16, 1, ldx, P + off, 0, K, ab[k][1], Y2, Nx + 1));
            counts(&c1, &v1);
            if (!(c1 - c0 == 1))
                fail_msg("gemm16 with B inside the parameters (transb %d) did not read their copy", tb);
            if (memcmp(Y1, Y2, sizeof Y1) != 0)
                fail_msg("gemm16 (bf16 A, B in the parameters' copy, transb %d, alpha %g beta %g) "
                         "differs from gemm",
                         tb, ab[k][0], ab[k][1]);
            /* and the weights as A (transa: W^T [K,N] X16 [N, .]) */
            OK(cpu->gemm(cpu, 1, 0, K, 5, N, ab[k][0], P + off, K, X, 7, ab[k][1], Y1, 5));
            OK(cpu->gemm16(cpu, 1, 0, K, 5, N, ab[k][0], P + off, 0, K, X16, 1, 7, ab[k][1], Y2, 5));
            if (memcmp(Y1, Y2, sizeof Y1) != 0)
                fail_msg("gemm16 (A in the parameters' copy, bf16 B, alpha %g beta %g) differs "
                         "from gemm",
                         ab[k][0], ab[k][1]);
        }
    /* layernorm_fwd16 -> gemm16 == layernorm_fwd -> gemm */
    const ddp_enc_ops *E = cpu->enc;
    float y[M * K], lw[K], lb[K], mu[M], rs[M];
    ddp_bf16 y16[M * K];
    for (int64_t c = 0; c < K; c++) lw[c] = 1.0f + 0.3f * test_frand(&seed), lb[c] = 0.2f * test_frand(&seed);
    OK(E->layernorm_fwd(cpu, X, lw, lb, y, mu, rs, M, K));
    OK(E->layernorm_fwd16(cpu, X, lw, lb, y16, mu, rs, M, K));
    OK(cpu->gemm(cpu, 0, 1, M, N, K, 1.0f, y, K, P + off, K, 0.0f, Y1, N));
    OK(cpu->gemm16(cpu, 0, 1, M, N, K, 1.0f, y16, 1, K, P + off, 0, K, 0.0f, Y2, N));
    if (memcmp(Y1, Y2, (size_t)(M * N) * 4) != 0)
        fail_msg("layernorm_fwd16 then gemm16 differs from layernorm_fwd then gemm");
    /* K = 0: C = beta C, nothing read from A or B (NULL) */
    float C2[6] = {1, 2, 3, 4, 5, 6};
    OK(cpu->gemm16(cpu, 0, 0, 2, 3, 0, 1.0f, NULL, 1, 1, NULL, 1, 3, 0.5f, C2, 3));
    if (!(C2[0] == 0.5f && C2[5] == 3.0f)) fail_msg("gemm16 with K = 0: C[0] %g, C[5] %g; want beta C", C2[0], C2[5]);
    cpu->release(cpu, P), cpu->release(cpu, G), cpu->release(cpu, Mo), cpu->release(cpu, V);
    free(h);
}

/* at fp32 gemm16 is refused with one line, C untouched */
static void gemm16_refused(const char *when)
{
    float A[4] = {1, 2, 3, 4}, C[4] = {9, 9, 9, 9};
    uint16_t A16[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    if (cpu->gemm16 == NULL) fail_msg("the CPU backend has no gemm16");
    ddp_status st = cpu->gemm16(cpu, 0, 0, 2, 2, 2, 1.0f, A16, 1, 2, A, 0, 2, 0.0f, C, 2);
    const char *e = ddp_last_error();
    if (!(st == DDP_ERR_ARG && strstr(e, "gemm16") && strstr(e, "bf16") && !strchr(e, '\n')))
        fail_msg("gemm16 at fp32 (%s): status %d, '%s'", when, (int)st, e);
    if (!(C[0] == 9 && C[3] == 9)) fail_msg("gemm16 at fp32 (%s) wrote C", when);
}

/* The path: oneDNN's bf16 matmul where built with it, on AVX-512 and not turned off (MPIDDP_CPU_ONEDNN=0), with a
 * notice where oneDNN emulates bf16; else OpenBLAS on rounded operands, with a notice. */
static void test_path(void **state)
{
    (void)state;
    const char *env = getenv("MPIDDP_CPU_ONEDNN");
    int want_onednn = !(env && !strcmp(env, "0"));
    const char *note = ddp_cpu_bf16_notice();
    printf("path: %s; notice: %s\n", ddp_cpu_bf16_onednn() ? "oneDNN" : "OpenBLAS on rounded operands",
           note ? note : "(none)");
#ifdef DDP_TEST_HAVE_DNNL
    const char *isa = getenv(
        "ONEDNN_MAX_CPU_ISA"); /* oneDNN's bf16 matmul needs AVX-512 (oneDNN may be capped below) */
    if (!isa || !*isa) isa = getenv("DNNL_MAX_CPU_ISA"); /* the older name; oneDNN reads ONEDNN_ first */
    want_onednn = want_onednn && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  (!isa || !strncmp(isa, "AVX512", 6) || !strcmp(isa, "ALL"));
    if (want_onednn && isa && !strcmp(isa, "AVX512_CORE") && /* no bf16 units as far as oneDNN knows: one notice */
        !(note && strstr(note, "no bf16 units") && strstr(note, "emulates")))
        fail_msg("emulated bf16 without its notice: %s", note ? note : "(none)");
    if (ddp_cpu_bf16_onednn() != want_onednn)
        fail_msg("oneDNN path %d, want %d (MPIDDP_CPU_ONEDNN=%s)", ddp_cpu_bf16_onednn(), want_onednn, env ? env : "");
#else
    (void)want_onednn;
    if (!(!ddp_cpu_bf16_onednn() && note))
        fail_msg("a build without oneDNN must take the OpenBLAS path, with a notice");
#endif
    if (!(ddp_cpu_bf16_onednn() || note)) fail_msg("the OpenBLAS path without a notice");
}

/* set_precision: tf32 refused with one line; the bf16 state only at bf16; gemm16 refused at fp32 */
static void test_set_precision(void **state)
{
    (void)state;
    if (!(ddp_backend_set_precision(cpu, DDP_PRECISION_TF32) == DDP_ERR_ARG &&
          !strcmp(ddp_last_error(), "cfg.precision = DDP_PRECISION_TF32 needs model.device = DDP_DEVICE_CUDA (the cpu "
                                    "backend computes in fp32 or bf16)")))
        fail_msg("cpu tf32 (C API): %s", ddp_last_error());
    cpu->cli_names = 1; /* the CLI's ctx: its options */
    if (!(ddp_backend_set_precision(cpu, DDP_PRECISION_TF32) == DDP_ERR_ARG &&
          !strcmp(ddp_last_error(), "--precision tf32 needs --device cuda (the cpu backend computes in fp32 or bf16)")))
        fail_msg("cpu tf32: %s", ddp_last_error());
    cpu->cli_names = 0;
    if (ddp_backend_cpu_bf16(cpu) != NULL) fail_msg("bf16 state at fp32");
    gemm16_refused("a new backend");
    OK(ddp_backend_set_precision(cpu, DDP_PRECISION_BF16));
    if (ddp_backend_cpu_bf16(cpu) == NULL) fail_msg("no bf16 state at bf16");
}

/* Every shape (odd ones, K from 1 to 1000) with the four transpositions, leading dimensions wider than the rows
 * (the padding holds NaN, so a stride mistake shows) and (alpha, beta) = (1, 0), (1, 1) and (0.75, -0.5),
 * against a double reference of the operands rounded to bf16 (nearest even) on the host. The products of two
 * bf16 values are exact in fp32, so only the fp32 accumulation errs: per element, with S = |alpha| sum|a_k b_k|
 * over the rounded operands and T = S + |beta c0|, |c - ref| <= (K + 3) 2^-24 (1 + 2^-24)^2 T (Higham's
 * gamma_{K+3}: K products summed in any order, alpha, beta c0 and the final addition). C's padding is never
 * written. And the rounding shows: against the unrounded operands the worst error exceeds 2^-12 T. */
static void test_gemm(void **state)
{
    (void)state;
    static const int64_t shapes[][4] = {
        {203, 210, 67, 0}, {64, 48, 1000, 3}, {1, 1, 1, 0}, {33, 17, 129, 5}, {7, 300, 5, 1}};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, -0.5f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 12; v++) { /* transposes and alpha/beta, in that order */
            int ta = v / 6, tb = v / 3 % 2, k = v % 3;
            gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ab[k][0], ab[k][1],
                      17 + s * 16 + ta * 8 + tb * 4 + k);
        }
    printf(
        "worst |c - ref| / T: %.3g of the rounded operands' double result (bound (K+3) 2^-24), %.3g of the unrounded\n",
        worst_acc, worst_round);
    if (!(worst_round > 0x1p-12))
        fail_msg("bf16 (%.3g against the unrounded operands) looks like fp32: the operands are not rounded",
                 worst_round);
}

/* The parameters' bf16 copy (refreshed by adamw): a gemm reading weights inside the parameters gives the SAME bits
 * as the same gemm on an equal buffer outside them (rounded per call), with the counters showing which path ran;
 * after an upload or a zero into the parameters the copy is not used stale (the result follows the new values),
 * while a write behind the backend's back is seen to be stale (so the check can fail). */
static void test_weight_copy(void **state)
{
    (void)state;
    weight_copy();
}

/* Gemm16 (bf16 operands): for the four transpositions, (a16, b16) = (1, 0), (0, 1), (1, 1), odd leading dimensions
 * (NaN padding), bf16 operands at 2-byte-aligned addresses and (alpha, beta) = (1, 0), (1, 1), (0.5, 2): the bits
 * of gemm on the fp32 values the bf16 were rounded from (by this file's rounding), C's padding untouched; on
 * oneDNN's path a bf16 operand is neither copied nor converted; an fp32 operand inside the parameters is read from
 * their bf16 copy; layernorm_fwd16's output through gemm16 gives layernorm_fwd's through gemm. At fp32 gemm16 is
 * refused (DDP_ERR_ARG, one line). */
static void test_gemm16(void **state)
{
    (void)state;
    static const int64_t shapes16[][4] = {
        {33, 17, 129, 5}, {64, 48, 1000, 3}, {1, 1, 1, 1}, {7, 300, 5, 1}, {203, 210, 67, 7}};
    static const float ab16[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 2.0f}};
    static const int f16[][2] = {{1, 0}, {0, 1}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes16 / sizeof shapes16[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 3; k++)
                for (int f = 0; f < 3; f++)
                    gemm16_case(t >> 1, t & 1, shapes16[s][0], shapes16[s][1], shapes16[s][2], shapes16[s][3],
                                ab16[k][0], ab16[k][1], f16[f][0], f16[f][1],
                                1000 + s * 64 + (uint64_t)(t * 9 + k * 3 + f));
}

static void test_gemm16_params(void **state)
{
    (void)state;
    gemm16_params();
}

/* back to fp32: no bf16 state, gemm16 refused, sgemm's bits again */
static void test_back_to_fp32(void **state)
{
    (void)state;
    OK(ddp_backend_set_precision(cpu, DDP_PRECISION_FP32));
    if (ddp_backend_cpu_bf16(cpu) != NULL) fail_msg("bf16 state kept at fp32");
    gemm16_refused("back at fp32");
    float A[6] = {1.0f + 0x1p-12f, 2, 3, 4, 5, 6}, B[6] = {1, 1, 1, 1, 1, 1}, C[4];
    OK(cpu->gemm(cpu, 0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2));
    if (!(C[0] == 6.0f + 0x1p-12f)) fail_msg("fp32 after bf16 rounds: %.9g", C[0]);
}

static int setup(void **state)
{
    (void)state;
    OK(ddp_backend_cpu_create(1, &cpu));
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path),         cmocka_unit_test(test_set_precision), cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_weight_copy),  cmocka_unit_test(test_gemm16),        cmocka_unit_test(test_gemm16_params),
        cmocka_unit_test(test_back_to_fp32),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    if (cpu) cpu->destroy(cpu);
    return rc;
}
